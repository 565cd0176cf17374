"""The scenarios the seeds run: the issue's shape (Kueue's baseline at 1%: 150 Jobs, 30 ClusterQueues in 5 cohorts),
drawn from a seed, and the subsets of it that shrinking tries.

Every ClusterQueue has one `cpu` resource in flavor `rf`, nominal 20 and borrowingLimit 100, withinClusterQueue
LowerPriority and reclaimWithinCohort Any, as bench/kueue_shapes.py builds Kueue's shapes; the jobs are the baseline's
classes (small 1 cpu, medium 5, large 20; priorities 50, 100, 200) in its proportions, created over a minute and
running 1 to 60 s, so that they overlap with the faults' latencies. Every job fits its queue's nominal quota, so
every job can end.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from daemon.domain import events as ev
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
from daemon.sim.scenario import Scenario, SimJob

_CLASSES = (("small", 1, 50, 0.7), ("medium", 5, 100, 0.2), ("large", 20, 200, 0.1))


@dataclass(frozen=True, slots=True)
class Shape:
    jobs: int = 150
    queues: int = 30
    cohorts: int = 5


ISSUE = Shape()
CI = Shape(jobs=40, queues=6, cohorts=2)


@dataclass(frozen=True, slots=True)
class Pick:
    """Which of a seed's queues and jobs a run keeps (None: all); shrinking narrows it."""

    queues: tuple[int, ...] | None = None
    jobs: tuple[int, ...] | None = None


def _queue(name: str, cohort: str) -> ClusterQueue:
    return ClusterQueue(
        name=name,
        cohort=cohort,
        namespace_selector=LabelSelector(),
        resource_groups=(
            ResourceGroup(
                covered_resources=("cpu",),
                flavors=(
                    FlavorQuotas(
                        name="rf", resources=(ResourceQuota(name="cpu", nominal=20_000, borrowing_limit=100_000),)
                    ),
                ),
            ),
        ),
        preemption=Preemption(
            within_cluster_queue=PreemptionPolicy.LOWER_PRIORITY, reclaim_within_cohort=PreemptionPolicy.ANY
        ),
    )


def job_plan(seed: int, shape: Shape) -> list[tuple[int, str, int, int]]:
    """Every job a seed creates: (queue index, class, submit ms, runtime ms), in index order."""
    rng = random.Random(f"scenario-{seed}")
    plan = []
    taken: set[int] = set()
    for _ in range(shape.jobs):
        roll, acc = rng.random(), 0.0
        name = _CLASSES[-1][0]
        for cls, _, _, share in _CLASSES:
            acc += share
            if roll < acc:
                name = cls
                break
        queue, submit, runtime = rng.randrange(shape.queues), rng.randrange(20_000), rng.randint(5_000, 60_000)
        while submit in taken:  # distinct creation times: FIFO ties are well defined
            submit += 1
        taken.add(submit)
        plan.append((queue, name, submit, runtime))
    return plan


def build(seed: int, shape: Shape, pick: Pick | None = None) -> Scenario:
    pick = pick or Pick()
    queues = range(shape.queues) if pick.queues is None else pick.queues
    config: list[ev.Event] = [ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="rf"))]
    config += [
        ev.PriorityClassObserved(priority_class=PriorityClass(name=f"p-{c}", value=p)) for c, _, p, _ in _CLASSES
    ]
    for q in queues:
        name = f"cq-{q}"
        config.append(ev.ClusterQueueObserved(cluster_queue=_queue(name, f"cohort-{q % shape.cohorts}")))
        config.append(ev.LocalQueueObserved(local_queue=LocalQueue(namespace=name, name=name, cluster_queue=name)))
    cpu = {c: n for c, n, _, _ in _CLASSES}
    kept = set(queues)
    plan = job_plan(seed, shape)
    indexes = range(len(plan)) if pick.jobs is None else pick.jobs
    jobs: list[SimJob] = []
    for i in indexes:
        q, cls, submit, runtime = plan[i]
        if q not in kept:
            continue
        ns = f"cq-{q}"
        jobs.append(
            SimJob(
                workload=Workload(
                    namespace=ns,
                    name=f"{cls}-{i}",
                    uid=f"uid-{i}",
                    created_at=submit,
                    queue_name=ns,
                    priority_class=f"p-{cls}",
                    pod_sets=(PodSet(name="main", count=1, requests={"cpu": cpu[cls] * 1000}),),
                ),
                submit_at=submit,
                runtime=runtime,
            )
        )
    jobs.sort(key=lambda j: (j.submit_at, j.workload.key))
    return Scenario(source=f"dst-seed-{seed}", config=tuple(config), jobs=tuple(jobs))
