"""batch/v1 Job -> Workload (`daemon.manifests.BatchJobAdapter`) and the adapter registry.

Real: the adapter and its request arithmetic, checked against values worked out by hand from Kubernetes'
`resourcehelper.PodRequests` and Kueue's `podsCount`. Faked: the Job objects, built as plain dicts by the fluent
`job(...)` builder below (the shape the Kubernetes API returns); one stand-in adapter exercises the registry.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from daemon.domain.model import Millis, PodSet, Toleration, Workload
from daemon.manifests import (
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    BatchJobAdapter,
    JobAdapter,
    ManifestError,
    adapter_for,
    parse_object,
    register_adapter,
)
from daemon.manifests import jobs as jobs_module

GI = 2**30
MI = 2**20
ADAPTER = BatchJobAdapter()


class JobBuilder:
    """``job("train").queue("research").container("main", requests={"cpu": "1"}).obj()``"""

    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "labels": {}},
            "spec": {"template": {"spec": {"containers": [], "restartPolicy": "Never"}}},
        }

    @property
    def _pod(self) -> dict[str, Any]:
        pod: dict[str, Any] = self._obj["spec"]["template"]["spec"]
        return pod

    def queue(self, name: str) -> JobBuilder:
        self._obj["metadata"]["labels"][QUEUE_NAME_LABEL] = name
        return self

    def priority(self, name: str) -> JobBuilder:
        self._obj["metadata"]["labels"][PRIORITY_CLASS_LABEL] = name
        return self

    def namespace(self, name: str | None) -> JobBuilder:
        if name is None:
            del self._obj["metadata"]["namespace"]
        else:
            self._obj["metadata"]["namespace"] = name
        return self

    def parallelism(self, n: object) -> JobBuilder:
        self._obj["spec"]["parallelism"] = n
        return self

    def completions(self, n: int) -> JobBuilder:
        self._obj["spec"]["completions"] = n
        return self

    def container(
        self, name: str, requests: Mapping[str, object] | None = None, limits: Mapping[str, object] | None = None
    ) -> JobBuilder:
        self._pod["containers"].append(_container(name, requests, limits))
        return self

    def init(
        self, name: str, requests: Mapping[str, object] | None = None, limits: Mapping[str, object] | None = None
    ) -> JobBuilder:
        self._pod.setdefault("initContainers", []).append(_container(name, requests, limits))
        return self

    def sidecar(self, name: str, requests: Mapping[str, object]) -> JobBuilder:
        self._pod.setdefault("initContainers", []).append(
            {**_container(name, requests, None), "restartPolicy": "Always"}
        )
        return self

    def overhead(self, **amounts: object) -> JobBuilder:
        self._pod["overhead"] = amounts
        return self

    def pod_resources(
        self, requests: Mapping[str, object] | None = None, limits: Mapping[str, object] | None = None
    ) -> JobBuilder:
        self._pod["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
        return self

    def pod(self, **fields: object) -> JobBuilder:
        self._pod.update(fields)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


def _container(name: str, requests: Mapping[str, object] | None, limits: Mapping[str, object] | None) -> dict[str, Any]:
    resources = {k: dict(v) for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {"name": name, "image": "busybox", "resources": resources}


def job(name: str = "train") -> JobBuilder:
    return JobBuilder(name)


def requests_of(builder: JobBuilder) -> Mapping[str, int]:
    return ADAPTER.to_workload(builder.obj(), created_at=0, uid="u").pod_sets[0].requests


# --- request arithmetic ---------------------------------------------------------------------------------------

REQUEST_CASES: list[tuple[str, JobBuilder, dict[str, int]]] = [
    (
        "one container: cpu in milli, memory in milli-bytes",
        job().container("main", {"cpu": "500m", "memory": "1Gi"}),
        {"cpu": 500, "memory": GI * 1000},
    ),
    (
        "containers are summed per resource",
        job().container("a", {"cpu": "1", "memory": "1Gi"}).container("b", {"cpu": "250m", "nvidia.com/gpu": 2}),
        {"cpu": 1250, "memory": GI * 1000, "nvidia.com/gpu": 2000},
    ),
    (
        "an init container larger than the containers sets the floor",
        job().container("main", {"cpu": "1", "memory": "1Gi"}).init("setup", {"cpu": "3", "memory": "512Mi"}),
        {"cpu": 3000, "memory": GI * 1000},
    ),
    (
        "init containers do not add up: the largest counts",
        job().container("main", {"cpu": "1"}).init("a", {"cpu": "2"}).init("b", {"cpu": "1500m"}),
        {"cpu": 2000},
    ),
    (
        "a sidecar is added to the containers",
        job().container("main", {"cpu": "1"}).sidecar("proxy", {"cpu": "200m", "memory": "64Mi"}),
        {"cpu": 1200, "memory": 64 * MI * 1000},
    ),
    (
        "an init container after a sidecar runs next to it",
        job().container("main", {"cpu": "1"}).sidecar("proxy", {"cpu": "500m"}).init("setup", {"cpu": "2"}),
        {"cpu": 2500},
    ),
    (
        "an init container before a sidecar runs alone",
        job().container("main", {"cpu": "1"}).init("setup", {"cpu": "2"}).sidecar("proxy", {"cpu": "500m"}),
        {"cpu": 2000},
    ),
    (
        "the pod overhead is added last",
        job()
        .container("main", {"cpu": "1", "memory": "1Gi"})
        .init("setup", {"cpu": "4"})
        .overhead(cpu="100m", memory="64Mi"),
        {"cpu": 4100, "memory": (GI + 64 * MI) * 1000},
    ),
    (
        "a limit without a request counts as the request",
        job().container("main", limits={"cpu": "2", "nvidia.com/gpu": 1}),
        {"cpu": 2000, "nvidia.com/gpu": 1000},
    ),
    (
        "a request below its limit is the request",
        job().container("main", requests={"cpu": "1"}, limits={"cpu": "2", "memory": "2Gi"}),
        {"cpu": 1000, "memory": 2 * GI * 1000},
    ),
    (
        "an init container's limits count as its requests too",
        job().container("main", {"cpu": "1"}).init("setup", limits={"cpu": "3"}),
        {"cpu": 3000},
    ),
    (
        "pod-level requests replace the container sum for cpu and memory only",
        job()
        .container("a", {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1})
        .container("b", {"cpu": "1"})
        .pod_resources(requests={"cpu": "1500m"}, limits={"memory": "4Gi"}),
        {"cpu": 1500, "memory": 4 * GI * 1000, "nvidia.com/gpu": 1000},
    ),
    (
        "sums are exact before rounding: two 100n cpus are one milli, not two",
        job().container("a", {"cpu": "100n"}).container("b", {"cpu": "100n"}),
        {"cpu": 1},
    ),
    (
        "anything but cpu rounds up to whole units, as Kueue's ResourceValue",
        job().container("main", {"memory": "1500m", "example.com/foo": "0.5"}),
        {"example.com/foo": 1000, "memory": 2000},
    ),
    (
        "YAML numbers are exact quantities",
        job().container("main", {"cpu": 0.5, "nvidia.com/gpu": 8}),
        {"cpu": 500, "nvidia.com/gpu": 8000},
    ),
    (
        "a zero request is dropped, as Kueue's flavor assigner skips it",
        job().container("main", {"cpu": "1", "nvidia.com/gpu": 0}),
        {"cpu": 1000},
    ),
    (
        "a container without resources requests nothing",
        job().container("main"),
        {},
    ),
]


@pytest.mark.parametrize(("builder", "expected"), [c[1:] for c in REQUEST_CASES], ids=[c[0] for c in REQUEST_CASES])
def test_per_pod_requests(builder: JobBuilder, expected: dict[str, int]) -> None:
    assert dict(requests_of(builder)) == expected


def test_requests_are_sorted_by_resource_name() -> None:
    b = job().container("main", {"nvidia.com/gpu": 1, "memory": "1Gi", "cpu": "1"})
    assert list(requests_of(b)) == ["cpu", "memory", "nvidia.com/gpu"]


# --- pod count --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("builder", "count"),
    [
        (job().container("main"), 1),
        (job().container("main").parallelism(4), 4),
        (job().container("main").parallelism(4).completions(2), 2),
        (job().container("main").parallelism(3).completions(10), 3),
        (job().container("main").completions(5), 1),
        (job().container("main").parallelism(0), 0),
    ],
    ids=[
        "parallelism defaults to 1",
        "parallelism pods run at once",
        "fewer completions than parallelism: completions",
        "more completions than parallelism: parallelism",
        "completions alone: the default parallelism 1",
        "parallelism 0 (a paused job) has no pods",
    ],
)
def test_pod_count(builder: JobBuilder, count: int) -> None:
    assert ADAPTER.to_workload(builder.obj(), created_at=0, uid="u").pod_sets[0].count == count


# --- the whole Workload -------------------------------------------------------------------------------------------


def test_workload_carries_identity_queue_priority_and_placement() -> None:
    obj = (
        job("train")
        .queue("research-queue")
        .priority("high")
        .parallelism(2)
        .container("main", {"cpu": "2", "nvidia.com/gpu": 1})
        .pod(
            nodeSelector={"cloud.example.com/zone": "b"},
            tolerations=[
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "spot", "value": "true"},
            ],
            priorityClassName="batch-high",
        )
        .obj()
    )

    workload = ADAPTER.to_workload(obj, created_at=1_700_000_000_000, uid="6b1f")

    assert workload == Workload(
        namespace="ml",
        name="train",
        kind="Job",
        uid="6b1f",
        created_at=1_700_000_000_000,
        queue_name="research-queue",
        priority_class="high",
        pod_priority_class="batch-high",
        pod_sets=(
            PodSet(
                name="main",
                count=2,
                requests={"cpu": 2000, "nvidia.com/gpu": 1000},
                node_selector={"cloud.example.com/zone": "b"},
                tolerations=(
                    Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
                    Toleration(key="spot", operator="Equal", value="true"),
                ),
            ),
        ),
    )


def test_namespace_defaults_and_missing_labels_are_none() -> None:
    workload = ADAPTER.to_workload(job().namespace(None).container("main").obj(), created_at=5, uid="u")
    assert (workload.namespace, workload.queue_name, workload.priority_class, workload.pod_priority_class) == (
        "default",
        None,
        None,
        None,
    )
    assert workload.key == "default/train"


@pytest.mark.parametrize(
    ("obj", "managed"),
    [
        (job().queue("research-queue").container("main").obj(), True),
        (job().container("main").obj(), False),
        (job().queue("").container("main").obj(), False),
        ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x", "labels": None}}, False),
        ({"apiVersion": "batch/v1", "kind": "Job"}, False),
    ],
    ids=["labelled", "no queue label", "an empty queue label", "null labels", "no metadata at all"],
)
def test_is_managed(obj: Mapping[str, object], managed: bool) -> None:
    assert ADAPTER.is_managed(obj) is managed


# --- errors -------------------------------------------------------------------------------------------------------

C0 = "spec.template.spec.containers[0]"
_HINT = (
    "expected a number with an optional suffix, e.g. 500m, 2, 64Gi, 1.5e3 "
    "(suffixes n u m k M G T P E Ki Mi Gi Ti Pi Ei)"
)

JOB_ERROR_CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "a request that is no quantity names the container and the field",
        job().container("trainer", {"cpu": "two"}).obj(),
        f"Job ml/train: {C0}.resources.requests[cpu]: container \"trainer\": invalid quantity 'two': {_HINT}",
    ),
    (
        "a bad limit in an init container",
        job().container("main").init("setup", limits={"memory": "1GB"}).obj(),
        'Job ml/train: spec.template.spec.initContainers[0].resources.limits[memory]: container "setup": '
        f"invalid quantity '1GB': {_HINT}",
    ),
    (
        "a negative request",
        job().container("trainer", {"cpu": "-1"}).obj(),
        f'Job ml/train: {C0}.resources.requests[cpu]: container "trainer": must not be negative (got -1)',
    ),
    (
        "a request above its limit",
        job().container("trainer", {"memory": "2Gi"}, {"memory": "1Gi"}).obj(),
        f'Job ml/train: {C0}.resources.requests[memory]: container "trainer": request 2Gi must not exceed limit 1Gi',
    ),
    (
        "a bad overhead",
        job().container("main").overhead(cpu="lots").obj(),
        f"Job ml/train: spec.template.spec.overhead[cpu]: pod overhead: invalid quantity 'lots': {_HINT}",
    ),
    (
        "a null request",
        job().container("trainer", {"cpu": None}).obj(),
        f'Job ml/train: {C0}.resources.requests[cpu]: container "trainer": expected a quantity, got null',
    ),
    (
        "a job without containers",
        job().obj(),
        "Job ml/train: spec.template.spec.containers: must have at least 1 item (got 0)",
    ),
    (
        "parallelism written as a string",
        job().container("main").parallelism("4").obj(),
        "Job ml/train: spec.parallelism: expected an integer, got a string ('4')",
    ),
    (
        "negative parallelism",
        job().container("main").parallelism(-1).obj(),
        "Job ml/train: spec.parallelism: must be at least 0 (got -1)",
    ),
    (
        "a job without a name",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"namespace": "ml"},
            "spec": {"template": {"spec": {"containers": [{"name": "a"}]}}},
        },
        "Job: metadata.name: required",
    ),
    (
        "a job without a pod template",
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"}, "spec": {}},
        "Job ml/train: spec.template: required",
    ),
]


@pytest.mark.parametrize(("obj", "message"), [c[1:] for c in JOB_ERROR_CASES], ids=[c[0] for c in JOB_ERROR_CASES])
def test_bad_jobs_raise_a_specific_manifest_error(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError) as e:
        ADAPTER.to_workload(obj, created_at=0, uid="u")
    assert str(e.value) == message
    assert e.value.kind == "Job"


@pytest.mark.parametrize(
    ("obj", "errs"),
    [
        (
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}},
            [("spec", "required")],
        ),
        (
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": {"template": {}}},
            [("spec.template.spec", "required")],
        ),
    ],
    ids=["no spec: one error, not one per missing level", "no pod spec in the template"],
)
def test_a_missing_level_is_reported_once(obj: dict[str, Any], errs: list[tuple[str, str]]) -> None:
    assert [(e.field, e.message) for e in parse_object(obj).errors] == errs


def test_parse_object_reports_every_problem_of_a_job() -> None:
    obj = job().container("a", {"cpu": "x"}).container("b", {"memory": "-1"}).obj()
    parsed = parse_object(obj)
    assert [e.field for e in parsed.errors] == [
        "spec.template.spec.containers[0].resources.requests[cpu]",
        "spec.template.spec.containers[1].resources.requests[memory]",
    ]


# --- the registry -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FakePyTorchJobAdapter:
    """Stands in for a future adapter: one pod set per replica type would come from the object; here, one."""

    api_version: str = "kubeflow.org/v1"
    kind: str = "PyTorchJob"

    def to_workload(self, obj: Mapping[str, object], *, created_at: Millis, uid: str) -> Workload:
        if "spec" not in obj:
            raise ManifestError("required", kind=self.kind, name="x", field="spec")
        return Workload(
            namespace="ml", name="pt", kind=self.kind, uid=uid, created_at=created_at, queue_name="q", pod_sets=()
        )

    def is_managed(self, obj: Mapping[str, object]) -> bool:
        return True


@pytest.fixture
def registry() -> Iterator[None]:
    saved = dict(jobs_module._registry)
    yield
    jobs_module._registry.clear()
    jobs_module._registry.update(saved)


def test_batch_job_adapter_is_registered() -> None:
    adapter = adapter_for("batch/v1", "Job")
    assert isinstance(adapter, BatchJobAdapter)
    assert (adapter.api_version, adapter.kind) == ("batch/v1", "Job")
    assert adapter_for("batch/v2", "Job") is None


@pytest.mark.usefixtures("registry")
def test_a_registered_adapter_plugs_in_without_engine_changes() -> None:
    fake: JobAdapter = FakePyTorchJobAdapter()
    register_adapter(fake)
    doc = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "ml"},
        "spec": {},
    }

    assert adapter_for("kubeflow.org/v1", "PyTorchJob") is fake
    parsed = parse_object(doc)
    assert (parsed.raw_job, parsed.errors, parsed.namespace) == (doc, (), "ml")

    broken = parse_object({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt"}})
    assert [str(e) for e in broken.errors] == ["PyTorchJob x: spec: required"]
    assert broken.raw_job is None


def test_active_deadline_seconds_is_read_in_milliseconds_and_checked() -> None:
    base = job("train").queue("q").container("main", {"cpu": "1"}).obj()
    assert ADAPTER.to_workload(base, created_at=0, uid="u").active_deadline_ms is None
    timed = copy.deepcopy(base)
    timed["spec"]["activeDeadlineSeconds"] = 600
    assert ADAPTER.to_workload(timed, created_at=0, uid="u").active_deadline_ms == 600_000
    timed["spec"]["activeDeadlineSeconds"] = 0
    with pytest.raises(ManifestError) as e:
        ADAPTER.to_workload(timed, created_at=0, uid="u")
    assert "spec.activeDeadlineSeconds" in str(e.value)
