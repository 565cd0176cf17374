"""The read-only view of replayed state that one admission cycle reads.

The fold (`daemon.domain.state`) keeps these collections up to date event by event; the cycle
(`daemon.domain.admission`) only reads them. Nothing here is copied per cycle. `PendingIndex` groups one
ClusterQueue's pending workloads so that the cycle can step over runs whose outcome it already knows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields

from sortedcontainers import SortedKeyList

from daemon.domain.model import (
    Admission,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Millis,
    Namespace,
    PendingReason,
    PendingReasonKind,
    ResourceFlavor,
    Workload,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingWorkload:
    workload: Workload
    priority: int  # resolved once, when the job was first observed (as Kueue does)
    local_queue: str  # namespace/name
    queue_order_at: Millis  # creation time; the eviction time after an eviction
    last_reason: PendingReason | None  # the reason last written to the log, to write only changes
    held: PendingReason | None = None
    """Set when the fold already knows the workload cannot be queued (its priority class does not exist, so Kueue
    would not create its Workload): it is then among `pending_unrouted`, and the cycle reports this reason."""
    evicted_at: Millis | None = None  # when it last stopped after an admission

    def evicted_now(self, now: Millis) -> bool:
        """Stopped at `now` (preempted, its pods gone at once, as in the simulator): it is not admitted again at this
        instant, which would undo a decision of the same instant with nothing else changed."""
        return self.evicted_at == now

    @property
    def key(self) -> str:
        return self.workload.key


_PENDING_FIELDS = ("workload", "priority", "local_queue", "queue_order_at", "last_reason", "held", "evicted_at")
if tuple(f.name for f in fields(PendingWorkload)) != _PENDING_FIELDS:  # pragma: no cover - a guard for editors
    raise TypeError("PendingWorkload's fields changed: update new_pending_workload")
_set_pw = tuple(getattr(PendingWorkload, name).__set__ for name in _PENDING_FIELDS)


def new_pending_workload(
    *,
    workload: Workload,
    priority: int,
    local_queue: str,
    queue_order_at: Millis,
    last_reason: PendingReason | None,
    held: PendingReason | None,
    evicted_at: Millis | None,
) -> PendingWorkload:
    """`PendingWorkload(...)` with every field given, made faster: the frozen dataclass's `__init__` sets each field
    through `object.__setattr__` (measured 1.4 us for the seven), this sets the slots directly (0.6 us). The fold
    makes one per pending workload whenever it loads a snapshot (115,000 for the 1M-event benchmark's middle)."""
    pw: PendingWorkload = object.__new__(PendingWorkload)
    s_workload, s_priority, s_local_queue, s_order, s_reason, s_held, s_evicted = _set_pw
    s_workload(pw, workload)
    s_priority(pw, priority)
    s_local_queue(pw, local_queue)
    s_order(pw, queue_order_at)
    s_reason(pw, last_reason)
    s_held(pw, held)
    s_evicted(pw, evicted_at)
    return pw


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmittedWorkload:
    workload: Workload
    priority: int
    admission: Admission
    admitted_at: Millis
    queue_order_at: Millis
    evicting: bool = False  # preempted or drained, still holding quota until its pods are gone
    evicted_at: Millis | None = None  # when it last stopped before this admission

    def readmitted_at(self, now: Millis) -> bool:
        """Evicted and admitted again at `now`: preempting it again at the same instant would be a loop."""
        return self.admitted_at == now and self.evicted_at == now

    @property
    def key(self) -> str:
        return self.workload.key


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterView:
    flavors: Mapping[str, ResourceFlavor]
    cluster_queues: Mapping[str, ClusterQueue]
    cohorts: Mapping[str, Cohort]  # explicit Cohort objects only; a cohort named by a CQ alone has no entry
    local_queues: Mapping[str, LocalQueue]  # by namespace/name
    namespaces: Mapping[str, Namespace]  # a namespace referenced but never observed has no labels
    admitted: Mapping[str, AdmittedWorkload]  # by workload key, every ClusterQueue
    admitted_by_cq: Mapping[str, Mapping[str, AdmittedWorkload]]
    pending_by_cq: Mapping[str, Sequence[PendingWorkload]]  # in queue order: priority desc, then FIFO, then key
    pending_unrouted: Mapping[str, PendingWorkload]  # LocalQueue or ClusterQueue missing
    generation: Mapping[str, int]
    """Per quota tree (the root cohort's name, or ``cq:<name>`` for a ClusterQueue without a cohort): a counter
    bumped by every event that may let a waiting workload fit (usage released, quota or config changed,
    admission). Equal generation means a workload found not fitting still does not fit."""
    pending_index: Mapping[str, PendingIndex] | None = None
    """Optional, per ClusterQueue with pending workloads: the same workloads as `pending_by_cq`, grouped (see
    `PendingIndex`). With it, a BestEffortFIFO walk steps over workloads whose outcome is known without visiting
    them; without it (None) the engine visits every pending workload, with the same decisions."""
    admitted_journal: Sequence[tuple[AdmittedWorkload, int]] | None = None
    """Optional: every change to `admitted` since the fold started this list, in order, as (workload, +1 or -1).
    The fold starts a new list (a new object) when the old one grows past twice the admitted count, so a reader
    that remembers the list and its position can apply the changes since, and must start over on a new list. With
    it, `AdmissionEngine` keeps per-ClusterQueue usage across cycles instead of summing every admitted workload
    in every cycle."""
    evicting: Mapping[str, AdmittedWorkload] | None = None
    """Optional: the admitted workloads that are being evicted, by key (a subset of `admitted`)."""
    pending_version: Mapping[str, int] | None = None
    """Optional, per ClusterQueue: a counter bumped whenever its pending sequence changes (a workload added, removed
    or replaced). With it, `AdmissionEngine` skips an unchanged queue of unfitting workloads in O(1); without it
    (None) the engine still skips each memoised workload, in O(pending) dictionary lookups."""
    unready: Mapping[str, tuple[Millis, int]] | None = None
    """Optional (waitForPodsReady): the admitted workloads whose pods are not all ready (`job.ready` not seen since
    their admission), stopping ones included, by key: (admitted_at, PodsReadyTimeout evictions so far)."""
    backoff: Mapping[str, Millis] | None = None
    """Optional (waitForPodsReady): pending workloads evicted for PodsReadyTimeout that wait out their backoff, by
    key: when they may be requeued. They are held out of their queue (in `pending_unrouted`) until then."""
    rejected: Mapping[str, tuple[str, ...]] | None = None
    """"ClusterQueue/<name>" or "Cohort/<name>" of a held queue whose latest version admitd rejected, with why:
    inactive until a valid version is observed (`QuotaTree.build`)."""


# --- the grouped pending index ------------------------------------------------------------------------------------

Shape = tuple[object, ...]
"""What flavor assignment and preemption read from a workload: its pod sets' names, counts, requests, node
selectors, tolerations and minimum counts. Two workloads of the same shape (and priority) get the same outcome in
the same state."""

Coarse = tuple[object, ...]
"""A pending reason without the `available` figures (see `coarse`)."""

GroupKey = tuple[Shape, int]
"""(shape, priority): workloads that a cycle must treat alike."""


def shape_of(wl: Workload) -> Shape:
    # Written for speed (a snapshot's load computes it for every pending workload): most workloads have one pod set
    # that requests one or two resources and selects no nodes, so a mapping of fewer than two items is not sorted.
    pod_sets = wl.pod_sets
    if len(pod_sets) == 1:
        ps = pod_sets[0]
        requests, selector = ps.requests, ps.node_selector
        return (
            (
                ps.name,
                ps.count,
                tuple(requests.items()) if len(requests) < 2 else tuple(sorted(requests.items())),
                tuple(selector.items()) if len(selector) < 2 else tuple(sorted(selector.items())),
                ps.tolerations,
                ps.min_count,
            ),
        )
    return plain_shape_of(wl)


def plain_shape_of(wl: Workload) -> Shape:
    """`shape_of` as defined, without its shortcut for the common case (which must equal it)."""
    return tuple(
        (
            ps.name,
            ps.count,
            tuple(sorted(ps.requests.items())),
            tuple(sorted(ps.node_selector.items())),
            ps.tolerations,
            ps.min_count,
        )
        for ps in wl.pod_sets
    )


def coarse(reason: PendingReason) -> Coarse:
    """A reason without the `available` figures, which move whenever quota is used elsewhere in the tree."""
    shortages = reason.shortages
    if not shortages:
        return (reason.kind, reason.blocked_by, ())
    if len(shortages) == 1:  # the common case, written out for speed
        s = shortages[0]
        return (reason.kind, reason.blocked_by, ((s.flavor, s.resource, s.requested),))
    return (reason.kind, reason.blocked_by, tuple([(s.flavor, s.resource, s.requested) for s in shortages]))


QueueKey = tuple[int, int, str]


def queue_key(p: PendingWorkload) -> QueueKey:
    """Queue order within a ClusterQueue: higher priority first, then older, then key."""
    return (-p.priority, p.queue_order_at, p.workload.key)


def _first(item: tuple[QueueKey, PendingWorkload]) -> QueueKey:
    return item[0]


def queue_ordered(items: list[tuple[QueueKey, PendingWorkload]]) -> SortedKeyList:
    """`SortedKeyList(members, key=queue_key)` from `items`, the (queue_key(p), p) pairs of the members in any order:
    sorted once on the given keys, and the key function is not called again (the constructor calls it twice per
    member: once to sort, once to store the keys).

    This fills the list's internals as sortedcontainers 2.4's `SortedKeyList.update` fills an empty list: `_lists`
    the values in chunks of `_load`, `_keys` their keys in the same chunks, `_maxes` each chunk's last key, `_len`.
    tests/unit/test_pending_index_build.py checks that the result equals the ordinary construction, passes the library's
    own `_check()`, and takes later `add` and `remove` calls alike."""
    items = sorted(items, key=_first)  # stable, as the constructor's sort (keys are distinct in practice)
    result = SortedKeyList(key=queue_key)
    if items:
        load: int = result._load
        keys = [k for k, _ in items]
        values = [v for _, v in items]
        result._lists.extend(values[i : i + load] for i in range(0, len(values), load))
        result._keys.extend(keys[i : i + load] for i in range(0, len(keys), load))
        result._maxes.extend(chunk[-1] for chunk in result._keys)
        result._len = len(values)
    return result


def is_sticky(p: PendingWorkload) -> bool:
    """BestEffortFIFO's sticky preemptor: its last reason says it waits for workloads it preempted (or found already
    leaving), as Kueue makes sticky a workload that issued preemptions. One that waits only for the room some other
    preemptor's victims free ("waiting for workloads preempted in this cycle", no victims named) is not: it is
    offered in its queue's order, so it never goes ahead of a higher-priority workload of its own queue."""
    last = p.last_reason
    return last is not None and last.kind is PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS and bool(last.victims)


def keyed_members(members: SortedKeyList) -> list[tuple[QueueKey, PendingWorkload]]:
    """The (queue_key(p), p) pairs of a `SortedKeyList(key=queue_key)`, in its order, read from the keys it keeps
    (sortedcontainers 2.4: `_keys` and `_lists`, chunk by chunk; see `queue_ordered`) rather than made again."""
    return [
        (k, p)
        for keys, values in zip(members._keys, members._lists, strict=True)
        for k, p in zip(keys, values, strict=True)
    ]


class PendingIndex:
    """One ClusterQueue's pending workloads, grouped: the sticky ones (`is_sticky`) in queue order, and the others
    by (shape, priority) and then by the coarse form of their last reason (None: no reason yet), each run in queue
    order. `local_queues` counts members per LocalQueue. Derived from the pending set alone, so an index kept up
    to date by the fold equals one built from scratch (`build`); it is never stored."""

    __slots__ = ("_where", "groups", "local_queues", "sticky")

    def __init__(self) -> None:
        self.sticky: SortedKeyList = SortedKeyList(key=queue_key)
        self.groups: dict[GroupKey, dict[Coarse | None, SortedKeyList]] = {}
        self.local_queues: dict[str, int] = {}
        self._where: dict[str, tuple[PendingWorkload, GroupKey, Coarse | None]] = {}

    @classmethod
    def build(cls, members: Iterable[PendingWorkload]) -> PendingIndex:
        """The index of `members`, as adding them one by one makes it, with one sort per list."""
        return cls.build_keyed([(queue_key(pw), pw) for pw in members])

    @classmethod
    def build_keyed(cls, members: Iterable[tuple[QueueKey, PendingWorkload]]) -> PendingIndex:
        """`build` for (queue_key(p), p) pairs (a caller that already has the keys). Groups and runs appear in the
        order of their first member in `members`, as adding them one by one makes them."""
        index = cls()
        sticky: list[tuple[QueueKey, PendingWorkload]] = []
        runs_of: dict[GroupKey, dict[Coarse | None, list[tuple[QueueKey, PendingWorkload]]]] = {}
        where, local_queues = index._where, index.local_queues
        shapes: dict[Shape, Shape] = {}  # equal shapes made one object (less memory; dict lookups stop at `is`)
        waiting = PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS
        for item in members:
            pw = item[1]
            key = item[0][2]
            if key in where:
                raise ValueError(f"{key} is already indexed")
            shape = shape_of(pw.workload)
            shape = shapes.setdefault(shape, shape)
            group: GroupKey = (shape, pw.priority)
            runs: Coarse | None = None
            last = pw.last_reason
            if last is not None and last.kind is waiting and last.victims:  # is_sticky(pw)
                sticky.append(item)
            else:
                runs = None if last is None else coarse(last)
                by_reason = runs_of.get(group)
                if by_reason is None:
                    by_reason = runs_of[group] = {}
                run = by_reason.get(runs)
                if run is None:
                    run = by_reason[runs] = []
                run.append(item)
            where[key] = (pw, group, runs)
            lq = pw.local_queue
            local_queues[lq] = local_queues.get(lq, 0) + 1
        index.sticky = queue_ordered(sticky)
        index.groups = {
            group: {runs: queue_ordered(run) for runs, run in by_reason.items()} for group, by_reason in runs_of.items()
        }
        return index

    def __len__(self) -> int:
        return len(self._where)

    def shape(self, pw: PendingWorkload) -> Shape | None:
        """The shape computed when `pw` (this very object) was added, or None."""
        hit = self._where.get(pw.workload.key)
        return hit[1][0] if hit is not None and hit[0] is pw else None

    def add(self, pw: PendingWorkload, shape: Shape | None = None) -> None:
        key = pw.workload.key
        if key in self._where:
            raise ValueError(f"{key} is already indexed")
        group: GroupKey = (shape_of(pw.workload) if shape is None else shape, pw.priority)
        runs: Coarse | None = None
        if is_sticky(pw):
            self.sticky.add(pw)
        else:
            runs = None if pw.last_reason is None else coarse(pw.last_reason)
            by_reason = self.groups.get(group)
            if by_reason is None:
                by_reason = self.groups[group] = {}
            run = by_reason.get(runs)
            if run is None:
                run = by_reason[runs] = SortedKeyList(key=queue_key)
            run.add(pw)
        self._where[key] = (pw, group, runs)
        self.local_queues[pw.local_queue] = self.local_queues.get(pw.local_queue, 0) + 1

    def remove(self, pw: PendingWorkload) -> Shape:
        """Remove the member with `pw`'s key; return its shape."""
        stored, group, runs = self._where.pop(pw.workload.key)
        if is_sticky(stored):
            self.sticky.remove(stored)
        else:
            by_reason = self.groups[group]
            run = by_reason[runs]
            run.remove(stored)
            if not run:
                del by_reason[runs]
                if not by_reason:
                    del self.groups[group]
        left = self.local_queues[stored.local_queue] - 1
        if left:
            self.local_queues[stored.local_queue] = left
        else:
            del self.local_queues[stored.local_queue]
        return group[0]

    def canonical(self) -> tuple[object, ...]:
        """A plain value for comparing two indexes: members by group, run and order."""
        return (
            tuple(p.workload.key for p in self.sticky),
            tuple(
                sorted(
                    (repr(g), repr(r), tuple(p.workload.key for p in run))
                    for g, by_reason in self.groups.items()
                    for r, run in by_reason.items()
                )
            ),
            tuple(sorted(self.local_queues.items())),
        )
