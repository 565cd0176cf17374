"""Property: for random scenarios, the log the simulator writes replays to its state and reproduces its decisions.

Real: the simulator's driver, the fold, the engine (with its caches), the SQLite event log, `reproduce()` (a fresh,
cache-free `decide()` over the recorded log). Faked: the cluster (virtual clock), scenarios drawn by hypothesis.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.domain import events as ev
from daemon.domain.admission import EngineConfig
from daemon.domain.model import (
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    Preemption,
    PreemptionPolicy,
    PriorityClass,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from daemon.eventlog import LogReader, replay
from daemon.sim.reproduce import reproduce
from daemon.sim.run import run_simulation
from daemon.sim.scenario import Scenario, SimJob

POLICIES = [PreemptionPolicy.NEVER, PreemptionPolicy.LOWER_PRIORITY, PreemptionPolicy.ANY]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    config: list[ev.Event] = [
        ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="h100")),
        ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="a100")),
        ev.PriorityClassObserved(priority_class=PriorityClass(name="low", value=10)),
        ev.PriorityClassObserved(priority_class=PriorityClass(name="high", value=100)),
    ]
    for name in ("team-a", "team-b"):
        quota = [
            FlavorQuotas(
                name=flavor,
                resources=(
                    ResourceQuota(
                        name="nvidia.com/gpu",
                        nominal=draw(st.integers(0, 8)) * 1000,
                        borrowing_limit=draw(st.sampled_from([None, 0, 4000])),
                        lending_limit=draw(st.sampled_from([None, 0, 2000])),
                    ),
                ),
            )
            for flavor in ("h100", "a100")
        ]
        config.append(
            ev.ClusterQueueObserved(
                cluster_queue=ClusterQueue(
                    name=name,
                    cohort=draw(st.sampled_from(["shared", None])),
                    namespace_selector=LabelSelector(),
                    queueing_strategy=draw(st.sampled_from(list(QueueingStrategy))),
                    resource_groups=(ResourceGroup(covered_resources=("nvidia.com/gpu",), flavors=tuple(quota)),),
                    preemption=Preemption(
                        within_cluster_queue=draw(st.sampled_from(POLICIES[:2])),
                        reclaim_within_cohort=draw(st.sampled_from(POLICIES)),
                    ),
                )
            )
        )
        config.append(ev.LocalQueueObserved(local_queue=LocalQueue(namespace=name, name="main", cluster_queue=name)))
    jobs = []
    for i in range(draw(st.integers(1, 14))):
        team = draw(st.sampled_from(["team-a", "team-b"]))
        at = draw(st.integers(0, 20)) * 1000 + i  # distinct creation times, as the scenario loader makes them
        jobs.append(
            SimJob(
                workload=Workload(
                    namespace=team,
                    name=f"job-{i}",
                    uid=f"u{i}",
                    created_at=at,
                    queue_name="main",
                    priority_class=draw(st.sampled_from([None, "low", "high"])),
                    pod_sets=(
                        PodSet(
                            name="main",
                            count=draw(st.integers(1, 3)),
                            requests={"nvidia.com/gpu": draw(st.integers(1, 4)) * 1000},
                        ),
                    ),
                ),
                submit_at=at,
                runtime=draw(st.sampled_from([None, 5000, 30000])),
            )
        )
    jobs.sort(key=lambda j: j.submit_at)
    return Scenario(source="hypothesis", config=tuple(config), jobs=tuple(jobs))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), fair=st.booleans())
def test_the_recorded_log_replays_to_the_same_state_and_reproduces_every_decision(
    scenario: Scenario, fair: bool
) -> None:
    config = EngineConfig(fair_sharing=fair)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "sim.db"
        result = asyncio.run(run_simulation(scenario, db_path=db, until=600_000, config=config))
        assert result.state is not None
        with LogReader(db) as reader:
            assert reader.verify() == result.events
            # A cause always points back at an event that exists.
            assert all(e.cause is None or 1 <= e.cause < e.seq for e in reader.iter_events())
            assert replay(reader, use_snapshots=False).to_snapshot() == result.state.to_snapshot()
            report = reproduce(reader, config)
    assert report.first_mismatch is None
    assert report.decisions_checked == result.decisions
