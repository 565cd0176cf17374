"""Fair sharing: weighted dominant resource shares (DRS), the admission tournament and fair-sharing preemption.

Ports of Kueue's `fair_sharing.go`, `fair_sharing_iterator.go` and `preemption.go`'s fairPreemptions with the
default strategies (S2-a LessThanOrEqualToFinalShare, then S2-b LessThanInitialShare). Shares are exact Fractions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from daemon.domain.model import FlavorResource, PreemptionPolicy
from daemon.domain.ordering import candidate_order, satisfies_policy
from daemon.domain.preemption import Preemptor, Target, _fill_back_targets, uses_resources, workload_fits
from daemon.domain.quota import (
    Node,
    Snapshot,
    add_usage,
    borrowing_with,
    post_order,
    potential_available,
    remove_usage,
)
from daemon.domain.view import AdmittedWorkload


@dataclass(frozen=True, slots=True)
class DRS:
    """A node's dominant resource share. `key` orders shares: lower is fairer to serve, higher fairer to preempt."""

    key: tuple[int, Fraction]  # (1, ratio) when a zero-weight node borrows (an infinite share), else (0, ratio/weight)
    borrowed: frozenset[FlavorResource]

    @property
    def borrowing(self) -> bool:
        return bool(self.borrowed)


ZERO = DRS((0, Fraction(0)), frozenset())


def dominant_resource_share(node: Node, extra: Mapping[FlavorResource, int] | None = None) -> DRS:
    if node.parent is None:
        return ZERO
    extra = extra or {}
    by_resource: dict[str, int] = {}
    borrowed: set[FlavorResource] = set()
    for fr in sorted(set(node.subtree) | set(extra)):
        over = node.usage.get(fr, 0) + extra.get(fr, 0) - node.subtree.get(fr, 0)
        if over > 0:
            by_resource[fr[1]] = by_resource.get(fr[1], 0) + over
            borrowed.add(fr)
    if not by_resource:
        return ZERO
    root = node.root()
    lendable: dict[str, int] = {}
    for fr in root.subtree:
        lendable[fr[1]] = lendable.get(fr[1], 0) + potential_available(node.parent, fr)
    ratio = Fraction(0)
    for res in sorted(by_resource):
        if lendable.get(res, 0) > 0:
            ratio = max(ratio, Fraction(by_resource[res] * 1000, lendable[res]))
    if node.weight == 0:
        return DRS((1, ratio) if ratio else (0, Fraction(0)), frozenset(borrowed))
    return DRS((0, ratio * 1000 / node.weight), frozenset(borrowed))


E = TypeVar("E")


def tournament(
    root: Node,
    cqs: Mapping[str, Node],
    entries: Mapping[str, E],
    usage_of: Callable[[E], Mapping[FlavorResource, int]],
    tie_break: Callable[[E], tuple[object, ...]],
    is_preemptor: Callable[[E], bool] | None = None,
) -> E | None:
    """The next entry of a tree (`entries` by ClusterQueue name): at each cohort, the child whose nominee leaves it
    with the lowest share wins; a preemptor waiting for its victims first (`is_preemptor`, Kueue's
    PrioritizePreemptorWorkloads), then not borrowing on the nominee's flavors, then share, then `tie_break`."""
    shares: dict[tuple[str, str], DRS] = {}
    for cq_name, e in entries.items():
        node = cqs[cq_name]
        usage = usage_of(e)
        for fr, v in usage.items():
            add_usage(node, fr, v)
        share = dominant_resource_share(node)
        for ancestor in node.path_to_root():
            shares[(ancestor.name, cq_name)] = share
            share = dominant_resource_share(ancestor)
        for fr, v in usage.items():
            remove_usage(node, fr, v)

    # Each cohort's nominee from its children's, children first; a loop, so a deep chain cannot overflow the stack.
    won_at: dict[str, tuple[str, E]] = {}
    for cohort in post_order(root):
        nominees = [won_at[c.name] for c in cohort.child_cohorts if c.name in won_at]
        nominees.extend((c.name, entries[c.name]) for c in cohort.child_cqs if c.name in entries)
        if not nominees:
            continue

        def key(item: tuple[str, E], cohort: Node = cohort) -> tuple[object, ...]:
            drs = shares.get((cohort.name, item[0]), ZERO)
            requested = set(usage_of(item[1]))
            first = is_preemptor is None or is_preemptor(item[1])
            return (not first, bool(drs.borrowed & requested), drs.key, tie_break(item[1]))

        won_at[cohort.name] = min(nominees, key=key)
    won = won_at.get(root.name)
    return None if won is None else won[1]


def _subtree_cqs(node: Node) -> Sequence[Node]:
    """Every ClusterQueue under `node`, depth first (its own first, then each child cohort's), without recursion."""
    out: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        out.extend(n.child_cqs)
        stack.extend(reversed(n.child_cohorts))
    return out


# --- preemption ---------------------------------------------------------------------------------------------------


def _cq_borrowing(node: Node, frs: frozenset[FlavorResource]) -> bool:
    return node.parent is not None and any(borrowing_with(node, fr, 0) for fr in frs)


def fair_targets(p: Preemptor, snap: Snapshot) -> list[Target]:
    """Kueue's fairPreemptions for flat or hierarchical trees, comparing shares at the ClusterQueue level."""
    pre = p.cq.preemption
    candidates: list[AdmittedWorkload] = []
    if pre.within_cluster_queue is not PreemptionPolicy.NEVER:
        for key, wl in snap.workloads_by_cq.get(p.cq.name, {}).items():
            ok = key not in snap.removed and satisfies_policy(p.pw, wl, pre.within_cluster_queue)
            if ok and uses_resources(snap, wl, p.frs):
                candidates.append(wl)
    if p.node.parent is not None and pre.reclaim_within_cohort is not PreemptionPolicy.NEVER:
        for other in _subtree_cqs(p.node.root()):
            if other is p.node or not _cq_borrowing(other, p.frs):
                continue
            for key, wl in snap.workloads_by_cq.get(other.name, {}).items():
                if key in snap.removed or not satisfies_policy(p.pw, wl, pre.reclaim_within_cohort):
                    continue
                if uses_resources(snap, wl, p.frs):
                    candidates.append(wl)
    if not candidates:
        return []
    candidates.sort(key=lambda wl: candidate_order(wl, p.cq.name))
    snap.add_usage(p.node, p.usage)  # shares are computed as if the preemptor were admitted
    within_nominal = not any(borrowing_with(p.node, fr, 0) for fr in p.frs)
    targets: list[Target] = []
    retry: list[AdmittedWorkload] = []

    def fits() -> bool:
        snap.remove_usage(p.node, p.usage)
        ok = workload_fits(p, True)
        snap.add_usage(p.node, p.usage)
        return ok

    def take(wl: AdmittedWorkload, reason: str, policy: str) -> bool:
        snap.remove_workload(wl)
        targets.append(Target(wl, reason, policy))
        return fits()

    done = False
    pending = list(candidates)
    while pending and not done:
        cq_name = _highest_share_cq(pending, snap)
        wl = next(w for w in pending if w.admission.cluster_queue == cq_name)
        pending.remove(wl)
        if cq_name == p.cq.name:
            done = take(wl, "InClusterQueue", f"withinClusterQueue={pre.within_cluster_queue.value}")
            continue
        if within_nominal:
            done = take(wl, "InCohortReclamation", f"reclaimWithinCohort={pre.reclaim_within_cohort.value}")
            continue
        target = snap.tree.cqs[cq_name]
        preemptor_share = dominant_resource_share(p.node).key
        snap.remove_workload(wl)
        target_after = dominant_resource_share(target).key
        snap.add_workload(wl)
        if preemptor_share <= target_after:  # S2-a: LessThanOrEqualToFinalShare
            done = take(wl, "InCohortFairSharing", f"reclaimWithinCohort={pre.reclaim_within_cohort.value}")
        else:
            retry.append(wl)
    while retry and not done:  # S2-b: LessThanInitialShare, at most one victim per ClusterQueue
        cq_name = _highest_share_cq(retry, snap)
        wl = next(w for w in retry if w.admission.cluster_queue == cq_name)
        if dominant_resource_share(p.node).key < dominant_resource_share(snap.tree.cqs[cq_name]).key:
            done = take(wl, "InCohortFairSharing", f"reclaimWithinCohort={pre.reclaim_within_cohort.value}")
        retry = [w for w in retry if w.admission.cluster_queue != cq_name]
    snap.remove_usage(p.node, p.usage)
    if not done:
        for t in targets:
            snap.add_workload(t.victim)
        return []
    kept = _fill_back_targets(p, snap, targets, True)
    for t in kept:
        snap.add_workload(t.victim)
    return kept


def _highest_share_cq(cands: list[AdmittedWorkload], snap: Snapshot) -> str:
    names = sorted({w.admission.cluster_queue for w in cands})
    return max(names, key=lambda n: (dominant_resource_share(snap.tree.cqs[n]).key, n))
