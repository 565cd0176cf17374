"""Victim selection: Kueue's classic preemption (hierarchical candidates, greedy removal, fill-back).

A port of `preemption.go`'s classicalPreemptions with `classical/` and `common/`. Pure simulation on the cycle's
snapshot: every removal is undone before returning. Fair-sharing preemption lives in `daemon.domain.fairsharing`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum

from daemon.domain.flavors import PMode
from daemon.domain.model import ClusterQueue, FlavorResource, Millis, PreemptionPolicy
from daemon.domain.ordering import candidate_order, satisfies_policy
from daemon.domain.quota import (
    Node,
    Snapshot,
    any_child_over,
    borrowing_with,
    cq_available,
    is_within_nominal_in,
    lowest_subtree_that_fits,
    nominal,
    quantities_fit_in_quota,
)
from daemon.domain.view import AdmittedWorkload, PendingWorkload


class Variant(IntEnum):
    NEVER = 0
    WITHIN_CQ = 1
    HIERARCHICAL_RECLAIM = 2
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4


REASONS = {
    Variant.WITHIN_CQ: "InClusterQueue",
    Variant.HIERARCHICAL_RECLAIM: "InCohortReclamation",
    Variant.RECLAIM_WITHOUT_BORROWING: "InCohortReclamation",
    Variant.RECLAIM_WHILE_BORROWING: "InCohortReclaimWhileBorrowing",
}


@dataclass(frozen=True, slots=True)
class Target:
    victim: AdmittedWorkload
    reason: str
    policy: str


@dataclass(slots=True)
class _Candidate:
    wl: AdmittedWorkload
    lca: Node | None
    variant: Variant


@dataclass(slots=True)
class Preemptor:
    """Who wants room, for how much, and which workloads are off limits (already claimed this cycle)."""

    pw: PendingWorkload
    cq: ClusterQueue
    node: Node
    usage: dict[FlavorResource, int]
    frs: frozenset[FlavorResource]
    excluded: set[str]
    now: Millis | None = None
    skipped_readmitted: bool = False  # a candidate was passed over because it was readmitted at `now`


def off_limits(p: Preemptor, wl: AdmittedWorkload) -> bool:
    """A workload evicted and admitted again at this very instant is no candidate until time moves on: preempting
    it again would let two preemptors take turns over it at one instant (a preemption loop)."""
    if p.now is not None and wl.readmitted_at(p.now):
        p.skipped_readmitted = True
        return True
    return False


def uses_resources(snap: Snapshot, wl: AdmittedWorkload, frs: frozenset[FlavorResource]) -> bool:
    return any(fr in frs for fr in snap.usage_of(wl))


def workload_fits(p: Preemptor, allow_borrowing: bool) -> bool:
    for fr, v in p.usage.items():
        if not allow_borrowing and borrowing_with(p.node, fr, v):
            return False
        if v > cq_available(p.node, fr):
            return False
    return True


def _borrow_within_cohort_forbidden(cq: ClusterQueue) -> bool:
    return cq.preemption.borrow_within_cohort is PreemptionPolicy.NEVER


def _policy_text(p: Preemptor, variant: Variant) -> str:
    pre = p.cq.preemption
    if variant is Variant.WITHIN_CQ:
        return f"withinClusterQueue={pre.within_cluster_queue.value}"
    if variant is Variant.RECLAIM_WHILE_BORROWING:
        text = f"borrowWithinCohort={pre.borrow_within_cohort.value}"
        if pre.borrow_max_priority_threshold is not None:
            text += f",maxPriorityThreshold={pre.borrow_max_priority_threshold}"
        return text
    return f"reclaimWithinCohort={pre.reclaim_within_cohort.value}"


def _classify(p: Preemptor, snap: Snapshot, wl: AdmittedWorkload, advantage: bool) -> Variant:
    same = wl.admission.cluster_queue == p.cq.name
    policy = p.cq.preemption.within_cluster_queue if same else p.cq.preemption.reclaim_within_cohort
    # Both tests must pass; the policy's (priorities) is the cheaper, so it goes first.
    if not satisfies_policy(p.pw, wl, policy) or not uses_resources(snap, wl, p.frs):
        return Variant.NEVER
    if same:
        return Variant.WITHIN_CQ
    if advantage:
        return Variant.HIERARCHICAL_RECLAIM
    if _borrow_within_cohort_forbidden(p.cq):
        return Variant.RECLAIM_WITHOUT_BORROWING
    threshold = p.cq.preemption.borrow_max_priority_threshold
    if wl.priority >= p.pw.priority or (threshold is not None and wl.priority > threshold):
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING


def _from_cq(p: Preemptor, snap: Snapshot, cq: Node, lca: Node | None, advantage: bool) -> list[_Candidate]:
    out: list[_Candidate] = []
    for key, wl in snap.workloads_by_cq.get(cq.name, {}).items():
        if key in p.excluded or key in snap.removed or off_limits(p, wl):
            continue
        variant = _classify(p, snap, wl, advantage)
        if variant is not Variant.NEVER:
            out.append(_Candidate(wl, lca, variant))
    return out


def _in_subtree(
    p: Preemptor, snap: Snapshot, cohort: Node, root: Node, skip: Node | None, adv: bool
) -> list[_Candidate]:
    out: list[_Candidate] = []
    if not any_child_over(cohort, p.frs):
        return out  # every child is within nominal: the loops below would skip them all
    for child in cohort.child_cohorts:
        if child is skip or is_within_nominal_in(child, p.frs):
            continue
        out.extend(_in_subtree(p, snap, child, root, skip, adv))
    for child_cq in cohort.child_cqs:
        if child_cq is p.node or is_within_nominal_in(child_cq, p.frs):
            continue
        out.extend(_from_cq(p, snap, child_cq, root, adv))
    return out


def _candidates(p: Preemptor, snap: Snapshot) -> tuple[list[_Candidate], bool, bool]:
    """All candidates in Kueue's order, and whether there are none from other queues / for hierarchical reclaim."""
    same: list[_Candidate] = []
    if p.cq.preemption.within_cluster_queue is not PreemptionPolicy.NEVER:
        same = _from_cq(p, snap, p.node, None, False)
    hierarchy: list[_Candidate] = []
    priority: list[_Candidate] = []
    if p.node.parent is not None and p.cq.preemption.reclaim_within_cohort is not PreemptionPolicy.NEVER:
        advantage, remaining = quantities_fit_in_quota(p.node, p.usage)
        previous: Node | None = None
        for current in p.node.path_to_root():
            found = _in_subtree(p, snap, current, current, previous, advantage)
            (hierarchy if advantage else priority).extend(found)
            fit, remaining = quantities_fit_in_quota(current, remaining)
            advantage = advantage or fit
            previous = current

    def order(cands: list[_Candidate]) -> tuple[list[_Candidate], list[_Candidate]]:
        cands.sort(key=lambda c: candidate_order(c.wl, p.cq.name))
        return [c for c in cands if c.wl.evicting], [c for c in cands if not c.wl.evicting]

    eh, nh = order(hierarchy)
    ep, np_ = order(priority)
    es, ns = order(same)
    return [*eh, *ep, *es, *nh, *np_, *ns], not hierarchy and not priority, not hierarchy


def _valid(p: Preemptor, snap: Snapshot, c: _Candidate, borrow: bool) -> bool:
    cq_name = c.wl.admission.cluster_queue
    if cq_name == p.cq.name:
        return True
    if borrow and c.variant is Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    node = snap.tree.cqs[cq_name]
    if is_within_nominal_in(node, p.frs):
        return False
    for anc in node.path_to_root():
        if anc is c.lca:
            break
        if is_within_nominal_in(anc, p.frs):
            return False
    return True


def _under_nominal(p: Preemptor) -> bool:
    return all(nominal(p.node, fr) > p.node.usage.get(fr, 0) for fr in p.frs)


def _any_hierarchical(p: Preemptor) -> bool:
    """Whether `_candidates` would look for candidates of other queues at some Cohort level with the hierarchical
    advantage (the preemptor's request fits in the quota of the subtree below that level)."""
    advantage, remaining = quantities_fit_in_quota(p.node, p.usage)
    for current in p.node.path_to_root():
        if advantage:
            return True
        fit, remaining = quantities_fit_in_quota(current, remaining)
        advantage = fit
    return False


def _mark_off_limits(p: Preemptor, snap: Snapshot, cohort: Node, skip: Node | None) -> None:
    """The off-limits test `_in_subtree` applies to the workloads it looks at (it marks the preemptor when one is
    passed over), over the same queues, without classifying them."""
    if not any_child_over(cohort, p.frs):
        return
    for child in cohort.child_cohorts:
        if child is skip or is_within_nominal_in(child, p.frs):
            continue
        _mark_off_limits(p, snap, child, skip)
        if p.skipped_readmitted:
            return
    now, excluded, removed = p.now, p.excluded, snap.removed
    for child_cq in cohort.child_cqs:
        if child_cq is p.node or is_within_nominal_in(child_cq, p.frs):
            continue
        for key, wl in snap.workloads_by_cq.get(child_cq.name, {}).items():
            # `off_limits` (`readmitted_at`), its cheap test first
            if wl.admitted_at == now and wl.evicted_at == now and key not in excluded and key not in removed:
                p.skipped_readmitted = True
                return


def _own_queue_targets(p: Preemptor, snap: Snapshot) -> list[Target]:
    """`classical_targets` when the preemptor may only borrow (borrowWithinCohort Never, its queue not below nominal
    in every flavor it needs) and no Cohort level gives it the hierarchical advantage. Then the only attempt allows
    borrowing and every candidate from another queue is RECLAIM_WITHOUT_BORROWING, which that attempt never removes
    (`_valid`): the victims can only be its own queue's, tried in the same order, so the other queues' workloads
    need no classifying (only their off-limits test, for its mark). The same result, for the heads that do not fit
    in a full Cohort at a fraction of the work."""
    if p.node.parent is not None and p.cq.preemption.reclaim_within_cohort is not PreemptionPolicy.NEVER:
        previous: Node | None = None
        if p.now is not None:
            for current in p.node.path_to_root():
                _mark_off_limits(p, snap, current, previous)
                if p.skipped_readmitted:
                    break
                previous = current
    if p.cq.preemption.within_cluster_queue is PreemptionPolicy.NEVER:
        return []
    same = _from_cq(p, snap, p.node, None, False)
    if not same:
        return []
    same.sort(key=lambda c: candidate_order(c.wl, p.cq.name))
    return (
        _remove_until_fits(
            p, snap, [*(c for c in same if c.wl.evicting), *(c for c in same if not c.wl.evicting)], True
        )
        or []
    )


def own_queue_only(p: Preemptor) -> bool:
    """Whether only the preemptor's own queue can give victims (`_own_queue_targets`)."""
    return _borrow_within_cohort_forbidden(p.cq) and not _under_nominal(p) and not _any_hierarchical(p)


def classical_targets(p: Preemptor, snap: Snapshot) -> list[Target]:
    """The victims that make room for `p`, near-minimal, or [] when none do. The snapshot is left unchanged."""
    if own_queue_only(p):
        return _own_queue_targets(p, snap)
    return all_candidates_targets(p, snap)


def all_candidates_targets(p: Preemptor, snap: Snapshot) -> list[Target]:
    """`classical_targets` over every candidate, as Kueue's classicalPreemptions."""
    candidates, none_from_others, none_hierarchical = _candidates(p, snap)
    if not candidates:
        return []
    forbidden = _borrow_within_cohort_forbidden(p.cq)
    if none_from_others or (forbidden and not _under_nominal(p)):
        attempts = [True]
    elif forbidden and none_hierarchical:
        attempts = [False, True]
    else:
        attempts = [True, False]
    for borrow in attempts:
        # lazy: `_valid` reads the snapshot as the removals before it left it
        valid = (c for c in candidates if _valid(p, snap, c, borrow))
        targets = _remove_until_fits(p, snap, valid, borrow)
        if targets is not None:
            return targets
    return []


def _remove_until_fits(
    p: Preemptor, snap: Snapshot, candidates: Iterable[_Candidate], borrow: bool
) -> list[Target] | None:
    """Remove candidates in order until `p` fits, fill back, and return the victims (the snapshot without them), or
    None with the snapshot as it was when no prefix of the candidates makes room."""
    removed: list[_Candidate] = []
    for c in candidates:
        snap.remove_workload(c.wl)
        removed.append(c)
        if workload_fits(p, borrow):
            kept = _fill_back(p, snap, removed, borrow)
            for k in kept:
                snap.add_workload(k.wl)
            return [Target(k.wl, REASONS[k.variant], _policy_text(p, k.variant)) for k in kept]
    for c in removed:
        snap.add_workload(c.wl)
    return None


def _fill_back(p: Preemptor, snap: Snapshot, removed: list[_Candidate], borrow: bool) -> list[_Candidate]:
    """Re-add victims, last removed first (except the last, which made it fit), while the preemptor still fits."""
    kept = list(removed)
    for i in range(len(removed) - 2, -1, -1):
        snap.add_workload(removed[i].wl)
        if workload_fits(p, borrow):
            kept.remove(removed[i])
        else:
            snap.remove_workload(removed[i].wl)
    return kept


TargetsFn = Callable[[Preemptor, Snapshot], list[Target]]


def _fill_back_targets(p: Preemptor, snap: Snapshot, targets: list[Target], borrow: bool) -> list[Target]:
    """Fill-back over already-removed targets (fair sharing's victims): the same rule as for classic ones."""
    kept = list(targets)
    for i in range(len(targets) - 2, -1, -1):
        snap.add_workload(targets[i].victim)
        if workload_fits(p, borrow):
            kept.remove(targets[i])
        else:
            snap.remove_workload(targets[i].victim)
    return kept


def oracle_mode(
    p: Preemptor, snap: Snapshot, fr: FlavorResource, quantity: int, targets_fn: TargetsFn | None = None
) -> tuple[PMode, int]:
    """Kueue's SimulatePreemption for one flavor/resource: the mode it would reach and the borrowing level after."""
    single = Preemptor(
        pw=p.pw, cq=p.cq, node=p.node, usage={fr: quantity}, frs=frozenset({fr}), excluded=p.excluded, now=p.now
    )
    targets = (targets_fn or classical_targets)(single, snap)
    p.skipped_readmitted |= single.skipped_readmitted
    if not targets:
        return PMode.NO_CANDIDATES, lowest_subtree_that_fits(p.node, fr, quantity)[0]
    for t in targets:
        snap.remove_workload(t.victim)
    borrow = lowest_subtree_that_fits(p.node, fr, quantity)[0]
    for t in targets:
        snap.add_workload(t.victim)
    if any(t.victim.admission.cluster_queue == p.cq.name for t in targets):
        return PMode.PREEMPT, borrow
    return PMode.RECLAIM, borrow


def victims_keys(targets: Iterable[Target]) -> list[str]:
    return sorted(t.victim.key for t in targets)
