"""Fair-sharing preemption over the cohort tree, case by case from Kueue's own tests.

Real: `daemon.domain.fairpreemption.fair_targets` (target ordering from the root, almost-LCA shares, strategies),
the quota tree and its snapshot. Faked: nothing is decided by a cycle here; as in Kueue's TestFairPreemptions
(pkg/scheduler/preemption/preemption_fair_test.go), the incoming workload's assignment is given (one flavor,
`default`, mode Preempt for cpu) and only the targets are compared. Names and expected victims are Kueue's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from daemon.domain.admission import EngineConfig, decide
from daemon.domain.events import WorkloadPreempted
from daemon.domain.fairpreemption import (
    DEFAULT_STRATEGIES,
    LESS_THAN_INITIAL_SHARE,
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    fair_targets,
)
from daemon.domain.model import PodSet
from daemon.domain.preemption import Preemptor
from daemon.domain.quota import QuotaTree, Snapshot
from daemon.domain.view import PendingWorkload
from tests.unit.builders import (
    CohortBuilder,
    CQBuilder,
    JobBuilder,
    cohort,
    cq,
    flavor,
    job,
    lq,
    namespace,
    running,
    world,
)

CPU = ("default", "cpu")
FS, CQ, RECL = "InCohortFairSharing", "InClusterQueue", "InCohortReclamation"


def wl(name: str, cpu: float = 1, priority: int = 0) -> JobBuilder:
    jb = job(name).priority(priority)
    jb.pod_sets.append(PodSet(name="main", count=1, requests={"cpu": round(cpu * 1000)}))
    return jb


def base_cqs() -> list[CQBuilder]:
    """Kueue's baseCQs: a, b, c with 3 CPU each and preemptible with 0, in cohort `all`."""
    out = [
        cq(n).cohort("all").flavor("default", cpu=3).preempt("LowerPriority", "Any", "LowerPriority", -3)
        for n in ("a", "b", "c")
    ]
    out.append(cq("preemptible").cohort("all").flavor("default", cpu=0))
    return out


@dataclass
class Case:
    admitted: list[tuple[JobBuilder, str]]
    incoming: JobBuilder
    target_cq: str
    want: dict[str, str]
    cqs: list[CQBuilder] = field(default_factory=base_cqs)
    cohorts: list[CohortBuilder] = field(default_factory=list)
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES


def units(prefix: str, cq_name: str, n: int, start: int = 1) -> list[tuple[JobBuilder, str]]:
    return [(wl(f"{prefix}{i}"), cq_name) for i in range(start, start + n)]


def _usage(tree: QuotaTree) -> dict[str, dict[tuple[str, str], int]]:
    return {n.name: {fr: v for fr, v in n.usage.items() if v} for n in [*tree.cqs.values(), *tree.cohorts.values()]}


def targets(case: Case) -> dict[str, str]:
    items: list[Any] = [flavor("default"), *case.cqs, *case.cohorts]
    items.extend(running(jb, cq_name, "default") for jb, cq_name in case.admitted)
    w = world(*items)
    v = w.view()
    tree = QuotaTree.build(v.cluster_queues, v.cohorts, v.flavors)
    snap = Snapshot(tree, v.admitted_by_cq, {})
    before = _usage(tree)
    incoming = case.incoming.obj()
    usage = {CPU: sum(ps.requests["cpu"] * ps.count for ps in incoming.pod_sets)}
    p = Preemptor(
        pw=PendingWorkload(
            workload=incoming, priority=case.incoming.prio, local_queue="default/q", queue_order_at=0, last_reason=None
        ),
        cq=v.cluster_queues[case.target_cq],
        node=tree.cqs[case.target_cq],
        usage=usage,
        frs=frozenset(usage),
        excluded=snap.removed,
    )
    got = fair_targets(p, snap, case.strategies)
    assert _usage(tree) == before, "the snapshot must be left as it was"
    return {t.victim.workload.name: t.reason for t in got}


def weighted_abc(a_weight: int = 1000, b_weight: int = 1000) -> list[CQBuilder]:
    return [
        cq("a").cohort("all").flavor("default", cpu=3).preempt("LowerPriority", "Any").weight(a_weight),
        cq("b").cohort("all").flavor("default", cpu=3).preempt("LowerPriority", "Any").weight(b_weight),
        cq("c").cohort("all").flavor("default", cpu=3).preempt("LowerPriority", "Any"),
    ]


def hierarchical_preemption() -> Case:
    """ROOT(5) holds LEFT(5; a w2, b), c and RIGHT(5; d, e w0.99); a (weight 2, LEFT weight 2) takes 5."""
    admitted = [(wl(f"{q}{i}", priority=i), q) for q in "bcde" for i in range(1, 6)]
    return Case(
        cqs=[
            cq("a").cohort("LEFT").weight(2000).flavor("default", cpu=1).preempt(reclaim="Any"),
            cq("b").cohort("LEFT").flavor("default", cpu=1),
            cq("c").cohort("ROOT").flavor("default", cpu=1),
            cq("d").cohort("RIGHT").flavor("default", cpu=1),
            cq("e").cohort("RIGHT").weight(990).flavor("default", cpu=1),
        ],
        cohorts=[
            cohort("ROOT").flavor("default", cpu=5),
            cohort("LEFT").weight(2000).parent("ROOT").flavor("default", cpu=5),
            cohort("RIGHT").parent("ROOT").flavor("default", cpu=5),
        ],
        admitted=admitted,
        incoming=wl("unit", 5),
        target_cq="a",
        want={"b1": FS, "b2": FS, "c1": FS, "c2": FS, "e1": FS},
    )


def deep_preemption() -> Case:
    chain = []
    for org, weight in (("A", 1010), ("B", 990), ("C", 1000)):
        chain += [
            cohort(org).parent("ROOT").weight(weight),
            cohort(org * 2).parent(org),
            cohort(org * 3).parent(org * 2),
        ]
    chain += [cohort("ROOT"), cohort("CCCC").parent("CCC").flavor("default", cpu=1)]
    return Case(
        cqs=[
            cq("a").cohort("AAA").flavor("default", cpu=0).preempt(reclaim="Any"),
            cq("b").cohort("BBB").flavor("default", cpu=0),
        ],
        cohorts=chain,
        admitted=[(wl("b1"), "b")],
        incoming=wl("a1"),
        target_cq="a",
        want={"b1": FS},
    )


CASES = {
    "reclaim nominal from user using the most": Case(
        admitted=units("a", "a", 3) + units("b", "b", 5) + units("c", "c", 1),
        incoming=wl("c_incoming"),
        target_cq="c",
        want={"b1": RECL},
    ),
    "can reclaim from queue using less, if taking the latest workload from user using the most isn't enough": Case(
        admitted=[(wl("a1", 3), "a"), (wl("a2", 1), "a"), (wl("b1", 2), "b"), (wl("b2", 3), "b")],
        incoming=wl("c_incoming", 3),
        target_cq="c",
        want={"a1": RECL},
    ),
    "reclaim borrowable quota from user using the most": Case(
        admitted=units("a", "a", 3) + units("b", "b", 5) + units("c", "c", 1),
        incoming=wl("a_incoming"),
        target_cq="a",
        want={"b1": FS},
    ),
    "preempt one from each CQ borrowing": Case(
        admitted=[
            (wl("a1", 0.5), "a"),
            (wl("a2", 0.5), "a"),
            (wl("a3", 3), "a"),
            (wl("b1", 0.5), "b"),
            (wl("b2", 0.5), "b"),
            (wl("b3", 3), "b"),
        ],
        incoming=wl("c_incoming", 2),
        target_cq="c",
        want={"a1": RECL, "b1": RECL},
    ),
    "can't preempt when everyone under nominal": Case(
        admitted=units("a", "a", 3) + units("b", "b", 3) + units("c", "c", 3),
        incoming=wl("c_incoming"),
        target_cq="c",
        want={},
    ),
    "can't preempt when it would switch the imbalance": Case(
        admitted=units("a", "a", 3) + units("b", "b", 5),
        incoming=wl("a_incoming", 2),
        target_cq="a",
        want={},
    ),
    "can preempt lower priority workloads from same CQ": Case(
        admitted=[
            (wl("a1_low", priority=-1), "a"),
            (wl("a2_low", priority=-1), "a"),
            *units("a", "a", 2, start=3),
            *units("b", "b", 5),
        ],
        incoming=wl("a_incoming", 2),
        target_cq="a",
        want={"a1_low": CQ, "a2_low": CQ},
    ),
    "can preempt a combination of same CQ and highest user": Case(
        admitted=[(wl("a_low", priority=-1), "a"), *units("a", "a", 2, start=2), *units("b", "b", 6)],
        incoming=wl("a_incoming", 2),
        target_cq="a",
        want={"a_low": CQ, "b1": FS},
    ),
    "preempt huge workload if there is no other option, as long as the target CQ gets a lower share": Case(
        admitted=[(wl("b1", 9), "b")], incoming=wl("a_incoming", 2), target_cq="a", want={"b1": RECL}
    ),
    "can't preempt huge workload if the incoming is also huge": Case(
        admitted=[(wl("a1", 2), "a"), (wl("b1", 7), "b")], incoming=wl("a_incoming", 5), target_cq="a", want={}
    ),
    "can't preempt 2 smaller workloads if the incoming is huge": Case(
        admitted=[(wl("b1", 2), "b"), (wl("b2", 2), "b"), (wl("b3", 3), "b")],
        incoming=wl("a_incoming", 6),
        target_cq="a",
        want={},
    ),
    "preempt from target and others even if over nominal": Case(
        admitted=[(wl("a1_low", 2, -1), "a"), (wl("a2_low", 1, -1), "a"), (wl("b1", 3), "b"), (wl("b2", 3), "b")],
        incoming=wl("a_incoming", 4),
        target_cq="a",
        want={"a1_low": CQ, "b1": FS},
    ),
    "prefer to preempt workloads that don't make the target CQ have the biggest share": Case(
        admitted=[(wl("b1", 2), "b"), (wl("b2", 1), "b"), (wl("b3", 2), "b"), (wl("c1", 1), "c")],
        incoming=wl("a_incoming", 3.5),
        target_cq="a",
        want={"b2": FS},
    ),
    "preempt from different cluster queues if the end result has a smaller max share": Case(
        admitted=[(wl("b1", 2), "b"), (wl("b2", 2.5), "b"), (wl("c1", 2), "c"), (wl("c2", 2.5), "c")],
        incoming=wl("a_incoming", 3.5),
        target_cq="a",
        want={"b1": FS, "c1": FS},
    ),
    "scenario above does not flap": Case(
        admitted=[(wl("a1", 3.5), "a"), (wl("b2", 2.5), "b"), (wl("c2", 2.5), "c")],
        incoming=wl("b_incoming", 2),
        target_cq="b",
        want={},
    ),
    "cannot preempt if it would make the candidate CQ go under nominal after preempting one element": Case(
        admitted=[(wl("b1", 3), "b"), (wl("b2", 3), "b"), (wl("c1", 3), "c")],
        incoming=wl("a_incoming", 4),
        target_cq="a",
        want={},
    ),
    "workloads under priority threshold not capriciously preempted": Case(
        admitted=units("a", "a", 3)
        + units("b", "b", 3)
        + [(wl(f"preemptible{i}", priority=-3), "preemptible") for i in (1, 2, 3)],
        incoming=wl("a_incoming", 2),
        target_cq="a",
        want={},
    ),
    "preempt lower priority first, even if big": Case(
        strategies=(LESS_THAN_INITIAL_SHARE,),
        admitted=[(wl("a1", 3), "a"), (wl("b_low", 5, 0), "b"), (wl("b_high", 1, 1), "b")],
        incoming=wl("a_incoming", 1),
        target_cq="a",
        want={"b_low": FS},
    ),
    "preempt workload that doesn't transfer the imbalance, even if high priority": Case(
        strategies=(LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
        admitted=[(wl("a1", 3), "a"), (wl("b_low", 5, 0), "b"), (wl("b_high", 1, 1), "b")],
        incoming=wl("a_incoming", 1),
        target_cq="a",
        want={"b_high": FS},
    ),
    "CQ with higher weight can preempt more": Case(
        cqs=weighted_abc(a_weight=2000),
        admitted=units("a", "a", 3) + units("b", "b", 6),
        incoming=wl("a_incoming", 2),
        target_cq="a",
        want={"b1": FS, "b2": FS},
    ),
    "can preempt anything borrowing from CQ with 0 weight": Case(
        cqs=weighted_abc(b_weight=0),
        admitted=units("a", "a", 3) + units("b", "b", 6),
        incoming=wl("a_incoming", 3),
        target_cq="a",
        want={"b1": FS, "b2": FS, "b3": FS},
    ),
    "can't preempt nominal from CQ with 0 weight": Case(
        cqs=weighted_abc(b_weight=0)[:2],
        admitted=units("a", "a", 3) + units("b", "b", 3),
        incoming=wl("a_incoming"),
        target_cq="a",
        want={},
    ),
    "can't preempt nominal from Cohort with 0 weight": Case(
        cqs=[
            cq("left-cq").cohort("root").flavor("default", cpu=0).preempt(reclaim="Any"),
            cq("right-cq").cohort("right-cohort").flavor("default", cpu=0).preempt(reclaim="Any").weight(0),
        ],
        cohorts=[cohort("right-cohort").weight(0).flavor("default", cpu=1).parent("root")],
        admitted=[(wl("right-1"), "right-cq")],
        incoming=wl("left-1"),
        target_cq="left-cq",
        want={},
    ),
    "can preempt within cluster queue when no cohort": Case(
        cqs=[cq("a").flavor("default", cpu=1).preempt("LowerPriority")],
        admitted=[(wl("a1"), "a")],
        incoming=wl("a_incoming", priority=1000),
        target_cq="a",
        want={"a1": CQ},
    ),
    "hierarchical preemption": hierarchical_preemption(),
    "borrowing cq in non-borrowing cohort is protected": Case(
        cqs=[
            cq("a").cohort("ROOT").weight(10_000).flavor("default", cpu=5).preempt("LowerPriority", "Any"),
            cq("b").cohort("RIGHT").weight(100),
        ],
        cohorts=[cohort("ROOT"), cohort("RIGHT").parent("ROOT").weight(100).flavor("default", cpu=1)],
        admitted=[(wl(f"a{i}", priority=-1), "a") for i in (1, 2, 3)] + [(wl("b1", priority=-1), "b")],
        incoming=wl("unit", 5),
        target_cq="a",
        want={"a1": CQ, "a2": CQ, "a3": CQ},
    ),
    "forced to preempt within clusterqueue because borrowing workload too important": Case(
        cqs=[
            cq("a").cohort("ROOT").weight(10_000).flavor("default", cpu=5).preempt("LowerPriority", "LowerPriority"),
            cq("b").cohort("RIGHT").weight(100),
        ],
        cohorts=[cohort("ROOT"), cohort("RIGHT").parent("ROOT").weight(100).flavor("default", cpu=3)],
        admitted=[(wl(f"a{i}", priority=-1), "a") for i in (1, 2, 3)] + [(wl("b1", 4, 100), "b")],
        incoming=wl("unit", 4),
        target_cq="a",
        want={"a1": CQ, "a2": CQ, "a3": CQ},
    ),
    "deep preemption": deep_preemption(),
    "cq with zero weight can reclaim nominal quota": Case(
        cqs=[
            cq("a").cohort("ROOT").weight(0).flavor("default", cpu=1).preempt(reclaim="Any"),
            cq("b").cohort("ROOT").flavor("default", cpu=0),
        ],
        admitted=[(wl("b1"), "b")],
        incoming=wl("a1"),
        target_cq="a",
        want={"b1": RECL},
    ),
    "cohort with zero weight can reclaim nominal quota": Case(
        cqs=[
            cq("a").cohort("A").weight(0).flavor("default", cpu=0).preempt(reclaim="Any"),
            cq("b").cohort("ROOT").flavor("default", cpu=0),
        ],
        cohorts=[cohort("A").parent("ROOT").weight(0).flavor("default", cpu=1)],
        admitted=[(wl("b1"), "b")],
        incoming=wl("a1"),
        target_cq="a",
        want={"b1": FS},
    ),
    "zero weight borrowing preemptor cannot preempt from a borrowing CQ with a non-zero weight": Case(
        cqs=[
            cq("a").cohort("all").weight(0).flavor("default", cpu=1).preempt(reclaim="Any"),
            cq("b").cohort("all").flavor("default", cpu=1),
        ],
        admitted=[(wl("a1"), "a"), (wl("b1"), "b"), (wl("b2"), "b")],
        incoming=wl("a_incoming"),
        target_cq="a",
        want={},
    ),
    "zero weight borrowing preemptor can preempt from a borrowing CQ which also has zero weight": Case(
        cohorts=[cohort("all").flavor("default", cpu=3)],
        cqs=[
            cq("a").cohort("all").weight(0).flavor("default", cpu=1).preempt(reclaim="Any"),
            cq("b").cohort("all").weight(0).flavor("default", cpu=0),
        ],
        admitted=units("b", "b", 3),
        incoming=wl("a_incoming", 2),
        target_cq="a",
        want={"b1": FS},
    ),
    "non-zero weight borrowing preemptor preempts from a borrowing CQ": Case(
        cohorts=[cohort("all").flavor("default", cpu=3)],
        cqs=[
            cq("a").cohort("all").flavor("default", cpu=1).preempt(reclaim="Any"),
            cq("b").cohort("all").flavor("default", cpu=0),
        ],
        admitted=units("b", "b", 3),
        incoming=wl("a_incoming", 2),
        target_cq="a",
        want={"b1": FS},
    ),
    "candidates skipped by the first strategy are still available to the second strategy": Case(
        cohorts=[cohort("A").parent("ROOT").weight(0).flavor("default", cpu=1)],
        cqs=[
            cq("p").cohort("A").flavor("default", cpu=2).preempt(reclaim="Any"),
            cq("y").cohort("A").flavor("default", cpu=2),
            cq("x").cohort("ROOT").flavor("default", cpu=1),
        ],
        admitted=[(wl("p1", 2), "p"), (wl("y1", 2), "y"), (wl("y2", 2), "y"), (wl("x1"), "x"), (wl("x2"), "x")],
        incoming=wl("p_incoming"),
        target_cq="p",
        want={"y1": FS, "x1": FS},
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_fair_preemption_targets_match_kueue(case: Case) -> None:
    assert targets(case) == case.want


# --- the same rules through a whole cycle ---------------------------------------------------------------------


def preempted_by_cycle(*items: Any) -> dict[str, str]:
    w = world(flavor("default"), namespace("default"), *items)
    for name in w.cluster_queues:
        w.add(lq("default", f"q-{name}", name))
    events = decide(w.view(), 1, EngineConfig(fair_sharing=True))
    return {e.workload: e.reason for e in events if isinstance(e, WorkloadPreempted)}


def test_a_queue_borrowing_only_inside_its_non_borrowing_cohort_is_protected_from_outsiders() -> None:
    """x borrows y's idle quota inside LEFT; LEFT as a whole is within its own quota. p (outside LEFT, weight 10)
    wants to borrow more than the tree has free: comparing ClusterQueues, x's share would lose to p's; comparing
    the branches of ROOT, LEFT does not borrow, so nothing of x is p's to take."""
    got = preempted_by_cycle(
        cohort("ROOT"),
        cohort("LEFT").parent("ROOT"),
        cq("x").cohort("LEFT").flavor("default", cpu=0),
        cq("y").cohort("LEFT").flavor("default", cpu=4),
        cq("p").cohort("ROOT").weight(10_000).flavor("default", cpu=2).preempt(reclaim="Any"),
        running(wl("x1", 2).queue("q-x"), "x", "default"),
        running(wl("x2", 2).queue("q-x"), "x", "default"),
        running(wl("p1", 2).queue("q-p"), "p", "default"),
        wl("p-new", 2).queue("q-p"),
    )
    assert got == {}


def test_cohort_weights_decide_which_branch_gives_way() -> None:
    """Two organisations A and B under ROOT, each borrowing the same amount from C's idle quota. a (in A) needs one
    more unit; the victim comes from B, whose weight is lower, not from A's own side; with the weights swapped,
    nobody passes the share test (A would then be the less important side)."""

    def scenario(weight_a: int, weight_b: int) -> dict[str, str]:
        return preempted_by_cycle(
            cohort("ROOT"),
            cohort("A").parent("ROOT").weight(weight_a),
            cohort("B").parent("ROOT").weight(weight_b),
            cohort("C").parent("ROOT").flavor("default", cpu=4),
            cq("a").cohort("A").flavor("default", cpu=0).preempt(reclaim="Any"),
            cq("b").cohort("B").flavor("default", cpu=0),
            running(wl("a1", 2).queue("q-a"), "a", "default"),
            running(wl("b1", 1).queue("q-b"), "b", "default", at=1),
            running(wl("b2", 1).queue("q-b"), "b", "default", at=2),
            wl("a-new", 1).queue("q-a"),
        )

    assert scenario(2000, 1000) == {"default/b2": "InCohortFairSharing"}
    assert scenario(1000, 2000) == {}


def _reclaim_from_readmitted(now: int) -> dict[str, str]:
    """Queue `a` runs `big` (2 CPU, priority 200, within its nominal 3) and two priority-100 workloads admitted at
    500 after an eviction at 500, so `a` borrows 1 CPU; `b` (nominal 3, 1 used) needs 2 more within its nominal."""
    cqs = [cq(n).cohort("all").flavor("default", cpu=3).preempt("LowerPriority", "Any") for n in ("a", "b")]
    admitted = [(wl("big", 2, 200), "a"), (wl("small-1", 1, 100), "a"), (wl("small-2", 1, 100), "a")]
    admitted.append((wl("b1", 1, 100), "b"))
    w = world(flavor("default"), *cqs, *(running(jb, q, "default") for jb, q in admitted))
    v = w.view()
    by_cq = {
        name: {
            key: replace(aw, admitted_at=500, evicted_at=500) if aw.workload.name.startswith("small") else aw
            for key, aw in wls.items()
        }
        for name, wls in v.admitted_by_cq.items()
    }
    tree = QuotaTree.build(v.cluster_queues, v.cohorts, v.flavors)
    snap = Snapshot(tree, by_cq, {})
    incoming = wl("incoming", 2, 100).obj()
    usage = {CPU: 2000}
    p = Preemptor(
        pw=PendingWorkload(
            workload=incoming, priority=100, local_queue="default/q", queue_order_at=0, last_reason=None
        ),
        cq=v.cluster_queues["b"],
        node=tree.cqs["b"],
        usage=usage,
        frs=frozenset(usage),
        excluded=snap.removed,
        now=now,
    )
    return {t.victim.workload.name: t.reason for t in fair_targets(p, snap)}


def test_a_guarded_readmission_does_not_push_reclamation_onto_a_higher_priority_workload() -> None:
    """At the instant of the readmission the two small workloads are no candidates (a preemption loop guard); the
    search must not fall on `big` instead (it used to: `big` had preempted them within its queue, they were
    readmitted by borrowing, `big` was reclaimed, and the three took turns at every completion in the three-level
    tree of issue 9). Later a small workload is the victim (the newest, the first by name at equal age), as in Kueue."""
    assert _reclaim_from_readmitted(now=500) == {}
    assert _reclaim_from_readmitted(now=600) == {"small-1": RECL}
