"""The parts of the install in config/ beyond what test_deploy.py checks: the settings ConfigMap, the
PodDisruptionBudget and priority, the shipped webhook configurations, an overlay appending to `args`, the optional
Prometheus component, and the user-facing ClusterRoles as a team member sees them.

Real: kubectl's own kustomize renders config/ (and overlays written here on top of it); admitd's own argument parser
and Configuration loader read what the Deployment would run; the local control plane's RBAC authorizer and its
clusterrole-aggregation controller answer for an impersonated user. Faked: no pod runs (kwok's nodes).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemon.cli import build_parser
from daemon.kube import webhook
from daemon.manifests.config import load_config
from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import apply, install_crds, kubectl, wait_for

pytestmark = pytest.mark.cluster

NAMESPACE = "admitd-system"
KUEUE = "kueue.x-k8s.io"


def kustomize(cluster: KubeCluster, kustomization: dict[str, Any]) -> list[dict[str, Any]]:
    """Render `kustomization` (an overlay on config/, written to a scratch directory) with kubectl's kustomize."""
    folder = Path(tempfile.mkdtemp(prefix="admitd-overlay-"))
    # kustomize takes no absolute path in resources or components: each relative to the scratch directory.
    relative = {
        **kustomization,
        **{
            field: [os.path.relpath(p, folder) for p in kustomization[field]]
            for field in ("resources", "components")
            if field in kustomization
        },
    }
    try:
        (folder / "kustomization.yaml").write_text(yaml.safe_dump(relative))
        out = subprocess.run(
            [str(cluster.kubectl), "kustomize", "--load-restrictor=LoadRestrictionsNone", str(folder)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    finally:
        shutil.rmtree(folder)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


OVERLAY = {
    "apiVersion": "kustomize.config.k8s.io/v1beta1",
    "kind": "Kustomization",
    "resources": [str(REPO / "config")],
}


@pytest.fixture(scope="module")
def rendered(kube_cluster: KubeCluster) -> list[dict[str, Any]]:
    return kustomize(kube_cluster, OVERLAY)


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = one(docs, "Deployment", "admitd")["spec"]["template"]["spec"]["containers"]
    return c


def test_the_config_map_is_config_admitd_yaml_and_the_deployment_runs_with_it(
    rendered: list[dict[str, Any]], tmp_path: Path
) -> None:
    config_map = one(rendered, "ConfigMap")
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert config_map["data"] == {"admitd.yaml": (REPO / "config" / "admitd.yaml").read_text()}  # the file itself
    pod = one(rendered, "Deployment", "admitd")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]  # kustomize rewrote the hashed name
    c = container(rendered)
    mount = next(m for m in c["volumeMounts"] if m["name"] == volume["name"])
    assert mount["readOnly"] is True
    args = build_parser("run").parse_args(c["args"])
    assert args.command == "run" and args.config == Path(mount["mountPath"]) / "admitd.yaml"
    # What admitd would read there loads without an error.
    copy_of_mount = tmp_path / "admitd.yaml"
    copy_of_mount.write_text(config_map["data"]["admitd.yaml"])
    load_config(copy_of_mount)


def test_a_disruption_budget_lets_a_drain_through_and_the_pod_is_system_cluster_critical(
    rendered: list[dict[str, Any]],
) -> None:
    deployment = one(rendered, "Deployment", "admitd")
    pdb = one(rendered, "PodDisruptionBudget", "admitd")
    assert pdb["metadata"]["namespace"] == NAMESPACE
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # One replica: minAvailable 1 would block every drain of its node; maxUnavailable 1 lets it through.
    assert pdb["spec"] == {**pdb["spec"], "maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}
    assert "minAvailable" not in pdb["spec"]
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"


def test_the_shipped_webhook_configurations_are_what_admitd_registers_without_a_ca_bundle(
    rendered: list[dict[str, Any]],
) -> None:
    engine, _ = load_config(REPO / "config" / "admitd.yaml")
    for hook in (webhook.MUTATING, webhook.VALIDATING):
        built = webhook.webhook_configuration(
            b"",
            url=None,
            service=("admitd-system", "admitd-webhook", 443),
            failure_policy="Fail",
            namespaces=engine.jobs.namespace_selector,
            hook=hook,
        )
        # Applied, a caBundle would be owned by kubectl and blanked on every re-apply: admitd patches it in.
        del built["webhooks"][0]["clientConfig"]["caBundle"]
        assert one(rendered, hook.kind, webhook.CONFIGURATION_NAME) == built, hook.kind
    mutating = one(rendered, "MutatingWebhookConfiguration", webhook.CONFIGURATION_NAME)
    validating = one(rendered, "ValidatingWebhookConfiguration", webhook.CONFIGURATION_NAME)
    (mjob,), (vjob,) = mutating["webhooks"], validating["webhooks"]
    assert vjob["name"] == "vjob.admitd.io" and vjob["clientConfig"]["service"]["path"] == "/validate-jobs"
    assert {r["operations"] == ["CREATE", "UPDATE"] for r in vjob["rules"]} == {True}
    # The same objects as the mutating one: the same kinds, selectors, Service, failure policy.
    same = copy.deepcopy(vjob)
    same["name"], same["clientConfig"]["service"]["path"] = mjob["name"], mjob["clientConfig"]["service"]["path"]
    for r in same["rules"]:
        r["operations"] = ["CREATE"]
    assert same == mjob
    service = one(rendered, "Service", vjob["clientConfig"]["service"]["name"])
    assert service["metadata"]["namespace"] == vjob["clientConfig"]["service"]["namespace"]


def test_an_overlay_appending_the_log_level_to_args_keeps_the_command_working(kube_cluster: KubeCluster) -> None:
    patch = [
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": v} for v in ("--log-level", "debug")
    ]
    docs = kustomize(
        kube_cluster,
        {**OVERLAY, "patches": [{"target": {"kind": "Deployment", "name": "admitd"}, "patch": json.dumps(patch)}]},
    )
    args = build_parser("run").parse_args(container(docs)["args"])
    assert args.log_level == "debug" and args.command == "run"
    assert args.db == Path("/var/lib/admitd/admitd.db") and args.config == Path("/etc/admitd/admitd.yaml")


def test_the_prometheus_component_adds_a_service_monitor_for_the_metrics_service(kube_cluster: KubeCluster) -> None:
    docs = kustomize(kube_cluster, {**OVERLAY, "components": [str(REPO / "config" / "components" / "prometheus")]})
    monitor = one(docs, "ServiceMonitor", "admitd")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["namespace"] == NAMESPACE
    selected = [
        d
        for d in docs
        if d["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= d["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in selected] == ["admitd-metrics"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in selected[0]["spec"]["ports"]} and endpoint["path"] == "/metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # Not in the default install: the monitoring.coreos.com CRDs may be absent.
    assert not any(d["kind"] == "ServiceMonitor" for d in kustomize(kube_cluster, OVERLAY))


# -- the user-facing roles, as users ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def user_roles(kube_cluster: KubeCluster, rendered: list[dict[str, Any]]) -> Iterator[list[str]]:
    install_crds(kube_cluster)
    roles = [d for d in rendered if d["kind"] == "ClusterRole" and d["metadata"]["name"].startswith("kueue-")]
    apply(kube_cluster, *roles)
    yield [r["metadata"]["name"] for r in roles]
    kubectl(kube_cluster, "delete", "clusterrole", *(r["metadata"]["name"] for r in roles), "--ignore-not-found")


def can(cluster: KubeCluster, user: str, verb: str, resource: str, namespace: str | None) -> bool:
    where = ["-n", namespace] if namespace else []
    if "/status" in resource:  # kubectl reads RESOURCE/NAME: a subresource goes in its own flag
        resource = resource.replace("/status", "")
        where.append("--subresource=status")
    out = kubectl(cluster, "auth", "can-i", verb, resource, "--as", user, *where, check=False)
    return out.strip() == "yes"


def bind(cluster: KubeCluster, namespace: str, role: str, user: str) -> None:
    apply(
        cluster,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{user}-{role}", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def test_a_team_member_with_edit_gets_workloads_and_localqueues_and_no_more(
    kube_cluster: KubeCluster, user_roles: list[str], namespace: str
) -> None:
    alice, viewer, other = f"alice-{uuid.uuid4().hex[:6]}", f"val-{uuid.uuid4().hex[:6]}", f"it-{uuid.uuid4().hex[:8]}"
    kubectl(kube_cluster, "create", "namespace", other)
    try:
        bind(kube_cluster, namespace, "edit", alice)
        bind(kube_cluster, namespace, "view", viewer)
        apply(
            kube_cluster,
            {
                "apiVersion": f"{KUEUE}/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "team-queue", "namespace": namespace},
                "spec": {"clusterQueue": "team"},
            },
        )
        # The clusterrole-aggregation controller copies the viewers' rules into `edit` and `view`: moments later.
        wait_for(
            "edit to include the LocalQueue viewer", lambda: can(kube_cluster, alice, "list", "localqueues", namespace)
        )
        out = subprocess.run(
            [
                str(kube_cluster.kubectl),
                "--kubeconfig",
                str(kube_cluster.kubeconfig),
                "--as",
                alice,
                "-n",
                namespace,
                "get",
                "workloads,localqueues",
                "-o",
                "name",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert f"localqueue.{KUEUE}/team-queue" in out.stdout
        for user in (alice, viewer):
            for verb in ("get", "list", "watch"):
                for resource in ("workloads", "localqueues"):
                    assert can(kube_cluster, user, verb, f"{resource}.{KUEUE}", namespace), (user, verb, resource)
        # Only there, only reading: admitd writes the Workloads, a batch administrator the queues.
        assert not can(kube_cluster, alice, "list", f"workloads.{KUEUE}", other)
        for verb in ("create", "update", "patch", "delete"):
            for resource in (f"workloads.{KUEUE}", f"localqueues.{KUEUE}", f"workloads.{KUEUE}/status"):
                assert not can(kube_cluster, alice, verb, resource, namespace), (verb, resource)
        for resource in ("clusterqueues", "resourceflavors", "cohorts", "workloadpriorityclasses"):
            assert not can(kube_cluster, alice, "list", f"{resource}.{KUEUE}", None), resource
        assert can(kube_cluster, alice, "create", "jobs.batch", namespace)  # `edit` itself
    finally:
        kubectl(kube_cluster, "delete", "namespace", other, "--wait=false")


def test_the_batch_roles_aggregate_as_kueues_do(
    kube_cluster: KubeCluster, user_roles: list[str], namespace: str
) -> None:
    user, admin = f"bob-{uuid.uuid4().hex[:6]}", f"ada-{uuid.uuid4().hex[:6]}"
    bind(kube_cluster, namespace, "kueue-batch-user-role", user)
    apply(
        kube_cluster,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{admin}-batch-admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kueue-batch-admin-role",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": admin}],
        },
    )
    try:
        wait_for("the batch roles to be aggregated", lambda: can(kube_cluster, user, "create", "jobs.batch", namespace))
        wait_for("batch-admin aggregated", lambda: can(kube_cluster, admin, "create", f"clusterqueues.{KUEUE}", None))
        assert can(kube_cluster, user, "list", f"localqueues.{KUEUE}", namespace)
        assert can(kube_cluster, user, "get", f"workloads.{KUEUE}", namespace)
        assert not can(kube_cluster, user, "create", f"localqueues.{KUEUE}", namespace)
        assert not can(kube_cluster, user, "list", f"clusterqueues.{KUEUE}", None)
        for resource in (
            "clusterqueues",
            "localqueues",
            "workloads",
            "resourceflavors",
            "cohorts",
            "workloadpriorityclasses",
        ):
            for verb in ("create", "delete", "list"):
                assert can(kube_cluster, admin, verb, f"{resource}.{KUEUE}", None), (verb, resource)
        assert not can(kube_cluster, admin, "update", f"workloads.{KUEUE}/status", None)  # admitd's alone
        assert not can(kube_cluster, admin, "list", "secrets", None)
    finally:
        kubectl(kube_cluster, "delete", "clusterrolebinding", f"{admin}-batch-admin", "--ignore-not-found")
