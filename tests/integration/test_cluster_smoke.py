"""Smoke tests of the local control plane that the integration layer runs against.

Real: etcd 3.6, kube-apiserver, kube-controller-manager (Job, garbage-collector, namespace,
node-lifecycle and service-account controllers) and kube-scheduler, all Kubernetes v1.36 built
from tests/cluster/; etcd compaction is etcd's own, requested through its API.
Faked: the kubelets. kwok plays 8 GPU nodes; it marks a bound pod Running at once and Succeeded
after the delay in its annotation pod-complete.stage.kwok.x-k8s.io/delay. No container runs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

if TYPE_CHECKING:
    from .conftest import KubeCluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
T = TypeVar("T")


def make_job(name: str, *, pods: int, delay: str, suspend: bool = False) -> client.V1Job:
    """A Job whose `pods` pods each ask for one H100 GPU and "run" for `delay`."""
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            parallelism=pods,
            completions=pods,
            backoff_limit=0,
            suspend=suspend,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(annotations={COMPLETE_DELAY: delay}),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    node_selector={"gpu-type": "h100"},
                    containers=[
                        client.V1Container(
                            name="main",
                            image="example.invalid/never-pulled:1",
                            resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                        )
                    ],
                ),
            ),
        ),
    )


async def eventually(what: str, probe: Callable[[], Awaitable[T | None]], within_s: float = 60.0) -> T:
    """Polls `probe` until it returns something other than None."""
    deadline = time.monotonic() + within_s
    while True:
        result = await probe()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.2)


def has_condition(conditions: list[client.V1JobCondition] | list[client.V1NodeCondition] | None, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in conditions or ())


async def job_with_condition(batch: client.BatchV1Api, namespace: str, name: str, kind: str) -> client.V1Job:
    async def probe() -> client.V1Job | None:
        job = await batch.read_namespaced_job(name, namespace)
        return job if has_condition(job.status.conditions, kind) else None

    return await eventually(f"Job {name} condition {kind}", probe)


async def job_pods(core: client.CoreV1Api, namespace: str, name: str) -> list[client.V1Pod]:
    pods = await core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={name}")
    return list(pods.items)


async def test_the_fake_nodes_carry_gpu_labels_and_capacity(kube_api: client.ApiClient) -> None:
    nodes = (await client.CoreV1Api(kube_api).list_node(label_selector="type=kwok")).items

    by_type = Counter(node.metadata.labels["gpu-type"] for node in nodes)
    for node in nodes:
        assert node.status.allocatable == {
            "nvidia.com/gpu": "8",
            "cpu": "64",
            "memory": "512Gi",
            "pods": "110",
        }, node.metadata.name
        assert has_condition(node.status.conditions, "Ready"), node.metadata.name
    assert by_type == {"h100": 4, "a100": 4}
    # Schedulable: node lifecycle lifted the not-ready taint that admission put on each new Node.
    assert all(not node.spec.taints for node in nodes), [n.spec.taints for n in nodes]


async def test_a_job_completes_through_the_real_job_controller(kube_api: client.ApiClient, namespace: str) -> None:
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)

    await batch.create_namespaced_job(namespace, make_job("two-pods", pods=2, delay="3s"))
    job = await job_with_condition(batch, namespace, "two-pods", "Complete")

    assert job.status.succeeded == 2
    # The pods "ran" for their annotated 3 s before kwok marked them Succeeded.
    assert job.status.completion_time - job.status.start_time >= timedelta(seconds=3)
    pods = await job_pods(core, namespace, "two-pods")
    assert sorted(p.status.phase for p in pods) == ["Succeeded", "Succeeded"]
    # The real scheduler bound them, honouring the node selector and the GPU request.
    assert all(p.spec.node_name.startswith("kwok-h100-") for p in pods), [p.spec.node_name for p in pods]


async def test_a_suspended_job_creates_no_pods_until_unsuspended(kube_api: client.ApiClient, namespace: str) -> None:
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)

    await batch.create_namespaced_job(namespace, make_job("held", pods=2, delay="1s", suspend=True))
    # The Job controller has seen the Job (it records Suspended), and still made no pods.
    await job_with_condition(batch, namespace, "held", "Suspended")
    await asyncio.sleep(3)
    assert await job_pods(core, namespace, "held") == []
    assert not (await batch.read_namespaced_job("held", namespace)).status.active

    await batch.patch_namespaced_job(
        "held",
        namespace,
        {"spec": {"suspend": False}},
        _content_type="application/merge-patch+json",
    )

    async def two_pods() -> list[client.V1Pod] | None:
        pods = await job_pods(core, namespace, "held")
        return pods if len(pods) == 2 else None

    await eventually("the unsuspended Job's 2 pods", two_pods)
    job = await job_with_condition(batch, namespace, "held", "Complete")
    assert job.status.succeeded == 2


async def test_a_watch_resumed_from_a_compacted_resource_version_gets_410_gone(
    kube_cluster: KubeCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    # PodTemplates are served without the watch cache (scripts/local-cluster), so this watch
    # reads etcd's history directly, as every watch does when the watch cache is off.
    core = client.CoreV1Api(kube_api)
    template = client.V1PodTemplate(
        metadata=client.V1ObjectMeta(name="marker"),
        template=client.V1PodTemplateSpec(
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x.invalid/y:1")])
        ),
    )
    created = await core.create_namespaced_pod_template(namespace, template)
    resume_from = created.metadata.resource_version
    for generation in range(3):
        await core.patch_namespaced_pod_template(
            "marker", namespace, {"metadata": {"labels": {"generation": str(generation)}}}
        )

    # Before compaction, resuming from the old resourceVersion replays the three changes.
    async with watch.Watch() as w:
        replayed = [
            event["type"]
            async for event in w.stream(
                core.list_namespaced_pod_template,
                namespace,
                resource_version=resume_from,
                timeout_seconds=2,
            )
        ]
    assert replayed == ["MODIFIED", "MODIFIED", "MODIFIED"]

    compacted_at = kube_cluster.compact_etcd()
    assert compacted_at > int(resume_from)

    # timeout_seconds also stops kubernetes_asyncio from retrying the 410 once on its own.
    with pytest.raises(ApiException) as gone:
        async with watch.Watch() as w:
            async for _ in w.stream(
                core.list_namespaced_pod_template,
                namespace,
                resource_version=resume_from,
                timeout_seconds=10,
            ):
                pass
    assert gone.value.status == 410


def test_up_again_reuses_the_running_cluster(kube_cluster: KubeCluster) -> None:
    before = json.loads((kube_cluster.state_dir / "state.json").read_text())

    result = subprocess.run(
        [str(kube_cluster.script), "up", "--state-dir", str(kube_cluster.state_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )

    assert result.stdout.splitlines()[-1] == str(kube_cluster.kubeconfig)
    after = json.loads((kube_cluster.state_dir / "state.json").read_text())
    assert [p["pid"] for p in after["processes"]] == [p["pid"] for p in before["processes"]]
