"""What happened to each Job, from the API server's watch, and the figures derived from it.

`Timeline` is the record: per Job its creation, every unsuspend (an admission), every re-suspend after an unsuspend
(an eviction) and its completion, each at the moment the watch event arrived (time.monotonic()). `summarize` is
pure arithmetic over a Timeline (tested on synthetic ones); `JobWatcher` fills a Timeline from a watch on every
namespace's Jobs.

Definitions (the same for both systems):
- makespan: from the first Job's creation to the last Job's completion;
- time to admission of a Job: from its creation to its first unsuspend; mean and p90 per class;
- admissions/s: unsuspends (readmissions included) divided by the makespan;
- evictions: re-suspends of a Job that had been unsuspended.
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


@dataclass(slots=True)
class JobRecord:
    klass: str
    created: float | None = None
    unsuspends: list[float] = field(default_factory=list)
    resuspends: list[float] = field(default_factory=list)
    completed: float | None = None
    suspended: bool = True


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
        if rec is None:
            rec = self.jobs[key] = JobRecord(klass=str(klass), created=at)
        suspended = bool((obj.get("spec") or {}).get("suspend"))
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
