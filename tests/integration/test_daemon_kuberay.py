"""`admitd run` with the real KubeRay operator (marker `cluster`): a RayJob admitted by admitd runs its Ray cluster's
pods on the nodes of each pod set's flavor, and a preemption makes KubeRay delete that cluster.

Real: the API server with KubeRay's CRDs, KubeRay's ray-operator v1.5.0 built from its Go module
(tests/cluster/build-kuberay.sh) and run as a process against the local control plane, the scheduler, kwok's fake
nodes (labelled gpu-type=h100 and gpu-type=a100), admitd as a process. Faked: Ray itself (kwok runs no container,
so no Ray dashboard answers KubeRay; the test looks only at what KubeRay does with the pods). Skipped, with the
command to run, when the operator has not been built: building it takes minutes, so the suite does not do it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import (
    Daemon,
    apply,
    free_port,
    install_crds,
    install_job_crds,
    job,
    kubectl,
    wait_for,
)
from tests.integration.test_daemon_distributed import V, get, mine, of_type, queues, rayjob

pytestmark = pytest.mark.cluster

BIN = REPO / "tests" / "cluster" / "bin"
OPERATOR = BIN / "ray-operator"
RAYCLUSTER_CRD = BIN / "crds-kuberay" / "ray.io_rayclusters.yaml"


@pytest.fixture(scope="module")
def kuberay(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    if not OPERATOR.exists() or not RAYCLUSTER_CRD.exists():
        pytest.skip("KubeRay's operator is not built: run tests/cluster/build-kuberay.sh (a few minutes)")
    install_crds(kube_cluster)
    install_job_crds(kube_cluster)
    kubectl(kube_cluster, "apply", "--server-side", "--force-conflicts", "-f", str(RAYCLUSTER_CRD))
    name = yaml.safe_load(RAYCLUSTER_CRD.read_text())["metadata"]["name"]
    kubectl(kube_cluster, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")
    log = tmp_path_factory.mktemp("kuberay") / "ray-operator.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                str(OPERATOR),
                f"--metrics-addr=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                "--enable-leader-election=false",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(kube_cluster.kubeconfig)},
        )
    try:
        yield kube_cluster
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture
def daemon(kuberay: KubeCluster, tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(kuberay, tmp_path).start()
    yield d
    if d.proc is not None:
        assert d.stop() == 0, d.stderr.read_text()[-3000:]
    kubectl(
        kuberay, "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "admitd", "--ignore-not-found"
    )


@pytest.fixture
def rayjobs_removed(kuberay: KubeCluster, namespace: str) -> Iterator[None]:
    """Deletes the test's RayJobs while KubeRay still runs: its finalizer would otherwise keep them, and their
    namespace, terminating after the operator stops, in the way of the session's later tests."""
    yield
    kubectl(kuberay, "delete", "rayjobs.ray.io", "--all", "-n", namespace, "--timeout=60s")


def ray_pods(cluster: KubeCluster, ns: str) -> list[dict[str, Any]]:
    out = json.loads(kubectl(cluster, "get", "pods", "-n", ns, "-l", "ray.io/is-ray-node=yes", "-o", "json"))
    items: list[dict[str, Any]] = out["items"]
    return items


def suspended(cluster: KubeCluster, ns: str) -> bool:
    # KubeRay writes the RayJob back with `suspend` omitted when false (omitempty).
    return get(cluster, "rayjobs.ray.io", ns, "tune")["spec"].get("suspend") is True


def node_labels(cluster: KubeCluster) -> dict[str, dict[str, str]]:
    out = json.loads(kubectl(cluster, "get", "nodes", "-o", "json"))
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in out["items"]}


@pytest.mark.timeout(300)
def test_kuberay_runs_the_admitted_rayjobs_pods_on_each_pod_sets_flavor_and_removes_them_when_preempted(
    daemon: Daemon, kuberay: KubeCluster, namespace: str, rayjobs_removed: None
) -> None:
    ns = namespace
    apply(
        kuberay,
        {"apiVersion": V, "kind": "WorkloadPriorityClass", "metadata": {"name": f"urgent-{ns}"}, "value": 1000},
        *queues(ns, h100=2, a100=0),  # nowhere else to go once preempted
    )
    # head: CPU only (flavor cpu, no labels); "gpu": 1 pod x 2 GPUs on h100 (its user's pin to a100 removed).
    rj = rayjob(ns, "tune")
    rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"].pop("nodeSelector")
    rj["spec"]["submissionMode"] = "HTTPMode"  # no submitter Job: nothing answers KubeRay's HTTP calls anyway
    apply(kuberay, rj)
    wait_for("the RayJob to be admitted", lambda: not suspended(kuberay, ns))

    def workers_on_h100() -> bool:
        pods = ray_pods(kuberay, ns)
        workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
        heads = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        return len(workers) == 1 and len(heads) == 1 and bool(workers[0]["spec"].get("nodeName"))

    wait_for("KubeRay to start the Ray cluster's pods, scheduled", workers_on_h100, timeout=120)
    assert of_type(mine(daemon, ns), "workload.admitted", f"{ns}/tune"), "admitd admitted it before it ran"
    labels = node_labels(kuberay)
    for pod in ray_pods(kuberay, ns):
        if pod["metadata"]["labels"]["ray.io/node-type"] == "worker":
            assert pod["spec"]["nodeSelector"] == {"gpu-type": "h100"}
            assert labels[pod["spec"]["nodeName"]]["gpu-type"] == "h100"
        else:
            assert not (pod["spec"].get("nodeSelector") or {}).get("gpu-type")

    # A higher-priority Job needs h100's 2 GPUs: the RayJob is suspended and KubeRay deletes its cluster.
    apply(
        kuberay,
        job(
            ns,
            "urgent",
            queue="q",
            gpus=2,
            runtime="1h",
            priority_class=f"urgent-{ns}",
            node_selector={"gpu-type": "h100"},
        ),
    )
    wait_for("the RayJob to be suspended", lambda: suspended(kuberay, ns))
    wait_for("KubeRay to delete the Ray cluster's pods", lambda: ray_pods(kuberay, ns) == [], timeout=120)
    wait_for("the eviction (quota released)", lambda: bool(of_type(mine(daemon, ns), "workload.evicted", f"{ns}/tune")))
    status = get(kuberay, "rayjobs.ray.io", ns, "tune").get("status") or {}
    assert status.get("jobDeploymentStatus") == "Suspended", status
    wait_for("the urgent Job to run", lambda: get(kuberay, "jobs.batch", ns, "urgent")["spec"].get("suspend") is False)
