"""`kubectl admitd ...` and `admitd ... --kube`: the daemon's answers asked through the real API server's service
proxy, with RBAC on `services/proxy` (config/rbac/answers_viewer_role.yaml) deciding who may ask; and `--server`.

Real: the local control plane (marker `cluster`), `admitd run` as a process, kubectl running the `kubectl-admitd`
plugin from PATH, ServiceAccount tokens, the API server's proxy and its RBAC. The API server proxies only to a pod's
IP (never loopback), so the test gives the IP kwok wrote into a pod's status to a veth in a network namespace of its
own, where a forwarder (tests/integration/forward.py) passes each connection over a UNIX socket to the daemon on
loopback. Needs root and `ip` (CAP_NET_ADMIN); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import Daemon, install_crds, kubectl, running_daemon, wait_for
from tests.integration.test_served_answers_daemon import cleanup, get, one_running_one_waiting

pytestmark = pytest.mark.cluster

FORWARD = Path(__file__).resolve().parent / "forward.py"
PORT = 8080
SERVICE = "admitd-metrics"  # the name config/ gives it, so that the shipped ClusterRole applies unchanged


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


def pod_ip(cluster: KubeCluster, ns: str) -> tuple[str, str]:
    """A pod on a kwok node (it only needs an IP in its status): its name and IP."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "answers-target", "namespace": ns},
        "spec": {
            "containers": [{"name": "c", "image": "none"}],
            "tolerations": [{"operator": "Exists"}],
            "nodeSelector": {"type": "kwok"},
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(pod))
    found: dict[str, str] = {}

    def has_ip() -> bool:
        out = kubectl(cluster, "get", "pod", "-n", ns, "answers-target", "-o", "jsonpath={.status.podIP}").strip()
        found["ip"] = out
        return bool(out)

    wait_for("the pod to get an IP", has_ip, timeout=60)
    return "answers-target", found["ip"]


@pytest.fixture
def reachable(crds: KubeCluster, tmp_path: Path, namespace: str) -> Iterator[tuple[Daemon, str]]:
    """A daemon, and a Service `admitd-metrics` in the test's namespace whose endpoint (a pod's IP, in a network
    namespace of the test's own) forwards to the daemon's health port."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a network namespace (ip netns, a veth pair)")
    tag = secrets.token_hex(3)
    netns, host_if, ns_if = f"admitd-{tag}", f"adh{tag}", f"adn{tag}"
    try:
        ip("netns", "add", netns)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        pytest.skip(f"cannot make a network namespace: {getattr(e, 'stderr', e)!r}")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        name, address = pod_ip(crds, namespace)
        gateway = f"10.213.{int(tag[:2], 16)}.1"
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", netns)
        ip("addr", "add", f"{gateway}/32", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("route", "add", f"{address}/32", "dev", host_if, "src", gateway)
        ip("-n", netns, "link", "set", "lo", "up")
        ip("-n", netns, "addr", "add", f"{address}/32", "dev", ns_if)
        ip("-n", netns, "link", "set", ns_if, "up")
        ip("-n", netns, "route", "add", f"{gateway}/32", "dev", ns_if)
        with running_daemon(crds, tmp_path / "daemon") as d:
            sock = str(tmp_path / "fwd.sock")
            for argv in (
                [sys.executable, str(FORWARD), "unix", sock, "127.0.0.1", str(d.health_port)],
                ["ip", "netns", "exec", netns, sys.executable, str(FORWARD), "tcp", address, str(PORT), sock],
            ):
                p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                procs.append(p)
                assert p.stdout is not None and p.stdout.readline().strip() == b"listening"
            service = {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": SERVICE, "namespace": namespace},
                "spec": {"ports": [{"name": "metrics", "port": PORT, "targetPort": PORT}]},
            }
            endpoints = {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": SERVICE, "namespace": namespace},
                "subsets": [
                    {
                        "addresses": [
                            {"ip": address, "targetRef": {"kind": "Pod", "name": name, "namespace": namespace}}
                        ],
                        "ports": [{"name": "metrics", "port": PORT}],
                    }
                ],
            }
            kubectl(crds, "apply", "-f", "-", stdin=yaml.safe_dump_all([service, endpoints]))
            yield d, namespace
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
            if p.stdout is not None:
                p.stdout.close()
        subprocess.run(["ip", "link", "del", host_if], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", netns], check=False, capture_output=True)


def user_kubeconfig(cluster: KubeCluster, ns: str, sa: str, path: Path) -> Path:
    """A kubeconfig for ServiceAccount `sa`: the cluster's server and CA, the SA's token, `ns` as its namespace."""
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    c = admin["clusters"][0]
    token = kubectl(cluster, "create", "token", sa, "-n", ns).strip()
    cluster_entry = dict(c["cluster"])
    if "certificate-authority" in cluster_entry:
        cluster_entry["certificate-authority"] = str(cluster.kubeconfig.parent / cluster_entry["certificate-authority"])
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster_entry}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": "local", "user": sa, "namespace": ns}}],
        "current-context": sa,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False)


def test_kubectl_admitd_asks_through_the_api_servers_proxy_as_rbac_allows(
    reachable: tuple[Daemon, str], crds: KubeCluster, tmp_path: Path
) -> None:
    d, ns = reachable
    cq = f"proxy-{ns}"
    kubectl(crds, "apply", "-f", str(REPO / "config" / "rbac" / "answers_viewer_role.yaml"))
    for sa in ("oncall", "nosy"):
        kubectl(crds, "create", "serviceaccount", sa, "-n", ns)
    kubectl(
        crds,
        "create",
        "rolebinding",
        "oncall",
        "-n",
        ns,
        "--clusterrole=admitd-answers-viewer",
        f"--serviceaccount={ns}:oncall",
    )
    try:
        one_running_one_waiting(crds, ns, cq)
        direct = f"http://127.0.0.1:{d.health_port}/answers/v1"

        def waiting() -> bool:
            status, body = get(f"{direct}/pending?queue={cq}")
            rows = body["cluster_queues"].get(cq, []) if status == 200 else []
            return len(rows) == 1 and rows[0]["reason"] is not None

        wait_for("the second job to wait", waiting)
        oncall = user_kubeconfig(crds, ns, "oncall", tmp_path / "oncall.kubeconfig")
        nosy = user_kubeconfig(crds, ns, "nosy", tmp_path / "nosy.kubeconfig")
        service = f"{ns}/http:{SERVICE}:metrics"

        # kubectl finds the plugin on PATH; the namespace comes from the context.
        done = run(
            str(crds.kubectl),  # kubectl's own flags cannot come before a plugin's name
            "admitd",
            "pending",
            "--kubeconfig",
            str(oncall),
            "localqueue/q",
            "-o",
            "json",
            "--service",
            service,
        )
        assert done.returncode == 0, done.stderr
        body = json.loads(done.stdout)
        assert [(r["job"], r["position"], r["reason"]) for r in body["cluster_queues"][cq]] == [
            (f"{ns}/second", 0, "WaitingForQuota")
        ]
        assert body["cluster_queues"] == get(f"{direct}/pending?queue={ns}/q")[1]["cluster_queues"]

        done = run(
            "kubectl-admitd",
            "explain",
            "job/second",
            "-n",
            ns,
            "--kubeconfig",
            str(oncall),
            "--service",
            service,
            "-o",
            "json",
        )
        assert done.returncode == 0, done.stderr
        x = json.loads(done.stdout)
        assert (x["job"], x["status"], x["verdict"]) == (f"{ns}/second", "pending", "waiting")
        text = run("kubectl-admitd", "explain", "job/second", "--kubeconfig", str(oncall), "--service", service)
        assert text.returncode == 0 and f"{ns}/second" in text.stdout, text.stderr

        # The admin, with admitd's own command line; a port number works as the port's name does.
        done = run(
            sys.executable,
            "-m",
            "daemon.cli",
            "queues",
            "--kube",
            "--kubeconfig",
            str(crds.kubeconfig),
            "--service",
            f"{ns}/http:{SERVICE}:{PORT}",
            "--json",
        )
        assert done.returncode == 0, done.stderr
        assert any(q["name"] == cq and q["pending"] == 1 for q in json.loads(done.stdout)["cluster_queues"])

        # RBAC decides: nosy may not use the proxy; a 404 of the daemon comes back as the daemon's message.
        denied = run("kubectl-admitd", "explain", "job/second", "--kubeconfig", str(nosy), "--service", service)
        assert denied.returncode == 2 and "403" in denied.stderr and "forbidden" in denied.stderr.lower(), denied.stderr
        missing = run("kubectl-admitd", "explain", "job/nobody", "--kubeconfig", str(oncall), "--service", service)
        assert missing.returncode == 2 and "404" in missing.stderr and "(parameter job)" in missing.stderr, (
            missing.stderr
        )
    finally:
        kubectl(crds, "delete", "rolebinding", "oncall", "-n", ns, "--ignore-not-found")
        cleanup(crds, ns, cq)


def test_server_asks_a_daemon_directly(crds: KubeCluster, tmp_path: Path) -> None:
    with running_daemon(crds, tmp_path) as d:
        _server_answers(d)


def _server_answers(d: Daemon) -> None:
    server = f"http://127.0.0.1:{d.health_port}"
    remote = run(sys.executable, "-m", "daemon.cli", "queues", "--server", server, "--json")
    assert remote.returncode == 0, remote.stderr
    body: dict[str, Any] = json.loads(remote.stdout)
    assert body["clock"] == "wall" and isinstance(body["cluster_queues"], list)
    bad = run(sys.executable, "-m", "daemon.cli", "queues", "--server", server, "--at", "yesterday")
    assert bad.returncode == 2 and "'yesterday'" in bad.stderr and "(parameter at)" in bad.stderr, bad.stderr
    gone = run(sys.executable, "-m", "daemon.cli", "queues", "--server", "http://127.0.0.1:9")
    assert gone.returncode == 1 and "cannot reach the daemon" in gone.stderr
