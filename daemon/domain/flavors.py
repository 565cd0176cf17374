"""Flavor assignment: for each pod set and resource group, the first acceptable flavor in the ClusterQueue's order.

A port of Kueue's `flavorassigner.go` without TAS or scan resumption: taints and node selectors filter flavors, each
resource is rated fit / reclaim / preempt / noFit, and fungibility picks the flavor. `search_counts` is Kueue's
`PodSetReducer` (partial admission): the largest pod counts between the full and the minimum ones that pass a test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import TypeVar

from daemon.domain.model import (
    ClusterQueue,
    FlavorResource,
    FungibilityPolicy,
    FungibilityPreference,
    PendingReasonKind,
    PodSet,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    Shortage,
    Taint,
    Toleration,
    Workload,
)
from daemon.domain.quantity import format_quantity
from daemon.domain.quota import Node, cq_available, lowest_subtree_that_fits, nominal, potential_available

PODS = "pods"


class PMode(IntEnum):
    """How a flavor can hold a request, worst to best (Kueue's preemptionMode)."""

    NO_FIT = 0
    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4


class Mode(IntEnum):
    """The workload's representative mode (Kueue's FlavorAssignmentMode)."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


_SEVERITY = {
    PendingReasonKind.WAITING_FOR_QUOTA: 1,
    PendingReasonKind.EXCEEDS_MAX_QUOTA: 2,
    PendingReasonKind.NO_MATCHING_FLAVOR: 3,
}

Oracle = Callable[[FlavorResource, int], tuple[PMode, int]]
"""Simulates preemption for `quantity` of one flavor/resource: (RECLAIM | PREEMPT | NO_CANDIDATES, borrowing level)."""


@dataclass(frozen=True, slots=True)
class Granular:
    pmode: PMode
    borrow: int


_WORST = Granular(PMode.NO_FIT, 1 << 30)
_BEST = Granular(PMode.FIT, 0)


def is_preferred(a: Granular, b: Granular, preference: FungibilityPreference) -> bool:
    if a.pmode is PMode.NO_FIT:
        return False
    if b.pmode is PMode.NO_FIT:
        return True
    a_none, b_none = a.pmode is PMode.NO_CANDIDATES, b.pmode is PMode.NO_CANDIDATES
    if a_none != b_none:
        return not a_none
    if preference is FungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a.borrow != b.borrow:
            return a.borrow < b.borrow
        return a.pmode > b.pmode
    if a.pmode != b.pmode:
        return a.pmode > b.pmode
    return a.borrow < b.borrow


def should_try_next(mode: Granular, cq: ClusterQueue) -> bool:
    ff = cq.flavor_fungibility
    if mode.pmode in (PMode.NO_FIT, PMode.NO_CANDIDATES):
        return True
    if mode.pmode in (PMode.PREEMPT, PMode.RECLAIM) and ff.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR:
        return True
    return mode.borrow > 0 and ff.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR


def tolerates(tol: Toleration, taint: Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    if tol.operator == "Exists":
        return True
    return tol.operator in ("Equal", "") and tol.value == taint.value


def incompatibility(flavor: ResourceFlavor, ps: PodSet) -> str | None:
    """Why the pod set cannot run on this flavor's nodes, or None. Only NoSchedule/NoExecute taints count, and only
    node selector keys that this flavor labels are compared (Kueue's flavorSelector)."""
    for taint in flavor.node_taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in (*ps.tolerations, *flavor.tolerations)):
            return f"untolerated taint {taint.key}={taint.value}:{taint.effect} in flavor {flavor.name}"
    for key in sorted(ps.node_selector):
        label = flavor.node_labels.get(key)
        if label is not None and label != ps.node_selector[key]:
            return f"flavor {flavor.name} doesn't match node selector {key}={ps.node_selector[key]}"
    return None


@dataclass(slots=True)
class PodSetResult:
    name: str
    count: int
    flavors: dict[str, str]  # resource -> flavor
    usage: dict[str, int]  # resource -> total
    modes: dict[str, PMode]


@dataclass(slots=True)
class Assignment:
    pod_sets: list[PodSetResult]
    usage: dict[FlavorResource, int]
    borrowing: int
    mode: Mode
    reason_kind: PendingReasonKind | None = None  # for NO_FIT
    shortages: tuple[Shortage, ...] = ()
    message: str = ""
    frs_need_preemption: frozenset[FlavorResource] = field(default_factory=frozenset)


@dataclass(slots=True)
class _Attempt:
    flavor: str
    kind: PendingReasonKind | None
    shortages: list[Shortage]
    notes: list[str]


def requests_of(ps: PodSet, covers_pods: bool) -> dict[str, int]:
    """Total requests of a pod set; zero requests are ignored, `pods` is added when some group covers it."""
    reqs = {r: q * ps.count for r, q in ps.requests.items() if q * ps.count != 0}
    if covers_pods:
        reqs[PODS] = ps.count * 1000
    return reqs


class FlavorAssigner:
    """Assigns flavors for one ClusterQueue against the current snapshot usage."""

    def __init__(
        self,
        *,
        cq: ClusterQueue,
        node: Node,
        flavors: Mapping[str, ResourceFlavor],
        group_of: Mapping[str, int],
        fair_sharing: bool,
        oracle: Oracle | None,
    ) -> None:
        self.cq = cq
        self.node = node
        self.flavors = flavors
        self.group_of = group_of
        self.fair_sharing = fair_sharing
        self.oracle = oracle
        p = cq.preemption
        self.can_preempt_while_borrowing = p.borrow_within_cohort is not PreemptionPolicy.NEVER or (
            fair_sharing and p.reclaim_within_cohort is not PreemptionPolicy.NEVER
        )
        self.preemption_configured = (
            p.within_cluster_queue is not PreemptionPolicy.NEVER
            or p.reclaim_within_cohort is not PreemptionPolicy.NEVER
        )

    def assign(self, wl: Workload) -> Assignment:
        covers_pods = PODS in self.group_of
        usage: dict[FlavorResource, int] = {}
        borrowing = 0
        results: list[PodSetResult] = []
        for ps in wl.pod_sets:
            reqs = requests_of(ps, covers_pods)
            assigned: dict[str, str] = {}
            modes: dict[str, PMode] = {}
            for res in sorted(reqs):
                if res in assigned:
                    continue
                gi = self.group_of.get(res)
                if gi is None:
                    return _no_fit(
                        PendingReasonKind.NO_MATCHING_FLAVOR,
                        (),
                        f"couldn't assign flavors to pod set {ps.name}: resource {res} unavailable in ClusterQueue",
                    )
                group = self.cq.resource_groups[gi]
                greqs = {r: reqs[r] for r in group.covered_resources if r in reqs}
                best, attempts = self._find_flavor(ps, group, greqs, usage)
                if best is None:
                    return _from_attempts(ps.name, attempts)
                for r, (flavor, pmode, borrow) in best.items():
                    assigned[r] = flavor
                    modes[r] = pmode
                    borrowing = max(borrowing, borrow)
            for res, amount in reqs.items():
                fr = (assigned[res], res)
                usage[fr] = usage.get(fr, 0) + amount
            results.append(PodSetResult(name=ps.name, count=ps.count, flavors=assigned, usage=reqs, modes=modes))
        worst = min((m for r in results for m in r.modes.values()), default=PMode.FIT)
        mode = Mode.FIT if worst is PMode.FIT else Mode.PREEMPT
        need = frozenset((r.flavors[res], res) for r in results for res, m in r.modes.items() if m is not PMode.FIT)
        return Assignment(pod_sets=results, usage=usage, borrowing=borrowing, mode=mode, frs_need_preemption=need)

    def _find_flavor(
        self, ps: PodSet, group: ResourceGroup, greqs: dict[str, int], usage: dict[FlavorResource, int]
    ) -> tuple[dict[str, tuple[str, PMode, int]] | None, list[_Attempt]]:
        preference = self.cq.flavor_fungibility.preference
        best: dict[str, tuple[str, PMode, int]] | None = None
        best_mode = _WORST
        attempts: list[_Attempt] = []
        for fq in group.flavors:
            rf = self.flavors.get(fq.name)
            why = f"flavor {fq.name} not found" if rf is None else incompatibility(rf, ps)
            if why is not None:
                attempts.append(_Attempt(fq.name, PendingReasonKind.NO_MATCHING_FLAVOR, [], [why]))
                continue
            rep = _BEST
            chosen: dict[str, tuple[str, PMode, int]] = {}
            attempt = _Attempt(fq.name, None, [], [])
            for res in sorted(greqs):
                fr = (fq.name, res)
                val = usage.get(fr, 0) + greqs[res]
                pmode, borrow = self._fits_resource_quota(fr, val, attempt)
                g = Granular(pmode, borrow)
                if is_preferred(rep, g, preference):
                    rep = g
                if rep.pmode is PMode.NO_FIT:
                    break
                chosen[res] = (fq.name, pmode, borrow)
            if rep.pmode is not PMode.NO_FIT:
                attempt.kind = None
            attempts.append(attempt)
            if not should_try_next(rep, self.cq):
                return chosen, attempts
            if is_preferred(rep, best_mode, preference):
                best, best_mode = chosen, rep
        return (best if best_mode.pmode is not PMode.NO_FIT else None), attempts

    def _fits_resource_quota(self, fr: FlavorResource, val: int, attempt: _Attempt) -> tuple[PMode, int]:
        node = self.node
        max_capacity = potential_available(node, fr)
        if val > max_capacity:
            attempt.kind = _most_severe(attempt.kind, PendingReasonKind.EXCEEDS_MAX_QUOTA)
            attempt.shortages.append(Shortage(flavor=fr[0], resource=fr[1], requested=val, available=max_capacity))
            attempt.notes.append(
                f"{fr[1]} in flavor {fr[0]}: request {format_quantity(val, fr[1])} exceeds the maximum capacity "
                f"{format_quantity(max_capacity, fr[1])}"
            )
            return PMode.NO_FIT, 0
        borrow, may_reclaim = lowest_subtree_that_fits(node, fr, val)
        avail = cq_available(node, fr)
        if val <= avail:
            return PMode.FIT, borrow
        attempt.shortages.append(Shortage(flavor=fr[0], resource=fr[1], requested=val, available=avail))
        short = format_quantity(val - avail, fr[1])
        attempt.notes.append(f"insufficient unused quota for {fr[1]} in flavor {fr[0]}, {short} more needed")
        if nominal(node, fr) >= val or may_reclaim or self.can_preempt_while_borrowing:
            if self.oracle is None or not (self.preemption_configured or self.can_preempt_while_borrowing):
                return PMode.NO_CANDIDATES, borrow
            return self.oracle(fr, val)
        attempt.kind = _most_severe(attempt.kind, PendingReasonKind.WAITING_FOR_QUOTA)
        return PMode.NO_FIT, borrow


def _most_severe(a: PendingReasonKind | None, b: PendingReasonKind) -> PendingReasonKind:
    if a is None or _SEVERITY[b] >= _SEVERITY[a]:
        return b
    return a


def _no_fit(kind: PendingReasonKind, shortages: tuple[Shortage, ...], message: str) -> Assignment:
    return Assignment(
        pod_sets=[], usage={}, borrowing=0, mode=Mode.NO_FIT, reason_kind=kind, shortages=shortages, message=message
    )


def _from_attempts(ps_name: str, attempts: list[_Attempt]) -> Assignment:
    """Kueue's resolveNoFitReason: the least severe reason over the group's flavors; shortages of the first flavor
    (in the ClusterQueue's order) that has that reason."""
    failed = [a for a in attempts if a.kind is not None]
    if not failed:
        return _no_fit(
            PendingReasonKind.NO_MATCHING_FLAVOR, (), f"couldn't assign flavors to pod set {ps_name}: no flavors"
        )
    kind = min((a.kind for a in failed if a.kind is not None), key=lambda k: _SEVERITY[k])
    first = next(a for a in failed if a.kind is kind)
    notes = "; ".join(n for a in attempts for n in a.notes)
    return _no_fit(kind, tuple(first.shortages), f"couldn't assign flavors to pod set {ps_name}: {notes}")


# --- partial admission ----------------------------------------------------------------------------------------------

R = TypeVar("R")


def can_be_partially_admitted(wl: Workload) -> bool:
    """Some pod set may run with fewer pods than it asks for (Kueue's CanBePartiallyAdmitted)."""
    return any(ps.min_count is not None and ps.min_count < ps.count for ps in wl.pod_sets)


def with_counts(wl: Workload, counts: Sequence[int]) -> Workload:
    """`wl` with each pod set's count replaced (the rest of the pod set as it is)."""
    return replace(
        wl,
        pod_sets=tuple(
            ps if ps.count == n else replace(ps, count=n) for ps, n in zip(wl.pod_sets, counts, strict=True)
        ),
    )


def search_counts(wl: Workload, test: Callable[[tuple[int, ...]], R | None]) -> R | None:
    """Kueue's PodSetReducer.Search: a binary search over how far to step down from the full counts towards the
    minimum ones (every pod set stepped in proportion to its slack, `count - min_count`), for the smallest step whose
    counts pass `test` (not None), so the largest counts that do. Like Kueue, it assumes that fewer pods pass when
    more do, and answers None unless the last passing test is the step the search ends on."""
    full = [ps.count for ps in wl.pod_sets]
    deltas = [ps.count - (ps.count if ps.min_count is None else ps.min_count) for ps in wl.pod_sets]
    total = sum(deltas)
    if total <= 0:
        return None
    last_good, found = 0, None
    lo, hi = 0, total + 1  # Go's sort.Search(total+1, ...)
    while lo < hi:
        step = (lo + hi) // 2
        counts = tuple(f - d * step // total for f, d in zip(full, deltas, strict=True))
        result = test(counts)
        if result is not None:
            last_good, found = step, result
            hi = step
        else:
            lo = step + 1
    return found if found is not None and lo == last_good else None
