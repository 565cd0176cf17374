"""Usage accounting (Slurm's `sreport`): what each ClusterQueue, LocalQueue and namespace used, and what each
ClusterQueue borrowed and lent, integrated over time from a start.

- used: a workload holds its admission's usage from `workload.admitted` until its quota is released (its eviction
  once the pods are gone, its finish, its deletion), the same span the engine counts against quota. Per resource
  (flavors summed) in milli-units x milliseconds, and pods x milliseconds.
- borrowed (per ClusterQueue): at each moment, what its usage is above its nominal quota, per flavor and resource.
- lent (per ClusterQueue): at each moment, its cohort tree's borrowing is attributed to the members with unused
  nominal quota, in proportion to what each has unused (capped by its lendingLimit). Kueue pools unused quota
  without saying whose it is; this is admitd's choice of a fair attribution, and the lent figures of a tree
  sum to its borrowed figures. Quota a Cohort holds itself (Cohort resourceGroups) is not attributed to anyone.

Everything is integrated lazily: a ClusterQueue's figures advance when it changes, a tree's lending when one of
its members does; `totals(until)` brings everything to `until` without changing the projection.
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import ClassVar

from daemon.domain import events as ev
from daemon.domain.model import Admission, FlavorResource, Millis
from daemon.domain.state import Phase, State
from daemon.views.dispatch import Spec, Table, bind

Acc = dict[str, int]  # resource -> milli-units x ms
_EMPTY: dict[FlavorResource, int] = {}  # read, never written


Holder = tuple[str, str, str]  # (ClusterQueue, LocalQueue "namespace/name", namespace): whom a holding is charged to


@dataclass(slots=True)
class _Holding:
    holder: Holder
    usage: dict[FlavorResource, int]
    pods: int
    since: Millis
    per_resource: tuple[tuple[str, int], ...] = ()  # `usage` with flavors summed, the resources it uses (not 0)

    @property
    def cluster_queue(self) -> str:
        return self.holder[0]


def _add(acc: Acc, resource: str, v: int) -> None:
    if v:
        acc[resource] = acc.get(resource, 0) + v


class Usage:
    """Usage integrated from `start` (the state's holdings count from then on)."""

    def __init__(self, state: State, start: Millis) -> None:
        self.state = state
        self.start = start
        self.holding: dict[str, _Holding] = {}
        # What the released holdings used, per holder (summed into its ClusterQueue, LocalQueue and namespace when
        # read: `used`, `pod_ms`; one sum at each release, not three).
        self._used_by: dict[Holder, Acc] = {}
        self._pod_ms_by: dict[Holder, int] = {}
        self.borrowed: dict[str, Acc] = {}
        self.lent: dict[str, Acc] = {}
        self._cq_usage: dict[str, dict[FlavorResource, int]] = defaultdict(dict)
        self._cq_at: dict[str, Millis] = {}
        self._tree_at: dict[str, Millis] = {}
        self._trees: dict[str, list[str]] | None = None  # tree -> its ClusterQueues, until the next config change
        self._tree_of: dict[str, str] = {}  # ClusterQueue -> its tree (`State.tree_of_cq`), as long as `_trees`
        self._nominals: dict[str, dict[FlavorResource, tuple[int, int | None]]] = {}
        self.now = start
        for key, rec in state.workloads.items():
            if rec.phase is Phase.ADMITTED and rec.admission is not None:
                self._hold(key, rec.admission, start)
        self._table = bind(self, self.ON)

    # --- events ------------------------------------------------------------------------------------------------

    @property
    def seq(self) -> int:
        """The last event applied: the state's, folded after each (`views.dispatch`)."""
        return self.state.seq

    def apply(self, event: ev.Event, seq: int) -> None:
        h = self._table[type(event)]
        if h is not None:
            h(event, seq)

    def handlers(self) -> Table:
        return dict(self._table)

    # The clock moves with each event's time (compared, not `max`: a builtin's call at every admission and release
    # cost more than the rest of the clock's work).

    def _admitted(self, event: ev.WorkloadAdmitted, seq: int) -> None:
        at, key = event.at, event.workload
        self.now = at if at > self.now else self.now
        if key in self.holding:
            self._release(key, at)
        self._hold(key, event.admission, at)

    def _released(self, event: ev.WorkloadEvicted, seq: int) -> None:
        at = event.at
        self.now = at if at > self.now else self.now
        self._release(event.workload, at)

    def _gone(self, event: ev.JobFinished | ev.JobDeleted, seq: int) -> None:
        at = event.at
        self.now = at if at > self.now else self.now
        self._release(event.job, at)

    def _config(self, event: ev.Event, seq: int) -> None:
        # Quotas or the trees may change: settle every tree with the figures of before (the state takes the new
        # version after this), and read quotas and members afresh from then on.
        self._settle_all(self.now)
        self._trees = None
        self._tree_of.clear()
        self._nominals.clear()

    def timed(self, event: ev.JobReady, seq: int) -> None:
        """Any other event with a time: the clock moves (`_config` settles the trees to it)."""
        self.now = event.at if event.at > self.now else self.now

    ON: ClassVar[Spec] = {
        ev.WorkloadAdmitted: _admitted,
        ev.WorkloadEvicted: _released,
        ev.JobFinished: _gone,
        ev.JobDeleted: _gone,
        ev.ClusterQueueObserved: _config,
        ev.ClusterQueueDeleted: _config,
        ev.CohortObserved: _config,
        ev.CohortDeleted: _config,
        **dict.fromkeys(
            (
                ev.JobReady,
                ev.JobPodsNotCreated,
                ev.JobTampered,
                ev.WorkloadPreempted,
                ev.WorkloadPending,
                ev.WorkloadAdopted,
                ev.WorkloadTimedOut,
                ev.WorkloadRequeued,
                ev.WorkloadActiveChanged,
                ev.JobUnsuspended,
                ev.JobSuspended,
                ev.ActuationFailed,
                ev.ChainBreakAccepted,
                ev.WorkloadEstimated,
            ),
            timed,
        ),
        **dict.fromkeys(
            (
                ev.ResourceFlavorObserved,
                ev.ResourceFlavorDeleted,
                ev.LocalQueueObserved,
                ev.LocalQueueDeleted,
                ev.PriorityClassObserved,
                ev.PriorityClassDeleted,
                ev.NamespaceObserved,
                ev.ObjectRejected,
                ev.ObjectWarned,
                ev.JobObserved,
            )
        ),
    }

    def _hold(self, key: str, admission: Admission, at: Millis) -> None:
        rec = self.state.workloads.get(key)
        if rec is None:
            return
        wl = rec.workload
        usage = admission.usage()
        pods = 0
        for ps in admission.pod_sets:
            pods += ps.count
        cq = admission.cluster_queue
        tree = self._tree_of.get(cq)
        if tree is None or at > self._tree_at.get(tree, self.start):  # else settled to `at` already
            self._settle_cq(cq, at)
        u = self._cq_usage[cq]
        per: dict[str, int] = {}  # `_per_resource`, in the same pass
        for fr, v in usage.items():
            u[fr] = u.get(fr, 0) + v
            if v:
                per[fr[1]] = per.get(fr[1], 0) + v
        start = self.start
        ns = wl.namespace
        holder = (cq, f"{ns}/{wl.queue_name}", ns)
        self.holding[key] = _Holding(holder, usage, pods, at if at > start else start, (*per.items(),))

    def _release(self, key: str, at: Millis) -> None:
        h = self.holding.pop(key, None)
        if h is None:
            return
        cq = h.holder[0]
        tree = self._tree_of.get(cq)
        if tree is None or at > self._tree_at.get(tree, self.start):  # else settled to `at` already
            self._settle_cq(cq, at)
        dt = at - h.since  # since >= start (`_hold`)
        if dt > 0:
            # What it used, charged to its holder. Per resource, flavors summed: the same sums as each flavor's
            # v * dt added in turn (v, dt > 0).
            holder = h.holder
            acc = self._used_by.get(holder)
            if acc is None:
                acc = self._used_by[holder] = {}
            for resource, v in h.per_resource:
                acc[resource] = acc.get(resource, 0) + v * dt
            pod_ms = self._pod_ms_by
            pod_ms[holder] = pod_ms.get(holder, 0) + h.pods * dt
        u = self._cq_usage[cq]
        for fr, v in h.usage.items():
            u[fr] = u.get(fr, 0) - v

    # --- borrowing and lending -----------------------------------------------------------------------------------

    def _nominal(self, cq_name: str) -> dict[FlavorResource, tuple[int, int | None]]:
        known = self._nominals.get(cq_name)
        if known is not None:
            return known
        cq = self.state.cluster_queues.get(cq_name)
        out: dict[FlavorResource, tuple[int, int | None]] = {}
        self._nominals[cq_name] = out
        if cq is None:
            return out
        for g in cq.resource_groups:
            for fq in g.flavors:
                for rq in fq.resources:
                    out[(fq.name, rq.name)] = (rq.nominal, rq.lending_limit)
        return out

    def trees(self) -> dict[str, list[str]]:
        if self._trees is None:
            trees: dict[str, list[str]] = defaultdict(list)
            for name in self.state.cluster_queues:
                trees[self.state.tree_of_cq(name)].append(name)
            self._trees = dict(trees)
        return self._trees

    def _settle_all(self, at: Millis) -> None:
        for tree, members in self.trees().items():
            self._settle_tree(tree, members, at)

    def _settle_cq(self, cq_name: str, at: Millis) -> None:
        """Bring `cq_name`'s tree's borrowing and lending to `at` with the figures of now (`_settle_tree`, inlined:
        at every admission and release)."""
        tree = self._tree_of.get(cq_name)
        if tree is None:
            tree = self._tree_of[cq_name] = self.state.tree_of_cq(cq_name)  # until the next change of the trees
        start, tree_at = self.start, self._tree_at
        since = tree_at.get(tree, start)
        since = since if since > start else start
        if at <= since:
            tree_at[tree] = since
            return
        tree_at[tree] = at
        trees = self._trees if self._trees is not None else self.trees()
        members = trees.get(tree)
        self._integrate([cq_name] if members is None else members, at - since, self.borrowed, self.lent)

    def _settle_tree(self, tree: str, members: list[str], at: Millis) -> None:
        since = max(self._tree_at.get(tree, self.start), self.start)
        self._tree_at[tree] = max(since, at)
        dt = at - since
        if dt <= 0:
            return
        self._integrate(members, dt, self.borrowed, self.lent)

    def _integrate(self, members: list[str], dt: int, borrowed: dict[str, Acc], lent: dict[str, Acc]) -> None:
        over: dict[FlavorResource, dict[str, int]] = {}
        spare: dict[FlavorResource, dict[str, int]] = {}
        cq_usage, nominal_of = self._cq_usage, self._nominal
        for name in members:
            usage = cq_usage.get(name, _EMPTY)
            nominals = nominal_of(name)
            for fr, (nominal, lending_limit) in nominals.items():
                used = usage.get(fr, 0)
                if used > nominal:
                    got = over.get(fr)
                    if got is None:
                        got = over[fr] = {}
                    got[name] = used - nominal
                elif used < nominal:
                    unused = nominal - used
                    got = spare.get(fr)
                    if got is None:
                        got = spare[fr] = {}
                    got[name] = unused if lending_limit is None else min(unused, lending_limit)
            for fr, used in usage.items():
                if used > 0 and fr not in nominals:
                    got = over.get(fr)
                    if got is None:
                        got = over[fr] = {}
                    got[name] = used  # usage in a flavor it has no quota of: all borrowed
        for fr, who in over.items():
            total = sum(who.values())
            resource = fr[1]
            for name, v in who.items():
                _add(borrowed.setdefault(name, {}), resource, v * dt)
            pool = spare.get(fr)
            if not pool:
                continue
            pool_total = sum(pool.values())
            if pool_total <= 0:
                continue
            lendable = min(total, pool_total)
            for name, v in pool.items():
                _add(lent.setdefault(name, {}), resource, lendable * v * dt // pool_total)

    # --- reading -------------------------------------------------------------------------------------------------

    def _released_figures(self) -> tuple[dict[str, dict[str, Acc]], dict[str, dict[str, int]]]:
        """What the released holdings used and their pods x milliseconds, per kind (clusterqueue, localqueue,
        namespace) and group: each holder's sums added into its three groups (fresh dicts, the caller's to change)."""
        kinds = ("clusterqueue", "localqueue", "namespace")
        used: dict[str, dict[str, Acc]] = {k: {} for k in kinds}
        pod_ms: dict[str, dict[str, int]] = {k: {} for k in kinds}
        pods_of = self._pod_ms_by
        for holder, acc in self._used_by.items():
            for kind, group in zip(kinds, holder, strict=True):
                into = used[kind].setdefault(group, {})
                for resource, v in acc.items():
                    into[resource] = into.get(resource, 0) + v
                pod_ms[kind][group] = pod_ms[kind].get(group, 0) + pods_of[holder]
        return used, pod_ms

    def totals(self, until: Millis) -> dict[str, object]:
        """Every figure integrated to `until` (the projection itself is left as it is)."""
        used, pod_ms = self._released_figures()
        for h in self.holding.values():
            dt = max(0, until - max(h.since, self.start))
            for kind, group in zip(("clusterqueue", "localqueue", "namespace"), h.holder, strict=True):
                acc = used[kind].setdefault(group, {})
                for (_, resource), v in h.usage.items():
                    _add(acc, resource, v * dt)
                pod_ms[kind][group] = pod_ms[kind].get(group, 0) + h.pods * dt
        borrowed = {k: dict(v) for k, v in self.borrowed.items()}
        lent = {k: dict(v) for k, v in self.lent.items()}
        for tree, members in self.trees().items():
            dt = until - max(self._tree_at.get(tree, self.start), self.start)
            if dt > 0:
                self._integrate(members, dt, borrowed, lent)
        return {"used": used, "pod_ms": pod_ms, "borrowed": borrowed, "lent": lent}

    def figures(self) -> object:
        used, pod_ms = self._released_figures()
        return (
            sorted((k, h.cluster_queue, h.since, sorted(h.usage.items())) for k, h in self.holding.items()),
            {k: sorted((g, sorted(a.items())) for g, a in v.items()) for k, v in used.items()},
            {k: sorted(v.items()) for k, v in pod_ms.items()},
            sorted((k, sorted(v.items())) for k, v in self.borrowed.items()),
            sorted((k, sorted(v.items())) for k, v in self.lent.items()),
        )


# --- windows: the figures since any recent moment ------------------------------------------------------------------

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000

Key = tuple[str, ...]  # ("used", kind, group, resource) | ("pod", kind, group) | ("borrowed"|"lent", cq, resource)


def flatten(totals: dict[str, object]) -> dict[Key, int]:
    """`Usage.totals`' nested figures as one mapping of key to figure (zeros left out)."""
    out: dict[Key, int] = {}
    used: dict[str, dict[str, Acc]] = totals["used"]  # type: ignore[assignment]
    pod_ms: dict[str, dict[str, int]] = totals["pod_ms"]  # type: ignore[assignment]
    for kind, groups in used.items():
        for group, acc in groups.items():
            for resource, v in acc.items():
                if v:
                    out[("used", kind, group, resource)] = v
    for kind, pods in pod_ms.items():
        for group, v in pods.items():
            if v:
                out[("pod", kind, group)] = v
    for section in ("borrowed", "lent"):
        figures: dict[str, Acc] = totals[section]  # type: ignore[assignment]
        for cq, acc in figures.items():
            for resource, v in acc.items():
                if v:
                    out[(section, cq, resource)] = v
    return out


def nest(flat: dict[Key, int]) -> dict[str, object]:
    """`flatten`'s inverse: the shape of `Usage.totals` (only the groups with a figure other than zero)."""
    used: dict[str, dict[str, Acc]] = {"clusterqueue": {}, "localqueue": {}, "namespace": {}}
    pod_ms: dict[str, dict[str, int]] = {"clusterqueue": {}, "localqueue": {}, "namespace": {}}
    borrowed: dict[str, Acc] = {}
    lent: dict[str, Acc] = {}
    for key, v in flat.items():
        if not v:
            continue
        if key[0] == "used":
            used[key[1]].setdefault(key[2], {})[key[3]] = v
        elif key[0] == "pod":
            pod_ms[key[1]][key[2]] = v
        else:
            (borrowed if key[0] == "borrowed" else lent).setdefault(key[1], {})[key[2]] = v
    return {"used": used, "pod_ms": pod_ms, "borrowed": borrowed, "lent": lent}


class UsageWindows:
    """`Usage` from `origin`, with its figures taken at every minute of the log's time (the first event at or after
    each minute takes them, before it is applied), so that the figures of any window are two subtractions: the
    figures now less those at the window's start. Minutes are kept for `recent_ms`, whole hours beyond that, and
    nothing older than `retention_ms`: a window starts at the last kept moment at or before the one asked for.

    A checkpoint is packed as an `array` of the figures in the order their keys were first seen (most keys exist from
    the first minutes on), 8 bytes a figure: a day of minutes for 500 figures is 6 MB.
    """

    def __init__(
        self,
        state: State,
        origin: Millis,
        *,
        bucket_ms: int = MINUTE_MS,
        recent_ms: int = DAY_MS,
        coarse_ms: int = HOUR_MS,
        retention_ms: int = 8 * DAY_MS,
    ) -> None:
        if not 0 < bucket_ms <= coarse_ms or coarse_ms % bucket_ms:
            raise ValueError(f"bucket_ms {bucket_ms} must divide coarse_ms {coarse_ms}")
        self.usage = Usage(state, origin)
        self.origin = origin
        self.bucket_ms, self.recent_ms, self.coarse_ms, self.retention_ms = (
            bucket_ms,
            recent_ms,
            coarse_ms,
            retention_ms,
        )
        self._keys: dict[Key, int] = {}
        self._names: list[Key] = []
        self._old: deque[tuple[Millis, array[int]]] = deque([(origin, array("q"))])
        self._recent: deque[tuple[Millis, array[int]]] = deque()
        # The time at or after which the next event first takes the figures (`checkpoint`, before it applies).
        self.due = (origin // bucket_ms + 1) * bucket_ms

    @property
    def seq(self) -> int:
        return self.usage.seq

    @property
    def state(self) -> State:
        return self.usage.state

    @state.setter
    def state(self, state: State) -> None:
        self.usage.state = state

    def apply(self, event: ev.Event, seq: int) -> None:
        at: object = getattr(event, "at", None)
        if isinstance(at, int) and at >= self.due:
            self.checkpoint(at)
        self.usage.apply(event, seq)

    def checkpoint(self, at: Millis) -> None:
        """The figures at every kept moment up to `at` (an event at `at` comes), before the event is applied."""
        b = max(self.due, (at - self.retention_ms) // self.bucket_ms * self.bucket_ms)  # a gap: none older
        while b <= at:
            self._recent.append((b, self._pack(flatten(self.usage.totals(b)))))
            b += self.bucket_ms
        self.due = b
        recent, old = self._recent, self._old
        while recent and recent[0][0] < at - self.recent_ms:
            got = recent.popleft()
            if got[0] % self.coarse_ms == 0:
                old.append(got)
        while len(old) > 1 and old[1][0] <= at - self.retention_ms:
            old.popleft()

    def _pack(self, flat: dict[Key, int]) -> array[int]:
        keys, names = self._keys, self._names
        for key in flat:
            if key not in keys:
                keys[key] = len(names)
                names.append(key)
        packed = array("q", bytes(8 * len(names)))
        for key, v in flat.items():
            packed[keys[key]] = v
        return packed

    @property
    def oldest(self) -> Millis:
        """The earliest moment a window can start at."""
        return self._old[0][0]

    def start_for(self, start: Millis) -> tuple[Millis, array[int]] | None:
        """The kept moment a window asked to start at `start` starts at, and its figures; None: before them all."""
        best: tuple[Millis, array[int]] | None = None
        for kept in (self._old, self._recent):
            if kept and kept[0][0] <= start:
                i = bisect.bisect_right(kept, start, key=lambda c: c[0]) - 1
                best = kept[i]
        return best

    def since(self, start: Millis, until: Millis) -> tuple[Millis, dict[str, object]] | None:
        """(the window's start, its figures as `Usage.totals` gives them) from the kept moment at or before `start`
        to `until`; None when `start` is before every kept moment."""
        got = self.start_for(start)
        if got is None:
            return None
        at, packed = got
        flat = flatten(self.usage.totals(until))
        names = self._names
        for i, v in enumerate(packed):
            if v:
                key = names[i]
                flat[key] = flat.get(key, 0) - v
        return at, nest(flat)

    def figures(self) -> object:
        return (
            self.usage.figures(),
            [(b, dict(zip(self._names, packed, strict=False))) for b, packed in (*self._old, *self._recent)],
        )
