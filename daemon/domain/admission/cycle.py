"""One call of the engine: Kueue's cycle (`scheduler.schedule()`), run as many times as Kueue's cycles at the same
instant would run, in numbered phases:

1. Routing (`routing`): unrouted workloads, HoldAndDrain drains, stopped and inactive queues; the other
   ClusterQueues' walks.
2. The ledger (`ledger`): one snapshot of the quota tree for the call; waiting preemptors keep the victims they
   claimed in an earlier call (`Cycle.keep_claims`).
3. Passes, each one Kueue cycle (tests/reference/kueue_model.py is the reference):
   a. every queue not done nominates its head (`nominate`, over `walk` and `evaluate`);
   b. the pass's entries are ordered as Kueue's classic iterator does (lower borrowing level first, then
      priority, then FIFO, then key), or with fair sharing by Kueue's DRS tournament per quota tree, re-run after
      every processed entry;
   c. each entry is processed against the snapshot (`process`), each admission's usage counted at once;
   d. the pass ends (`Cycle.end_pass`): a preemptor without candidates' hold lives in its pass only, as Kueue's
      resourcesToReserve lives in its cycle's snapshot; a StrictFIFO one is its queue's head in the next pass too
      (Kueue requeues it at once), and holds again at its place in that pass's order, as long as another queue
      of its tree may still act.
   Passes repeat until one offers nothing, so one call admits what Kueue's cycles at that instant would, in
   Kueue's order (GOING BEYOND KUEUE: Kueue runs a cycle every 100 ms at most; these run at once). A pass that
   preempts is the call's last: Kueue's next cycle takes a fresh snapshot in which the victims leave, so the call
   ends and asks for the next (`AdmissionEngine.deferred`).
4. Memory (`memo`): what the call found that the next call may skip.
"""

from __future__ import annotations

from daemon.domain.admission.decisions import Decisions
from daemon.domain.admission.evaluate import Evaluator
from daemon.domain.admission.ledger import Ledger
from daemon.domain.admission.memo import InadmissibleMemo
from daemon.domain.admission.nominate import Nominator
from daemon.domain.admission.optimisations import Optimisations
from daemon.domain.admission.process import Processor
from daemon.domain.admission.routing import Router
from daemon.domain.admission.walk import Entry, Queue
from daemon.domain.config import EngineConfig
from daemon.domain.events import Event
from daemon.domain.fairsharing import tournament
from daemon.domain.flavors import Mode, can_be_partially_admitted
from daemon.domain.model import FlavorResource, Millis
from daemon.domain.quota import QuotaTree
from daemon.domain.view import AdmittedWorkload, ClusterView, PendingWorkload, is_sticky, queue_key


class Cycle:
    __slots__ = ("config", "evaluator", "ledger", "nominator", "out", "processor", "router", "tree", "view")

    def __init__(
        self,
        view: ClusterView,
        now: Millis,
        config: EngineConfig,
        tree: QuotaTree,
        usage_cache: dict[str, tuple[object, dict[FlavorResource, int]]],
        memo: InadmissibleMemo | None,
        opt: Optimisations,
    ) -> None:
        self.view = view
        self.config = config
        self.tree = tree
        self.out = Decisions(now)
        self.ledger = Ledger(view, tree, usage_cache)
        self.router = Router(view, config, opt, self.ledger, self.out, memo)
        self.evaluator = Evaluator(view, now, config, self.ledger, memo)
        self.processor = Processor(view, config, self.ledger, self.out, self.router, self.evaluator)
        self.nominator = Nominator(now, config, opt, self.ledger, self.router, self.evaluator, self.processor)

    @property
    def deferred(self) -> bool:
        """Whether the call left work for the next one: it preempted (so it ended there), or with fair sharing a
        queue's preemptor waits for the next cycle (`Kind.DEFERRED`)."""
        return self.processor.preempted or self.nominator.deferred

    @property
    def held_back(self) -> bool:
        """Whether some workload stopped at this instant was held back until the next (`evicted_now`)."""
        return self.nominator.held_back

    def run(self) -> list[Event]:
        # 1. routing
        self.router.unrouted()
        self.router.drain()
        queues = self.router.queues()
        # 2. the ledger: claims kept from earlier calls
        self.keep_claims(queues)
        # 3. passes
        ledger, nominator, processor = self.ledger, self.nominator, self.processor
        open_queues = queues  # those not done yet (a queue once done stays done for the call), nor parked
        parked: list[Queue] = []  # queues whose head is a borrower skipped in an earlier pass (`Processor.own_first`)
        parked_in: dict[str, int] = {}  # per tree, how many of them
        while True:
            entries: list[Entry] = []
            stepped = False
            still: list[Queue] = []
            for q in open_queues:
                if q.parked:
                    parked.append(q)
                    parked_in[q.node.tree] = parked_in.get(q.node.tree, 0) + 1
                elif not q.done:
                    still.append(q)
            open_queues = still
            ledger.begin_pass()
            live = dict(parked_in)  # a parked queue is live and acting in its tree: it offers its head later
            acting = dict(parked_in)  # per tree, its open queues other than StrictFIFO holders
            for q in open_queues:
                live[q.node.tree] = live.get(q.node.tree, 0) + 1
                if not q.holder:
                    acting[q.node.tree] = acting.get(q.node.tree, 0) + 1
            for q in open_queues:
                if q.holder and not acting.get(q.node.tree):
                    # Its hold keeps nobody out any more: no other queue of its tree offers anything in this call.
                    q.done = True
            nominator.live = live
            before = self._progress(open_queues)
            # 3a. nominate: every queue offers its head (`Manager.Heads`); a head that cannot be admitted is
            # stepped over, and its queue offers the next one in the next pass. The parked queues are nominated
            # only once this pass's entries that do not borrow were processed, and only if none of their tree
            # acted (3c, `_own_then_parked`).
            for q in open_queues:
                if q.done:
                    continue
                entry = nominator.next_entry(q)
                if entry is not None:
                    entries.append(entry)
                elif not q.done:
                    stepped = True
            if not entries and not stepped and not parked:
                break
            # 3b, 3c. order and process
            unparked: list[Queue] = []
            if self.config.fair_sharing:
                self._process_fairly(entries)
            else:
                entries.sort(key=Entry.order)  # makeClassicalIterator
                if parked:
                    entries, unparked = self._own_then_parked(entries, parked)
                    if unparked:
                        parked = [q for q in parked if q.parked]
                        for q in unparked:
                            parked_in[q.node.tree] -= 1
                for e in entries:
                    processor.process(e)
            if processor.preempted:
                # Kueue's next cycle takes a fresh snapshot, in which the victims are gone once evicted: the call
                # ends here, and asks the caller for the next one once its decisions are in the fold.
                break
            # 3d.
            self.end_pass()
            if unparked:
                open_queues = [*open_queues, *unparked]  # a change in itself: the next pass follows
            elif self._progress(open_queues) == before:
                # Nothing moved but holds that came and went (a StrictFIFO head's, which the entries after it could
                # not get past): the next pass would be this one again. Kueue's cycles reach their fixed point here.
                break
        # 4. memory
        self.router.remember(queues)
        return self.out.events

    def _own_then_parked(self, entries: list[Entry], parked: list[Queue]) -> tuple[list[Entry], list[Queue]]:
        """GOING BEYOND KUEUE (the model's `borrowers_after_the_trees_own`), for a pass with parked queues: the
        entries that do not borrow are processed first (they come first in the classic order anyway); a parked
        queue of a tree where one of them acted stays parked, not assessed again (its head would be skipped), and
        the others are nominated now, against the ledger as it stands, and take their places among the pass's
        remaining entries. Returns those, and the queues unparked. Without the deferral, a queue admitting
        thousands of workloads within its quota at one instant (one per pass) would have every waiting borrower of
        its tree assessed at each of those passes (`bench_engine borrowers`)."""
        processor, nominator = self.processor, self.nominator
        rest: list[Entry] = []
        for e in entries:
            if e.level() == 0:
                processor.process(e)
            else:
                rest.append(e)
        busy = processor.own_first
        unparked: list[Queue] = []
        for q in parked:
            if q.node.tree in busy:
                continue
            q.parked = False
            unparked.append(q)
            entry = nominator.next_entry(q)
            if entry is not None:
                rest.append(entry)
        rest.sort(key=Entry.order)
        return rest, unparked

    def _progress(self, queues: list[Queue]) -> tuple[object, ...]:
        """What a pass can change: the decisions, the trees' states, where each queue's walk stands."""
        ledger = self.ledger
        trees = tuple(ledger.version(tree) for tree in sorted(ledger.snap.touched))
        walks = tuple(
            (q.pos, q.done, q.runs.start if q.runs else None, q.runs.inclusive if q.runs else None) for q in queues
        )
        return (len(self.out.events), len(ledger.snap.removed), trees, walks)

    def end_pass(self) -> None:
        """Kueue's reservation for a preemptor without candidates lives in its cycle's snapshot only: the next
        pass starts without it (a StrictFIFO head, its queue's head again, reserves again there). A tree whose
        only changes in the pass were such holds is back in the state the pass started in (`Ledger.end_pass`), so
        what was found in that state applies again."""
        undone: dict[str, int] = {}
        holding = self.processor.holding
        for q in holding:
            hold = q.hold
            if hold is None:
                continue
            undone[q.node.tree] = undone.get(q.node.tree, 0) + self.ledger.drop(hold)
            q.hold = None
            q.reserved = False
        self.processor.holding = [q for q in holding if q.hold is not None]
        for hold in self.processor.pass_holds:
            undone[hold.node.tree] = undone.get(hold.node.tree, 0) + self.ledger.drop(hold)
        self.processor.pass_holds = []
        self.processor.own_first = set()
        self.ledger.end_pass(undone)

    def _process_fairly(self, entries: list[Entry]) -> None:
        """Fair sharing: within each quota tree, Kueue's tournament picks the next entry against the current usage
        (trees are independent, so they are served one after the other, by name)."""
        by_tree: dict[str, dict[str, Entry]] = {}
        for e in entries:
            by_tree.setdefault(e.queue.node.tree, {})[e.queue.name] = e
        for tree in sorted(by_tree):
            remaining = by_tree[tree]
            root = next(iter(remaining.values())).queue.node.root()
            while remaining:
                won = (
                    tournament(root, self.tree.cqs, remaining, _entry_usage, _fair_tie_break, _is_preemptor)
                    if not root.is_cq
                    else None
                )
                if won is None:
                    won = min(remaining.values(), key=Entry.order)
                del remaining[won.queue.name]
                self.processor.process(won)

    def keep_claims(self, queues: list[Queue]) -> None:
        """A waiting preemptor keeps the victims it claimed (its last reason names them, the fold remembers it) as
        long as they are still leaving: first every such victim leaves the projected usage, then each preemptor, in
        queue order, reserves its usage if it fits there. One that no longer fits (something else was admitted
        meanwhile) is assessed as usual, but the victims of others stay theirs, so no cycle re-derives a different
        set for a preemptor that still fits with its own (which would let a second cycle undo the first one)."""
        ledger = self.ledger
        removed = ledger.snap.removed
        owners: list[tuple[tuple[int, int, str], Queue, PendingWorkload, list[AdmittedWorkload]]] = []
        for q in queues:
            if q.done:
                continue
            candidates = q.seq[:1] if q.strict else q.seq
            for pw in candidates:
                reason = pw.last_reason
                if reason is None or not is_sticky(pw):
                    break  # sticky members come first in a BestEffortFIFO walk
                live = [
                    aw
                    for key in reason.victims
                    if (aw := self.view.admitted.get(key)) is not None
                    and aw.evicting
                    and key not in removed
                    and aw.admission.cluster_queue in self.tree.cqs
                ]
                if live and self.router.precheck(q, pw) is None:
                    owners.append((queue_key(pw), q, pw, live))
        if not owners:
            return
        owners.sort(key=lambda o: o[0])
        for _, _, pw, live in owners:
            for aw in live:
                if aw.key not in removed:
                    ledger.claim(aw)
            ledger.own_victims[pw.key] = live
        evaluator = self.evaluator
        for _, q, pw, live in owners:
            a = evaluator.assign_plainly(q, pw.workload)
            if a.mode is not Mode.FIT and self.config.partial_admission and can_be_partially_admitted(pw.workload):
                # It may have claimed them for fewer pods (partial admission): the largest counts that fit now.
                a = evaluator.largest_plain_fit(q, pw.workload) or a
            if a.mode is Mode.FIT:
                ledger.reserve(q.node, a.usage)
                ledger.kept[pw.key] = live


def _entry_usage(e: Entry) -> dict[FlavorResource, int]:
    return e.result.assignment.usage if e.result.assignment is not None else {}


def _is_preemptor(e: Entry) -> bool:
    """A workload that preempted and waits for its victims (Kueue's PrioritizePreemptorWorkloads): the room its
    preemptions free goes to it first. Without this, another queue's nominee with a lower share takes that room, the
    victim preempts it back by fair sharing, and the preemptor preempts the victim again: a loop at one instant."""
    return is_sticky(e.pw)


def _fair_tie_break(e: Entry) -> tuple[object, ...]:
    return (-e.pw.priority, e.pw.queue_order_at, e.pw.key)
