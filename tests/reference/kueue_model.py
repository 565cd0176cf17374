"""A reference model of Kueue's scheduler (v0.17, classic preemption, fair sharing off): pure, slow and short.

It is what the engine is compared with (tests/unit/test_engine_vs_model.py, bench/bench_model_diff.py), so it
follows Kueue's structures, not admitd's: per ClusterQueue a heap and an inadmissible set
(`pkg/cache/queue/cluster_queue.go`); a cycle pops one head per ClusterQueue (`Manager.Heads`), takes a fresh
snapshot (`cache.Snapshot`), nominates every head (`Scheduler.nominate`), orders the entries as the classical
iterator does (`makeClassicalIterator`), processes them one by one (`Scheduler.processEntry`) and requeues those
not admitted (`Scheduler.requeueAndUpdate`, `ClusterQueue.RequeueIfNotPresent`). Cycles run until one changes
nothing (no decision, no workload moved between a heap and an inadmissible set).

What it shares with the engine, and so does not check: the quota arithmetic of `resource_node.go`
(`daemon.domain.quota`), the flavor assigner with its preemption oracle (`daemon.domain.flavors`, Kueue's
`flavorassigner.Assign` and `preemption.Oracle`) and classic victim selection (`daemon.domain.preemption`, Kueue's
`classical` package). It does not remember a flavor scan across cycles (Kueue's `LastAssignment`, the
TryNextFlavor resume point), has no partial admission, no fair sharing, no stop policies, no waitForPodsReady.

The world around it is the simulator's: jobs arrive at their time, finish after their runtime, and a preempted job
stops at once (its quota is released at the instant it is preempted) and queues again.
Where admitd chooses to decide differently from Kueue, `Switches` names it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from daemon.domain.admission.ledger import blocked_above  # the switch's rule is the engine's own
from daemon.domain.admission.memo import who  # the classes of `unfit_classes_step_aside_together`, the engine's
from daemon.domain.flavors import Assignment, FlavorAssigner, Mode
from daemon.domain.model import (
    Admission,
    ClusterQueue,
    Cohort,
    FlavorResource,
    LocalQueue,
    Millis,
    Namespace,
    PodSetAssignment,
    PreemptionPolicy,
    QueueingStrategy,
    ResourceFlavor,
    Workload,
    selects,
)
from daemon.domain.preemption import Preemptor, Target, classical_targets, oracle_mode
from daemon.domain.quota import Node, QuotaTree, Snapshot, fits
from daemon.domain.view import AdmittedWorkload, PendingWorkload, shape_of


@dataclass(frozen=True, slots=True, kw_only=True)
class Switches:
    """Where admitd decides differently from Kueue on purpose (README, "The engine's contract with Kueue")."""

    hold_evicted_until_next_instant: bool = True
    """A workload stopped at an instant is not admitted again at that instant, neither into free room nor by
    preempting in turn (issue 9: no instant undoes its own decisions); it is assessed again at the next instant.
    Kueue has no such rule: there the eviction takes the pods' grace period, so the question does not arise."""

    no_overcommit_while_victims_leave: bool = True
    """Kueue's `fits` removes every workload preempted in the cycle from the snapshot, so an entry that fits only
    once they are gone is admitted at once, over-committing their quota until they stop. admitd admits it only when
    it also fits beside what runs now (`_fits_as_running`: the victims still holding their quota, the usage the cycle
    added for preemptors and reservations left out, as none of it runs yet); otherwise it waits for them (holding
    the room it needs) and is admitted in the cycle after they leave."""

    inadmissible_back_at_each_call: bool = True
    """Kueue keeps a workload found inadmissible in its ClusterQueue's inadmissible set until quota is released in
    its Cohort tree (or a queue changes). admitd's engine has no such set across its calls: each call (at every
    instant something happens, and again after a call that decided something or preempted) offers every queue's
    workloads from its head, so a workload Kueue would leave aside until a release is a head again, assessed
    (cheaply: the inadmissible memo) and stepped over in the call's first pass, while the queue's next workload
    waits for the second. The same holds for a workload held back at its instant (`hold_evicted_until_next_instant`):
    each call holds it again where its walk reaches it. Within a call, a workload stepped over stays stepped over,
    as in Kueue's set. The outcome
    is an order within an instant: a queue's newer workload may be admitted one pass later than Kueue would, after
    another queue's borrower (one pass earlier it would have been admitted before it)."""

    borrowers_after_the_trees_own: bool = True
    """In a cycle where a workload that does not borrow was admitted in a Cohort tree, or preempted for its room (or
    waits for it), the tree's borrowing entries are skipped (requeued at once: heads again in the next cycle), and
    their ClusterQueues are parked: in the cycles that follow, a parked queue's head is nominated only after the
    cycle's entries that do not borrow were processed (against the snapshot as it stands then), and only if none of
    its tree acted; otherwise it is skipped again unassessed. (The engine assesses nothing for them meanwhile.)
    Room freed in a tree goes first to the queues taking back their own quota, as deep as their pending workloads
    go; only what is left is lent. Kueue v0.17 lends it in the same cycle and reclaims it in the next (one head per
    ClusterQueue per cycle): an eviction for nothing, repeated under eviction latency. Kueue up to v0.3 skipped
    every borrower of a Cohort that admitted in the cycle; `schedule()` still carries the comment saying why
    ("there can be other workloads deeper in a clusterQueue whose head got admitted that should be scheduled in
    the cohort before the heads of other clusterQueues")."""

    unfit_classes_step_aside_together: bool = True
    """Within one of the engine's calls (`inadmissible_back_at_each_call`), a BestEffortFIFO head alike to one of its
    queue found NoFit (or without candidates and holding nothing) earlier in the call, in the same state of its quota
    tree (no admission in the tree since that cycle started), is not assessed: it goes to the inadmissible set at
    once and its queue's next workload is popped in its place, in the same cycle. Alike: the same shape, and what
    the preemption search reads of the workload (its priority when the queue may preempt, also its age under
    LowerOrNewerEqualPriority: `memo.who`). Kueue v0.17 pops them one per cycle; its equivalence hashing
    (SchedulingEquivalenceHashing, on by default from v0.18) moves the whole class to the inadmissible set when its
    first member is found NoFit or without candidates, until quota is released in the tree. The engine's walk steps
    them aside while the tree is as it was (`Nominator._walk`, `known`); with `borrowers_after_the_trees_own`, which
    workloads meet in one cycle decides what a borrower may take, so the model does the same."""

    no_hold_when_a_cohort_limit_blocks: bool = True
    """Kueue's reserveCapacityForUnreclaimablePreempt holds resourcesToReserve for every preemptor without
    candidates. admitd holds nothing when what keeps it out is a Cohort's borrowingLimit (it would fit if the
    Cohorts above its ClusterQueue had none): the hold would only keep the tree's other queues off idle capacity
    for as long as the limit stays (`daemon.domain.admission.ledger.blocked_above`)."""


@dataclass(frozen=True, slots=True)
class Decision:
    at: Millis
    kind: str  # "admit" | "preempt"
    workload: str
    cluster_queue: str
    flavors: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # admit: per pod set, resource -> flavor
    preemptor: str | None = None  # preempt


# Kueue's RequeueReason values (cluster_queue.go).
GENERIC = ""
FAILED_AFTER_NOMINATION = "FailedAfterNomination"
NAMESPACE_MISMATCH = "NamespaceMismatch"
PENDING_PREEMPTION = "PendingPreemption"
NO_FIT = "NoFit"
NO_CANDIDATES = "PreemptionNoCandidates"
HELD = "Held"  # admitd's switch: back in the heap at the next instant


@dataclass(slots=True)
class _CQueue:
    """Kueue's queue.ClusterQueue: the heap (`active`), the inadmissible set, the pop and requeue cycle counters,
    and the preemptor workload (sticky at the head in BestEffortFIFO)."""

    cq: ClusterQueue
    active: set[str] = field(default_factory=set)
    inadmissible: set[str] = field(default_factory=set)
    pop_cycle: int = 0
    queue_inadmissible_cycle: int = -1
    preemptor: str | None = None
    sticky: bool = False

    @property
    def strict(self) -> bool:
        return self.cq.queueing_strategy is QueueingStrategy.STRICT_FIFO


@dataclass(slots=True)
class _Entry:
    """Kueue's scheduler entry: one head, its assignment and targets, its status and requeue reason."""

    pw: PendingWorkload
    cq: str
    assignment: Assignment | None = None
    targets: list[Target] = field(default_factory=list)
    status: str = ""  # "" (notNominated) | skipped | nominated | assumed
    requeue_reason: str = GENERIC
    held_nothing: bool = False  # a preemptor without candidates that reserved nothing


class KueueModel:
    def __init__(
        self,
        *,
        flavors: Mapping[str, ResourceFlavor],
        cluster_queues: Mapping[str, ClusterQueue],
        cohorts: Mapping[str, Cohort],
        local_queues: Mapping[str, LocalQueue],
        namespaces: Mapping[str, Namespace],
        switches: Switches = Switches(),
    ) -> None:
        self.flavors = dict(flavors)
        self.cluster_queues = dict(cluster_queues)
        self.cohorts = dict(cohorts)
        self.local_queues = dict(local_queues)
        self.namespaces = dict(namespaces)
        self.switches = switches
        self.queues = {name: _CQueue(cq) for name, cq in sorted(cluster_queues.items())}
        self.pending: dict[str, PendingWorkload] = {}
        self.cq_of: dict[str, str] = {}
        self.admitted: dict[str, AdmittedWorkload] = {}
        self.held: set[str] = set()
        self.parked: set[str] = set()  # `borrowers_after_the_trees_own`: ClusterQueues whose head was skipped
        # `unfit_classes_step_aside_together`: (ClusterQueue, shape, who) -> the tree's admitted workloads at the
        # start of the cycle in which a head of that class was found NoFit (in this call)
        self.unfit: dict[tuple[str, object, tuple[int, ...]], frozenset[str]] = {}
        self.decisions: list[Decision] = []
        self.cycles = 0
        self._structure = QuotaTree.build(self.cluster_queues, self.cohorts, self.flavors)

    # --- the world's events -------------------------------------------------------------------------------------

    def create(self, wl: Workload, priority: int) -> None:
        """A new Workload: Manager.AddOrUpdateWorkload pushes it to its ClusterQueue's heap at once."""
        lq = self.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        if lq is None or lq.cluster_queue not in self.queues:
            return  # no queue sees it; the engine writes a reason, which is not a decision
        pw = PendingWorkload(
            workload=wl,
            priority=priority,
            local_queue=f"{wl.namespace}/{wl.queue_name}",
            queue_order_at=wl.created_at,
            last_reason=None,
        )
        self.pending[wl.key] = pw
        self.cq_of[wl.key] = lq.cluster_queue
        self.queues[lq.cluster_queue].active.add(wl.key)

    def finish(self, key: str) -> None:
        """The job finished: its quota is released, and the workload controller requeues the inadmissible
        workloads of its cohort (WorkloadReconciler, Manager.QueueAssociatedInadmissibleWorkloadsAfter)."""
        aw = self.admitted.pop(key, None)
        if aw is not None:
            self._release(aw.admission.cluster_queue)

    def _evict(self, key: str, now: Millis) -> None:
        """A preempted job stops at once (the simulator's world): quota released, the cohort's inadmissible
        workloads requeued, and the workload itself back in its heap. Its queue order stays its creation time
        (Ordering.GetQueueOrderTimestamp: only PodsReady timeouts and admission checks reorder it)."""
        aw = self.admitted.pop(key)
        cq = aw.admission.cluster_queue
        self.pending[key] = PendingWorkload(
            workload=aw.workload,
            priority=aw.priority,
            local_queue=f"{aw.workload.namespace}/{aw.workload.queue_name}",
            queue_order_at=aw.workload.created_at,
            last_reason=None,
            evicted_at=now,
        )
        self.queues[cq].active.add(key)
        self._release(cq)

    def _release(self, cq_name: str) -> None:
        """Manager.requeueWorkloadsCQ: every ClusterQueue of the root Cohort's tree moves its inadmissible
        workloads to its heap, and records the pop cycle at which that happened (queueInadmissibleCycle)."""
        root = self._structure.cqs[cq_name].root()
        for name in _cqs_under(root):
            q = self.queues[name]
            q.active |= q.inadmissible
            q.inadmissible = set()
            q.queue_inadmissible_cycle = q.pop_cycle

    # --- driving ------------------------------------------------------------------------------------------------

    def settle(self, now: Millis) -> list[Decision]:
        """Cycles at `now` until one changes nothing; the decisions of the instant, in order."""
        start = len(self.decisions)
        if self.held:
            for key in sorted(self.held):
                if key in self.pending:
                    self.queues[self.cq_of[key]].active.add(key)
            self.held = set()
        call = self._call_starts()
        for _ in range(10_000):
            before = self._state()
            made = len(self.decisions)
            preempted = self._schedule(now)
            if self.switches.inadmissible_back_at_each_call and preempted:
                call = self._call_starts()  # the engine's call ends with a pass that preempts; the next one follows
                continue
            if len(self.decisions) == made and self._state() == before:
                if self.switches.inadmissible_back_at_each_call and len(self.decisions) > call:
                    call = self._call_starts()  # a call that decided something is followed by another
                    continue
                return self.decisions[start:]
        raise AssertionError(f"the model found no fixed point at {now} ms")

    def _call_starts(self) -> int:
        """`Switches.inadmissible_back_at_each_call`: every inadmissible workload is back in its heap, as each of the
        engine's calls walks every queue from its head. Returns where the call's decisions start."""
        if self.switches.inadmissible_back_at_each_call:
            for q in self.queues.values():
                q.active |= q.inadmissible
                q.inadmissible = set()
            # So are the workloads held back at this instant (`hold_evicted_until_next_instant`): each call meets
            # them again where its walk reaches them, and holds them again there, for that pass.
            for key in sorted(self.held):
                if key in self.pending:
                    self.queues[self.cq_of[key]].active.add(key)
            self.held = set()
            self.parked = set()  # each engine call starts with no queue parked
            self.unfit = {}  # and knows no class unfitting yet
        return len(self.decisions)

    def wants_next_instant(self) -> bool:
        return bool(self.held)

    def _state(self) -> tuple[object, ...]:
        queues = [(frozenset(q.active), frozenset(q.inadmissible), q.preemptor, q.sticky) for q in self.queues.values()]
        return (*queues, frozenset(self.held), frozenset(self.parked))

    # --- one cycle: Scheduler.schedule ---------------------------------------------------------------------------

    def _schedule(self, now: Millis) -> bool:
        """One cycle; whether it preempted."""
        self.cycles += 1
        # 1. Manager.Heads: one Pop per ClusterQueue with a non-empty heap.
        heads: list[tuple[str, PendingWorkload]] = []
        stepped: list[_Entry] = []  # `unfit_classes_step_aside_together`: popped and requeued as NoFit unassessed
        at_start = self._admitted_per_tree()  # per quota tree, its admitted workloads as this cycle starts
        for name, q in self.queues.items():
            while q.active:
                key = min(q.active, key=self._heap_order_in(q))
                q.active.discard(key)
                q.pop_cycle += 1  # ClusterQueue.Pop
                if self._known_unfit(name, q, self.pending[key], at_start):
                    stepped.append(_Entry(pw=self.pending[key], cq=name, requeue_reason=NO_FIT))
                    continue
                heads.append((name, self.pending[key]))
                break
        for e in stepped:
            self._requeue(e)
        if not heads:
            return False
        # 2. cache.Snapshot: a fresh one every cycle.
        tree = QuotaTree.build(self.cluster_queues, self.cohorts, self.flavors)
        by_cq: dict[str, dict[str, AdmittedWorkload]] = {}
        for key, aw in self.admitted.items():
            by_cq.setdefault(aw.admission.cluster_queue, {})[key] = aw
        snap = Snapshot(tree, by_cq, {}, None)
        # 3. nominate (parked queues' heads later: `borrowers_after_the_trees_own`).
        parked = [(name, pw) for name, pw in heads if name in self.parked]
        entries, inadmissible = self._nominate([h for h in heads if h[0] not in self.parked], tree, snap)
        # 4. makeClassicalIterator: not borrowing (lower level) first, then priority, then FIFO (ties: the key,
        # where Kueue's order is that of a Go map).
        entries.sort(key=_iterator_order)
        # 5. processEntry, one by one, on the cycle's snapshot.
        preempted: dict[str, AdmittedWorkload] = {}
        victims: list[tuple[str, str]] = []
        held: list[tuple[Node, dict[FlavorResource, int]]] = []  # usage added for entries not admitted
        own: set[str] = set()  # `borrowers_after_the_trees_own`: trees where a non-borrower acted in this cycle
        if parked:
            first = [e for e in entries if _borrowing(e) == 0]
            for e in first:
                self._process_entry(e, tree, snap, preempted, victims, held, own, now)
            late: list[tuple[str, PendingWorkload]] = []
            for name, pw in parked:
                if tree.cqs[name].root().name in own:
                    entries.append(_Entry(pw=pw, cq=name, status="skipped"))  # skipped unassessed; stays parked
                else:
                    self.parked.discard(name)
                    late.append((name, pw))
            more, more_inadmissible = self._nominate(late, tree, snap)
            inadmissible += more_inadmissible
            entries += more
            done = {id(e) for e in first}
            rest = sorted((e for e in entries if e.assignment is not None and id(e) not in done), key=_iterator_order)
        else:
            rest = entries
        for e in rest:
            self._process_entry(e, tree, snap, preempted, victims, held, own, now)
        if self.switches.unfit_classes_step_aside_together:
            for e in entries:
                if self.queues[e.cq].strict or e.assignment is None:
                    continue
                if e.assignment.mode is Mode.NO_FIT or (e.requeue_reason == NO_CANDIDATES and e.held_nothing):
                    self.unfit[self._class_of(e.cq, e.pw)] = self._admitted_in(e.cq, at_start)
        # 6. requeueAndUpdate for every entry not assumed.
        for e in [*entries, *inadmissible]:
            if e.status != "assumed":
                self._requeue(e)
        # The victims' pods stop at once: the workload controller sees their quota released.
        for key, _ in victims:
            self._evict(key, now)
        return bool(victims)

    def _class_of(self, cq: str, pw: PendingWorkload) -> tuple[str, object, tuple[int, ...]]:
        return (cq, shape_of(pw.workload), who(self.cluster_queues[cq], pw.priority, pw.queue_order_at))

    def _admitted_per_tree(self) -> dict[str, frozenset[str]]:
        """The state of each quota tree as far as an assessment goes: the workloads admitted in it."""
        by_root: dict[str, set[str]] = {}
        for key, aw in self.admitted.items():
            by_root.setdefault(self._structure.cqs[aw.admission.cluster_queue].root().name, set()).add(key)
        return {root: frozenset(keys) for root, keys in by_root.items()}

    def _admitted_in(self, cq: str, at_start: dict[str, frozenset[str]]) -> frozenset[str]:
        return at_start.get(self._structure.cqs[cq].root().name, frozenset())

    def _known_unfit(self, name: str, q: _CQueue, pw: PendingWorkload, at_start: dict[str, frozenset[str]]) -> bool:
        if not self.switches.unfit_classes_step_aside_together or q.strict:
            return False
        seen = self.unfit.get(self._class_of(name, pw))
        return seen is not None and seen == self._admitted_in(name, at_start)

    def _heap_order_in(self, q: _CQueue) -> Callable[[str], tuple[int, int, int, str]]:
        """baseCompareFunc: the sticky preemptor first (BestEffortFIFO), higher priority, earlier queue order
        timestamp, then UID."""

        def order(key: str) -> tuple[int, int, int, str]:
            pw = self.pending[key]
            sticky = 0 if q.sticky and q.preemptor == key else 1
            return (sticky, -pw.priority, pw.queue_order_at, pw.workload.uid)

        return order

    def _nominate(
        self, heads: list[tuple[str, PendingWorkload]], tree: QuotaTree, snap: Snapshot
    ) -> tuple[list[_Entry], list[_Entry]]:
        """Scheduler.nominate: an inactive ClusterQueue or a namespace it does not select makes the head an
        inadmissible entry; every other head gets its assignment and targets (getInitialAssignments)."""
        entries: list[_Entry] = []
        inadmissible: list[_Entry] = []
        for name, pw in heads:
            e = _Entry(pw=pw, cq=name)
            cq = self.cluster_queues[name]
            ns = self.namespaces.get(pw.workload.namespace)
            if name in tree.inactive:
                inadmissible.append(e)
            elif not selects(cq.namespace_selector, ns.labels if ns is not None else {}):
                e.requeue_reason = NAMESPACE_MISMATCH
                inadmissible.append(e)
            else:
                e.assignment, e.targets = self._assignments(pw, cq, tree.cqs[name], snap)
                entries.append(e)
        return entries, inadmissible

    def _assignments(
        self, pw: PendingWorkload, cq: ClusterQueue, node: Node, snap: Snapshot
    ) -> tuple[Assignment, list[Target]]:
        """Scheduler.getInitialAssignments: the flavor assigner with the preemption oracle; when its mode is
        Preempt, preemptor.GetTargets (classic). No partial admission."""
        p = Preemptor(pw=pw, cq=cq, node=node, usage={}, frs=frozenset(), excluded=set(), now=None)
        assigner = FlavorAssigner(
            cq=cq,
            node=node,
            flavors=self.flavors,
            group_of={r: i for i, g in enumerate(cq.resource_groups) for r in g.covered_resources},
            fair_sharing=False,
            oracle=lambda fr, quantity: oracle_mode(p, snap, fr, quantity, classical_targets),
        )
        a = assigner.assign(pw.workload)
        if a.mode is not Mode.PREEMPT:
            return a, []
        p.usage, p.frs = dict(a.usage), a.frs_need_preemption
        return a, classical_targets(p, snap)

    def _process_entry(
        self,
        e: _Entry,
        tree: QuotaTree,
        snap: Snapshot,
        preempted: dict[str, AdmittedWorkload],
        victims: list[tuple[str, str]],
        held: list[tuple[Node, dict[FlavorResource, int]]],
        own: set[str],
        now: Millis,
    ) -> None:
        """Scheduler.processEntry. `held`: the usage this cycle added to the snapshot for entries it did not admit
        (preemptors, resourcesToReserve), which admitd's over-commit switch leaves out."""
        a = e.assignment
        assert a is not None
        node = tree.cqs[e.cq]
        if a.mode is Mode.NO_FIT:
            e.requeue_reason = NO_FIT
            return
        if a.mode is Mode.PREEMPT and not e.targets:
            # reserveCapacityForUnreclaimablePreempt: unless the ClusterQueue can always reclaim, it holds
            # resourcesToReserve in this cycle's snapshot.
            e.requeue_reason = NO_CANDIDATES
            blocked = self.switches.no_hold_when_a_cohort_limit_blocks and blocked_above(node, a)
            reserve = {}
            if self.cluster_queues[e.cq].preemption.reclaim_within_cohort is not PreemptionPolicy.ANY and not blocked:
                reserve = _resources_to_reserve(node, a)
                snap.add_usage(node, reserve)
                held.append((node, reserve))
            e.held_nothing = not any(v > 0 for v in reserve.values())
            return
        if self.switches.hold_evicted_until_next_instant and e.pw.evicted_now(now):
            e.requeue_reason = HELD  # admitd: not admitted again, nor preempting, at the instant it stopped
            return
        root = node.root().name
        if self.switches.borrowers_after_the_trees_own and a.borrowing and root in own:
            e.status = "skipped"  # admitd: a queue of its tree takes back its own quota in this cycle
            self.parked.add(e.cq)
            return
        own_quota = self.switches.borrowers_after_the_trees_own and not a.borrowing  # marks `own` where it acts
        if any(t.victim.key in preempted for t in e.targets):
            e.status = "skipped"  # "Workload has overlapping preemption targets with another workload"
            return
        if not _fits(snap, node, a.usage, [*preempted.values(), *(t.victim for t in e.targets)]):
            e.status = "skipped"  # "Workload no longer fits after processing another workload"
            return
        if (
            self.switches.no_overcommit_while_victims_leave
            and a.mode is Mode.FIT
            and preempted
            and not _fits_as_running(snap, node, a.usage, held)
        ):
            snap.add_usage(node, a.usage)  # admitd: it waits for the victims, holding its room
            held.append((node, dict(a.usage)))
            if own_quota:
                own.add(root)
            e.status = "skipped"
            return
        for t in e.targets:
            preempted[t.victim.key] = t.victim
        snap.add_usage(node, a.usage)
        if own_quota:
            own.add(root)
        if a.mode is Mode.PREEMPT:
            held.append((node, dict(a.usage)))
            for t in e.targets:  # Preemptor.IssuePreemptions
                victim = t.victim
                self.decisions.append(
                    Decision(now, "preempt", victim.key, victim.admission.cluster_queue, preemptor=e.pw.key)
                )
                victims.append((victim.key, e.pw.key))
            e.requeue_reason = PENDING_PREEMPTION
            return
        # admit: the workload is assumed in the cache.
        e.status = "assumed"
        admission = Admission(
            cluster_queue=e.cq,
            pod_sets=tuple(
                PodSetAssignment(name=ps.name, count=ps.count, flavors=dict(ps.flavors), usage=dict(ps.usage))
                for ps in a.pod_sets
            ),
        )
        self.admitted[e.pw.key] = AdmittedWorkload(
            workload=e.pw.workload,
            priority=e.pw.priority,
            admission=admission,
            admitted_at=now,
            queue_order_at=e.pw.queue_order_at,
            evicted_at=e.pw.evicted_at,
        )
        del self.pending[e.pw.key]
        q = self.queues[e.cq]
        if q.preemptor == e.pw.key:  # ClusterQueue.delete clears the preemptor workload
            q.preemptor, q.sticky = None, False
        self.decisions.append(Decision(now, "admit", e.pw.key, e.cq, flavors=_flavors(admission)))

    def _requeue(self, e: _Entry) -> None:
        """requeueAndUpdate -> ClusterQueue.RequeueIfNotPresent -> requeueIfNotPresent."""
        q = self.queues[e.cq]
        key = e.pw.key
        reason = e.requeue_reason
        if e.status != "" and reason == GENERIC:
            reason = FAILED_AFTER_NOMINATION
        if reason == HELD:
            self.held.add(key)
            if not q.strict:
                return
            reason = GENERIC  # a StrictFIFO head held back stays its queue's head: it blocks the queue meanwhile
        if q.strict:
            immediate = reason != NAMESPACE_MISMATCH
        else:
            immediate = reason in (FAILED_AFTER_NOMINATION, PENDING_PREEMPTION)
        if reason == PENDING_PREEMPTION:
            q.preemptor, q.sticky = key, not q.strict
        elif q.preemptor == key:
            q.preemptor, q.sticky = None, False
        if immediate or q.queue_inadmissible_cycle >= q.pop_cycle:
            q.inadmissible.discard(key)
            q.active.add(key)
        elif key not in q.active:
            q.inadmissible.add(key)


def _borrowing(e: _Entry) -> int:
    return e.assignment.borrowing if e.assignment is not None else 0


def _iterator_order(e: _Entry) -> tuple[int, int, int, str]:
    return (_borrowing(e), -e.pw.priority, e.pw.queue_order_at, e.pw.key)


def _fits(snap: Snapshot, node: Node, usage: Mapping[FlavorResource, int], removed: list[AdmittedWorkload]) -> bool:
    """scheduler.fits: the ClusterQueue fits `usage` with this cycle's preempted workloads and the entry's own
    targets removed from the snapshot (SimulateWorkloadRemoval), then restored."""
    gone = list({aw.key: aw for aw in removed}.values())
    for aw in gone:
        snap.remove_workload(aw)
    try:
        return fits(node, usage)
    finally:
        for aw in gone:
            snap.add_workload(aw)


def _fits_as_running(
    snap: Snapshot, node: Node, usage: Mapping[FlavorResource, int], held: list[tuple[Node, dict[FlavorResource, int]]]
) -> bool:
    """admitd's over-commit check (`Switches.no_overcommit_while_victims_leave`): does `usage` fit beside what runs
    now, the cycle's victims still holding their quota and no usage of entries not admitted (they run nothing yet)?"""
    for n, u in held:
        snap.remove_usage(n, u)
    try:
        return fits(node, usage)
    finally:
        for n, u in held:
            snap.add_usage(n, u)


def _resources_to_reserve(node: Node, a: Assignment) -> dict[FlavorResource, int]:
    """quotaResourcesToReserve: up to nominal, or up to nominal + borrowingLimit when the workload borrows."""
    out: dict[FlavorResource, int] = {}
    for fr, v in a.usage.items():
        limits = node.quotas.get(fr)
        nominal = limits.nominal if limits is not None else 0
        used = node.usage.get(fr, 0)
        if a.borrowing > 0:
            if limits is None or limits.borrowing_limit is None:
                out[fr] = v
            else:
                out[fr] = min(v, nominal + limits.borrowing_limit - used)
        else:
            out[fr] = max(0, min(v, nominal - used))
    return out


def _cqs_under(node: Node) -> list[str]:
    if node.is_cq:
        return [node.name]
    out: list[str] = []
    for child in node.child_cqs:
        out.append(child.name)
    for child in node.child_cohorts:
        out.extend(_cqs_under(child))
    return out


def _flavors(admission: Admission) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    return tuple((ps.name, tuple(sorted(ps.flavors.items()))) for ps in admission.pod_sets)
