"""`admitd run` with partial admission and Kueue's job management, against the real local control plane (marker
`cluster`): nothing is faked.

The daemon runs as a process with `--config` (manageJobsWithoutQueueName: true, and a managedJobsNamespaceSelector
that leaves out one namespace besides Kueue's), its webhook registered by URL; the real Job controller runs the
pods on kwok's fake GPU nodes. Checks read what a user would: the Job objects through kubectl, the event log
through `admitd log export`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import KubeCluster
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
LABEL = "kueue.x-k8s.io/queue-name"
EXCLUDED = "jm-left-out"


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


@pytest.fixture
def daemon(crds: KubeCluster, tmp_path: Path) -> Iterator[Daemon]:
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta1\n"
        "kind: Configuration\n"
        "manageJobsWithoutQueueName: true\n"
        "managedJobsNamespaceSelector:\n"
        "  matchExpressions:\n"
        "  - key: kubernetes.io/metadata.name\n"
        "    operator: NotIn\n"
        f"    values: [kube-system, kueue-system, {EXCLUDED}]\n"
    )
    with running_daemon(crds, tmp_path / "daemon", "--config", str(config)) as d:
        yield d


@pytest.fixture
def ns(crds: KubeCluster) -> Iterator[str]:
    name = f"jm-{uuid.uuid4().hex[:8]}"
    kubectl(crds, "create", "namespace", name)
    wait_for("the default ServiceAccount", lambda: "default" in kubectl(crds, "-n", name, "get", "sa", check=False))
    try:
        yield name
    finally:
        kubectl(crds, "delete", "namespace", name, "--wait=false")


def queues(ns: str, gpus: int, *, lq: str = "default") -> list[dict[str, Any]]:
    rf, cq = f"rf-{ns}", f"cq-{ns}"
    return [
        {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": rf}, "spec": {"nodeLabels": {}}},
        {
            "apiVersion": V,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": rf, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": V,
            "kind": "LocalQueue",
            "metadata": {"name": lq, "namespace": ns},
            "spec": {"clusterQueue": cq},
        },
    ]


def spec(cluster: KubeCluster, ns: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = get_job(cluster, ns, name)
    return out


def admitted_counts(daemon: Daemon, key: str) -> list[int]:
    return [
        e["payload"]["admission"]["pod_sets"][0]["count"]
        for e in daemon.events()
        if e["type"] == "workload.admitted" and e["subject"] == f"job/{key}"
    ]


def test_the_default_queue_and_partial_admission_with_restore(daemon: Daemon, crds: KubeCluster, ns: str) -> None:
    apply(crds, *queues(ns, 4))
    # The default queue is chosen when the Job is created, from the LocalQueues admitd has seen (as Kueue's webhook,
    # from its cache): a Job created before the LocalQueue reached admitd's watch is never defaulted.
    subject = f"localqueue/{ns}/default"
    wait_for(
        "admitd to see the default LocalQueue",
        lambda: any(e["type"] == "localqueue.observed" and e["subject"] == subject for e in daemon.events()),
    )
    # No queue-name label: the webhook labels it `default` (the namespace has that LocalQueue) and suspends it.
    apply(crds, job(ns, "whole", queue=None, gpus=1, pods=2))
    wait_for("the unlabelled job to run", lambda: spec(crds, ns, "whole")["spec"].get("suspend") is False)
    assert spec(crds, ns, "whole")["metadata"]["labels"][LABEL] == "default"

    # 4 pods asked, any number from 1: 2 GPUs are free, so it runs with 2, and says what it asked for.
    partial = job(ns, "partial", queue="default", gpus=1, pods=4)
    partial["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "1"}
    apply(crds, partial)
    wait_for("the partial job to run", lambda: spec(crds, ns, "partial")["spec"].get("suspend") is False)
    running = spec(crds, ns, "partial")
    assert running["spec"]["parallelism"] == 2
    assert running["metadata"]["annotations"]["admitd.io/full-parallelism"] == "4"
    assert admitted_counts(daemon, f"{ns}/partial") == [2]

    # A higher priority needs all 4 GPUs: both are preempted; the partial one gets its 4 back while suspended.
    apply(
        crds,
        {"apiVersion": V, "kind": "WorkloadPriorityClass", "metadata": {"name": f"high-{ns}"}, "value": 1000},
        job(ns, "urgent", queue="default", gpus=1, pods=4, priority_class=f"high-{ns}"),
    )
    wait_for("the urgent job to run", lambda: spec(crds, ns, "urgent")["spec"].get("suspend") is False, timeout=90)
    wait_for(
        "the partial job's parallelism to be restored",
        lambda: (
            spec(crds, ns, "partial")["spec"]["parallelism"] == 4
            and spec(crds, ns, "partial")["metadata"]["annotations"].get("admitd.io/full-parallelism") == ""
        ),
    )
    assert spec(crds, ns, "partial")["spec"]["suspend"] is True

    # Room again: a re-admission starts from the full count.
    # `whole` first, and gone before `urgent` frees its GPUs (one watch stream: its deletion is seen first); else
    # `whole`, older, would take 2 of the 4 GPUs and `partial` would rightly run with 2 again.
    kubectl(crds, "-n", ns, "delete", "job", "whole", "--wait=true")
    kubectl(crds, "-n", ns, "delete", "job", "urgent", "--wait=false")
    wait_for("the partial job to run again", lambda: spec(crds, ns, "partial")["spec"].get("suspend") is False, 90)
    assert spec(crds, ns, "partial")["spec"]["parallelism"] == 4
    assert admitted_counts(daemon, f"{ns}/partial") == [2, 4]
    daemon.verify()


def test_an_unlabelled_job_is_held_until_it_gets_a_queue(daemon: Daemon, crds: KubeCluster, ns: str) -> None:
    apply(crds, *queues(ns, 4, lq="team"))  # no LocalQueue named default here
    apply(crds, job(ns, "stray", queue=None, gpus=1))
    assert spec(crds, ns, "stray")["spec"]["suspend"] is True  # suspended by the webhook at creation

    def held() -> bool:
        return any(
            e["type"] == "workload.pending"
            and e["subject"] == f"job/{ns}/stray"
            and "no kueue.x-k8s.io/queue-name label" in e["payload"]["reason"]["message"]
            for e in daemon.events()
        )

    wait_for("the held job's pending reason", held)
    assert spec(crds, ns, "stray")["spec"]["suspend"] is True
    kubectl(crds, "-n", ns, "label", "job", "stray", f"{LABEL}=team")
    wait_for("the labelled job to run", lambda: spec(crds, ns, "stray")["spec"].get("suspend") is False)


def test_a_namespace_the_selector_leaves_out_is_never_managed(daemon: Daemon, crds: KubeCluster) -> None:
    kubectl(crds, "create", "namespace", EXCLUDED, check=False)
    try:
        wait_for("the default ServiceAccount", lambda: "default" in kubectl(crds, "-n", EXCLUDED, "get", "sa"))
        apply(crds, job(EXCLUDED, "free", queue=None, gpus=1), job(EXCLUDED, "labelled", queue="q", gpus=1))
        for name in ("free", "labelled"):
            assert spec(crds, EXCLUDED, name)["spec"].get("suspend") is not True  # the webhook was not called
        wait_for(
            "the jobs' pods", lambda: kubectl(crds, "-n", EXCLUDED, "get", "pods", "-o", "name").count("pod/") >= 2
        )
        assert not [e for e in daemon.events() if e["subject"].startswith(f"job/{EXCLUDED}/")]
    finally:
        kubectl(crds, "delete", "namespace", EXCLUDED, "--wait=false")
