"""The admission cycle: one pure function from a read-only `ClusterView` to decision events.

What one cycle does, in this order (Kueue's semantics, kueue-notes section 2, unless said otherwise):

1. Unrouted workloads get `LocalQueueNotFound` / `ClusterQueueNotFound`. Queues with `stopPolicy: HoldAndDrain`
   (ClusterQueue or LocalQueue) preempt their admitted workloads (`preemptor=None`). Pending workloads of stopped
   queues get `QueueStopped`; of inactive ClusterQueues (unknown flavor, cohort cycle) `ClusterQueueInactive`.
2. One working snapshot of the quota tree holds "projected" usage: admitted usage, minus victims claimed this cycle
   (they leave soon), plus what waiting preemptors reserve. An admission must fit both the projected usage and the
   real usage (victims still counted), so nothing is ever over-committed, even while victims drain.
3. The cycle runs *passes*, each one Kueue cycle (tests/reference/kueue_model.py is the reference): every
   ClusterQueue offers its head (`Manager.Heads`), the pass's entries are ordered as Kueue's classic iterator does
   (lower borrowing level first, then priority, then FIFO, then key) and processed one by one against the snapshot,
   each admission's usage added at once. A BestEffortFIFO head that cannot be admitted gets its reason and is
   stepped over (Kueue's inadmissible set): its queue offers its next workload in the next pass, except workloads
   whose class was already found unfitting in the very same state, which step aside with it (Kueue's equivalence
   classes; the walk by runs steps over them whole). A StrictFIFO queue offers its head, and when the head cannot be
   admitted the rest of the queue gets `BlockedByHead`. An entry that no longer fits after an earlier one is
   offered again in the next pass. A preemptor without candidates reserves quota for its pass only (Kueue's
   resourcesToReserve lives in its cycle's snapshot), a StrictFIFO one for the rest of the cycle (it is its queue's
   head in every cycle). Passes repeat until one offers nothing, so one call admits what Kueue's cycles at that
   instant would, in Kueue's order. GOING BEYOND KUEUE: Kueue runs a cycle every 100 ms at most; these run at once.
4. Preemption (classic, or fair sharing when `EngineConfig.fair_sharing`, which also replaces the classic order of
   a pass by Kueue's DRS tournament per quota tree, re-run after every processed entry): a preemptor claims its
   victims (emitting `WorkloadPreempted` for those not already evicting) and reserves its usage; it stays pending
   with `WaitingForPreemptedWorkloads`. Victims claimed this cycle are never claimed again. A pass that preempts
   is the cycle's last: Kueue's next cycle takes a fresh snapshot, in which the victims leave (at once in the
   simulator) and the preemptor is its queue's head again, so the cycle ends and asks for the next
   (`AdmissionEngine.deferred`); a queue never offers a second entry after its preemptor in one cycle. A workload
   that would fit once already-evicting workloads are gone waits for them without preempting anything new. With
   fair sharing,
   a workload that needs preemption in a tree where this cycle already admitted a workload it could preempt is not
   assessed: its queue waits for the next cycle (`_Kind.DEFERRED`; `AdmissionEngine.deferred` asks the caller for
   one), because Kueue chooses victims at a cycle's start, where every workload holding quota is a candidate.
   Meanwhile it holds its room for the rest of the cycle. Fair-sharing victims are chosen on shares that leave
   out what other queues' waiting preemptors reserve (Kueue does not see it), though they must make room with it
   counted; what the preemptor's own queue reserves counts (Kueue would have admitted that queue's earlier
   preemptor before assessing this one). A workload stopped at this instant (`PendingWorkload.evicted_now`) is not
   admitted again at this instant, neither into free room nor by preempting in turn: it is assessed again from the
   next instant on, so no instant undoes its own decisions (issue 9).
5. BestEffortFIFO's sticky preemptor: a workload whose last reason is `WaitingForPreemptedWorkloads` naming victims
   (its own, or already leaving ones it waits for) is offered before the rest of its queue; one that names none
   (it waits only for room this cycle's victims free) keeps its place in queue order. A workload that needs
   preemption but has no candidates reserves capacity against other queues (Kueue's resourcesToReserve) unless its
   queue may always reclaim; admitd does this once per queue per pass, for the first such workload, and lifts it
   while serving that workload's own queue.

Pending reasons are written only when they differ from `last_reason`. To keep deep queues from flooding the log,
only the first unfitting workload of each queue per cycle is compared in full; for the others a change of the
`available` figures alone (quota used elsewhere) is not news, so their shortages show `available` as last written.

The walk of a BestEffortFIFO queue costs what it writes, not the queue's depth (Kueue's equivalence hashing and
inadmissible set play this part there). With the fold's `PendingIndex`, the queue's sticky members are walked one
by one, the rest through runs of alike workloads (same shape and priority, same coarse last reason) merged in queue
order: once the queue's headline is written and a class was found NoFit in the current state of the tree, a run
whose coarse last reason is that result's is stepped over whole, because each of its members would be NoFit and
`_write_no_fit` would write nothing for it. Everything else is visited as before, so the events are exactly those
of visiting every workload (tests/unit/test_pending_runs.py and test_engine_properties.py check this against
`view.pending_index=None`). A walk that stops at an entry stands at that entry: if the entry is offered again in a
later pass, the walk resumes there, in the tree as that pass finds it.
StrictFIFO queues, queues with a LocalQueue or namespace that a member steps aside for, and
LowerOrNewerEqualPriority queues (whose outcome depends on each workload's age) are visited one by one.

What only makes a call cheaper is listed in `Optimisations`, each of which can be switched off; the engine decides
exactly the same without them (tests/unit/test_optimisations_invisible.py).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from daemon.domain.events import (
    Borrowed,
    Event,
    Freed,
    WorkloadAdmitted,
    WorkloadPending,
    WorkloadPreempted,
)
from daemon.domain.fairpreemption import DEFAULT_STRATEGIES, fair_targets
from daemon.domain.fairsharing import tournament
from daemon.domain.flavors import (
    Assignment,
    FlavorAssigner,
    Mode,
    PMode,
    can_be_partially_admitted,
    search_counts,
    with_counts,
)
from daemon.domain.model import (
    Admission,
    ClusterQueue,
    Cohort,
    FlavorResource,
    JobManagement,
    Millis,
    PendingReason,
    PendingReasonKind,
    PodSetAssignment,
    PreemptionPolicy,
    QueueingStrategy,
    ResourceFlavor,
    Shortage,
    StopPolicy,
    Workload,
    selects,
)
from daemon.domain.ordering import candidate_order, entry_order
from daemon.domain.podsready import WAITING, WaitForPodsReady, blocking
from daemon.domain.preemption import Preemptor, Target, classical_targets, oracle_mode, workload_fits
from daemon.domain.quantity import format_quantity
from daemon.domain.quota import Node, QuotaTree, Snapshot, cq_available, fits, nominal, sat_add, sat_sub
from daemon.domain.view import (
    AdmittedWorkload,
    ClusterView,
    Coarse,
    PendingIndex,
    PendingWorkload,
    Shape,
    coarse,
    is_sticky,
    queue_key,
    shape_of,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    fair_sharing: bool = False
    fair_sharing_strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    """Kueue's `fairSharing.preemptionStrategies`, tried in this order (see `daemon.domain.fairpreemption`)."""
    reserve_without_candidates: bool = True
    """Kueue's resourcesToReserve: a workload that needs preemption but has no candidates holds quota against other
    queues for the rest of the cycle. It makes a cycle's outcome depend on the order of its passes, so a second
    cycle over the first one's output may admit what the hold kept back; turn it off to get a strict fixpoint."""
    wait_for_pods_ready: WaitForPodsReady | None = None
    """Kueue's `waitForPodsReady` (None: off). The cycle honours blockAdmission; the timeouts and requeues are
    decided by `daemon.domain.podsready.decide`, which the admit stage runs before each cycle."""
    partial_admission: bool = True
    """Kueue's PartialAdmission feature gate (on by default): a workload with a pod set's `min_count` that fits
    neither whole nor by preempting at its full count is admitted with the largest counts that fit
    (`daemon.domain.flavors.search_counts`)."""
    jobs: JobManagement = field(default_factory=JobManagement)
    """Which jobs are managed at all (manageJobsWithoutQueueName, managedJobsNamespaceSelector): read by the
    borders that observe jobs (`daemon.domain.management`), not by the cycle."""
    visibility_on_demand: bool = False
    """Kueue's VisibilityOnDemand feature gate: `admitd run` serves Kueue's visibility API (as `--visibility`).
    Off by default here (Kueue's default is on): an aggregated API needs an APIService. Read by `admitd run` only."""
    web_ui: bool = False
    """admitd's own `webUI.enable` (not a Kueue setting): `admitd run` serves the read-only web view at /ui/ (as
    `--ui`). Off by default. Read by `admitd run` only."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Optimisations:
    """What makes a call cheap without changing what it decides: each can be switched off, and
    tests/unit/test_optimisations_invisible.py checks on random scenarios that the engine decides exactly the same
    with all of them off."""

    idle: bool = True
    """No cycle at all when nothing waits and nothing drains (`_nothing_to_decide`)."""
    memo: bool = True
    """`AdmissionEngine`'s caches across calls: the inadmissible memo per class and the unchanged-queue skip."""
    runs: bool = True
    """Walk a BestEffortFIFO queue through the fold's `PendingIndex`, stepping over runs whose members would all
    be NoFit and write nothing (`_Runs`), instead of one workload at a time."""
    lone_holds: bool = True
    """A queue alone in its quota tree (every other queue of the tree offers nothing more in this call) whose head
    was found without candidates in a pass that changed nothing else: every member of that class would, one pass
    each, hold the same room in the same state, seen by nobody, and write the same reason. They step aside
    together in one pass (`_Cycle._lone`). Kueue's issue 9715 pattern: a ClusterQueue 10,000 deep whose head does
    not fit took 10,000 passes per call."""


ALL_OPTIMISATIONS = Optimisations()
NO_OPTIMISATIONS = Optimisations(idle=False, memo=False, runs=False, lone_holds=False)


# --- public entry points --------------------------------------------------------------------------------------


def decide(view: ClusterView, now: Millis, config: EngineConfig = EngineConfig()) -> list[Event]:
    """One admission cycle. Pure: same view, now and config -> the same events, in the same order."""
    tree = QuotaTree.build(view.cluster_queues, view.cohorts, view.flavors, view.rejected)
    return _Cycle(view, now, config, tree, {}, None, ALL_OPTIMISATIONS).run()


class AdmissionEngine:
    """Same decisions as decide(), plus caches that make a cycle's cost independent of the number of pending
    workloads that cannot fit: the quota tree's structure (rebuilt only when the configuration changes), each
    admitted workload's usage, and an inadmissible memo keyed by the tree's `view.generation` (a class of alike
    workloads found unfitting in a ClusterQueue, evaluated against an untouched tree at generation g, is not
    evaluated again while it stays g; the memo holds one generation per queue, so it does not grow with the
    number of workloads ever seen)."""

    def __init__(self, config: EngineConfig = EngineConfig(), optimisations: Optimisations = ALL_OPTIMISATIONS) -> None:
        self._config = config
        self._opt = optimisations
        self._tree: QuotaTree | None = None
        self._tree_key: (
            tuple[dict[str, ClusterQueue], dict[str, Cohort], dict[str, ResourceFlavor], dict[str, tuple[str, ...]]]
            | None
        ) = None
        self._usage_cache: dict[str, tuple[object, dict[FlavorResource, int]]] = {}
        self._memo = _Memo()
        self.deferred = False
        """Whether the last cycle left work for the next one (it preempted, so it ended there; or with fair sharing
        a preemptor was left, see `_Kind.DEFERRED`): run another cycle once its decisions are in the fold, even if
        nothing is observed meanwhile."""
        self.retry_at: Millis | None = None
        """When the last cycle held back a workload stopped at its instant (`PendingWorkload.evicted_now`): the next
        instant, at which a cycle must run even if nothing is observed, or the workload would wait for whatever
        happens next (in a quiet cluster, for good). None otherwise."""

    def decide(self, view: ClusterView, now: Millis) -> list[Event]:
        if self._opt.idle and _nothing_to_decide(view):
            self.deferred = False
            self.retry_at = None
            return []
        key = (dict(view.cluster_queues), dict(view.cohorts), dict(view.flavors), dict(view.rejected or {}))
        if self._tree is None or self._tree_key != key:
            self._tree = QuotaTree.build(view.cluster_queues, view.cohorts, view.flavors, view.rejected)
            self._tree_key = key
            self._memo = _Memo()
        if len(self._usage_cache) > 2 * len(view.admitted) + 1024:
            self._usage_cache = {}
        memo = self._memo if self._opt.memo else None
        cycle = _Cycle(view, now, self._config, self._tree, self._usage_cache, memo, self._opt)
        events = cycle.run()
        self.deferred = cycle.deferred
        self.retry_at = now + 1 if cycle.held_back else None
        return events


def _nothing_to_decide(view: ClusterView) -> bool:
    """Whether a cycle would surely decide nothing: no workload waits anywhere (routed or not) and no stop policy
    drains admitted workloads. Every event a cycle writes is about a pending workload (its admission, its pending
    reason, the preemptions it needs) or a HoldAndDrain drain, and a skipped cycle leaves the engine's caches
    valid (usage follows the fold's journal; memo entries are keyed by what they depend on). A completion with
    nothing waiting then costs no cycle: 10,000 of them took ~0.5 s in the 10,000-job benchmark."""
    if view.pending_unrouted or any(view.pending_by_cq.values()):
        return False
    drain = StopPolicy.HOLD_AND_DRAIN
    return not any(cq.stop_policy is drain for cq in view.cluster_queues.values()) and not any(
        lq.stop_policy is drain for lq in view.local_queues.values()
    )


# --- results of evaluating one workload ----------------------------------------------------------------------


class _Kind(Enum):
    FIT = "fit"
    PREEMPT = "preempt"  # targets found
    WAIT_EVICTIONS = "wait"  # fits once already-evicting workloads are gone
    NO_TARGETS = "no-targets"  # preemption needed, nobody to preempt
    NO_FIT = "no-fit"
    DEFERRED = "deferred"  # needs preemption where this cycle admitted: assessed again next cycle (fair sharing)


@dataclass(slots=True)
class _Result:
    kind: _Kind
    assignment: Assignment | None = None
    reason: PendingReason | None = None
    targets: list[Target] = field(default_factory=list)
    waits_on: list[AdmittedWorkload] = field(default_factory=list)
    coarse_reason: Coarse | None = None  # coarse(reason), computed on first use
    workload: Workload | None = None  # partial admission: the workload at the counts `assignment` is for
    volatile: bool = False  # depends on the instant, not only on the tree: never kept in the engine's memo

    def coarse(self) -> Coarse:
        if self.coarse_reason is None:
            assert self.reason is not None
            self.coarse_reason = coarse(self.reason)
        return self.coarse_reason


@dataclass(slots=True)
class _QueueMemo:
    generation: int
    pending_version: int
    config: ClusterQueue


class _Memo:
    """The engine's inadmissible memo. Only results computed against a tree untouched in their cycle are stored."""

    def __init__(self) -> None:
        # Per ClusterQueue: the tree generation, and the NoFit / NoTargets result of each class (shape, who) then.
        self.classes: dict[str, tuple[int, dict[tuple[object, ...], _Result]]] = {}
        self.queues: dict[str, _QueueMemo] = {}


# --- the cycle ----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Hold:
    node: Node
    usage: dict[FlavorResource, int]
    active: bool = True  # in the snapshot now (lifted while its own queue is being served)
    touches: int = 1  # how often it touched its tree (see `_Cycle._end_pass`)


_RunEntry = tuple[
    tuple[int, int, str], int, PendingWorkload, Iterator[PendingWorkload], tuple[Shape, tuple[int, ...]], Coarse | None
]
"""(queue key of the run's next member, tie-break, that member, the rest of the run, class, coarse reason)."""


class _Runs:
    """The non-sticky part of a BestEffortFIFO queue, walked through its `PendingIndex` instead of one workload at
    a time. The runs (same shape and priority, same coarse last reason) are merged in queue order with a heap; a
    run whose members would all be quiet (see `_Cycle._quiet`) is dropped from the heap, which is rebuilt from where
    the walk stands whenever the tree's state changes: at the member offered (and not walked past yet, e.g. an
    entry that no longer fits, offered again next pass), or after the last member walked past."""

    __slots__ = ("heap", "inclusive", "index", "start", "state", "ties")

    def __init__(self, index: PendingIndex) -> None:
        self.index = index
        self.start: tuple[int, int, str] | None = None  # the queue key where the walk stands (None: at the start)
        self.inclusive = True  # whether the member at `start` is still to walk
        self.heap: list[_RunEntry] = []
        self.state: tuple[int, int] | None = None  # the (tree version, removed) the heap was built at
        self.ties = 0

    def rebuild(self, state: tuple[int, int], who_of: Mapping[int, tuple[int, ...]]) -> None:
        heap: list[_RunEntry] = []
        for (shape, priority), by_reason in self.index.groups.items():
            cls = (shape, who_of[priority])
            for reason, run in by_reason.items():
                if self.start is None:
                    rest: Iterator[PendingWorkload] = iter(run)
                else:
                    rest = run.irange_key(self.start, inclusive=(self.inclusive, True))
                first = next(rest, None)
                if first is not None:
                    self.ties += 1
                    heap.append((queue_key(first), self.ties, first, rest, cls, reason))
        heapq.heapify(heap)
        self.heap = heap
        self.state = state

    def offer(self, entry: _RunEntry) -> PendingWorkload:
        """The heap's top is the next member to walk: everything before it is done."""
        self.start, self.inclusive = entry[0], True
        return entry[2]

    def advance(self, pw: PendingWorkload) -> None:
        self.start, self.inclusive = queue_key(pw), False
        heap = self.heap
        if heap and heap[0][2] is pw:
            _, _, _, rest, cls, reason = heap[0]
            following = next(rest, None)
            if following is None:
                heapq.heappop(heap)
            else:
                self.ties += 1
                heapq.heapreplace(heap, (queue_key(following), self.ties, following, rest, cls, reason))
        else:
            self.state = None  # not where the heap stands: rebuild it from `start` at the next look


@dataclass(slots=True)
class _Queue:
    name: str
    cq: ClusterQueue
    node: Node
    seq: Sequence[PendingWorkload]  # walked by position: the whole queue, or only its sticky members with `runs`
    assigner: FlavorAssigner
    strict: bool
    index: PendingIndex | None = None
    runs: _Runs | None = None  # the rest of the queue, when it can be walked by runs
    pos: int = 0
    done: bool = False
    headline_written: bool = False
    reserved: bool = False
    hold: _Hold | None = None  # what this queue's first NO_TARGETS workload reserves against other queues
    hold_for: Assignment | None = None
    emitted: bool = False  # any event about this queue's pending workloads this cycle
    acted: bool = False  # offered an entry this cycle
    volatile: bool = False  # some outcome depended on the instant (see `_Result.volatile`): not memoised
    equivalent: dict[tuple[object, ...], _Result] = field(default_factory=dict)


@dataclass(slots=True)
class _Entry:
    queue: _Queue
    pw: PendingWorkload
    result: _Result

    def level(self) -> int:
        """How high in the tree it borrows (0: it does not)."""
        return self.result.assignment.borrowing if self.result.assignment is not None else 0

    def order(self) -> tuple[int, int, int, str, str]:
        return entry_order(self.level(), self.pw, self.queue.name)


class _Cycle:
    def __init__(
        self,
        view: ClusterView,
        now: Millis,
        config: EngineConfig,
        tree: QuotaTree,
        usage_cache: dict[str, tuple[object, dict[FlavorResource, int]]],
        memo: _Memo | None,
        opt: Optimisations,
    ) -> None:
        self.view = view
        self.opt = opt
        self.now = now
        self.config = config
        self.tree = tree
        self.memo = memo
        self.snap = Snapshot(tree, view.admitted_by_cq, usage_cache, view.admitted_journal)
        # Workloads admitted by this call's passes, per ClusterQueue: preemption candidates in the passes after
        # (each pass is a Kueue cycle, whose snapshot holds what the cycles before admitted).
        self.admitted_now: dict[str, dict[str, AdmittedWorkload]] = {}
        self.snap.workloads_by_cq = _WithAdmitted(view.admitted_by_cq, self.admitted_now)
        self.events: list[Event] = []
        # Per tree: victims claimed this cycle and usage reserved by waiting preemptors, to recover real usage.
        self.claimed: dict[str, list[AdmittedWorkload]] = {}
        self.reserved: dict[str, list[_Hold]] = {}
        self.real_cq_usage: dict[str, dict[FlavorResource, int]] = {
            name: dict(node.usage) for name, node in tree.cqs.items()
        }
        self.evicting: dict[str, list[AdmittedWorkload]] = {}
        # The fold's evicting subset when it has one: a pass over every admitted workload per cycle is quadratic.
        maybe_evicting = view.evicting.values() if view.evicting is not None else view.admitted.values()
        for aw in maybe_evicting:
            node = tree.cqs.get(aw.admission.cluster_queue)
            if node is not None and aw.evicting:
                self.evicting.setdefault(node.tree, []).append(aw)
        for lst in self.evicting.values():
            lst.sort(key=lambda aw: aw.key)
        self.ns_match: dict[tuple[str, str], bool] = {}
        # Waiting preemptors that keep the victims they claimed in an earlier cycle (see `_keep_claims`).
        self.kept: dict[str, list[AdmittedWorkload]] = {}
        self.own_victims: dict[str, list[AdmittedWorkload]] = {}
        self.admitted_in: dict[str, set[str]] = {}  # per tree, the ClusterQueues where this cycle admitted
        self.deferred = False  # some queue waits for the next cycle (`_Kind.DEFERRED`)
        self.held_back = False  # some workload stopped at this instant was held back (`evicted_now`)
        self.preempted = False  # this pass preempted: the cycle ends with it (see `run`)
        self.known = False  # whether the last `_evaluate` found its class's result already known in this state
        self.holding: list[_Queue] = []  # queues whose preemptor without candidates holds quota (see `_end_pass`)
        # A tree whose pass changed nothing but holds that `_end_pass` took away again is in the state it had at
        # the pass's start: (version now, the version of that state), so results found then apply again.
        self.same_as: dict[str, tuple[int, int]] = {}
        self.pass_start: dict[str, int] = {}  # per tree, its version (`_version`) at the pass's start
        self.pass_start_raw: dict[str, int] = {}  # and the snapshot's own count of its changes then
        self.live: dict[str, int] = {}  # per tree, its queues that may still offer an entry (at the pass's start)
        # waitForPodsReady.blockAdmission: while an admitted workload is not ready, nothing is admitted (preemptions
        # go on). After this cycle's first admission, that workload is the one not ready.
        self.pods_blocked = blocking(view, config.wait_for_pods_ready)

    # --- driver -------------------------------------------------------------------------------------------------

    def run(self) -> list[Event]:
        self._unrouted()
        self._drain()
        queues = self._queues()
        self._keep_claims(queues)
        open_queues = queues  # those not done yet (a queue once done stays done for the call)
        while True:
            # One pass is one Kueue cycle: every queue offers its head (`Manager.Heads`); a head that cannot be
            # admitted is stepped over, and its queue offers the next one in the next pass.
            entries: list[_Entry] = []
            stepped = False
            open_queues = [q for q in open_queues if not q.done]
            self.pass_start_raw = dict(self.snap.touched)
            self.pass_start = {tree: self._version(tree) for tree in self.snap.touched}
            live: dict[str, int] = {}
            for q in open_queues:
                live[q.node.tree] = live.get(q.node.tree, 0) + 1
            self.live = live
            for q in open_queues:
                if q.done:
                    continue
                entry = self._next_entry(q)
                if entry is not None:
                    entries.append(entry)
                elif not q.done:
                    stepped = True
            if not entries and not stepped:
                break
            if self.config.fair_sharing:
                self._process_fairly(entries)
            else:
                entries.sort(key=_Entry.order)  # makeClassicalIterator
                for e in entries:
                    self._process(e)
            if self.preempted:
                # Kueue's next cycle takes a fresh snapshot, in which the victims are gone once evicted: the cycle
                # ends here, and asks the caller for the next one once its decisions are in the fold.
                self.deferred = True
                break
            self._end_pass()
        self._remember(queues)
        return self.events

    def _end_pass(self) -> None:
        """Kueue's reservation for a preemptor without candidates lives in its cycle's snapshot only: the next
        pass starts without it. A StrictFIFO head stays its queue's head (requeued at once), so it reserves again in
        every cycle: its hold stays.

        A tree whose only changes in the pass were such holds is back in the state the pass started in; its version
        is made an alias of that state's (`same_as`), so what was found in that state applies again."""
        undone: dict[str, int] = {}
        for q in self.holding:
            hold = q.hold
            if hold is None or q.strict:
                continue
            if hold.active:
                self.snap.remove_usage(q.node, hold.usage)
            self.reserved[q.node.tree].remove(hold)
            self.snap.touch(q.node.tree)
            undone[q.node.tree] = undone.get(q.node.tree, 0) + hold.touches + 1
            q.hold = q.hold_for = None
            q.reserved = False
        self.holding = [q for q in self.holding if q.hold is not None]
        for tree, touches in undone.items():
            if self.snap.version(tree) - self.pass_start_raw.get(tree, 0) == touches:
                self.same_as[tree] = (self.snap.version(tree), self.pass_start.get(tree, 0))

    def _version(self, tree: str) -> int:
        """The tree's state in this call: the snapshot's count of changes, or the earlier count whose state it is
        in again (`_end_pass`). Results keyed by it (`_Queue.equivalent`, `_Runs.state`) are results in that state."""
        raw = self.snap.version(tree)
        alias = self.same_as.get(tree)
        return alias[1] if alias is not None and alias[0] == raw else raw

    def _lone(self, q: _Queue) -> bool:
        """Every other queue of `q`'s tree offers nothing more in this call (`Optimisations.lone_holds`)."""
        return self.opt.lone_holds and not q.strict and self.live.get(q.node.tree, 0) <= 1

    def _process_fairly(self, entries: list[_Entry]) -> None:
        """Fair sharing: within each quota tree, Kueue's tournament picks the next entry against the current usage
        (trees are independent, so they are served one after the other, by name)."""
        by_tree: dict[str, dict[str, _Entry]] = {}
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
                    won = min(remaining.values(), key=_Entry.order)
                del remaining[won.queue.name]
                self._process(won)

    def _generation(self, tree: str) -> int:
        return self.view.generation.get(tree, 0)

    # --- step 2b: claims kept from earlier cycles ---------------------------------------------------------------

    def _keep_claims(self, queues: list[_Queue]) -> None:
        """A waiting preemptor keeps the victims it claimed (its last reason names them, the fold remembers it) as
        long as they are still leaving: first every such victim leaves the projected usage, then each preemptor, in
        queue order, reserves its usage if it fits there. One that no longer fits (something else was admitted
        meanwhile) is assessed as usual, but the victims of others stay theirs, so no cycle re-derives a different
        set for a preemptor that still fits with its own (which would let a second cycle undo the first one)."""
        owners: list[tuple[tuple[int, int, str], _Queue, PendingWorkload, list[AdmittedWorkload]]] = []
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
                    and key not in self.snap.removed
                    and aw.admission.cluster_queue in self.tree.cqs
                ]
                if live and self._precheck(q, pw) is None:
                    owners.append((queue_key(pw), q, pw, live))
        if not owners:
            return
        owners.sort(key=lambda o: o[0])
        for _, _, pw, live in owners:
            for aw in live:
                if aw.key not in self.snap.removed:
                    self._claim(aw)
            self.own_victims[pw.key] = live
        for _, q, pw, live in owners:
            a = self._assign_plainly(q, pw.workload)
            if a.mode is not Mode.FIT and self.config.partial_admission and can_be_partially_admitted(pw.workload):
                # It may have claimed them for fewer pods (partial admission): the largest counts that fit now.
                a = self._largest_plain_fit(q, pw.workload) or a
            if a.mode is Mode.FIT:
                self._reserve(q.node, a.usage)
                self.kept[pw.key] = live

    # --- step 1: routing, stop policies, inactive queues ----------------------------------------------------------

    def _pending(self, pw: PendingWorkload, cq: str | None, reason: PendingReason) -> bool:
        if pw.last_reason == reason:
            return False
        self.events.append(WorkloadPending(workload=pw.key, at=self.now, cluster_queue=cq, reason=reason))
        return True

    def _unrouted(self) -> None:
        for key in sorted(self.view.pending_unrouted):
            pw = self.view.pending_unrouted[key]
            lq = self.view.local_queues.get(pw.local_queue) if pw.local_queue else None
            if pw.held is not None:  # e.g. its priority class does not exist: no queue sees it
                reason = pw.held
            elif not pw.local_queue:
                # manageJobsWithoutQueueName: managed (suspended) though it names no LocalQueue, and the namespace
                # had no LocalQueue `default` when it was created (Kueue: "LocalQueue  doesn't exist").
                reason = PendingReason(
                    kind=PendingReasonKind.LOCAL_QUEUE_NOT_FOUND,
                    message=f"the job has no kueue.x-k8s.io/queue-name label and namespace {pw.workload.namespace} "
                    "had no LocalQueue named default when it was created; it stays suspended "
                    "(manageJobsWithoutQueueName) until it is given a queue-name label",
                )
            elif lq is None:
                reason = PendingReason(
                    kind=PendingReasonKind.LOCAL_QUEUE_NOT_FOUND, message=f"LocalQueue {pw.local_queue} doesn't exist"
                )
            else:
                reason = PendingReason(
                    kind=PendingReasonKind.CLUSTER_QUEUE_NOT_FOUND,
                    message=f"ClusterQueue {lq.cluster_queue} doesn't exist",
                )
            self._pending(pw, None, reason)

    def _drain(self) -> None:
        drains: list[tuple[AdmittedWorkload, str]] = []
        for name in sorted(self.view.cluster_queues):
            cq = self.view.cluster_queues[name]
            admitted = self.view.admitted_by_cq.get(name, {})
            if cq.stop_policy is StopPolicy.HOLD_AND_DRAIN:
                drains.extend((admitted[k], "ClusterQueueStopped") for k in sorted(admitted))
        for lq_key in sorted(self.view.local_queues):
            lq = self.view.local_queues[lq_key]
            if lq.stop_policy is not StopPolicy.HOLD_AND_DRAIN:
                continue
            admitted = self.view.admitted_by_cq.get(lq.cluster_queue, {})
            for k in sorted(admitted):
                wl = admitted[k].workload
                if wl.namespace == lq.namespace and wl.queue_name == lq.name:
                    drains.append((admitted[k], "LocalQueueStopped"))
        for aw, reason in drains:
            if aw.evicting or aw.key in self.snap.removed:
                continue
            self._claim(aw)
            policy = "stopPolicy=HoldAndDrain"
            self._preempted(aw, None, None, reason, policy)

    def _preempted(self, aw: AdmittedWorkload, by: str | None, by_cq: str | None, reason: str, policy: str) -> None:
        usage = self.snap.usage_of(aw)
        freed = tuple(Freed(flavor=f, resource=r, amount=usage[(f, r)]) for f, r in sorted(usage))
        self.events.append(
            WorkloadPreempted(
                workload=aw.key,
                at=self.now,
                cluster_queue=aw.admission.cluster_queue,
                preemptor=by,
                preemptor_cluster_queue=by_cq,
                reason=reason,
                policy=policy,
                freed=freed,
            )
        )

    def _claim(self, aw: AdmittedWorkload) -> None:
        """The workload leaves soon: drop it from projected usage; real usage still counts it."""
        node = self.tree.cqs.get(aw.admission.cluster_queue)
        self.snap.removed.add(aw.key)
        if node is None:
            return
        self.snap.remove_workload(aw)
        self.claimed.setdefault(node.tree, []).append(aw)
        self.snap.touch(node.tree)

    def _reserve(self, node: Node, usage: dict[FlavorResource, int]) -> _Hold:
        self.snap.add_usage(node, usage)
        hold = _Hold(node, usage)
        self.reserved.setdefault(node.tree, []).append(hold)
        self.snap.touch(node.tree)
        return hold

    def _lift(self, q: _Queue) -> None:
        """Kueue's reservation for a preemptor without candidates keeps *other* queues off the capacity only: in
        Kueue the queue's next workload is tried in the next cycle without it, so it is lifted for its own queue."""
        if q.hold is not None and q.hold.active:
            self.snap.remove_usage(q.node, q.hold.usage)
            q.hold.active = False

    def _relay(self, q: _Queue) -> None:
        if q.hold is None or q.hold_for is None or q.hold.active:
            return
        usage = _to_reserve(q.node, q.hold_for)
        if usage != q.hold.usage:
            q.hold.usage = usage
            q.hold.touches += 1
            self.snap.touch(q.node.tree)
        self.snap.add_usage(q.node, usage)
        q.hold.active = True

    def _queues(self) -> list[_Queue]:
        queues: list[_Queue] = []
        for name in sorted(self.view.cluster_queues):
            cq = self.view.cluster_queues[name]
            seq = self.view.pending_by_cq.get(name, ())
            node = self.tree.cqs[name]
            inactive = self.tree.inactive.get(name)
            if inactive is not None or cq.stop_policy is not StopPolicy.NONE:
                if inactive is not None:
                    reason = PendingReason(
                        kind=PendingReasonKind.CLUSTER_QUEUE_INACTIVE,
                        message=f"ClusterQueue {name} is inactive: {inactive.message}",
                    )
                else:
                    reason = PendingReason(
                        kind=PendingReasonKind.QUEUE_STOPPED,
                        message=f"ClusterQueue {name} is stopped ({cq.stop_policy.value})",
                    )
                if self._queue_unchanged(name, node, cq, seq):
                    continue
                emitted = False
                for pw in seq:
                    emitted |= self._pending(pw, name, reason)
                if not emitted:
                    self._record_queue(name, node, cq)
                continue
            group_of = {r: i for i, g in enumerate(cq.resource_groups) for r in g.covered_resources}
            assigner = FlavorAssigner(
                cq=cq,
                node=node,
                flavors=self.view.flavors,
                group_of=group_of,
                fair_sharing=self.config.fair_sharing,
                oracle=None,
            )
            strict = cq.queueing_strategy is QueueingStrategy.STRICT_FIFO
            index = self.view.pending_index.get(name) if self.view.pending_index is not None else None
            unchanged = self._queue_unchanged(name, node, cq, seq)
            q = _Queue(name=name, cq=cq, node=node, seq=seq, assigner=assigner, strict=strict, index=index)
            if not strict and not unchanged:
                if self.opt.runs and index is not None and len(index) == len(seq) and self._walk_by_runs(q, index):
                    q.seq = list(index.sticky)
                    q.runs = _Runs(index)
                else:
                    q.seq = _sticky_first(seq)
            if not seq or unchanged:
                q.done = True
            queues.append(q)
        return queues

    def _walk_by_runs(self, q: _Queue, index: PendingIndex) -> bool:
        """Can this queue's walk step over runs? Not when some member steps aside for its LocalQueue or namespace
        (`_precheck`), nor when the outcome depends on each workload's age (LowerOrNewerEqualPriority)."""
        if q.cq.preemption.within_cluster_queue is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
            return False
        return all(self._precheck_lq(q, lq, lq.partition("/")[0]) is None for lq in index.local_queues)

    # --- step 3: candidates ----------------------------------------------------------------------------------------

    def _precheck(self, q: _Queue, pw: PendingWorkload) -> PendingReason | None:
        """A reason that makes the workload no candidate at all (it steps aside, even in StrictFIFO)."""
        return self._precheck_lq(q, pw.local_queue, pw.workload.namespace)

    def _precheck_lq(self, q: _Queue, lq_key: str, ns: str) -> PendingReason | None:
        lq = self.view.local_queues.get(lq_key)
        if lq is not None and lq.stop_policy is not StopPolicy.NONE:
            return PendingReason(
                kind=PendingReasonKind.QUEUE_STOPPED,
                message=f"LocalQueue {lq.key} is stopped ({lq.stop_policy.value})",
            )
        key = (q.name, ns)
        ok = self.ns_match.get(key)
        if ok is None:
            namespace = self.view.namespaces.get(ns)
            ok = selects(q.cq.namespace_selector, namespace.labels if namespace is not None else {})
            self.ns_match[key] = ok
        if not ok:
            return PendingReason(
                kind=PendingReasonKind.NAMESPACE_NOT_SELECTED,
                message=f"namespace {ns} is not selected by ClusterQueue {q.name}",
            )
        return None

    def _next_entry(self, q: _Queue) -> _Entry | None:
        self._lift(q)
        try:
            return self._walk(q)
        finally:
            self._relay(q)

    def _walk(self, q: _Queue) -> _Entry | None:
        while True:
            pw = self._peek(q)
            if pw is None:
                break
            pre = self._precheck(q, pw)
            if pre is not None:
                q.emitted |= self._pending(pw, q.name, pre)
                self._advance(q, pw)
                continue
            kept = self.kept.get(pw.key)
            if kept is not None:
                q.acted = True
                self._wait(q, pw, kept, "")
                if q.done:
                    return None
                continue
            result = self._evaluate(q, pw)
            if result.kind not in (_Kind.NO_FIT, _Kind.NO_TARGETS) and pw.evicted_now(self.now):
                # Stopped at this instant: admitting it again now, into room its preemptor left or by preempting in
                # turn, would undo a decision of the instant with nothing else changed (issue 9). It is held back
                # until the next instant, without a new reason (its queue is not memoised, so that instant's cycle
                # assesses it again); one that cannot be admitted anyway gets its reason as any other.
                q.acted = q.volatile = self.held_back = True
                if q.strict:
                    self._block(q, pw)
                    return None
                self._advance(q, pw)
                return None  # its queue offers its next workload in the next pass
            if result.kind is _Kind.DEFERRED:
                q.acted = q.volatile = q.done = self.deferred = True  # the queue waits for the next cycle
                if result.assignment is not None:
                    # It holds its room for the rest of the cycle, as a Kueue preemptor adds its usage to the
                    # cycle's snapshot: otherwise the queue that just admitted goes on borrowing the idle capacity
                    # pass after pass, only to be reclaimed in the next cycle (issue 9, the three-level tree).
                    self._reserve(q.node, dict(result.assignment.usage))
                return None
            if result.kind is _Kind.NO_TARGETS and self.known and not q.reserved and self._lone(q):
                # Its class was found without candidates in this very state, by a head that held its room in a pass
                # that changed nothing else in the tree. Offered, it would do the same in a pass of its own, seen by
                # no other queue (none offers anything more): it steps aside at once (`Optimisations.lone_holds`).
                result = _Result(_Kind.NO_FIT, reason=result.reason)
            if result.kind is _Kind.NO_TARGETS and not q.reserved and not self._holds_anything(q, pw, result):
                q.reserved = True  # the first such workload, but it has nothing to hold: no entry needed
            if result.kind is _Kind.NO_TARGETS and q.reserved:
                result = _Result(_Kind.NO_FIT, reason=result.reason)
            if result.kind is _Kind.NO_FIT:
                assert result.reason is not None
                self._write_no_fit(q, pw, result.reason)
                if q.strict:
                    self._block(q, pw)
                    return None
                self._advance(q, pw)
                if self.known:
                    # Its class was found unfitting in this very state: it steps aside with the head that was
                    # (Kueue's equivalence classes), as the walk by runs steps over whole runs of it.
                    continue
                return None  # Kueue's inadmissible set: the queue's next workload is its head in the next pass
            q.acted = True
            return _Entry(q, pw, result)
        q.done = True
        return None

    def _peek(self, q: _Queue) -> PendingWorkload | None:
        """The next workload the walk must look at: by position, then (with runs) the first member of a run that is
        not quiet. Skipped members are exactly those for which the walk would find NoFit and write nothing."""
        if q.pos < len(q.seq):
            return q.seq[q.pos]
        runs = q.runs
        if runs is None:
            return None
        state = (self._version(q.node.tree), len(self.snap.removed))
        if runs.state != state:
            runs.rebuild(state, self._who_of(q, runs.index))
        heap = runs.heap
        while heap:
            top = heap[0]
            if self._quiet(q, state, top[4], top[5]):
                heapq.heappop(heap)
                continue
            return runs.offer(top)
        return None

    def _advance(self, q: _Queue, pw: PendingWorkload) -> None:
        if q.pos < len(q.seq):
            q.pos += 1
        else:
            assert q.runs is not None
            q.runs.advance(pw)

    def _quiet(
        self, q: _Queue, state: tuple[int, int], cls: tuple[Shape, tuple[int, ...]], reason: Coarse | None
    ) -> bool:
        """Would every member of this run be NoFit now and write nothing? Yes when the queue's headline is written,
        the run's class was evaluated in this state to NoFit (or NoTargets after the queue's reservation), and
        the run's coarse last reason is that result's: `_write_no_fit` then returns without an event."""
        if reason is None or not q.headline_written:
            return False
        known = q.equivalent.get((state[0], state[1], cls[0], cls[1]))
        if known is None or (known.kind is _Kind.NO_TARGETS and not q.reserved and not self._lone(q)):
            return False
        return known.coarse() == reason

    def _who_of(self, q: _Queue, index: PendingIndex) -> dict[int, tuple[int, ...]]:
        return {priority: self._who(q, priority, 0) for _, priority in index.groups}

    def _holds_anything(self, q: _Queue, pw: PendingWorkload, r: _Result) -> bool:
        if not self.config.reserve_without_candidates:
            return False
        if q.cq.preemption.reclaim_within_cohort is PreemptionPolicy.ANY or r.assignment is None:
            return False
        if _blocked_above(q.node, r.assignment):
            # Parked (Kueue's inadmissible set): a limit higher in the tree keeps it out whatever it could preempt,
            # so room held for it would only keep other queues of the tree off idle capacity, for as long as the
            # blocker stays. A change that lets it in (quota freed, a queue or cohort changed) makes it fit or gives
            # it candidates in the cycle that follows; until then it holds nothing.
            return False
        return bool(_to_reserve(q.node, r.assignment))

    def _write_no_fit(self, q: _Queue, pw: PendingWorkload, reason: PendingReason) -> None:
        if q.headline_written and pw.last_reason is not None and coarse(pw.last_reason) == coarse(reason):
            return
        q.headline_written = True
        q.emitted |= self._pending(pw, q.name, reason)

    def _block(self, q: _Queue, head: PendingWorkload) -> None:
        """StrictFIFO: the head stays; everything behind it waits (except those that are no candidates at all)."""
        blocked = PendingReason(
            kind=PendingReasonKind.BLOCKED_BY_HEAD,
            message=f"StrictFIFO: blocked by {head.key} at the head of ClusterQueue {q.name}",
            blocked_by=head.key,
        )
        assert q.runs is None
        for pw in q.seq[q.pos + 1 :]:
            pre = self._precheck(q, pw)
            q.emitted |= self._pending(pw, q.name, pre if pre is not None else blocked)
        q.pos = len(q.seq)
        q.done = True

    # --- evaluating one workload --------------------------------------------------------------------------------------

    def _evaluate(self, q: _Queue, pw: PendingWorkload) -> _Result:
        tree = q.node.tree
        untouched = self._version(tree) == 0
        generation = self._generation(tree)
        eq_key = self._equivalence_key(q, pw)
        self.known = eq_key in q.equivalent
        memo = self.memo.classes.get(q.name) if untouched and self.memo is not None else None
        if memo is not None and memo[0] == generation:
            hit = memo[1].get(eq_key[2:])
            if hit is not None:
                q.equivalent.setdefault(eq_key, hit)  # the class's result in this state, also for `_quiet`
                return hit
        result = q.equivalent.get(eq_key)
        if result is None:
            result = self._assess(q, pw)
            q.volatile |= result.volatile
            if result.kind in (_Kind.NO_FIT, _Kind.NO_TARGETS):
                q.equivalent[eq_key] = result
        if (
            untouched
            and self.memo is not None
            and result.kind in (_Kind.NO_FIT, _Kind.NO_TARGETS)
            and not result.volatile
        ):
            if memo is None or memo[0] != generation:
                memo = self.memo.classes[q.name] = (generation, {})
            memo[1][eq_key[2:]] = result
        return result

    def _equivalence_key(self, q: _Queue, pw: PendingWorkload) -> tuple[object, ...]:
        """Same shape, same tree state (and, when preemption may be involved, same priority and age) -> same result."""
        shape = q.index.shape(pw) if q.index is not None else None
        if shape is None:
            shape = shape_of(pw.workload)
        who = self._who(q, pw.priority, pw.queue_order_at)
        return (self._version(q.node.tree), len(self.snap.removed), shape, who)

    @staticmethod
    def _who(q: _Queue, priority: int, queue_order_at: Millis) -> tuple[int, ...]:
        pre = q.cq.preemption
        if pre.within_cluster_queue is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
            return (priority, queue_order_at)
        if (
            pre.within_cluster_queue is not PreemptionPolicy.NEVER
            or pre.reclaim_within_cohort is not PreemptionPolicy.NEVER
        ):
            return (priority,)
        return ()

    def _assess(self, q: _Queue, pw: PendingWorkload) -> _Result:
        preemptor, result = self._assess_with(q, pw, pw.workload)
        # Whether a candidate was off limits for this instant only is not a property of the tree's generation:
        # such a result must not be remembered beyond this cycle.
        volatile = preemptor.skipped_readmitted
        if (
            result.kind in (_Kind.NO_FIT, _Kind.NO_TARGETS)
            and self.config.partial_admission
            and can_be_partially_admitted(pw.workload)
        ):
            # Kueue's getInitialAssignments: only when the full counts neither fit nor find victims, the largest
            # counts down to the pod sets' minimum that fit or find victims. Otherwise the full counts' result.
            def reduced(counts: tuple[int, ...]) -> _Result | None:
                nonlocal volatile
                wl = with_counts(pw.workload, counts)
                p, r = self._assess_with(q, pw, wl)
                volatile |= p.skipped_readmitted
                if r.kind not in (_Kind.FIT, _Kind.PREEMPT, _Kind.WAIT_EVICTIONS):
                    return None
                r.workload = wl
                return r

            result = search_counts(pw.workload, reduced) or result
        result.volatile = volatile
        return result

    def _assign_plainly(self, q: _Queue, wl: Workload) -> Assignment:
        """Flavors for `wl` in the snapshot as it is, without simulating preemption."""
        saved, q.assigner.oracle = q.assigner.oracle, None
        a = q.assigner.assign(wl)
        q.assigner.oracle = saved
        return a

    def _largest_plain_fit(self, q: _Queue, whole: Workload) -> Assignment | None:
        """Partial admission without preemption: the assignment of the largest counts that fit as things are."""

        def fit(counts: tuple[int, ...]) -> Assignment | None:
            a = self._assign_plainly(q, with_counts(whole, counts))
            return a if a.mode is Mode.FIT else None

        return search_counts(whole, fit)

    def _assess_with(self, q: _Queue, pw: PendingWorkload, wl: Workload) -> tuple[Preemptor, _Result]:
        preemptor = Preemptor(
            pw=pw, cq=q.cq, node=q.node, usage={}, frs=frozenset(), excluded=self.snap.removed, now=self.now
        )

        targets_fn = self._fair_targets if self.config.fair_sharing else classical_targets

        def oracle(fr: FlavorResource, quantity: int) -> tuple[PMode, int]:
            return oracle_mode(preemptor, self.snap, fr, quantity, targets_fn)

        q.assigner.oracle = oracle
        a = q.assigner.assign(wl)
        if a.mode is Mode.FIT:
            return preemptor, _Result(_Kind.FIT, assignment=a)
        if a.mode is Mode.NO_FIT and a.reason_kind is not PendingReasonKind.WAITING_FOR_QUOTA:
            return preemptor, _Result(_Kind.NO_FIT, reason=_no_fit_reason(a))
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
            return preemptor, _Result(_Kind.DEFERRED, assignment=a, volatile=True)
        if a.mode is Mode.NO_FIT:
            return preemptor, _Result(_Kind.NO_FIT, reason=_no_fit_reason(a))
        preemptor.usage = a.usage
        preemptor.frs = a.frs_need_preemption
        targets = targets_fn(preemptor, self.snap)
        if not targets:
            return preemptor, _Result(_Kind.NO_TARGETS, assignment=a, reason=self._waiting_for_quota(q, a))
        if all(t.victim.evicting for t in targets):
            return preemptor, _Result(_Kind.WAIT_EVICTIONS, assignment=a, waits_on=[t.victim for t in targets])
        return preemptor, _Result(_Kind.PREEMPT, assignment=a, targets=targets)

    def _admitted_candidates(self, q: _Queue) -> bool:
        """Could a workload admitted earlier in this cycle be a victim of `q`'s workloads by its policies?"""
        admitted = self.admitted_in.get(q.node.tree)
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
        holds = [h for h in self.reserved.get(p.node.tree, []) if h.active and h.node is not p.node]
        for h in holds:
            snap.remove_usage(h.node, h.usage)
        try:
            targets = fair_targets(p, snap, self.config.fair_sharing_strategies)
        finally:
            for h in holds:
                snap.add_usage(h.node, h.usage)
        if targets and holds:
            for t in targets:
                snap.remove_workload(t.victim)
            ok = workload_fits(p, True)
            for t in targets:
                snap.add_workload(t.victim)
            if not ok:
                return []
        return targets

    def _fits_after_evictions(self, q: _Queue, wl: Workload) -> _Result | None:
        """Would the workload fit once the tree's already-evicting workloads (not claimed this cycle) are gone?"""
        leaving = [aw for aw in self.evicting.get(q.node.tree, ()) if aw.key not in self.snap.removed]
        if not leaving:
            return None
        leaving.sort(key=lambda aw: candidate_order(aw, q.name))
        for aw in leaving:
            self.snap.remove_workload(aw)
        a = self._assign_plainly(q, wl)
        needed: list[AdmittedWorkload] = []
        if a.mode is Mode.FIT:
            needed = list(leaving)
            for aw in reversed(leaving):
                self.snap.add_workload(aw)
                if fits(q.node, a.usage):
                    needed.remove(aw)
                else:
                    self.snap.remove_workload(aw)
            for aw in needed:
                self.snap.add_workload(aw)
        else:
            for aw in leaving:
                self.snap.add_workload(aw)
        if not needed:
            return None
        return _Result(_Kind.WAIT_EVICTIONS, assignment=a, waits_on=needed)

    def _waiting_for_quota(self, q: _Queue, a: Assignment) -> PendingReason:
        shortages = tuple(
            Shortage(flavor=f, resource=r, requested=v, available=cq_available(q.node, (f, r)))
            for (f, r), v in sorted(a.usage.items())
            if v > cq_available(q.node, (f, r))
        )
        text = ", ".join(
            f"{s.resource} in flavor {s.flavor}: {format_quantity(s.requested - s.available, s.resource)} more needed"
            for s in shortages
        )
        return PendingReason(
            kind=PendingReasonKind.WAITING_FOR_QUOTA,
            message=f"insufficient unused quota and no workload to preempt: {text}",
            shortages=shortages,
        )

    # --- processing an entry ------------------------------------------------------------------------------------------

    def _real_fits(self, node: Node, usage: Mapping[FlavorResource, int]) -> bool:
        """Does `usage` fit with this cycle's victims still holding their quota and no reservations?"""
        claimed = self.claimed.get(node.tree, [])
        reserved = [h for h in self.reserved.get(node.tree, []) if h.active]
        if not claimed and not reserved:
            return True
        for aw in claimed:
            self.snap.add_workload(aw)
        for h in reserved:
            self.snap.remove_usage(h.node, h.usage)
        ok = fits(node, usage)
        for h in reserved:
            self.snap.add_usage(h.node, h.usage)
        for aw in claimed:
            self.snap.remove_workload(aw)
        return ok

    def _process(self, e: _Entry) -> None:
        self._lift(e.queue)
        try:
            self._process_entry(e)
        finally:
            self._relay(e.queue)

    def _assign_with_victims(self, q: _Queue, wl: Workload) -> Assignment:
        claimed = self.claimed.get(q.node.tree, [])
        for aw in claimed:
            self.snap.add_workload(aw)
        alt = self._assign_plainly(q, wl)
        for aw in claimed:
            self.snap.remove_workload(aw)
        return alt

    def _process_entry(self, e: _Entry) -> None:
        q, pw, r = e.queue, e.pw, e.result
        a = r.assignment
        assert a is not None
        if r.kind is _Kind.FIT:
            if not fits(q.node, a.usage):
                return  # no longer fits after an earlier entry: offered again next pass
            if not self._real_fits(q.node, a.usage):
                # The flavors were chosen with this cycle's victims gone. With them still holding their quota
                # another assignment may fit now; otherwise it fits only once they are gone (Kueue's DeferredFit):
                # wait, holding the room.
                alt = self._assign_with_victims(q, r.workload or pw.workload)
                if alt.mode is Mode.FIT:
                    self._admit(q, pw, alt)
                    return
                self._reserve(q.node, a.usage)
                self._wait(q, pw, self.own_victims.get(pw.key, []), "workloads preempted in this cycle")
                return
            self._admit(q, pw, a)
            return
        if r.kind is _Kind.NO_TARGETS:
            assert r.reason is not None
            self._write_no_fit(q, pw, r.reason)
            q.reserved = True
            if q.cq.preemption.reclaim_within_cohort is not PreemptionPolicy.ANY:
                q.hold = self._reserve(q.node, _to_reserve(q.node, a))
                q.hold_for = a
                self.holding.append(q)
                self._lift(q)  # _process re-lays it
            self._after_head_failed(q, pw)
            return
        victims = r.targets if r.kind is _Kind.PREEMPT else [Target(aw, "", "") for aw in r.waits_on]
        if any(t.victim.key in self.snap.removed for t in victims):
            return  # overlaps victims another preemptor claimed in this pass: re-assessed next pass
        for t in victims:
            self.snap.remove_workload(t.victim)
        ok = fits(q.node, a.usage)
        for t in victims:
            self.snap.add_workload(t.victim)
        if not ok:
            return
        for t in victims:
            self._claim(t.victim)
            if not t.victim.evicting:
                self._preempted(t.victim, pw.key, q.name, t.reason, t.policy)
                self.preempted = True
        self._reserve(q.node, a.usage)
        self._wait(q, pw, [t.victim for t in victims], "")

    def _wait(self, q: _Queue, pw: PendingWorkload, victims: list[AdmittedWorkload], what: str) -> None:
        keys = sorted(v.key for v in victims)
        message = f"waiting for {len(keys)} preempted workloads: {', '.join(keys)}" if keys else f"waiting for {what}"
        reason = PendingReason(
            kind=PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS,
            message=message,
            blocked_by=keys[0] if keys else None,
            victims=tuple(keys),
        )
        q.emitted |= self._pending(pw, q.name, reason)
        self._after_head_failed(q, pw)

    def _after_head_failed(self, q: _Queue, pw: PendingWorkload) -> None:
        if q.strict:
            self._block(q, pw)
        else:
            self._advance(q, pw)

    def _admit(self, q: _Queue, pw: PendingWorkload, a: Assignment) -> None:
        if self.pods_blocked:
            # Kueue's scheduler waits here until every admitted workload is ready; nothing else is considered
            # meanwhile. The next cycle (a `job.ready` starts one) offers this queue again from its head.
            q.emitted |= self._pending(pw, q.name, WAITING)
            if q.strict:
                self._block(q, pw)
            else:
                q.done = True
            return
        if _blocks_after_admission(self.config):
            self.pods_blocked = True
        self.snap.add_usage(q.node, a.usage)
        self.admitted_in.setdefault(q.node.tree, set()).add(q.name)
        self.snap.touch(q.node.tree)
        real = self.real_cq_usage.setdefault(q.name, {})
        for fr, v in a.usage.items():
            real[fr] = real.get(fr, 0) + v
        borrowed: list[Borrowed] = []
        if q.node.parent is not None:
            root = q.node.root().name
            for fr in sorted(a.usage):
                above = real[fr] - nominal(q.node, fr)
                if above > 0:
                    borrowed.append(Borrowed(flavor=fr[0], resource=fr[1], amount=above, cohort=root))
        admission = Admission(
            cluster_queue=q.name,
            pod_sets=tuple(
                PodSetAssignment(name=ps.name, count=ps.count, flavors=dict(ps.flavors), usage=dict(ps.usage))
                for ps in a.pod_sets
            ),
        )
        self.events.append(
            WorkloadAdmitted(workload=pw.key, at=self.now, admission=admission, borrowed=tuple(borrowed))
        )
        self.admitted_now.setdefault(q.name, {})[pw.key] = AdmittedWorkload(
            workload=pw.workload,
            priority=pw.priority,
            admission=admission,
            admitted_at=self.now,
            queue_order_at=pw.queue_order_at,
            evicted_at=pw.evicted_at,
        )
        self._advance(q, pw)

    # --- memo bookkeeping ---------------------------------------------------------------------------------------

    def _queue_unchanged(self, name: str, node: Node, cq: ClusterQueue, seq: Sequence[PendingWorkload]) -> bool:
        """Engine only: this queue offered nothing and wrote nothing last time, and nothing it depends on changed."""
        if self.memo is None or self.view.pending_version is None:
            return False
        hit = self.memo.queues.get(name)
        return (
            hit is not None
            and self.snap.version(node.tree) == 0
            and hit.generation == self._generation(node.tree)
            and hit.pending_version == self.view.pending_version.get(name, -1)
            and hit.config is cq
        )

    def _record_queue(self, name: str, node: Node, cq: ClusterQueue) -> None:
        if self.memo is None or self.view.pending_version is None:
            return
        self.memo.queues[name] = _QueueMemo(self._generation(node.tree), self.view.pending_version.get(name, -1), cq)

    def _remember(self, queues: list[_Queue]) -> None:
        if self.memo is None:
            return
        for q in queues:
            if q.done and not q.acted and not q.emitted and not q.volatile and self.snap.version(q.node.tree) == 0:
                self._record_queue(q.name, q.node, q.cq)
            elif q.volatile or not (q.done and not q.acted and not q.emitted):
                self.memo.queues.pop(q.name, None)


# --- helpers ----------------------------------------------------------------------------------------------------


class _WithAdmitted(Mapping[str, Mapping[str, AdmittedWorkload]]):
    """The view's admitted workloads by ClusterQueue, with those admitted by this call's passes added."""

    __slots__ = ("_added", "_base")

    def __init__(
        self, base: Mapping[str, Mapping[str, AdmittedWorkload]], added: dict[str, dict[str, AdmittedWorkload]]
    ) -> None:
        self._base = base
        self._added = added

    def __getitem__(self, cq: str) -> Mapping[str, AdmittedWorkload]:
        added = self._added.get(cq)
        if not added:
            return self._base[cq]
        base = self._base.get(cq)
        return _Joined(base, added) if base else added

    def __iter__(self) -> Iterator[str]:
        return iter(self._base.keys() | self._added.keys())

    def __len__(self) -> int:
        return len(self._base.keys() | self._added.keys())


class _Joined(Mapping[str, AdmittedWorkload]):
    """Two disjoint mappings read as one (a workload admitted by this call was pending in the view)."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: Mapping[str, AdmittedWorkload], second: Mapping[str, AdmittedWorkload]) -> None:
        self._first = first
        self._second = second

    def __getitem__(self, key: str) -> AdmittedWorkload:
        hit = self._second.get(key)
        return hit if hit is not None else self._first[key]

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self._first, self._second)

    def __len__(self) -> int:
        return len(self._first) + len(self._second)

    def items(self) -> Iterator[tuple[str, AdmittedWorkload]]:  # type: ignore[override]  # only iterated
        return itertools.chain(self._first.items(), self._second.items())


def _blocks_after_admission(config: EngineConfig) -> bool:
    """Whether an admission blocks the ones after it (blockAdmission: its pods are not ready yet)."""
    return config.wait_for_pods_ready is not None and config.wait_for_pods_ready.block_admission


def _entry_usage(e: _Entry) -> dict[FlavorResource, int]:
    return e.result.assignment.usage if e.result.assignment is not None else {}


def _is_preemptor(e: _Entry) -> bool:
    """A workload that preempted and waits for its victims (Kueue's PrioritizePreemptorWorkloads): the room its
    preemptions free goes to it first. Without this, another queue's nominee with a lower share takes that room, the
    victim preempts it back by fair sharing, and the preemptor preempts the victim again: a loop at one instant."""
    return is_sticky(e.pw)


def _fair_tie_break(e: _Entry) -> tuple[object, ...]:
    return (-e.pw.priority, e.pw.queue_order_at, e.pw.key)


def _sticky_first(seq: Sequence[PendingWorkload]) -> Sequence[PendingWorkload]:
    """BestEffortFIFO's sticky preemptor (Kueue #6929): a workload waiting for its victims is offered first, so the
    room its preemptions free is not taken by its own queue's or a sibling's next workload."""
    sticky = [pw for pw in seq if is_sticky(pw)]
    if not sticky:
        return seq
    return [*sticky, *(pw for pw in seq if not is_sticky(pw))]


def _no_fit_reason(a: Assignment) -> PendingReason:
    assert a.reason_kind is not None
    return PendingReason(kind=a.reason_kind, message=a.message, shortages=a.shortages)


def _blocked_above(node: Node, a: Assignment) -> bool:
    """Is what keeps `a` out a Cohort's borrowingLimit: would some resource needing preemption fit if the Cohorts
    above the ClusterQueue had no borrowing limits (its own limits still apply)?"""
    return any(a.usage.get(fr, 0) <= _available_without_cohort_limits(node, fr) for fr in a.frs_need_preemption)


def _available_without_cohort_limits(node: Node, fr: FlavorResource) -> int:
    """`quota.available` with the borrowing limits of Cohorts ignored; a loop from the root down."""
    path = [node, *node.path_to_root()]
    avail = 0
    for n in reversed(path):
        usage = n.usage.get(fr, 0)
        if n.parent is None:
            avail = sat_sub(n.subtree.get(fr, 0), usage)
            continue
        lq = n.local.get(fr, 0)
        limits = n.quotas.get(fr)
        if n.is_cq and limits is not None and limits.borrowing_limit is not None:
            stored_in_parent = sat_sub(n.subtree.get(fr, 0), lq)
            used_in_parent = max(0, usage - lq)
            avail = min(sat_add(sat_sub(stored_in_parent, used_in_parent), limits.borrowing_limit), avail)
        avail = sat_add(max(0, sat_sub(lq, usage)), avail)
    return max(0, avail)


def _to_reserve(node: Node, a: Assignment) -> dict[FlavorResource, int]:
    """Kueue's quotaResourcesToReserve: up to nominal, or up to the borrowing limit when the workload borrows."""
    out: dict[FlavorResource, int] = {}
    for fr, v in a.usage.items():
        limits = node.quotas.get(fr)
        used = node.usage.get(fr, 0)
        nom = limits.nominal if limits is not None else 0
        if a.borrowing > 0:
            if limits is None or limits.borrowing_limit is None:
                out[fr] = v
            else:
                out[fr] = max(0, min(v, nom + limits.borrowing_limit - used))
        else:
            out[fr] = max(0, min(v, nom - used))
    return {fr: v for fr, v in out.items() if v}
