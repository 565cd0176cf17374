"""The pure parts of daemon/kube at the border with the API server: the webhook's patch, the admission's JSON patch,
the admission note a standby adopts, and what the observer makes of raw Job objects. Real fold (daemon/domain/state),
no API server: raw objects are dicts shaped as the API server sends them.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from daemon.domain import events as ev
from daemon.domain.actuation import (
    ADMISSION_ANNOTATION,
    Action,
    Order,
    Placement,
    admission_note,
    inherited_unsuspensions,
    read_admission_note,
)
from daemon.domain.model import LocalQueue, ResourceFlavor, Toleration
from daemon.domain.state import State
from daemon.domain.trust import SIGNATURE_ANNOTATION, STOPPING_ANNOTATION, STOPPING_SIGNATURE_ANNOTATION, sign
from daemon.kube.actuate import STALE_PATCH_S, JobActuator, placement_patch
from daemon.kube.observe import Observer
from daemon.kube.webhook import admission_response, suspend_patch
from daemon.stages.actuate import renounce
from daemon.stages.ports import Done, Failed, Observed
from tests.samples import admission, workload
from tests.unit.test_kube_distributed import PatchingClient

QUEUE = {"kueue.x-k8s.io/queue-name": "research-queue"}
KEY = b"k" * 32  # the replicas' shared admission key


def signed_note(note: str, uid: str = "uid-1") -> dict[str, str]:
    """A note and its signature, as an admitd replica writes them on the Job with `uid`."""
    return {ADMISSION_ANNOTATION: note, SIGNATURE_ANNOTATION: sign(KEY, uid, note)}


def raw_job(*, suspend: bool, annotations: dict[str, str] | None = None, active: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "train-a",
        "namespace": "research",
        "uid": "uid-1",
        "creationTimestamp": "2026-12-01T00:00:00Z",
        "labels": dict(QUEUE),
    }
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "suspend": suspend,
            "parallelism": 2,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2", "cpu": "4"}}},
                    ]
                }
            },
        },
        "status": {"active": active},
    }


def test_the_webhook_suspends_a_labelled_job_and_makes_room_for_the_admission_note() -> None:
    assert suspend_patch(raw_job(suspend=False)) == [
        {"op": "add", "path": "/metadata/annotations", "value": {ADMISSION_ANNOTATION: ""}},
        {"op": "add", "path": "/spec/suspend", "value": True},
    ]
    assert suspend_patch(raw_job(suspend=True, annotations={"a": "b"})) == [
        {"op": "add", "path": "/metadata/annotations/admitd.io~1admission", "value": ""}
    ]
    unlabelled = raw_job(suspend=False)
    unlabelled["metadata"]["labels"] = {}
    assert suspend_patch(unlabelled) is None


def test_the_admission_review_answer_carries_the_patch_base64() -> None:
    review = {"request": {"uid": "r-1", "object": raw_job(suspend=False, annotations={ADMISSION_ANNOTATION: ""})}}
    answer = admission_response(review)["response"]
    assert answer["uid"] == "r-1" and answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(answer["patch"])) == [{"op": "add", "path": "/spec/suspend", "value": True}]


def test_a_placement_sets_exactly_the_pod_templates_selector_and_tolerations() -> None:
    toleration = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
    ops = placement_patch(
        "Job", (Placement(pod_set="main", node_selector=(("gpu-type", "h100"),), tolerations=(toleration,)),)
    )
    assert ops == [
        {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"gpu-type": "h100"}},
        {
            "op": "add",
            "path": "/spec/template/spec/tolerations",
            "value": [{"operator": "Exists", "key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        },
    ]


def test_the_admission_note_round_trips_with_usage_from_the_workload() -> None:
    adm = admission()
    assert read_admission_note(admission_note(adm, 42), workload()) == adm
    assert read_admission_note("{not json", workload()) is None
    assert read_admission_note(json.dumps({"clusterQueue": "q", "podSets": [{"name": "other"}]}), workload()) is None


def _observer(state: State, leader: bool = True) -> tuple[Observer, list[Observed], list[str]]:
    put: list[Observed] = []
    suspended: list[str] = []
    observer = Observer(
        state,
        put.append,
        clock=type("C", (), {"now": lambda self: 5_000})(),
        on_started_unsuspended=lambda key, uid, kind: suspended.append(key),
        is_leader=lambda: leader,
        admission_key=KEY,
    )
    return observer, put, suspended


def test_a_running_job_with_another_replicas_note_is_adopted_not_suspended() -> None:
    note = admission_note(admission(cq="team-research"), 42)
    observer, put, suspended = _observer(State())
    observer.job_event("ADDED", raw_job(suspend=False, annotations=signed_note(note)))
    events = put[0].events
    assert [type(e) for e in events] == [ev.JobObserved, ev.WorkloadAdopted]
    adopted = events[1]
    assert isinstance(adopted, ev.WorkloadAdopted) and adopted.admission.cluster_queue == "team-research"
    assert suspended == []


def test_a_running_job_without_a_note_is_a_security_event_and_suspended_by_the_leader_only() -> None:
    for leader, expected in ((True, ["research/train-a"]), (False, [])):
        observer, put, suspended = _observer(State(), leader=leader)
        observer.job_event("ADDED", raw_job(suspend=False, annotations={ADMISSION_ANNOTATION: ""}))
        observed, tampered = put[0].events
        assert isinstance(observed, ev.JobObserved) and isinstance(tampered, ev.JobTampered)
        assert (tampered.what, tampered.namespace) == ("UnsuspendedWithoutAdmission", "research")
        assert suspended == expected


def test_a_standby_frees_the_quota_of_an_adopted_job_that_the_leader_stopped() -> None:
    state = State()
    observer, put, _ = _observer(state, leader=False)
    note = admission_note(admission(), 42)
    observer.job_event("ADDED", raw_job(suspend=False, annotations=signed_note(note)))
    for seq, event in enumerate(put[0].events, start=1):
        state.apply(event, seq)
    put.clear()
    observer.job_event("MODIFIED", raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""}, active=1))
    assert put == [], "pods still running: the quota is still held"
    observer.job_event("MODIFIED", raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""}, active=0))
    (evicted,) = put[0].events
    assert isinstance(evicted, ev.WorkloadEvicted) and evicted.reason == "SuspendedByAnotherReplica"


def test_a_leader_frees_the_quota_of_an_adopted_job_the_previous_leader_stopped_not_of_one_it_is_starting() -> None:
    """A preemption by the replica that led before lands after the take-over: the new leader adopted the job, did
    not start it, and has no order on it, so a suspended job with no pods is evicted, as a standby would. A job
    this process is unsuspending is not (the watched version may predate its patch)."""
    for unsuspending, evicts in ((False, True), (True, False)):
        state = State()
        observer, put, _ = _observer(state, leader=True)
        observer.unsuspending = lambda key, on=unsuspending: on  # type: ignore[misc]
        note = admission_note(admission(), 42)
        observer.job_event("ADDED", raw_job(suspend=False, annotations=signed_note(note)))
        for seq, event in enumerate(put[0].events, start=1):
            state.apply(event, seq)
        put.clear()
        observer.job_event("MODIFIED", raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""}, active=0))
        reasons = [e.reason for o in put for e in o.events if isinstance(e, ev.WorkloadEvicted)]
        assert reasons == (["SuspendedByAnotherReplica"] if evicts else [])


def stopping_note(note: str, uid: str = "uid-1", *, stopping: bool = True) -> dict[str, str]:
    """A preemption's stopping note and its signature (`stopping=False`: signed as an admission, which it is not)."""
    return {
        ADMISSION_ANNOTATION: "",
        STOPPING_ANNOTATION: note,
        STOPPING_SIGNATURE_ANNOTATION: sign(KEY, uid, note, stopping=stopping),
    }


@pytest.mark.parametrize("leader", [True, False], ids=["leader", "standby"])
def test_a_job_another_replica_preempted_holds_its_quota_until_its_pods_are_gone(leader: bool) -> None:
    """A replica whose watch never saw the job run (down for its whole start, or a leader since a take-over) sees it
    suspended with pods still stopping: the stopping note charges their quota (the workload admitted and evicting)
    until a version shows them gone; then it is evicted and pending again."""
    state = State()
    observer, put, suspended = _observer(state, leader=leader)
    note = admission_note(admission(cq="team-research"), 42, at=1_000)
    observer.job_event("ADDED", raw_job(suspend=True, annotations=stopping_note(note), active=2))
    events = [e for o in put for e in o.events]
    assert [type(e) for e in events] == [ev.JobObserved, ev.WorkloadAdopted]
    adopted = events[1]
    assert isinstance(adopted, ev.WorkloadAdopted) and adopted.stopping
    for seq, event in enumerate(events, start=1):
        state.apply(event, seq)
    rec = state.workloads["research/train-a"]
    assert rec.admission is not None and rec.admission.cluster_queue == "team-research"
    assert rec.evicting and rec.eviction_reason == "SuspendedByAnotherReplica"
    assert "research/train-a" not in state.outbox, "nothing to actuate: another replica suspended it"
    put.clear()
    observer.job_event("MODIFIED", raw_job(suspend=True, annotations=stopping_note(note), active=1))
    assert put == [], "pods still stopping: the quota is still held"
    observer.job_event("MODIFIED", raw_job(suspend=True, annotations=stopping_note(note), active=0))
    (evicted,) = put[0].events
    assert isinstance(evicted, ev.WorkloadEvicted) and evicted.reason == "SuspendedByAnotherReplica"
    state.apply(evicted, 10)
    assert state.workloads["research/train-a"].admission is None
    assert suspended == []


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({STOPPING_ANNOTATION: "{}"}, id="unsigned"),
        pytest.param("as-admission", id="signed as an admission, not as a stopping note"),
        pytest.param("other-uid", id="signed for another Job"),
        pytest.param("ended", id="older than the workload's last eviction"),
    ],
)
def test_a_stopping_note_admitd_did_not_write_for_this_stop_charges_nothing(annotations: object) -> None:
    state = State()
    note = admission_note(admission(), 42, at=1_000)
    if annotations == "as-admission":
        annotations = stopping_note(note, stopping=False)
    elif annotations == "other-uid":
        annotations = stopping_note(note, uid="uid-2")
    elif annotations == "ended":
        # this replica saw the workload run and stop at 1_500: a note of the admission at 1_000 is over
        for seq, event in enumerate(
            [
                ev.JobObserved(workload=workload(name="train-a")),
                ev.WorkloadAdopted(workload="research/train-a", at=1_000, admission=admission()),
                ev.WorkloadEvicted(workload="research/train-a", at=1_500, reason="SuspendedByAnotherReplica"),
            ],
            start=1,
        ):
            state.apply(event, seq)
        annotations = stopping_note(note)
    assert isinstance(annotations, dict)
    observer, put, _ = _observer(state)
    observer.job_event("ADDED", raw_job(suspend=True, annotations=annotations, active=2))
    assert not [e for o in put for e in o.events if isinstance(e, ev.WorkloadAdopted)]
    assert all(rec.admission is None for rec in state.workloads.values())


async def test_a_preemption_writes_the_stopping_note_signed_and_empties_the_admission_note() -> None:
    state = State()
    observer, put, _ = _observer(state)
    job = raw_job(suspend=False, annotations={ADMISSION_ANNOTATION: "x"}, active=2)
    order = _preempted_after_admission(state, observer, put, job)
    assert order.note and read_admission_note(order.note, workload(name="train-a")) == admission()
    client = PatchingClient(raw_job(suspend=False, annotations={ADMISSION_ANNOTATION: "x"}, active=2))
    actuator = JobActuator(client, lambda uid, note, stopping=False: sign(KEY, uid, note, stopping=stopping))  # type: ignore[arg-type]
    actuator.seen("MODIFIED", job)
    assert await actuator.carry_out(order) == Done()
    annotations = client.obj["metadata"]["annotations"]
    assert annotations[ADMISSION_ANNOTATION] == ""
    assert annotations[STOPPING_ANNOTATION] == order.note
    assert annotations[STOPPING_SIGNATURE_ANNOTATION] == sign(KEY, "uid-1", order.note, stopping=True)
    assert annotations[STOPPING_SIGNATURE_ANNOTATION] != sign(KEY, "uid-1", order.note)


async def test_a_leader_keeps_the_quota_of_its_own_preemption_while_the_jobs_status_lags() -> None:
    """Its own suspension answered (the order settled) and the first suspended version seen, whose status says
    nothing about the pods yet: neither its own eviction nor another replica's is taken from it."""
    state = State()
    observer, put, _ = _observer(state, leader=True)
    note = admission_note(admission(), 42)
    observer.job_event("ADDED", raw_job(suspend=False, annotations=signed_note(note)))
    for seq, event in enumerate(put[0].events, start=1):
        state.apply(event, seq)
    key = "research/train-a"
    preempted = ev.WorkloadPreempted(
        workload=key,
        at=5,
        cluster_queue="team-research",
        preemptor=None,
        preemptor_cluster_queue=None,
        reason="InCohortReclamation",
        policy="reclaimWithinCohort=Any",
    )
    state.apply(preempted, 10)
    decision = state.outbox[key].decision
    state.apply(ev.JobSuspended(job=key, at=6, decision=decision, placements=()), 11)
    assert key not in state.outbox and state.workloads[key].evicting
    put.clear()
    observer.suspending(key, "Job")
    observer.job_event("MODIFIED", raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""}, active=0))
    assert put == []  # the quota stays held until the Job controller reports the pods gone


def test_a_process_starting_as_a_standby_gives_up_every_unsettled_order_of_its_log() -> None:
    state = State()
    wl = workload()
    state.apply(ev.JobObserved(workload=wl), 1)
    state.apply(ev.WorkloadAdmitted(workload=wl.key, at=10, admission=admission()), 2)
    assert set(state.outbox) == {wl.key}
    given_up = renounce(state.outbox, at=20)
    assert [(type(e), cause) for e, cause in given_up] == [(ev.ActuationFailed, 2)]
    failed = given_up[0][0]
    assert isinstance(failed, ev.ActuationFailed) and failed.permanent and failed.decision == 2
    for event, _ in given_up:
        state.apply(event, 3)
    assert state.outbox == {}  # nothing of an earlier term is carried out after another replica led
    assert renounce(state.outbox, at=30) == []


def test_a_queue_object_admitd_cannot_accept_is_one_rejection_naming_it_and_the_others_go_on() -> None:
    state = State()
    observer, put, _ = _observer(state)
    rf = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "h100"}}
    good = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "good", "uid": "u1", "resourceVersion": "7", "managedFields": []},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "h100", "resources": [{"name": "cpu", "nominalQuota": 4}]}],
                }
            ],
        },
        "status": {"pendingWorkloads": 0},
    }
    bad = json.loads(json.dumps(good))
    bad["metadata"]["name"] = "bad"
    bad["spec"]["resourceGroups"][0]["flavors"].append(bad["spec"]["resourceGroups"][0]["flavors"][0])
    observer.objects_listed("ClusterQueue")([rf, bad, good])
    events = put[0].events
    rejected = [e for e in events if isinstance(e, ev.ObjectRejected)]
    assert [(r.kind, r.name) for r in rejected] == [("ClusterQueue", "bad")]
    assert "spec.resourceGroups" in " ".join(rejected[0].errors)
    assert [e.cluster_queue.name for e in events if isinstance(e, ev.ClusterQueueObserved)] == ["good"]
    put.clear()
    observer.object_event("MODIFIED", bad)
    assert put == [], "the same problem is reported once"


def test_two_status_updates_before_the_fold_catches_up_append_one_eviction_and_one_completion() -> None:
    state = State()
    observer, put, _ = _observer(state, leader=False)
    note = admission_note(admission(), 42)
    observer.job_event("ADDED", raw_job(suspend=False, annotations=signed_note(note)))
    for seq, event in enumerate(put[0].events, start=1):
        state.apply(event, seq)
    put.clear()
    stopped = raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""}, active=0)
    observer.job_event("MODIFIED", stopped)
    observer.job_event("MODIFIED", stopped)  # the fold has not seen the first eviction yet
    assert [type(e) for o in put for e in o.events] == [ev.WorkloadEvicted]
    put.clear()
    done = raw_job(suspend=False, annotations=signed_note(note), active=0)
    done["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    observer.job_event("MODIFIED", done)
    observer.job_event("MODIFIED", done)
    assert [type(e) for o in put for e in o.events] == [ev.JobFinished]


def test_a_job_seen_twice_while_running_for_another_replica_is_observed_and_adopted_once() -> None:
    state = State()
    observer, put, _ = _observer(state, leader=False)
    observer.job_event("ADDED", raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""}))
    for seq, event in enumerate(put[0].events, start=1):
        state.apply(event, seq)
    put.clear()
    running = raw_job(suspend=False, annotations=signed_note(admission_note(admission(), 42)))
    running["spec"]["template"]["spec"]["nodeSelector"] = {"gpu-type": "h100"}  # as the leader's patch set it
    observer.job_event("MODIFIED", running)
    observer.job_event("MODIFIED", running)  # pod counts ticking, before the fold saw the first
    assert [type(e) for o in put for e in o.events] == [ev.JobObserved, ev.WorkloadAdopted]


def test_queue_objects_gone_from_a_list_or_deleted_by_a_watch_are_appended_as_deleted() -> None:
    state = State()
    state.apply(ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="h100")), 1)
    state.apply(ev.LocalQueueObserved(local_queue=LocalQueue(namespace="ns", name="q", cluster_queue="cq")), 2)
    observer, put, _ = _observer(state)
    observer.objects_listed("LocalQueue")([])
    observer.object_event(
        "DELETED", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "h100"}}
    )
    observer.object_event(
        "DELETED", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "other"}}
    )
    assert [e for o in put for e in o.events] == [
        ev.LocalQueueDeleted(namespace="ns", name="q"),
        ev.ResourceFlavorDeleted(name="h100"),
    ]


async def test_a_job_preempted_before_it_ever_ran_is_evicted_from_the_answer_to_its_suspension() -> None:
    """A workload preempted between its admission and its unsuspension: its Job is already suspended with no pods,
    the suspension may change nothing, and no watch event follows. The API server's answer to the actuator's patch
    is observed instead, so the eviction is appended and the workload goes back to its queue (without this, found
    by the end-to-end benchmark, such workloads stayed admitted-and-evicting for good)."""
    state = State()
    observer, put, _ = _observer(state)
    job = raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""})
    order = _preempted_after_admission(state, observer, put, job)
    assert state.workloads["research/train-a"].evicting

    actuator = JobActuator(PatchingClient(job))  # type: ignore[arg-type]
    actuator.on_suspended = lambda obj: observer.job_event("MODIFIED", obj)
    assert await actuator.carry_out(order) == Done()
    events = [e for o in put for e in o.events]
    assert [type(e) for e in events] == [ev.WorkloadEvicted]

    put.clear()
    observer.job_event("MODIFIED", job)  # a late watch event of the same state appends nothing more
    assert put == []


def _preemption() -> ev.WorkloadPreempted:
    return ev.WorkloadPreempted(
        workload="research/train-a",
        at=2_000,
        cluster_queue="team-research",
        preemptor="research/urgent",
        preemptor_cluster_queue="team-research",
        reason="InClusterQueue",
        policy="withinClusterQueue=LowerPriority",
    )


def _preempted_after_admission(state: State, observer: Observer, put: list[Observed], job: dict[str, Any]) -> Order:
    """`job` observed, admitted (decision 2), then preempted (decision 3): the suspend order of decision 3."""
    observer.job_event("ADDED", job)
    decided = [
        *put[0].events,
        ev.WorkloadAdmitted(workload="research/train-a", at=1_000, admission=admission()),
        _preemption(),
    ]
    for seq, event in enumerate(decided, start=1):
        state.apply(event, seq)
    put.clear()
    return state.outbox["research/train-a"]


async def test_a_preemption_that_overtakes_its_admission_costs_no_request() -> None:
    """The admission was never carried out (its order superseded before it was sent): the watched Job is suspended,
    idle, without an admission note, so there is nothing to undo. No PATCH is sent, and the observer appends the
    eviction (once: a late watch event of the same Job appends nothing more)."""
    state = State()
    observer, put, _ = _observer(state)
    job = raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""})
    order = _preempted_after_admission(state, observer, put, job)
    client = PatchingClient(job)
    actuator = JobActuator(client)  # type: ignore[arg-type]
    actuator.on_suspended_unsent = observer.suspended_unsent
    actuator.listed([job])
    assert await actuator.carry_out(order) == Done()
    assert client.patches == []
    assert actuator.skipped == 1
    assert [type(e) for o in put for e in o.events] == [ev.WorkloadEvicted]
    put.clear()
    observer.job_event("MODIFIED", job)
    assert put == []


@pytest.mark.parametrize(
    "watched",
    [
        pytest.param(raw_job(suspend=False, annotations={ADMISSION_ANNOTATION: ""}), id="running"),
        pytest.param(raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: "x"}), id="suspended with a note"),
        pytest.param(raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""}, active=1), id="pods still active"),
        pytest.param(None, id="never watched"),
    ],
)
async def test_a_suspension_is_patched_unless_the_watch_shows_nothing_to_undo(watched: dict[str, Any] | None) -> None:
    state = State()
    observer, put, _ = _observer(state)
    job = raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""})
    order = _preempted_after_admission(state, observer, put, job)
    client = PatchingClient(raw_job(suspend=False, annotations={ADMISSION_ANNOTATION: "x"}))
    actuator = JobActuator(client)  # type: ignore[arg-type]
    if watched is not None:
        actuator.seen("MODIFIED", watched)
    assert await actuator.carry_out(order) == Done()
    assert client.patches, "the suspension was skipped"
    assert client.obj["spec"]["suspend"] is True


async def test_a_job_this_process_unsuspended_is_patched_even_if_the_watch_lags() -> None:
    """The watch still shows the Job as created (suspended, no note) while the unsuspend patch has landed: the
    suspension must be sent, or the Job would run on quota the fold has released."""
    state = State()
    observer, put, _ = _observer(state)
    created = raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""})
    observer.job_event("ADDED", created)
    state.apply(put[0].events[0], 1)
    state.apply(ev.WorkloadAdmitted(workload="research/train-a", at=1_000, admission=admission()), 2)
    put.clear()
    client = PatchingClient(dict(created))
    actuator = JobActuator(client)  # type: ignore[arg-type]
    actuator.listed([created])
    assert await actuator.carry_out(state.outbox["research/train-a"]) == Done()
    assert client.obj["spec"]["suspend"] is False
    state.apply(_preemption(), 3)
    sent = len(client.patches)
    assert await actuator.carry_out(state.outbox["research/train-a"]) == Done()
    assert len(client.patches) > sent
    assert client.obj["spec"]["suspend"] is True


@pytest.mark.parametrize(
    ("admitted_selector", "patches"),
    [
        pytest.param({}, 1, id="flavor without node labels: the template is as created, one patch"),
        pytest.param({"gpu-type": "h100"}, 2, id="flavor with node labels: the template is restored, two patches"),
    ],
)
async def test_a_preempted_running_job_is_restored_only_where_its_admission_changed_the_template(
    admitted_selector: dict[str, str], patches: int
) -> None:
    running = raw_job(suspend=False, annotations={ADMISSION_ANNOTATION: "note"})
    if admitted_selector:
        running["spec"]["template"]["spec"]["nodeSelector"] = dict(admitted_selector)
    client = PatchingClient(running)
    actuator = JobActuator(client)  # type: ignore[arg-type]
    actuator.seen("MODIFIED", running)
    order = Order(
        job="research/train-a",
        kind="Job",
        uid="uid-1",
        decision=3,
        action=Action.SUSPEND,
        cluster_queue="team-research",
        placements=(Placement(pod_set="main", node_selector=(), tolerations=()),),
        reason="InClusterQueue",
    )
    assert await actuator.carry_out(order) == Done()
    assert len(client.patches) == patches
    assert client.obj["spec"]["suspend"] is True
    assert client.obj["metadata"]["annotations"][ADMISSION_ANNOTATION] == ""  # emptied in the suspending patch
    assert not client.obj["spec"]["template"]["spec"].get("nodeSelector")


def test_the_status_writers_parallelism_is_a_whole_number_of_at_least_one(capsys: pytest.CaptureFixture[str]) -> None:
    from daemon.cli import build_parser  # noqa: PLC0415

    parser = build_parser("run")
    assert parser.parse_args(["run", "--status-parallelism", "2"]).status_parallelism == 2
    assert parser.parse_args(["run"]).status_parallelism == 4
    for bad, said in (("0", "expected at least 1, got 0"), ("two", "expected a whole number, got 'two'")):
        with pytest.raises(SystemExit):
            parser.parse_args(["run", "--status-parallelism", bad])
        assert said in capsys.readouterr().err


async def test_a_stale_idle_version_seen_while_an_unsuspension_is_on_its_way_is_no_eviction() -> None:
    """Found by the faulty simulation (tests.dst, CI-shape seeds 88, 184 and 254): a workload preempted while its
    unsuspension was in flight, and a watch event (or a relist) showing the Job as it was before that patch,
    suspended with no pods. Taking that for the eviction released the quota and readmitted the workload while the
    earlier patch was about to start it: it then ran unadmitted, and was unsuspended a second time under another
    decision. While the actuator has an unsuspension out, the eviction is taken only from the suspension's answer."""
    state = State()
    put: list[Observed] = []
    job = raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""})
    actuator = JobActuator(PatchingClient(job))  # type: ignore[arg-type]
    observer = Observer(
        state,
        put.append,
        clock=type("C", (), {"now": lambda self: 5_000})(),
        unsuspending=actuator.unsuspending,
    )
    actuator.on_suspended = lambda obj: observer.job_event("MODIFIED", obj)
    observer.job_event("ADDED", job)
    for seq, event in enumerate(
        [*put[0].events, ev.WorkloadAdmitted(workload="research/train-a", at=1_000, admission=admission())], start=1
    ):
        state.apply(event, seq)
    assert await actuator.carry_out(state.outbox["research/train-a"]) == Done()  # the unsuspension is sent
    state.apply(_preemption(), 3)  # ... and the workload is preempted before the watch shows it running
    put.clear()

    observer.job_event("MODIFIED", job)  # a late watch event: the Job before the unsuspension
    assert put == []
    assert state.workloads["research/train-a"].evicting  # its quota is still held

    assert await actuator.carry_out(state.outbox["research/train-a"]) == Done()  # the suspension
    assert [type(e) for o in put for e in o.events] == [ev.WorkloadEvicted]


def test_after_a_restart_an_admission_without_a_recorded_unsuspension_counts_as_on_its_way() -> None:
    """Found by the faulty simulation (issue-shape seed 1454): the unsuspension may have been sent by the process
    that died; until the Job is suspended, a watched version showing it suspended and idle is no eviction."""
    actuator = JobActuator(PatchingClient(raw_job(suspend=True)))  # type: ignore[arg-type]
    assert not actuator.unsuspending("research/train-a")
    actuator.assume_unsuspending(["research/train-a"])
    assert actuator.unsuspending("research/train-a")
    actuator.seen("DELETED", raw_job(suspend=True))
    assert not actuator.unsuspending("research/train-a")


def test_a_suspension_that_replaces_an_unsettled_unsuspension_names_it_until_its_result_is_recorded() -> None:
    """The outbox of a workload admitted (decision 2) and preempted (decision 3) before the unsuspension's result:
    the suspension names decision 2, and the job is one a restart must count as having an unsuspension on its way.
    The unsuspension's result in the log (here its success) settles that: a restart then has nothing to wait for."""
    state = State()
    observer, put, _ = _observer(state)
    order = _preempted_after_admission(state, observer, put, raw_job(suspend=True))
    assert (order.action, order.decision, order.supersedes) == (Action.SUSPEND, 3, 2)
    assert inherited_unsuspensions(state.outbox) == ["research/train-a"]
    state.apply(ev.JobUnsuspended(job="research/train-a", at=2_100, decision=2, placements=()), 4)
    assert state.outbox["research/train-a"].supersedes == 0
    assert state.outbox["research/train-a"].decision == 3  # the suspension itself is still to be carried out
    assert inherited_unsuspensions(state.outbox) == []


async def test_after_a_restart_a_suspension_is_made_again_once_the_dead_process_patch_cannot_land(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the faulty simulation (issue-shape seeds 263, 281, 297, 301, 305, 1989): the process that died had
    sent the unsuspension, the workload was preempted, and the next process suspended the still-suspended Job and
    took that for the eviction; the dead process's patch landed after it and the Job ran unadmitted. Now the
    suspension before `STALE_PATCH_S` has passed keeps the quota (a temporary failure, retried when the old patch
    can no longer land, with no eviction observed), and the one after it is the eviction."""
    state = State()
    job = raw_job(suspend=True, annotations={ADMISSION_ANNOTATION: ""})
    client = PatchingClient(job)
    actuator = JobActuator(client)  # type: ignore[arg-type]
    put: list[Observed] = []
    clock = type("C", (), {"now": lambda self: 5_000})()
    observer = Observer(state, put.append, clock=clock, unsuspending=actuator.unsuspending, admission_key=KEY)
    order = _preempted_after_admission(state, observer, put, job)
    now = [1_000.0]
    monkeypatch.setattr("daemon.kube.actuate.time.monotonic", lambda: now[0])
    actuator.on_suspended = lambda obj: observer.job_event("MODIFIED", obj)
    actuator.on_suspended_unsent = observer.suspended_unsent
    actuator.listed([job])
    actuator.assume_unsuspending(inherited_unsuspensions(state.outbox), for_s=STALE_PATCH_S)

    observer.job_event("MODIFIED", job)  # the relist after the restart: suspended and idle is no eviction yet
    first = await actuator.carry_out(order)
    assert isinstance(first, Failed) and not first.permanent, first
    assert first.retry_in_ms is not None and STALE_PATCH_S * 1000 <= first.retry_in_ms <= STALE_PATCH_S * 1000 + 1
    assert len(client.patches) >= 1  # suspended at once all the same (the old patch may have landed already)
    assert put == [] and actuator.unsuspending("research/train-a")
    assert state.workloads["research/train-a"].evicting  # its quota is still held

    now[0] += STALE_PATCH_S
    assert await actuator.carry_out(order) == Done()
    assert [type(e) for o in put for e in o.events] == [ev.WorkloadEvicted]
    assert not actuator.unsuspending("research/train-a")


def test_an_accepted_queue_object_with_ignored_fields_is_warned_once_and_unwarned_when_they_go() -> None:
    """`object.warned` after the observation, naming each field; the same warnings again are not news; a version
    without them (even one the fold sees as unchanged: the ignored field removed) records warnings=()."""
    state = State()
    observer, put, _ = _observer(state, leader=False)
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "solo", "uid": "u1", "resourceVersion": "7"},
        "spec": {
            "namespaceSelector": {},
            "admissionChecksStrategy": {"admissionChecks": [{"name": "prov"}]},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "h100", "resources": [{"name": "cpu", "nominalQuota": 4, "borrowingLimit": 2}]}
                    ],
                }
            ],
        },
    }
    observer.objects_listed("ClusterQueue")([cq])
    events = put[0].events
    assert [type(e) for e in events] == [ev.ClusterQueueObserved, ev.ObjectWarned]
    warned = events[1]
    assert isinstance(warned, ev.ObjectWarned)
    assert (warned.kind, warned.name, warned.namespace) == ("ClusterQueue", "solo", None)
    assert warned.warnings == (
        "ClusterQueue solo: spec.admissionChecksStrategy is not implemented by admitd and is ignored",
        "ClusterQueue solo: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit has no effect until the "
        "ClusterQueue joins a cohort",
    )
    for seq, event in enumerate(events, start=1):
        state.apply(event, seq)
    put.clear()
    observer.object_event("MODIFIED", cq)
    assert put == [], "the same warnings are recorded once"
    del cq["spec"]["admissionChecksStrategy"]  # type: ignore[attr-defined]
    del cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"]  # type: ignore[index]
    observer.object_event("MODIFIED", cq)
    assert [type(e) for o in put for e in o.events] == [ev.ClusterQueueObserved, ev.ObjectWarned]
    assert put[-1].events[-1] == ev.ObjectWarned(kind="ClusterQueue", name="solo", warnings=())
