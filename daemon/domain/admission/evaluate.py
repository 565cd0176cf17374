"""Phase 3b: assessing one workload against the ledger's snapshot (Kueue's `nominate`: the flavor assigner, the
preemption search `GetTargets`, the partial-admission search of `podset_reducer.go`).

The outcome of a class of alike workloads (`memo.ClassKey`) in one state of the tree is the same for each of them,
so it is assessed once per state (`Queue.equivalent`) and, against a tree untouched in the call, once per tree
generation across calls (`InadmissibleMemo`).
"""

from __future__ import annotations

from daemon.domain.admission import reasons
from daemon.domain.admission.ledger import Ledger
from daemon.domain.admission.memo import InadmissibleMemo, who
from daemon.domain.admission.outcome import UNFIT, Kind, Outcome
from daemon.domain.admission.walk import Queue
from daemon.domain.config import EngineConfig
from daemon.domain.fairpreemption import fair_targets
from daemon.domain.flavors import Assignment, Mode, PMode, can_be_partially_admitted, search_counts, with_counts
from daemon.domain.model import FlavorResource, Millis, PendingReasonKind, PreemptionPolicy, Workload
from daemon.domain.ordering import candidate_order
from daemon.domain.preemption import Preemptor, Target, classical_targets, oracle_mode, workload_fits
from daemon.domain.quota import Snapshot, fits
from daemon.domain.view import AdmittedWorkload, ClusterView, PendingWorkload, shape_of


class Evaluator:
    __slots__ = ("config", "ledger", "memo", "now", "view")

    def __init__(
        self, view: ClusterView, now: Millis, config: EngineConfig, ledger: Ledger, memo: InadmissibleMemo | None
    ) -> None:
        self.view = view
        self.now = now
        self.config = config
        self.ledger = ledger
        self.memo = memo

    def evaluate(self, q: Queue, pw: PendingWorkload) -> tuple[Outcome, bool]:
        """The workload's outcome, and whether its class's outcome was already known in this state of the tree."""
        tree = q.node.tree
        untouched = self.ledger.version(tree) == 0
        generation = self.view.generation.get(tree, 0)
        eq_key = self.equivalence_key(q, pw)
        known = eq_key in q.equivalent
        memo = self.memo if untouched else None
        if memo is not None:
            hit = memo.known(q.name, generation, eq_key[2:])
            if hit is not None:
                q.equivalent.setdefault(eq_key, hit)  # the class's result in this state, also for `Queue.quiet`
                return hit, known
        result = q.equivalent.get(eq_key)
        if result is None:
            result = self.assess(q, pw)
            q.volatile |= result.volatile
            if result.kind in UNFIT:
                q.equivalent[eq_key] = result
        if memo is not None and result.kind in UNFIT and not result.volatile:
            memo.store(q.name, generation, eq_key[2:], result)
        return result, known

    def equivalence_key(self, q: Queue, pw: PendingWorkload) -> tuple[object, ...]:
        """Same shape, same tree state (and, when preemption may be involved, same priority and age) -> same result."""
        shape = q.index.shape(pw) if q.index is not None else None
        if shape is None:
            shape = shape_of(pw.workload)
        return (
            self.ledger.version(q.node.tree),
            len(self.ledger.snap.removed),
            shape,
            who(q.cq, pw.priority, pw.queue_order_at),
        )

    def assess(self, q: Queue, pw: PendingWorkload) -> Outcome:
        preemptor, result = self._assess_with(q, pw, pw.workload)
        # Whether a candidate was off limits for this instant only is not a property of the tree's generation:
        # such a result must not be remembered beyond this cycle.
        volatile = preemptor.skipped_readmitted
        if result.kind in UNFIT and self.config.partial_admission and can_be_partially_admitted(pw.workload):
            # Kueue's getInitialAssignments: only when the full counts neither fit nor find victims, the largest
            # counts down to the pod sets' minimum that fit or find victims. Otherwise the full counts' result.
            def reduced(counts: tuple[int, ...]) -> Outcome | None:
                nonlocal volatile
                wl = with_counts(pw.workload, counts)
                p, r = self._assess_with(q, pw, wl)
                volatile |= p.skipped_readmitted
                if r.kind not in (Kind.FIT, Kind.PREEMPT, Kind.WAIT_EVICTIONS):
                    return None
                r.workload = wl
                return r

            result = search_counts(pw.workload, reduced) or result
        result.volatile = volatile
        return result

    def assign_plainly(self, q: Queue, wl: Workload) -> Assignment:
        """Flavors for `wl` in the snapshot as it is, without simulating preemption."""
        saved, q.assigner.oracle = q.assigner.oracle, None
        a = q.assigner.assign(wl)
        q.assigner.oracle = saved
        return a

    def largest_plain_fit(self, q: Queue, whole: Workload) -> Assignment | None:
        """Partial admission without preemption: the assignment of the largest counts that fit as things are."""

        def fit(counts: tuple[int, ...]) -> Assignment | None:
            a = self.assign_plainly(q, with_counts(whole, counts))
            return a if a.mode is Mode.FIT else None

        return search_counts(whole, fit)

    def _assess_with(self, q: Queue, pw: PendingWorkload, wl: Workload) -> tuple[Preemptor, Outcome]:
        snap = self.ledger.snap
        preemptor = Preemptor(
            pw=pw, cq=q.cq, node=q.node, usage={}, frs=frozenset(), excluded=snap.removed, now=self.now
        )

        targets_fn = self._fair_targets if self.config.fair_sharing else classical_targets
        # The oracle's victim search for one flavor and quantity: a workload of one resource that needs preemption
        # asks the same question again below, in the same snapshot (the oracle puts back what it took out).
        asked: dict[tuple[FlavorResource, int], tuple[list[Target], bool]] = {}

        def recording(single: Preemptor, s: Snapshot) -> list[Target]:
            found = targets_fn(single, s)
            ((fr, quantity),) = single.usage.items()
            asked[(fr, quantity)] = (found, single.skipped_readmitted)
            return found

        def oracle(fr: FlavorResource, quantity: int) -> tuple[PMode, int]:
            return oracle_mode(preemptor, snap, fr, quantity, recording)

        q.assigner.oracle = oracle
        a = q.assigner.assign(wl)
        if a.mode is Mode.FIT:
            return preemptor, Outcome(Kind.FIT, assignment=a)
        if a.mode is Mode.NO_FIT and a.reason_kind is not PendingReasonKind.WAITING_FOR_QUOTA:
            return preemptor, Outcome(Kind.NO_FIT, reason=reasons.no_fit(a))
        waiting = self._fits_after_evictions(q, wl)
        if waiting is not None:
            return preemptor, waiting
        if self.config.fair_sharing and self._admitted_candidates(q):
            # Kueue chooses victims in a snapshot where all usage belongs to admitted workloads (the cycle's start).
            # Here the workloads admitted earlier in this cycle hold quota but are no candidates yet, so a victim
            # search now would fall on older, higher-priority workloads that Kueue would never pick (a 20-CPU
            # priority-200 job preempted to free 5 CPU that a priority-100 job admitted this cycle borrowed; it then
            # preempted its way back in, at every completion: issue 9). Assess it again next cycle, as Kueue does
            # a preemptor whose room the cycle's earlier admissions took.
            return preemptor, Outcome(Kind.DEFERRED, assignment=a, volatile=True)
        if a.mode is Mode.NO_FIT:
            return preemptor, Outcome(Kind.NO_FIT, reason=reasons.no_fit(a))
        preemptor.usage = a.usage
        preemptor.frs = a.frs_need_preemption
        single = next(iter(a.usage.items())) if len(a.usage) == 1 else None
        known = asked.get(single) if single is not None and a.frs_need_preemption == {single[0]} else None
        if known is not None:
            targets = list(known[0])
            preemptor.skipped_readmitted |= known[1]
        else:
            targets = targets_fn(preemptor, snap)
        if not targets:
            return preemptor, Outcome(Kind.NO_TARGETS, assignment=a, reason=reasons.waiting_for_quota(q.node, a))
        if all(t.victim.evicting for t in targets):
            return preemptor, Outcome(Kind.WAIT_EVICTIONS, assignment=a, waits_on=[t.victim for t in targets])
        return preemptor, Outcome(Kind.PREEMPT, assignment=a, targets=targets)

    def _admitted_candidates(self, q: Queue) -> bool:
        """Could a workload admitted earlier in this cycle be a victim of `q`'s workloads by its policies?"""
        admitted = self.ledger.admitted_in.get(q.node.tree)
        if not admitted:
            return False
        pre = q.cq.preemption
        if pre.within_cluster_queue is not PreemptionPolicy.NEVER and q.name in admitted:
            return True
        reclaims = q.node.parent is not None and pre.reclaim_within_cohort is not PreemptionPolicy.NEVER
        return reclaims and bool(admitted - {q.name})

    def _fair_targets(self, p: Preemptor, snap: Snapshot) -> list[Target]:
        """Fair-sharing victims, chosen on the usage of admitted workloads only. What other queues' waiting
        preemptors reserve is not in the shares (Kueue never sees it when it chooses victims): counted, it made a
        queue whose preemptors wait look like a borrower, so another queue preempted its workloads in the same cycle
        in which its own preemptors reclaimed from that queue, and the two preempted each other within one instant
        (issue 9). What the preemptor's own queue reserves stays counted: Kueue serves one head per queue and cycle,
        so that queue's earlier preemptor would be admitted before this one is assessed; left out, every waiting
        workload of a queue at its nominal quota was taken for one reclaiming within nominal quota and preempted
        without a share test. The victims must still make room with the reservations counted, or there are none."""
        with self.ledger.without_holds_of_others(p.node) as holds:
            targets = fair_targets(p, snap, self.config.fair_sharing_strategies)
        if targets and holds:
            with self.ledger.without([t.victim for t in targets]):
                ok = workload_fits(p, True)
            if not ok:
                return []
        return targets

    def _fits_after_evictions(self, q: Queue, wl: Workload) -> Outcome | None:
        """Would the workload fit once the tree's already-evicting workloads (not claimed this cycle) are gone?"""
        leaving = self.ledger.leaving(q.node.tree)
        if not leaving:
            return None
        snap = self.ledger.snap
        leaving.sort(key=lambda aw: candidate_order(aw, q.name))
        for aw in leaving:
            snap.remove_workload(aw)
        a = self.assign_plainly(q, wl)
        needed: list[AdmittedWorkload] = []
        if a.mode is Mode.FIT:
            # The fewest of them it needs: each, from the last in candidate order, is put back if it still fits.
            needed = list(leaving)
            for aw in reversed(leaving):
                snap.add_workload(aw)
                if fits(q.node, a.usage):
                    needed.remove(aw)
                else:
                    snap.remove_workload(aw)
            for aw in needed:
                snap.add_workload(aw)
        else:
            for aw in leaving:
                snap.add_workload(aw)
        if not needed:
            return None
        return Outcome(Kind.WAIT_EVICTIONS, assignment=a, waits_on=needed)
