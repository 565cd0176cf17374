"""A hostile tenant against `admitd run` on the real local control plane (marker `cluster`): nothing is faked.

The tenant is a user with a namespaced Role that allows create/get/list/watch/patch/update on Jobs in their own
namespace and nothing else, acting through kubectl's impersonation (`--as`); admitd runs as the admin user and
knows itself by a SelfSubjectReview. The tenant tries the three ways around admission: an `admitd.io/admission`
annotation forged on create, an unsuspend by patch, and a Job naming another team's queue (a LocalQueue in their
namespace pointing at a ClusterQueue whose namespaceSelector excludes them). With admitd's webhooks up each is
refused, with a message that says why; with them bypassed (failurePolicy Ignore while admitd is down) each job is
suspended as soon as admitd sees it and recorded as a `security.job_tampered` event. In no case does a job hold
quota it may not have. What a user would see is what is checked: kubectl's answer, the Jobs, and `admitd log`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import Daemon, apply, get_job, install_crds, job, kubectl, wait_for
from tests.integration.test_daemon import cluster_queue, flavor, local_queue, mine, of_type

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


@pytest.fixture
def cleanup_webhooks(crds: KubeCluster) -> Iterator[None]:
    yield
    kubectl(
        crds, "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "admitd", "--ignore-not-found"
    )


def tenant_of(cluster: KubeCluster, ns: str) -> str:
    """A user who may only work with Jobs in `ns` (a Role and its RoleBinding there)."""
    user = f"tenant-{ns}"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "jobs-only", "namespace": ns},
        "rules": [
            {
                "apiGroups": ["batch"],
                "resources": ["jobs"],
                "verbs": ["create", "get", "list", "watch", "patch", "update"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "jobs-only", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs-only"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    apply(cluster, role, binding)
    assert as_tenant(cluster, user, "auth", "can-i", "patch", "jobs", "-n", ns).returncode == 0
    denied = as_tenant(
        cluster, user, "auth", "can-i", "patch", "workloads.kueue.x-k8s.io", "--subresource=status", "-n", ns
    )
    assert denied.returncode != 0, "a tenant cannot write a Workload's status"
    return user


def as_tenant(
    cluster: KubeCluster, user: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), "--as", user, *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def queues(cluster: KubeCluster, ns: str) -> tuple[str, str]:
    """Team A (`ns`) has 8 GPUs in its ClusterQueue behind LocalQueue `q`; LocalQueue `other` in the same namespace
    points at team B's ClusterQueue, whose namespaceSelector does not select `ns`. Returns both ClusterQueues."""
    rf, mine_, theirs = f"h100-{ns}", f"cq-{ns}", f"cq-b-{ns}"
    apply(
        cluster,
        flavor(rf, **{"gpu-type": "h100"}),
        cluster_queue(mine_, rf, 8, selector={"matchLabels": {"kubernetes.io/metadata.name": ns}}),
        cluster_queue(theirs, rf, 64, selector={"matchLabels": {"kubernetes.io/metadata.name": f"team-b-{ns}"}}),
        local_queue(ns, "q", mine_),
        local_queue(ns, "other", theirs),
    )
    return mine_, theirs


def forged_note(cq: str, flavor_name: str, gpus: int) -> str:
    return json.dumps(
        {
            "at": 9_999_999_999_999,
            "clusterQueue": cq,
            "decision": 1,
            "podSets": [{"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": flavor_name}}],
        }
    )


def with_note(doc: dict[str, Any], note: str) -> dict[str, Any]:
    doc["metadata"]["annotations"] = {"admitd.io/admission": note}
    return doc


def suspended(cluster: KubeCluster, ns: str, name: str) -> bool:
    return get_job(cluster, ns, name)["spec"].get("suspend") is True


def quota_events(daemon: Daemon, ns: str, name: str) -> list[dict[str, Any]]:
    """What would give the job quota: an admission decided or adopted."""
    events = mine(daemon, ns)
    return of_type(events, "workload.admitted", f"{ns}/{name}") + of_type(events, "workload.adopted", f"{ns}/{name}")


def test_with_the_webhooks_up_each_way_around_admission_is_refused_with_why(
    crds: KubeCluster, namespace: str, tmp_path: Path, cleanup_webhooks: None
) -> None:
    ns = namespace
    _, theirs = queues(crds, ns)
    user = tenant_of(crds, ns)
    daemon = Daemon(crds, tmp_path).start()
    try:
        # 1. an admission forged on create, naming the other team's ClusterQueue
        forged = with_note(job(ns, "forged", queue="q", gpus=64, suspend=False), forged_note(theirs, f"h100-{ns}", 64))
        refused = as_tenant(crds, user, "create", "-f", "-", stdin=yaml.safe_dump(forged))
        assert refused.returncode != 0
        assert "metadata.annotations[admitd.io/admission]" in refused.stderr
        assert f"{user} is not admitd (admin)" in refused.stderr, refused.stderr
        assert "forged" not in kubectl(crds, "get", "jobs", "-n", ns, "-o", "name")

        # 2. a self-unsuspend of a job that waits (it asks for more than the queue has)
        created = as_tenant(crds, user, "create", "-f", "-", stdin=yaml.safe_dump(job(ns, "waits", queue="q", gpus=16)))
        assert created.returncode == 0, created.stderr
        assert suspended(crds, ns, "waits"), "the mutating webhook suspended it"
        unsuspend = as_tenant(crds, user, "patch", "job", "waits", "-n", ns, "-p", '{"spec":{"suspend":false}}')
        assert unsuspend.returncode != 0
        assert "spec.suspend: only admitd unsuspends a queued job" in unsuspend.stderr, unsuspend.stderr
        annotate = as_tenant(
            crds,
            user,
            "annotate",
            "job",
            "waits",
            "-n",
            ns,
            "--overwrite",
            f"admitd.io/admission={forged_note(theirs, 'x', 1)}",
        )
        assert annotate.returncode != 0 and "only admitd changes them" in annotate.stderr, annotate.stderr

        # 3. a job naming another team's queue: created (suspended), never admitted, and cannot be let out
        created = as_tenant(crds, user, "create", "-f", "-", stdin=yaml.safe_dump(job(ns, "theirs", queue="other")))
        assert created.returncode == 0, created.stderr
        wait_for(
            "the job in the other team's queue to be pending",
            lambda: bool(of_type(mine(daemon, ns), "workload.pending", f"{ns}/theirs")),
        )
        unsuspend = as_tenant(crds, user, "patch", "job", "theirs", "-n", ns, "-p", '{"spec":{"suspend":false}}')
        assert unsuspend.returncode != 0 and "only admitd unsuspends" in unsuspend.stderr

        # 4. a queue name that is not one (Kueue's rule: a DNS-1123 subdomain)
        bad = as_tenant(crds, user, "create", "-f", "-", stdin=yaml.safe_dump(job(ns, "bad", queue="Team_Q")))
        assert bad.returncode != 0
        assert 'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Team_Q"' in bad.stderr, bad.stderr

        # admitd's own changes go through its own webhook: a job that fits is admitted and runs
        apply(crds, job(ns, "fits", queue="q", gpus=4))
        wait_for("admitd to run the job that fits", lambda: not suspended(crds, ns, "fits"))
        assert suspended(crds, ns, "waits") and suspended(crds, ns, "theirs")
        assert quota_events(daemon, ns, "waits") == [] and quota_events(daemon, ns, "theirs") == []
        assert of_type(mine(daemon, ns), "security.job_tampered") == [], "nothing got through to be undone"
    finally:
        assert daemon.stop() == 0, daemon.stderr.read_text()[-3000:]


def test_with_the_webhooks_bypassed_each_job_is_suspended_at_once_and_recorded_as_a_security_event(
    crds: KubeCluster, namespace: str, tmp_path: Path, cleanup_webhooks: None
) -> None:
    ns = namespace
    _, theirs = queues(crds, ns)
    user = tenant_of(crds, ns)
    ignoring = ("--webhook-failure-policy", "Ignore")
    first = Daemon(crds, tmp_path, extra=ignoring).start()
    created = as_tenant(crds, user, "create", "-f", "-", stdin=yaml.safe_dump(job(ns, "theirs", queue="other")))
    assert created.returncode == 0, created.stderr
    wait_for("the job to be pending", lambda: bool(of_type(mine(first, ns), "workload.pending", f"{ns}/theirs")))
    first.kill()  # its webhook configurations stay, pointing at nobody, and failurePolicy Ignore lets all through

    forged = with_note(job(ns, "forged", queue="other", gpus=8, suspend=False), forged_note(theirs, f"h100-{ns}", 8))
    for doc in (forged, job(ns, "selfrun", queue="other", gpus=8, suspend=False)):
        out = as_tenant(crds, user, "create", "-f", "-", stdin=yaml.safe_dump(doc))
        assert out.returncode == 0, out.stderr
    time.sleep(1.1)  # managedFields times have second resolution: the patch is then the newest change
    out = as_tenant(crds, user, "patch", "job", "theirs", "-n", ns, "-p", '{"spec":{"suspend":false}}')
    assert out.returncode == 0, out.stderr
    names = ("forged", "selfrun", "theirs")
    assert not any(suspended(crds, ns, name) for name in names), "nothing stopped them while admitd was down"

    again = Daemon(crds, tmp_path, extra=ignoring).start()
    try:
        wait_for("all three suspended", lambda: all(suspended(crds, ns, name) for name in names), timeout=10)

        def tampered() -> dict[str, dict[str, Any]]:
            return {e["subject"]: e["payload"] for e in of_type(mine(again, ns), "security.job_tampered")}

        wait_for("three security events", lambda: len(tampered()) == 3, timeout=10)
        records = tampered()
        assert records[f"job/{ns}/forged"]["what"] == "ForgedAdmission"
        assert "admission-signature annotation is missing" in records[f"job/{ns}/forged"]["detail"]
        assert records[f"job/{ns}/forged"]["claimed_cluster_queue"] == theirs
        assert records[f"job/{ns}/forged"]["manager"] == "kubectl-create"
        assert records[f"job/{ns}/selfrun"]["what"] == "UnsuspendedWithoutAdmission"
        assert records[f"job/{ns}/theirs"]["what"] == "UnsuspendedWithoutAdmission"
        assert records[f"job/{ns}/theirs"]["manager"] == "kubectl-patch"
        assert {r["namespace"] for r in records.values()} == {ns}
        for name in names:
            assert quota_events(again, ns, name) == [], f"{name} got quota"
        log = again.stderr.read_text()
        assert "security: a job runs without an admission admitd made" in log
    finally:
        assert again.stop() == 0, again.stderr.read_text()[-3000:]
    again.verify()
    history = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "history", f"{ns}/forged", "--db", str(again.db)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    assert "security: ForgedAdmission: admitd.io/admission is not admitd's" in history, history
    assert "(changed by kubectl-create)" in history
