"""A simulation never ends with a workload that could still be acted on.

Real: the simulator's driver and stages, the fold, the engine, the SQLite event log. Faked: the cluster (virtual
clock), scenarios built here or drawn by hypothesis.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings

from daemon.domain import events as ev
from daemon.domain.admission import EngineConfig, decide
from daemon.domain.model import (
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    Preemption,
    PreemptionPolicy,
    PriorityClass,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from daemon.sim.run import run_simulation
from daemon.sim.scenario import Scenario, SimJob
from tests.integration.test_reproduce_property import scenarios

GPU = "nvidia.com/gpu"


def _cq(name: str, flavors: dict[str, int], preemption: Preemption) -> ev.Event:
    quotas = tuple(
        FlavorQuotas(name=f, resources=(ResourceQuota(name=GPU, nominal=n * 1000),)) for f, n in flavors.items()
    )
    return ev.ClusterQueueObserved(
        cluster_queue=ClusterQueue(
            name=name,
            cohort="root",
            namespace_selector=LabelSelector(),
            resource_groups=(ResourceGroup(covered_resources=(GPU,), flavors=quotas),),
            preemption=preemption,
        )
    )


def _job(name: str, queue: str, at: int, priority: str | None) -> SimJob:
    wl = Workload(
        namespace=queue,
        name=name,
        uid=f"u-{name}",
        created_at=at,
        queue_name="main",
        priority_class=priority,
        pod_sets=(PodSet(name="main", count=1, requests={GPU: 2000}),),
    )
    return SimJob(workload=wl, submit_at=at, runtime=None)


def test_a_workload_evicted_at_an_instant_preempts_on_its_second_flavor_at_the_next_one() -> None:
    """v borrows cqb's flavor f1; low runs in cqa's own f2. p reclaims f1 from v at 5 s. v, stopped at that instant,
    is not admitted again at it, though it could preempt low on f2 (whenCanPreempt TryNextFlavor). Nothing else
    happens afterwards: the simulator used to follow the engine's request for the next instant only with
    waitForPodsReady on, and the run ended with v "not evaluated yet". v now preempts low at 5.001 s."""
    config = (
        ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="f1")),
        ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="f2")),
        ev.PriorityClassObserved(priority_class=PriorityClass(name="high", value=100)),
        _cq("cqa", {"f1": 0, "f2": 2}, Preemption(within_cluster_queue=PreemptionPolicy.LOWER_PRIORITY)),
        _cq("cqb", {"f1": 2}, Preemption(reclaim_within_cohort=PreemptionPolicy.ANY)),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="cqa", name="main", cluster_queue="cqa")),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="cqb", name="main", cluster_queue="cqb")),
    )
    jobs = (_job("v", "cqa", 0, "high"), _job("low", "cqa", 1, None), _job("p", "cqb", 5000, None))
    result = asyncio.run(run_simulation(Scenario(source="test", config=config, jobs=jobs)))
    v, low, p = result.jobs["cqa/v"], result.jobs["cqa/low"], result.jobs["cqb/p"]
    assert p.admitted_at == [5000]
    assert v.admitted_at == [0, 5001]
    assert v.evicted_at == [5000]
    assert v.flavors == {"main": {GPU: "f2"}}
    assert low.evicted_at == [5001]
    assert low.pending_reason is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_after_a_simulation_one_more_cycle_admits_and_preempts_nothing(scenario: Scenario) -> None:
    result = asyncio.run(run_simulation(scenario, until=600_000))
    assert result.state is not None
    if result.end >= 600_000:
        return  # cut by `until`: the run did not end on its own
    after = decide(result.state.view(), result.end + 1, EngineConfig())
    acted = [e for e in after if isinstance(e, ev.WorkloadAdmitted | ev.WorkloadPreempted)]
    assert acted == [], f"the simulation ended at {result.end} ms with work left: {acted}"
