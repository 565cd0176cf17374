"""The pure half of what users see in the cluster (daemon/kube/status_objects.py) and the status writer's marking.

Real: the builders of Workload objects, Workload/ClusterQueue/LocalQueue status and Job Events, the Workload name
hash, the token bucket, and the StatusWriter's Recorder listener over a real fold (daemon.domain.state). Faked:
nothing is sent anywhere; the writer gets no client (its listener never uses one), and times are fixed values.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from daemon.domain import events as ev
from daemon.domain import reasons
from daemon.domain.model import (
    Admission,
    ClusterQueue,
    FlavorQuotas,
    LocalQueue,
    PendingReason,
    PendingReasonKind,
    PodSet,
    PodSetAssignment,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    Toleration,
    Workload,
)
from daemon.domain.state import State
from daemon.kube import status
from daemon.kube import status_objects as so
from daemon.kube.client import KubeClient
from daemon.kube.errors import Temporary
from daemon.kube.status import StatusWriter
from daemon.views.queues import Queues

GPU = "nvidia.com/gpu"
T0, T1, T2 = "2026-12-01T03:00:00Z", "2026-12-01T03:01:00Z", "2026-12-01T03:02:00Z"
UID = "6f1c2a7e-3b1d-4c55-9a3e-2d5f0b8e1c44"


def wl(name: str = "train-a", *, queue: str | None = "q", gpus: int = 4, uid: str = UID) -> Workload:
    return Workload(
        namespace="research",
        name=name,
        uid=uid,
        created_at=1_000,
        queue_name=queue,
        pod_sets=(
            PodSet(
                name="main",
                count=2,
                requests={GPU: gpus * 1000, "memory": 64 * 2**30 * 1000},
                node_selector={"disk": "ssd"},
                tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
            ),
        ),
    )


def admission(cq: str = "team-research", flavor: str = "h100", gpus: int = 8) -> Admission:
    return Admission(
        cluster_queue=cq,
        pod_sets=(PodSetAssignment(name="main", count=2, flavors={GPU: flavor}, usage={GPU: gpus * 1000}),),
    )


WAITING = PendingReason(kind=PendingReasonKind.WAITING_FOR_QUOTA, message="insufficient unused quota for gpu")
PREEMPTION = so.Preemption(
    preemptor="research/vip",
    preemptor_uid="u-vip",
    preemptor_cluster_queue="team-research",
    reason="InClusterQueue",
    policy="withinClusterQueue=LowerPriority",
)


def conds(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["lastTransitionTime"]) for c in status.get("conditions", ())}


# --- names ----------------------------------------------------------------------------------------------------


def test_the_workload_name_is_kueues_kind_name_and_five_hex_of_the_sha1_over_kind_group_name_uid() -> None:
    assert so.workload_name("train-a", UID) == "job-train-a-5f1c5"  # sha1("Job\nbatch\ntrain-a\n" + UID)


def test_a_job_recreated_under_the_same_name_gets_another_workload_name() -> None:
    assert so.workload_name("train-a", UID) != so.workload_name("train-a", UID.replace("6", "7"))


def test_a_long_owner_name_is_cut_so_the_workload_name_fits_253_characters() -> None:
    name = so.workload_name("a" * 300, UID)
    assert len(name) == 253
    assert name.startswith("job-aaaa") and name[-6] == "-"


# --- the Workload object --------------------------------------------------------------------------------------


def test_the_workload_is_owned_by_its_job_and_carries_queue_priority_and_a_minimal_pod_template() -> None:
    ref = so.PriorityRef(group="kueue.x-k8s.io", kind="WorkloadPriorityClass", name="high")
    obj = so.workload_object(wl(), 1000, ref)
    assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert obj["metadata"]["name"] == "job-train-a-5f1c5"
    assert obj["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train-a",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == UID
    assert obj["spec"]["queueName"] == "q"
    assert obj["spec"]["priority"] == 1000
    assert obj["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "high",
    }
    (pod_set,) = obj["spec"]["podSets"]
    assert pod_set["name"] == "main" and pod_set["count"] == 2
    spec = pod_set["template"]["spec"]
    assert spec["containers"][0]["resources"]["requests"] == {"memory": "64Gi", GPU: "4"}
    assert spec["nodeSelector"] == {"disk": "ssd"}
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_a_workload_without_a_priority_class_has_no_reference() -> None:
    obj = so.workload_object(wl(queue=None), 0, None)
    assert "priorityClassRef" not in obj["spec"] and "queueName" not in obj["spec"]
    assert obj["spec"]["priority"] == 0


# --- the Workload's status through a life: pending, admitted, preempted, evicted, readmitted, finished --------


def test_a_pending_workload_says_kueues_granular_reason_with_the_engines_message() -> None:
    status = so.workload_status(so.WorkloadFacts(pending=WAITING), None, T0)
    assert status == {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "WaitingForQuota",
                "message": "insufficient unused quota for gpu",
                "lastTransitionTime": T0,
            }
        ]
    }


def test_a_workload_not_yet_evaluated_has_no_conditions() -> None:
    assert so.workload_status(so.WorkloadFacts(), None, T0) == {}


def test_an_admitted_workload_has_quota_reserved_admitted_and_the_admission() -> None:
    pending = so.workload_status(so.WorkloadFacts(pending=WAITING), None, T0)
    status = so.workload_status(so.WorkloadFacts(admission=admission()), pending, T1)
    assert conds(status) == {
        "QuotaReserved": ("True", "QuotaReserved", T1),
        "Admitted": ("True", "Admitted", T1),
    }
    assert status["admission"] == {
        "clusterQueue": "team-research",
        "podSetAssignments": [{"name": "main", "count": 2, "flavors": {GPU: "h100"}, "resourceUsage": {GPU: "8"}}],
    }


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    first = so.workload_status(so.WorkloadFacts(pending=WAITING), None, T0)
    other = PendingReason(kind=PendingReasonKind.BLOCKED_BY_HEAD, message="StrictFIFO: blocked by research/x")
    second = so.workload_status(so.WorkloadFacts(pending=other), first, T1)
    assert conds(second)["QuotaReserved"] == ("False", "PendingEvaluation", T0)
    assert second["conditions"][0]["message"] == "StrictFIFO: blocked by research/x"


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        (PendingReasonKind.LOCAL_QUEUE_NOT_FOUND, "Misconfigured"),
        (PendingReasonKind.CLUSTER_QUEUE_NOT_FOUND, "Misconfigured"),
        (PendingReasonKind.NAMESPACE_NOT_SELECTED, "Misconfigured"),
        (PendingReasonKind.QUEUE_STOPPED, "Suspended"),
        (PendingReasonKind.CLUSTER_QUEUE_INACTIVE, "Suspended"),
        (PendingReasonKind.NO_MATCHING_FLAVOR, "NoMatchingFlavor"),
        (PendingReasonKind.EXCEEDS_MAX_QUOTA, "ExceedsMaxQuota"),
        (PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS, "WaitingForPreemptedWorkloads"),
        (PendingReasonKind.WAITING_FOR_PODS_READY, "WaitingForPodsReady"),
        (PendingReasonKind.DEACTIVATED, "Deactivated"),
    ],
)
def test_each_pending_reason_is_written_as_kueues(kind: PendingReasonKind, reason: str) -> None:
    status = so.workload_status(so.WorkloadFacts(pending=PendingReason(kind=kind, message="why")), None, T0)
    assert (status["conditions"][0]["reason"], status["conditions"][0]["message"]) == (reason, "why")


def test_every_pending_reason_has_a_kueue_reason_and_every_kueue_reason_is_exported() -> None:
    for kind in PendingReasonKind:
        assert reasons.quota_reserved_reason(kind) in reasons.QUOTA_RESERVED_REASONS
    assert reasons.quota_reserved_reason(None) == "PendingEvaluation"
    assert reasons.quota_reserved(None) == (
        "PendingEvaluation",
        "Workload is pending evaluation in the scheduling queue",
    )


def test_preemption_evicts_then_releases_and_readmission_clears_it() -> None:
    admitted = so.workload_status(so.WorkloadFacts(admission=admission()), None, T0)
    evicting = so.workload_status(
        so.WorkloadFacts(admission=admission(), evicting=True, preemption=PREEMPTION), admitted, T1
    )
    assert conds(evicting) == {
        "QuotaReserved": ("True", "QuotaReserved", T0),
        "Admitted": ("True", "Admitted", T0),
        "Evicted": ("True", "Preempted", T1),
        "Preempted": ("True", "InClusterQueue", T1),
    }
    message = next(c["message"] for c in evicting["conditions"] if c["type"] == "Preempted")
    assert "research/vip" in message and "prioritization in the ClusterQueue" in message
    evicted = so.workload_status(so.WorkloadFacts(preemption=PREEMPTION), evicting, T2)
    assert conds(evicted) == {
        "QuotaReserved": ("False", "PendingEvaluation", T2),
        "Admitted": ("False", "NoReservation", T2),
        "Evicted": ("True", "Preempted", T1),
        "Preempted": ("True", "InClusterQueue", T1),
    }
    assert "admission" not in evicted
    assert so.status_patch(evicted, evicting)["status"]["admission"] is None, "the merge patch removes it"
    readmitted = so.workload_status(so.WorkloadFacts(admission=admission()), evicted, T2)
    assert conds(readmitted)["Evicted"] == ("False", "QuotaReserved", T2)
    assert conds(readmitted)["Preempted"] == ("False", "QuotaReserved", T2)


def test_a_preemption_the_writer_only_saw_after_the_eviction_still_shows() -> None:
    admitted = so.workload_status(so.WorkloadFacts(admission=admission()), None, T0)
    evicted = so.workload_status(so.WorkloadFacts(preemption=PREEMPTION), admitted, T1)
    assert conds(evicted)["Evicted"] == ("True", "Preempted", T1)
    assert conds(evicted)["Preempted"] == ("True", "InClusterQueue", T1)


def test_a_queue_that_drains_its_workload_evicts_it_without_a_preempted_condition() -> None:
    drained = so.Preemption(
        preemptor=None, preemptor_uid=None, preemptor_cluster_queue=None, reason="ClusterQueueStopped", policy=""
    )
    status = so.workload_status(
        so.WorkloadFacts(admission=admission(), evicting=True, preemption=drained),
        None,
        T0,
    )
    assert conds(status)["Evicted"] == ("True", "ClusterQueueStopped", T0)
    assert "Preempted" not in conds(status)


def test_a_finished_workload_keeps_its_admission_and_says_how_it_ended() -> None:
    admitted = so.workload_status(so.WorkloadFacts(admission=admission()), None, T0)
    done = so.workload_status(so.WorkloadFacts(finished=True), admitted, T1)
    assert conds(done)["Finished"] == ("True", "Succeeded", T1)
    assert conds(done)["Admitted"] == ("True", "Admitted", T0)
    assert done["admission"] == admitted["admission"]
    failed = so.workload_status(so.WorkloadFacts(finished=False), admitted, T1)
    assert conds(failed)["Finished"] == ("True", "Failed", T1)


# --- queues ---------------------------------------------------------------------------------------------------

READY = (True, "Ready", "Can admit new workloads")


def cluster_queue(stop: StopPolicy = StopPolicy.NONE) -> ClusterQueue:
    return ClusterQueue(
        name="team-research",
        namespace_selector=None,
        resource_groups=(
            ResourceGroup(
                covered_resources=(GPU,),
                flavors=(
                    FlavorQuotas(name="h100", resources=(ResourceQuota(name=GPU, nominal=8000),)),
                    FlavorQuotas(name="a100", resources=(ResourceQuota(name=GPU, nominal=4000),)),
                ),
            ),
        ),
        stop_policy=stop,
    )


def test_cluster_queue_status_counts_and_lists_every_flavor_with_what_it_borrows() -> None:
    counts = so.QueueCounts(pending=3, reserving=2, usage={("h100", GPU): 12000})
    status = so.cluster_queue_status(cluster_queue(), counts, READY, None, T0)
    assert (status["pendingWorkloads"], status["reservingWorkloads"], status["admittedWorkloads"]) == (3, 2, 2)
    assert status["flavorsReservation"] == [
        {"name": "h100", "resources": [{"name": GPU, "total": "12", "borrowed": "4"}]},
        {"name": "a100", "resources": [{"name": GPU, "total": "0", "borrowed": "0"}]},
    ]
    assert conds(status) == {"Active": ("True", "Ready", T0)}


@pytest.mark.parametrize(
    ("stop", "missing", "reason"),
    [
        pytest.param(StopPolicy.HOLD, [], "Stopped", id="stopped"),
        pytest.param(StopPolicy.NONE, ["a100"], "FlavorNotFound", id="missing-flavor"),
    ],
)
def test_an_inactive_cluster_queue_says_why(stop: StopPolicy, missing: list[str], reason: str) -> None:
    """The Active condition renders the queue's activity (`views.queues`), as the writer does."""
    state = State()
    for name in {"h100", "a100"} - set(missing):
        state.apply(ev.ResourceFlavorObserved(flavor=ResourceFlavor(name=name)))
    state.apply(ev.ClusterQueueObserved(cluster_queue=cluster_queue(stop)))
    a = Queues.of(state).activity("team-research")
    counts = so.QueueCounts(pending=0, reserving=0, usage={})
    status = so.cluster_queue_status(cluster_queue(stop), counts, (a.active, a.reason, a.condition), None, T0)
    assert conds(status)["Active"] == ("False", reason, T0)
    if missing:
        assert status["conditions"][0]["message"] == (
            "Can't admit new workloads: references missing ResourceFlavor(s): a100"
        )


def test_local_queue_status_without_its_cluster_queue_is_inactive_and_has_no_borrowed_field() -> None:
    lq = LocalQueue(namespace="research", name="q", cluster_queue="team-research")
    counts = so.QueueCounts(pending=1, reserving=1, usage={("h100", GPU): 4000})
    assert conds(so.local_queue_status(lq, None, False, counts, None, T0))["Active"][1] == "ClusterQueueDoesNotExist"
    status = so.local_queue_status(lq, cluster_queue(), True, counts, None, T0)
    assert status["flavorsUsage"][0] == {"name": "h100", "resources": [{"name": GPU, "total": "4"}]}
    assert conds(status)["Active"] == ("True", "Ready", T0)


def test_an_unchanged_queue_builds_an_equal_status_so_nothing_is_written() -> None:
    counts = so.QueueCounts(pending=3, reserving=2, usage={("h100", GPU): 12000})
    first = so.cluster_queue_status(cluster_queue(), counts, READY, None, T0)
    read_back = so.queue_status_view({**first, "fairSharing": {"weightedShare": 0}})
    assert so.cluster_queue_status(cluster_queue(), counts, READY, read_back, T1) == read_back


# --- Events ---------------------------------------------------------------------------------------------------


def test_an_event_names_the_job_and_is_named_after_the_log_seq() -> None:
    e = so.JobEvent(
        namespace="research",
        name="train-a",
        uid=UID,
        kind="Job",
        reason="Admitted",
        message=so.admitted_message(admission(), 3_500),
        type="Normal",
        at=1_764_558_000_000,
        seq=42,
    )
    obj = so.event_object(e, instance="host")
    assert obj["involvedObject"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train-a",
        "namespace": "research",
        "uid": UID,
    }
    assert obj["message"] == (
        "Admitted by ClusterQueue team-research (flavors main: nvidia.com/gpu=h100), wait time since queued was 3s"
    )
    assert obj["metadata"]["name"] == f"train-a.{1_764_558_000_000:x}{42:x}"
    assert obj["firstTimestamp"] == "2025-12-01T03:00:00Z"
    long = so.event_object(e.__class__(**{**_fields(e), "message": "x" * 5000}), instance="host")
    assert len(long["message"]) == so.EVENT_MESSAGE_MAX


def _fields(e: so.JobEvent) -> dict[str, Any]:
    return {f: getattr(e, f) for f in e.__slots__}


# --- the token bucket -----------------------------------------------------------------------------------------


def test_the_bucket_lets_a_burst_through_then_spaces_requests_at_the_rate() -> None:
    bucket = so.TokenBucket(rate=10.0, burst=3, now=0.0)
    assert [bucket.reserve(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    waits = [bucket.reserve(0.0) for _ in range(3)]
    assert waits == pytest.approx([0.1, 0.2, 0.3]), "waiters queue behind each other"


def test_the_bucket_refills_at_the_rate_up_to_the_burst() -> None:
    bucket = so.TokenBucket(rate=10.0, burst=2, now=0.0)
    bucket.reserve(0.0)
    bucket.reserve(0.0)
    assert bucket.reserve(0.05) == pytest.approx(0.05)
    assert bucket.reserve(100.0) == 0.0 and bucket.reserve(100.0) == 0.0, "refilled to the burst, not beyond"
    assert bucket.reserve(100.0) == pytest.approx(0.1)


def test_a_bucket_without_rate_or_burst_is_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        so.TokenBucket(rate=0, burst=1, now=0.0)


# --- the writer's listener: marks, and coalesces Events --------------------------------------------------------


def writer(*, workload_objects: bool = False) -> tuple[StatusWriter, State]:
    """The Job's Events alone unless `workload_objects` (then the Workload's Warning Events too)."""
    state = State()
    client = cast(KubeClient, None)  # the listener never sends; only `run` does
    w = StatusWriter(client, state, clock=cast(Any, None), monotonic=lambda: 0.0, workload_objects=workload_objects)
    return w, state


def feed(w: StatusWriter, state: State, *events: ev.Event) -> None:
    for i, e in enumerate(events, start=state.seq + 1):
        w.queues.apply(e, i)  # the projection first, as the Recorder feeds it
        state.apply(e, i)
        w.listener(e, i)


def test_a_pending_event_not_yet_sent_is_replaced_by_what_came_after_it() -> None:
    w, state = writer()
    lq = LocalQueue(namespace="research", name="q", cluster_queue="team-research")
    feed(
        w,
        state,
        ev.ClusterQueueObserved(cluster_queue=cluster_queue()),
        ev.LocalQueueObserved(local_queue=lq),
        ev.JobObserved(workload=wl()),
        ev.WorkloadPending(workload="research/train-a", at=2_000, cluster_queue="team-research", reason=WAITING),
        ev.WorkloadPending(
            workload="research/train-a",
            at=3_000,
            cluster_queue="team-research",
            reason=PendingReason(kind=PendingReasonKind.BLOCKED_BY_HEAD, message="blocked"),
        ),
    )
    queued = [(e.reason, e.message) for e in w._events.values()]
    assert queued == [("Pending", "BlockedByHead: blocked")]
    feed(w, state, ev.WorkloadAdmitted(workload="research/train-a", at=4_000, admission=admission()))
    assert [e.reason for e in w._events.values()] == [], "the unsent Pending is dropped; Admitted waits for the Job"
    feed(w, state, ev.JobUnsuspended(job="research/train-a", at=4_100, decision=state.seq, placements=()))
    assert [(e.reason, e.at) for e in w._events.values()] == [("Admitted", 4_000)]
    marked = w.marked()
    assert {("wl", "research/train-a"), ("cq", "team-research"), ("lq", "research/q")} <= marked
    assert len([k for k in marked if k[0] == "ev"]) == 1, "one Event left to send"


def test_repeated_changes_to_one_object_mark_it_once() -> None:
    w, state = writer()
    feed(w, state, ev.JobObserved(workload=wl()))
    for i in range(5):
        reason = PendingReason(kind=PendingReasonKind.WAITING_FOR_QUOTA, message=f"short {i}")
        feed(w, state, ev.WorkloadPending(workload="research/train-a", at=i, cluster_queue=None, reason=reason))
    assert [k for k in w._urgent if k[0] == "wl"] == [("wl", "research/train-a")]
    marked = w.marked()
    assert {k for k in marked if k[0] != "ev"} == {("wl", "research/train-a"), ("lq", "research/q")}
    assert len([k for k in marked if k[0] == "ev"]) == 1, "each Pending Event replaced the unsent one before it"


def _preempted(at: int) -> ev.WorkloadPreempted:
    return ev.WorkloadPreempted(
        workload="research/train-a",
        at=at,
        cluster_queue="team-research",
        preemptor="research/urgent",
        preemptor_cluster_queue="team-research",
        reason="InClusterQueue",
        policy="withinClusterQueue=LowerPriority",
    )


def test_an_admission_undone_before_it_reached_the_job_tells_the_job_nothing() -> None:
    """Admitted then preempted before the unsuspend was carried out: no Admitted and no Preempted Event on the Job
    (nothing happened to it); the Workload status is still marked for both."""
    w, state = writer()
    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()), ev.JobObserved(workload=wl()))
    feed(w, state, ev.WorkloadAdmitted(workload="research/train-a", at=1_000, admission=admission()), _preempted(1_500))
    feed(w, state, ev.JobSuspended(job="research/train-a", at=1_600, decision=state.seq, placements=()))
    feed(w, state, ev.WorkloadEvicted(workload="research/train-a", at=1_600, reason="Preempted"))
    assert list(w._events.values()) == []
    assert ("wl", "research/train-a") in w.marked()
    # Admitted again and carried out this time: its Event is sent, and a later preemption's at once.
    feed(w, state, ev.WorkloadAdmitted(workload="research/train-a", at=2_000, admission=admission()))
    feed(w, state, ev.JobUnsuspended(job="research/train-a", at=2_100, decision=state.seq, placements=()))
    feed(w, state, _preempted(3_000))
    assert [(e.reason, e.at) for e in w._events.values()] == [("Admitted", 2_000), ("Preempted", 3_000)]


def test_a_preemption_decided_while_its_admission_was_in_flight_is_told_after_it() -> None:
    """The unsuspend patch was on its way when the preemption was decided: the Job did run, so both Events are sent,
    in the order things happened."""
    w, state = writer()
    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()), ev.JobObserved(workload=wl()))
    feed(w, state, ev.WorkloadAdmitted(workload="research/train-a", at=1_000, admission=admission()))
    admitted_at = state.seq
    feed(w, state, _preempted(1_500))
    assert list(w._events.values()) == []
    feed(w, state, ev.JobUnsuspended(job="research/train-a", at=1_600, decision=admitted_at, placements=()))
    assert [(e.reason, e.at) for e in w._events.values()] == [("Admitted", 1_000), ("Preempted", 1_500)]


class _PostedEvents:
    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        assert method == "POST" and path.endswith("/events")
        self.posted.append(body)
        return body


def _pending(at: int, kind: PendingReasonKind, message: str) -> ev.WorkloadPending:
    reason = PendingReason(kind=kind, message=message)
    return ev.WorkloadPending(workload="research/train-a", at=at, cluster_queue="team-research", reason=reason)


def _send_all(w: StatusWriter) -> None:
    for eid in list(w._events):
        asyncio.run(w._write_event(eid))


def test_a_pending_reason_that_only_changes_its_figures_is_one_event_on_the_job() -> None:
    """WaitingForQuota with new figures after its Event was sent: no second Event (the Workload's status has the
    figures); a new kind of reason is one; after an admission and an eviction, pending again is one."""
    client = _PostedEvents()
    state = State()
    w = StatusWriter(
        cast(KubeClient, client), state, clock=cast(Any, None), monotonic=lambda: 0.0, workload_objects=False
    )

    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()), ev.JobObserved(workload=wl()))
    feed(w, state, _pending(1_000, PendingReasonKind.WAITING_FOR_QUOTA, "cpu: 2 more needed"))
    _send_all(w)
    feed(w, state, _pending(2_000, PendingReasonKind.WAITING_FOR_QUOTA, "cpu: 1 more needed"))
    _send_all(w)
    feed(w, state, _pending(3_000, PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS, "waiting for 2"))
    _send_all(w)
    feed(w, state, ev.WorkloadAdmitted(workload="research/train-a", at=4_000, admission=admission()))
    feed(w, state, ev.JobUnsuspended(job="research/train-a", at=4_100, decision=state.seq, placements=()))
    feed(w, state, _preempted(5_000), ev.WorkloadEvicted(workload="research/train-a", at=5_100, reason="Preempted"))
    feed(w, state, _pending(6_000, PendingReasonKind.WAITING_FOR_QUOTA, "cpu: 2 more needed"))
    _send_all(w)
    assert [(e["reason"], e["message"]) for e in client.posted] == [
        ("Pending", "WaitingForQuota: cpu: 2 more needed"),
        ("Pending", "WaitingForPreemptedWorkloads: waiting for 2"),
        ("Admitted", client.posted[2]["message"]),
        ("Preempted", client.posted[3]["message"]),
        ("Pending", "WaitingForQuota: cpu: 2 more needed"),
    ]


def test_an_admission_undone_before_it_reached_the_job_does_not_repeat_its_pending_event() -> None:
    """Pending (told), admitted, preempted before the unsuspend, pending again for the same kind of reason: from the
    Job's side nothing happened, so no second Pending Event. Had the Pending not been sent yet when the admission
    came, it was dropped unsent, and the same reason afterwards is told."""
    client = _PostedEvents()
    state = State()
    w = StatusWriter(
        cast(KubeClient, client), state, clock=cast(Any, None), monotonic=lambda: 0.0, workload_objects=False
    )

    def undone_admission(at: int) -> None:
        feed(w, state, ev.WorkloadAdmitted(workload="research/train-a", at=at, admission=admission()))
        evicted = ev.WorkloadEvicted(workload="research/train-a", at=at + 200, reason="Preempted")
        feed(w, state, _preempted(at + 100), evicted)

    waiting, blocked = PendingReasonKind.WAITING_FOR_QUOTA, PendingReasonKind.BLOCKED_BY_HEAD
    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()), ev.JobObserved(workload=wl()))
    feed(w, state, _pending(1_000, waiting, "cpu: 2 more needed"))
    _send_all(w)
    undone_admission(2_000)
    feed(w, state, _pending(3_000, waiting, "cpu: 1 more needed"))
    _send_all(w)
    assert [e["message"] for e in client.posted] == ["WaitingForQuota: cpu: 2 more needed"]
    feed(w, state, _pending(4_000, blocked, "blocked by research/x"))  # queued, not sent yet
    undone_admission(5_000)  # drops it unsent: the Job was never told
    feed(w, state, _pending(6_000, blocked, "blocked by research/y"))
    _send_all(w)
    assert [e["message"] for e in client.posted] == [
        "WaitingForQuota: cpu: 2 more needed",
        "BlockedByHead: blocked by research/y",
    ]


def test_a_full_event_queue_drops_pending_events_before_those_users_act_on_and_counts_each_drop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With MAX_QUEUED_EVENTS unsent (here 3): the oldest unsent Pending goes first, a new Pending is not queued
    when only Admitted and Preempted wait, and only then does the oldest of those go. Each drop is counted by the
    Event's reason and logged."""
    monkeypatch.setattr(status, "MAX_QUEUED_EVENTS", 3)
    dropped: list[str] = []
    state = State()
    w = StatusWriter(
        cast(KubeClient, None),
        state,
        clock=cast(Any, None),
        monotonic=lambda: 0.0,
        workload_objects=False,
        dropped=dropped.append,
    )

    def job(name: str) -> str:
        feed(w, state, ev.JobObserved(workload=wl(name, uid=f"u-{name}")))
        return f"research/{name}"

    def pending(key: str, at: int) -> ev.WorkloadPending:
        return ev.WorkloadPending(workload=key, at=at, cluster_queue="team-research", reason=WAITING)

    def admitted(key: str, at: int) -> None:
        feed(w, state, ev.WorkloadAdmitted(workload=key, at=at, admission=admission()))
        feed(w, state, ev.JobUnsuspended(job=key, at=at + 50, decision=state.seq, placements=()))

    def queued() -> list[tuple[str, str]]:
        return [(e.reason, e.name) for e in w._events.values()]

    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()))
    a, b, c, d, e = (job(n) for n in ("a", "b", "c", "d", "e"))
    admitted(a, 1_000)
    feed(w, state, pending(b, 1_100), pending(c, 1_200))
    assert queued() == [("Admitted", "a"), ("Pending", "b"), ("Pending", "c")]
    with capture_logs() as logs:
        preempted = ev.WorkloadPreempted(
            workload=a,
            at=1_300,
            cluster_queue="team-research",
            preemptor=e,
            preemptor_cluster_queue="team-research",
            reason="InClusterQueue",
            policy="withinClusterQueue=LowerPriority",
        )
        feed(w, state, preempted)
    assert queued() == [("Admitted", "a"), ("Pending", "c"), ("Preempted", "a")], "the oldest Pending went"
    assert dropped == ["Pending"]
    assert [(line["log_level"], line["dropped"], line["queued"], line["limit"]) for line in logs] == [
        ("warning", {"Pending": 1}, 2, 3)
    ]
    feed(w, state, pending(d, 1_400))
    assert queued() == [("Admitted", "a"), ("Preempted", "a"), ("Pending", "d")], "a newer reason for an older one"
    admitted(b, 1_500)
    assert queued() == [("Admitted", "a"), ("Preempted", "a"), ("Admitted", "b")]
    feed(w, state, pending(e, 1_600))
    assert queued() == [("Admitted", "a"), ("Preempted", "a"), ("Admitted", "b")], "no room for a Pending"
    admitted(c, 1_700)
    assert queued() == [("Preempted", "a"), ("Admitted", "b"), ("Admitted", "c")], "none left: the oldest went"
    assert dropped == ["Pending", "Pending", "Pending", "Pending", "Admitted"]
    assert w._droppable == {} and w._pending_event == {}


# --- the writer's own figures: how long the cluster lags the log, and how much is waiting -----------------------


class _FlakyEvents(_PostedEvents):
    """Refuses the first POST as the API server does when it is overloaded (a temporary failure)."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    async def request(self, method: str, path: str, *, body: Any = None, **kw: Any) -> Any:
        if not self.refused:
            self.refused += 1
            raise Temporary(method, path, 429, "Too Many Requests")
        return await super().request(method, path, body=body, **kw)


def test_the_writer_reports_each_sync_delay_from_the_first_mark_and_its_backlog() -> None:
    """Two Events, the first refused once: each is reported as an `event` sync with its delay counted from when it
    was first marked (the linger, and for the refused one the retry's wait too); the backlog counts what is marked
    and not yet written, and is empty at the end."""
    client = _FlakyEvents()
    state = State()
    synced: list[tuple[str, float]] = []
    w = StatusWriter(
        cast(KubeClient, client),
        state,
        clock=cast(Any, None),
        linger_s=0.05,
        parallelism=1,
    )
    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()), ev.JobObserved(workload=wl()))
    feed(w, state, ev.WorkloadAdmitted(workload="research/train-a", at=1_000, admission=admission()))
    feed(w, state, ev.JobUnsuspended(job="research/train-a", at=1_100, decision=state.seq, placements=()))
    feed(w, state, _preempted(1_500))
    assert w.backlog() == 5, "the Workload, its two queues and two Events"
    w._urgent = {k: v for k, v in w._urgent.items() if k[0] == "ev"}  # only the Events are this test's business
    w._routine.clear()
    w._queues.clear()
    assert w.backlog() == 2

    async def drain() -> None:
        both = asyncio.Event()

        def synced_(kind: str, lane: str, seconds: float) -> None:
            synced.append((f"{kind}/{lane}", seconds))
            if len(synced) == 2:
                both.set()

        w.synced = synced_
        task = asyncio.create_task(w._worker())
        await both.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(drain(), 10))
    assert [e["reason"] for e in client.posted] == ["Preempted", "Admitted"], "the refused one was retried after"
    assert [kind for kind, _ in synced] == ["event/urgent", "event/urgent"]
    preempted_delay, admitted_delay = (seconds for _, seconds in synced)
    assert 0.05 <= preempted_delay < 0.5
    assert admitted_delay >= 0.5, "the first retry waits 0.5 s; the delay counts from the first mark"
    assert w.backlog() == 0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_what_users_act_on_goes_ahead_of_pending_reasons_but_nothing_waits_forever() -> None:
    """Marked: a new Job's Workload (urgent), a Pending Event and a pending-reason change (routine), queue status.
    When several are due at once, the earliest deadline goes first: due time plus 0 s for urgent, 10 s for routine,
    5 s for queues; a routine key marked urgent later moves ahead and keeps its first mark."""
    clock = _Clock()
    state = State()
    w = StatusWriter(cast(KubeClient, None), state, clock=cast(Any, None), monotonic=clock, workload_objects=False)
    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()))
    w._queues.clear()
    feed(w, state, ev.JobObserved(workload=wl()))  # at 0: a Workload to create (urgent), its LocalQueue's count
    assert list(w._urgent) == [("wl", "research/train-a")] and list(w._queues) == [("lq", "research/q")]
    assert w._take(0.5) == pytest.approx(0.5), "nothing is due before its linger"
    assert w._take(1.0) == (("wl", "research/train-a"), 0.0, "urgent")
    w._jobs["research/train-a"].name = "job-train-a-12345"  # as if written
    clock.now = 1.0
    w.listener(ev.JobObserved(workload=wl()), state.seq)  # seen again, its Workload there: not urgent
    assert list(w._routine) == [("wl", "research/train-a")] and not w._urgent
    w._routine.clear()

    clock.now = 2.0
    feed(w, state, _pending(2_000, PendingReasonKind.WAITING_FOR_QUOTA, "cpu: 2 more needed"))
    pending_event = next(k for k in w._routine if k[0] == "ev")
    assert list(w._routine) == [("wl", "research/train-a"), pending_event]
    clock.now = 7.0
    feed(w, state, ev.JobObserved(workload=wl("train-b", uid="b")))
    assert [w._take(8.5) for _ in range(5)] == [
        (("lq", "research/q"), 0.0, "queues"),  # due 1, deadline 6
        (("wl", "research/train-b"), 7.0, "urgent"),  # due 8, deadline 8
        (("wl", "research/train-a"), 2.0, "routine"),  # due 3, deadline 13
        (pending_event, 2.0, "routine"),  # the same deadline, after it in its lane
        None,
    ]

    # A routine change marked urgent later moves ahead with its first mark: admitted after a pending change.
    clock.now = 20.0
    feed(w, state, _pending(20_000, PendingReasonKind.WAITING_FOR_QUOTA, "cpu: 1 more needed"))
    clock.now = 25.0
    feed(w, state, ev.WorkloadAdmitted(workload="research/train-a", at=25_000, admission=admission()))
    assert w._urgent == {("wl", "research/train-a"): 20.0} and not w._routine, "its unsent Pending Event dropped"
    # ... and routine work older than an admission by more than the slack goes first.
    clock.now = 30.0
    reason = PendingReason(kind=PendingReasonKind.WAITING_FOR_QUOTA, message="cpu: 3 more needed")
    feed(w, state, ev.WorkloadPending(workload="research/train-b", at=30_000, cluster_queue=None, reason=reason))
    feed(w, state, ev.JobObserved(workload=wl("train-c", uid="c")))
    b_event = next(k for k in w._routine if k[0] == "ev")
    clock.now = 45.0
    feed(w, state, ev.JobObserved(workload=wl("train-d", uid="d")))
    w._queues.clear()
    assert [w._take(46.0) for _ in range(6)] == [
        (("wl", "research/train-a"), 20.0, "urgent"),  # deadline 21
        (("wl", "research/train-c"), 30.0, "urgent"),  # deadline 31
        (("wl", "research/train-b"), 30.0, "routine"),  # deadline 41, ahead of ...
        (b_event, 30.0, "routine"),
        (("wl", "research/train-d"), 45.0, "urgent"),  # ... deadline 46
        None,
    ]


def test_a_refused_write_is_retried_in_its_own_lane_with_its_first_mark() -> None:
    """A Pending Event (routine) refused once comes back to the routine lane, marked when it first was, so it neither
    jumps ahead of admissions nor loses its place to newer pending reasons."""
    client = _FlakyEvents()
    state = State()
    w = StatusWriter(
        cast(KubeClient, client), state, clock=cast(Any, None), linger_s=0.01, parallelism=1, workload_objects=False
    )
    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()), ev.JobObserved(workload=wl()))
    feed(w, state, _pending(1_000, PendingReasonKind.WAITING_FOR_QUOTA, "cpu: 2 more needed"))
    w._urgent.clear()
    w._queues.clear()
    w._routine = {k: v for k, v in w._routine.items() if k[0] == "ev"}
    ((key, first_mark),) = w._routine.items()

    async def refuse_once() -> None:
        marked_again = asyncio.Event()
        mark = w._mark

        def spy(*args: Any, **kwargs: Any) -> None:
            mark(*args, **kwargs)
            lanes.append((dict(w._routine), dict(w._urgent)))
            marked_again.set()

        w._mark = spy  # type: ignore[method-assign]
        task = asyncio.create_task(w._worker())
        await marked_again.wait()  # taken, refused, then marked again after the first retry delay (0.5 s)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    lanes: list[tuple[dict[Any, float], dict[Any, float]]] = []
    asyncio.run(asyncio.wait_for(refuse_once(), 10))
    assert client.refused == 1
    assert lanes[0] == ({key: first_mark}, {}), "back in the routine lane, with its first mark"


def test_a_waiting_workload_gets_kueues_warning_event_once_per_new_reason_the_newest_replacing_the_unsent() -> None:
    """As Kueue's scheduler (requeueAndUpdate): a Warning Event on the Workload, named after the QuotaReserved
    reason. Bounded as the Job's Pending is: a reason that only changes its figures is no new Event (Kueue's events
    recorder folds repeats into a series), an unsent one is replaced by the newer one, an admission drops it."""
    client = _PostedEvents()
    state = State()
    w = StatusWriter(cast(KubeClient, client), state, clock=cast(Any, None), monotonic=lambda: 0.0)
    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()), ev.JobObserved(workload=wl()))
    feed(w, state, _pending(1_000, PendingReasonKind.LOCAL_QUEUE_NOT_FOUND, "LocalQueue research/q doesn't exist"))
    feed(w, state, _pending(1_500, PendingReasonKind.WAITING_FOR_QUOTA, "cpu: 2 more needed"))
    _send_all(w)
    feed(w, state, _pending(2_000, PendingReasonKind.WAITING_FOR_QUOTA, "cpu: 1 more needed"))
    _send_all(w)
    feed(w, state, _pending(3_000, PendingReasonKind.QUEUE_STOPPED, "ClusterQueue team-research is stopped (Hold)"))
    feed(w, state, ev.WorkloadAdmitted(workload="research/train-a", at=4_000, admission=admission()))
    _send_all(w)
    on_workload = [e for e in client.posted if e["involvedObject"]["kind"] == "Workload"]
    assert [(e["type"], e["reason"], e["message"]) for e in on_workload] == [
        ("Warning", "WaitingForQuota", "cpu: 2 more needed")
    ]
    (sent,) = on_workload
    uid = wl().uid
    assert sent["involvedObject"] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "name": so.workload_name("train-a", uid),
        "namespace": "research",
    }
    assert sent["metadata"]["namespace"] == "research"


def test_without_workload_objects_there_is_no_workload_event() -> None:
    w, state = writer(workload_objects=False)
    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()), ev.JobObserved(workload=wl()))
    feed(w, state, _pending(1_000, PendingReasonKind.WAITING_FOR_QUOTA, "cpu: 2 more needed"))
    assert [e.kind for e in w._events.values()] == ["Job"]


# --- queue objects admitd accepts but ignores part of ---------------------------------------------------------

IGNORED = ("ClusterQueue team-research: spec.admissionChecksStrategy is not implemented by admitd and is ignored",)


def test_a_queue_with_ignored_fields_says_so_in_a_condition_until_a_version_without_them() -> None:
    counts = so.QueueCounts(pending=0, reserving=0, usage={})
    warned = so.cluster_queue_status(cluster_queue(), counts, READY, None, T0, warnings=IGNORED)
    cond = next(c for c in warned["conditions"] if c["type"] == "admitd.io/IgnoredSpec")
    assert (cond["status"], cond["reason"]) == ("True", "IgnoredSpec")
    assert cond["message"] == f"admitd accepts this ClusterQueue but ignores part of it: {IGNORED[0]}"
    assert conds(warned)["Active"] == ("True", "Ready", T0), "it is enforced, all but the named fields"
    mended = so.cluster_queue_status(cluster_queue(), counts, READY, warned, T1)
    assert conds(mended)["admitd.io/IgnoredSpec"] == ("False", "Enforced", T1)
    never = so.cluster_queue_status(cluster_queue(), counts, READY, None, T0)
    assert "admitd.io/IgnoredSpec" not in conds(never)
    lq = LocalQueue(namespace="research", name="q", cluster_queue="team-research")
    lq_status = so.local_queue_status(lq, cluster_queue(), True, counts, None, T0, warnings=("LocalQueue x: y",))
    assert conds(lq_status)["admitd.io/IgnoredSpec"] == ("True", "IgnoredSpec", T0)


def test_object_warned_sends_a_warning_event_naming_the_fields_and_marks_the_queue() -> None:
    client = _PostedEvents()
    state = State()
    w = StatusWriter(cast(KubeClient, client), state, clock=cast(Any, _FixedClock()), monotonic=lambda: 0.0)
    feed(w, state, ev.ClusterQueueObserved(cluster_queue=cluster_queue()))
    w._queues.clear()
    feed(w, state, ev.ObjectWarned(kind="ClusterQueue", name="team-research", warnings=IGNORED))
    assert ("cq", "team-research") in w.marked()
    assert w._warned == {("ClusterQueue", "team-research"): IGNORED}
    _send_all(w)
    (sent,) = client.posted
    assert (sent["type"], sent["reason"], sent["metadata"]["namespace"]) == ("Warning", "IgnoredSpec", "default")
    assert sent["involvedObject"] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "name": "team-research",
    }
    assert IGNORED[0] in sent["message"]
    feed(w, state, ev.ObjectWarned(kind="ClusterQueue", name="team-research", warnings=()))
    assert w._warned == {} and [e for e in w._events.values()] == [], "no Event when the warnings go"
    feed(w, state, ev.ObjectWarned(kind="ClusterQueue", name="team-research", warnings=IGNORED))
    feed(w, state, ev.ClusterQueueDeleted(name="team-research"))
    assert w._warned == {}, "a deleted queue's warnings go with it"


class _FixedClock:
    def now(self) -> int:
        return 5_000
