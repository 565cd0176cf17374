"""The webhook's serving certificate with the real API server calling (marker `cluster`).

Real: `admitd run` as a process, the API server's webhook calls and their TLS verification against the caBundle
admitd patched in, the Secret API. Each test creates a Job through the webhook (failurePolicy Fail): it is created
suspended only when the API server trusted the certificate served for the address in the configuration.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.domain.actuation import ADMISSION_ANNOTATION
from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import (
    apply,
    free_port,
    get_job,
    install_crds,
    job,
    kubectl,
    running_daemon,
    wait_for,
)
from tests.integration.test_daemon import cluster_queue, flavor, local_queue
from tests.unit.test_certs import write_operator_cert

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


def _queues(cluster: KubeCluster, ns: str) -> None:
    rf, cq = f"h100-{ns}", f"cq-{ns}"
    apply(cluster, flavor(rf, **{"gpu-type": "h100"}), cluster_queue(cq, rf, 64), local_queue(ns, "q", cq))


def _through_webhook(cluster: KubeCluster, ns: str, name: str) -> bool:
    """The Job went through admitd's webhook: it carries the admission annotation the webhook adds (the create
    itself would have failed otherwise, failurePolicy Fail)."""
    return ADMISSION_ANNOTATION in (get_job(cluster, ns, name)["metadata"].get("annotations") or {})


def _served(port: int, host: str = "127.0.0.1") -> bytes:
    """The certificate the webhook server presents now (not verified: only which one)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return ssl.DER_cert_to_PEM_cert(der).encode()


def _ca_bundle(cluster: KubeCluster) -> bytes:
    config = json.loads(kubectl(cluster, "get", "mutatingwebhookconfiguration", "admitd", "-o", "json"))
    return base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])


def test_the_self_made_certificate_names_the_webhook_url_host(
    crds: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """The API server calls 127.0.0.2, which is none of the local names a certificate carried before (the create
    failed then with "x509: certificate is valid for 127.0.0.1, ..., not 127.0.0.2")."""
    _queues(crds, namespace)
    port = free_port()
    extra = ("--webhook-host", "127.0.0.2", "--webhook-port", str(port), "--webhook-url", f"https://127.0.0.2:{port}")
    with running_daemon(crds, tmp_path, *extra):
        apply(crds, job(namespace, "by-ip", queue="q"))
        assert _through_webhook(crds, namespace, "by-ip")


@pytest.mark.timeout(180)
def test_the_operators_certificate_is_used_as_is_and_reloaded_when_it_changes(
    crds: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    _queues(crds, namespace)
    given = tmp_path / "given"
    crt, _, ca = write_operator_cert(given, ["127.0.0.1"])
    with running_daemon(crds, tmp_path / "run", "--cert-dir", str(given)) as daemon:
        assert _ca_bundle(crds) == ca, "the caBundle is the operator's CA"
        assert _served(daemon.webhook_port) == crt
        apply(crds, job(namespace, "first", queue="q"))
        assert _through_webhook(crds, namespace, "first")
        # cert-manager renews with a new CA: the files change under the running daemon.
        crt2, _, ca2 = write_operator_cert(given, ["127.0.0.1"])
        wait_for("the new certificate to be served", lambda: _served(daemon.webhook_port) == crt2, timeout=30)
        wait_for("the caBundle to carry the new CA", lambda: _ca_bundle(crds) == ca2, timeout=30)
        apply(crds, job(namespace, "second", queue="q"))
        assert _through_webhook(crds, namespace, "second")
        assert sorted(p.name for p in given.iterdir()) == ["ca.crt", "tls.crt", "tls.key"], "nothing written there"
        assert (given / "tls.crt").read_bytes() == crt2
    assert "webhook serving" in daemon.stderr.read_text()


def _run_until_exit(cluster: KubeCluster, workdir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable,
        "-m",
        "daemon.cli",
        "run",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--db",
        str(workdir / "admitd.db"),
        "--webhook-host",
        "127.0.0.1",
        "--webhook-port",
        str(free_port()),
        "--health-host",
        "127.0.0.1",
        "--health-port",
        str(free_port()),
        "--no-register-webhook",
        *extra,
    ]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=90, check=False)


def test_a_missing_certificate_file_stops_the_daemon_with_one_line_naming_it(crds: KubeCluster, tmp_path: Path) -> None:
    given = tmp_path / "given"
    write_operator_cert(given, ["127.0.0.1"])
    (given / "tls.crt").unlink()  # the Secret mounted without its certificate
    result = _run_until_exit(crds, tmp_path, "--cert-dir", str(given))
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == (
        f"admitd: {given / 'tls.crt'}: missing; the serving certificate goes beside tls.key (a kubernetes.io/tls "
        "Secret)"
    )


def test_a_shared_secret_of_the_wrong_type_stops_the_daemon_with_one_line_naming_it(
    crds: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    kubectl(crds, "create", "secret", "generic", "-n", namespace, "serving", "--from-literal=tls.crt=x")
    result = _run_until_exit(crds, tmp_path, "--cert-secret", f"{namespace}/serving")
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == (
        f"admitd: Secret {namespace}/serving is of type Opaque, not kubernetes.io/tls: delete it (admitd creates it) "
        "or name another with --cert-secret"
    )
    secret = json.loads(kubectl(crds, "get", "secret", "-n", namespace, "serving", "-o", "json"))
    assert secret["type"] == "Opaque" and base64.b64decode(secret["data"]["tls.crt"]) == b"x", "left as it was"
