"""`admitd run` against the real local control plane (marker `cluster`): nothing is faked.

The daemon runs as a process with the real webhook (registered by URL), the real Job controller runs the pods on
kwok's fake GPU nodes, and every check reads what a user would: the Job objects through kubectl, and the event
log through `admitd log`. Queue objects are written as kueue.x-k8s.io/v1beta2 (the CRDs are installed without the
conversion webhook here). Cluster-scoped names carry the test's namespace, so tests do not see each other's queues.
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


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


@pytest.fixture
def daemon(crds: KubeCluster, tmp_path: Path) -> Iterator[Daemon]:
    with running_daemon(crds, tmp_path) as d:
        yield d


def flavor(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {"nodeLabels": labels}}


def cluster_queue(
    name: str,
    flavor_name: str,
    gpus: int,
    *,
    cohort: str | None = None,
    borrowing_limit: int | None = None,
    selector: dict[str, Any] | None = None,
    preemption: dict[str, str] | None = None,
) -> dict[str, Any]:
    quota: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = borrowing_limit
    spec: dict[str, Any] = {
        "namespaceSelector": selector if selector is not None else {},
        "resourceGroups": [
            {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": flavor_name, "resources": [quota]}]}
        ],
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    if preemption is not None:
        spec["preemption"] = preemption
    return {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(namespace: str, name: str, cq: str) -> dict[str, Any]:
    return {
        "apiVersion": V,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def running(cluster: KubeCluster, namespace: str, name: str) -> bool:
    return get_job(cluster, namespace, name)["spec"].get("suspend") is False


def suspended(cluster: KubeCluster, namespace: str, name: str) -> bool:
    return get_job(cluster, namespace, name)["spec"].get("suspend") is True


def mine(daemon: Daemon, ns: str) -> list[dict[str, Any]]:
    """The log's events about this test's jobs (jobs of earlier tests may linger while their namespace goes)."""
    return [e for e in daemon.events() if e["subject"].startswith(f"job/{ns}/")]


def of_type(events: list[dict[str, Any]], type_: str, job_key: str | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_ and (job_key is None or e["subject"] == f"job/{job_key}")]


SEED = REPO / "tests" / "unit" / "data" / "seed_minimal_setup.yaml"


def seed_yaml() -> str:
    """The users' seed document's YAML (kueue.x-k8s.io/v1beta1), kept verbatim in the repository; the file's
    leading comment lines are ours."""
    return "".join(line for line in SEED.read_text().splitlines(keepends=True) if not line.startswith("#"))


@pytest.fixture
def research(crds: KubeCluster) -> Iterator[str]:
    """The seed's namespace and objects, removed afterwards (their names are fixed by the seed)."""
    kubectl(crds, "delete", "namespace", "research", "--ignore-not-found", "--timeout=90s")
    kubectl(crds, "create", "namespace", "research")
    try:
        yield "research"
    finally:
        kubectl(crds, "delete", "-f", "-", "--ignore-not-found", "--wait=false", stdin=seed_yaml(), check=False)
        kubectl(crds, "delete", "namespace", "research", "--timeout=90s")


def test_the_seed_setup_runs_two_4_gpu_jobs_and_the_third_when_one_completes(
    daemon: Daemon, crds: KubeCluster, research: str
) -> None:
    ns = research
    apply(crds, seed_yaml())  # v1beta1, unchanged: the API server converts it through admitd's webhook
    cq = json.loads(kubectl(crds, "get", "clusterqueues.v1beta1.kueue.x-k8s.io", "team-research", "-o", "json"))
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] == 4
    apply(
        crds,
        job(ns, "train-a", queue="research-queue", runtime="8s"),
        job(ns, "train-b", queue="research-queue", runtime="1h"),
        job(ns, "train-c", queue="research-queue", runtime="1h"),
    )
    wait_for("two jobs to run", lambda: running(crds, ns, "train-a") and running(crds, ns, "train-b"))
    assert suspended(crds, ns, "train-c"), "the third 4-GPU job must wait: 8 GPUs are in use"
    for name in ("train-a", "train-b"):
        selector = get_job(crds, ns, name)["spec"]["template"]["spec"]["nodeSelector"]
        assert selector == {"gpu-type": "h100"}
    wait_for("train-c to run once train-a completed", lambda: running(crds, ns, "train-c"), timeout=90)
    pods = kubectl(
        crds, "get", "pods", "-n", ns, "-l", "job-name=train-b", "-o", "jsonpath={.items[*].spec.nodeSelector}"
    )
    assert pods and '"gpu-type":"h100"' in pods, pods
    events = mine(daemon, ns)
    assert [e["payload"]["job"] for e in of_type(events, "job.finished")] == [f"{ns}/train-a"]
    admitted = of_type(events, "workload.admitted")
    assert sorted(e["payload"]["workload"] for e in admitted) == [f"{ns}/train-a", f"{ns}/train-b", f"{ns}/train-c"]
    unsuspended = of_type(events, "job.unsuspended")
    assert {e["cause"] for e in unsuspended} == {e["seq"] for e in admitted}, "each result points at its decision"
    # It waited for quota. Each kind's watch delivers on its own: the Job may come before research-queue or
    # team-research (applied a moment before), and its first reasons are then LocalQueueNotFound or
    # ClusterQueueNotFound, as in Kueue, until the queues are seen.
    kinds = [e["payload"]["reason"]["kind"] for e in of_type(events, "workload.pending", f"{ns}/train-c")]
    assert kinds and kinds[-1] == "WaitingForQuota", kinds
    assert set(kinds) <= {"WaitingForQuota", "LocalQueueNotFound", "ClusterQueueNotFound"}, kinds
    daemon.verify()


def test_a_namespace_not_selected_never_runs_and_a_missing_local_queue_waits_until_created(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    ns, rf, cq = namespace, f"h100-{namespace}", f"selective-{namespace}"
    kubectl(crds, "label", "namespace", ns, "team=outsiders")
    apply(
        crds,
        flavor(rf, **{"gpu-type": "h100"}),
        cluster_queue(cq, rf, 8, selector={"matchLabels": {"team": "research"}}),
        local_queue(ns, "q", cq),
        job(ns, "outsider", queue="q"),
        job(ns, "early", queue="later-queue"),
    )

    def reasons() -> dict[str, str]:
        return {e["subject"]: e["payload"]["reason"]["kind"] for e in of_type(mine(daemon, ns), "workload.pending")}

    wait_for(
        "both pending reasons",
        lambda: (
            reasons().get(f"job/{ns}/outsider") == "NamespaceNotSelected"
            and reasons().get(f"job/{ns}/early") == "LocalQueueNotFound"
        ),
    )
    apply(crds, local_queue(ns, "later-queue", f"open-{ns}"), cluster_queue(f"open-{ns}", rf, 8))
    wait_for("the job to run once its queue exists", lambda: running(crds, ns, "early"))
    assert suspended(crds, ns, "outsider")


def test_priority_preemption_suspends_the_victim_and_restores_its_node_selector(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    ns, rf, cq = namespace, f"h100-{namespace}", f"prio-{namespace}"
    apply(
        crds,
        {"apiVersion": V, "kind": "WorkloadPriorityClass", "metadata": {"name": f"high-{ns}"}, "value": 1000},
        flavor(rf, **{"gpu-type": "h100"}),
        cluster_queue(cq, rf, 4, preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue(ns, "q", cq),
        job(ns, "low", queue="q", node_selector={"disk": "ssd"}),
    )
    wait_for("the low-priority job to run", lambda: running(crds, ns, "low"))
    assert get_job(crds, ns, "low")["spec"]["template"]["spec"]["nodeSelector"] == {"disk": "ssd", "gpu-type": "h100"}
    apply(crds, job(ns, "high", queue="q", priority_class=f"high-{ns}"))
    wait_for("the victim to be suspended", lambda: suspended(crds, ns, "low"))
    wait_for(
        "the victim's nodeSelector to be restored",
        lambda: get_job(crds, ns, "low")["spec"]["template"]["spec"].get("nodeSelector") == {"disk": "ssd"},
    )
    wait_for("the preemptor to run", lambda: running(crds, ns, "high"))
    events = mine(daemon, ns)
    preempted = of_type(events, "workload.preempted", f"{ns}/low")
    assert preempted and preempted[0]["payload"]["preemptor"] == f"{ns}/high"
    assert of_type(events, "workload.evicted", f"{ns}/low"), "quota is released once the victim's pods are gone"
    suspended_events = of_type(events, "job.suspended", f"{ns}/low")
    assert suspended_events and suspended_events[0]["cause"] == preempted[0]["seq"]


def test_borrowing_across_a_cohort_and_reclaim(daemon: Daemon, crds: KubeCluster, namespace: str) -> None:
    ns, rf = namespace, f"h100-{namespace}"
    cohort = f"all-{ns}"
    apply(
        crds,
        flavor(rf, **{"gpu-type": "h100"}),
        cluster_queue(f"a-{ns}", rf, 4, cohort=cohort, preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue(f"b-{ns}", rf, 4, cohort=cohort),
        local_queue(ns, "qa", f"a-{ns}"),
        local_queue(ns, "qb", f"b-{ns}"),
        job(ns, "b1", queue="qb"),
        job(ns, "b2", queue="qb"),
    )
    wait_for("team b to borrow team a's idle quota", lambda: running(crds, ns, "b1") and running(crds, ns, "b2"))
    apply(crds, job(ns, "a1", queue="qa"))
    wait_for("team a to reclaim its quota", lambda: running(crds, ns, "a1"), timeout=90)
    assert [suspended(crds, ns, n) for n in ("b1", "b2")].count(True) == 1
    events = mine(daemon, ns)
    borrowed = [e for e in of_type(events, "workload.admitted") if e["payload"]["borrowed"]]
    assert borrowed, "one of team b's jobs was admitted by borrowing"
    reasons = {e["payload"]["reason"] for e in of_type(events, "workload.preempted")}
    assert reasons == {"InCohortReclamation"}


def test_a_restart_replays_the_log_and_neither_loses_nor_repeats_a_decision(
    crds: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    ns, rf, cq = namespace, f"h100-{namespace}", f"restart-{namespace}"
    first = Daemon(crds, tmp_path).start()
    try:
        apply(crds, flavor(rf, **{"gpu-type": "h100"}), cluster_queue(cq, rf, 8), local_queue(ns, "q", cq))
        apply(crds, *(job(ns, f"j{i}", queue="q", gpus=2) for i in range(4)))
        wait_for("four jobs to run", lambda: all(running(crds, ns, f"j{i}") for i in range(4)))
        first.kill()
        kubectl(crds, "delete", "job", "-n", ns, "j0", "--wait=false")  # while admitd is down
        second = Daemon(crds, tmp_path).start()
        apply(crds, job(ns, "late", queue="q", gpus=2))
        wait_for("the job created after the restart to run in j0's place", lambda: running(crds, ns, "late"))
        assert second.stop() == 0
        events = mine(second, ns)
        admitted = [e["payload"]["workload"] for e in of_type(events, "workload.admitted")]
        assert sorted(admitted) == sorted([*(f"{ns}/j{i}" for i in range(4)), f"{ns}/late"]), "one admission each"
        assert [e["payload"]["job"] for e in of_type(events, "job.deleted")] == [f"{ns}/j0"]
        second.verify()
    finally:
        kubectl(
            crds,
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "admitd",
            "--ignore-not-found",
        )


def test_admitd_refuses_to_start_beside_a_kueue_installation_that_owns_the_crds(
    crds: KubeCluster, tmp_path: Path
) -> None:
    crd = "crd/clusterqueues.kueue.x-k8s.io"
    kubectl(crds, "label", crd, "app.kubernetes.io/managed-by=kueue", "--overwrite")
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "daemon.cli",
                "run",
                "--kubeconfig",
                str(crds.kubeconfig),
                "--db",
                str(tmp_path / "admitd.db"),
                "--health-port",
                "0",
                "--webhook-port",
                "0",
                "--cert-dir",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=REPO,
        )
    finally:
        kubectl(crds, "label", crd, "app.kubernetes.io/managed-by=admitd", "--overwrite")
    assert result.returncode == 2, result.stderr
    assert "belong to another installation (app.kubernetes.io/managed-by=kueue), probably Kueue" in result.stderr
    assert "Traceback" not in result.stderr
