"""Fair-sharing preemption over the branches of the cohort tree (Kueue's `fairPreemptions`).

Kueue's `preemption/fairsharing` (ordering.go, least_common_ancestor.go, target.go, strategy.go), rewritten:

- Target ClusterQueues are found by walking from the root Cohort, at each level entering the child (ClusterQueue
  or Cohort) with the highest share that still may yield candidates. A ClusterQueue that does not borrow (other
  than the preemptor's) and a Cohort that does not borrow and is not on the preemptor's path are pruned, so a
  queue borrowing only inside its own non-borrowing Cohort is never a target of an outsider.
- Shares are compared between the two children of the lowest common Cohort of preemptor and target (the
  "almost lowest common ancestors"), each with its own fair weight, so Cohort weights take effect.
- The configured strategies (`LessThanOrEqualToFinalShare`, `LessThanInitialShare`) are tried in the order given.

The walk is a loop, not a recursion, so a deep chain of Cohorts costs no stack.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Final

from daemon.domain.fairsharing import dominant_resource_share
from daemon.domain.model import PreemptionPolicy
from daemon.domain.ordering import candidate_order, satisfies_policy
from daemon.domain.preemption import (
    Preemptor,
    Target,
    _fill_back_targets,
    off_limits,
    uses_resources,
    workload_fits,
)
from daemon.domain.quota import Node, Snapshot, borrowing_with
from daemon.domain.view import AdmittedWorkload

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE: Final = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE: Final = "LessThanInitialShare"
DEFAULT_STRATEGIES: Final = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
VALID_STRATEGY_SETS: Final = (
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (LESS_THAN_INITIAL_SHARE,),
    DEFAULT_STRATEGIES,
)
"""The only lists Kueue's configuration validation accepts (`validStrategySets`)."""

ShareKey = tuple[int, Fraction]
_NEGATIVE: Final[ShareKey] = (-1, Fraction(0))  # below every share: Kueue's NegativeDRS


def _share(node: Node) -> ShareKey:
    return dominant_resource_share(node).key


def _borrowing(node: Node) -> bool:
    """DRS.IsBorrowing: usage above the node's subtree quota in some flavor/resource."""
    if node.parent is None:
        return False
    subtree = node.subtree
    return any(u > subtree.get(fr, 0) for fr, u in node.usage.items())


class TargetOrdering:
    """Which ClusterQueue to take the next candidate from (Kueue's TargetClusterQueueOrdering).

    `next()` walks from the root into the child with the highest share; it returns the same ClusterQueue again
    while that one still has the highest share, so the caller must `pop` from it or `drop` it between calls."""

    __slots__ = ("_ancestors", "_cq_name", "_preemptor", "_pruned", "_root", "_targets")

    def __init__(self, preemptor: Node, preemptor_cq: str, candidates: Sequence[AdmittedWorkload]) -> None:
        self._preemptor = preemptor
        self._cq_name = preemptor_cq
        self._ancestors: set[int] = {id(a) for a in preemptor.path_to_root()}
        self._targets: dict[str, list[AdmittedWorkload]] = {}
        for wl in candidates:  # already in candidate order
            self._targets.setdefault(wl.admission.cluster_queue, []).append(wl)
        for lst in self._targets.values():
            lst.reverse()  # popped from the end
        self._pruned: set[int] = set()
        self._root = preemptor.root()

    def has_workload(self, cq: Node) -> bool:
        return bool(self._targets.get(cq.name))

    def pop(self, cq: Node) -> AdmittedWorkload:
        return self._targets[cq.name].pop()

    def drop(self, cq: Node) -> None:
        self._pruned.add(id(cq))

    def on_preemptor_path(self, cohort: Node) -> bool:
        return id(cohort) in self._ancestors

    def next(self) -> Node | None:
        pre = self._preemptor
        if pre.parent is None:
            if id(pre) in self._pruned or not self.has_workload(pre):
                return None
            return pre
        root = self._root
        while id(root) not in self._pruned:
            target = self._next_target(root)
            if target is not None:
                return target
        return None

    def _next_target(self, cohort: Node) -> Node | None:
        """One descent from `cohort`; None when it only pruned nodes (the caller starts again from the root)."""
        pruned = self._pruned
        node = cohort
        while True:
            best_cq: Node | None = None
            best_cq_share = _NEGATIVE
            for cq in node.child_cqs:
                if id(cq) in pruned:
                    continue
                if (cq is not self._preemptor and not _borrowing(cq)) or not self.has_workload(cq):
                    pruned.add(id(cq))
                    continue
                share = _share(cq)
                if best_cq is None or share > best_cq_share:
                    best_cq, best_cq_share = cq, share
                elif share == best_cq_share:
                    mine = self._targets[cq.name][-1]
                    theirs = self._targets[best_cq.name][-1]
                    if candidate_order(mine, self._cq_name) < candidate_order(theirs, self._cq_name):
                        best_cq = cq
            best_cohort: Node | None = None
            best_cohort_share = _NEGATIVE
            for child in node.child_cohorts:
                if id(child) in pruned:
                    continue
                # A Cohort that does not borrow cannot owe anything to outsiders; one on the preemptor's path may
                # still hold an imbalance within, so it is pruned only once all its children are.
                if not _borrowing(child) and not self.on_preemptor_path(child):
                    pruned.add(id(child))
                    continue
                share = _share(child)
                if share >= best_cohort_share:
                    best_cohort, best_cohort_share = child, share
            if best_cq is None and best_cohort is None:
                pruned.add(id(node))
                return None
            # Ties go to the Cohort: within it the most unfair node can be chosen.
            if best_cohort is not None and best_cohort_share >= best_cq_share:
                node = best_cohort
                continue
            return best_cq


def _almost_lca(cq: Node, lca: Node) -> Node:
    """The node on `cq`'s path whose parent is `lca` (`cq` itself when its parent is)."""
    node = cq
    while node.parent is not None and node.parent is not lca:
        node = node.parent
    return node


def _lca(ordering: TargetOrdering, target: Node) -> Node:
    for ancestor in target.path_to_root():
        if ordering.on_preemptor_path(ancestor):
            return ancestor
    raise AssertionError(f"no common cohort for {target.name}")  # the ordering only yields nodes of the same tree


def _shares(ordering: TargetOrdering, preemptor: Node, target: Node) -> tuple[ShareKey, ShareKey, Node]:
    """(preemptor's new share, target's old share, the target's almost-LCA) at the lowest common Cohort."""
    lca = _lca(ordering, target)
    target_side = _almost_lca(target, lca)
    return _share(_almost_lca(preemptor, lca)), _share(target_side), target_side


def _passes(strategy: str, preemptor_new: ShareKey, target_old: ShareKey, target_new: ShareKey) -> bool:
    if strategy == LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return preemptor_new <= target_new
    return preemptor_new < target_old


def _unsatisfiable(preemptor_new: ShareKey, target_old: ShareKey) -> bool:
    """A borrowing zero-weight preemptor (an infinite share) can beat only another infinite share."""
    return preemptor_new[0] == 1 and target_old[0] != 1


def _candidates(p: Preemptor, snap: Snapshot) -> list[AdmittedWorkload]:
    """Candidates in candidate order. A ClusterQueue's candidates stop at its first one readmitted at this instant
    (`off_limits`): the search takes a ClusterQueue's workloads in that order, so without the stop the guard would
    push it onto the ones after, e.g. a priority-200 job within nominal quota in place of the priority-100 ones just
    readmitted by borrowing, which that job had preempted itself, so that the two took turns at every completion."""
    pre = p.cq.preemption
    out: list[AdmittedWorkload] = []
    stops: dict[str, tuple[int, int, int, int, str]] = {}

    def consider(wl: AdmittedWorkload) -> None:
        if not uses_resources(snap, wl, p.frs):
            return
        if off_limits(p, wl):
            key = candidate_order(wl, p.cq.name)
            cq_name = wl.admission.cluster_queue
            if cq_name not in stops or key < stops[cq_name]:
                stops[cq_name] = key
            return
        out.append(wl)

    removed = snap.removed
    if pre.within_cluster_queue is not PreemptionPolicy.NEVER:
        for key, wl in snap.workloads_by_cq.get(p.cq.name, {}).items():
            if key not in removed and satisfies_policy(p.pw, wl, pre.within_cluster_queue):
                consider(wl)
    if p.node.parent is not None and pre.reclaim_within_cohort is not PreemptionPolicy.NEVER:
        stack = [p.node.root()]
        while stack:
            cohort = stack.pop()
            stack.extend(cohort.child_cohorts)
            for other in cohort.child_cqs:
                if other is p.node or not any(borrowing_with(other, fr, 0) for fr in p.frs):
                    continue
                for key, wl in snap.workloads_by_cq.get(other.name, {}).items():
                    if key not in removed and satisfies_policy(p.pw, wl, pre.reclaim_within_cohort):
                        consider(wl)
    if stops:
        out = [
            wl
            for wl in out
            if wl.admission.cluster_queue not in stops
            or candidate_order(wl, p.cq.name) < stops[wl.admission.cluster_queue]
        ]
    out.sort(key=lambda wl: candidate_order(wl, p.cq.name))
    return out


def fair_targets(p: Preemptor, snap: Snapshot, strategies: Sequence[str] = DEFAULT_STRATEGIES) -> list[Target]:
    """The victims that make room for `p` under fair sharing, or [] when the strategies allow none. The snapshot
    is left as it was."""
    candidates = _candidates(p, snap)
    if not candidates:
        return []
    pre = p.cq.preemption
    reclaim_policy = f"reclaimWithinCohort={pre.reclaim_within_cohort.value}"
    snap.add_usage(p.node, p.usage)  # shares are computed as if the preemptor were admitted
    targets: list[Target] = []

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
    retry: list[AdmittedWorkload] = []
    within_nominal = not any(borrowing_with(p.node, fr, 0) for fr in p.frs)
    ordering = TargetOrdering(p.node, p.cq.name, candidates)
    first = strategies[0]
    while not done:
        target = ordering.next()
        if target is None:
            break
        if target is p.node:
            done = take(ordering.pop(target), "InClusterQueue", f"withinClusterQueue={pre.within_cluster_queue.value}")
            continue
        if within_nominal:  # FairSharingPreemptWithinNominal: nominal quota is reclaimed without a share test
            done = take(ordering.pop(target), "InCohortReclamation", reclaim_policy)
            continue
        preemptor_new, target_old, target_side = _shares(ordering, p.node, target)
        if _unsatisfiable(preemptor_new, target_old):
            while ordering.has_workload(target):
                retry.append(ordering.pop(target))
            continue
        while ordering.has_workload(target):
            wl = ordering.pop(target)
            snap.remove_workload(wl)
            target_new = _share(target_side)
            snap.add_workload(wl)
            if _passes(first, preemptor_new, target_old, target_new):
                done = take(wl, "InCohortFairSharing", reclaim_policy)
                break  # shares changed: the walk may now enter another branch
            retry.append(wl)
    if not done and len(strategies) > 1:
        ordering = TargetOrdering(p.node, p.cq.name, retry)
        while not done:
            target = ordering.next()
            if target is None:
                break
            preemptor_new, target_old, _ = _shares(ordering, p.node, target)
            wl = ordering.pop(target)
            if _passes(LESS_THAN_INITIAL_SHARE, preemptor_new, target_old, target_old):
                done = take(wl, "InCohortFairSharing", reclaim_policy)
            ordering.drop(target)  # S2-b applies at most once per ClusterQueue
    snap.remove_usage(p.node, p.usage)
    if not done:
        for t in targets:
            snap.add_workload(t.victim)
        return []
    kept = _fill_back_targets(p, snap, targets, True)
    for t in kept:
        snap.add_workload(t.victim)
    return kept
