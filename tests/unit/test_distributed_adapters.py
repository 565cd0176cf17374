"""PyTorchJob, RayJob and JobSet -> Workload (`daemon.manifests.distributed`), table-driven.

Real: the three adapters, the Job adapter's pod-template reading they share, `parse_object` (the loader's entry),
the registry, and `pod_spec_pointers`. Faked: the objects, plain dicts built by the small builders below in the
shape the Kubernetes API returns; expected pod set names, counts and rejections follow Kueue's integrations
(pkg/controller/jobs/{kubeflow,rayjob,raycluster,jobset}).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from daemon.domain.model import PodSet, Toleration, Workload
from daemon.manifests import (
    QUEUE_NAME_LABEL,
    JobSetAdapter,
    PyTorchJobAdapter,
    RayJobAdapter,
    adapter_for,
    parse_documents,
    parse_object,
)
from daemon.manifests.distributed import pod_spec_pointers, suspend_pointer

MI = 2**20


def pod(cpu: str = "1", gpu: int | None = None, **extra: Any) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu}
    if gpu is not None:
        requests["nvidia.com/gpu"] = gpu
    return {
        "spec": {"containers": [{"name": "c", "image": "img", "resources": {"requests": requests}}], **extra},
    }


def meta(name: str = "train", queue: str | None = "q") -> dict[str, Any]:
    labels = {QUEUE_NAME_LABEL: queue} if queue else {}
    return {"name": name, "namespace": "ml", "labels": labels}


def pytorchjob(**replicas: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta(),
        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": replicas},
    }


def rayjob(*groups: dict[str, Any], head: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta(),
        "spec": {
            "suspend": True,
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"template": head or pod("2")},
                "workerGroupSpecs": list(groups),
            },
            **spec,
        },
    }


def group(name: str, replicas: Any = 1, template: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"groupName": name, "replicas": replicas, "template": template or pod("1"), **extra}


def jobset(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta(),
        "spec": {"suspend": True, "replicatedJobs": list(jobs)},
    }


def rjob(name: str, replicas: Any = 1, template: dict[str, Any] | None = None, **job_spec: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "template": {"spec": {"template": template or pod("1"), **job_spec}}}


def shape(wl: Workload) -> list[tuple[str, int, dict[str, int]]]:
    return [(ps.name, ps.count, dict(ps.requests)) for ps in wl.pod_sets]


def workload(obj: dict[str, Any]) -> Workload:
    parsed = parse_object(obj)
    assert parsed.errors == (), [str(e) for e in parsed.errors]
    assert parsed.workload is not None
    return parsed.workload


def errors(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in parse_object(obj).errors]


# --- what each kind becomes ----------------------------------------------------------------------------------------

SHAPES = [
    pytest.param(
        pytorchjob(
            Worker={"replicas": 3, "template": pod("4", gpu=1)},
            Master={"replicas": 1, "template": pod("2")},
        ),
        [("master", 1, {"cpu": 2000}), ("worker", 3, {"cpu": 4000, "nvidia.com/gpu": 1000})],
        id="pytorchjob: master then worker whatever the key order, lower-cased",
    ),
    pytest.param(
        pytorchjob(Worker={"template": pod("1")}),
        [("worker", 1, {"cpu": 1000})],
        id="pytorchjob: replicas default to 1, a worker-only job has one pod set",
    ),
    pytest.param(
        pytorchjob(Master={"replicas": 1, "template": pod("1")}, Worker={"replicas": 0, "template": pod("1")}),
        [("master", 1, {"cpu": 1000}), ("worker", 0, {"cpu": 1000})],
        id="pytorchjob: zero workers is a pod set of zero pods",
    ),
    pytest.param(
        rayjob(group("Small", 2), group("gpu", 1, pod("8", gpu=2), numOfHosts=4)),
        [
            ("head", 1, {"cpu": 2000}),
            ("small", 2, {"cpu": 1000}),
            ("gpu", 4, {"cpu": 8000, "nvidia.com/gpu": 2000}),
            ("submitter", 1, {"cpu": 500, "memory": 200 * MI * 1000}),
        ],
        id="rayjob: head, groups by lower-cased groupName (replicas x numOfHosts), KubeRay's default submitter",
    ),
    pytest.param(
        rayjob(group("w", None), submissionMode="HTTPMode"),
        [("head", 1, {"cpu": 2000}), ("w", 1, {"cpu": 1000})],
        id="rayjob: HTTPMode has no submitter pod; replicas default to 1",
    ),
    pytest.param(
        rayjob(submitterPodTemplate=pod("250m")),
        [("head", 1, {"cpu": 2000}), ("submitter", 1, {"cpu": 250})],
        id="rayjob: a given submitterPodTemplate is counted instead of the default",
    ),
    pytest.param(
        jobset(rjob("driver"), rjob("workers", 4, pod("2", gpu=1), parallelism=2, completions=2)),
        [("driver", 1, {"cpu": 1000}), ("workers", 8, {"cpu": 2000, "nvidia.com/gpu": 1000})],
        id="jobset: one pod set per replicated job, replicas x parallelism",
    ),
    pytest.param(
        jobset(rjob("w", 3, parallelism=5, completions=2)),
        [("w", 6, {"cpu": 1000})],
        id="jobset: a Job never runs more pods than completions (min(parallelism, completions))",
    ),
]


@pytest.mark.parametrize(("obj", "expected"), SHAPES)
def test_pod_sets_as_kueue_names_and_counts_them(obj: dict[str, Any], expected: list[Any]) -> None:
    wl = workload(obj)
    assert shape(wl) == expected
    assert (wl.kind, wl.namespace, wl.name, wl.queue_name) == (obj["kind"], "ml", "train", "q")


def test_pod_template_reading_is_the_job_adapters() -> None:
    """Init containers, sidecars and overhead are counted as for a Job; nodeSelector and tolerations per pod set."""
    worker = {
        "spec": {
            "initContainers": [
                {"name": "fetch", "resources": {"requests": {"cpu": "3"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
            ],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "overhead": {"cpu": "100m"},
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }
    }
    wl = workload(pytorchjob(Master={"template": pod("1")}, Worker={"replicas": 2, "template": worker}))
    master, w = wl.pod_sets
    # max(init 3, containers 1 + sidecar 0.5) + overhead 0.1
    assert w == PodSet(
        name="worker",
        count=2,
        requests={"cpu": 3100},
        node_selector={"disk": "ssd"},
        tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
    )
    assert master.node_selector == {} and master.tolerations == ()


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            _pt := pytorchjob(
                Master={"template": pod("1", priorityClassName="low")},
                Worker={"template": pod("1", priorityClassName="high")},
            ),
            "low",
            id="pytorchjob: the first replica's priorityClassName (Master before Worker)",
        ),
        pytest.param(
            {**_pt, "spec": {**_pt["spec"], "runPolicy": {"schedulingPolicy": {"priorityClass": "urgent"}}}},
            "urgent",
            id="pytorchjob: runPolicy.schedulingPolicy.priorityClass comes first",
        ),
        pytest.param(
            rayjob(head=pod("1", priorityClassName="x")),
            None,
            id="rayjob: Kueue reads no pod priority class for a RayJob",
        ),
    ],
)
def test_pod_priority_class(obj: dict[str, Any], expected: str | None) -> None:
    assert workload(obj).pod_priority_class == expected


# --- bad input: the object and the field ---------------------------------------------------------------------------

BAD = [
    pytest.param(
        pytorchjob(Master={"template": {"spec": {"containers": []}}}),
        [("spec.pytorchReplicaSpecs[Master].template.spec.containers", "must have at least 1 item (got 0)")],
        id="pytorchjob: a replica spec without containers",
    ),
    pytest.param(
        pytorchjob(Worker={"replicas": -2, "template": pod()}),
        [("spec.pytorchReplicaSpecs[Worker].replicas", "must be at least 0 (got -2)")],
        id="pytorchjob: negative replicas",
    ),
    pytest.param(
        pytorchjob(Master={"template": pod()}, Chief={"template": pod()}),
        [
            (
                "spec.pytorchReplicaSpecs[Chief]",
                "unknown replica type 'Chief': a PyTorchJob has Master and Worker (spelt so)",
            )
        ],
        id="pytorchjob: an unknown replica type",
    ),
    pytest.param(
        pytorchjob(Master={"replicas": 2, "template": pod()}),
        [("spec.pytorchReplicaSpecs[Master].replicas", "must be at most 1 for the Master (got 2)")],
        id="pytorchjob: two masters",
    ),
    pytest.param(
        pytorchjob(Worker={"replicas": 1}),
        [("spec.pytorchReplicaSpecs[Worker].template", "required")],
        id="pytorchjob: a replica without a template",
    ),
    pytest.param(
        pytorchjob(),
        [("spec.pytorchReplicaSpecs", "must have a Master or a Worker replica spec")],
        id="pytorchjob: no replica specs",
    ),
    pytest.param(
        {**pytorchjob(Worker={"template": pod(), "replica": 2})},
        [
            (
                "spec.pytorchReplicaSpecs[Worker].replica",
                "unknown field (known fields: replicas, restartPolicy, template)",
            )
        ],
        id="pytorchjob: a misspelt replica field",
    ),
    pytest.param(
        rayjob(clusterSelector={"ray.io/cluster": "shared"}),
        [
            (
                "spec.clusterSelector",
                "a queued RayJob cannot run on an existing Ray cluster: admitd admits the cluster a RayJob creates "
                "from its rayClusterSpec (remove clusterSelector, or the queue-name label)",
            )
        ],
        id="rayjob: on an existing cluster",
    ),
    pytest.param(
        rayjob(shutdownAfterJobFinishes=False),
        [
            (
                "spec.shutdownAfterJobFinishes",
                "must be true for a queued RayJob (got false): a cluster kept after the job finishes would hold its "
                "queue's quota",
            )
        ],
        id="rayjob: keeps its cluster after finishing",
    ),
    pytest.param(
        rayjob(group("w", -1)),
        [("spec.rayClusterSpec.workerGroupSpecs[0].replicas", "must be at least 0 (got -1)")],
        id="rayjob: negative replicas",
    ),
    pytest.param(
        rayjob(group("Head")),
        [("spec.rayClusterSpec.workerGroupSpecs[0].groupName", "'head' is reserved for the head group's pod set")],
        id="rayjob: a worker group named head",
    ),
    pytest.param(
        rayjob(group("a"), group("A")),
        [
            (
                "spec.rayClusterSpec.workerGroupSpecs[1].groupName",
                "'A' names the same pod set as spec.rayClusterSpec.workerGroupSpecs[0].groupName",
            )
        ],
        id="rayjob: two groups that become the same pod set",
    ),
    pytest.param(
        rayjob(group("w", template={"spec": {}})),
        [("spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers", "required")],
        id="rayjob: a worker group without containers",
    ),
    pytest.param(
        {**rayjob(), "spec": {"suspend": True, "shutdownAfterJobFinishes": True}},
        [("spec.rayClusterSpec", "required")],
        id="rayjob: no cluster spec",
    ),
    pytest.param(
        rayjob(*(group(f"g{i}") for i in range(7))),
        [("spec.rayClusterSpec.workerGroupSpecs", "a RayJob becomes 9 pod sets; a workload may have at most 8")],
        id="rayjob: more pod sets than a workload holds",
    ),
    pytest.param(
        jobset(rjob("w", -1)),
        [("spec.replicatedJobs[0].replicas", "must be at least 0 (got -1)")],
        id="jobset: negative replicas",
    ),
    pytest.param(
        jobset(rjob("w", 1, {"spec": {"containers": []}})),
        [("spec.replicatedJobs[0].template.spec.template.spec.containers", "must have at least 1 item (got 0)")],
        id="jobset: a replicated job without containers",
    ),
    pytest.param(
        jobset(rjob("w"), rjob("w")),
        [("spec.replicatedJobs[1].name", "'w' is already the name of spec.replicatedJobs[0]")],
        id="jobset: two replicated jobs of one name",
    ),
    pytest.param(
        jobset(),
        [("spec.replicatedJobs", "must have at least 1 item (got 0)")],
        id="jobset: no replicated jobs",
    ),
    pytest.param(
        jobset(rjob("w", 1, parallelism=-1)),
        [("spec.replicatedJobs[0].template.spec.parallelism", "must be at least 0 (got -1)")],
        id="jobset: negative parallelism",
    ),
]


@pytest.mark.parametrize(("obj", "expected"), BAD)
def test_bad_input_names_the_field(obj: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    parsed = parse_object(obj)
    assert [(e.field, e.message) for e in parsed.errors] == expected
    assert parsed.workload is None and parsed.raw_job is None
    assert all(str(e).startswith(f"{obj['kind']} ml/train: ") for e in parsed.errors)


def test_adapter_raises_the_first_problem_naming_object_and_field() -> None:
    obj = pytorchjob(Worker={"replicas": -1, "template": pod()})
    with pytest.raises(ValueError, match=r"^PyTorchJob ml/train: spec.pytorchReplicaSpecs\[Worker\].replicas: "):
        PyTorchJobAdapter().to_workload(obj, created_at=0, uid="u")


def test_unqueued_rayjob_on_an_existing_cluster_is_left_alone() -> None:
    """Kueue checks only jobs it queues; without the queue-name label nothing is rejected and nothing managed."""
    obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta(queue=None),
        "spec": {"clusterSelector": {"ray.io/cluster": "shared"}},
    }
    parsed = parse_object(obj)
    assert parsed.errors == ()
    adapter = adapter_for("ray.io/v1", "RayJob")
    assert adapter is not None and not adapter.is_managed(obj)


def test_one_bad_job_does_not_stop_the_next_document() -> None:
    text = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: bad, labels: {kueue.x-k8s.io/queue-name: q}}
spec: {pytorchReplicaSpecs: {Worker: {replicas: -1, template: {spec: {containers: [{name: c}]}}}}}
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: good, labels: {kueue.x-k8s.io/queue-name: q}}
spec: {replicatedJobs: [{name: w, replicas: 2, template: {spec: {template: {spec: {containers: [{name: c}]}}}}}]}
"""
    bad, good = parse_documents(text)
    assert [str(e) for e in bad.errors] == [
        "PyTorchJob default/bad: spec.pytorchReplicaSpecs[Worker].replicas: must be at least 0 (got -1)"
    ]
    assert good.ok and good.workload is not None and shape(good.workload) == [("w", 2, {})]


# --- registry and actuation paths ----------------------------------------------------------------------------------


def test_the_three_kinds_are_registered() -> None:
    assert isinstance(adapter_for("kubeflow.org/v1", "PyTorchJob"), PyTorchJobAdapter)
    assert isinstance(adapter_for("ray.io/v1", "RayJob"), RayJobAdapter)
    assert isinstance(adapter_for("jobset.x-k8s.io/v1alpha2", "JobSet"), JobSetAdapter)
    assert adapter_for("ray.io/v1alpha1", "RayJob") is None


def test_unsupported_version_lists_the_supported_one() -> None:
    obj = copy.deepcopy(rayjob())
    obj["apiVersion"] = "ray.io/v1alpha1"
    assert errors(obj) == [("apiVersion", "unsupported apiVersion 'ray.io/v1alpha1' for RayJob (supported: ray.io/v1)")]


def _resolve(obj: Any, pointer: str) -> Any:
    for part in pointer.strip("/").split("/"):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pytorchjob(Master={"template": pod("1")}, Worker={"template": pod("2")}), id="pytorchjob"),
        pytest.param(pytorchjob(Worker={"template": pod("2")}), id="pytorchjob worker only"),
        pytest.param(rayjob(group("A", 1, pod("3")), group("b", 2, pod("4"))), id="rayjob"),
        pytest.param(jobset(rjob("x", 1, pod("5")), rjob("y", 1, pod("6"))), id="jobset"),
    ],
)
def test_pod_spec_pointers_find_each_pod_sets_template(obj: dict[str, Any]) -> None:
    """Each pointer leads to the pod spec the pod set was read from (the same requests)."""
    wl = workload(obj)
    pointers = pod_spec_pointers(wl.kind, [ps.name for ps in wl.pod_sets])
    for ps in wl.pod_sets:
        pointer = pointers[ps.name]
        if pointer is None:
            assert (wl.kind, ps.name) == ("RayJob", "submitter")
            continue
        cpu = _resolve(obj, pointer)["containers"][0]["resources"]["requests"]["cpu"]
        assert int(cpu) * 1000 == ps.requests["cpu"]
    suspend = suspend_pointer(wl.kind)
    assert _resolve(obj, suspend) is True
