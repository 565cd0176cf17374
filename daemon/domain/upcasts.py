"""Pure upcasters: old stored payloads (plain dicts) lifted to the next version of their type.

`UPCASTERS[(type, v)]` turns a version-`v` payload into version `v + 1`. The codec chains them until the payload
reaches the class's current VERSION. Rows are never rewritten; old logs are upgraded on every read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Payload = dict[str, Any]


def _job_observed_v0_to_v1(payload: Payload) -> Payload:
    # Version 0 was never released by admitd; it exists so the chain is exercised by a golden fixture from day one:
    # it stored the workload flat ({"job": {...}}) instead of under "workload".
    upgraded = dict(payload)
    upgraded["workload"] = upgraded.pop("job")
    return upgraded


def _actuation_v1_to_v2(payload: Payload) -> Payload:
    # Version 1 did not name the decision it carried out (nothing wrote actuations before `admitd run`): 0 stands
    # for "unknown"; the single nodeSelector of a v1 unsuspension was the `main` pod set's.
    upgraded = dict(payload)
    upgraded["decision"] = 0
    selector = upgraded.pop("node_selector", None)
    if selector:
        upgraded["placements"] = [{"pod_set": "main", "node_selector": selector, "tolerations": []}]
    return upgraded


def _job_observed_v1_to_v2(payload: Payload) -> Payload:
    # Version 1 had no partial admission: every pod set was all or nothing.
    upgraded = dict(payload)
    workload = dict(upgraded["workload"])
    workload["pod_sets"] = [{**ps, "min_count": None} for ps in workload["pod_sets"]]
    upgraded["workload"] = workload
    return upgraded


def _job_observed_v2_to_v3(payload: Payload) -> Payload:
    # Version 2 did not read a Job's activeDeadlineSeconds: no deadline known.
    return {**payload, "workload": {**payload["workload"], "active_deadline_ms": None}}


_WAITING_FOR = re.compile(r"^waiting for \d+ preempted workloads: (.+)$")


def _workload_pending_v1_to_v2(payload: Payload) -> Payload:
    # Version 1 named a waiting preemptor's victims only in its message ("waiting for 2 preempted workloads: a, b",
    # written by admitd itself): read them back so that an old log remembers the same claims.
    upgraded = dict(payload)
    reason = dict(upgraded["reason"])
    match = (
        _WAITING_FOR.match(reason.get("message", "")) if reason.get("kind") == "WaitingForPreemptedWorkloads" else None
    )
    reason["victims"] = match.group(1).split(", ") if match else []
    upgraded["reason"] = reason
    return upgraded


def _workload_adopted_v1_to_v2(payload: Payload) -> Payload:
    # Version 1 adopted only running jobs: a stopping job's quota was not counted by a replica that never saw it run.
    return {**payload, "stopping": False}


UPCASTERS: Mapping[tuple[str, int], Callable[[Payload], Payload]] = {
    ("job.observed", 0): _job_observed_v0_to_v1,
    ("job.observed", 1): _job_observed_v1_to_v2,
    ("job.observed", 2): _job_observed_v2_to_v3,
    ("workload.pending", 1): _workload_pending_v1_to_v2,
    ("workload.adopted", 1): _workload_adopted_v1_to_v2,
    ("job.unsuspended", 1): _actuation_v1_to_v2,
    ("job.suspended", 1): _actuation_v1_to_v2,
    ("actuation.failed", 1): _actuation_v1_to_v2,
}
