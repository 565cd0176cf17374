"""The HA overlay (`kubectl apply --server-side -k config/ha/`) rendered by kubectl's own kustomize and checked by the
real API server in a server-side dry run. The take-over itself: tests/integration/test_ha_takeover.py.

config/ha cannot name config/ (kustomize refuses an overlay inside its base's folder), so it lists config/'s parts;
the first test fails when config/ renders something config/ha does not, or the two differ other than as intended.
"""

from __future__ import annotations

import copy
import subprocess
from typing import Any

import pytest
import yaml

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import kubectl

pytestmark = pytest.mark.cluster

NAMESPACE = "admitd-system"
SECRET = "admitd-serving-cert"


def render(cluster: KubeCluster, path: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = subprocess.run(
        [str(cluster.kubectl), "kustomize", str(REPO / path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}


@pytest.fixture(scope="module")
def base(kube_cluster: KubeCluster) -> dict[tuple[str, str], dict[str, Any]]:
    return render(kube_cluster, "config")


@pytest.fixture(scope="module")
def ha(kube_cluster: KubeCluster) -> dict[tuple[str, str], dict[str, Any]]:
    return render(kube_cluster, "config/ha")


def test_the_overlay_renders_the_base_but_for_the_statefulset_and_its_certificate(
    base: dict[tuple[str, str], dict[str, Any]], ha: dict[tuple[str, str], dict[str, Any]]
) -> None:
    replaced = {("Deployment", "admitd"), ("PersistentVolumeClaim", "admitd-log")}
    added = {
        ("StatefulSet", "admitd"),
        ("Service", "admitd-replicas"),
        ("Role", SECRET),
        ("RoleBinding", SECRET),
    }
    assert set(ha) == (set(base) - replaced) | added
    for key in set(base) - replaced:
        assert ha[key] == base[key], f"{key} differs from config/'s"


def test_the_statefulset_runs_the_deployments_pod_with_leader_election_and_the_shared_certificate(
    base: dict[tuple[str, str], dict[str, Any]], ha: dict[tuple[str, str], dict[str, Any]]
) -> None:
    sts = ha[("StatefulSet", "admitd")]["spec"]
    assert sts["replicas"] == 2 and sts["podManagementPolicy"] == "Parallel"
    deployment = base[("Deployment", "admitd")]["spec"]
    assert sts["selector"] == deployment["selector"]
    template, expected = sts["template"], copy.deepcopy(deployment["template"])
    container = expected["spec"]["containers"][0]
    container["args"] += [
        "--leader-elect",
        "--identity=$(POD_NAME)",
        f"--cert-secret={NAMESPACE}/{SECRET}",
        "--admission-key-file=/etc/admitd-admission-key/key",
    ]
    container["volumeMounts"] = [
        *container["volumeMounts"],
        {"name": "admission-key", "mountPath": "/etc/admitd-admission-key", "readOnly": True},
    ]
    container["env"] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *container.get("env", []),
    ]
    expected["spec"]["volumes"] = [v for v in expected["spec"]["volumes"] if v["name"] != "log"] + [
        {"name": "admission-key", "secret": {"secretName": "admitd-admission-key", "defaultMode": 0o400}}
    ]
    assert template == expected, (
        "the pod is the Deployment's, with only the HA flags, the shared admission key and the per-replica volume"
    )
    [claim] = sts["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "log" and claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert any(m["name"] == "log" for m in container["volumeMounts"]), "the log's volume is mounted as in the base"
    # The webhook Service selects every replica (a standby answers the webhook too).
    service = ha[("Service", "admitd-webhook")]["spec"]["selector"]
    assert all(template["metadata"]["labels"].get(k) == v for k, v in service.items())


def test_the_secret_role_names_the_one_secret_and_only_creates_beside_it(
    ha: dict[tuple[str, str], dict[str, Any]],
) -> None:
    role = ha[("Role", SECRET)]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SECRET], "verbs": ["get", "update"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    binding = ha[("RoleBinding", SECRET)]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "admitd", "namespace": NAMESPACE}]


def test_every_object_of_the_overlay_applies_in_a_server_side_dry_run(
    kube_cluster: KubeCluster, ha: dict[tuple[str, str], dict[str, Any]]
) -> None:
    # The namespace for real (an earlier module may be deleting it: wait for that first), the rest dry-run.
    kubectl(kube_cluster, "wait", "--for=delete", f"namespace/{NAMESPACE}", "--timeout=120s", check=False)
    kubectl(kube_cluster, "apply", "-f", "-", stdin=yaml.safe_dump(ha[("Namespace", NAMESPACE)]))
    docs = [d for key, d in ha.items() if key[0] != "CustomResourceDefinition"]
    try:
        out = kubectl(
            kube_cluster,
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(docs),
        )
    finally:
        kubectl(kube_cluster, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(docs) and all(line.endswith("(server dry run)") for line in lines), out
