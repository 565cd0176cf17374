"""Priority classes deleted and pods that cannot be created, with `admitd run` against the real local control plane
(marker `cluster`); nothing is faked.

The real Job controller creates the pods; kwok runs them on fake GPU nodes. The ServiceAccount admission plugin
refuses pods of a ServiceAccount that does not exist, so the Job controller reports FailedCreate. Checks read the
Jobs through the API and the log through `admitd log export`; waitForPodsReady is on (8 s timeout).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import Daemon, apply, install_crds, job, kubectl, running_daemon, wait_for
from tests.integration.test_daemon import of_type, running, suspended
from tests.integration.test_pods_ready_cluster import queues

V = "kueue.x-k8s.io/v1beta2"
CONFIG = """\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady:
  enable: true
  timeout: 8s
  blockAdmission: false
  requeuingStrategy:
    backoffBaseSeconds: 60
    backoffLimitCount: 3
"""


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


@pytest.fixture
def daemon(crds: KubeCluster, tmp_path: Path) -> Iterator[Daemon]:
    config = tmp_path / "kueue-config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    with running_daemon(crds, tmp_path, "--config", str(config)) as d:
        yield d


def wpc(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": V, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def test_a_deleted_class_is_gone_for_new_jobs_and_pods_that_cannot_be_created_are_seen_and_timed_out(
    daemon: Daemon, namespace: str
) -> None:
    cluster, ns = daemon.cluster, namespace
    urgent = f"{ns}-urgent"
    apply(cluster, *queues(ns, 8), wpc(urgent, 900))
    wait_for("the class in the log", lambda: any(e["type"] == "priorityclass.observed" for e in daemon.events()))
    apply(cluster, job(ns, "early", queue="q", gpus=2, priority_class=urgent))
    wait_for("early to run", lambda: running(cluster, ns, "early"))
    kubectl(cluster, "delete", "workloadpriorityclass", urgent)
    wait_for(
        "the deletion in the log",
        lambda: any(e["type"] == "priorityclass.deleted" and urgent in e["subject"] for e in daemon.events()),
    )
    apply(cluster, job(ns, "late", queue="q", gpus=2, priority_class=urgent))
    wait_for(
        "late to wait for its class",
        lambda: any(
            e["payload"]["reason"]["kind"] == "WorkloadPriorityClassNotFound"
            for e in of_type(daemon.events(), "workload.pending", f"{ns}/late")
        ),
    )
    assert suspended(cluster, ns, "late") and running(cluster, ns, "early"), "the running job keeps its class"
    # A Job whose pods cannot be created (its ServiceAccount does not exist): admitted, the Job controller's
    # FailedCreate recorded, and the PodsReady timeout (8 s) evicts it as Kueue does.
    no_sa = job(ns, "no-sa", queue="q", gpus=2)
    no_sa["spec"]["template"]["spec"]["serviceAccountName"] = "no-such-account"
    apply(cluster, no_sa)
    wait_for("no-sa to be admitted", lambda: running(cluster, ns, "no-sa"))
    wait_for(
        "the FailedCreate in the log",
        lambda: bool(of_type(daemon.events(), "job.pods_not_created", f"{ns}/no-sa")),
        timeout=60,
    )
    (failed,) = of_type(daemon.events(), "job.pods_not_created", f"{ns}/no-sa")
    assert "no-such-account" in failed["payload"]["message"]
    explain = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "explain", f"{ns}/no-sa", "--db", str(daemon.db)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    if "timed-out" not in explain.stdout:  # said while it is admitted and holds its quota
        assert "the Job controller cannot create its pods (FailedCreate" in explain.stdout, explain.stdout
    wait_for("no-sa's PodsReady timeout", lambda: bool(of_type(daemon.events(), "workload.timed_out", f"{ns}/no-sa")))
    wait_for("no-sa to be suspended", lambda: suspended(cluster, ns, "no-sa"))
