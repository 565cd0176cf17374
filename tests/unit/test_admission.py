"""The admission cycle end to end: routing, quota, flavors, FIFO strategies, pending reasons, stop policies.

Real: `daemon.domain.admission.decide` and everything under it. The state is the real fold (`daemon.domain.state`) fed
by the builders' `World`. Faked: observations come from builders, not a cluster; time is a fixed integer.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.domain.admission import decide
from daemon.domain.admission.evaluate import Evaluator
from daemon.domain.admission.reasons import waiting_for_preempted
from daemon.domain.events import Borrowed, Event, WorkloadAdmitted, WorkloadPending, WorkloadPreempted
from daemon.domain.model import PendingReasonKind as K
from daemon.domain.model import Shortage, Toleration
from tests.unit.builders import (
    M,
    World,
    cohort,
    cq,
    flavor,
    job,
    lq,
    namespace,
    running,
    settle,
    taint,
    world,
)

NOW = 1000


def admitted(events: list[Event]) -> dict[str, WorkloadAdmitted]:
    return {e.workload: e for e in events if isinstance(e, WorkloadAdmitted)}


def pending(events: list[Event]) -> dict[str, WorkloadPending]:
    return {e.workload: e for e in events if isinstance(e, WorkloadPending)}


def preempted(events: list[Event]) -> dict[str, WorkloadPreempted]:
    return {e.workload: e for e in events if isinstance(e, WorkloadPreempted)}


def flavors_of(e: WorkloadAdmitted) -> set[str]:
    return {f for ps in e.admission.pod_sets for f in ps.flavors.values()}


def base(*items: Any) -> World:
    return world(
        flavor("h100"),
        flavor("a100"),
        namespace("default"),
        lq("default", "q", "a"),
        lq("default", "qb", "b"),
        *items,
    )


def cycle(w: World) -> list[Event]:
    return decide(w.view(), NOW)


# --- quota: borrowing, limits, hierarchy ----------------------------------------------------------------------

QUOTA_CASES = [
    pytest.param(
        [cq("a").cohort("c").flavor("h100", gpu=4), cq("b").cohort("c").flavor("h100", gpu=4)],
        job("j").gpus(6),
        (True, (Borrowed(flavor="h100", resource="gpu", amount=2 * M, cohort="c"),)),
        id="borrows the sibling's unused quota and says so",
    ),
    pytest.param(
        [cq("a").cohort("c").flavor("h100", gpu=4, borrow=1), cq("b").cohort("c").flavor("h100", gpu=4)],
        job("j").gpus(6),
        (False, (K.EXCEEDS_MAX_QUOTA, (Shortage(flavor="h100", resource="gpu", requested=6 * M, available=5 * M),))),
        id="borrowingLimit makes a larger request exceed the max quota",
    ),
    pytest.param(
        [cq("a").cohort("c").flavor("h100", gpu=4), cq("b").cohort("c").flavor("h100", gpu=4, lend=1)],
        job("j").gpus(6),
        (False, (K.EXCEEDS_MAX_QUOTA, (Shortage(flavor="h100", resource="gpu", requested=6 * M, available=5 * M),))),
        id="lendingLimit keeps the lender's quota out of reach",
    ),
    pytest.param(
        [
            cohort("root").flavor("h100", gpu=4),
            cohort("c").parent("root"),
            cq("a").cohort("c").flavor("h100", gpu=0),
        ],
        job("j").gpus(4),
        (True, (Borrowed(flavor="h100", resource="gpu", amount=4 * M, cohort="root"),)),
        id="hierarchical cohort: the root's own quota is borrowed",
    ),
    pytest.param(
        [cq("a").flavor("h100", gpu=4, borrow=4)],
        job("j").gpus(6),
        (False, (K.EXCEEDS_MAX_QUOTA, (Shortage(flavor="h100", resource="gpu", requested=6 * M, available=4 * M),))),
        id="no cohort: a borrowingLimit borrows nothing",
    ),
]


@pytest.mark.parametrize(("queues", "jb", "expected"), QUOTA_CASES)
def test_quota_rules(queues: list[Any], jb: Any, expected: tuple[bool, Any]) -> None:
    events = cycle(base(*queues, jb))
    ok, detail = expected
    if ok:
        assert admitted(events)[jb.key].borrowed == detail
    else:
        assert jb.key not in admitted(events)
        reason = pending(events)[jb.key].reason
        assert (reason.kind, reason.shortages) == detail


def test_waiting_for_quota_reports_exact_shortage() -> None:
    w = base(cq("a").flavor("h100", gpu=8), running(job("r").gpus(6), "a", "h100"), job("j").gpus(4))
    reason = pending(cycle(w))["default/j"].reason
    assert reason.kind is K.WAITING_FOR_QUOTA
    assert reason.shortages == (Shortage(flavor="h100", resource="gpu", requested=4 * M, available=2 * M),)


def test_within_a_cycle_a_cohort_is_never_overcommitted() -> None:
    w = base(
        cq("a").cohort("c").flavor("h100", gpu=4),
        cq("b").cohort("c").flavor("h100", gpu=4),
        *(job(f"a{i}").gpus(3).at(i) for i in range(3)),
        *(job(f"b{i}").queue("qb").gpus(3).at(i) for i in range(3)),
    )
    got = admitted(cycle(w))
    assert sum(e.admission.usage()[("h100", "gpu")] for e in got.values()) <= 8 * M
    assert len(got) == 2


def test_non_borrowing_entries_go_first_in_a_pass() -> None:
    """b's job fits in its nominal quota; a's would borrow the same capacity. b wins although a's is older and
    higher priority."""
    w = base(
        cq("a").cohort("c").flavor("h100", gpu=2),
        cq("b").cohort("c").flavor("h100", gpu=4),
        job("a-big").gpus(4).priority(100).at(0),
        job("b-small").queue("qb").gpus(4).at(5),
    )
    events = cycle(w)
    assert list(admitted(events)) == ["default/b-small"]


@pytest.mark.parametrize("reclaim", ["Any", "Never"])
def test_a_borrower_waits_while_a_queue_of_its_tree_takes_back_its_own_quota(reclaim: str) -> None:
    """a has 2 GPUs of its own free and two 1-GPU jobs; b is at its nominal quota with one more job, which would
    borrow. The first pass has the heads a0 and b0: a0 is admitted within a's quota, so b0, a borrower of the same
    tree, is offered again in the next pass, where a1 (a's next head) takes a's second GPU. Kueue v0.17 would admit
    b0 in the first cycle and, with reclaimWithinCohort Any, preempt it for a1 in the next (an eviction for
    nothing; the model's `borrowers_after_the_trees_own`); with Never a1 would wait for b0 to finish."""
    w = base(
        cq("a").cohort("c").flavor("h100", gpu=2).preempt(reclaim=reclaim),
        cq("b").cohort("c").flavor("h100", gpu=2).preempt(reclaim=reclaim),
        running(job("b-old0").queue("qb").gpus(1), "b", "h100"),
        running(job("b-old1").queue("qb").gpus(1), "b", "h100"),
        job("a0").gpus(1).at(0),
        job("a1").gpus(1).at(1),
        job("b0").queue("qb").gpus(1).at(0),
    )
    events = cycle(w)
    assert sorted(admitted(events)) == ["default/a0", "default/a1"]
    assert preempted(events) == {}
    assert pending(events)["default/b0"].reason.kind is K.WAITING_FOR_QUOTA


def test_a_borrower_is_admitted_once_the_queues_taking_back_their_quota_have_nothing_more() -> None:
    """a takes back one GPU of its two (its only job); the second is lent to b's borrower in the next pass of the
    same call."""
    w = base(
        cq("a").cohort("c").flavor("h100", gpu=2),
        cq("b").cohort("c").flavor("h100", gpu=2),
        running(job("b-old0").queue("qb").gpus(1), "b", "h100"),
        running(job("b-old1").queue("qb").gpus(1), "b", "h100"),
        job("a0").gpus(1).at(0),
        job("b0").queue("qb").gpus(1).at(0),
    )
    events = cycle(w)
    assert list(admitted(events)) == ["default/a0", "default/b0"]


def test_waiting_borrowers_are_not_assessed_again_at_every_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """a admits 200 workloads within its nominal quota, one per pass; 20 queues would borrow and wait for a. Their
    entries are parked, not assessed again at each of a's passes: the cycle assesses about as many workloads as it
    admits (assessing each waiting borrower at every pass was 4,000 assessments here, 30-60x the cycle's time in
    `bench_engine borrowers`)."""
    assessed = 0
    real = Evaluator.assess

    def counting(self: Any, q: Any, pw: Any) -> Any:
        nonlocal assessed
        assessed += 1
        return real(self, q, pw)

    monkeypatch.setattr(Evaluator, "assess", counting)
    items: list[Any] = [cq("a").cohort("c").flavor("h100", gpu=400)]
    for b in range(20):
        items += [lq("default", f"qb{b}", f"b{b}"), cq(f"b{b}").cohort("c").flavor("h100", gpu=0)]
        items += [job(f"b{b}-{k}").queue(f"qb{b}").gpus(1).at(k) for k in range(5)]
    items += [job(f"a{k}").gpus(1).at(k) for k in range(200)]
    events = cycle(base(*items))
    assert len(admitted(events)) == 300
    assert assessed <= 2 * 300


def test_several_admissions_per_queue_per_cycle() -> None:
    w = base(cq("a").flavor("h100", gpu=8), *(job(f"j{i}").gpus(2).at(i) for i in range(5)))
    events = cycle(w)
    assert list(admitted(events)) == [f"default/j{i}" for i in range(4)]
    assert pending(events)["default/j4"].reason.kind is K.WAITING_FOR_QUOTA


# --- FIFO strategies --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strict", "small_admitted"),
    [pytest.param(True, False, id="StrictFIFO: the head blocks"), pytest.param(False, True, id="BestEffortFIFO")],
)
def test_fifo_strategies(strict: bool, small_admitted: bool) -> None:
    a = cq("a").flavor("h100", gpu=4)
    if strict:
        a = a.strict_fifo()
    w = base(a, running(job("r").gpus(2), "a", "h100"), job("big").gpus(4).at(0), job("small").gpus(2).at(1))
    events = cycle(w)
    assert ("default/small" in admitted(events)) is small_admitted
    big = pending(events)["default/big"].reason
    assert big.kind is K.WAITING_FOR_QUOTA
    if strict:
        small = pending(events)["default/small"].reason
        assert (small.kind, small.blocked_by) == (K.BLOCKED_BY_HEAD, "default/big")


def test_strict_fifo_does_not_block_on_a_namespace_mismatch() -> None:
    w = base(
        cq("a").strict_fifo().namespaces(team="x").flavor("h100", gpu=4),
        namespace("x-ns", team="x"),
        lq("x-ns", "q", "a"),
        job("intruder").gpus(1).at(0),
        job("ok").ns("x-ns").gpus(1).at(1),
    )
    events = cycle(w)
    assert "x-ns/ok" in admitted(events)
    assert pending(events)["default/intruder"].reason.kind is K.NAMESPACE_NOT_SELECTED


# --- flavors ----------------------------------------------------------------------------------------------------


def test_flavor_fallback_in_queue_order() -> None:
    w = base(cq("a").flavor("h100", gpu=4).flavor("a100", gpu=8), job("j").gpus(6))
    assert flavors_of(admitted(cycle(w))["default/j"]) == {"a100"}


@pytest.mark.parametrize(
    ("when_can_borrow", "expected"),
    [
        pytest.param("MayStopSearch", "h100", id="MayStopSearch: borrow in the first flavor"),
        pytest.param("TryNextFlavor", "a100", id="TryNextFlavor: prefer a flavor without borrowing"),
    ],
)
def test_fungibility_when_can_borrow(when_can_borrow: str, expected: str) -> None:
    w = base(
        cq("a").cohort("c").fungibility(when_can_borrow=when_can_borrow).flavor("h100", gpu=4).flavor("a100", gpu=8),
        cq("b").cohort("c").flavor("h100", gpu=8),
        job("j").gpus(6),
    )
    assert flavors_of(admitted(cycle(w))["default/j"]) == {expected}


@pytest.mark.parametrize(
    ("when_can_preempt", "expect_preemption"),
    [
        pytest.param("TryNextFlavor", False, id="TryNextFlavor: take the free flavor"),
        pytest.param("MayStopSearch", True, id="MayStopSearch: preempt in the first flavor"),
    ],
)
def test_fungibility_when_can_preempt(when_can_preempt: str, expect_preemption: bool) -> None:
    w = base(
        cq("a")
        .preempt(within="LowerPriority")
        .fungibility(when_can_preempt=when_can_preempt)
        .flavor("h100", gpu=4)
        .flavor("a100", gpu=4),
        running(job("low").gpus(4), "a", "h100"),
        job("high").gpus(4).priority(10),
    )
    events = cycle(w)
    assert ("default/low" in preempted(events)) is expect_preemption
    assert ("default/high" in admitted(events)) is not expect_preemption


def test_preference_preemption_over_borrowing() -> None:
    """Both flavors need something: h100 needs preemption, a100 needs borrowing. The preference decides."""

    def setup(preference: str) -> World:
        return base(
            cq("a")
            .cohort("c")
            .preempt(within="LowerPriority")
            .fungibility("TryNextFlavor", "TryNextFlavor", preference)
            .flavor("h100", gpu=4)
            .flavor("a100", gpu=2),
            cq("b").cohort("c").flavor("a100", gpu=4),
            running(job("low").gpus(4), "a", "h100"),
            job("high").gpus(4).priority(10),
        )

    borrow_first = cycle(setup("BorrowingOverPreemption"))
    assert flavors_of(admitted(borrow_first)["default/high"]) == {"a100"}
    preempt_first = cycle(setup("PreemptionOverBorrowing"))
    assert "default/low" in preempted(preempt_first)


TAINT_CASES = [
    pytest.param(job("j").gpus(1), "a100", id="untolerated NoSchedule taint skips the flavor"),
    pytest.param(job("j").gpus(1).tolerate("gpu", "h100", "NoSchedule"), "h100", id="toleration admits"),
    pytest.param(job("j").gpus(1).tolerate("gpu", operator="Exists"), "h100", id="Exists toleration"),
    pytest.param(job("j").gpus(1).tolerate("gpu", "other"), "a100", id="wrong value does not tolerate"),
]


@pytest.mark.parametrize(("jb", "expected"), TAINT_CASES)
def test_taints_and_tolerations(jb: Any, expected: str) -> None:
    w = base(cq("a").flavor("h100", gpu=4).flavor("a100", gpu=4), jb)
    w.add(flavor("h100", taints=[taint("gpu", "h100", "NoSchedule")]))
    assert flavors_of(admitted(cycle(w))[jb.key]) == {expected}


def test_prefer_no_schedule_is_ignored_and_flavor_tolerations_count() -> None:
    taints = [taint("soft", effect="PreferNoSchedule"), taint("x", "y", "NoExecute")]
    w = base(cq("a").flavor("h100", gpu=4), job("j").gpus(1))
    w.add(flavor("h100", taints=taints))
    assert pending(cycle(w))["default/j"].reason.kind is K.NO_MATCHING_FLAVOR
    w.add(flavor("h100", taints=taints, tolerations=[Toleration(key="x", value="y")]))
    assert "default/j" in admitted(cycle(w))


SELECTOR_CASES = [
    pytest.param({"gpu-type": "a100"}, "a100", id="selector picks the matching flavor"),
    pytest.param({"zone": "eu"}, "h100", id="keys the flavor does not label are ignored"),
    pytest.param({"gpu-type": "b200"}, None, id="no flavor matches: NoMatchingFlavor"),
]


@pytest.mark.parametrize(("selector", "expected"), SELECTOR_CASES)
def test_node_selector(selector: dict[str, str], expected: str | None) -> None:
    w = base(cq("a").flavor("h100", gpu=4).flavor("a100", gpu=4), job("j").gpus(1).selector(**selector))
    w.add(flavor("h100", **{"gpu-type": "h100"}), flavor("a100", **{"gpu-type": "a100"}))
    events = cycle(w)
    if expected is None:
        assert pending(events)["default/j"].reason.kind is K.NO_MATCHING_FLAVOR
    else:
        assert flavors_of(admitted(events)["default/j"]) == {expected}


def test_uncovered_resource_is_no_matching_flavor_and_zero_requests_are_ignored() -> None:
    w = base(
        cq("a").flavor("h100", gpu=4),
        job("j").podset("main", 1, gpu=1, rdma=1),
        job("z").podset("main", 1, gpu=1, rdma=0),
    )
    events = cycle(w)
    assert pending(events)["default/j"].reason.kind is K.NO_MATCHING_FLAVOR
    assert "rdma" in pending(events)["default/j"].reason.message
    assert "default/z" in admitted(events)


def test_gang_all_pod_sets_or_nothing() -> None:
    w = base(
        cq("a").flavor("h100", gpu=8).flavor("cpu-pool", cpu=4),
        flavor("cpu-pool"),
        job("fits").podset("workers", 2, gpu=3).podset("launcher", 1, cpu=1),
        job("too-big").podset("workers", 2, gpu=1).podset("launcher", 1, cpu=8).at(1),
    )
    events = cycle(w)
    fits = admitted(events)["default/fits"]
    assert [(ps.name, ps.count, dict(ps.flavors), dict(ps.usage)) for ps in fits.admission.pod_sets] == [
        ("workers", 2, {"gpu": "h100"}, {"gpu": 6 * M}),
        ("launcher", 1, {"cpu": "cpu-pool"}, {"cpu": 1 * M}),
    ]
    assert "default/too-big" not in admitted(events)
    assert pending(events)["default/too-big"].reason.kind is K.EXCEEDS_MAX_QUOTA


def test_pods_resource_counts_pods_when_covered() -> None:
    w = base(cq("a").flavor("h100", gpu=8, pods=3), job("j").podset("main", 4, gpu=1))
    reason = pending(cycle(w))["default/j"].reason
    assert reason.kind is K.EXCEEDS_MAX_QUOTA
    assert reason.shortages == (Shortage(flavor="h100", resource="pods", requested=4 * M, available=3 * M),)


# --- routing, isolation, stop policies --------------------------------------------------------------------------


def test_routing_reasons() -> None:
    w = base(
        cq("a").flavor("h100", gpu=4),
        lq("default", "orphan", "missing"),
        job("no-lq").queue("nope"),
        job("no-cq").queue("orphan"),
    )
    events = pending(cycle(w))
    assert events["default/no-lq"].reason.kind is K.LOCAL_QUEUE_NOT_FOUND
    assert events["default/no-cq"].reason.kind is K.CLUSTER_QUEUE_NOT_FOUND
    assert events["default/no-lq"].cluster_queue is None


def test_namespace_selector_null_selects_nothing() -> None:
    w = base(cq("a").namespaces(None).flavor("h100", gpu=4), job("j").gpus(1))
    assert pending(cycle(w))["default/j"].reason.kind is K.NAMESPACE_NOT_SELECTED


@settings(max_examples=60, deadline=None)
@given(
    tenants=st.lists(st.sampled_from(["red", "blue", "green"]), min_size=1, max_size=8),
    sizes=st.lists(st.integers(min_value=1, max_value=4), min_size=8, max_size=8),
)
def test_tenant_isolation_never_admits_across_namespace_selectors(tenants: list[str], sizes: list[int]) -> None:
    """Security property: whatever is submitted, a ClusterQueue only ever admits workloads from namespaces its
    selector selects, even when a LocalQueue in another namespace points at it."""
    w = world(flavor("h100"))
    for team in ("red", "blue", "green"):
        w.add(namespace(team, team=team), cq(f"cq-{team}").cohort("all").namespaces(team=team).flavor("h100", gpu=8))
        for other in ("red", "blue", "green"):
            w.add(lq(team, f"to-{other}", f"cq-{other}"))
    for i, (team, size) in enumerate(zip(tenants, sizes, strict=False)):
        target = ["red", "blue", "green"][i % 3]
        w.add(job(f"j{i}").ns(team).queue(f"to-{target}").gpus(size).at(i))
    events = settle(w)
    for e in events:
        if isinstance(e, WorkloadAdmitted):
            ns = e.workload.split("/")[0]
            assert e.admission.cluster_queue == f"cq-{ns}"
        if isinstance(e, WorkloadPending) and e.reason.kind is K.NAMESPACE_NOT_SELECTED:
            assert e.cluster_queue != f"cq-{e.workload.split('/')[0]}"


def test_cluster_queue_hold_keeps_admitted_and_stops_pending() -> None:
    w = base(cq("a").stop("Hold").flavor("h100", gpu=8), running(job("r").gpus(2), "a", "h100"), job("j").gpus(1))
    events = cycle(w)
    assert not admitted(events) and not preempted(events)
    assert pending(events)["default/j"].reason.kind is K.QUEUE_STOPPED


def test_cluster_queue_hold_and_drain_preempts_admitted_once() -> None:
    w = base(
        cq("a").stop("HoldAndDrain").flavor("h100", gpu=8),
        running(job("r").gpus(2), "a", "h100"),
        running(job("gone").gpus(2), "a", "h100", evicting=True),
    )
    events = cycle(w)
    p = preempted(events)
    assert list(p) == ["default/r"]
    assert (p["default/r"].preemptor, p["default/r"].reason) == (None, "ClusterQueueStopped")
    w.apply(events)
    assert not preempted(cycle(w))


def test_local_queue_hold_and_drain_drains_only_its_workloads() -> None:
    w = base(
        cq("a").flavor("h100", gpu=8),
        lq("default", "other", "a"),
        running(job("mine").gpus(2), "a", "h100"),
        running(job("theirs").queue("other").gpus(2), "a", "h100"),
        job("waiting").gpus(1),
        job("ok").queue("other").gpus(1),
    )
    w.add(lq("default", "q", "a", stop="HoldAndDrain"))
    events = cycle(w)
    assert {k: e.reason for k, e in preempted(events).items()} == {"default/mine": "LocalQueueStopped"}
    assert pending(events)["default/waiting"].reason.kind is K.QUEUE_STOPPED
    assert "default/ok" in admitted(events)


def test_inactive_queue_with_unknown_flavor_says_why() -> None:
    w = base(cq("a").flavor("b200", gpu=8), job("j").gpus(1))
    reason = pending(cycle(w))["default/j"].reason
    assert reason.kind is K.CLUSTER_QUEUE_INACTIVE
    assert "b200" in reason.message


def test_cohort_cycle_makes_members_inactive() -> None:
    w = base(
        cohort("x").parent("y"), cohort("y").parent("x"), cq("a").cohort("x").flavor("h100", gpu=8), job("j").gpus(1)
    )
    reason = pending(cycle(w))["default/j"].reason
    assert reason.kind is K.CLUSTER_QUEUE_INACTIVE
    assert "cycle" in reason.message


# --- pending reasons are written only on change -----------------------------------------------------------------


def test_pending_written_only_when_the_reason_changes() -> None:
    w = base(cq("a").flavor("h100", gpu=4), running(job("r").gpus(4), "a", "h100"), job("j").gpus(2))
    first = cycle(w)
    assert list(pending(first)) == ["default/j"]
    w.apply(first)
    assert cycle(w) == []
    w.finish("default/r")
    third = cycle(w)
    assert list(admitted(third)) == ["default/j"]


def test_deep_queue_rewrites_only_the_head_when_only_availability_moved() -> None:
    w = base(
        cq("a").flavor("h100", gpu=10),
        running(job("r").gpus(9), "a", "h100"),
        *(job(f"j{i}").gpus(4).at(i) for i in range(20)),
    )
    w.apply(cycle(w))
    w.finish("default/r")
    w.add(running(job("r2").gpus(8), "a", "h100"))
    events = cycle(w)
    assert len(pending(events)) == 1  # the head's available changed 1 -> 2; the rest keep their reason


def test_deep_queue_walked_by_runs_writes_exactly_what_visiting_each_workload_writes() -> None:
    """With the pending index, the walk steps over runs of alike workloads whose last reason still holds; it must
    still find the head (only `available` moved), a newcomer in the middle and a member whose reason is stale."""
    w = base(
        cq("a").flavor("h100", gpu=10),
        running(job("r").gpus(9), "a", "h100"),
        *(job(f"j{i}").gpus(4).at(2 * i) for i in range(100)),
        *(job(f"k{i}").gpus(6).at(2 * i + 1) for i in range(100)),
    )
    first = cycle(w)
    assert len(pending(first)) == 200
    w.apply(first)
    assert cycle(w) == []
    w.finish("default/r")
    w.add(running(job("r2").gpus(8), "a", "h100"), job("new").gpus(4).at(101))
    reason = w.pending["default/j70"].last_reason
    assert reason is not None
    stale = reason.__class__(kind=K.NO_MATCHING_FLAVOR, message="stale")
    w.apply([WorkloadPending(workload="default/j70", at=NOW, cluster_queue="a", reason=stale)])
    events = cycle(w)
    assert events == decide(w.view(indexed=False), NOW)
    assert list(pending(events)) == ["default/j0", "default/new", "default/j70"]
    assert pending(events)["default/j70"].reason.kind is K.WAITING_FOR_QUOTA


def test_a_strict_fifo_head_without_candidates_holds_for_its_pass_at_its_place_in_the_order() -> None:
    """b's StrictFIFO head b2 needs 2 GPUs where the Cohort has 1 left and finds nobody to preempt: it holds Kueue's
    resourcesToReserve in its pass. Kueue requeues it at once, so in each later cycle it holds again at its place in
    that cycle's order, after a's equal-priority, earlier-named a1, which borrows the last GPU first. Held from its
    first pass to the call's end (as before issue 23's third part), the hold kept a1 out."""
    w = base(
        cq("a").cohort("c").flavor("h100", gpu=2),
        cq("b").cohort("c").strict_fifo().flavor("h100", gpu=2),
        job("a0").gpus(2).at(0),
        job("a1").gpus(1).at(0),
        job("a8").gpus(1).priority(1).at(0),
        job("a9").gpus(1).priority(1).at(0),
        job("b1").queue("qb").gpus(1).at(0),
        job("b2").queue("qb").gpus(2).at(0),
    )
    events = cycle(w)
    assert set(admitted(events)) == {"default/a8", "default/a9", "default/b1", "default/a1"}
    assert pending(events)["default/b2"].reason.kind is K.WAITING_FOR_QUOTA
    assert pending(events)["default/a0"].reason.kind is K.WAITING_FOR_QUOTA


def test_a_waiting_preemptor_whose_kept_victims_are_not_enough_names_them_with_the_new_ones() -> None:
    """A preemptor that claimed one leaving victim in an earlier call and now needs a second: the call assesses it
    with its own victim already gone (`Cycle.keep_claims`), so it waits for both and names both. It named only the
    new one, so the next call handed the old one to nobody, claimed the new one, found it not enough and took the
    old one as its new one: each call wrote a new reason, and with another queue's waiter beside it the free victim
    went to that waiter and a preemption followed (dst seed 2420, cycle-fixed-point)."""
    w = base(
        cq("a").flavor("h100", gpu=2).preempt(within="LowerPriority"),
        running(job("v1").gpus(1), "a", "h100", evicting=True),
        running(job("v2").gpus(1), "a", "h100", evicting=True),
        job("p").gpus(2).priority(100),
    )
    w.apply(
        [
            WorkloadPending(
                workload="default/p",
                at=NOW - 1,
                cluster_queue="a",
                reason=waiting_for_preempted(["default/v1"], ""),
            )
        ]
    )
    events = cycle(w)
    assert not admitted(events) and not preempted(events)
    assert pending(events)["default/p"].reason.victims == ("default/v1", "default/v2")
    w.apply(events)
    assert cycle(w) == []
