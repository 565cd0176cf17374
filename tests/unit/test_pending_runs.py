"""The indexed walk (runs of alike pending workloads, `PendingIndex`) against the walk that visits every workload.

Real: the fold (`daemon.domain.state.State`, which keeps the index), `decide`, `AdmissionEngine` and everything
under them. Faked: the cluster is a few lines of virtual clock here instead of `daemon.sim`: jobs are observed at
their submit time, a preempted workload is evicted at once, an admitted one finishes after its runtime; no event
log. Shapes are small Kueue perf-test shapes (tree-wide borrowing, reclaim, priorities, deep queues), where passes
offer entries that no longer fit and preemptors overlap, so the walk resumes mid-queue in a changed tree.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.domain import events as ev
from daemon.domain.admission import AdmissionEngine, EngineConfig, decide
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
from daemon.domain.state import State
from daemon.domain.view import ClusterView


@dataclass(frozen=True)
class Job:
    workload: Workload
    submit_at: int
    runtime: int


@dataclass(frozen=True)
class Shape:
    config: tuple[ev.Event, ...]
    jobs: tuple[Job, ...]


def kueue_like(
    *,
    queues: int,
    classes: list[tuple[int, int, int, int, int]],  # (count, cpu, priority, runtime, every) per queue
    nominal: int,
    borrow: int | None,
    within: PreemptionPolicy,
    reclaim: PreemptionPolicy,
    strict: tuple[bool, ...] = (),
) -> Shape:
    """One cohort of `queues` ClusterQueues shaped like Kueue's scheduler perf test (bench/kueue_shapes.py)."""
    config: list[ev.Event] = [ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="rf"))]
    for priority in sorted({c[2] for c in classes}):
        config.append(ev.PriorityClassObserved(priority_class=PriorityClass(name=f"p{priority}", value=priority)))
    jobs: list[Job] = []
    for q in range(queues):
        name = f"cq-{q}"
        config.append(
            ev.ClusterQueueObserved(
                cluster_queue=ClusterQueue(
                    name=name,
                    cohort="co",
                    namespace_selector=LabelSelector(),
                    queueing_strategy=QueueingStrategy.STRICT_FIFO
                    if q < len(strict) and strict[q]
                    else QueueingStrategy.BEST_EFFORT_FIFO,
                    resource_groups=(
                        ResourceGroup(
                            covered_resources=("cpu",),
                            flavors=(
                                FlavorQuotas(
                                    name="rf",
                                    resources=(
                                        ResourceQuota(
                                            name="cpu",
                                            nominal=nominal * 1000,
                                            borrowing_limit=None if borrow is None else borrow * 1000,
                                        ),
                                    ),
                                ),
                            ),
                        ),
                    ),
                    preemption=Preemption(within_cluster_queue=within, reclaim_within_cohort=reclaim),
                )
            )
        )
        config.append(ev.LocalQueueObserved(local_queue=LocalQueue(namespace=name, name="q", cluster_queue=name)))
        for c, (count, cpu, priority, runtime, every) in enumerate(classes):
            for i in range(count):
                wl = Workload(
                    namespace=name,
                    name=f"c{c}-{i}",
                    uid=f"{name}-c{c}-{i}",
                    created_at=i * every,
                    queue_name="q",
                    priority_class=f"p{priority}",
                    pod_sets=(PodSet(name="main", count=1, requests={"cpu": cpu * 1000}),),
                )
                jobs.append(Job(wl, i * every, runtime))
    jobs.sort(key=lambda j: (j.submit_at, j.workload.key))
    return Shape(tuple(config), tuple(jobs))


Step = Callable[[ClusterView, int], list[ev.Event]]


def simulate(shape: Shape, step: Step, max_cycles: int = 2000) -> int:
    """Run `shape` on a virtual clock, deciding each cycle with `step`; return the number of cycles. Stops early
    after `max_cycles` (some random shapes preempt back and forth for long; every cycle run was still compared)."""
    state = State()
    for e in shape.config:
        state.apply(e)
    timeline: list[tuple[int, int, int, str, int]] = []  # (at, order, kind 0 create / 1 finish, key, epoch)
    by_key = {j.workload.key: j for j in shape.jobs}
    for n, j in enumerate(shape.jobs):
        heapq.heappush(timeline, (j.submit_at, n, 0, j.workload.key, 0))
    order, epochs, cycles = len(shape.jobs), dict.fromkeys(by_key, 0), 0
    while timeline:
        now = timeline[0][0]
        while timeline and timeline[0][0] == now:
            _, _, kind, key, epoch = heapq.heappop(timeline)
            if kind == 0:
                state.apply(ev.JobObserved(workload=by_key[key].workload))
            elif epochs[key] == epoch and key in state.view().admitted:
                state.apply(ev.JobFinished(job=key, at=now))
        while True:
            cycles += 1
            if cycles > max_cycles:
                return cycles
            decisions = step(state.view(), now)
            for d in decisions:
                state.apply(d)
                if isinstance(d, ev.WorkloadAdmitted):
                    epochs[d.workload] += 1
                    order += 1
                    heapq.heappush(
                        timeline, (now + by_key[d.workload].runtime, order, 1, d.workload, epochs[d.workload])
                    )
            for d in decisions:
                if isinstance(d, ev.WorkloadPreempted):
                    epochs[d.workload] += 1
                    state.apply(ev.WorkloadEvicted(workload=d.workload, at=now, reason="Preempted"))
            if not any(isinstance(d, ev.WorkloadAdmitted | ev.WorkloadPreempted) for d in decisions):
                break
    return cycles


def lockstep(config: EngineConfig) -> Step:
    """Each cycle: the indexed walk (fresh and with the engine's caches) must write exactly what the walk that
    visits every pending workload writes."""
    engine = AdmissionEngine(config)

    def step(view: ClusterView, now: int) -> list[ev.Event]:
        reference = decide(dataclasses.replace(view, pending_index=None), now, config)
        assert decide(view, now, config) == reference
        assert engine.decide(view, now) == reference
        return reference

    return step


BASELINE_TENTH = [(35, 1, 50, 200, 100), (10, 5, 100, 500, 500), (5, 20, 200, 1000, 1200)]


def test_a_tenth_of_kueues_baseline_with_fair_sharing_walks_by_runs_as_one_by_one() -> None:
    """Regression: a fair-sharing pass offered a preemptor whose victims another queue had just claimed, after
    stepping over a run of NoTargets workloads; the next pass resumed before that run instead of at the preemptor
    and admitted different workloads."""
    shape = kueue_like(
        queues=6,
        classes=BASELINE_TENTH,
        nominal=20,
        borrow=100,
        within=PreemptionPolicy.LOWER_PRIORITY,
        reclaim=PreemptionPolicy.ANY,
    )
    assert simulate(shape, lockstep(EngineConfig(fair_sharing=True))) > 50


def test_a_tenth_of_kueues_baseline_walks_by_runs_as_one_by_one() -> None:
    shape = kueue_like(
        queues=6,
        classes=BASELINE_TENTH,
        nominal=20,
        borrow=100,
        within=PreemptionPolicy.LOWER_PRIORITY,
        reclaim=PreemptionPolicy.ANY,
    )
    assert simulate(shape, lockstep(EngineConfig())) > 50


@st.composite
def shapes(draw: st.DrawFn) -> tuple[Shape, EngineConfig]:
    queues = draw(st.integers(2, 4))
    classes = [
        (
            draw(st.integers(2, 10)),  # count per queue
            draw(st.sampled_from([1, 1, 2, 3, 5, 8])),  # cpu
            priority,
            draw(st.integers(1, 6)) * 100,  # runtime
            draw(st.sampled_from([0, 50, 100, 300])),  # every
        )
        # Priorities may repeat: then classes interleave in queue order by creation time.
        for priority in draw(st.lists(st.sampled_from([10, 50, 100]), min_size=1, max_size=3))
    ]
    shape = kueue_like(
        queues=queues,
        classes=classes,
        nominal=draw(st.integers(2, 12)),
        borrow=draw(st.one_of(st.none(), st.integers(0, 20))),
        within=draw(st.sampled_from(list(PreemptionPolicy))),
        reclaim=draw(st.sampled_from([PreemptionPolicy.NEVER, PreemptionPolicy.LOWER_PRIORITY, PreemptionPolicy.ANY])),
        strict=tuple(draw(st.lists(st.booleans(), max_size=queues))),
    )
    config = EngineConfig(fair_sharing=draw(st.booleans()), reserve_without_candidates=draw(st.booleans()))
    return shape, config


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=shapes())
def test_small_kueue_like_shapes_walk_by_runs_as_one_by_one(case: tuple[Shape, EngineConfig]) -> None:
    shape, config = case
    simulate(shape, lockstep(config), max_cycles=300)


def test_interleaved_classes_with_fair_sharing_walk_by_runs_as_one_by_one() -> None:
    """Small and medium workloads share a priority, so their runs interleave in queue order: a class found NoFit
    before an entry must be judged again after it, in the tree as the entry left it, not from the earlier result."""
    shape = kueue_like(
        queues=5,
        classes=[(35, 1, 50, 200, 100), (10, 5, 50, 500, 500), (5, 10, 200, 1000, 1200)],
        nominal=10,
        borrow=100,
        within=PreemptionPolicy.LOWER_PRIORITY,
        reclaim=PreemptionPolicy.ANY,
    )
    assert simulate(shape, lockstep(EngineConfig(fair_sharing=True))) > 50
