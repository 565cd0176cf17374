"""A known bug of the fair-sharing engine, kept as a reproducer (real simulator, real engine and log, nothing faked).

On a small version of Kueue's baseline shape (2 cohorts x 3 ClusterQueues) with fair sharing on, some workloads are
preempted and admitted again within one instant, at every instant where something finishes (e.g.
cohort-0-cq-2/medium-0 at 2.2 s, 3.4 s, 4.6 s, ...), so a large run churns and never ends (issue 9, note of
2026-12-01). The test is marked xfail(strict=True): it documents the bug today and turns red the day the cause is
fixed, so whoever fixes it removes the mark.
"""

from __future__ import annotations

import asyncio

import pytest

from bench.kueue_shapes import Shape, WorkloadClass, scenario
from daemon.domain.admission import EngineConfig
from daemon.sim.run import run_simulation

SMALL = Shape(
    "small",
    2,
    3,
    (
        WorkloadClass("small", 35, 1, 50, 200, 100),
        WorkloadClass("medium", 10, 5, 100, 500, 500),
        WorkloadClass("large", 5, 20, 200, 1000, 1200),
    ),
)


@pytest.mark.xfail(strict=True, reason="fair-sharing churn: preempted and readmitted in one instant (issue 9)")
def test_no_workload_is_preempted_and_admitted_in_one_instant() -> None:
    result = asyncio.run(run_simulation(scenario(SMALL), config=EngineConfig(fair_sharing=True), until=600_000))
    churned = sorted(key for key, o in result.jobs.items() if set(o.admitted_at) & set(o.evicted_at))
    assert churned == []
