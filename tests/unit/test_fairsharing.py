"""Fair sharing: DRS values and weights, the admission tournament, and fair-sharing preemption (S2-a, S2-b).

Real: `daemon.domain.fairsharing` through `decide(..., EngineConfig(fair_sharing=True))` and the quota tree.
The state is the real fold fed by the builders' `World`. Faked: observations come from builders.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given

from daemon.domain.admission import AdmissionEngine, EngineConfig, decide
from daemon.domain.events import Event, WorkloadAdmitted, WorkloadPreempted
from daemon.domain.fairsharing import dominant_resource_share
from daemon.domain.quota import QuotaTree
from tests.unit.builders import M, World, cq, flavor, job, lq, namespace, running, world
from tests.unit.test_engine_properties import SETTINGS, Scenario, drive, scenarios

FS = EngineConfig(fair_sharing=True)
GPU = ("h100", "gpu")


def base(*items: Any) -> World:
    return world(
        flavor("h100"),
        namespace("default"),
        *(lq("default", f"q{n}", n) for n in ("a", "b", "c")),
        *items,
    )


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        pytest.param(1000, (0, Fraction(250)), id="weight 1: borrowed 2 of 8 lendable = 250"),
        pytest.param(2000, (0, Fraction(125)), id="weight 2 halves the share"),
        pytest.param(0, (1, Fraction(250)), id="weight 0 while borrowing: an infinite share"),
    ],
)
def test_dominant_resource_share(weight: int, expected: tuple[int, Fraction]) -> None:
    w = base(cq("a").cohort("co").weight(weight).flavor("h100", gpu=4), cq("b").cohort("co").flavor("h100", gpu=4))
    tree = QuotaTree.build(w.cluster_queues, w.cohorts, w.flavors)
    tree.load_usage({"a": {GPU: 6 * M}})
    drs = dominant_resource_share(tree.cqs["a"])
    assert drs.key == expected
    assert drs.borrowed == {GPU}
    assert dominant_resource_share(tree.cqs["b"]).key == (0, Fraction(0))


def tournament_world() -> World:
    return base(
        cq("a").cohort("co").flavor("h100", gpu=4),
        cq("b").cohort("co").flavor("h100", gpu=4),
        cq("c").cohort("co").flavor("h100", gpu=4),
        running(job("a-run").queue("qa").gpus(6), "a", "h100"),
        running(job("b-run").queue("qb").gpus(4), "b", "h100"),
        job("a-job").queue("qa").gpus(2).priority(100).at(0),
        job("b-job").queue("qb").gpus(2).at(5),
    )


def admitted(events: list[Event]) -> list[str]:
    return [e.workload for e in events if isinstance(e, WorkloadAdmitted)]


def test_tournament_serves_the_lower_share_first() -> None:
    """Both would borrow; classic order takes the higher priority (a), fair sharing the lower share (b)."""
    assert admitted(decide(tournament_world().view(), 1)) == ["default/a-job"]
    assert admitted(decide(tournament_world().view(), 1, FS)) == ["default/b-job"]


def test_fair_sharing_preemption_falls_back_to_less_than_initial_share() -> None:
    """b must borrow to run its job. S2-a fails (b's share after admission, 250, exceeds a's share after losing a
    victim, 125); S2-b passes (250 < a's share now, 500): one victim of a goes, with reason InCohortFairSharing."""
    w = base(
        cq("a").cohort("co").flavor("h100", gpu=2),
        cq("b").cohort("co").preempt(reclaim="Any").flavor("h100", gpu=2),
        cq("c").cohort("co").flavor("h100", gpu=4),
        running(job("a1").queue("qa").gpus(3), "a", "h100", at=1),
        running(job("a2").queue("qa").gpus(3), "a", "h100", at=2),
        running(job("b1").queue("qb").gpus(2), "b", "h100"),
        job("b-job").queue("qb").gpus(2),
    )
    events = decide(w.view(), 1, FS)
    p = {e.workload: e for e in events if isinstance(e, WorkloadPreempted)}
    assert list(p) == ["default/a2"]
    assert (p["default/a2"].reason, p["default/a2"].preemptor) == ("InCohortFairSharing", "default/b-job")
    assert not [
        e for e in decide(w.view(), 1) if isinstance(e, WorkloadPreempted)
    ]  # classic: no reclaim while borrowing


def test_preemptor_within_nominal_reclaims_without_share_test() -> None:
    w = base(
        cq("a").cohort("co").flavor("h100", gpu=2),
        cq("b").cohort("co").preempt(reclaim="Any").flavor("h100", gpu=4),
        running(job("a1").queue("qa").gpus(3), "a", "h100", at=1),
        running(job("a2").queue("qa").gpus(3), "a", "h100", at=2),
        job("b-job").queue("qb").gpus(4),
    )
    p = {e.workload: e for e in decide(w.view(), 1, FS) if isinstance(e, WorkloadPreempted)}
    assert {k: e.reason for k, e in p.items()} == {
        "default/a1": "InCohortReclamation",
        "default/a2": "InCohortReclamation",
    }


@SETTINGS
@given(s=scenarios())
def test_fair_sharing_never_exceeds_quota_and_the_engine_agrees(s: Scenario) -> None:
    engine = AdmissionEngine(FS)

    def step(w: World, now: int) -> list[Event]:
        v = w.view()
        fresh = decide(v, now, FS)
        assert engine.decide(v, now) == fresh
        return fresh

    drive(s, step)
