"""The daemon's border for PyTorchJob, RayJob and JobSet, without a cluster: the webhook's suspend patch, the
actuation patch per replica, and reading each kind's status (suspended, running, finished).

Real: `daemon.kube.webhook.suspend_patch`, `daemon.kube.actuate.placement_patch`, `daemon.kube.observe.job_view`,
applied to objects with a small JSON-patch interpreter written here (add/replace/test, as RFC 6902 says). Faked:
the objects (dicts in the API's shape) and the API server.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from daemon.domain.actuation import Action, Order, Placement, unsuspend_order
from daemon.domain.model import Admission, PodSetAssignment, ResourceFlavor, Toleration
from daemon.kube.actuate import JobActuator, placement_patch
from daemon.kube.errors import Permanent
from daemon.kube.jobkinds import KINDS
from daemon.kube.observe import job_view
from daemon.kube.webhook import admission_response, suspend_patch, webhook_configuration
from daemon.manifests import parse_object
from daemon.stages.ports import Done, Failed
from tests.unit.test_distributed_adapters import group, jobset, pod, pytorchjob, rayjob, rjob


def apply_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].strip("/").split("/")]
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]  # KeyError: a missing parent
        if op["op"] == "test":
            assert target[last] == op["value"]
        elif op["op"] == "replace":
            assert last in target
            target[last] = op["value"]
        else:
            target[last] = op["value"]
    return out


def unsuspended(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    if obj["kind"] == "PyTorchJob":
        out["spec"].pop("runPolicy", None)
    else:
        out["spec"].pop("suspend", None)
    return out


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(unsuspended(pytorchjob(Worker={"template": pod()})), id="pytorchjob without runPolicy"),
        pytest.param(
            {**pytorchjob(Worker={"template": pod()}), "spec": {"runPolicy": {"backoffLimit": 3}, "x": 1}},
            id="pytorchjob with a runPolicy",
        ),
        pytest.param(unsuspended(rayjob(group("w"))), id="rayjob"),
        pytest.param(unsuspended(jobset(rjob("w"))), id="jobset"),
    ],
)
def test_the_webhook_suspends_each_kind_where_it_is_suspended(obj: dict[str, Any]) -> None:
    patched = apply_patch(obj, suspend_patch(obj) or [])
    assert job_view(patched).suspended
    assert patched["metadata"]["annotations"] == {"admitd.io/admission": ""}
    if obj["kind"] == "PyTorchJob" and "runPolicy" in obj["spec"]:
        assert patched["spec"]["runPolicy"] == {"backoffLimit": 3, "suspend": True}  # the rest of it kept
    assert suspend_patch(patched) is None  # nothing left to change


def test_the_webhook_configuration_selects_every_kind() -> None:
    rules = webhook_configuration(b"ca", url="https://x", service=None, failure_policy="Fail")["webhooks"][0]["rules"]
    assert {(r["apiGroups"][0], r["apiVersions"][0], r["resources"][0]) for r in rules} == {
        ("batch", "v1", "jobs"),
        ("kubeflow.org", "v1", "pytorchjobs"),
        ("ray.io", "v1", "rayjobs"),
        ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    }


FLAVORS = {
    "h100": ResourceFlavor(name="h100", node_labels={"gpu-type": "h100"}),
    "a100": ResourceFlavor(
        name="a100",
        node_labels={"gpu-type": "a100"},
        tolerations=(Toleration(key="a100", operator="Exists", effect="NoSchedule"),),
    ),
    "cpu": ResourceFlavor(name="cpu"),
}


@pytest.mark.parametrize(
    ("obj", "flavor_of", "pod_specs"),
    [
        pytest.param(
            pytorchjob(Master={"template": pod("1", gpu=1)}, Worker={"replicas": 2, "template": pod("1", gpu=1)}),
            {"master": "h100", "worker": "a100"},
            {
                "master": ("spec", "pytorchReplicaSpecs", "Master", "template", "spec"),
                "worker": ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec"),
            },
            id="pytorchjob",
        ),
        pytest.param(
            rayjob(group("small", 1, pod("1", gpu=1)), group("big", 1, pod("1", gpu=1))),
            {"head": "cpu", "small": "h100", "big": "a100", "submitter": "cpu"},
            {
                "head": ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec"),
                "small": ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template", "spec"),
                "big": ("spec", "rayClusterSpec", "workerGroupSpecs", 1, "template", "spec"),
            },
            id="rayjob (the submitter, made up by KubeRay, is not placed)",
        ),
        pytest.param(
            jobset(rjob("driver", 1, pod("1")), rjob("workers", 2, pod("1", gpu=1))),
            {"driver": "cpu", "workers": "a100"},
            {
                "driver": ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec"),
                "workers": ("spec", "replicatedJobs", 1, "template", "spec", "template", "spec"),
            },
            id="jobset",
        ),
    ],
)
def test_an_admission_places_each_pod_set_in_its_replicas_template(
    obj: dict[str, Any], flavor_of: dict[str, str], pod_specs: dict[str, tuple[Any, ...]]
) -> None:
    parsed = parse_object(obj)
    assert parsed.workload is not None
    wl = parsed.workload
    admission = Admission(
        cluster_queue="cq",
        pod_sets=tuple(
            PodSetAssignment(
                name=ps.name, count=ps.count, flavors={r: flavor_of[ps.name] for r in ps.requests}, usage={}
            )
            for ps in wl.pod_sets
        ),
    )
    order = unsuspend_order(wl, admission, FLAVORS, decision=7)
    patched = apply_patch(obj, placement_patch(wl.kind, order.placements))
    for name, path in pod_specs.items():
        spec: Any = patched
        for part in path:
            spec = spec[part]
        labels = dict(FLAVORS[flavor_of[name]].node_labels)
        assert spec["nodeSelector"] == labels, name
        expected_tolerations = [{"key": "a100", "operator": "Exists", "effect": "NoSchedule"}]
        assert spec["tolerations"] == (expected_tolerations if flavor_of[name] == "a100" else []), name
    if wl.kind == "RayJob":
        assert "submitterPodTemplate" not in patched["spec"]
    suspend = KINDS[wl.kind].suspend_pointer
    assert apply_patch(patched, [{"op": "replace", "path": suspend, "value": False}]) != patched


def test_placements_restore_the_templates_as_created() -> None:
    obj = pytorchjob(
        Master={"template": pod("1", nodeSelector={"disk": "ssd"})},
        Worker={"template": pod("1")},
    )
    placements = (
        Placement(pod_set="master", node_selector=(("disk", "ssd"),)),
        Placement(pod_set="worker"),
    )
    patched = apply_patch(obj, placement_patch("PyTorchJob", placements))
    specs = patched["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {}


def _with_status(obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "status": status}


STATUS_CASES = [
    pytest.param(pytorchjob(Worker={"template": pod()}), (True, 0, None), id="pytorchjob created suspended"),
    pytest.param(
        _with_status(
            pytorchjob(Worker={"template": pod()}),
            {"replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 3}}},
        ),
        (True, 4, None),
        id="pytorchjob: pods of every replica type count as running",
    ),
    pytest.param(
        _with_status(
            pytorchjob(Worker={"template": pod()}),
            {"conditions": [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}]},
        ),
        (True, 0, "Complete"),
        id="pytorchjob: condition Succeeded",
    ),
    pytest.param(
        _with_status(pytorchjob(Worker={"template": pod()}), {"conditions": [{"type": "Failed", "status": "True"}]}),
        (True, 0, "Failed"),
        id="pytorchjob: condition Failed",
    ),
    pytest.param(
        _with_status(rayjob(), {"jobDeploymentStatus": "Running"}), (True, 1, None), id="rayjob: running cluster"
    ),
    pytest.param(
        _with_status(rayjob(), {"jobDeploymentStatus": "Suspended"}), (True, 0, None), id="rayjob: cluster deleted"
    ),
    pytest.param(
        _with_status(rayjob(), {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}),
        (True, 0, "Complete"),
        id="rayjob: deployment Complete",
    ),
    pytest.param(
        _with_status(rayjob(), {"jobDeploymentStatus": "Failed"}), (True, 0, "Failed"), id="rayjob: deployment Failed"
    ),
    pytest.param(
        _with_status(jobset(rjob("w")), {"replicatedJobsStatus": [{"name": "w", "active": 2}]}),
        (True, 2, None),
        id="jobset: active replicated jobs",
    ),
    pytest.param(
        _with_status(jobset(rjob("w")), {"conditions": [{"type": "Completed", "status": "True"}]}),
        (True, 0, "Complete"),
        id="jobset: condition Completed",
    ),
    pytest.param(
        _with_status(jobset(rjob("w")), {"conditions": [{"type": "Failed", "status": "True"}]}),
        (True, 0, "Failed"),
        id="jobset: condition Failed",
    ),
]


@pytest.mark.parametrize(("obj", "expected"), STATUS_CASES)
def test_each_kind_says_whether_it_is_suspended_running_or_finished(
    obj: dict[str, Any], expected: tuple[bool, int, str | None]
) -> None:
    view = job_view(obj)
    assert (view.suspended, view.active, view.finished) == expected


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    answer = admission_response({"request": {"uid": "u1", "namespace": "ml", "object": obj}})
    response: dict[str, Any] = answer["response"]
    return response


def test_the_webhook_refuses_a_queued_rayjob_on_an_existing_cluster_naming_the_field() -> None:
    obj = unsuspended(rayjob(clusterSelector={"ray.io/cluster": "shared"}, shutdownAfterJobFinishes=False))
    response = _review(obj)
    assert (response["uid"], response["allowed"], response["status"]["code"]) == ("u1", False, 422)
    assert response["status"]["message"].startswith(
        "RayJob ml/train: spec.clusterSelector: a queued RayJob cannot run on an existing Ray cluster"
    )
    assert "patch" not in response


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        pytest.param(
            rayjob(shutdownAfterJobFinishes=False), "spec.shutdownAfterJobFinishes", id="rayjob keeps its cluster"
        ),
        pytest.param(
            pytorchjob(Worker={"replicas": 1, "template": {"spec": {"containers": []}}}),
            "spec.pytorchReplicaSpecs[Worker].template.spec.containers",
            id="pytorchjob replica without containers",
        ),
        pytest.param(jobset(rjob("w", -1)), "spec.replicatedJobs[0].replicas", id="jobset negative replicas"),
    ],
)
def test_the_webhook_refuses_what_admitd_could_never_admit(obj: dict[str, Any], field: str) -> None:
    response = _review(obj)
    assert response["allowed"] is False
    assert f": {field}: " in response["status"]["message"]


def test_the_webhook_leaves_unqueued_jobs_alone_and_suspends_good_ones() -> None:
    unqueued = unsuspended(rayjob(clusterSelector={"ray.io/cluster": "shared"}))
    unqueued["metadata"]["labels"] = {}
    assert _review(unqueued) == {"uid": "u1", "allowed": True}
    good = _review(unsuspended(rayjob(group("w"))))
    assert good["allowed"] is True and good["patchType"] == "JSONPatch"


@pytest.mark.parametrize(
    ("obj", "ready"),
    [
        pytest.param(
            _with_status(
                pytorchjob(Worker={"template": pod()}), {"conditions": [{"type": "Running", "status": "True"}]}
            ),
            True,
            id="pytorchjob: condition Running",
        ),
        pytest.param(
            _with_status(
                pytorchjob(Worker={"template": pod()}), {"conditions": [{"type": "Created", "status": "True"}]}
            ),
            False,
            id="pytorchjob: only created",
        ),
        pytest.param(
            _with_status(rayjob(), {"rayClusterStatus": {"state": "ready"}}), True, id="rayjob: cluster ready"
        ),
        pytest.param(_with_status(rayjob(), {"rayClusterStatus": {}}), False, id="rayjob: cluster not ready"),
        pytest.param(
            _with_status(
                jobset(rjob("a", 2), rjob("b", 1)),
                {"replicatedJobsStatus": [{"name": "a", "ready": 1, "succeeded": 1}, {"name": "b", "ready": 1}]},
            ),
            True,
            id="jobset: every replicated job ready or succeeded",
        ),
        pytest.param(
            _with_status(
                jobset(rjob("a", 2), rjob("b", 1)),
                {"replicatedJobsStatus": [{"name": "a", "ready": 1}, {"name": "b", "ready": 1}]},
            ),
            False,
            id="jobset: one replica of a not ready",
        ),
    ],
)
def test_pods_ready_as_each_kind_reports_it(obj: dict[str, Any], ready: bool) -> None:
    """waitForPodsReady compares `ready` with the admitted pod count; these kinds report the job as a whole."""
    assert (job_view(obj).ready >= 10**6) is ready


class PatchingClient:
    """Stands in for the API server on one object: applies JSON patches as RFC 6902 says (a missing parent, or a
    failed test, is a 422 and changes nothing)."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.patches: list[list[dict[str, Any]]] = []

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = "", **_: Any) -> Any:
        if method == "GET":  # the actuator asks whether a 422 came from the uid test
            return self.obj
        assert method == "PATCH"
        self.patches.append(body)
        try:
            self.obj = apply_patch(self.obj, body)
        except (KeyError, IndexError, AssertionError) as e:
            raise Permanent(method, path, 422, f"the patch does not apply: {e!r}") from e
        return self.obj


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(unsuspended(pytorchjob(Worker={"template": pod()})), id="no runPolicy (the webhook bypassed)"),
        pytest.param(
            {
                **pytorchjob(Worker={"template": pod()}),
                "spec": {"runPolicy": {"backoffLimit": 2}, "pytorchReplicaSpecs": {"Worker": {"template": pod()}}},
            },
            id="a runPolicy without suspend",
        ),
    ],
)
async def test_a_pytorchjob_found_running_is_suspended_whatever_its_run_policy(obj: dict[str, Any]) -> None:
    obj["metadata"]["uid"] = "u1"
    client = PatchingClient(obj)
    order = Order(
        job="ml/train",
        kind="PyTorchJob",
        uid="u1",
        decision=0,
        action=Action.SUSPEND,
        cluster_queue="",
        placements=(),
        reason="StartedUnsuspended",
    )
    assert await JobActuator(client).carry_out(order) == Done()  # type: ignore[arg-type]
    assert client.obj["spec"]["runPolicy"]["suspend"] is True
    assert client.obj["spec"]["runPolicy"].get("backoffLimit") == obj["spec"].get("runPolicy", {}).get("backoffLimit")


async def test_a_recreated_pytorchjob_is_not_suspended_by_the_fallback() -> None:
    obj = unsuspended(pytorchjob(Worker={"template": pod()}))
    obj["metadata"]["uid"] = "new"
    client = PatchingClient(obj)
    order = Order(
        job="ml/train", kind="PyTorchJob", uid="old", decision=0, action=Action.SUSPEND, cluster_queue="", placements=()
    )
    outcome = await JobActuator(client).carry_out(order)  # type: ignore[arg-type]
    assert isinstance(outcome, Failed) and outcome.permanent
    assert "runPolicy" not in client.obj["spec"]
