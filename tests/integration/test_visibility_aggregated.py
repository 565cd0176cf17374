"""Kueue's visibility API (`admitd run --visibility`) read through the real kube-apiserver's aggregation layer.

Real: the local control plane (marker `cluster`) with its front proxy (scripts/local-cluster: a front-proxy CA, the
client certificate the API server presents, --requestheader-*), `admitd run` as a process, the APIService, kubectl
(`get --raw`, `--as` impersonation), RBAC and SubjectAccessReviews. The daemon runs here on 127.0.0.1, and an
APIService can only name a Service: the API server (without --enable-aggregator-routing) dials an ExternalName
Service at the name it gives, `localhost`, on the APIService's port, which is the daemon's webhook port, and checks
the daemon's certificate (caBundle, patched in by admitd) for the Service's DNS name (admitd's self-made certificate
names the Service given with --webhook-service).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.kube.visibility_http import APISERVICE_NAME
from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import Daemon, apply, install_crds, job, kubectl, wait_for
from tests.integration.test_daemon import cluster_queue, flavor, local_queue, running

pytestmark = pytest.mark.cluster

ROOT = "/apis/visibility.kueue.x-k8s.io/v1beta1"
SERVICE = "admitd-visibility"
COMPONENT = Path(__file__).resolve().parents[2] / "config" / "components" / "visibility"


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


def raw(cluster: KubeCluster, path: str, *, as_user: str | None = None) -> tuple[int, Any]:
    """`kubectl get --raw PATH` (as the admin, or impersonating `as_user`): 0 and the body, or kubectl's exit code
    and its error text."""
    argv = [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), "get", "--raw", path]
    if as_user is not None:
        argv += ["--as", as_user]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        return done.returncode, done.stderr
    return 0, json.loads(done.stdout)


def rows(body: dict[str, Any]) -> list[tuple[str, int, str, int, int]]:
    return [
        (
            i["metadata"]["ownerReferences"][0]["name"],
            i["priority"],
            i["localQueueName"],
            i["positionInClusterQueue"],
            i["positionInLocalQueue"],
        )
        for i in body["items"]
    ]


def direct(d: Daemon, cluster: KubeCluster, path: str, *, cert: str | None, user: str | None) -> tuple[int, Any]:
    """A request to the daemon's HTTPS port as the front proxy makes it (its client certificate `cert` from the
    cluster's pki, the user in X-Remote-User), bypassing the API server."""
    context = ssl.create_default_context(cafile=str(d.workdir / "certs" / "webhook.crt"))
    if cert is not None:
        pki = cluster.state_dir / "pki"
        context.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    request = urllib.request.Request(f"https://127.0.0.1:{d.webhook_port}{path}")
    if user is not None:
        request.add_header("X-Remote-User", user)
        request.add_header("X-Remote-Group", "system:authenticated")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def available(cluster: KubeCluster) -> bool:
    got = json.loads(kubectl(cluster, "get", "apiservice", APISERVICE_NAME, "-o", "json"))
    conditions = (got.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


@pytest.fixture
def aggregated(crds: KubeCluster, tmp_path: Path, namespace: str) -> Iterator[Daemon]:
    """A daemon with --visibility, an ExternalName Service to it and the APIService, removed after (an APIService
    left unavailable would slow every other test's discovery)."""
    d = Daemon(crds, tmp_path / "daemon")
    d.extra = ("--visibility", "--webhook-service", f"{namespace}/{SERVICE}/{d.webhook_port}")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": namespace},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    apiservice = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE_NAME},
        "spec": {
            "group": "visibility.kueue.x-k8s.io",
            "version": "v1beta1",
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
            "service": {"namespace": namespace, "name": SERVICE, "port": d.webhook_port},
        },
    }
    kubectl(crds, "delete", "apiservice", APISERVICE_NAME, "--ignore-not-found")
    apply(crds, service, apiservice)
    try:
        d.start()
        try:
            wait_for("the APIService to be Available", lambda: available(crds), timeout=60)
            yield d
        finally:
            kubectl(crds, "delete", "apiservice", APISERVICE_NAME, "--ignore-not-found")
            if d.proc is not None:
                assert d.stop() == 0, d.stderr.read_text()[-3000:]
            kubectl(
                crds,
                "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                "admitd",
                "--ignore-not-found",
            )
    finally:
        kubectl(crds, "delete", "apiservice", APISERVICE_NAME, "--ignore-not-found")


def test_pendingworkloads_through_the_api_servers_aggregation_layer(
    aggregated: Daemon, crds: KubeCluster, namespace: str
) -> None:
    d, ns = aggregated, namespace
    cq, high = f"vis-{ns}", f"vis-high-{ns}"
    bindings = (f"vis-admin-{ns}", f"vis-none-{ns}")
    try:
        # The APIService trusts admitd's own CA, which admitd patched in (the test gave none).
        spec = json.loads(kubectl(crds, "get", "apiservice", APISERVICE_NAME, "-o", "json"))["spec"]
        assert spec.get("caBundle") and not spec.get("insecureSkipTLSVerify")
        apply(
            crds,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": high},
                "value": 100,
            },
            flavor(f"{cq}-gpu"),
            cluster_queue(cq, f"{cq}-gpu", 4),
            local_queue(ns, "q1", cq),
            local_queue(ns, "q2", cq),
            job(ns, "first", queue="q1", gpus=4),
        )
        wait_for("the first job to run", lambda: running(crds, ns, "first"))
        # Created in this order: p-c first by priority; the others in creation order (and by name, the same).
        apply(crds, job(ns, "p-a", queue="q1"))
        apply(crds, job(ns, "p-b", queue="q2"))
        apply(crds, job(ns, "p-c", queue="q1", priority_class=high))
        apply(crds, job(ns, "p-d", queue="q2"))
        path = f"{ROOT}/clusterqueues/{cq}/pendingworkloads"

        def four_pending() -> bool:
            code, body = raw(crds, path)
            return code == 0 and len(body["items"]) == 4

        wait_for("four workloads pending in the visibility API", four_pending)
        code, body = raw(crds, path)
        assert code == 0 and (body["kind"], body["apiVersion"]) == (
            "PendingWorkloadsSummary",
            "visibility.kueue.x-k8s.io/v1beta1",
        )
        assert rows(body) == [
            ("p-c", 100, "q1", 0, 0),
            ("p-a", 0, "q1", 1, 1),
            ("p-b", 0, "q2", 2, 0),
            ("p-d", 0, "q2", 3, 1),
        ]
        assert all(i["metadata"]["namespace"] == ns for i in body["items"])
        # The same order as admitd's own answer.
        with urllib.request.urlopen(f"http://127.0.0.1:{d.health_port}/answers/v1/pending?queue={cq}", timeout=10) as r:
            own = json.loads(r.read())["cluster_queues"][cq]
        assert [(e["job"], e["position"], e["local_queue_position"]) for e in own] == [
            (f"{ns}/{name}", cq_pos, lq_pos) for name, _, _, cq_pos, lq_pos in rows(body)
        ]

        code, lq = raw(crds, f"{ROOT}/namespaces/{ns}/localqueues/q2/pendingworkloads")
        assert code == 0 and rows(lq) == [("p-b", 0, "q2", 2, 0), ("p-d", 0, "q2", 3, 1)]
        code, page = raw(crds, f"{path}?limit=2&offset=1")
        assert code == 0 and rows(page) == [("p-a", 0, "q1", 1, 1), ("p-b", 0, "q2", 2, 0)]
        code, page = raw(crds, f"{ROOT}/namespaces/{ns}/localqueues/q1/pendingworkloads?offset=1")
        assert code == 0 and rows(page) == [("p-a", 0, "q1", 1, 1)]
        code, discovery = raw(crds, ROOT)
        assert code == 0 and discovery["kind"] == "APIResourceList"
        code, err = raw(crds, f"{ROOT}/clusterqueues/nope-{ns}/pendingworkloads")
        assert code != 0 and "not found" in err, err
        code, err = raw(crds, f"{path}?limit=-1")
        assert code != 0 and "must not be negative" in err, err

        # RBAC decides: a user with no grant is refused; Kueue's viewer role lets a batch admin read.
        alice = f"alice-{ns}"
        code, err = raw(crds, path, as_user=alice)
        assert code != 0 and "forbidden" in err.lower(), err
        kubectl(crds, "apply", "-f", str(COMPONENT / "viewer_roles.yaml"))
        kubectl(
            crds,
            "create",
            "clusterrolebinding",
            bindings[0],
            "--clusterrole=kueue-pending-workloads-cq-viewer-role",
            f"--user={alice}",
        )
        wait_for("alice to be allowed", lambda: raw(crds, path, as_user=alice)[0] == 0, timeout=30)
        assert rows(raw(crds, path, as_user=alice)[1]) == rows(body)
        code, err = raw(crds, f"{ROOT}/namespaces/{ns}/localqueues/q1/pendingworkloads", as_user=alice)
        assert code != 0 and "forbidden" in err.lower(), err  # the ClusterQueue role grants no LocalQueue list

        # A batch user with Kueue's LocalQueue viewer role in the namespace reads that namespace's queues only.
        bob = f"bob-{ns}"
        kubectl(
            crds,
            "create",
            "rolebinding",
            "vis-user",
            "-n",
            ns,
            "--clusterrole=kueue-pending-workloads-lq-viewer-role",
            f"--user={bob}",
        )
        lq_path = f"{ROOT}/namespaces/{ns}/localqueues/q2/pendingworkloads"
        wait_for("bob to be allowed", lambda: raw(crds, lq_path, as_user=bob)[0] == 0, timeout=30)
        assert rows(raw(crds, lq_path, as_user=bob)[1]) == rows(lq)
        code, err = raw(crds, path, as_user=bob)
        assert code != 0 and "forbidden" in err.lower(), err

        # admitd decides too, not only the API server: straight to its port, as the front proxy calls it.
        status, got = direct(d, crds, path, cert="front-proxy-client", user=alice)
        assert status == 200 and rows(got) == rows(body)
        status, got = direct(d, crds, path, cert="front-proxy-client", user=f"mallory-{ns}")
        assert status == 403 and (got["kind"], got["reason"], got["code"]) == ("Status", "Forbidden", 403)
        assert f"mallory-{ns}" in got["message"]
        # Without the front proxy's certificate the headers are not believed.
        status, got = direct(d, crds, path, cert=None, user=alice)
        assert status == 401 and got["reason"] == "Unauthorized"
        # A certificate of the cluster's CA (the admin's) is not the front proxy's: the TLS server refuses it.
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            direct(d, crds, path, cert="admin", user=alice)
    finally:
        kubectl(crds, "delete", "clusterrolebinding", *bindings, "--ignore-not-found")
        kubectl(crds, "delete", "jobs", "--all", "-n", ns, "--wait=false", check=False)
        kubectl(crds, "delete", "clusterqueue", cq, "--wait=false", check=False)
        kubectl(crds, "delete", "resourceflavor", f"{cq}-gpu", "--wait=false", check=False)
        kubectl(crds, "delete", "workloadpriorityclass", high, "--wait=false", check=False)
