"""No role in config/ grants a power that could be turned against the cluster.

test_deploy.py checks that admitd's roles grant exactly the calls admitd makes; this checks what no role in the tree
may grant whatever the daemon calls, so that a convenient rule added later ("just give it secrets") fails here with
the reason. Every tree is rendered by kubectl's own kustomize (tests/cluster/bin): config/ itself, each base and
overlay under it, and each optional component on top of config/. Every Role and ClusterRole counts, the
user-facing ones too (they are aggregated into `view`, `edit` and `admin` of every namespace).

Refused anywhere: a wildcard; nonResourceURLs but get of /metrics and the answers; any verb on
rbac.authorization.k8s.io (roles, bindings: whoever may write them may grant themselves anything); the verbs
escalate, bind, impersonate;
serviceaccounts/token (a token of any ServiceAccount); pods/exec, pods/attach, pods/portforward and every */proxy
(run commands in, or reach, any pod or node) but GET through the proxy of admitd's own read-only Service
(admitd-answers-viewer: the answers, /metrics and the probes), by name and never bound to admitd; CSR approval
and signing; CRDs written unnamed or created and deleted;
webhook configurations with any verb but get, patch, update and never without resourceNames (create cannot be
limited by name, and a webhook sees every object it names). Secrets only in a Role of admitd-system, only get,
create and update, the get and update limited to named Secrets (the HA overlay's shared serving certificate).
For the roles bound to admitd's ServiceAccount also:
no create of Pods or of anything that makes Pods (a Pod runs as any ServiceAccount of its namespace).
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import REPO, KubeCluster

pytestmark = pytest.mark.cluster

NAMESPACE = "admitd-system"
SERVICE_ACCOUNT = ("admitd", NAMESPACE)

SAFE_URLS = {  # admitd-metrics-reader and admitd-answers-reader: what a scraper and an on-call person need
    "/metrics",  # under --metrics-auth
    "/answers/v1",
    *(f"/answers/v1/{c}" for c in ("explain", "history", "queues", "pending", "replay", "preemptions", "usage", "eta")),
}
ANSWERS_SERVICE = {  # admitd-answers-viewer: the names a proxy path gives config/manager's Service admitd-metrics
    "admitd-metrics",
    "admitd-metrics:metrics",
    "http:admitd-metrics:metrics",
    "admitd-metrics:8080",
    "http:admitd-metrics:8080",
}
WEBHOOK_KINDS = {"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
WEBHOOK_VERBS = {"get", "patch", "update"}
SECRET_VERBS = {"get", "create", "update"}
NEVER_VERBS = {"escalate", "bind", "impersonate"}
NEVER_RESOURCES = {
    ("", "serviceaccounts/token"),
    ("", "pods/exec"),
    ("", "pods/attach"),
    ("", "pods/portforward"),
    ("certificates.k8s.io", "certificatesigningrequests/approval"),
    ("certificates.k8s.io", "signers"),
}
POD_MAKERS = {
    ("", "pods"),
    ("", "replicationcontrollers"),
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
}

Role = dict[str, Any]


def _kubectl(cluster: KubeCluster, *args: str) -> str:
    out = subprocess.run([str(cluster.kubectl), *args], capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def render(cluster: KubeCluster, config: Path) -> dict[str, list[dict[str, Any]]]:
    """Each tree under `config` rendered: {tree: documents}. A component is rendered on top of `config` itself."""
    trees: dict[str, list[dict[str, Any]]] = {}
    for kustomization in sorted(config.rglob("kustomization.yaml")):
        folder = kustomization.parent
        name = str(folder.relative_to(config.parent))
        if yaml.safe_load(kustomization.read_text()).get("kind") == "Component":
            wrapper = Path(tempfile.mkdtemp(prefix="admitd-render-"))
            try:
                (wrapper / "kustomization.yaml").write_text(
                    yaml.safe_dump(
                        {
                            "apiVersion": "kustomize.config.k8s.io/v1beta1",
                            "kind": "Kustomization",
                            # kustomize takes no absolute path here
                            "resources": [os.path.relpath(config, wrapper)],
                            "components": [os.path.relpath(folder, wrapper)],
                        }
                    )
                )
                text = _kubectl(cluster, "kustomize", "--load-restrictor=LoadRestrictionsNone", str(wrapper))
            finally:
                shutil.rmtree(wrapper)
            name += " (on config/)"
        else:
            text = _kubectl(cluster, "kustomize", str(folder))
        trees[name] = [d for d in yaml.safe_load_all(text) if d]
    return trees


def bound_to_admitd(docs: list[dict[str, Any]]) -> set[tuple[str, str, str | None]]:
    """(kind, name, namespace) of every role a binding in `docs` grants to admitd's ServiceAccount."""
    out = set()
    for d in docs:
        if d["kind"] not in {"RoleBinding", "ClusterRoleBinding"}:
            continue
        for s in d.get("subjects") or []:
            if s.get("kind") == "ServiceAccount" and (s.get("name"), s.get("namespace")) == SERVICE_ACCOUNT:
                ref = d["roleRef"]
                namespace = d["metadata"].get("namespace") if ref["kind"] == "Role" else None
                out.add((ref["kind"], ref["name"], namespace))
    return out


def _rule_problems(rule: dict[str, Any], *, role: Role, admitd: bool) -> Iterator[str]:
    namespace = role["metadata"].get("namespace") if role["kind"] == "Role" else None
    groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
    verbs, names = set(rule.get("verbs") or []), rule.get("resourceNames") or []
    for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
        if any("*" in str(v) for v in rule.get(field) or []):
            yield f"a wildcard in {field}"
    urls = set(rule.get("nonResourceURLs") or [])
    if urls and (urls - SAFE_URLS or verbs - {"get"}):
        yield f"nonResourceURLs {sorted(urls)} with {sorted(verbs)} (only get of {sorted(SAFE_URLS)})"
    if verbs & NEVER_VERBS:
        yield f"the verbs {sorted(verbs & NEVER_VERBS)}"
    for group in groups:
        for resource in resources:
            base = resource.split("/")[0]
            if group == "rbac.authorization.k8s.io":
                yield f"{resource} of RBAC (verbs {sorted(verbs)})"
            answers_proxy = (
                (group, resource) == ("", "services/proxy")
                and verbs == {"get"}
                and bool(names)
                and set(names) <= ANSWERS_SERVICE
                and not admitd
            )
            if (group, resource) in NEVER_RESOURCES or (resource.endswith("/proxy") and not answers_proxy):
                yield f"{group or 'core'}/{resource}"
            if group == "" and base == "secrets":
                if namespace != NAMESPACE:
                    yield f"secrets {'cluster-wide' if namespace is None else 'in ' + namespace}"
                if verbs - SECRET_VERBS:
                    yield f"secrets with {sorted(verbs - SECRET_VERBS)} (only get, create, update)"
                if verbs - {"create"} and not names:
                    yield "secrets read or written without resourceNames"
            if group == "admissionregistration.k8s.io" and base in WEBHOOK_KINDS:
                if verbs - WEBHOOK_VERBS:
                    yield f"{resource} with {sorted(verbs - WEBHOOK_VERBS)} (only get, patch, update)"
                if not names:
                    yield f"{resource} without resourceNames"
            if group == "apiextensions.k8s.io" and base == "customresourcedefinitions":
                if verbs & {"create", "delete", "deletecollection"}:
                    yield f"customresourcedefinitions with {sorted(verbs & {'create', 'delete', 'deletecollection'})}"
                if verbs & {"update", "patch"} and not names:
                    yield "customresourcedefinitions written without resourceNames"
            if admitd and (group, resource) in POD_MAKERS and verbs & {"create"}:
                yield f"create on {group or 'core'}/{resource} (a pod runs as any ServiceAccount of its namespace)"


def problems(docs: list[dict[str, Any]]) -> list[str]:
    """Every grant in `docs` that the module docstring refuses, as `Kind name: rule: why`."""
    admitd_roles = bound_to_admitd(docs)
    found = []
    for role in docs:
        if role["kind"] not in {"Role", "ClusterRole"}:
            continue
        key = (role["kind"], role["metadata"]["name"], role["metadata"].get("namespace"))
        for rule in role.get("rules") or []:
            for why in _rule_problems(rule, role=role, admitd=key in admitd_roles):
                found.append(f"{role['kind']} {role['metadata']['name']}: {rule}: {why}")
    return found


@pytest.fixture(scope="module")
def trees(kube_cluster: KubeCluster) -> dict[str, list[dict[str, Any]]]:
    return render(kube_cluster, REPO / "config")


def test_no_tree_under_config_grants_a_dangerous_power(trees: dict[str, list[dict[str, Any]]]) -> None:
    assert {"config", "config/rbac", "config/components/prometheus (on config/)"} <= trees.keys()
    roles = {(d["kind"], d["metadata"]["name"]) for docs in trees.values() for d in docs if d["kind"].endswith("Role")}
    assert ("ClusterRole", "admitd") in roles and ("ClusterRole", "kueue-batch-user-role") in roles
    found = {tree: p for tree, docs in trees.items() if (p := problems(docs))}
    assert found == {}
    # admitd's ServiceAccount is bound where the check looks for it.
    assert ("ClusterRole", "admitd", None) in bound_to_admitd(trees["config"])


BAD_RULES = [
    pytest.param({"apiGroups": ["*"], "resources": ["jobs"], "verbs": ["get"]}, "wildcard", id="wildcard group"),
    pytest.param({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["*"]}, "wildcard", id="wildcard verb"),
    pytest.param({"nonResourceURLs": ["/logs"], "verbs": ["get"]}, "nonResourceURLs", id="non-resource"),
    pytest.param({"nonResourceURLs": ["/metrics"], "verbs": ["post"]}, "nonResourceURLs", id="non-resource post"),
    pytest.param(
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "verbs": ["create"],
        },
        "only get, patch, update",
        id="create a mutating webhook",
    ),
    pytest.param(
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "verbs": ["patch"],
        },
        "without resourceNames",
        id="patch any validating webhook",
    ),
    pytest.param(
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": ["admitd"],
            "verbs": ["delete"],
        },
        "only get, patch, update",
        id="delete its webhook",
    ),
    *(
        pytest.param(
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": [kind], "verbs": ["get"]}, "of RBAC", id=kind
        )
        for kind in ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
    ),
    *(
        pytest.param({"apiGroups": [""], "resources": ["users"], "verbs": [verb]}, f"'{verb}'", id=verb)
        for verb in ("escalate", "bind", "impersonate")
    ),
    pytest.param({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}, "cluster-wide", id="secrets"),
    pytest.param({"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}, "pods/exec", id="exec"),
    pytest.param({"apiGroups": [""], "resources": ["pods/attach"], "verbs": ["create"]}, "pods/attach", id="attach"),
    pytest.param({"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}, "nodes/proxy", id="node proxy"),
    pytest.param(
        {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"]}, "services/proxy", id="any service proxy"
    ),
    pytest.param(
        {"apiGroups": [""], "resources": ["services/proxy"], "resourceNames": ["kube-dns"], "verbs": ["get"]},
        "services/proxy",
        id="another service's proxy",
    ),
    pytest.param(
        {"apiGroups": [""], "resources": ["services/proxy"], "resourceNames": ["admitd-metrics"], "verbs": ["create"]},
        "services/proxy",
        id="post through the answers proxy",
    ),
    pytest.param(
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        "serviceaccounts/token",
        id="tokens",
    ),
    pytest.param(
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["patch"]},
        "without resourceNames",
        id="patch any CRD",
    ),
    pytest.param({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}, "a pod runs as", id="pods"),
]


@pytest.mark.parametrize(("rule", "why"), BAD_RULES)
def test_each_dangerous_rule_added_to_admitds_role_is_found(
    trees: dict[str, list[dict[str, Any]]], rule: dict[str, Any], why: str
) -> None:
    docs = copy.deepcopy(trees["config"])
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "admitd")
    role["rules"].append(rule)
    found = problems(docs)
    assert len(found) >= 1 and all("ClusterRole admitd:" in f for f in found), found
    assert any(why in f for f in found), found


def _secret_role(namespace: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "admitd-serving-cert", "namespace": namespace},
        "rules": rules,
    }


def test_secrets_only_named_and_only_in_admitd_system(trees: dict[str, list[dict[str, Any]]]) -> None:
    allowed = [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["admitd-webhook-cert"],
            "verbs": ["get", "update"],
        },
    ]
    assert problems([*trees["config"], _secret_role(NAMESPACE, allowed)]) == []
    for namespace, rules, why in (
        ("kube-system", allowed, "secrets in kube-system"),
        (NAMESPACE, [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}], "without resourceNames"),
        (NAMESPACE, [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}], "only get, create"),
    ):
        found = problems([*trees["config"], _secret_role(namespace, rules)])
        assert any(why in f for f in found), (namespace, rules, found)


def test_a_rule_added_to_the_role_file_fails_the_check(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    """End to end, as a change to config/ would be made: the file edited, the tree rendered again, the check run."""
    config = tmp_path / "config"
    shutil.copytree(REPO / "config", config)
    role_file = config / "rbac" / "role.yaml"
    role = yaml.safe_load(role_file.read_text())
    role["rules"].append(
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "verbs": ["create"],
        }
    )
    role_file.write_text(yaml.safe_dump(role))
    found = problems(render(kube_cluster, config)["config"])
    assert found and all("mutatingwebhookconfigurations" in f and "create" in f for f in found), found
