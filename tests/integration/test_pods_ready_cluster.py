"""waitForPodsReady with `admitd run` against the real local control plane (marker `cluster`): nothing is faked.

The daemon runs as a process with a Configuration that switches waitForPodsReady on (a 10 s timeout, backoff from 1 s,
backoffLimitCount 1). The real Job controller creates the pods; kwok makes them ready on its fake GPU nodes, except
for a Job whose nodeSelector matches no node: its pods stay Pending, so it never gets ready. Checks read what a user
would: the Job objects through kubectl, and the event log through `admitd log export` and `admitd explain`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import (
    Daemon,
    apply,
    get_job,
    install_crds,
    job,
    kubectl,
    running_daemon,
    wait_for,
)

V = "kueue.x-k8s.io/v1beta2"

CONFIG = """\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady:
  enable: true
  timeout: 10s
  blockAdmission: true
  requeuingStrategy:
    backoffBaseSeconds: 1
    backoffLimitCount: 1
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


def queues(ns: str, gpus: int) -> list[dict[str, Any]]:
    return [
        {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": f"{ns}-h100"}, "spec": {}},
        {
            "apiVersion": V,
            "kind": "ClusterQueue",
            "metadata": {"name": f"{ns}-cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {"name": f"{ns}-h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": V,
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": ns},
            "spec": {"clusterQueue": f"{ns}-cq"},
        },
    ]


def events_of(daemon: Daemon, key: str, type_: str) -> list[dict[str, Any]]:
    return [e for e in daemon.events() if e["subject"] == f"job/{key}" and e["type"] == type_]


def evicted_condition(cluster: KubeCluster, ns: str, name: str) -> dict[str, Any]:
    """The Evicted condition of the Workload object of Job `name` (empty when there is none yet)."""
    for wl in json.loads(kubectl(cluster, "get", "workloads", "-n", ns, "-o", "json"))["items"]:
        if wl["metadata"]["ownerReferences"][0]["name"] == name:
            for c in (wl.get("status") or {}).get("conditions") or ():
                if c["type"] == "Evicted":
                    return dict(c)
            assert not any(c["type"] == "Preempted" for c in (wl.get("status") or {}).get("conditions") or ())
    return {}


def suspended(cluster: KubeCluster, ns: str, name: str) -> bool:
    return get_job(cluster, ns, name)["spec"].get("suspend") is True


def test_a_job_never_ready_is_evicted_requeued_and_deactivated_while_block_admission_holds_the_next(
    daemon: Daemon, namespace: str
) -> None:
    cluster = daemon.cluster
    ns = namespace
    apply(cluster, *queues(ns, 8))
    # Ready: kwok runs its pods; the observer reports job.ready from status.ready.
    apply(cluster, job(ns, "fine", queue="q", gpus=2))
    wait_for("fine's pods to be ready", lambda: bool(events_of(daemon, f"{ns}/fine", "job.ready")), timeout=60)
    # Never ready: its pods match no node.
    apply(cluster, job(ns, "stuck", queue="q", gpus=2, node_selector={"admitd-test/no-such-node": "x"}))
    wait_for("stuck to start", lambda: not suspended(cluster, ns, "stuck"), timeout=60)
    apply(cluster, job(ns, "next", queue="q", gpus=2))
    # blockAdmission: next fits but waits while stuck is not ready.
    wait_for(
        "next to wait for PodsReady",
        lambda: any(
            e["payload"]["reason"]["kind"] == "WaitingForPodsReady"
            for e in events_of(daemon, f"{ns}/next", "workload.pending")
        ),
        timeout=30,
    )
    assert suspended(cluster, ns, "next")
    # The 10 s timeout: stuck is evicted (suspended) and requeued after 1 s; admitted again; at its second timeout
    # (backoffLimitCount 1) it is deactivated and stays suspended.
    wait_for("stuck's first timeout", lambda: bool(events_of(daemon, f"{ns}/stuck", "workload.timed_out")), timeout=40)
    wait_for("next to be admitted", lambda: not suspended(cluster, ns, "next"), timeout=30)
    wait_for(
        "stuck to be deactivated",
        lambda: any(e["payload"]["deactivated"] for e in events_of(daemon, f"{ns}/stuck", "workload.timed_out")),
        timeout=60,
    )
    timed_out = events_of(daemon, f"{ns}/stuck", "workload.timed_out")
    assert [e["payload"]["timeouts"] for e in timed_out] == [1, 2]
    first = timed_out[0]["payload"]
    assert first["requeue_at"] - first["at"] == 1000  # backoffBaseSeconds 1, first timeout
    assert events_of(daemon, f"{ns}/stuck", "workload.requeued")
    wait_for("stuck to be suspended for good", lambda: suspended(cluster, ns, "stuck"), timeout=30)
    assert not events_of(daemon, f"{ns}/fine", "workload.timed_out")
    # The Workload object says it as Kueue does: Evicted, reason InactiveWorkload after the deactivation.
    wait_for(
        "stuck's Workload to show Evicted (InactiveWorkload)",
        lambda: evicted_condition(cluster, ns, "stuck").get("reason") == "InactiveWorkload",
        timeout=30,
    )
    explain = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "explain", f"{ns}/stuck", "--db", str(daemon.db)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert explain.returncode == 0, explain.stderr
    assert "InactiveWorkload: its pods were not all ready 10s after its admission" in explain.stdout
    assert "Deactivated" in explain.stdout
