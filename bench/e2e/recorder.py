"""What happened to each Job, from the API server's watch, and the figures derived from it.

`Timeline` is the record: per Job its creation, every unsuspend (an admission), every re-suspend after an unsuspend
(an eviction) and its completion, each at the moment the watch event arrived (time.monotonic()). `summarize` is
pure arithmetic over a Timeline (tested on synthetic ones); `JobWatcher` fills a Timeline from a watch on every
namespace's Jobs.

Definitions (the same for both systems):
- makespan: from the first Job's creation to the last Job's completion;
- time to admission of a Job: from its creation to its first unsuspend; mean and p90 per class;
- admissions/s: unsuspends (readmissions included) divided by the makespan;
- evictions: re-suspends of a Job that had been unsuspended;
- work lost to preemption: for every re-suspend, the time since the unsuspend before it times the Job's pods
  (parallelism), in pod-seconds, and the same weighted by the pod's cpu request (core-seconds) and GPU request
  (GPU-seconds); an upper bound of what the victims had run: their pods start only after the Job controller
  creates them, kube-scheduler binds them and kwok starts them, which on a loaded control plane takes seconds.
  Its share is of all the pod-seconds the Jobs were unsuspended (lost + the last unsuspend to completion), which
  counts that start-up too; a pod watch would give the time the pods ran.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.e2e.shape import CLASS_LABEL
from daemon.kube.client import KubeClient

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(slots=True)
class JobRecord:
    klass: str
    created: float | None = None
    unsuspends: list[float] = field(default_factory=list)
    resuspends: list[float] = field(default_factory=list)
    completed: float | None = None
    suspended: bool = True
    pods: int = 1  # spec.parallelism
    cpu_milli_per_pod: int = 0
    gpus_per_pod: int = 0


def cpu_milli(quantity: object) -> int:
    """A cpu quantity ("2", "500m", "0.5") in millicores; raises ValueError naming it if it is something else."""
    text = str(quantity).strip()
    try:
        if text.endswith("m"):
            return int(text[:-1])
        return round(float(text) * 1000)
    except ValueError:
        raise ValueError(f"cpu quantity {quantity!r} is not a number of cores or millicores") from None


def pod_requests(spec: Mapping[str, Any]) -> tuple[int, int, int]:
    """(pods, cpu millicores per pod, GPUs per pod) of a Job's spec: parallelism, and the sum over the template's
    containers of their requests."""
    pods = int(spec.get("parallelism") or 1)
    cpu = gpus = 0
    for container in ((spec.get("template") or {}).get("spec") or {}).get("containers") or ():
        requests = (container.get("resources") or {}).get("requests") or {}
        if "cpu" in requests:
            cpu += cpu_milli(requests["cpu"])
        if GPU_RESOURCE in requests:
            gpus += int(str(requests[GPU_RESOURCE]))
    return pods, cpu, gpus


def lost_work(t: Timeline) -> dict[str, Any]:
    """What the victims of preemption had run when re-suspended (pod-, core- and GPU-seconds), and its share of
    all the time the Jobs' pods were unsuspended."""
    lost_pod = lost_cpu = lost_gpu = total_pod = 0.0
    for key, r in t.jobs.items():
        if len(r.resuspends) > len(r.unsuspends):
            raise ValueError(f"Job {key}: {len(r.resuspends)} re-suspends after {len(r.unsuspends)} unsuspends")
        for started, stopped in zip(r.unsuspends, r.resuspends, strict=False):
            ran = max(0.0, stopped - started)
            lost_pod += ran * r.pods
            lost_cpu += ran * r.pods * r.cpu_milli_per_pod / 1000
            lost_gpu += ran * r.pods * r.gpus_per_pod
        if r.completed is not None and len(r.unsuspends) > len(r.resuspends):
            total_pod += max(0.0, r.completed - r.unsuspends[-1]) * r.pods
    total_pod += lost_pod
    return {
        "lost_pod_s": round(lost_pod, 2),
        "lost_cpu_core_s": round(lost_cpu, 2),
        "lost_gpu_s": round(lost_gpu, 2),
        "lost_share": round(lost_pod / total_pod, 4) if total_pod > 0 else 0.0,
        "run_pod_s": round(total_pod, 2),
        "victims": sum(1 for r in t.jobs.values() if r.resuspends),
    }


@dataclass(slots=True)
class Timeline:
    jobs: dict[str, JobRecord] = field(default_factory=dict)  # "namespace/name" -> record

    def observe(self, obj: Mapping[str, Any], at: float) -> None:
        """One watch object (ADDED or MODIFIED) seen at `at`."""
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        klass = labels.get(CLASS_LABEL)
        if klass is None:
            return  # not one of the benchmark's Jobs
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        rec = self.jobs.get(key)
        spec = obj.get("spec") or {}
        if rec is None:
            pods, cpu, gpus = pod_requests(spec)
            rec = self.jobs[key] = JobRecord(
                klass=str(klass), created=at, pods=pods, cpu_milli_per_pod=cpu, gpus_per_pod=gpus
            )
        suspended = bool(spec.get("suspend"))
        if rec.suspended and not suspended:
            rec.unsuspends.append(at)
        elif not rec.suspended and suspended:
            rec.resuspends.append(at)
        rec.suspended = suspended
        if rec.completed is None:
            for cond in (obj.get("status") or {}).get("conditions") or ():
                if cond.get("type") == "Complete" and cond.get("status") == "True":
                    rec.completed = at

    def completed(self) -> int:
        return sum(1 for r in self.jobs.values() if r.completed is not None)


def fit_waits(jobs: Mapping[str, JobRecord], nominal: int) -> dict[str, float]:
    """For each Job of one ClusterQueue (nominal cpu millicores, no borrowing), the longest time it was pending
    while the queue's free quota by the watch held its cpu (see queue_figures)."""
    events: list[tuple[float, int, str, str]] = []  # (at, order, kind, key); completions first at one instant
    for k, r in jobs.items():
        assert r.created is not None
        events.append((r.created, 2, "create", k))
        events += [(at, 3, "unsuspend", k) for at in r.unsuspends]
        events += [(at, 1, "resuspend", k) for at in r.resuspends]
        if r.completed is not None:
            events.append((r.completed, 0, "complete", k))
    events.sort()
    used = 0
    running: set[str] = set()
    pending: set[str] = set()
    fit_since: dict[str, float] = {}
    longest: dict[str, float] = dict.fromkeys(jobs, 0.0)

    def end_fit(key: str, at: float) -> None:
        since = fit_since.pop(key, None)
        if since is not None:
            longest[key] = max(longest[key], at - since)

    i = 0
    while i < len(events):
        at = events[i][0]
        while i < len(events) and events[i][0] == at:
            _, _, kind, k = events[i]
            cpu = jobs[k].cpu_milli_per_pod * jobs[k].pods
            if kind == "create":
                pending.add(k)
            elif kind == "unsuspend":
                end_fit(k, at)
                pending.discard(k)
                running.add(k)
                used += cpu
            elif kind in ("resuspend", "complete") and k in running:
                running.discard(k)
                used -= cpu
                if kind == "resuspend":
                    pending.add(k)
            i += 1
        free = nominal - used
        for k in pending:
            fits = jobs[k].cpu_milli_per_pod * jobs[k].pods <= free
            if fits and k not in fit_since:
                fit_since[k] = at
            elif not fits:
                end_fit(k, at)
    return longest


def queue_figures(t: Timeline, quotas: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """Per ClusterQueue of `quotas` (its namespace -> nominal cpu millicores; queues that cannot borrow, so that the
    watch alone says what is free): its admissions per minute (first admissions, from its first Job's creation to
    its last first admission), and how long its pending Jobs waited while they fit: for each Job, the longest time
    during which the queue's free quota (nominal minus the cpu of its unsuspended, uncompleted Jobs, by the watch)
    held the Job's cpu and the Job was still pending. That is an upper bound of the time a workload that could be
    admitted went without being admitted: it includes the scheduler's latency and the Job's unsuspend reaching the
    watch, and another Job admitted into the same room ends it only when its unsuspend is seen."""
    out: dict[str, dict[str, Any]] = {}
    for ns, nominal in quotas.items():
        jobs = {k: r for k, r in t.jobs.items() if k.split("/", 1)[0] == ns and r.created is not None}
        if not jobs:
            continue
        longest = fit_waits(jobs, nominal)
        first_admissions = [r.unsuspends[0] for r in jobs.values() if r.unsuspends]
        start = min(r.created for r in jobs.values() if r.created is not None)
        span = (max(first_admissions) - start) if first_admissions else 0.0
        waits = list(longest.values())
        out[ns] = {
            "jobs": len(jobs),
            "admissions_per_min": round(len(first_admissions) / span * 60, 2) if span > 0 else None,
            "fit_wait_max_s": round(max(waits), 3),
            "fit_wait_p99_s": round(percentile(waits, 99), 3),
            "max_pending": max_pending(jobs.values()),
        }
    return out


def max_pending(records: Any) -> int:
    """The most Jobs of `records` pending (created, not unsuspended) at once."""
    steps: list[tuple[float, int]] = []
    for r in records:
        if r.created is None:
            continue
        steps.append((r.created, 1))
        if r.unsuspends:
            steps.append((r.unsuspends[0], -1))
    level = peak = 0
    for _, d in sorted(steps, key=lambda s: (s[0], s[1])):
        level += d
        peak = max(peak, level)
    return peak


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (the smallest value with at least pct% of the values at or below it)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(t: Timeline) -> dict[str, Any]:
    """The figures of one run. Raises ValueError if a Job never completed or was never admitted."""
    if not t.jobs:
        raise ValueError("no benchmark Job was observed")
    unfinished = sorted(k for k, r in t.jobs.items() if r.completed is None or not r.unsuspends)
    if unfinished:
        raise ValueError(f"{len(unfinished)} Jobs never completed, e.g. {', '.join(unfinished[:3])}")
    first_created = min(r.created for r in t.jobs.values() if r.created is not None)
    last_completed = max(r.completed for r in t.jobs.values() if r.completed is not None)
    makespan = last_completed - first_created
    by_class: dict[str, list[float]] = {}
    for r in t.jobs.values():
        assert r.created is not None
        by_class.setdefault(r.klass, []).append(r.unsuspends[0] - r.created)
    admissions = sum(len(r.unsuspends) for r in t.jobs.values())
    return {
        "jobs": len(t.jobs),
        "makespan_s": round(makespan, 3),
        "admissions": admissions,
        "admissions_per_s": round(admissions / makespan, 3) if makespan > 0 else None,
        "evictions": sum(len(r.resuspends) for r in t.jobs.values()),
        "lost_work": lost_work(t),
        "time_to_admission_s": {
            k: {
                "jobs": len(v),
                "mean": round(sum(v) / len(v), 3),
                "p90": round(percentile(v, 90), 3),
            }
            for k, v in sorted(by_class.items())
        },
    }


class JobWatcher:
    """Watches every namespace's Jobs into a Timeline, from a resourceVersion listed before the first Job exists."""

    PATH = "/apis/batch/v1/jobs"

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.timeline = Timeline()
        self.changed = asyncio.Event()
        self.rv: str | None = None

    async def start_point(self) -> None:
        listed = await self.client.request("GET", self.PATH, params={"limit": "1"})
        self.rv = str(listed["metadata"]["resourceVersion"])

    async def run(self) -> None:
        if self.rv is None:
            await self.start_point()
        while True:
            params = {"resourceVersion": str(self.rv), "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
            async for kind, obj in self.client.stream(self.PATH, params, server_timeout_s=300):
                now = time.monotonic()
                if kind == "ERROR":
                    raise RuntimeError(f"the Job watch failed: {obj}")
                self.rv = (obj.get("metadata") or {}).get("resourceVersion", self.rv)
                if kind in ("ADDED", "MODIFIED"):
                    self.timeline.observe(obj, now)
                    self.changed.set()
