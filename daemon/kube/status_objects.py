"""What users see in the cluster, as pure functions: Workload objects, queue status and Job Events as raw dicts.

No I/O and no clock here (times are arguments): `daemon.kube.status` decides when to write, these decide what.
Names, condition types, reasons and messages follow Kueue (kueue.x-k8s.io/v1beta2, pkg/workload and
pkg/controller/jobframework), so `kubectl get workloads` and tools built on Kueue's API read them unchanged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from daemon.domain import events as ev
from daemon.domain import reasons
from daemon.domain.model import Admission, ClusterQueue, LocalQueue, Millis, PendingReason, Toleration, Workload
from daemon.domain.quantity import format_quantity

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
MANAGED_BY = ("app.kubernetes.io/managed-by", "admitd")
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
_OWNERS = {  # kind -> (apiVersion, group) of the owners admitd manages
    "Job": ("batch/v1", "batch"),
    "PyTorchJob": ("kubeflow.org/v1", "kubeflow.org"),
    "RayJob": ("ray.io/v1", "ray.io"),
    "JobSet": ("jobset.x-k8s.io/v1alpha2", "jobset.x-k8s.io"),
}
_QUEUE_KINDS = {  # kind -> apiVersion of the queue objects admitd reads (and may tell about their rejection)
    kind: API_VERSION for kind in ("ClusterQueue", "LocalQueue", "Cohort", "ResourceFlavor", "WorkloadPriorityClass")
} | {"PriorityClass": "scheduling.k8s.io/v1", "Namespace": "v1"}
_CLUSTER_SCOPED = frozenset(_QUEUE_KINDS) - {"LocalQueue"}
EVENTS_OF_CLUSTER_OBJECTS = "default"  # where Events about cluster-scoped objects go, as client-go's recorder does

HASH_LENGTH = 5
MAX_PREFIX_LENGTH = 253 - 1 - HASH_LENGTH  # Kueue's default (ShortWorkloadNames off)
EVENT_MESSAGE_MAX = 1024  # Kueue truncates Event messages to this (api.TruncateEventMessage)
CONDITION_MESSAGE_MAX = 32768  # metav1.Condition's maxLength

Obj = dict[str, Any]


# --- names and times --------------------------------------------------------------------------------------------


def workload_name(owner_name: str, owner_uid: str, kind: str = "Job", group: str = "batch") -> str:
    """Kueue's `GetWorkloadNameForOwnerWithGVK`: `<kind>-<name>` (cut to fit) and 5 hex of a SHA-1 over
    kind, group, name and uid, so a Job recreated under the same name gets a new Workload name."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{owner_name}\n{owner_uid}".encode(), usedforsecurity=False).hexdigest()
    prefix = f"{kind.lower()}-{owner_name}"[:MAX_PREFIX_LENGTH]
    return f"{prefix}-{digest[:HASH_LENGTH]}"


def owner_kind(kind: str) -> tuple[str, str]:
    """The apiVersion and API group of a job kind admitd manages (a Workload's owner); batch/v1 for an unknown one."""
    return _OWNERS.get(kind, ("batch/v1", "batch"))


def rfc3339(ms: Millis) -> str:
    """metav1.Time's format: UTC, whole seconds. By arithmetic on the day's date (kept per day): strftime took about
    10 us a call, most of a 10,000-row pendingworkloads list made afresh (bench/bench_visibility.py)."""
    days, rem = divmod(ms // 1000, 86_400)
    hours, rem = divmod(rem, 3_600)
    minutes, seconds = divmod(rem, 60)
    return f"{_day(days)}T{hours:02d}:{minutes:02d}:{seconds:02d}Z"


@lru_cache(maxsize=4096)
def _day(days: int) -> str:
    return (_EPOCH + timedelta(days=days)).strftime("%Y-%m-%d")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- conditions -------------------------------------------------------------------------------------------------


def set_condition(
    conditions: Sequence[Mapping[str, Any]], type_: str, status: bool, reason: str, message: str, now: str
) -> list[Obj]:
    """apimachinery's meta.SetStatusCondition: replace or add `type_`; lastTransitionTime moves only when the
    status flips."""
    out: list[Obj] = []
    value = "True" if status else "False"
    new: Obj = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": _cut(message, CONDITION_MESSAGE_MAX),
        "lastTransitionTime": now,
    }
    found = False
    for cond in conditions:
        if cond.get("type") == type_:
            found = True
            if cond.get("status") == value and cond.get("lastTransitionTime"):
                new["lastTransitionTime"] = cond["lastTransitionTime"]
            out.append(new)
        else:
            out.append(dict(cond))
    if not found:
        out.append(new)
    return out


def condition(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    for cond in conditions:
        if cond.get("type") == type_:
            return cond
    return None


def is_true(conditions: Sequence[Mapping[str, Any]], type_: str) -> bool:
    cond = condition(conditions, type_)
    return cond is not None and cond.get("status") == "True"


# --- Workload ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorityRef:
    group: str  # kueue.x-k8s.io | scheduling.k8s.io
    kind: str  # WorkloadPriorityClass | PriorityClass
    name: str


def toleration_object(t: Toleration) -> Obj:
    """A toleration as the Kubernetes API writes it (empty fields left out)."""
    out: Obj = {"operator": t.operator}
    if t.key:
        out["key"] = t.key
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


def _quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: format_quantity(amounts[r], r) for r in sorted(amounts)}


def workload_object(wl: Workload, priority: int, priority_ref: PriorityRef | None, *, active: bool = True) -> Obj:
    """The Workload Kueue would create for `wl`: owned by the Job (controller, so the garbage collector deletes
    it with the Job), with a minimal pod template per pod set (requests, nodeSelector, tolerations)."""
    api_version, _ = _OWNERS.get(wl.kind, ("batch/v1", "batch"))
    pod_sets = []
    for ps in wl.pod_sets:
        pod_spec: Obj = {"containers": [{"name": ps.name, "resources": {"requests": _quantities(ps.requests)}}]}
        if ps.node_selector:
            pod_spec["nodeSelector"] = dict(sorted(ps.node_selector.items()))
        if ps.tolerations:
            pod_spec["tolerations"] = [toleration_object(t) for t in ps.tolerations]
        pod_set: Obj = {"name": ps.name, "count": ps.count, "template": {"spec": pod_spec}}
        if ps.min_count is not None:
            pod_set["minCount"] = ps.min_count  # partial admission
        pod_sets.append(pod_set)
    spec: Obj = {"active": active, "podSets": pod_sets, "priority": priority}  # the user's, once set (the fold's)
    if wl.queue_name:
        spec["queueName"] = wl.queue_name
    if priority_ref is not None:
        spec["priorityClassRef"] = {"group": priority_ref.group, "kind": priority_ref.kind, "name": priority_ref.name}
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(wl.name, wl.uid, wl.kind, _OWNERS.get(wl.kind, ("", "batch"))[1]),
            "namespace": wl.namespace,
            "labels": {MANAGED_BY[0]: MANAGED_BY[1], JOB_UID_LABEL: wl.uid},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": wl.kind,
                    "name": wl.name,
                    "uid": wl.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def admission_status(admission: Admission) -> Obj:
    return {
        "clusterQueue": admission.cluster_queue,
        "podSetAssignments": [
            {
                "name": ps.name,
                "count": ps.count,
                "flavors": dict(sorted(ps.flavors.items())),
                "resourceUsage": _quantities(ps.usage),
            }
            for ps in admission.pod_sets
        ],
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    """What the log said when the workload was told to stop (`workload.preempted`)."""

    preemptor: str | None  # namespace/name; None when its queue drains it
    preemptor_uid: str | None
    preemptor_cluster_queue: str | None
    reason: str  # InClusterQueue | InCohortReclamation | ... | ClusterQueueStopped | LocalQueueStopped
    policy: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadFacts:
    """Everything the Workload's status is built from: the fold's record, plus what the status writer kept of
    the events the fold does not keep (the preemptor, how the Job finished)."""

    admission: Admission | None = None  # set while it holds quota
    pending: PendingReason | None = None
    evicting: bool = False
    preemption: Preemption | None = None  # since the last preemption, until readmitted
    finished: bool | None = None  # None: running or waiting; True: succeeded; False: failed


_PREEMPTION_CAUSE = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}


def eviction_reason(p: Preemption) -> str:
    """The Evicted condition's reason: Preempted, or the stopped queue that drains it."""
    return "Preempted" if p.preemptor else p.reason


def eviction_message(p: Preemption) -> str:
    if p.reason == "ClusterQueueStopped":
        return "The ClusterQueue is stopped"
    if p.reason == "LocalQueueStopped":
        return "The LocalQueue is stopped"
    if p.reason == "PodsReadyTimeout":
        return "Exceeded the PodsReady timeout (waitForPodsReady)"
    if p.reason == "Deactivated":
        return reasons.DEACTIVATED_MESSAGE
    if p.reason == "InactiveWorkload":
        return "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    cause = _PREEMPTION_CAUSE.get(p.reason, p.reason)
    uid = f" (JobUID: {p.preemptor_uid})" if p.preemptor_uid else ""
    where = f" in ClusterQueue {p.preemptor_cluster_queue}" if p.preemptor_cluster_queue else ""
    return f"Preempted to accommodate {p.preemptor}{uid}{where} due to {cause} ({p.policy})"


def workload_status(facts: WorkloadFacts, previous: Mapping[str, Any] | None, now: str) -> Obj:
    """The Workload's status as Kueue would write it, over the `previous` one: conditions are set, never dropped,
    and keep their lastTransitionTime unless their status flips (Kueue: pkg/workload SetQuotaReservation,
    UnsetQuotaReservationWithCondition, SetEvictedCondition, SetPreemptedCondition, SetFinishedCondition)."""
    prev = previous or {}
    conds: list[Obj] = [dict(c) for c in prev.get("conditions") or ()]
    out: Obj = {}
    if facts.finished is not None:
        reason, message = ("Succeeded", "Job finished successfully") if facts.finished else ("Failed", "Job failed")
        conds = set_condition(conds, "Finished", True, reason, message, now)
        if prev.get("admission") is not None:
            out["admission"] = prev["admission"]
        out["conditions"] = conds
        return out
    p = facts.preemption
    if facts.admission is not None:
        cq = facts.admission.cluster_queue
        conds = set_condition(
            conds, "QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", now
        )
        conds = set_condition(conds, "Admitted", True, "Admitted", "The workload is admitted", now)
        if facts.evicting and p is not None:
            conds = set_condition(conds, "Evicted", True, eviction_reason(p), eviction_message(p), now)
            if p.preemptor:
                conds = set_condition(conds, "Preempted", True, p.reason, eviction_message(p), now)
        else:
            for type_ in ("Evicted", "Preempted"):
                old = condition(conds, type_)
                if old is not None and old.get("status") == "True":
                    conds = set_condition(conds, type_, False, "QuotaReserved", f"Previously: {old['message']}", now)
        out["admission"] = admission_status(facts.admission)
    else:
        if p is not None:  # evicted (perhaps before the writer saw it evicting): say so, as Kueue keeps saying
            conds = set_condition(conds, "Evicted", True, eviction_reason(p), eviction_message(p), now)
            if p.preemptor:
                conds = set_condition(conds, "Preempted", True, p.reason, eviction_message(p), now)
        # Kueue v0.19's granular reasons (daemon.domain.reasons), not v0.17's one `Pending`.
        if facts.pending is not None:
            conds = set_condition(conds, "QuotaReserved", False, *reasons.quota_reserved(facts.pending), now)
        elif p is not None:
            conds = set_condition(conds, "QuotaReserved", False, reasons.PENDING_EVALUATION, eviction_message(p), now)
        elif is_true(conds, "QuotaReserved"):
            conds = set_condition(conds, "QuotaReserved", False, *reasons.quota_reserved(None), now)
        if condition(conds, "Admitted") is not None:
            conds = set_condition(
                conds, "Admitted", False, reasons.NO_RESERVATION, "The workload has no reservation", now
            )
    if conds:
        out["conditions"] = conds
    return out


def status_patch(
    desired: Mapping[str, Any], previous: Mapping[str, Any] | None, *, unknown_clears: tuple[str, ...] = ()
) -> Obj:
    """A merge patch taking the status from `previous` to `desired`: lists are replaced whole (ours), a field
    we no longer set (the admission after an eviction) is removed with null."""
    body: Obj = dict(desired)
    # Without a previous status (an object found already there), clear `unknown_clears` unless we set them.
    written = set(previous.keys()) if previous is not None else set(unknown_clears)
    for key in written - desired.keys():
        body[key] = None
    return {"status": body}


# --- ClusterQueue and LocalQueue ----------------------------------------------------------------------------------


def _flavor_list(cq: ClusterQueue | None, usage: Mapping[tuple[str, str], int], *, borrowed: bool) -> list[Obj]:
    """Kueue's flavorsReservation/flavorsUsage: every flavor and resource of the ClusterQueue's resource groups,
    in spec order (zero when unused), then anything in use that the spec no longer lists."""
    nominal: dict[tuple[str, str], int] = {}
    order: list[str] = []
    resources_of: dict[str, list[str]] = {}
    if cq is not None:
        for group in cq.resource_groups:
            for fq in group.flavors:
                if fq.name not in resources_of:
                    order.append(fq.name)
                    resources_of[fq.name] = []
                for rq in fq.resources:
                    if rq.name not in resources_of[fq.name]:
                        resources_of[fq.name].append(rq.name)
                    nominal[(fq.name, rq.name)] = rq.nominal
    for flavor, resource in sorted(usage):
        if flavor not in resources_of:
            order.append(flavor)
            resources_of[flavor] = []
        if resource not in resources_of[flavor]:
            resources_of[flavor].append(resource)
    out: list[Obj] = []
    for flavor in order:
        rows = []
        for resource in resources_of[flavor]:
            total = usage.get((flavor, resource), 0)
            row: Obj = {"name": resource, "total": format_quantity(total, resource)}
            if borrowed:
                row["borrowed"] = format_quantity(max(0, total - nominal.get((flavor, resource), 0)), resource)
            rows.append(row)
        out.append({"name": flavor, "resources": rows})
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueCounts:
    pending: int
    reserving: int  # admitted, including those still being evicted (they hold quota)
    usage: Mapping[tuple[str, str], int]  # (flavor, resource) -> milli


def cluster_queue_status(
    cq: ClusterQueue,
    counts: QueueCounts,
    active: tuple[bool, str, str],
    previous: Mapping[str, Any] | None,
    now: str,
    warnings: Sequence[str] = (),
) -> Obj:
    """A ClusterQueue's status as Kueue writes it; no admission checks here, so admitted == reserving.
    `active`: the Active condition (status, reason, message) of its activity (`views.queues.Queues.activity`: a
    missing flavor, a cohort cycle, a latest version admitd rejected, a stopPolicy, or Ready); `warnings`: the
    fields admitd ignores (`object.warned`), as the condition admitd.io/IgnoredSpec."""
    conds = [dict(c) for c in (previous or {}).get("conditions") or ()]
    conds = _ignored_spec(set_condition(conds, "Active", *active, now), "ClusterQueue", warnings, now)
    flavors = _flavor_list(cq, counts.usage, borrowed=True)
    return {
        "pendingWorkloads": counts.pending,
        "reservingWorkloads": counts.reserving,
        "admittedWorkloads": counts.reserving,
        "flavorsReservation": flavors,
        "flavorsUsage": flavors,
        "conditions": conds,
    }


ESTIMATE_ANNOTATION = "admitd.io/estimated-start"
"""On a Workload: the last start-time estimate recorded while it waited (`workload.estimated`), as compact JSON:
p10, p50, p90 (RFC 3339 UTC, null where unknown), when it was made, and the log seq it was computed from. Left as it
is once the workload is admitted (its status says that; clearing it would cost every estimated Job one write)."""


def estimate_annotation(e: ev.WorkloadEstimated) -> str:
    def t(ms: int | None) -> str | None:
        return None if ms is None else rfc3339(ms)

    return json.dumps(
        {"p10": t(e.p10), "p50": t(e.p50), "p90": t(e.p90), "madeAt": t(e.at), "inputsSeq": e.inputs},
        separators=(",", ":"),
    )


IGNORED_SPEC_CONDITION = "admitd.io/IgnoredSpec"
IGNORED_SPEC_REASON = "IgnoredSpec"


def ignored_spec_message(kind: str, warnings: Sequence[str]) -> str:
    return f"admitd accepts this {kind} but ignores part of it: {'; '.join(warnings)}"


def _ignored_spec(conds: list[Obj], kind: str, warnings: Sequence[str], now: str) -> list[Obj]:
    """The `admitd.io/IgnoredSpec` condition: True naming each field admitd accepts and ignores (`object.warned`);
    False once a version without them is applied; absent on an object that never had any."""
    if warnings:
        return set_condition(
            conds, IGNORED_SPEC_CONDITION, True, IGNORED_SPEC_REASON, ignored_spec_message(kind, warnings), now
        )
    if condition(conds, IGNORED_SPEC_CONDITION) is not None:
        return set_condition(
            conds, IGNORED_SPEC_CONDITION, False, "Enforced", f"admitd enforces every field of this {kind}", now
        )
    return conds


def ignored_spec_event(
    kind: str, namespace: str | None, name: str, warnings: Sequence[str], at: Millis, seq: int
) -> JobEvent:
    """A Warning Event on a queue object admitd accepted but ignores part of, naming each field."""
    return JobEvent(
        namespace=namespace or EVENTS_OF_CLUSTER_OBJECTS,
        name=name,
        uid="",
        kind=kind,
        reason=IGNORED_SPEC_REASON,
        message=ignored_spec_message(kind, warnings),
        type="Warning",
        at=at,
        seq=seq,
    )


def rejected_status(kind: str, errors: Sequence[str], previous: Mapping[str, Any] | None, now: str) -> Obj:
    """The status of a queue object admitd rejected and holds no earlier version of: inactive, saying why."""
    conds = [dict(c) for c in (previous or {}).get("conditions") or ()]
    message = f"admitd rejected this {kind}: {'; '.join(errors)}"
    return {"conditions": set_condition(conds, "Active", False, "InvalidSpec", message, now)}


def rejection_event(
    kind: str, namespace: str | None, name: str, errors: Sequence[str], kept: bool, at: Millis, seq: int
) -> JobEvent:
    """A Warning Event on a queue object admitd rejected (`kubectl get events --field-selector
    involvedObject.name=NAME`); `kept`: an earlier version is held (its quota no longer admits anything)."""
    consequence = (
        "the version before is kept, and admits nothing new until a valid one is applied"
        if kept
        else "it is not used until a valid version is applied"
    )
    return JobEvent(
        namespace=namespace or EVENTS_OF_CLUSTER_OBJECTS,
        name=name,
        uid="",
        kind=kind,
        reason="InvalidSpec",
        message=f"admitd rejected this {kind}: {'; '.join(errors)}; {consequence}",
        type="Warning",
        at=at,
        seq=seq,
    )


def local_queue_status(
    lq: LocalQueue,
    cq: ClusterQueue | None,
    cq_active: bool,
    counts: QueueCounts,
    previous: Mapping[str, Any] | None,
    now: str,
    warnings: Sequence[str] = (),
) -> Obj:
    conds = [dict(c) for c in (previous or {}).get("conditions") or ()]
    if cq is None:
        active = (False, "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
    elif lq.stop_policy.value != "None":
        active = (False, "Stopped", f"LocalQueue is stopped ({lq.stop_policy.value})")
    elif not cq_active:
        active = (False, "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue")
    else:
        active = (True, "Ready", "Can submit new workloads to localQueue")
    conds = _ignored_spec(set_condition(conds, "Active", *active, now), "LocalQueue", warnings, now)
    flavors = _flavor_list(cq, counts.usage, borrowed=False)
    return {
        "pendingWorkloads": counts.pending,
        "reservingWorkloads": counts.reserving,
        "admittedWorkloads": counts.reserving,
        "flavorsReservation": flavors,
        "flavorsUsage": flavors,
        "conditions": conds,
    }


def queue_status_view(status: Mapping[str, Any] | None) -> Obj:
    """The part of a queue's status admitd writes, as read back from the API server (for the diff)."""
    keys = ("pendingWorkloads", "reservingWorkloads", "admittedWorkloads", "flavorsReservation", "flavorsUsage")
    out: Obj = {k: status[k] for k in keys if status is not None and k in status}
    conds = [_cond_view(c) for c in (status or {}).get("conditions") or ()]
    if conds:
        out["conditions"] = conds
    return out


def workload_status_view(status: Mapping[str, Any] | None) -> Obj:
    out: Obj = {}
    if status is not None and status.get("admission") is not None:
        out["admission"] = status["admission"]
    conds = [_cond_view(c) for c in (status or {}).get("conditions") or ()]
    if conds:
        out["conditions"] = conds
    return out


def _cond_view(c: Mapping[str, Any]) -> Obj:
    return {k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in c}


# --- Events -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvent:
    """A Kubernetes Event about a Job (reason Admitted, Pending or Preempted), or about a queue object admitd
    rejected (InvalidSpec; `uid` empty: the rejection records none)."""

    namespace: str
    name: str
    uid: str
    kind: str
    reason: str
    message: str
    type: str  # Normal | Warning
    at: Millis
    seq: int


def event_object(e: JobEvent, *, instance: str) -> Obj:
    """A core/v1 Event, which `kubectl describe job` lists. Its name is the Job's and the log seq, so a retried
    POST finds its own Event (409) instead of writing a second one."""
    api_version = (
        API_VERSION if e.kind == "Workload" else _QUEUE_KINDS.get(e.kind) or _OWNERS.get(e.kind, ("batch/v1", ""))[0]
    )
    when = rfc3339(e.at)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{e.name}.{e.at:x}{e.seq:x}", "namespace": e.namespace},
        "involvedObject": {
            "apiVersion": api_version,
            "kind": e.kind,
            "name": e.name,
            **({} if e.kind in _CLUSTER_SCOPED else {"namespace": e.namespace}),
            **({"uid": e.uid} if e.uid else {}),
        },
        "reason": e.reason,
        "message": _cut(e.message, EVENT_MESSAGE_MAX),
        "type": e.type,
        "count": 1,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "source": {"component": "admitd"},
        "reportingComponent": "admitd",
        "reportingInstance": instance,
    }


def workload_pending_event(key: str, uid: str, kind: str, reason: PendingReason, at: Millis, seq: int) -> JobEvent:
    """The Warning Event Kueue's scheduler records on a Workload it could not admit (pkg/scheduler
    `requeueAndUpdate`): with v0.19's granular reasons, the Event's reason is the `QuotaReserved` condition's
    (`WaitingForQuota`, `Misconfigured`, ...; v0.17 said `Pending`) and its message the condition's."""
    namespace, _, name = key.partition("/")
    why, message = reasons.quota_reserved(reason)
    return JobEvent(
        namespace=namespace,
        name=workload_name(name, uid, kind, _OWNERS.get(kind, ("", "batch"))[1]),
        uid="",  # the Workload's own uid is not kept; its name is unique to the Job's uid
        kind="Workload",
        reason=why,
        message=message,
        type="Warning",
        at=at,
        seq=seq,
    )


def flavors_text(admission: Admission) -> str:
    """`main: nvidia.com/gpu=h100` per pod set, for messages."""
    parts = []
    for ps in admission.pod_sets:
        pairs = ", ".join(f"{r}={f}" for r, f in sorted(ps.flavors.items()))
        parts.append(f"{ps.name}: {pairs}")
    return "; ".join(parts)


def admitted_message(admission: Admission, waited_ms: Millis | None) -> str:
    waited = "" if waited_ms is None else f", wait time since queued was {max(0, waited_ms) // 1000}s"
    return f"Admitted by ClusterQueue {admission.cluster_queue} (flavors {flavors_text(admission)}){waited}"


def pending_message(reason: PendingReason) -> str:
    return f"{reason.kind.value}: {reason.message}"


# --- rate limiting ----------------------------------------------------------------------------------------------


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up. `reserve(now)` takes one token and says how long to wait
    for it (0 when one is there), as golang.org/x/time/rate's Reserve: waiters queue up behind each other."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.last = now

    def reserve(self, now: float) -> float:
        if now > self.last:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.rate)
            self.last = now
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate
