"""The daemon's border for partial admission and Kueue's job management (the default LocalQueue,
manageJobsWithoutQueueName, managedJobsNamespaceSelector): the webhook's patch and registration, the observer's
choice of jobs, and the patches that resize a partially admitted Job. Real fold (daemon/domain/state) and the real
pure functions of daemon/kube; no API server: raw objects are dicts shaped as the API server sends them.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from daemon.domain import events as ev
from daemon.domain.actuation import Resize, suspend_order, unsuspend_order
from daemon.domain.management import Managed, manage_existing_job, manage_new_job
from daemon.domain.model import (
    Admission,
    JobManagement,
    LabelRequirement,
    LabelSelector,
    LocalQueue,
    Namespace,
    PodSet,
    PodSetAssignment,
    Workload,
)
from daemon.domain.state import State
from daemon.kube.actuate import full_count_note, resize_patch
from daemon.kube.observe import Observer
from daemon.kube.status_objects import workload_object
from daemon.kube.webhook import admission_response, new_job_policy, suspend_patch, webhook_configuration
from daemon.stages.ports import Observed

MANAGE_ALL = JobManagement(without_queue_name=True)


# --- Kueue's rules --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "queue", "selected", "default", "expected"),
    [
        pytest.param(JobManagement(), "q", True, False, Managed("q"), id="labelled: managed in its queue"),
        pytest.param(JobManagement(), None, True, True, Managed("default", True), id="unlabelled: the default queue"),
        pytest.param(JobManagement(), "q", True, True, Managed("q"), id="a label wins over the default queue"),
        pytest.param(JobManagement(), None, True, False, None, id="unlabelled, no default queue: left alone"),
        pytest.param(MANAGE_ALL, None, True, False, Managed(None), id="manageJobsWithoutQueueName: held"),
        pytest.param(MANAGE_ALL, None, True, True, Managed("default", True), id="held jobs still get the default"),
        pytest.param(MANAGE_ALL, "q", False, True, None, id="namespace not selected: never managed, even labelled"),
    ],
)
def test_kueue_rules_for_a_new_job(
    jobs: JobManagement, queue: str | None, selected: bool, default: bool, expected: Managed | None
) -> None:
    assert manage_new_job(jobs, queue, namespace_selected=selected, default_queue=default) == expected


def test_an_existing_job_is_never_defaulted() -> None:
    assert not manage_existing_job(JobManagement(), None, namespace_selected=True)
    assert manage_existing_job(MANAGE_ALL, None, namespace_selected=True)
    assert not manage_existing_job(MANAGE_ALL, "q", namespace_selected=False)


# --- the webhook ------------------------------------------------------------------------------------------------


def _state(*items: object) -> State:
    state = State()
    for item in items:
        if isinstance(item, LocalQueue):
            state.apply(ev.LocalQueueObserved(local_queue=item))
        elif isinstance(item, Namespace):
            state.apply(ev.NamespaceObserved(namespace=item))
    return state


def _job(namespace: str, labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "j", "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": {"spec": {}}}}


def _apply(job: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A minimal JSON patch `add` (what the webhook uses) applied to a copy."""
    out: dict[str, Any] = json.loads(json.dumps(job))
    for op in ops:
        assert op["op"] == "add"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = out
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = op["value"]
    return out


DEFAULT_LQ = LocalQueue(namespace="research", name="default", cluster_queue="cq")


@pytest.mark.parametrize("labels", [None, {}, {"team": "a"}], ids=["no labels", "empty labels", "other labels"])
def test_the_webhook_labels_an_unlabelled_job_with_the_default_queue(labels: dict[str, str] | None) -> None:
    policy = new_job_policy(JobManagement(), _state(DEFAULT_LQ))
    ops = suspend_patch(_job("research", labels), policy)
    assert ops is not None
    patched = _apply(_job("research", labels), ops)
    assert patched["metadata"]["labels"] == {**(labels or {}), "kueue.x-k8s.io/queue-name": "default"}
    assert patched["spec"]["suspend"] is True


def test_the_webhook_leaves_an_unlabelled_job_alone_without_a_default_queue() -> None:
    assert suspend_patch(_job("scratch", None), new_job_policy(JobManagement(), _state(DEFAULT_LQ))) is None


def test_the_webhook_suspends_an_unlabelled_job_with_manage_jobs_without_queue_name() -> None:
    ops = suspend_patch(_job("scratch", None), new_job_policy(MANAGE_ALL, _state(DEFAULT_LQ)))
    assert ops is not None
    patched = _apply(_job("scratch", None), ops)
    assert patched["spec"]["suspend"] is True
    assert "labels" not in patched["metadata"]  # no queue: it waits for one


def test_the_webhook_reads_the_namespace_from_the_request() -> None:
    """A job created with `kubectl -n research create` may carry no metadata.namespace."""
    job = _job("research", None)
    del job["metadata"]["namespace"]
    review = {"request": {"uid": "u1", "namespace": "research", "object": job}}
    response = admission_response(review, new_job_policy(JobManagement(), _state(DEFAULT_LQ)))["response"]
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "default"}} in ops


def test_the_webhook_never_manages_a_namespace_the_selector_leaves_out() -> None:
    jobs = JobManagement(
        without_queue_name=True,
        namespace_selector=LabelSelector(match_labels={"admitd": "on"}),
    )
    state = _state(DEFAULT_LQ, Namespace(name="research", labels={}), Namespace(name="ml", labels={"admitd": "on"}))
    policy = new_job_policy(jobs, state)
    assert suspend_patch(_job("research", {"kueue.x-k8s.io/queue-name": "q"}), policy) is None
    assert suspend_patch(_job("ml", None), policy) is not None


def test_the_registration_sends_every_job_of_the_managed_namespaces() -> None:
    selector = LabelSelector(
        match_expressions=(LabelRequirement(key="kubernetes.io/metadata.name", operator="NotIn", values=("a", "b")),)
    )
    hook = webhook_configuration(b"ca", url="https://x", service=None, failure_policy="Fail", namespaces=selector)[
        "webhooks"
    ][0]
    assert "objectSelector" not in hook
    assert hook["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["a", "b"]}]
    }


# --- the observer -------------------------------------------------------------------------------------------------


def _observer(state: State, jobs: JobManagement) -> tuple[Observer, list[Observed], list[str]]:
    put: list[Observed] = []
    suspended: list[str] = []
    observer = Observer(
        state,
        put.append,
        clock=type("C", (), {"now": lambda self: 5_000})(),
        on_started_unsuspended=lambda key, *_: suspended.append(key),  # (job, uid[, kind])
        jobs=jobs,
        admission_key=b"k" * 32,
    )
    return observer, put, suspended


def _raw(namespace: str, labels: dict[str, str] | None, *, suspend: bool) -> dict[str, Any]:
    job = _job(namespace, labels)
    job["metadata"].update(uid="uid-1", creationTimestamp="2026-12-01T00:00:00Z")
    job["spec"] = {
        "suspend": suspend,
        "parallelism": 1,
        "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
    }
    return job


def test_the_observer_holds_an_unlabelled_job_only_with_manage_jobs_without_queue_name() -> None:
    observer, put, _ = _observer(State(), JobManagement())
    observer.job_event("ADDED", _raw("scratch", None, suspend=True))
    assert put == []
    observer, put, _ = _observer(State(), MANAGE_ALL)
    observer.job_event("ADDED", _raw("scratch", None, suspend=True))
    (observed,) = put[0].events
    assert isinstance(observed, ev.JobObserved) and observed.workload.queue_name is None


def test_an_unlabelled_job_found_running_is_suspended_when_managed() -> None:
    """Kueue: with manageJobsWithoutQueueName, jobs created before it started are suspended too."""
    observer, _, suspended = _observer(State(), MANAGE_ALL)
    observer.job_event("ADDED", _raw("scratch", None, suspend=False))
    assert suspended == ["scratch/j"]


def test_the_observer_ignores_namespaces_the_selector_leaves_out() -> None:
    observer, put, suspended = _observer(State(), MANAGE_ALL)
    observer.job_event("ADDED", _raw("kube-system", {"kueue.x-k8s.io/queue-name": "q"}, suspend=False))
    assert put == [] and suspended == []


def test_a_held_job_is_unrouted_with_a_clear_reason() -> None:
    from daemon.domain.admission import decide  # noqa: PLC0415

    state = State()
    state.apply(
        ev.JobObserved(
            workload=Workload(
                namespace="scratch", name="j", uid="u", created_at=0, queue_name=None, pod_sets=(_pod_set(),)
            )
        )
    )
    (pending,) = decide(state.view(), 1)
    assert isinstance(pending, ev.WorkloadPending)
    assert pending.reason.kind.value == "LocalQueueNotFound"
    assert "no kueue.x-k8s.io/queue-name label and namespace scratch had no LocalQueue named default" in (
        pending.reason.message
    )


# --- partial admission: orders and patches ----------------------------------------------------------------------


def _pod_set(count: int = 1, min_count: int | None = None) -> PodSet:
    return PodSet(name="main", count=count, min_count=min_count, requests={"cpu": 1000})


def _workload(count: int, min_count: int | None) -> Workload:
    return Workload(
        namespace="ml", name="j", uid="u", created_at=0, queue_name="q", pod_sets=(_pod_set(count, min_count),)
    )


def _admission(count: int) -> Admission:
    return Admission(
        cluster_queue="cq",
        pod_sets=(PodSetAssignment(name="main", count=count, flavors={"cpu": "f"}, usage={"cpu": count * 1000}),),
    )


def test_an_admission_with_fewer_pods_sets_parallelism_and_remembers_the_full_count() -> None:
    order = unsuspend_order(_workload(8, 2), _admission(3), {}, decision=7)
    assert order.resize == (Resize(pod_set="main", count=3, full=8),)
    assert resize_patch(order.resize) == [{"op": "add", "path": "/spec/parallelism", "value": 3}]
    assert full_count_note(order.resize, running=True) == [
        {"op": "add", "path": "/metadata/annotations/admitd.io~1full-parallelism", "value": "8"}
    ]


def test_a_suspension_restores_the_full_count() -> None:
    order = suspend_order(_workload(8, 2), "cq", 9, reason="Preempted", preemptor="ml/other")
    assert resize_patch(order.resize) == [{"op": "add", "path": "/spec/parallelism", "value": 8}]
    assert full_count_note(order.resize, running=False) == [
        {"op": "add", "path": "/metadata/annotations/admitd.io~1full-parallelism", "value": ""}
    ]


def test_a_job_without_a_minimum_is_never_resized() -> None:
    assert unsuspend_order(_workload(8, None), _admission(8), {}, decision=7).resize == ()
    assert suspend_order(_workload(8, None), "cq", 9, reason="Preempted", preemptor=None).resize == ()


def test_the_workload_object_carries_min_count() -> None:
    obj = workload_object(_workload(8, 2), 0, None)
    assert obj["spec"]["podSets"][0]["count"] == 8
    assert obj["spec"]["podSets"][0]["minCount"] == 2
    assert "minCount" not in workload_object(_workload(8, None), 0, None)["spec"]["podSets"][0]


def _owned(job: dict[str, Any], kind: str, api_version: str) -> dict[str, Any]:
    job["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "parent", "uid": "p", "controller": True}
    ]
    return job


def test_a_job_owned_by_a_managed_kind_is_its_owners_part() -> None:
    """A JobSet's child Jobs: Kueue neither defaults their queue nor suspends them (IsOwnerManagedByKueue)."""
    policy = new_job_policy(MANAGE_ALL, _state(DEFAULT_LQ))
    assert suspend_patch(_owned(_job("research", None), "JobSet", "jobset.x-k8s.io/v1alpha2"), policy) is None
    # A CronJob is no kind admitd admits: its Jobs are jobs of their own.
    assert suspend_patch(_owned(_job("research", None), "CronJob", "batch/v1"), policy) is not None
    observer, put, suspended = _observer(State(), MANAGE_ALL)
    observer.job_event("ADDED", _owned(_raw("research", None, suspend=False), "JobSet", "jobset.x-k8s.io/v1alpha2"))
    assert put == [] and suspended == []


def test_a_standby_reads_a_partially_admitted_job_as_created() -> None:
    """The leader runs the Job with 2 of its 4 pods: a standby that saw it pending sees no change to the workload,
    and adopts the admission with the quota of 2 pods."""
    from daemon.domain.actuation import ADMISSION_ANNOTATION, admission_note  # noqa: PLC0415
    from daemon.domain.trust import SIGNATURE_ANNOTATION, sign  # noqa: PLC0415

    state = State()
    observer, put, _ = _observer(state, JobManagement())
    pending = _raw("research", {"kueue.x-k8s.io/queue-name": "q"}, suspend=True)
    pending["spec"]["parallelism"] = 4
    pending["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "1", ADMISSION_ANNOTATION: ""}
    observer.job_event("ADDED", pending)
    (observed,) = put[0].events
    assert isinstance(observed, ev.JobObserved) and observed.workload.pod_sets[0].count == 4
    state.apply(observed, 1)
    put.clear()
    admission = Admission(
        cluster_queue="cq",
        pod_sets=(PodSetAssignment(name="main", count=2, flavors={"cpu": "f"}, usage={"cpu": 2000}),),
    )
    running = json.loads(json.dumps(pending))
    running["spec"].update(suspend=False, parallelism=2)
    running["metadata"]["annotations"].update(
        {
            ADMISSION_ANNOTATION: admission_note(admission, 7),
            SIGNATURE_ANNOTATION: sign(b"k" * 32, "uid-1", admission_note(admission, 7)),
            "admitd.io/full-parallelism": "4",
        }
    )
    observer.job_event("MODIFIED", running)
    (adopted,) = put[0].events  # no JobObserved: the workload is the one the fold holds
    assert isinstance(adopted, ev.WorkloadAdopted)
    assert adopted.admission.pod_sets[0].count == 2
    assert adopted.admission.usage() == {("f", "cpu"): 2000}
