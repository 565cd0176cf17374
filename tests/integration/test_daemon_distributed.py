"""`admitd run` with PyTorchJob, RayJob and JobSet on the real local control plane (marker `cluster`).

Real: the API server with the projects' own released CRDs (fetched from their Go modules by
tests/cluster/fetch-crds.sh: training-operator v1.8.1, KubeRay ray-operator v1.5.0, JobSet v0.10.1), admitd as a
process with its webhook registered by URL, the Job controller and kwok for the batch Job that preempts. Faked: the
operators. No training operator, KubeRay or JobSet controller runs, so these kinds are exercised at the CRD level:
their objects are suspended, patched and read through the API exactly as with the operators, and the status an
operator would write when the job finishes (PyTorchJob condition Succeeded, RayJob jobDeploymentStatus Complete,
JobSet condition Completed) is written here through the status subresource.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import (
    Daemon,
    apply,
    install_crds,
    install_job_crds,
    job,
    kubectl,
    running_daemon,
    wait_for,
)

pytestmark = pytest.mark.cluster

V = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    install_job_crds(kube_cluster)
    return kube_cluster


@pytest.fixture
def daemon(crds: KubeCluster, tmp_path: Path) -> Iterator[Daemon]:
    with running_daemon(crds, tmp_path) as d:
        yield d


def queues(ns: str, *, h100: int, a100: int) -> list[dict[str, Any]]:
    """Flavors h100 and a100 (GPU nodes by label) and cpu (no labels); one ClusterQueue that preempts lower
    priorities; LocalQueue q."""
    flavors = [
        {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": f"{f}-{ns}"}, "spec": {"nodeLabels": labels}}
        for f, labels in (("h100", {"gpu-type": "h100"}), ("a100", {"gpu-type": "a100"}), ("cpu", {}))
    ]
    cq = {
        "apiVersion": V,
        "kind": "ClusterQueue",
        "metadata": {"name": f"train-{ns}"},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": f"h100-{ns}", "resources": [{"name": GPU, "nominalQuota": h100}]},
                        {"name": f"a100-{ns}", "resources": [{"name": GPU, "nominalQuota": a100}]},
                    ],
                },
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": f"cpu-{ns}",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 64},
                                {"name": "memory", "nominalQuota": "256Gi"},
                            ],
                        }
                    ],
                },
            ],
        },
    }
    lq = {
        "apiVersion": V,
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": ns},
        "spec": {"clusterQueue": f"train-{ns}"},
    }
    return [*flavors, cq, lq]


def template(cpu: str, gpus: int = 0, **spec: Any) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu, "memory": "1Gi"}
    if gpus:
        requests[GPU] = gpus
    return {
        "spec": {
            "containers": [{"name": "c", "image": "img", "resources": {"requests": requests, "limits": requests}}],
            **spec,
        }
    }


def labels(queue: str) -> dict[str, str]:
    return {"kueue.x-k8s.io/queue-name": queue}


def pytorchjob(ns: str, name: str) -> dict[str, Any]:
    """master: 1 pod x 4 GPUs; worker: 2 pods x 2 GPUs, with the user's own nodeSelector disk=ssd. No runPolicy:
    the webhook adds it, suspended."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns, "labels": labels("q")},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template("1", 4)},
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "OnFailure",
                    "template": template("1", 2, nodeSelector={"disk": "ssd"}),
                },
            }
        },
    }


def rayjob(ns: str, name: str) -> dict[str, Any]:
    """head: CPU only; worker group "gpu": 1 pod x 2 GPUs, pinned by its user to a100 nodes; the default submitter
    (K8sJobMode)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": ns, "labels": labels("q")},
        "spec": {
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": template("2")},
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": 1,
                        "rayStartParams": {},
                        "template": template("1", 2, nodeSelector={"gpu-type": "a100"}),
                    }
                ],
            },
        },
    }


def get(cluster: KubeCluster, kind: str, ns: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(kubectl(cluster, "get", kind, "-n", ns, name, "-o", "json"))
    return out


def pt_state(cluster: KubeCluster, ns: str, name: str) -> tuple[bool | None, dict[str, Any], dict[str, Any]]:
    """(runPolicy.suspend, Master nodeSelector, Worker nodeSelector)."""
    spec = get(cluster, "pytorchjobs.kubeflow.org", ns, name)["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    return (
        spec.get("runPolicy", {}).get("suspend"),
        replicas["Master"]["template"]["spec"].get("nodeSelector") or {},
        replicas["Worker"]["template"]["spec"].get("nodeSelector") or {},
    )


def ray_state(cluster: KubeCluster, ns: str, name: str) -> tuple[bool | None, dict[str, Any], dict[str, Any]]:
    """(spec.suspend, head nodeSelector, worker group "gpu" nodeSelector)."""
    spec = get(cluster, "rayjobs.ray.io", ns, name)["spec"]
    cluster_spec = spec["rayClusterSpec"]
    return (
        spec.get("suspend"),
        cluster_spec["headGroupSpec"]["template"]["spec"].get("nodeSelector") or {},
        cluster_spec["workerGroupSpecs"][0]["template"]["spec"].get("nodeSelector") or {},
    )


def set_status(cluster: KubeCluster, resource: str, ns: str, name: str, status: dict[str, Any]) -> None:
    """What the operator would write, through the status subresource."""
    body = json.dumps({"status": status})
    kubectl(cluster, "patch", resource, "-n", ns, name, "--subresource=status", "--type=merge", "-p", body)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def mine(daemon: Daemon, ns: str) -> list[dict[str, Any]]:
    return [e for e in daemon.events() if e["subject"].startswith(f"job/{ns}/")]


def of_type(events: list[dict[str, Any]], type_: str, key: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_ and e["subject"] == f"job/{key}"]


@pytest.mark.timeout(300)
def test_pytorchjob_and_rayjob_are_admitted_whole_preempted_whole_and_release_quota_when_done(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    ns = namespace
    h100, a100 = {"gpu-type": "h100"}, {"gpu-type": "a100"}
    apply(
        crds,
        {"apiVersion": V, "kind": "WorkloadPriorityClass", "metadata": {"name": f"urgent-{ns}"}, "value": 1000},
        *queues(ns, h100=4, a100=8),
    )

    # Suspended on create by the webhook (neither object asked for it), then admitted whole: the master's 4 GPUs
    # fill h100, so the workers' 4 go to a100, each replica's template with its own flavor's nodeSelector.
    apply(crds, pytorchjob(ns, "bert"))
    created = get(crds, "pytorchjobs.kubeflow.org", ns, "bert")
    assert "runPolicy" in created["spec"], "the webhook suspended it through a runPolicy of its own"
    wait_for("the PyTorchJob to be admitted", lambda: pt_state(crds, ns, "bert")[0] is False)
    assert pt_state(crds, ns, "bert") == (False, h100, {"disk": "ssd", **a100})

    apply(crds, rayjob(ns, "tune"))
    wait_for("the RayJob to be admitted", lambda: ray_state(crds, ns, "tune")[0] is False)

    def workloads() -> dict[tuple[str, str], dict[str, Any]]:
        items = json.loads(kubectl(crds, "get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json"))["items"]
        return {
            (w["metadata"]["ownerReferences"][0]["kind"], w["metadata"]["ownerReferences"][0]["name"]): w for w in items
        }

    # What a Kueue user sees: a Workload per job, owned by it, a pod set per replica and the flavors of each.
    wait_for(
        "the Workload objects with their admission",
        lambda: all(
            (w := workloads().get(owner)) is not None and "admission" in (w.get("status") or {})
            for owner in (("PyTorchJob", "bert"), ("RayJob", "tune"))
        ),
    )
    bert_wl = workloads()[("PyTorchJob", "bert")]
    assert bert_wl["metadata"]["ownerReferences"][0]["apiVersion"] == "kubeflow.org/v1"
    assert [(p["name"], p["count"]) for p in bert_wl["spec"]["podSets"]] == [("master", 1), ("worker", 2)]
    assert {a["name"]: a["flavors"][GPU] for a in bert_wl["status"]["admission"]["podSetAssignments"]} == {
        "master": f"h100-{ns}",
        "worker": f"a100-{ns}",
    }
    # The head asks for no GPU: its only flavor (cpu) has no labels, so its template is left as it was.
    assert ray_state(crds, ns, "tune") == (False, {}, a100)
    events = mine(daemon, ns)
    observed = [e["payload"]["workload"] for e in of_type(events, "job.observed", f"{ns}/tune")]
    assert [ps["name"] for ps in observed[0]["pod_sets"]] == ["head", "gpu", "submitter"]
    for key in (f"{ns}/bert", f"{ns}/tune"):
        # Created suspended by the webhook: admitd never had to suspend a running one (an order without decision).
        assert [e["payload"].get("decision") for e in of_type(events, "job.suspended", key)] == [], key

    # A higher-priority Job needs all 8 a100 GPUs: both are preempted whole (suspended, every template restored),
    # and stay out while it runs: the PyTorchJob's master would fit h100 again, but not its workers, so none of it
    # is admitted.
    apply(crds, job(ns, "urgent", queue="q", gpus=8, runtime="15s", priority_class=f"urgent-{ns}"))
    wait_for("the PyTorchJob to be suspended", lambda: pt_state(crds, ns, "bert")[0] is True)
    wait_for("the RayJob to be suspended", lambda: ray_state(crds, ns, "tune")[0] is True)
    wait_for("the PyTorchJob's templates restored", lambda: pt_state(crds, ns, "bert") == (True, {}, {"disk": "ssd"}))
    wait_for("the RayJob's templates restored", lambda: ray_state(crds, ns, "tune") == (True, {}, a100))
    events = mine(daemon, ns)
    for key in (f"{ns}/bert", f"{ns}/tune"):
        preempted = of_type(events, "workload.preempted", key)
        assert preempted and preempted[0]["payload"]["preemptor"] == f"{ns}/urgent", key
    wait_for(
        "both evictions (quota released)",
        lambda: all(of_type(mine(daemon, ns), "workload.evicted", k) for k in (f"{ns}/bert", f"{ns}/tune")),
    )
    wait_for("the urgent Job to run", lambda: get(crds, "jobs.batch", ns, "urgent")["spec"].get("suspend") is False)
    assert pt_state(crds, ns, "bert")[0] is True and ray_state(crds, ns, "tune")[0] is True

    # The urgent Job runs for 15 s (kwok); then both are admitted again, whole.
    wait_for("the PyTorchJob to be admitted again", lambda: pt_state(crds, ns, "bert")[0] is False, timeout=90)
    wait_for("the RayJob to be admitted again", lambda: ray_state(crds, ns, "tune")[0] is False, timeout=90)
    assert pt_state(crds, ns, "bert") == (False, h100, {"disk": "ssd", **a100})

    # A third job waits for quota (8 a100 GPUs: 6 are held by the two), and runs once they finish.
    apply(crds, job(ns, "after", queue="q", gpus=8, runtime="1h"))
    wait_for(
        "the third job to wait",
        lambda: any(
            e["payload"]["reason"]["kind"] == "WaitingForQuota"
            for e in of_type(mine(daemon, ns), "workload.pending", f"{ns}/after")
        ),
    )
    set_status(
        crds,
        "pytorchjobs.kubeflow.org",
        ns,
        "bert",
        {
            "conditions": [
                {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded", "lastTransitionTime": now()}
            ],
            "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"succeeded": 2}},
        },
    )
    set_status(crds, "rayjobs.ray.io", ns, "tune", {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})
    wait_for(
        "both to be recorded finished",
        lambda: all(of_type(mine(daemon, ns), "job.finished", k) for k in (f"{ns}/bert", f"{ns}/tune")),
    )
    wait_for(
        "the third job to run on the quota they released",
        lambda: get(crds, "jobs.batch", ns, "after")["spec"].get("suspend") is False,
    )
    daemon.verify()


def test_a_jobset_is_suspended_on_create_placed_per_replicated_job_and_released_when_completed(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    ns = namespace
    apply(crds, *queues(ns, h100=2, a100=8))
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": ns, "labels": labels("q")},
        "spec": {
            "replicatedJobs": [
                {"name": "driver", "replicas": 1, "template": {"spec": {"template": template("1", 2)}}},
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "completions": 2, "template": template("1", 1)}},
                },
            ]
        },
    }
    apply(crds, js)

    def state() -> tuple[bool | None, dict[str, Any], dict[str, Any]]:
        spec = get(crds, "jobsets.jobset.x-k8s.io", ns, "js")["spec"]
        rjs = spec["replicatedJobs"]
        return (
            spec.get("suspend"),
            rjs[0]["template"]["spec"]["template"]["spec"].get("nodeSelector") or {},
            rjs[1]["template"]["spec"]["template"]["spec"].get("nodeSelector") or {},
        )

    wait_for("the JobSet to be admitted", lambda: state()[0] is False)
    # driver: 2 GPUs fill h100; workers: 2 replicas x 2 pods x 1 GPU = 4 on a100.
    assert state() == (False, {"gpu-type": "h100"}, {"gpu-type": "a100"})
    admitted = of_type(mine(daemon, ns), "workload.admitted", f"{ns}/js")
    assert [(ps["name"], ps["count"]) for ps in admitted[0]["payload"]["admission"]["pod_sets"]] == [
        ("driver", 1),
        ("workers", 4),
    ]
    set_status(
        crds,
        "jobsets.jobset.x-k8s.io",
        ns,
        "js",
        {
            "conditions": [
                {
                    "type": "Completed",
                    "status": "True",
                    "reason": "AllJobsCompleted",
                    "message": "jobset completed successfully",
                    "lastTransitionTime": now(),
                }
            ]
        },
    )
    wait_for("the JobSet to be recorded finished", lambda: bool(of_type(mine(daemon, ns), "job.finished", f"{ns}/js")))


def test_a_queued_rayjob_on_an_existing_cluster_is_refused_at_creation(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    """As Kueue's validating webhook: the API server refuses it, with admitd's reason naming the field."""
    ns = namespace
    bad = rayjob(ns, "shared")
    bad["spec"]["clusterSelector"] = {"ray.io/cluster": "team-cluster"}
    result = subprocess.run(
        [str(crds.kubectl), "--kubeconfig", str(crds.kubeconfig), "create", "-f", "-"],
        input=json.dumps(bad),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert f"RayJob {ns}/shared: spec.clusterSelector: a queued RayJob cannot run on an existing Ray cluster" in (
        result.stderr
    )
    assert kubectl(crds, "get", "rayjobs.ray.io", "-n", ns, "-o", "name") == ""
    unqueued = rayjob(ns, "unqueued")
    unqueued["metadata"]["labels"] = {}
    unqueued["spec"]["clusterSelector"] = {"ray.io/cluster": "team-cluster"}
    apply(crds, unqueued)  # not admitd's: created as it is
    assert "suspend" not in get(crds, "rayjobs.ray.io", ns, "unqueued")["spec"]
