"""The quota tree: ClusterQueue and Cohort nodes with Kueue's nominal, borrowing and lending arithmetic.

A port of Kueue's `pkg/cache/scheduler/resource_node.go` over exact integers. `QuotaTree.build` turns the view's
configuration into nodes once; `QuotaTree.load_usage` fills usage per cycle; what-if steps mutate and revert it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from daemon.domain.model import ClusterQueue, Cohort, FlavorResource, ResourceFlavor, ResourceGroup
from daemon.domain.view import AdmittedWorkload

UNLIMITED: Final = 2**63 - 1
"""A quota at or above this is unlimited; arithmetic with it saturates instead of drifting (Kueue's `Amount`)."""


# Comparisons rather than min/max: these run for every quota check of every cycle.


def sat_add(a: int, b: int) -> int:
    if a >= UNLIMITED or b >= UNLIMITED:
        return UNLIMITED
    total = a + b
    return total if total < UNLIMITED else UNLIMITED


def sat_sub(a: int, b: int) -> int:
    if a >= UNLIMITED:
        return 0 if b >= UNLIMITED else UNLIMITED
    if b >= UNLIMITED:
        return -UNLIMITED
    diff = a - b
    if diff > UNLIMITED:
        return UNLIMITED
    return diff if diff > -UNLIMITED else -UNLIMITED


@dataclass(frozen=True, slots=True)
class Limits:
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None


class Node:
    """One ClusterQueue or Cohort. `quotas`, `subtree` and `local` are configuration; only `usage` changes, and
    with it `over`: per flavor/resource, how many children are above their own subtree quota (not within nominal),
    kept by `add_usage`, `remove_usage` and `load_usage` so that preemption skips a cohort with none in O(1)."""

    __slots__ = (
        "child_cohorts",
        "child_cqs",
        "height",
        "is_cq",
        "local",
        "name",
        "over",
        "parent",
        "potential",
        "quotas",
        "subtree",
        "top",
        "tree",
        "usage",
        "weight",
    )

    def __init__(self, name: str, *, is_cq: bool, quotas: dict[FlavorResource, Limits], weight: int) -> None:
        self.name = name
        self.is_cq = is_cq
        self.parent: Node | None = None
        self.child_cqs: list[Node] = []
        self.child_cohorts: list[Node] = []
        self.quotas = quotas
        self.subtree: dict[FlavorResource, int] = {fr: q.nominal for fr, q in quotas.items()}
        self.local: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        self.over: dict[FlavorResource, int] = {}
        self.potential: dict[FlavorResource, int] = {}  # potential_available, filled on first use
        self.weight = weight
        self.tree = ""
        self.height = 0
        self.top: Node | None = None  # root(), once asked

    def path_to_root(self) -> Iterable[Node]:
        """The ancestors, parent first."""
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> Node:
        """The top of this node's tree; the tree's shape is configuration, so it is found once per node."""
        if self.top is None:
            node = self
            while node.parent is not None:
                node = node.parent
            self.top = node
        return self.top


def _quotas_of(groups: tuple[ResourceGroup, ...]) -> dict[FlavorResource, Limits]:
    quotas: dict[FlavorResource, Limits] = {}
    for group in groups:
        for fq in group.flavors:
            for rq in fq.resources:
                quotas[(fq.name, rq.name)] = Limits(
                    nominal=min(rq.nominal, UNLIMITED),
                    borrowing_limit=None if rq.borrowing_limit is None else min(rq.borrowing_limit, UNLIMITED),
                    lending_limit=None if rq.lending_limit is None else min(rq.lending_limit, UNLIMITED),
                )
    return quotas


# --- the arithmetic of resource_node.go ---------------------------------------------------------------------


def local_quota(node: Node, fr: FlavorResource) -> int:
    return node.local.get(fr, 0)


def local_available(node: Node, fr: FlavorResource) -> int:
    return max(0, sat_sub(node.local.get(fr, 0), node.usage.get(fr, 0)))


def available(node: Node, fr: FlavorResource) -> int:
    """Free capacity for `node` now, within borrowing limits. Negative after over-admission.

    Kueue's recursion up to the root, computed root first in a loop, so a deep cohort chain cannot overflow the
    stack."""
    path: list[Node] = [node]
    parent = node.parent
    while parent is not None:
        path.append(parent)
        parent = parent.parent
    root = path[-1]
    avail = sat_sub(root.subtree.get(fr, 0), root.usage.get(fr, 0))
    for n in reversed(path[:-1]):
        usage = n.usage.get(fr, 0)
        lq = n.local.get(fr, 0)
        limits = n.quotas.get(fr)
        if limits is not None and limits.borrowing_limit is not None:
            stored_in_parent = sat_sub(n.subtree.get(fr, 0), lq)
            used_in_parent = max(0, usage - lq)
            with_max_from_parent = sat_add(sat_sub(stored_in_parent, used_in_parent), limits.borrowing_limit)
            avail = min(with_max_from_parent, avail)
        avail = sat_add(max(0, sat_sub(lq, usage)), avail)
    return avail


def potential_available(node: Node, fr: FlavorResource) -> int:
    """The most `node` could ever hold with no usage anywhere, within borrowing limits.

    It depends on the configuration only, so each node keeps it once computed (`QuotaTree.build` makes new nodes
    for a new configuration); computed root first in a loop, so a deep chain costs O(depth) once, not per call."""
    hit = node.potential.get(fr)
    if hit is not None:
        return hit
    path: list[Node] = []
    n: Node | None = node
    while n is not None and fr not in n.potential:
        path.append(n)
        n = n.parent
    for n in reversed(path):
        parent = n.parent
        if parent is None:
            avail = n.subtree.get(fr, 0)
        else:
            avail = sat_add(n.local.get(fr, 0), parent.potential[fr])
            limits = n.quotas.get(fr)
            if limits is not None and limits.borrowing_limit is not None:
                avail = min(sat_add(n.subtree.get(fr, 0), limits.borrowing_limit), avail)
        n.potential[fr] = avail
    return node.potential[fr]


def _set_usage(n: Node, fr: FlavorResource, old: int, new: int) -> None:
    n.usage[fr] = new
    parent = n.parent
    if parent is not None:
        quota = n.subtree.get(fr, 0)
        if (old > quota) != (new > quota):
            parent.over[fr] = parent.over.get(fr, 0) + (1 if new > quota else -1)


def add_usage(node: Node, fr: FlavorResource, val: int) -> None:
    """Usage beyond the node's free local quota bubbles up to its parent."""
    n: Node | None = node
    while n is not None and val:
        la = local_available(n, fr)
        usage = n.usage.get(fr, 0)
        _set_usage(n, fr, usage, usage + val)
        if val <= la:
            return
        val -= la
        n = n.parent


def remove_usage(node: Node, fr: FlavorResource, val: int) -> None:
    n: Node | None = node
    while n is not None and val:
        usage = n.usage.get(fr, 0)
        stored_in_parent = usage - n.local.get(fr, 0)
        _set_usage(n, fr, usage, usage - val)
        if stored_in_parent <= 0:
            return
        val = min(val, stored_in_parent)
        n = n.parent


def any_child_over(node: Node, frs: Iterable[FlavorResource]) -> bool:
    """Is some child of `node` above its own subtree quota in one of `frs` (not `is_within_nominal_in`)?"""
    return any(node.over.get(fr, 0) > 0 for fr in frs)


def count_over(node: Node) -> dict[FlavorResource, int]:
    """`node.over` computed from scratch (what `add_usage`/`remove_usage` keep up to date)."""
    over: dict[FlavorResource, int] = {}
    for child in [*node.child_cohorts, *node.child_cqs]:
        for fr, usage in child.usage.items():
            if usage > child.subtree.get(fr, 0):
                over[fr] = over.get(fr, 0) + 1
    return over


def cq_available(cq: Node, fr: FlavorResource) -> int:
    return max(0, available(cq, fr))


def fits(cq: Node, usage: Mapping[FlavorResource, int]) -> bool:
    return all(v <= cq_available(cq, fr) for fr, v in usage.items())


def borrowing_with(node: Node, fr: FlavorResource, val: int) -> bool:
    """Would `node` be above its own (subtree) quota with `val` more? For a ClusterQueue that is its nominal."""
    return node.subtree.get(fr, 0) < node.usage.get(fr, 0) + val


def nominal(cq: Node, fr: FlavorResource) -> int:
    limits = cq.quotas.get(fr)
    return 0 if limits is None else limits.nominal


def is_within_nominal_in(node: Node, frs: Iterable[FlavorResource]) -> bool:
    return all(node.subtree.get(fr, 0) >= node.usage.get(fr, 0) for fr in frs)


def quantities_fit_in_quota(
    node: Node, requests: Mapping[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    """Do `requests` fit in the node's own subtree quota; and what is left for its parent to provide."""
    ok = True
    remaining: dict[FlavorResource, int] = {}
    for fr, v in requests.items():
        if node.subtree.get(fr, 0) < node.usage.get(fr, 0) + v:
            ok = False
        remaining[fr] = max(0, v - local_available(node, fr))
    return ok, remaining


def lowest_subtree_that_fits(cq: Node, fr: FlavorResource, val: int) -> tuple[int, bool]:
    """Kueue's FindHeightOfLowestSubtreeThatFits: the borrowing level of `val` more (0: within nominal), and whether
    that subtree is smaller than the whole tree (so reclaiming inside it may be possible)."""
    if not borrowing_with(cq, fr, val) or cq.parent is None:
        return 0, cq.parent is not None
    remaining = val - local_available(cq, fr)
    for node in cq.path_to_root():
        if not borrowing_with(node, fr, remaining):
            return node.height, node.parent is not None
        remaining -= local_available(node, fr)
    return cq.root().height, False


# --- building the tree ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Inactive:
    """Why a ClusterQueue cannot admit: unknown flavors, a cohort cycle, or a latest version admitd rejected.
    `reason`: the Active condition's reason (Kueue's names; `InvalidSpec` is admitd's own)."""

    message: str
    reason: str = "FlavorNotFound"


class QuotaTree:
    """Every ClusterQueue and Cohort as nodes, keyed by name. Built once per configuration."""

    def __init__(self) -> None:
        self.cqs: dict[str, Node] = {}
        self.cohorts: dict[str, Node] = {}
        self.inactive: dict[str, Inactive] = {}
        self.roots: list[Node] = []
        self.totals = UsageTotals()  # carried between the cycles that use this tree (see Snapshot)

    @classmethod
    def build(
        cls,
        cluster_queues: Mapping[str, ClusterQueue],
        cohorts: Mapping[str, Cohort],
        flavors: Mapping[str, ResourceFlavor],
        rejected: Mapping[str, tuple[str, ...]] | None = None,
    ) -> QuotaTree:
        """`rejected` (`ClusterView.rejected`): held queues whose latest version was rejected; a ClusterQueue so,
        or in a Cohort so, is inactive."""
        tree = cls()
        rejected = rejected or {}
        for name in sorted(cohorts):
            co = cohorts[name]
            tree.cohorts[name] = Node(
                name, is_cq=False, quotas=_quotas_of(co.resource_groups), weight=co.fair_sharing_weight
            )
        # A cohort named only by a ClusterQueue or as a parent exists, with no quota of its own.
        implicit = {cq.cohort for cq in cluster_queues.values() if cq.cohort} | {
            co.parent for co in cohorts.values() if co.parent
        }
        for name in sorted(implicit - tree.cohorts.keys()):
            tree.cohorts[name] = Node(name, is_cq=False, quotas={}, weight=1000)
        broken = _cohorts_in_or_under_cycles(cohorts)
        for name in sorted(cohorts):
            parent = cohorts[name].parent
            if parent and name not in broken:
                child = tree.cohorts[name]
                child.parent = tree.cohorts[parent]
                child.parent.child_cohorts.append(child)
        for name in sorted(cluster_queues):
            cq = cluster_queues[name]
            node = Node(name, is_cq=True, quotas=_quotas_of(cq.resource_groups), weight=cq.fair_sharing_weight)
            tree.cqs[name] = node
            missing = sorted({fq.name for g in cq.resource_groups for fq in g.flavors if fq.name not in flavors})
            if missing:
                tree.inactive[name] = Inactive(message=f"flavor {', '.join(missing)} not found")
            why = rejected.get(f"ClusterQueue/{name}") or (cq.cohort and rejected.get(f"Cohort/{cq.cohort}"))
            if why:
                whose = "its" if f"ClusterQueue/{name}" in rejected else f"cohort {cq.cohort}'s"
                tree.inactive[name] = Inactive(
                    message=f"{whose} latest version was rejected ({'; '.join(why)}); the one before is kept",
                    reason="InvalidSpec",
                )
            if cq.cohort and cq.cohort in broken:
                tree.inactive[name] = Inactive(
                    message=f"cohort {cq.cohort} is in a cohort cycle", reason="CohortCycleDetected"
                )
                node.tree = f"cq:{name}"
                continue
            if cq.cohort:
                node.parent = tree.cohorts[cq.cohort]
                node.parent.child_cqs.append(node)
        for name in sorted(tree.cohorts):
            co_node = tree.cohorts[name]
            if co_node.parent is None and name not in broken:
                tree.roots.append(co_node)
                _accumulate_quota(co_node, name)
        for node in tree.cqs.values():
            if node.parent is None:
                node.tree = f"cq:{node.name}"
                tree.roots.append(node)
            _set_local(node)
        return tree

    def load_usage(self, usage_by_cq: Mapping[str, Mapping[FlavorResource, int]]) -> None:
        """Reset usage to the given per-ClusterQueue totals and bubble it up past each node's local quota."""
        for node in self.cohorts.values():
            node.usage = {}
        for name, node in self.cqs.items():
            # Sorted, so that the order of amounts never depends on how the totals were kept.
            node.usage = dict(sorted(usage_by_cq.get(name, {}).items()))
        for root in self.roots:
            if not root.is_cq:
                _accumulate_usage(root)
        for node in [*self.cqs.values(), *self.cohorts.values()]:
            node.over = {}
        for node in self.cohorts.values():
            node.over = count_over(node)


def _cohorts_in_or_under_cycles(cohorts: Mapping[str, Cohort]) -> set[str]:
    """Names of cohorts on a parent cycle or below one: Kueue disables every member until the cycle is removed.

    One walk up from each cohort not yet settled, each cohort settled once: O(number of cohorts) in all."""
    broken: set[str] = set()
    settled: set[str] = set()
    for start in sorted(cohorts):
        walk: list[str] = []
        on_walk: set[str] = set()
        name: str | None = start
        while name is not None and name in cohorts and name not in settled and name not in on_walk:
            walk.append(name)
            on_walk.add(name)
            name = cohorts[name].parent
        # The walk ends at a root, an undeclared parent, a cohort settled earlier, or a cohort met again (a cycle).
        if name is not None and (name in on_walk or name in broken):
            broken.update(walk)
        settled.update(walk)
    return broken


def _set_local(node: Node) -> None:
    for fr, limits in node.quotas.items():
        if limits.lending_limit is not None:
            node.local[fr] = max(0, sat_sub(node.subtree.get(fr, 0), limits.lending_limit))


def post_order(root: Node) -> list[Node]:
    """The cohorts under `root` (itself included), every child before its parent: a loop, not a recursion, so a
    Cohort chain thousands deep cannot overflow the stack."""
    order: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(node.child_cohorts))
    order.reverse()
    return order


def _accumulate_quota(root: Node, tree: str) -> None:
    for cohort in post_order(root):
        cohort.tree = tree
        cohort.subtree = {fr: q.nominal for fr, q in cohort.quotas.items()}
        height = min(len(cohort.child_cqs) + len(cohort.child_cohorts), 1)
        for child in cohort.child_cohorts:
            height = max(height, child.height + 1)
        for child in cohort.child_cqs:
            child.tree = tree
            _set_local(child)
        for child in [*cohort.child_cohorts, *cohort.child_cqs]:
            for fr, q in child.subtree.items():
                cohort.subtree[fr] = sat_add(cohort.subtree.get(fr, 0), sat_sub(q, child.local.get(fr, 0)))
        cohort.height = height
        _set_local(cohort)


def _accumulate_usage(root: Node) -> None:
    for cohort in post_order(root):
        for child in [*cohort.child_cohorts, *cohort.child_cqs]:
            for fr, u in child.usage.items():
                delta = max(0, u - child.local.get(fr, 0))
                if delta:
                    cohort.usage[fr] = cohort.usage.get(fr, 0) + delta


# --- the per-cycle working snapshot -----------------------------------------------------------------------------


def _usage_totals(
    workloads_by_cq: Mapping[str, Mapping[str, AdmittedWorkload]],
    usage_of: Callable[[AdmittedWorkload], Mapping[FlavorResource, int]],
) -> dict[str, dict[FlavorResource, int]]:
    """Usage per ClusterQueue, summed over its admitted workloads; zero amounts are left out."""
    totals: dict[str, dict[FlavorResource, int]] = {}
    for cq_name, wls in workloads_by_cq.items():
        acc: dict[FlavorResource, int] = {}
        for aw in wls.values():
            for fr, v in usage_of(aw).items():
                acc[fr] = acc.get(fr, 0) + v
        totals[cq_name] = {fr: v for fr, v in acc.items() if v}
    return totals


class UsageTotals:
    """Usage per ClusterQueue kept across cycles by following the fold's journal of admitted-set changes
    (`ClusterView.admitted_journal`): a cycle then costs O(changes since the last one), not O(admitted workloads),
    which made 10,000 jobs created one instant apart quadratic. Equal to `_usage_totals` at every step; a new
    journal list (the fold starts one now and then) or another state means starting over from the sums."""

    __slots__ = ("by_cq", "journal", "position")

    def __init__(self) -> None:
        self.journal: Sequence[tuple[AdmittedWorkload, int]] | None = None
        self.position = 0
        self.by_cq: dict[str, dict[FlavorResource, int]] = {}

    def follow(
        self,
        journal: Sequence[tuple[AdmittedWorkload, int]],
        workloads_by_cq: Mapping[str, Mapping[str, AdmittedWorkload]],
        usage_of: Callable[[AdmittedWorkload], Mapping[FlavorResource, int]],
    ) -> dict[str, dict[FlavorResource, int]]:
        end = len(journal)
        if journal is not self.journal or self.position > end:
            self.by_cq = _usage_totals(workloads_by_cq, usage_of)
        else:
            for i in range(self.position, end):
                aw, sign = journal[i]
                acc = self.by_cq.setdefault(aw.admission.cluster_queue, {})
                for fr, v in usage_of(aw).items():
                    left = acc.get(fr, 0) + sign * v
                    if left:
                        acc[fr] = left
                    else:
                        acc.pop(fr, None)
        self.journal, self.position = journal, end
        return self.by_cq


class Snapshot:
    """The tree with this cycle's usage, plus the admitted workloads by ClusterQueue (read from the view, never
    copied). What-if steps call `remove_workload`/`add_workload` in pairs; committed changes also `touch` the tree
    so caches keyed on an untouched tree stop applying."""

    __slots__ = ("removed", "touched", "tree", "usage_cache", "workloads_by_cq")

    def __init__(
        self,
        tree: QuotaTree,
        workloads_by_cq: Mapping[str, Mapping[str, AdmittedWorkload]],
        usage_cache: dict[str, tuple[object, dict[FlavorResource, int]]],
        journal: Sequence[tuple[AdmittedWorkload, int]] | None = None,
    ) -> None:
        """`journal` is the view's `admitted_journal`: with it, usage per ClusterQueue is carried over from the
        previous cycle on the same tree plus the changes since, instead of summed over every admitted workload."""
        self.tree = tree
        self.workloads_by_cq = workloads_by_cq
        self.usage_cache = usage_cache
        self.removed: set[str] = set()  # workloads claimed as victims (or drained) this cycle: gone from usage
        self.touched: dict[str, int] = {}  # tree -> committed changes this cycle
        if journal is None:
            tree.load_usage(_usage_totals(workloads_by_cq, self.usage_of))
        else:
            tree.load_usage(tree.totals.follow(journal, workloads_by_cq, self.usage_of))

    def usage_of(self, aw: AdmittedWorkload) -> dict[FlavorResource, int]:
        hit = self.usage_cache.get(aw.key)
        if hit is not None and hit[0] is aw.admission:
            return hit[1]
        usage = aw.admission.usage()
        self.usage_cache[aw.key] = (aw.admission, usage)
        return usage

    def add_usage(self, cq: Node, usage: Mapping[FlavorResource, int]) -> None:
        for fr, v in usage.items():
            add_usage(cq, fr, v)

    def remove_usage(self, cq: Node, usage: Mapping[FlavorResource, int]) -> None:
        for fr, v in usage.items():
            remove_usage(cq, fr, v)

    def remove_workload(self, aw: AdmittedWorkload) -> None:
        node = self.tree.cqs.get(aw.admission.cluster_queue)
        if node is not None:
            self.remove_usage(node, self.usage_of(aw))

    def add_workload(self, aw: AdmittedWorkload) -> None:
        node = self.tree.cqs.get(aw.admission.cluster_queue)
        if node is not None:
            self.add_usage(node, self.usage_of(aw))

    def touch(self, tree: str) -> None:
        self.touched[tree] = self.touched.get(tree, 0) + 1

    def version(self, tree: str) -> int:
        return self.touched.get(tree, 0)
