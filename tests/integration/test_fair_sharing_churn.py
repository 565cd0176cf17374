"""A regression test of the fair-sharing churn (real simulator, real engine and log, nothing faked).

On a small version of Kueue's baseline shape (2 cohorts x 3 ClusterQueues) with fair sharing on, workloads used to be
preempted and admitted again within one instant, at every instant where something finished (e.g.
cohort-0-cq-2/large-1 at 2.2 s: preempted by cohort-0-cq-0/medium-3 to give cq-0 back 5 CPU of nominal quota, then
preempting its way back in), so the full baseline churned and never ended (issue 9). The cause: victims were chosen
in the middle of a cycle, where the workloads the cycle had just admitted held quota without being candidates, so
the victim search fell on an older, higher-priority workload. A preemptor is now assessed in the next cycle when
its tree admitted something in this one, as Kueue chooses victims at a cycle's start
(tests/unit/test_fair_sharing_cycle.py pins the rule).
"""

from __future__ import annotations

import asyncio

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


def test_no_workload_is_preempted_and_admitted_again_in_one_instant() -> None:
    result = asyncio.run(run_simulation(scenario(SMALL), config=EngineConfig(fair_sharing=True), until=600_000))
    assert all(o.finished_at is not None for o in result.jobs.values())
    readmitted = sorted(
        (key, t)
        for key, o in result.jobs.items()
        for t in set(o.evicted_at) & set(o.admitted_at)
        # running before t (admitted more often than evicted before it), evicted at t, and admitted again at t
        if sum(a < t for a in o.admitted_at) > sum(e < t for e in o.evicted_at)
    )
    assert readmitted == []
