"""Phase 3d: processing one nominated entry against the ledger (Kueue's `processEntry` and `admit`): an entry that
fits is admitted, its usage counted at once; a preemptor claims its victims (`WorkloadPreempted` for those not
already evicting), reserves its usage and waits with `WaitingForPreemptedWorkloads`; one without candidates
reserves Kueue's resourcesToReserve against other queues (unless its queue may always reclaim) for its pass.
An entry that no longer fits after an earlier one, or whose victims another preemptor claimed, is offered again in
the next pass; so is a borrowing entry of a quota tree where a workload within its own queue's nominal quota acted
in this pass (`Processor.own_first`). The reasons a queue's walk writes about it (its head's, and StrictFIFO's
`BlockedByHead`) are written here too.
"""

from __future__ import annotations

from daemon.domain.admission import reasons
from daemon.domain.admission.decisions import Decisions
from daemon.domain.admission.evaluate import Evaluator
from daemon.domain.admission.ledger import Hold, Ledger, to_reserve
from daemon.domain.admission.outcome import Kind
from daemon.domain.admission.routing import Router
from daemon.domain.admission.walk import Entry, Queue
from daemon.domain.config import EngineConfig
from daemon.domain.flavors import Assignment, Mode
from daemon.domain.model import Admission, PendingReason, PodSetAssignment, PreemptionPolicy
from daemon.domain.podsready import WAITING, blocking
from daemon.domain.preemption import Target
from daemon.domain.quota import fits
from daemon.domain.view import AdmittedWorkload, ClusterView, PendingWorkload, coarse, is_sticky


class Processor:
    __slots__ = (
        "config",
        "evaluator",
        "holding",
        "ledger",
        "out",
        "own_first",
        "pass_holds",
        "pods_blocked",
        "preempted",
        "router",
        "waited",
    )

    def __init__(
        self,
        view: ClusterView,
        config: EngineConfig,
        ledger: Ledger,
        out: Decisions,
        router: Router,
        evaluator: Evaluator,
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.out = out
        self.router = router
        self.evaluator = evaluator
        self.preempted = False  # this pass preempted: the cycle ends with it (see `Cycle.run`)
        self.holding: list[Queue] = []  # queues whose preemptor without candidates holds quota (`Cycle.end_pass`)
        self.pass_holds: list[Hold] = []  # rooms held for this pass by entries waiting for this cycle's victims
        self.waited: set[str] = set()  # those entries, whose reason is written once per call
        # GOING BEYOND KUEUE (the model's `borrowers_after_the_trees_own`): the quota trees where, in this pass, a
        # workload that does not borrow was admitted, claimed victims or waits for them. Their borrowing entries
        # are offered again in the next pass, so that room freed in a tree goes first to the queues taking back
        # their own quota, each as deep as its pending workloads go, and only what is left is lent. Without it, a
        # queue taking back its quota one head per pass lends the rest of the freed room to other queues'
        # borrowers in the same pass and reclaims it from them in the next: an eviction for nothing, which under
        # eviction latency repeats for as long as the victims' pods take to stop (bench.bench_dst's churn). Kueue
        # up to v0.3 skipped every borrower of a Cohort that admitted in the cycle ("workloads in the cohort that
        # don't require borrowing were prioritized and admitted first"); its `schedule()` still says why.
        # Classic ordering only: with fair sharing the tournament decides who goes first.
        self.own_first: set[str] = set()
        # waitForPodsReady.blockAdmission: while an admitted workload is not ready, nothing is admitted (preemptions
        # go on). After this cycle's first admission, that workload is the one not ready.
        self.pods_blocked = blocking(view, config.wait_for_pods_ready)

    def process(self, e: Entry) -> None:
        q = e.queue
        self.ledger.lift(q.hold)
        try:
            self._process(e)
        finally:
            self.ledger.relay(q.hold)

    def _process(self, e: Entry) -> None:
        q, pw, r = e.queue, e.pw, e.result
        ledger = self.ledger
        a = r.assignment
        assert a is not None
        if a.borrowing and q.node.tree in self.own_first and r.kind is not Kind.NO_TARGETS:
            # A queue of its tree takes back its own quota in this pass: its queue stays at it, assessed again
            # only in a pass where nothing of its tree acts within its own quota (`Cycle.run`, parked queues).
            q.parked = True
            return
        if r.kind is Kind.FIT:
            if not fits(q.node, a.usage):
                return  # no longer fits after an earlier entry: offered again next pass
            if not ledger.real_fits(q.node, a.usage):
                # The flavors were chosen with this cycle's victims gone. With them still holding their quota
                # another assignment may fit now; otherwise it fits only once they are gone (Kueue's DeferredFit):
                # wait, holding the room.
                with ledger.claimed_back(q.node.tree):
                    alt = self.evaluator.assign_plainly(q, r.workload or pw.workload)
                if alt.mode is Mode.FIT:
                    self._admit(q, pw, alt)
                    return
                if q.strict:
                    ledger.reserve(q.node, a.usage)
                    self._own(q, a)
                    self.wait(q, pw, ledger.own_victims.get(pw.key, []), "workloads preempted in this cycle")
                    return
                # Its room is held for its pass (the model's `no_overcommit_while_victims_leave`: Kueue's cycle
                # would have admitted it); it is offered again in the next pass, as Kueue requeues a skipped entry.
                self.pass_holds.append(ledger.reserve(q.node, a.usage))
                self._own(q, a)
                if pw.key not in self.waited:
                    self.waited.add(pw.key)
                    kept = [v.key for v in ledger.own_victims.get(pw.key, [])]
                    if kept or not is_sticky(pw):
                        reason = reasons.waiting_for_preempted(kept, "workloads preempted in this cycle")
                    else:
                        # A sticky preemptor whose own victims are gone stays its queue's sticky member while it
                        # waits for the room others' victims free: the next call walks its queue as this one did.
                        reason = reasons.still_sticky(pw.last_reason, "workloads preempted in this cycle")
                    q.emitted |= self.out.pending(pw, q.name, reason)
                return
            self._admit(q, pw, a)
            return
        if r.kind is Kind.NO_TARGETS:
            assert r.reason is not None
            if not q.rest_blocked:
                self.no_fit(q, pw, r.reason)
            q.reserved = True
            if q.cq.preemption.reclaim_within_cohort is not PreemptionPolicy.ANY:
                q.hold = ledger.reserve(q.node, to_reserve(q.node, a), a)
                self.holding.append(q)
                ledger.lift(q.hold)  # `process` lays it again
                if q.strict:
                    # Kueue requeues a StrictFIFO head at once: it is its queue's head in the next cycle too, where
                    # it holds again at its place in that cycle's order. The rest of its queue waits meanwhile.
                    if not q.rest_blocked:
                        self._block_rest(q, pw)
                        q.rest_blocked = True
                    q.holder = True
                    return
            self._after_head_failed(q, pw)
            return
        victims = r.targets if r.kind is Kind.PREEMPT else [Target(aw, "", "") for aw in r.waits_on]
        removed = ledger.snap.removed
        if any(t.victim.key in removed for t in victims):
            return  # overlaps victims another preemptor claimed in this pass: re-assessed next pass
        with ledger.without([t.victim for t in victims]):
            ok = fits(q.node, a.usage)
        if not ok:
            return
        for t in victims:
            ledger.claim(t.victim)
            if not t.victim.evicting:
                self.out.preempted(t.victim, ledger.snap.usage_of(t.victim), pw.key, q.name, t.reason, t.policy)
                self.preempted = True
        ledger.reserve(q.node, a.usage)
        self._own(q, a)
        # A preemptor whose kept victims were not enough (`Cycle.keep_claims`) was assessed with them gone: it
        # waits for them too, and names them, or the next call hands them to others and it takes new ones.
        own = [v for v in ledger.own_victims.get(pw.key, []) if all(t.victim.key != v.key for t in victims)]
        self.wait(q, pw, [*own, *(t.victim for t in victims)], "")

    def _own(self, q: Queue, a: Assignment) -> None:
        if not a.borrowing and not self.config.fair_sharing:
            self.own_first.add(q.node.tree)

    def wait(self, q: Queue, pw: PendingWorkload, victims: list[AdmittedWorkload], what: str) -> None:
        """The workload waits for its victims (or for `what`): Kueue's sticky preemptor, its queue's head again."""
        q.emitted |= self.out.pending(pw, q.name, reasons.waiting_for_preempted([v.key for v in victims], what))
        self._after_head_failed(q, pw)

    def no_fit(self, q: Queue, pw: PendingWorkload, reason: PendingReason) -> None:
        """To keep deep queues from flooding the log, only a queue's first unfitting workload per call is compared
        in full; for the others a change of the `available` figures alone (quota used elsewhere) is not news."""
        last = self.out.last_reason(pw)
        if q.headline_written and last is not None and coarse(last) == coarse(reason):
            return
        q.headline_written = True
        q.emitted |= self.out.pending(pw, q.name, reason)

    def block(self, q: Queue, head: PendingWorkload) -> None:
        """StrictFIFO: the head stays; everything behind it waits (except those that are no candidates at all)."""
        if not q.rest_blocked:
            self._block_rest(q, head)
        q.pos = len(q.seq)
        q.done = True

    def block_behind(self, q: Queue, head: PendingWorkload) -> None:
        """StrictFIFO: the head stays and is offered again in the next pass (as a holder is, `Cycle.run`); the
        rest waits behind it meanwhile."""
        if not q.rest_blocked:
            self._block_rest(q, head)
            q.rest_blocked = True
        q.holder = True

    def _block_rest(self, q: Queue, head: PendingWorkload) -> None:
        blocked = reasons.blocked_by_head(head, q.name)
        assert q.runs is None
        for pw in q.seq[q.pos + 1 :]:
            pre = self.router.precheck(q, pw)
            q.emitted |= self.out.pending(pw, q.name, pre if pre is not None else blocked)

    def _after_head_failed(self, q: Queue, pw: PendingWorkload) -> None:
        if q.strict:
            self.block(q, pw)
        else:
            q.advance(pw)

    def _admit(self, q: Queue, pw: PendingWorkload, a: Assignment) -> None:
        if self.pods_blocked:
            # Kueue's scheduler waits here until every admitted workload is ready; nothing else is considered
            # meanwhile. The next cycle (a `job.ready` starts one) offers this queue again from its head.
            q.emitted |= self.out.pending(pw, q.name, WAITING)
            if q.strict:
                self.block(q, pw)
            else:
                q.done = True
            return
        if self.config.blocks_after_admission:
            self.pods_blocked = True
        borrowed = self.ledger.admit(q.name, q.node, a.usage)
        admission = Admission(
            cluster_queue=q.name,
            pod_sets=tuple(
                PodSetAssignment(name=ps.name, count=ps.count, flavors=dict(ps.flavors), usage=dict(ps.usage))
                for ps in a.pod_sets
            ),
        )
        self.out.admitted(pw, admission, borrowed)
        self._own(q, a)
        self.ledger.admitted_now.setdefault(q.name, {})[pw.key] = AdmittedWorkload(
            workload=pw.workload,
            priority=pw.priority,
            admission=admission,
            admitted_at=self.out.now,
            queue_order_at=pw.queue_order_at,
            evicted_at=pw.evicted_at,
        )
        q.advance(pw)
