"""Preemption reaches a fixed point: random hierarchical, weighted, fair-sharing clusters run to their end, and no
job is preempted twice at one instant.

Real: `AdmissionEngine` (fair sharing with every accepted strategy list, or classic), the quota tree and the fold
(`daemon.domain.state`, through the builders' `World`). Faked: the clock and the cluster, as the simulator fakes
them: jobs arrive at their submit time, finish after their runtime, and a preempted job stops at once (evicted in
the same instant) and queues again.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.domain.admission import AdmissionEngine, EngineConfig
from daemon.domain.events import Event, WorkloadAdmitted, WorkloadPreempted
from daemon.domain.fairpreemption import VALID_STRATEGY_SETS
from tests.unit.builders import JobBuilder, World, cohort, cq, flavor, job, lq, namespace, world

POLICIES = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")
WEIGHTS = (0, 500, 1000, 1000, 2000)


@dataclass
class Sim:
    w: World
    jobs: list[tuple[int, JobBuilder, int | None]]  # (submit at, job, runtime)
    config: EngineConfig


@st.composite
def sims(draw: st.DrawFn) -> Sim:
    w = world(flavor("h100"), namespace("default"))
    parents = ["root"]
    w.add(cohort("root").weight(draw(st.sampled_from(WEIGHTS))).flavor("h100", gpu=draw(st.integers(0, 4))))
    for level in (1, 2):  # up to three levels of Cohorts
        for i in range(draw(st.integers(0, 2))):
            name = f"co{level}{i}"
            c = cohort(name).parent(draw(st.sampled_from(parents))).weight(draw(st.sampled_from(WEIGHTS)))
            if draw(st.booleans()):
                c = c.flavor("h100", gpu=draw(st.integers(0, 4)), borrow=draw(st.one_of(st.none(), st.integers(0, 3))))
            w.add(c)
            parents.append(name)
    n = draw(st.integers(2, 5))
    for i in range(n):
        reclaim = draw(st.sampled_from(RECLAIM))
        b = (
            cq(f"cq{i}")
            .cohort(draw(st.sampled_from(parents)))
            .weight(draw(st.sampled_from(WEIGHTS)))
            .preempt(
                draw(st.sampled_from(POLICIES)),
                reclaim,
                draw(st.sampled_from(("Never", "LowerPriority"))) if reclaim != "Never" else "Never",
            )
            .flavor(
                "h100",
                gpu=draw(st.integers(0, 6)),
                borrow=draw(st.one_of(st.none(), st.integers(0, 4))),
                lend=draw(st.one_of(st.none(), st.integers(0, 4))),
            )
        )
        w.add(b, lq("default", f"q{i}", f"cq{i}"))
    jobs = []
    for t in range(draw(st.integers(1, 14))):
        jb = (
            job(f"j{t}")
            .queue(f"q{draw(st.integers(0, n - 1))}")
            .priority(draw(st.integers(0, 2)))
            .at(draw(st.integers(0, 4)) * 1000 + t)
            .gpus(draw(st.integers(1, 4)))
        )
        jobs.append((jb.created, jb, draw(st.one_of(st.none(), st.integers(1, 4).map(lambda s: s * 1000)))))
    strategies = draw(st.sampled_from(VALID_STRATEGY_SETS))
    return Sim(w, jobs, EngineConfig(fair_sharing=True, fair_sharing_strategies=strategies))


def run(sim: Sim) -> None:
    """The simulator's loop: at each instant where something happens apply it, then cycles until one admits and
    preempts nothing."""
    w = sim.w
    engine = AdmissionEngine(sim.config)
    runtime = {jb.key: rt for _, jb, rt in sim.jobs}
    timeline: list[tuple[int, int, str, str]] = [(at, i, "create", jb.key) for i, (at, jb, _) in enumerate(sim.jobs)]
    builders = {jb.key: jb for _, jb, _ in sim.jobs}
    heapq.heapify(timeline)
    epoch: dict[str, int] = {}
    order = len(timeline)
    cycles_left = 50 * (len(sim.jobs) + 1)  # every cycle that goes on admits or preempts; far fewer are needed
    while timeline:
        now = timeline[0][0]
        observed = False
        while timeline and timeline[0][0] == now:
            _, _, kind, key = heapq.heappop(timeline)
            if kind == "create":
                w.submit(builders[key])
                observed = True
            elif kind == f"finish{epoch.get(key)}" and key in w.admitted:
                w.finish(key)
                observed = True
        if not observed:
            continue  # a completion that no longer applies (its job was preempted): nothing happened, no cycle
        preempted_now: dict[str, str | None] = {}
        while True:
            cycles_left -= 1
            assert cycles_left > 0, f"no fixed point at {now} ms"
            events: list[Event] = engine.decide(w.view(), now)
            w.apply(events)
            for e in events:
                if isinstance(e, WorkloadPreempted):
                    assert e.workload not in preempted_now, (
                        f"{e.workload} preempted twice at {now} ms: by {preempted_now[e.workload]}, then by "
                        f"{e.preemptor}"
                    )
                    preempted_now[e.workload] = e.preemptor
                    w.evict(e.workload, now)
                elif isinstance(e, WorkloadAdmitted) and runtime[e.workload] is not None:
                    epoch[e.workload] = epoch.get(e.workload, 0) + 1
                    order += 1
                    rt = runtime[e.workload]
                    assert rt is not None
                    heapq.heappush(timeline, (now + rt, order, f"finish{epoch[e.workload]}", e.workload))
            if not any(isinstance(e, WorkloadAdmitted | WorkloadPreempted) for e in events):
                break


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sim=sims())
def test_every_run_ends_and_no_job_is_preempted_twice_at_one_instant(sim: Sim) -> None:
    run(sim)


def test_the_room_a_preemption_frees_goes_to_its_preemptor_first() -> None:
    """Found by the property above (seed 2): j2 (cq1, priority 1) preempts j0 in its own queue; with the room
    free, the tournament used to serve j3 (cq2, older, the same share) first; j0 then took it back from j3 by
    fair sharing, and j2 preempted j0 again at the same instant. The waiting preemptor now wins the tournament
    (Kueue's PrioritizePreemptorWorkloads) and no job is preempted twice."""
    w = world(
        flavor("h100"),
        namespace("default"),
        cohort("root").weight(0).flavor("h100", gpu=1),
        cq("cq0").cohort("root").weight(0).flavor("h100", gpu=1),
        cq("cq1").cohort("root").preempt("LowerPriority", "Any").flavor("h100", gpu=1),
        cq("cq2").cohort("root").preempt("Never", "Any").flavor("h100", gpu=0),
        *(lq("default", f"q{i}", f"cq{i}") for i in range(3)),
    )
    jobs = [
        (0, job("j0").queue("q1").gpus(2), None),
        (1, job("j1").queue("q0").gpus(2), None),
        (1002, job("j2").queue("q1").priority(1).gpus(3), None),
        (3, job("j3").queue("q2").priority(1).gpus(2), None),
        (4, job("j4").queue("q0").gpus(2), None),
        (5, job("j5").queue("q0").gpus(1), 1000),
    ]
    for at, jb, _ in jobs:
        jb.at(at)
    sim = Sim(w, jobs, EngineConfig(fair_sharing=True, fair_sharing_strategies=("LessThanInitialShare",)))
    run(sim)
    assert "default/j2" in sim.w.admitted
