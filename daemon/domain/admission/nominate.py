"""Phase 3c: each ClusterQueue nominates its head for the pass (Kueue's `Manager.Heads` and `nominate`).

The queue's walk (`walk.Queue`) offers workloads in order; each is assessed (`Evaluator`), and the first that can
be acted on (it fits, preempts, or waits for victims) is the queue's entry in the pass. A BestEffortFIFO head that
cannot be admitted gets its reason and is stepped over (Kueue's inadmissible set): its queue offers its next
workload in the next pass, except workloads whose class was already found unfitting in the very same state, which
step aside with it (Kueue's equivalence classes). A StrictFIFO head that cannot be admitted blocks the rest of its
queue (`BlockedByHead`). A workload that needs preemption but has no candidates is its queue's entry once per queue
and pass: it holds Kueue's resourcesToReserve (`Processor`); later ones of its queue only get their reason.
"""

from __future__ import annotations

from daemon.domain.admission.evaluate import Evaluator
from daemon.domain.admission.ledger import Ledger, blocked_above, to_reserve
from daemon.domain.admission.optimisations import Optimisations
from daemon.domain.admission.outcome import Kind, Outcome
from daemon.domain.admission.process import Processor
from daemon.domain.admission.routing import Router
from daemon.domain.admission.walk import Entry, Queue
from daemon.domain.config import EngineConfig
from daemon.domain.model import Millis, PreemptionPolicy
from daemon.domain.view import PendingWorkload


class Nominator:
    __slots__ = ("config", "deferred", "evaluator", "held_back", "ledger", "live", "now", "opt", "processor", "router")

    def __init__(
        self,
        now: Millis,
        config: EngineConfig,
        opt: Optimisations,
        ledger: Ledger,
        router: Router,
        evaluator: Evaluator,
        processor: Processor,
    ) -> None:
        self.now = now
        self.config = config
        self.opt = opt
        self.ledger = ledger
        self.router = router
        self.evaluator = evaluator
        self.processor = processor
        self.deferred = False  # some queue waits for the next cycle (`Kind.DEFERRED`)
        self.held_back = False  # some workload stopped at this instant was held back (`evicted_now`)
        self.live: dict[str, int] = {}  # per tree, its queues that may still offer an entry (at the pass's start)

    def lone(self, q: Queue) -> bool:
        """Every other queue of `q`'s tree offers nothing more in this call (`Optimisations.lone_holds`)."""
        return self.opt.lone_holds and not q.strict and self.live.get(q.node.tree, 0) <= 1

    def next_entry(self, q: Queue) -> Entry | None:
        """The queue's entry in this pass, or None. Its own hold is lifted meanwhile (it keeps other queues off)."""
        q.holder = False  # until its head holds again in this pass (`Processor`)
        self.ledger.lift(q.hold)
        try:
            return self._walk(q)
        finally:
            self.ledger.relay(q.hold)

    def _peek(self, q: Queue) -> PendingWorkload | None:
        if q.pos < len(q.seq):
            return q.seq[q.pos]
        if q.runs is None:
            return None
        return q.peek((self.ledger.version(q.node.tree), len(self.ledger.snap.removed)), self.lone(q))

    def _walk(self, q: Queue) -> Entry | None:
        processor = self.processor
        while True:
            pw = self._peek(q)
            if pw is None:
                break
            pre = self.router.precheck(q, pw)
            if pre is not None:
                q.emitted |= processor.out.pending(pw, q.name, pre)
                q.advance(pw)
                continue
            kept = self.ledger.kept.get(pw.key)
            if kept is not None:
                q.acted = True
                processor.wait(q, pw, kept, "")
                if q.done:
                    return None
                continue
            result, known = self.evaluator.evaluate(q, pw)
            if result.kind not in (Kind.NO_FIT, Kind.NO_TARGETS) and pw.evicted_now(self.now):
                # Stopped at this instant: admitting it again now, into room its preemptor left or by preempting in
                # turn, would undo a decision of the instant with nothing else changed (issue 9). It is held back
                # until the next instant, without a new reason (its queue is not memoised, so that instant's cycle
                # assesses it again); one that cannot be admitted anyway gets its reason as any other.
                q.acted = q.volatile = self.held_back = True
                if q.strict:
                    # A StrictFIFO head stays its queue's head (Kueue requeues it at once): the rest waits behind
                    # it, and it is assessed again in the next pass, where what this pass admitted may change it.
                    processor.block_behind(q, pw)
                    return None
                q.advance(pw)
                return None  # its queue offers its next workload in the next pass
            if result.kind is Kind.DEFERRED:
                q.acted = q.volatile = q.done = self.deferred = True  # the queue waits for the next cycle
                if result.assignment is not None:
                    # It holds its room for the rest of the cycle, as a Kueue preemptor adds its usage to the
                    # cycle's snapshot: otherwise the queue that just admitted goes on borrowing the idle capacity
                    # pass after pass, only to be reclaimed in the next cycle (issue 9, the three-level tree).
                    self.ledger.reserve(q.node, dict(result.assignment.usage))
                return None
            if result.kind is Kind.NO_TARGETS and known and not q.reserved and self.lone(q):
                # Its class was found without candidates in this very state, by a head that held its room in a pass
                # that changed nothing else in the tree. Offered, it would do the same in a pass of its own, seen by
                # no other queue (none offers anything more): it steps aside at once (`Optimisations.lone_holds`).
                result = Outcome(Kind.NO_FIT, reason=result.reason)
            if result.kind is Kind.NO_TARGETS and not q.reserved and not self._holds_anything(q, result):
                if q.strict:
                    # A StrictFIFO head is its queue's head in every cycle (Kueue requeues it at once): with nothing
                    # to hold in this pass, it may hold in a later one, once what this pass admits changed its tree.
                    assert result.reason is not None
                    processor.no_fit(q, pw, result.reason)
                    processor.block_behind(q, pw)
                    return None
                q.reserved = True  # the first such workload, but it has nothing to hold: no entry needed
            if result.kind is Kind.NO_TARGETS and q.reserved:
                result = Outcome(Kind.NO_FIT, reason=result.reason)
            if result.kind is Kind.NO_FIT:
                assert result.reason is not None
                processor.no_fit(q, pw, result.reason)
                if q.strict:
                    processor.block(q, pw)
                    return None
                q.advance(pw)
                if known:
                    # Its class was found unfitting in this very state: it steps aside with the head that was
                    # (Kueue's equivalence classes), as the walk by runs steps over whole runs of it.
                    continue
                return None  # Kueue's inadmissible set: the queue's next workload is its head in the next pass
            q.acted = True
            return Entry(q, pw, result)
        q.done = True
        return None

    def _holds_anything(self, q: Queue, r: Outcome) -> bool:
        if not self.config.reserve_without_candidates:
            return False
        if q.cq.preemption.reclaim_within_cohort is PreemptionPolicy.ANY or r.assignment is None:
            return False
        if blocked_above(q.node, r.assignment):
            # Parked (Kueue's inadmissible set): a limit higher in the tree keeps it out whatever it could preempt,
            # so room held for it would only keep other queues of the tree off idle capacity, for as long as the
            # blocker stays. A change that lets it in (quota freed, a queue or cohort changed) makes it fit or gives
            # it candidates in the cycle that follows; until then it holds nothing.
            return False
        return bool(to_reserve(q.node, r.assignment))
