"""Credentials that rotate, against the real API server: who the server says the caller is, request by request.

Real: the local control plane's ServiceAccount tokens (`kubectl create token`), its authenticator (a deleted
ServiceAccount's tokens get 401), a SelfSubjectReview answering with the caller's name; admitd's own
`load_configuration` in its in-cluster mode (the token and CA files and KUBERNETES_SERVICE_HOST/PORT a pod has) and
with an `exec` plugin in a kubeconfig; the KubeClient that every daemon request goes through. Faked: the paths of
the service-account files (a test cannot write /var/run/secrets) and the clock that ages a token.
"""

from __future__ import annotations

import base64
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from daemon.kube import client as kube_client
from daemon.kube.client import KubeClient, load_configuration
from daemon.kube.credentials import ExecPlugin, TokenFile
from daemon.kube.errors import Permanent
from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import kubectl, wait_for
from tests.unit.test_kube_credentials import exec_user, runs, write_plugin

pytestmark = pytest.mark.cluster

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


async def whoami(client: KubeClient) -> str:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer = await client.request("POST", REVIEW, body=body)
    name: str = answer["status"]["userInfo"]["username"]
    return name


def service_accounts(cluster: KubeCluster, namespace: str, *names: str) -> dict[str, str]:
    """A token (1 h) of each new ServiceAccount `names` in `namespace`."""
    tokens = {}
    for name in names:
        kubectl(cluster, "create", "serviceaccount", name, "-n", namespace)
        tokens[name] = kubectl(cluster, "create", "token", name, "-n", namespace, "--duration=1h").strip()
    return tokens


def cluster_ca(cluster: KubeCluster) -> bytes:
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
    if "certificate-authority-data" in server:
        return base64.b64decode(server["certificate-authority-data"])
    return Path(server["certificate-authority"]).read_bytes()


def rejected(cluster: KubeCluster, token: str) -> Callable[[], bool]:
    """True once the API server answers `token` with 401 (its ServiceAccount deleted)."""

    def check() -> bool:
        request = urllib.request.Request(
            cluster.apiserver_url + "/version", headers={"Authorization": f"Bearer {token}"}
        )
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen(request, context=context, timeout=10):
                return False
        except urllib.error.HTTPError as e:
            return e.code == 401

    return check


def user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


async def test_the_in_cluster_token_file_rewritten_mid_run_is_used_for_the_next_request(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = service_accounts(kube_cluster, namespace, "first", "second", "third")
    token_file, ca_file = tmp_path / "token", tmp_path / "ca.crt"
    token_file.write_text(tokens["first"])
    ca_file.write_bytes(cluster_ca(kube_cluster))
    url = urlsplit(kube_cluster.apiserver_url)
    monkeypatch.setattr(kube_client, "SERVICE_TOKEN_FILE", token_file)
    monkeypatch.setattr(kube_client, "SERVICE_CA_FILE", ca_file)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(url.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(url.port))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # none: the in-cluster service account

    cfg = await load_configuration(None)
    source = cfg.refresh_api_key_hook
    assert isinstance(source, TokenFile) and source.path == token_file
    async with KubeClient(cfg) as client:
        assert await whoami(client) == user(namespace, "first")
        token_file.write_text(tokens["second"])  # the kubelet rotates the projected token
        assert await whoami(client) == user(namespace, "first")  # read at most once a minute, as client-go
        source.clock = lambda: time.monotonic() + 61  # a minute later
        assert await whoami(client) == user(namespace, "second")

        # The old token stops working before the minute is up (here: its ServiceAccount is deleted): the 401 makes
        # the client read the file again and send the same request once more.
        token_file.write_text(tokens["third"])
        kubectl(kube_cluster, "delete", "serviceaccount", "second", "-n", namespace)
        wait_for("the deleted ServiceAccount's token to be refused", rejected(kube_cluster, tokens["second"]))
        sent, reads = client.requests, source.reads
        assert await whoami(client) == user(namespace, "third")
        assert (client.requests - sent, source.reads - reads) == (2, 1)

        # A 401 with nothing better in the file is the API server's answer, once, not a loop.
        kubectl(kube_cluster, "delete", "serviceaccount", "third", "-n", namespace)
        wait_for("the third token to be refused", rejected(kube_cluster, tokens["third"]))
        sent = client.requests
        with pytest.raises(Permanent) as refused:
            await whoami(client)
        assert refused.value.status == 401 and client.requests - sent == 2


async def test_an_exec_plugin_token_is_used_until_it_expires_then_the_plugin_runs_again(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    tokens = service_accounts(kube_cluster, namespace, "deploy-a", "deploy-b", "deploy-c")
    script, token_file, runs_file = write_plugin(tmp_path, expires_s=300)
    token_file.write_text(tokens["deploy-a"])
    admin = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": admin["clusters"][0]["cluster"]["server"],
                            "certificate-authority-data": base64.b64encode(cluster_ca(kube_cluster)).decode(),
                        },
                    }
                ],
                "users": [{"name": "ci", "user": exec_user(script)}],
                "contexts": [{"name": "ci", "context": {"cluster": "local", "user": "ci"}}],
                "current-context": "ci",
            }
        )
    )
    cfg = await load_configuration(kubeconfig)
    plugin = cfg.refresh_api_key_hook
    assert isinstance(plugin, ExecPlugin)
    async with KubeClient(cfg) as client:
        assert await whoami(client) == user(namespace, "deploy-a")
        token_file.write_text(tokens["deploy-b"])
        assert await whoami(client) == user(namespace, "deploy-a")  # cached until its expirationTimestamp
        assert runs(runs_file) == 1
        plugin.clock = lambda: time.time() + 301  # past it
        assert await whoami(client) == user(namespace, "deploy-b")
        assert runs(runs_file) == 2
        # Revoked before it expires: the 401 runs the plugin again.
        token_file.write_text(tokens["deploy-c"])
        kubectl(kube_cluster, "delete", "serviceaccount", "deploy-b", "-n", namespace)
        wait_for("the deleted ServiceAccount's token to be refused", rejected(kube_cluster, tokens["deploy-b"]))
        assert await whoami(client) == user(namespace, "deploy-c")
        assert runs(runs_file) == 3
