"""What a running `admitd run` exposes, and to whom: /metrics behind the API server's authentication and RBAC
(`--metrics-auth`), the listen defaults, and TLS 1.2 at least on the webhook port.

Real: the local control plane (marker `cluster`), `admitd run` as a process, ServiceAccount tokens the API server
issues (`kubectl create token`), RBAC from config/rbac/metrics_reader_role.yaml, TLS handshakes. Faked: nothing.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.cli import build_parser
from daemon.kube import certs
from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import Daemon, install_crds, kubectl, running_daemon


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


@pytest.fixture
def guarded(crds: KubeCluster, tmp_path: Path) -> Iterator[Daemon]:
    with running_daemon(crds, tmp_path, "--metrics-auth") as d:
        yield d


def insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


def get(url: str, token: str | None = None, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=20, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_auth_serves_metrics_only_to_callers_rbac_allows(
    guarded: Daemon, crds: KubeCluster, namespace: str
) -> None:
    ns = namespace
    kubectl(crds, "apply", "-f", str(REPO / "config" / "rbac" / "metrics_reader_role.yaml"))
    for sa in ("scraper", "nosy"):
        kubectl(crds, "create", "serviceaccount", sa, "-n", ns)
    binding = f"scraper-{ns}"
    kubectl(
        crds,
        "create",
        "clusterrolebinding",
        binding,
        "--clusterrole=admitd-metrics-reader",
        f"--serviceaccount={ns}:scraper",
    )
    try:
        scraper = kubectl(crds, "create", "token", "scraper", "-n", ns).strip()
        nosy = kubectl(crds, "create", "token", "nosy", "-n", ns).strip()
        url = f"https://127.0.0.1:{guarded.webhook_port}/metrics"

        status, body = get(url, context=insecure())
        assert (status, "a bearer token is required" in body) == (401, True)
        status, body = get(url, "not-a-token", insecure())
        assert (status, "the token is not valid" in body) == (401, True)
        status, body = get(url, nosy, insecure())
        assert status == 403 and f"system:serviceaccount:{ns}:nosy may not get /metrics" in body
        status, body = get(url, scraper, insecure())
        assert status == 200, body[:500]
        assert "admitd_leader" in body

        # The plain health port keeps only the probes.
        assert get(f"http://127.0.0.1:{guarded.health_port}/metrics")[0] == 404
        assert get(f"http://127.0.0.1:{guarded.health_port}/healthz") == (200, "ok")
    finally:
        kubectl(crds, "delete", "clusterrolebinding", binding, "--ignore-not-found")


def test_the_webhook_port_speaks_tls_1_2(guarded: Daemon) -> None:
    only_1_2 = insecure()
    only_1_2.minimum_version = only_1_2.maximum_version = ssl.TLSVersion.TLSv1_2
    assert get(f"https://127.0.0.1:{guarded.webhook_port}/metrics", context=only_1_2)[0] == 401


def test_the_webhook_servers_context_refuses_anything_below_tls_1_2(tmp_path: Path) -> None:
    # Said in the server's context, not left to the Python or OpenSSL build (a client cannot test the refusal
    # reliably: its own OpenSSL often cannot offer TLS 1.1 any more).
    cert = certs.load_or_make_cert(tmp_path, ["127.0.0.1"])
    assert certs.ServingTLS(cert).context.minimum_version == ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize(
    ("pod_ip", "host"), [(None, "127.0.0.1"), ("10.244.1.7", "10.244.1.7")], ids=["outside-a-pod", "in-a-pod"]
)
def test_the_servers_listen_on_loopback_or_the_pods_ip_unless_told(
    monkeypatch: pytest.MonkeyPatch, pod_ip: str | None, host: str
) -> None:
    if pod_ip is None:
        monkeypatch.delenv("POD_IP", raising=False)
    else:
        monkeypatch.setenv("POD_IP", pod_ip)
    args = build_parser("run").parse_args(["run"])
    assert (args.health_host, args.webhook_host, args.metrics_auth) == (host, host, False)
    told = build_parser("run").parse_args(["run", "--health-host", "0.0.0.0", "--webhook-host", "0.0.0.0"])
    assert (told.health_host, told.webhook_host) == ("0.0.0.0", "0.0.0.0")
