"""A preempted Job's quota is released only when its pods are gone, with `admitd run` against the real local control
plane (marker `cluster`); nothing is faked but the lag.

The real Job controller creates and deletes the pods; kwok runs them. The lag the issue measured (the controller's
status not yet counting pods it created) is made exact: a ValidatingAdmissionPolicy refuses the controller's status
writes of the victim until the preemption is sent, and a finalizer on the victim's pods keeps them for 3 s after
their deletion (as a grace period would). The test watches the Pods and reads the log through `admitd log export`.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import apply, install_crds, job, kubectl, running_daemon, wait_for
from tests.integration.test_daemon import of_type, running, suspended
from tests.integration.test_pods_ready_cluster import queues

V = "kueue.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


def wpc(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": V, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


class PodWatch:
    """`kubectl get pods -w` in a thread: when (wall ms) each pod of a Job stopped running (terminal or gone)."""

    def __init__(self, cluster: KubeCluster, ns: str) -> None:
        self.stopped: dict[str, int] = {}
        self.job_of: dict[str, str] = {}
        watch = ["get", "pods", "-n", ns, "-w", "--output-watch-events", "-o", "json"]
        self.proc = subprocess.Popen(
            [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), *watch],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buffer += line
            try:
                event, _ = decoder.raw_decode(buffer.strip())
            except ValueError:
                continue
            buffer = ""
            pod = event["object"]
            name = pod["metadata"]["name"]
            self.job_of[name] = pod["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name", "")
            phase = (pod.get("status") or {}).get("phase")
            if (event["type"] == "DELETED" or phase in ("Succeeded", "Failed")) and name not in self.stopped:
                self.stopped[name] = time.time_ns() // 1_000_000

    def last_stopped(self, job_name: str) -> int | None:
        pods = [p for p, j in self.job_of.items() if j == job_name]
        if not pods or any(p not in self.stopped for p in pods):
            return None
        return max(self.stopped[p] for p in pods)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


LAG = "admitd-test/status-lag"


def _status_lag_policy(name: str) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy that refuses every status write of Jobs labelled LAG: the Job controller creates
    and deletes their pods as usual, but its status never counts them (a controller whose writes lag, made exact)."""
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["batch"],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["jobs/status"],
                        }
                    ],
                    "objectSelector": {"matchLabels": {LAG: "true"}},
                },
                "validations": [{"expression": "false", "message": "status writes held back by the test"}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]


HOLD = "admitd-test/hold"


@pytest.mark.timeout(240)
def test_a_job_preempted_while_its_status_lags_keeps_its_quota_until_its_pods_have_stopped(
    crds: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """The Job controller's status lags (its writes refused until the preemption is sent, then let through), and
    the victim's pods take 3 s to stop after their deletion (a finalizer the test removes, as a grace period would).
    Before, the quota went to the preemptor at the suspension's answer, 3 s before the pods stopped."""
    cluster, ns = crds, namespace
    low, high, policy = f"{ns}-low", f"{ns}-high", f"admitd-lag-{ns}"
    pods = PodWatch(cluster, ns)
    apply(cluster, *_status_lag_policy(policy))
    lagging = True
    try:
        with running_daemon(cluster, tmp_path) as daemon:
            objects = queues(ns, 4)
            objects[1]["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
            apply(cluster, *objects, wpc(low, 1), wpc(high, 1000))
            victim = job(ns, "victim", queue="q", gpus=2, pods=2, priority_class=low)
            victim["metadata"]["labels"][LAG] = "true"
            victim["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
            apply(cluster, victim)
            wait_for("the victim's pods to run", lambda: len(_running_pods(cluster, ns, "victim")) == 2)
            status = json.loads(kubectl(cluster, "get", "job", "-n", ns, "victim", "-o", "json")).get("status") or {}
            assert not status.get("active"), f"the status counts the pods: no lag ({status})"
            apply(cluster, job(ns, "preemptor", queue="q", gpus=2, pods=2, priority_class=high))
            wait_for("the victim to be suspended", lambda: suspended(cluster, ns, "victim"), every=0.05)
            kubectl(cluster, "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy)
            lagging = False
            time.sleep(3)
            assert not running(cluster, ns, "preemptor"), "the quota was given away while the victim's pods ran"
            for name in _running_pods(cluster, ns, "victim", terminating=True):
                kubectl(
                    cluster, "patch", "pod", "-n", ns, name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
                )
            wait_for("the victim's pods to stop", lambda: pods.last_stopped("victim") is not None, timeout=60)
            wait_for("the preemptor to run", lambda: running(cluster, ns, "preemptor"), timeout=60)
            (evicted,) = of_type(daemon.events(), "workload.evicted", f"{ns}/victim")
            stopped = pods.last_stopped("victim")
            assert stopped is not None
            # This test's watch sees a pod go a little after the Job controller does: 500 ms of slack for that.
            assert evicted["payload"]["at"] >= stopped - 500, (
                f"the victim's quota was released {stopped - evicted['payload']['at']} ms before its pods stopped"
            )
    finally:
        pods.close()
        if lagging:
            kubectl(cluster, "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy)
        _let_go(cluster, ns, "victim")


def _running_pods(cluster: KubeCluster, ns: str, job_name: str, *, terminating: bool = False) -> list[str]:
    """The Job's pods that run: Running and not being deleted (with `terminating`, also those being deleted)."""
    out = kubectl(cluster, "get", "pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={job_name}", "-o", "json")
    return [
        p["metadata"]["name"]
        for p in json.loads(out)["items"]
        if (p.get("status") or {}).get("phase") == "Running"
        and (terminating or not p["metadata"].get("deletionTimestamp"))
    ]


def _let_go(cluster: KubeCluster, ns: str, job_name: str) -> None:
    """Remove the test's finalizer from the Job's pods: those being deleted go."""
    for name in _running_pods(cluster, ns, job_name, terminating=True):
        kubectl(cluster, "patch", "pod", "-n", ns, name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')


def _exists(cluster: KubeCluster, ns: str, name: str) -> bool:
    return name in kubectl(cluster, "get", "jobs", "-n", ns, "-o", "name")
