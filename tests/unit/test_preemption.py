"""Classic preemption: policies, reclaim, borrowWithinCohort, minimal victim sets, overlap and reservation.

Real: `daemon.domain.admission.decide` with `daemon.domain.preemption`. The state is the real fold, fed by the
builders' `World`. Faked: observations come from builders; evictions happen at once when a test calls `settle` (as the
simulator does), or never when it calls `cycle`.
"""

from __future__ import annotations

from typing import Any

import pytest

from daemon.domain.admission import decide
from daemon.domain.events import Event, Freed, WorkloadAdmitted, WorkloadPending, WorkloadPreempted
from daemon.domain.model import PendingReason
from daemon.domain.model import PendingReasonKind as K
from tests.unit.builders import M, World, cq, flavor, job, lq, namespace, running, settle, world

NOW = 1000


def admitted(events: list[Event]) -> list[str]:
    return [e.workload for e in events if isinstance(e, WorkloadAdmitted)]


def pending(events: list[Event]) -> dict[str, WorkloadPending]:
    return {e.workload: e for e in events if isinstance(e, WorkloadPending)}


def preempted(events: list[Event]) -> dict[str, WorkloadPreempted]:
    return {e.workload: e for e in events if isinstance(e, WorkloadPreempted)}


def base(*items: Any) -> World:
    return world(
        flavor("h100"),
        namespace("default"),
        lq("default", "q", "a"),
        lq("default", "qb", "b"),
        lq("default", "qc", "c"),
        *items,
    )


def cycle(w: World) -> list[Event]:
    return decide(w.view(), NOW)


WITHIN_CASES = [
    pytest.param("LowerPriority", 0, 10, True, id="LowerPriority preempts a lower priority"),
    pytest.param("LowerPriority", 10, 10, False, id="LowerPriority spares an equal priority"),
    pytest.param("LowerOrNewerEqualPriority", 10, 10, True, id="LowerOrNewerEqualPriority: equal but newer victim"),
    pytest.param("Never", 0, 10, False, id="Never preempts nothing"),
]


@pytest.mark.parametrize(("policy", "victim_prio", "preemptor_prio", "expected"), WITHIN_CASES)
def test_within_cluster_queue(policy: str, victim_prio: int, preemptor_prio: int, expected: bool) -> None:
    w = base(
        cq("a").preempt(within=policy).flavor("h100", gpu=4),
        running(job("low").gpus(4).priority(victim_prio).at(50), "a", "h100", at=60),
        job("high").gpus(4).priority(preemptor_prio).at(10),
    )
    events = cycle(w)
    assert ("default/low" in preempted(events)) is expected
    assert "default/high" not in admitted(events)  # a preemptor waits for its victims
    reason = pending(events)["default/high"].reason
    if expected:
        p = preempted(events)["default/low"]
        assert (p.preemptor, p.preemptor_cluster_queue, p.reason) == ("default/high", "a", "InClusterQueue")
        assert p.policy == f"withinClusterQueue={policy}"
        assert p.freed == (Freed(flavor="h100", resource="gpu", amount=4 * M),)
        assert (reason.kind, reason.blocked_by) == (K.WAITING_FOR_PREEMPTED_WORKLOADS, "default/low")
    else:
        assert reason.kind is K.WAITING_FOR_QUOTA


def test_preemptor_is_admitted_once_its_victim_is_gone() -> None:
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=4),
        running(job("low").gpus(4), "a", "h100"),
        job("high").gpus(4).priority(10),
    )
    events = settle(w)
    assert admitted(events) == ["default/high"]
    assert "default/low" in w.pending


def two_queues(reclaim: str, *extra: Any) -> World:
    return base(
        cq("a").cohort("co").preempt(reclaim=reclaim).flavor("h100", gpu=4),
        cq("b").cohort("co").flavor("h100", gpu=2),
        *extra,
    )


@pytest.mark.parametrize(
    ("policy", "victim_prio", "expected"),
    [
        pytest.param("Any", 10, True, id="Any reclaims regardless of priority"),
        pytest.param("LowerPriority", 0, True, id="LowerPriority reclaims from a lower priority"),
        pytest.param("LowerPriority", 10, False, id="LowerPriority spares an equal priority"),
        pytest.param("Never", 0, False, id="Never"),
    ],
)
def test_reclaim_within_cohort(policy: str, victim_prio: int, expected: bool) -> None:
    w = two_queues(
        policy,
        running(job("b-ok").queue("qb").gpus(2).priority(victim_prio), "b", "h100", at=1),
        running(job("b-borrow").queue("qb").gpus(4).priority(victim_prio), "b", "h100", at=2),
        job("mine").gpus(4).priority(10),
    )
    p = preempted(cycle(w))
    assert ("default/b-borrow" in p) is expected
    assert "default/b-ok" not in p  # with b-borrow gone, b is within nominal: never a candidate
    if expected:
        assert (p["default/b-borrow"].reason, p["default/b-borrow"].policy) == (
            "InCohortReclamation",
            f"reclaimWithinCohort={policy}",
        )


def test_reclaim_takes_nothing_from_queues_within_nominal() -> None:
    w = base(
        cq("a").cohort("co").preempt(reclaim="Any").flavor("h100", gpu=2),
        cq("b").cohort("co").flavor("h100", gpu=4),
        running(job("b-own").queue("qb").gpus(4), "b", "h100"),
        job("mine").gpus(4).priority(10),
    )
    events = cycle(w)
    assert not preempted(events)
    assert pending(events)["default/mine"].reason.kind is K.WAITING_FOR_QUOTA


def borrow_setup(borrow_within: str, threshold: int | None = None) -> World:
    """a must borrow for its job; c borrows everything it runs; b runs within its nominal."""
    return base(
        cq("a")
        .cohort("co")
        .preempt(reclaim="LowerPriority", borrow_within=borrow_within, threshold=threshold)
        .flavor("h100", gpu=2),
        cq("b").cohort("co").flavor("h100", gpu=6),
        cq("c").cohort("co").flavor("h100", gpu=0),
        running(job("b-low").queue("qb").gpus(4), "b", "h100"),
        running(job("c-low").queue("qc").gpus(4), "c", "h100"),
        job("mine").gpus(4).priority(10),
    )


@pytest.mark.parametrize(
    ("borrow_within", "threshold", "expected"),
    [
        pytest.param("LowerPriority", None, True, id="borrowWithinCohort lets a borrowing preemptor reclaim"),
        pytest.param("Never", None, False, id="without it a preemptor that would borrow reclaims nothing"),
        pytest.param("LowerPriority", -1, False, id="victims above maxPriorityThreshold are spared"),
        pytest.param("LowerPriority", 0, True, id="victims at maxPriorityThreshold may go"),
    ],
)
def test_borrow_within_cohort(borrow_within: str, threshold: int | None, expected: bool) -> None:
    p = preempted(cycle(borrow_setup(borrow_within, threshold)))
    assert ("default/c-low" in p) is expected
    assert "default/b-low" not in p
    if expected:
        assert p["default/c-low"].reason == "InCohortReclaimWhileBorrowing"
        assert p["default/c-low"].policy.startswith("borrowWithinCohort=LowerPriority")


def test_minimal_victim_set_by_fill_back() -> None:
    """Candidates go most recently admitted first: small (2) then big (4). Greedy takes both; fill-back returns
    the small one because the big one alone makes room."""
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=6),
        running(job("big").gpus(4), "a", "h100", at=1),
        running(job("small").gpus(2), "a", "h100", at=2),
        job("high").gpus(4).priority(10),
    )
    assert set(preempted(cycle(w))) == {"default/big"}


def test_lowest_priority_victims_first() -> None:
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=4),
        running(job("mid").gpus(2).priority(5), "a", "h100", at=2),
        running(job("lowest").gpus(2).priority(1), "a", "h100", at=1),
        job("high").gpus(2).priority(10),
    )
    assert set(preempted(cycle(w))) == {"default/lowest"}


def test_waits_for_already_evicting_workloads_without_new_preemption() -> None:
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=4),
        running(job("leaving").gpus(4), "a", "h100", evicting=True),
        running(job("other").gpus(0), "a", "h100"),
        job("high").gpus(4).priority(10),
    )
    events = cycle(w)
    assert not preempted(events)
    reason = pending(events)["default/high"].reason
    assert (reason.kind, reason.blocked_by) == (K.WAITING_FOR_PREEMPTED_WORKLOADS, "default/leaving")


def test_nothing_is_admitted_into_capacity_still_held_by_evicting_workloads() -> None:
    w = base(
        cq("a").flavor("h100", gpu=4), running(job("leaving").gpus(4), "a", "h100", evicting=True), job("j").gpus(2)
    )
    events = cycle(w)
    assert not admitted(events)
    assert pending(events)["default/j"].reason.kind is K.WAITING_FOR_PREEMPTED_WORKLOADS


def test_a_workload_waiting_only_for_room_keeps_its_place_in_its_queue() -> None:
    """`low` waited last cycle for room that another preemptor's victims were freeing, naming no victims of its own.
    It is no sticky preemptor (Kueue makes sticky only a workload that issued preemptions), so `high`, ahead of it
    in priority order, takes the room. Were `low` offered first, it would take the room and `high` would preempt
    `other` for it (and, in the cluster, `low` itself as soon as it could)."""
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=4),
        running(job("other").gpus(2), "a", "h100"),
        job("low").gpus(2).at(0),
        job("high").gpus(2).priority(10).at(1),
    )
    waiting = PendingReason(
        kind=K.WAITING_FOR_PREEMPTED_WORKLOADS, message="waiting for workloads preempted in this cycle"
    )
    w.apply([WorkloadPending(workload="default/low", at=NOW - 1, cluster_queue="a", reason=waiting)])
    events = cycle(w)
    assert admitted(events) == ["default/high"]
    assert not preempted(events)
    assert pending(events)["default/low"].reason.kind is K.WAITING_FOR_QUOTA


def test_two_preemptors_never_claim_the_same_victim() -> None:
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=4),
        running(job("low1").gpus(2), "a", "h100", at=1),
        running(job("low2").gpus(2), "a", "h100", at=2),
        job("high1").gpus(2).priority(10).at(1),
        job("high2").gpus(2).priority(10).at(2),
    )
    p = preempted(settle(w))  # one preemptor per cycle: Kueue pops one head per ClusterQueue
    assert set(p) == {"default/low1", "default/low2"}
    assert {e.preemptor for e in p.values()} == {"default/high1", "default/high2"}


def test_freed_capacity_is_reserved_for_the_preemptor() -> None:
    """b could borrow what a's victim frees; a's preemptor (not borrowing) gets it, in this cycle and the next."""
    w = base(
        cq("a").cohort("co").preempt(within="LowerPriority").flavor("h100", gpu=4),
        cq("b").cohort("co").flavor("h100", gpu=0),
        running(job("low").gpus(4), "a", "h100"),
        job("high").gpus(4).priority(10),
        job("borrower").queue("qb").gpus(4).priority(100),
    )
    events = settle(w)
    assert admitted(events) == ["default/high"]
    assert "default/borrower" in w.pending


def test_preemption_with_no_candidates_reserves_nominal_against_other_queues_for_one_pass() -> None:
    """a's workload is within a's nominal but b borrowed it and a cannot reclaim: a reserves what it can in its
    pass (Kueue's cycle), so b's next borrower does not get it there; in the next pass a's workload is inadmissible
    and reserves nothing, and b's borrower is admitted (as in Kueue, one cycle later)."""
    w = base(
        cq("a").cohort("co").flavor("h100", gpu=4),
        cq("b").cohort("co").flavor("h100", gpu=0),
        running(job("b-borrow").queue("qb").gpus(2), "b", "h100"),
        job("mine").gpus(4).priority(10),
        job("b-more").queue("qb").gpus(2),
    )
    events = cycle(w)
    assert admitted(events) == ["default/b-more"]
    assert pending(events)["default/mine"].reason.kind is K.WAITING_FOR_QUOTA


def test_overlapping_targets_across_queues_claim_once_and_the_second_waits() -> None:
    """a and b both want c's borrowed workload. a's claim frees room for both; b must not preempt it again (its
    entry overlaps a's targets: skipped in that cycle, assessed in the next), and is admitted once the victim is
    gone, not into capacity the victim still holds."""
    w = base(
        cq("a").cohort("co").preempt(reclaim="Any").flavor("h100", gpu=2),
        cq("b").cohort("co").preempt(reclaim="Any").flavor("h100", gpu=2),
        cq("c").cohort("co").flavor("h100", gpu=0),
        running(job("c-low").queue("qc").gpus(4), "c", "h100"),
        job("from-a").gpus(2).at(1),
        job("from-b").queue("qb").gpus(2).at(2),
    )
    events = cycle(w)
    assert list(preempted(events)) == ["default/c-low"]
    assert not admitted(events)
    reasons = {k: e.reason.kind for k, e in pending(events).items()}
    assert reasons == {"default/from-a": K.WAITING_FOR_PREEMPTED_WORKLOADS}
    w.apply(events)
    waiting = cycle(w)  # the victim still holds its quota: b waits for it
    assert not admitted(waiting)
    assert pending(waiting)["default/from-b"].reason.kind is K.WAITING_FOR_PREEMPTED_WORKLOADS
    w.apply(waiting)
    w.evict("default/c-low", NOW)
    assert sorted(admitted(settle(w))) == ["default/from-a", "default/from-b"]
