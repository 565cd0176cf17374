"""Registration against the real API server: the CRDs' conversion and the webhook configurations switched between
`url` (a local run, the host recipe) and `service` (in the cluster), in every order with `kubectl apply
--server-side` of config/ between them (marker `cluster`).

The defect (issue 22): after a local run, re-applying config/crd failed with "exactly one of url or service is
required": server-side apply kept admitd's `url` (another manager's field) beside the applied `service`. Now admitd
replaces clientConfig whole (a JSON patch) and hands the new form's ownership to whoever applied the old one
(`webhook.hand_over`), so the next apply replaces it. Each step below is what admitd or an operator does; after
each, the apply must succeed and clientConfig must hold exactly the form of the last writer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from typing import Any

import pytest
import yaml

from daemon.kube import webhook
from daemon.kube.certs import make_serving_cert
from daemon.kube.client import KubeClient, load_configuration
from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import install_crds, kubectl

pytestmark = pytest.mark.cluster

CRD = "clusterqueues.kueue.x-k8s.io"
CRD_FILE = REPO / "config" / "crd" / "kueue.x-k8s.io_clusterqueues.yaml"
SERVICE = ("admitd-system", "admitd-webhook", 443)
URL = "https://127.0.0.1:9443"
CA = make_serving_cert(["127.0.0.1"]).cert_pem  # the API server parses the caBundle


def _crd_doc(url: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CRD_FILE.read_text())
    if url is not None:  # the host recipe: scripts/gen-crds --conversion-url
        doc["spec"]["conversion"]["webhook"]["clientConfig"] = {"url": url + webhook.CONVERT_PATH}
    return doc


def _apply(cluster: KubeCluster, doc: dict[str, Any]) -> None:
    """`kubectl apply --server-side` as the README says (no --force-conflicts); it must succeed."""
    kubectl(cluster, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(doc))


def _run(cluster: KubeCluster, *, url: str | None) -> None:
    """What `admitd run` does when it leads: the conversion pointed at itself (by URL, or through the Service)."""

    async def point() -> None:
        async with KubeClient(await load_configuration(cluster.kubeconfig)) as client:
            await webhook.point_conversion(client, CA, url=url, service=None if url else SERVICE)

    asyncio.run(point())


def _client_config(cluster: KubeCluster) -> dict[str, Any]:
    crd = json.loads(kubectl(cluster, "get", "crd", CRD, "-o", "json"))
    out: dict[str, Any] = crd["spec"]["conversion"]["webhook"]["clientConfig"]
    return out


def _form(config: dict[str, Any]) -> str:
    forms = [k for k in ("url", "service") if k in config]
    assert len(forms) == 1, config
    return forms[0]


@pytest.fixture(scope="module")
def installed(kube_cluster: KubeCluster) -> Any:
    install_crds(kube_cluster)
    yield kube_cluster
    install_crds(kube_cluster)  # as config/crd has it, for the other modules


@pytest.fixture
def crd(installed: KubeCluster) -> KubeCluster:
    _apply(installed, _crd_doc())  # each order starts from config/crd as applied
    return installed


ORDERS = {
    "local run, then apply": ["apply", "run-url", "apply"],
    "apply, local run, local run again, apply": ["apply", "run-url", "run-url", "apply"],
    "in-cluster run, then apply": ["apply", "run-service", "apply"],
    "local run, in-cluster run, apply, local run, apply": ["run-url", "run-service", "apply", "run-url", "apply"],
    "host recipe (applied by URL), in-cluster run, apply by URL": ["apply-url", "run-service", "apply-url"],
}


@pytest.mark.parametrize("steps", list(ORDERS.values()), ids=list(ORDERS))
def test_any_order_of_runs_and_applies_leaves_one_form(crd: KubeCluster, steps: list[str]) -> None:
    for step in steps:
        if step == "apply":
            _apply(crd, _crd_doc())
            expected = "service"
        elif step == "apply-url":
            _apply(crd, _crd_doc(URL))
            expected = "url"
        else:
            _run(crd, url=URL if step == "run-url" else None)
            expected = "url" if step == "run-url" else "service"
        config = _client_config(crd)
        assert _form(config) == expected, (step, config)
        if step.startswith("run"):
            assert base64.b64decode(config["caBundle"]) == CA, "the caBundle is the daemon's"


def test_the_defect_reproduced_without_the_hand_over(crd: KubeCluster) -> None:
    """A merge patch of url (service set to null) as before, no hand-over: the re-apply fails with the issue's
    message. This is the failure the hand-over prevents."""
    _apply(crd, _crd_doc())
    patch = {"spec": {"conversion": {"webhook": {"clientConfig": {"url": URL + "/convert", "service": None}}}}}
    kubectl(crd, "patch", "crd", CRD, "--type=merge", "-p", json.dumps(patch))
    result = subprocess.run(
        [str(crd.kubectl), "--kubeconfig", str(crd.kubeconfig), "apply", "--server-side", "-f", "-"],
        input=yaml.safe_dump(_crd_doc()),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode != 0
    assert "exactly one of url or service is required" in result.stderr, result.stderr


def test_the_webhook_configuration_switches_too(kube_cluster: KubeCluster) -> None:
    shipped = webhook.webhook_configuration(b"", url=None, service=SERVICE, failure_policy="Fail")
    del shipped["webhooks"][0]["clientConfig"]["caBundle"]  # config/ ships none
    try:
        for step in ["apply", "run-url", "apply", "run-url", "run-service", "apply"]:
            if step == "apply":
                kubectl(kube_cluster, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(shipped))
            else:

                async def register(url: str | None) -> None:
                    async with KubeClient(await load_configuration(kube_cluster.kubeconfig)) as client:
                        await webhook.register(
                            client,
                            webhook.MUTATING,
                            CA,
                            url=url,
                            service=None if url else SERVICE,
                            failure_policy="Fail",
                        )

                asyncio.run(register(URL if step == "run-url" else None))
            live = json.loads(kubectl(kube_cluster, "get", "mutatingwebhookconfiguration", "admitd", "-o", "json"))
            expected = "url" if step == "run-url" else "service"
            assert _form(live["webhooks"][0]["clientConfig"]) == expected, (step, live["webhooks"][0])
    finally:
        kubectl(kube_cluster, "delete", "mutatingwebhookconfiguration", "admitd", "--ignore-not-found")
