"""Phase 2 of the cycle: the cycle's quota ledger (Kueue's snapshot plus `AssumeWorkload` and resourcesToReserve).

One working snapshot of the quota tree holds *projected* usage: admitted usage, minus the victims claimed this cycle
(they leave soon), plus what waiting preemptors reserve. An admission must fit both the projected usage and the
real usage (victims still counted, reservations not), so nothing is ever over-committed while victims drain. The
ledger also keeps each tree's version in this call (`version`): results keyed by it are results in that state.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from daemon.domain.events import Borrowed
from daemon.domain.flavors import Assignment
from daemon.domain.model import FlavorResource
from daemon.domain.quota import Node, QuotaTree, Snapshot, fits, nominal, sat_add, sat_sub
from daemon.domain.view import AdmittedWorkload, ClusterView


@dataclass(slots=True)
class Hold:
    """Usage reserved in the snapshot by a workload that is not admitted (a waiting preemptor, or one without
    candidates: Kueue's resourcesToReserve, recomputed from `assignment` when it is laid again)."""

    node: Node
    usage: dict[FlavorResource, int]
    assignment: Assignment | None = None
    active: bool = True  # in the snapshot now (lifted while its own queue is being served)
    touches: int = 1  # how often it touched its tree (see `Ledger.drop`)


class Ledger:
    __slots__ = (
        "admitted_in",
        "admitted_now",
        "claimed",
        "evicting",
        "kept",
        "own_victims",
        "pass_start",
        "pass_start_raw",
        "real_cq_usage",
        "reserved",
        "same_as",
        "snap",
        "tree",
    )

    def __init__(
        self, view: ClusterView, tree: QuotaTree, usage_cache: dict[str, tuple[object, dict[FlavorResource, int]]]
    ) -> None:
        self.tree = tree
        self.snap = Snapshot(tree, view.admitted_by_cq, usage_cache, view.admitted_journal)
        # Workloads admitted by this call's passes, per ClusterQueue: preemption candidates in the passes after
        # (each pass is a Kueue cycle, whose snapshot holds what the cycles before admitted).
        self.admitted_now: dict[str, dict[str, AdmittedWorkload]] = {}
        self.snap.workloads_by_cq = _WithAdmitted(view.admitted_by_cq, self.admitted_now)
        # Per tree: victims claimed this cycle and usage reserved by waiting preemptors, to recover real usage.
        self.claimed: dict[str, list[AdmittedWorkload]] = {}
        self.reserved: dict[str, list[Hold]] = {}
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
        # Waiting preemptors that keep the victims they claimed in an earlier cycle (`Cycle.keep_claims`).
        self.kept: dict[str, list[AdmittedWorkload]] = {}
        self.own_victims: dict[str, list[AdmittedWorkload]] = {}
        self.admitted_in: dict[str, set[str]] = {}  # per tree, the ClusterQueues where this cycle admitted
        # A tree whose pass changed nothing but holds that `drop` took away again is in the state it had at the
        # pass's start: (version now, the version of that state), so results found then apply again.
        self.same_as: dict[str, tuple[int, int]] = {}
        self.pass_start: dict[str, int] = {}  # per tree, its version at the pass's start
        self.pass_start_raw: dict[str, int] = {}  # and the snapshot's own count of its changes then

    # --- versions ------------------------------------------------------------------------------------------------

    def version(self, tree: str) -> int:
        """The tree's state in this call: the snapshot's count of changes, or the earlier count whose state it is
        in again (`end_pass`). Results keyed by it (`Queue.equivalent`, `Runs.state`) are results in that state."""
        raw = self.snap.version(tree)
        alias = self.same_as.get(tree)
        return alias[1] if alias is not None and alias[0] == raw else raw

    def begin_pass(self) -> None:
        self.pass_start_raw = dict(self.snap.touched)
        self.pass_start = {tree: self.version(tree) for tree in self.snap.touched}

    def end_pass(self, undone: Mapping[str, int]) -> None:
        """`undone`: per tree, the changes `drop` took back. A tree whose only changes in the pass were those is back
        in the state the pass started in; its version becomes an alias of that state's."""
        for tree, touches in undone.items():
            if self.snap.version(tree) - self.pass_start_raw.get(tree, 0) == touches:
                self.same_as[tree] = (self.snap.version(tree), self.pass_start.get(tree, 0))

    # --- claims and holds -----------------------------------------------------------------------------------------

    def claim(self, aw: AdmittedWorkload) -> None:
        """The workload leaves soon: drop it from projected usage; real usage still counts it."""
        node = self.tree.cqs.get(aw.admission.cluster_queue)
        self.snap.removed.add(aw.key)
        if node is None:
            return
        self.snap.remove_workload(aw)
        self.claimed.setdefault(node.tree, []).append(aw)
        self.snap.touch(node.tree)

    def reserve(self, node: Node, usage: dict[FlavorResource, int], assignment: Assignment | None = None) -> Hold:
        self.snap.add_usage(node, usage)
        hold = Hold(node, usage, assignment)
        self.reserved.setdefault(node.tree, []).append(hold)
        self.snap.touch(node.tree)
        return hold

    def lift(self, hold: Hold | None) -> None:
        """Kueue's reservation for a preemptor without candidates keeps *other* queues off the capacity only: in
        Kueue the queue's next workload is tried in the next cycle without it, so it is lifted for its own queue."""
        if hold is not None and hold.active:
            self.snap.remove_usage(hold.node, hold.usage)
            hold.active = False

    def relay(self, hold: Hold | None) -> None:
        """Lay a lifted hold again, recomputed for the usage its queue's service left (`to_reserve`)."""
        if hold is None or hold.assignment is None or hold.active:
            return
        usage = to_reserve(hold.node, hold.assignment)
        if usage != hold.usage:
            hold.usage = usage
            hold.touches += 1
            self.snap.touch(hold.node.tree)
        self.snap.add_usage(hold.node, usage)
        hold.active = True

    def drop(self, hold: Hold) -> int:
        """Take a hold away for good; how many changes of its tree that undoes."""
        if hold.active:
            self.snap.remove_usage(hold.node, hold.usage)
        self.reserved[hold.node.tree].remove(hold)
        self.snap.touch(hold.node.tree)
        return hold.touches + 1

    # --- what-ifs -----------------------------------------------------------------------------------------------

    def real_fits(self, node: Node, usage: Mapping[FlavorResource, int]) -> bool:
        """Does `usage` fit with this cycle's victims still holding their quota and no reservations?"""
        claimed = self.claimed.get(node.tree, [])
        reserved = [h for h in self.reserved.get(node.tree, []) if h.active]
        if not claimed and not reserved:
            return True
        for aw in claimed:
            self.snap.add_workload(aw)
        for h in reserved:
            self.snap.remove_usage(h.node, h.usage)
        try:
            return fits(node, usage)
        finally:
            for h in reserved:
                self.snap.add_usage(h.node, h.usage)
            for aw in claimed:
                self.snap.remove_workload(aw)

    @contextmanager
    def claimed_back(self, tree: str) -> Iterator[None]:
        """This cycle's victims in `tree` hold their quota again for the block's duration."""
        claimed = self.claimed.get(tree, [])
        for aw in claimed:
            self.snap.add_workload(aw)
        try:
            yield
        finally:
            for aw in claimed:
                self.snap.remove_workload(aw)

    @contextmanager
    def without(self, workloads: Sequence[AdmittedWorkload]) -> Iterator[None]:
        """`workloads` leave the snapshot for the block's duration."""
        for aw in workloads:
            self.snap.remove_workload(aw)
        try:
            yield
        finally:
            for aw in workloads:
                self.snap.add_workload(aw)

    @contextmanager
    def without_holds_of_others(self, node: Node) -> Iterator[list[Hold]]:
        """What other ClusterQueues' active holds in `node`'s tree reserve leaves the snapshot for the block."""
        holds = [h for h in self.reserved.get(node.tree, []) if h.active and h.node is not node]
        for h in holds:
            self.snap.remove_usage(h.node, h.usage)
        try:
            yield holds
        finally:
            for h in holds:
                self.snap.add_usage(h.node, h.usage)

    def leaving(self, tree: str) -> list[AdmittedWorkload]:
        """The tree's already-evicting workloads not claimed this cycle."""
        return [aw for aw in self.evicting.get(tree, ()) if aw.key not in self.snap.removed]

    # --- admissions -----------------------------------------------------------------------------------------------

    def admit(self, cq: str, node: Node, usage: Mapping[FlavorResource, int]) -> tuple[Borrowed, ...]:
        """Count an admission (Kueue's AssumeWorkload); what it borrows, from real usage, in `Borrowed` form."""
        self.snap.add_usage(node, usage)
        self.admitted_in.setdefault(node.tree, set()).add(cq)
        self.snap.touch(node.tree)
        real = self.real_cq_usage.setdefault(cq, {})
        for fr, v in usage.items():
            real[fr] = real.get(fr, 0) + v
        borrowed: list[Borrowed] = []
        if node.parent is not None:
            root = node.root().name
            for fr in sorted(usage):
                above = real[fr] - nominal(node, fr)
                if above > 0:
                    borrowed.append(Borrowed(flavor=fr[0], resource=fr[1], amount=above, cohort=root))
        return tuple(borrowed)


def to_reserve(node: Node, a: Assignment) -> dict[FlavorResource, int]:
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


def blocked_above(node: Node, a: Assignment) -> bool:
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
