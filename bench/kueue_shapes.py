"""Kueue's scheduler performance-test shapes (test/performance/scheduler/configs), rebuilt as simulator scenarios.

Every ClusterQueue has one `cpu` resource in flavor `rf`, nominal 20 and borrowingLimit 100, with
reclaimWithinCohort=Any and withinClusterQueue=LowerPriority, and a same-named namespace and LocalQueue. Each
workload class of each queue creates one workload every `every_ms`, as Kueue's generator does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from daemon.domain import events as ev
from daemon.domain.model import (
    ClusterQueue,
    Cohort,
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


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    name: str
    count: int  # per ClusterQueue
    cpu: int
    priority: int
    runtime_ms: int
    every_ms: int


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    cohorts: int
    queues_per_cohort: int
    classes: tuple[WorkloadClass, ...]
    nominal_cpu: int = 20
    borrowing_limit_cpu: int = 100


BASELINE = Shape(
    "baseline",
    5,
    6,
    (
        WorkloadClass("small", 350, 1, 50, 200, 100),
        WorkloadClass("medium", 100, 5, 100, 500, 500),
        WorkloadClass("large", 50, 20, 200, 1000, 1200),
    ),
)

LARGE_SCALE = Shape(
    "large-scale",
    10,
    100,
    (
        WorkloadClass("small", 35, 1, 50, 150, 60),
        WorkloadClass("medium", 11, 5, 100, 350, 300),
        WorkloadClass("large", 4, 20, 200, 700, 700),
    ),
)


def cpu_queue(
    name: str,
    cohort: str | None,
    nominal_cpu: int,
    *,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    preemption: Preemption | None = None,
) -> ClusterQueue:
    """A ClusterQueue with one `cpu` resource in flavor `rf`, as in Kueue's generator (quantities in whole CPUs)."""
    return ClusterQueue(
        name=name,
        cohort=cohort,
        namespace_selector=LabelSelector(),
        resource_groups=(
            ResourceGroup(
                covered_resources=("cpu",),
                flavors=(
                    FlavorQuotas(
                        name="rf",
                        resources=(
                            ResourceQuota(
                                name="cpu",
                                nominal=nominal_cpu * 1000,
                                borrowing_limit=None if borrowing_limit is None else borrowing_limit * 1000,
                                lending_limit=None if lending_limit is None else lending_limit * 1000,
                            ),
                        ),
                    ),
                ),
            ),
        ),
        preemption=preemption or Preemption(),
    )


def scenario(shape: Shape) -> Scenario:
    config: list[ev.Event] = [ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="rf"))]
    for cls in shape.classes:
        config.append(ev.PriorityClassObserved(priority_class=PriorityClass(name=f"p-{cls.name}", value=cls.priority)))
    jobs: list[SimJob] = []
    for c in range(shape.cohorts):
        for q in range(shape.queues_per_cohort):
            name = f"cohort-{c}-cq-{q}"
            config.append(
                ev.ClusterQueueObserved(
                    cluster_queue=cpu_queue(
                        name,
                        f"cohort-{c}",
                        shape.nominal_cpu,
                        borrowing_limit=shape.borrowing_limit_cpu,
                        preemption=Preemption(
                            within_cluster_queue=PreemptionPolicy.LOWER_PRIORITY,
                            reclaim_within_cohort=PreemptionPolicy.ANY,
                        ),
                    )
                )
            )
            config.append(ev.LocalQueueObserved(local_queue=LocalQueue(namespace=name, name=name, cluster_queue=name)))
            for cls in shape.classes:
                for i in range(cls.count):
                    jobs.append(
                        SimJob(
                            workload=Workload(
                                namespace=name,
                                name=f"{cls.name}-{i}",
                                uid=f"{name}-{cls.name}-{i}",
                                created_at=i * cls.every_ms,
                                queue_name=name,
                                priority_class=f"p-{cls.name}",
                                pod_sets=(PodSet(name="main", count=1, requests={"cpu": cls.cpu * 1000}),),
                            ),
                            submit_at=i * cls.every_ms,
                            runtime=cls.runtime_ms,
                        )
                    )
    jobs.sort(key=lambda j: (j.submit_at, j.workload.key))
    return Scenario(source=f"kueue-{shape.name}", config=tuple(config), jobs=tuple(jobs))


def ideal_makespan_ms(shape: Shape) -> float:
    """Total work / total nominal capacity: the makespan of perfect packing."""
    per_cq = sum(cls.count * cls.cpu * cls.runtime_ms for cls in shape.classes)
    return per_cq / shape.nominal_cpu


def hierarchical(scen: Scenario, cohorts: int, *, weights: bool = False) -> Scenario:
    """The same queues and jobs with the cohorts joined into one tree three Cohort levels deep: `all` -> `org-0`,
    `org-1` -> each `cohort-<c>` (under `org-<c % 2>`) -> its ClusterQueues. No Cohort has quota of its own.

    With `weights`, Cohorts have fair-sharing weights: `org-0` 2 and `org-1` 1, and under each org the first cohort
    weight 2 (the others 1), so that the weighted shares of branches, not only of ClusterQueues, decide."""

    def weight(heavy: bool) -> int:
        return 2000 if weights and heavy else 1000

    tree: list[ev.Event] = [ev.CohortObserved(cohort=Cohort(name="all"))]
    tree += [
        ev.CohortObserved(cohort=Cohort(name=f"org-{i}", parent="all", fair_sharing_weight=weight(i == 0)))
        for i in range(2)
    ]
    tree += [
        ev.CohortObserved(cohort=Cohort(name=f"cohort-{c}", parent=f"org-{c % 2}", fair_sharing_weight=weight(c < 2)))
        for c in range(cohorts)
    ]
    source = f"{scen.source}-hierarchical" + ("-weighted" if weights else "")
    return dataclasses.replace(scen, source=source, config=(*tree, *scen.config))
