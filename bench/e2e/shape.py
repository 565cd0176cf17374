"""The baseline shape of Kueue's scheduler performance test, as real suspended batch/v1 Jobs (pure: no I/O here).

Kueue's generator (test/performance/scheduler/runner/generator in the Kueue module) reads a configuration such as
test/performance/scheduler/configs/baseline/generator.yaml: cohorts of ClusterQueues, each ClusterQueue with sets of
workloads (a count, a creation interval, and per workload a class, a runtime, a priority and a cpu request). Kueue's
harness creates Workload objects; here every workload is a Job whose one pod asks for the request and "runs" for the
runtime through kwok's pod-complete delay, so the whole path (webhook, Job controller, pods, scheduler) is real.

Scaling: `scale_pct` of each set's count (the baseline at 10% is 35 small, 10 medium and 5 large Jobs per
ClusterQueue); creation intervals, runtimes and priorities are the generator's. Every cpu quantity (requests, nominal
quotas, borrowing limits) is divided by `cpu_divisor` (10), so that the 8 fake nodes (64 cpu each) hold everything the
queues can admit and kube-scheduler never waits for room.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
CLASS_LABEL = "e2e.admitd.local/class"
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
FLAVOR = "rf"
V = "kueue.x-k8s.io/v1beta2"


class ShapeError(ValueError):
    """The generator configuration cannot be turned into Jobs (which field, what was wrong)."""


@dataclass(frozen=True, slots=True)
class QueueSpec:
    cohort: str
    name: str  # the ClusterQueue; its namespace and LocalQueue have the same name
    nominal_milli: int
    borrowing_limit_milli: int
    reclaim_within_cohort: str
    within_cluster_queue: str


@dataclass(frozen=True, slots=True)
class JobSpec:
    namespace: str  # = its ClusterQueue's and LocalQueue's name
    name: str
    klass: str
    cpu_milli: int
    priority: int
    runtime_ms: int
    create_at_s: float  # offset from the start of the run
    workload_set: int = 0  # index of the generator's workload set in its ClusterQueue (one creator thread each)

    @property
    def group(self) -> str:
        """The creation sequence this Job belongs to: Kueue's generator creates each workload set of each queue
        one after the other in its own goroutine (bench/e2e's Go creator does the same)."""
        return f"{self.namespace}/{self.workload_set}"


@dataclass(frozen=True, slots=True)
class Plan:
    queues: tuple[QueueSpec, ...]
    jobs: tuple[JobSpec, ...]  # sorted by create_at_s
    priorities: dict[str, int]  # WorkloadPriorityClass name (= workload class) -> value
    # Every Job's spec.ttlSecondsAfterFinished (the TTL-after-finished controller deletes it, its pods and, by their
    # owner references, its Workload that long after it finished), so that a large run does not keep every finished
    # Job, pod and Workload in the API server's memory and etcd. None: finished Jobs are kept.
    ttl_after_finished_s: int | None = None


def _milli(quantity: object, divisor: int, where: str) -> int:
    try:
        value = Decimal(str(quantity))
    except ArithmeticError:
        raise ShapeError(f"{where}: {quantity!r} is not a plain cpu quantity (expected a number of cores)") from None
    if value < 0:
        raise ShapeError(f"{where}: {quantity!r} is negative")
    milli = value * 1000 / divisor
    if milli != milli.to_integral_value():
        raise ShapeError(f"{where}: {quantity!r} / {divisor} is not a whole number of millicores")
    return int(milli)


def _field(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise ShapeError(f"{where}: missing field {key!r}")
    return obj[key]


def scaled(count: int, scale_pct: float) -> int:
    """`scale_pct` percent of `count`, rounded half up, at least 1 (a set never disappears)."""
    return max(1, int(Decimal(count) * Decimal(str(scale_pct)) / 100 + Decimal("0.5")))


def plan(config: dict[str, Any], *, scale_pct: float, cpu_divisor: int = 10) -> Plan:
    """Queues and Jobs of the generator configuration `config` at `scale_pct` percent."""
    if scale_pct <= 0 or scale_pct > 100:
        raise ShapeError(f"scale: {scale_pct} is not a percentage in (0, 100]")
    queues: list[QueueSpec] = []
    jobs: list[JobSpec] = []
    priorities: dict[str, int] = {}
    cohorts = _field(config, "cohorts", "generator config")
    for ci, cohort_set in enumerate(cohorts):
        where = f"cohorts[{ci}]"
        for cohort_idx in range(int(_field(cohort_set, "count", where))):
            cohort = f"{_field(cohort_set, 'className', where)}-{cohort_idx}"
            for qi, qset in enumerate(_field(cohort_set, "queuesSets", where)):
                qwhere = f"{where}.queuesSets[{qi}]"
                for q_idx in range(int(_field(qset, "count", qwhere))):
                    # Kueue's generator names a ClusterQueue <class>-<set>-<index>-<cohort>.
                    name = f"{_field(qset, 'className', qwhere)}-{qi}-{q_idx}-{cohort}"
                    queues.append(
                        QueueSpec(
                            cohort=cohort,
                            name=name,
                            nominal_milli=_milli(_field(qset, "nominalQuota", qwhere), cpu_divisor, qwhere),
                            borrowing_limit_milli=_milli(_field(qset, "borrowingLimit", qwhere), cpu_divisor, qwhere),
                            reclaim_within_cohort=str(qset.get("reclaimWithinCohort", "Never")),
                            within_cluster_queue=str(qset.get("withinClusterQueue", "Never")),
                        )
                    )
                    for wi, wset in enumerate(_field(qset, "workloadsSets", qwhere)):
                        wwhere = f"{qwhere}.workloadsSets[{wi}]"
                        interval_s = int(_field(wset, "creationIntervalMs", wwhere)) / 1000
                        count = scaled(int(_field(wset, "count", wwhere)), scale_pct)
                        templates = _field(wset, "workloads", wwhere)
                        for si in range(count):
                            for ti, tpl in enumerate(templates):
                                twhere = f"{wwhere}.workloads[{ti}]"
                                klass = str(_field(tpl, "className", twhere))
                                priority = int(_field(tpl, "priority", twhere))
                                if priorities.setdefault(klass, priority) != priority:
                                    raise ShapeError(f"{twhere}: class {klass!r} has two priorities")
                                # The generator waits one interval before each workload of a set.
                                step = si * len(templates) + ti + 1
                                jobs.append(
                                    JobSpec(
                                        namespace=name,
                                        name=f"{klass}-{wi}-{si}-{ti}",
                                        klass=klass,
                                        cpu_milli=_milli(_field(tpl, "request", twhere), cpu_divisor, twhere),
                                        priority=priority,
                                        runtime_ms=int(_field(tpl, "runtimeMs", twhere)),
                                        create_at_s=round(step * interval_s, 6),
                                        workload_set=wi,
                                    )
                                )
    jobs.sort(key=lambda j: (j.create_at_s, j.namespace, j.name))
    return Plan(queues=tuple(queues), jobs=tuple(jobs), priorities=priorities)


SHAPES = ("baseline", "deep")


def deep_config() -> dict[str, Any]:
    """The deep-queue shape (Kueue issue 14477 at this machine's scale), in the generator's format: one ClusterQueue
    (`deep-0-0-deep-0`, nominal 200 cores before the divisor, no borrowing) whose 460 Jobs of three sizes (4, 20 and 80
    cores; 2, 3 and 6 s) are all created in the first 4 s, so that about 450 wait while the quota holds at most 2.5
    large or 50 small at once, and most heads do not fit when they reach the front; beside it, 4 shallow ClusterQueues
    (nominal 20, no borrowing) each receiving a 4-core Job of 1 s every 2 s for 60 s. One priority for all: nothing is
    preempted, the figures are the throughput of admission at depth. `scale_pct` applies as for the baseline."""

    def wset(klass: str, count: int, interval_ms: int, runtime_ms: int, cores: int) -> dict[str, Any]:
        return {
            "count": count,
            "creationIntervalMs": interval_ms,
            "workloads": [{"className": klass, "runtimeMs": runtime_ms, "priority": 100, "request": cores}],
        }

    def qset(klass: str, count: int, nominal: int, sets: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "className": klass,
            "count": count,
            "nominalQuota": nominal,
            "borrowingLimit": 0,
            "reclaimWithinCohort": "Never",
            "withinClusterQueue": "Never",
            "workloadsSets": sets,
        }

    return {
        "cohorts": [
            {
                "className": "deep",
                "count": 1,
                "queuesSets": [
                    qset(
                        "deep",
                        1,
                        200,
                        [
                            wset("small", 400, 10, 2000, 4),
                            wset("medium", 40, 100, 3000, 20),
                            wset("large", 20, 200, 6000, 80),
                        ],
                    )
                ],
            },
            {
                "className": "shallow",
                "count": 1,
                "queuesSets": [qset("shallow", 4, 20, [wset("shallow", 30, 2000, 1000, 4)])],
            },
        ]
    }


def _cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def queue_objects(p: Plan) -> list[dict[str, Any]]:
    """ResourceFlavor, WorkloadPriorityClasses, Namespaces, ClusterQueues and LocalQueues (kueue.x-k8s.io/v1beta2)."""
    docs: list[dict[str, Any]] = [{"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}}]
    for klass, value in sorted(p.priorities.items()):
        docs.append({"apiVersion": V, "kind": "WorkloadPriorityClass", "metadata": {"name": klass}, "value": value})
    for q in p.queues:
        docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": q.name}})
        docs.append(
            {
                "apiVersion": V,
                "kind": "ClusterQueue",
                "metadata": {"name": q.name},
                "spec": {
                    "cohortName": q.cohort,
                    "namespaceSelector": {},
                    "preemption": {
                        "reclaimWithinCohort": q.reclaim_within_cohort,
                        "withinClusterQueue": q.within_cluster_queue,
                    },
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {
                                    "name": FLAVOR,
                                    "resources": [
                                        {
                                            "name": "cpu",
                                            "nominalQuota": _cpu(q.nominal_milli),
                                            "borrowingLimit": _cpu(q.borrowing_limit_milli),
                                        }
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        docs.append(
            {
                "apiVersion": V,
                "kind": "LocalQueue",
                "metadata": {"name": q.name, "namespace": q.name},
                "spec": {"clusterQueue": q.name},
            }
        )
    return docs


def creator_plan(p: Plan, *, managed: bool = True) -> dict[str, Any]:
    """The plan as the Go creator (tests/cluster/creator) reads it: each Job's body (the same as the Python creator
    sends), its creation sequence and its offset from the start."""
    ttl = p.ttl_after_finished_s
    return {
        "jobs": [
            {"group": j.group, "at_s": j.create_at_s, "job": job_object(j, managed=managed, ttl_s=ttl)} for j in p.jobs
        ]
    }


def job_object(j: JobSpec, *, managed: bool = True, ttl_s: int | None = None) -> dict[str, Any]:
    """A suspended Job with one pod asking for the class's cpu, 'running' for its runtime (kwok). Not `managed`
    (the no-scheduler baseline): created running, without the queue and priority labels. `ttl_s`: its
    ttlSecondsAfterFinished (deleted that long after it finished), none if None."""
    if ttl_s is not None and ttl_s < 0:
        raise ShapeError(f"ttlSecondsAfterFinished {ttl_s} is negative")
    labels = (
        {QUEUE_LABEL: j.namespace, PRIORITY_LABEL: j.klass, CLASS_LABEL: j.klass} if managed else {CLASS_LABEL: j.klass}
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": j.name,
            "namespace": j.namespace,
            "labels": labels,
        },
        "spec": {
            "suspend": managed,
            **({"ttlSecondsAfterFinished": ttl_s} if ttl_s is not None else {}),
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {COMPLETE_DELAY: f"{j.runtime_ms}ms"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": _cpu(j.cpu_milli)}}}
                    ],
                },
            },
        },
    }
