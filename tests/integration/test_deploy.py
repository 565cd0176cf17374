"""The kustomize install (`kubectl apply --server-side -k config/`) against the real local control plane.

Real: kubectl's own kustomize renders config/; the real kube-apiserver validates every rendered object in a
server-side dry run (schemas, admission, RBAC's escalation check), after the CRDs and the Namespace are applied for
real; the RBAC objects are then applied for real and the API server's authorizer answers a SubjectAccessReview for
every row of RBAC below (all allowed) and for calls admitd must not make (all denied); finally the real `admitd run`
runs with a token of its ServiceAccount, so every call it makes goes through that RBAC, and admits a Job.
Faked: no image is built and no container runs (the nodes are kwok's), so the Deployment, PVC and Services are
only dry-run: the daemon runs as a local process, and the webhook configuration it may only patch is applied from
config/ first, then pointed by admitd at its URL instead of the Service.

RBAC is the list of every call admitd makes, read from daemon/kube; the rendered roles must grant exactly these,
so a change to the daemon's calls must change both this table and config/rbac.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemon.kube import webhook
from daemon.kube.run import KUEUE_KINDS, RunOptions
from daemon.kube.visibility_http import APISERVICE_NAME
from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import Daemon, apply, get_job, install_crds, job, kubectl, wait_for

pytestmark = pytest.mark.cluster

NAMESPACE = "admitd-system"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:admitd"
KUEUE = "kueue.x-k8s.io"


@dataclass(frozen=True)
class Call:
    """Calls admitd makes: verbs on a group/resource[/subresource], limited to `names` and/or one `namespace`."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    names: tuple[str, ...] = ()
    namespace: str | None = None  # a Role in that namespace; None: the ClusterRole, every namespace


RBAC: tuple[Call, ...] = (
    Call("batch", "jobs", ("list", "watch"), "watch.py: a Reflector over Jobs in every namespace"),
    Call("batch", "jobs", ("patch",), "actuate.py: admit, preempt and restore, suspend_now"),
    Call("batch", "jobs", ("get",), "actuate.py _recreated: after a 422 on a uid-tested patch, was the Job recreated"),
    Call(
        "batch",
        "jobs/finalizers",
        ("update",),
        "status_objects.py: a Workload's ownerReference to its Job has blockOwnerDeletion, which the "
        "OwnerReferencesPermissionEnforcement admission plugin (OpenShift, hardened clusters) allows only to "
        "whoever may update the Job's finalizers",
    ),
    *(
        Call(group, resource, verbs, why)
        for group, plural in (("kubeflow.org", "pytorchjobs"), ("ray.io", "rayjobs"), ("jobset.x-k8s.io", "jobsets"))
        for resource, verbs, why in (
            (plural, ("list", "watch", "patch"), "jobkinds.py, actuate.py: the distributed kinds, as Jobs"),
            (f"{plural}/finalizers", ("update",), "status_objects.py: a Workload's owner with blockOwnerDeletion"),
        )
    ),
    Call("", "namespaces", ("list", "watch"), "run.py: namespaceSelector needs the namespaces' labels"),
    Call("scheduling.k8s.io", "priorityclasses", ("list", "watch"), "run.py: a pod's priorityClassName"),
    Call("", "events", ("create", "patch"), "status.py: Admitted, Pending and Preempted Events on Jobs"),
    Call("", "events", ("list", "watch"), "run.py: the Job controller's FailedCreate Events on Jobs"),
    *(Call(KUEUE, kind, ("list", "watch"), "run.py: the queue objects") for kind in KUEUE_KINDS),
    Call(
        KUEUE,
        "workloads",
        ("list", "watch", "create", "update", "patch", "delete"),
        "status.py: a Workload per managed Job (created, listed back after a restart, its spec patched)",
    ),
    *(
        Call(KUEUE, f"{kind}/status", ("update", "patch"), "status.py: status written by admitd")
        for kind in ("clusterqueues", "localqueues", "cohorts", "workloads")
    ),
    *(
        Call(
            "admissionregistration.k8s.io",
            kind,
            ("get", "patch"),
            "webhook.py register: its own configurations, shipped in config/webhook: caBundle and clientConfig (a "
            "JSON patch; never created: RBAC cannot limit create by name)",
            names=(webhook.CONFIGURATION_NAME,),
        )
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    ),
    Call(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("get", "patch"),
        "run.py check_crds (managed-by, storage version); webhook.py point_conversion (caBundle)",
        names=webhook.CRD_NAMES,
    ),
    Call("coordination.k8s.io", "leases", ("get", "create", "update"), "leader election", namespace=NAMESPACE),
    Call("authentication.k8s.io", "tokenreviews", ("create",), "metricsauth.py: who a /metrics caller is"),
    Call("authorization.k8s.io", "subjectaccessreviews", ("create",), "metricsauth.py: whether it may get /metrics"),
)

# Calls only the HA overlay's replicas make (admitd run --cert-secret), granted by config/ha's own Role (test_ha.py
# checks it): the shared serving certificate, one Secret by name in admitd's namespace.
HA_ONLY: tuple[Call, ...] = (
    Call(
        "",
        "secrets",
        ("get", "update"),
        "certs.py SharedSecret: read and renew the shared serving certificate",
        names=("admitd-serving-cert",),
        namespace=NAMESPACE,
    ),
    Call("", "secrets", ("create",), "certs.py SharedSecret: the first replica makes it", namespace=NAMESPACE),
)

# Calls only `admitd run --visibility` makes (Kueue's visibility API, daemon/kube/visibility_http.py), granted by
# config/components/visibility (test_the_visibility_component_grants_exactly_its_calls): the front proxy's settings,
# through Kubernetes's own Role extension-apiserver-authentication-reader in kube-system (which grants get, list and
# watch on that one ConfigMap: Kubernetes's role, bound as every aggregated API server binds it), and its own
# APIService's caBundle. Its SubjectAccessReviews are the RBAC table's row above.
AUTH_READER_ROLE = ("kube-system", "extension-apiserver-authentication-reader")
VISIBILITY_ONLY: tuple[Call, ...] = (
    Call(
        "",
        "configmaps",
        ("get", "list", "watch"),
        "visibility_http.py load_front_proxy: the requestheader client CA, allowed names and headers (get)",
        names=("extension-apiserver-authentication",),
        namespace="kube-system",
    ),
    Call(
        "apiregistration.k8s.io",
        "apiservices",
        ("get", "patch"),
        "visibility_http.py register_apiservice: the APIService's caBundle (never created, as the webhooks)",
        names=(APISERVICE_NAME,),
    ),
)

# Calls admitd never makes; the API server must refuse each.
DENIED: tuple[tuple[str, str, str, str | None, str | None], ...] = (
    # (verb, group, resource, name, namespace)
    ("get", "", "secrets", None, "kube-system"),
    ("list", "", "secrets", None, None),
    ("create", "", "pods", None, "default"),
    ("delete", "batch", "jobs", None, "default"),
    ("create", "batch", "jobs", None, "default"),
    ("update", "batch", "jobs", None, "default"),
    ("get", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "someone-else", None),
    ("create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", None, None),
    ("create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", None, None),
    ("patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "someone-else", None),
    ("delete", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "admitd", None),
    ("list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", None, None),
    ("get", "", "secrets", None, NAMESPACE),
    ("patch", "apiextensions.k8s.io", "customresourcedefinitions", "foos.example.com", None),
    ("delete", "apiextensions.k8s.io", "customresourcedefinitions", "workloads.kueue.x-k8s.io", None),
    ("update", "coordination.k8s.io", "leases", None, "kube-system"),
    ("create", KUEUE, "clusterqueues", None, None),
    ("delete", KUEUE, "localqueues", None, "default"),
    ("update", "", "namespaces", None, None),
    ("patch", "apiregistration.k8s.io", "apiservices", "v1beta1.metrics.k8s.io", None),
    ("create", "apiregistration.k8s.io", "apiservices", None, None),
    ("get", "", "configmaps", "kube-proxy", "kube-system"),
)

Grant = tuple[str, str, str, str | None, str | None]  # group, resource, verb, name, namespace


def expected_grants(calls: tuple[Call, ...] = RBAC) -> set[Grant]:
    return {
        (c.group, c.resource, verb, name, c.namespace)
        for c in calls
        for verb in c.verbs
        for name in (c.names or (None,))
    }


def rule_grants(rules: list[dict[str, Any]], namespace: str | None) -> set[Grant]:
    out: set[Grant] = set()
    for rule in rules:
        assert "nonResourceURLs" not in rule, rule
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in rule.get(field, []), f"a wildcard in {field}: {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [None]:
                        out.add((group, resource, verb, name, namespace))
    return out


@pytest.fixture(scope="module")
def rendered(kube_cluster: KubeCluster) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(kube_cluster.kubectl), "kustomize", str(REPO / "config")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def rendered_visibility(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """config/ with config/components/visibility, as an overlay renders it."""
    wrapper = tmp_path_factory.mktemp("visibility-overlay")
    config = REPO / "config"
    (wrapper / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(config, wrapper)],
                "components": [os.path.relpath(config / "components" / "visibility", wrapper)],
            }
        )
    )
    out = subprocess.run(
        [str(kube_cluster.kubectl), "kustomize", str(wrapper)], capture_output=True, text=True, check=False, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


@pytest.fixture(scope="module")
def installed(kube_cluster: KubeCluster, rendered: list[dict[str, Any]]) -> Iterator[KubeCluster]:
    """The CRDs and the Namespace applied for real; RBAC objects are applied by the tests that need them."""
    install_crds(kube_cluster)
    apply(kube_cluster, one(rendered, "Namespace"))
    yield kube_cluster
    kubectl(kube_cluster, "delete", "clusterrolebinding,clusterrole", "admitd", "--ignore-not-found")
    user_roles = [
        d["metadata"]["name"] for d in rendered if d["kind"] == "ClusterRole" and d["metadata"]["name"] != "admitd"
    ]
    kubectl(kube_cluster, "delete", "clusterrole", *user_roles, "--ignore-not-found")
    kubectl(kube_cluster, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


def test_kustomize_renders_the_whole_install(rendered: list[dict[str, Any]]) -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in rendered)
    crds = [name for kind, name in kinds if kind == "CustomResourceDefinition"]
    assert sorted(crds) == sorted(webhook.CRD_NAMES)
    user_roles = [name for kind, name in kinds if kind == "ClusterRole" and name.startswith("kueue-")]
    (config_map,) = [name for kind, name in kinds if kind == "ConfigMap"]
    assert re.fullmatch(r"admitd-config-[a-z0-9]{10}", config_map), config_map  # named after its content's hash
    assert [k for k in kinds if k[0] != "CustomResourceDefinition" and k[1] not in {*user_roles, config_map}] == [
        ("ClusterRole", "admitd"),
        ("ClusterRole", "admitd-answers-reader"),  # for on-call people asking a daemon directly, bound by the operator
        ("ClusterRole", "admitd-answers-viewer"),  # for on-call people asking through the API server, likewise
        ("ClusterRole", "admitd-metrics-auth"),
        ("ClusterRole", "admitd-metrics-reader"),  # for the scraper, bound by the operator
        ("ClusterRoleBinding", "admitd"),
        ("ClusterRoleBinding", "admitd-metrics-auth"),
        ("Deployment", "admitd"),
        ("MutatingWebhookConfiguration", webhook.CONFIGURATION_NAME),
        ("Namespace", NAMESPACE),
        ("PersistentVolumeClaim", "admitd-log"),
        ("PodDisruptionBudget", "admitd"),
        ("Role", "admitd-leader-election"),
        ("RoleBinding", "admitd-leader-election"),
        ("Service", "admitd-metrics"),
        ("Service", "admitd-webhook"),
        ("ServiceAccount", "admitd"),
        ("ValidatingWebhookConfiguration", webhook.CONFIGURATION_NAME),
    ]
    assert len(user_roles) == 15, user_roles  # test_install.py checks what they grant
    cluster_scoped = {
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    for d in rendered:
        if d["kind"] not in cluster_scoped:
            assert d["metadata"].get("namespace") == NAMESPACE, d["metadata"]
    # The CRDs go in exactly as scripts/gen-crds wrote them.
    for path in sorted((REPO / "config" / "crd").glob("kueue.x-k8s.io_*.yaml")):
        crd = yaml.safe_load(path.read_text())
        assert one(rendered, "CustomResourceDefinition", crd["metadata"]["name"]) == crd, path.name


def test_the_deployment_runs_admitd_where_the_daemon_expects_it(rendered: list[dict[str, Any]]) -> None:
    defaults = RunOptions(db=Path("unused"))
    deployment = one(rendered, "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    assert container["args"] == [
        "run",
        "--db",
        "/var/lib/admitd/admitd.db",
        "--cert-dir",
        "/var/lib/admitd/certs",
        "--config",
        "/etc/admitd/admitd.yaml",
    ]
    assert container["image"] == "registry.example.com/admitd:0.1.0"  # the documented placeholder
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"webhook": defaults.webhook_port, "metrics": defaults.health_port}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["serviceAccountName"] == one(rendered, "ServiceAccount")["metadata"]["name"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    log_volume = volumes[mounts["/var/lib/admitd"]]
    assert (
        log_volume["persistentVolumeClaim"]["claimName"] == one(rendered, "PersistentVolumeClaim")["metadata"]["name"]
    )
    # The webhook Service is the one the daemon registers by default, in front of the webhook port.
    namespace, name, port = defaults.webhook_service or ("", "", 0)
    service = one(rendered, "Service", name)
    assert service["metadata"]["namespace"] == namespace
    assert service["spec"]["ports"] == [{"name": "webhook", "port": port, "targetPort": "webhook", "protocol": "TCP"}]
    labels = spec["template"]["metadata"]["labels"]
    for svc in (service, one(rendered, "Service", "admitd-metrics")):
        assert svc["spec"]["selector"].items() <= labels.items()
    metrics = one(rendered, "Service", "admitd-metrics")["spec"]["ports"]
    assert [(p["port"], p["targetPort"]) for p in metrics] == [(defaults.health_port, "metrics")]


def test_every_rendered_object_applies_in_a_server_side_dry_run(
    installed: KubeCluster, rendered: list[dict[str, Any]]
) -> None:
    out = kubectl(
        installed,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(rendered),
    )
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(rendered), out
    assert all(line.endswith("(server dry run)") for line in lines), out


def test_the_rendered_roles_grant_exactly_the_calls_in_the_table(rendered: list[dict[str, Any]]) -> None:
    granted: set[Grant] = set()
    bindings = [d for d in rendered if d["kind"] in {"ClusterRoleBinding", "RoleBinding"}]
    assert len(bindings) == 3, [b["metadata"]["name"] for b in bindings]
    for binding in bindings:  # every binding in the tree is admitd's; what the roles they name grant is the table
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "admitd", "namespace": NAMESPACE}]
        role_kind = binding["roleRef"]["kind"]
        role = one(rendered, role_kind, binding["roleRef"]["name"])
        granted |= rule_grants(role["rules"], role["metadata"]["namespace"] if role_kind == "Role" else None)
    expected = expected_grants()
    assert granted - expected == set(), "granted but not in the table: remove it, or add the call to RBAC"
    assert expected - granted == set(), "in the table but not granted: add it to config/rbac"


def _added(base: list[dict[str, Any]], docs: list[dict[str, Any]], kinds: set[str]) -> list[dict[str, Any]]:
    names = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in base}
    return [
        d
        for d in docs
        if d["kind"] in kinds and (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) not in names
    ]


def test_the_visibility_component_grants_exactly_its_calls(
    rendered: list[dict[str, Any]], rendered_visibility: list[dict[str, Any]]
) -> None:
    """config/components/visibility adds the bindings of VISIBILITY_ONLY, an APIService at admitd's webhook Service
    and `--visibility`; nothing else of config/ changes."""
    bindings = _added(rendered, rendered_visibility, {"ClusterRoleBinding", "RoleBinding"})
    granted: set[Grant] = set()
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "admitd", "namespace": NAMESPACE}]
        ref = binding["roleRef"]
        if ref["kind"] == "Role" and (binding["metadata"]["namespace"], ref["name"]) == AUTH_READER_ROLE:
            # Kubernetes's own Role (bootstrap policy), not rendered: what it grants, as the API server has it.
            granted |= {
                ("", "configmaps", v, "extension-apiserver-authentication", "kube-system")
                for v in ("get", "list", "watch")
            }
            continue
        role = one(rendered_visibility, ref["kind"], ref["name"])
        granted |= rule_grants(role["rules"], role["metadata"]["namespace"] if ref["kind"] == "Role" else None)
    assert granted == expected_grants(VISIBILITY_ONLY)
    # Kueue's viewer roles for people, bound to nobody.
    roles = {d["metadata"]["name"] for d in _added(rendered, rendered_visibility, {"ClusterRole"})}
    assert roles == {
        "admitd-visibility",
        "kueue-pending-workloads-cq-viewer-role",
        "kueue-pending-workloads-lq-viewer-role",
    }
    apiservice = one(rendered_visibility, "APIService", APISERVICE_NAME)
    namespace, name, port = RunOptions(db=Path("unused")).webhook_service or ("", "", 0)
    assert apiservice["spec"]["service"] == {"namespace": namespace, "name": name, "port": port}
    assert "caBundle" not in apiservice["spec"] and not apiservice["spec"].get("insecureSkipTLSVerify")
    (container,) = one(rendered_visibility, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [
        *one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"],
        "--visibility",
    ]
    unchanged = [d for d in rendered if d["kind"] != "Deployment"]
    assert all(d in rendered_visibility for d in unchanged)


_PATH = re.compile(
    r"/api/v1/(?:namespaces/\{[^}]+\}/)?(?P<core>[a-z]+)"
    r"|/apis/(?P<group>[a-z0-9.-]+)/v[0-9a-z]+/(?:namespaces/\{[^}]+\}/)?(?P<resource>[a-z]+)"
    r"|\{_BASE\}/(?:namespaces/\{[^}]+\}/)?(?P<kueue>[a-z]+)"
)


def test_every_resource_the_daemon_names_in_a_request_path_is_in_the_table() -> None:
    """A cheap guard on the table: a new path in daemon/kube without a row fails here (verbs are read by hand)."""
    rows = {(c.group, c.resource.split("/")[0]) for c in (*RBAC, *HA_ONLY, *VISIBILITY_ONLY)}
    named: set[tuple[str, str]] = set()
    for path in sorted((REPO / "daemon" / "kube").glob("*.py")):
        for m in _PATH.finditer(path.read_text()):
            if m["core"]:
                named.add(("", m["core"]))
            elif m["group"]:
                named.add((m["group"], m["resource"]))
            else:
                named.add((KUEUE, m["kueue"]))
    assert ("batch", "jobs") in named and ("", "namespaces") in named  # the scan finds what is there
    # Granted to every authenticated user (the bootstrap ClusterRole system:basic-user), so in no role of admitd's:
    # guard.py asks who admitd is and what it may do.
    everyone = {("authentication.k8s.io", "selfsubjectreviews"), ("authorization.k8s.io", "selfsubjectaccessreviews")}
    # Paths admitd serves (Kueue's visibility API, daemon/kube/visibility.py) rather than requests: no grant is needed.
    served = {m for m in named if m[0] == "visibility.kueue.x-k8s.io"}
    assert named - rows - everyone - served == set()


def _reviews(cluster: KubeCluster, attributes: list[dict[str, Any]]) -> list[bool]:
    """The API server's authorizer on each attribute set, for admitd's ServiceAccount."""
    items = [
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": SERVICE_ACCOUNT, "resourceAttributes": a},
        }
        for a in attributes
    ]
    out = kubectl(
        cluster,
        "create",
        "-o",
        "json",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )
    decoder, answers, at = json.JSONDecoder(), [], 0
    while at < len(out.strip()):
        obj, end = decoder.raw_decode(out, at)
        answers.extend(obj["items"] if obj.get("kind") == "List" else [obj])
        at = end
        while at < len(out) and out[at].isspace():
            at += 1
    assert len(answers) == len(items), out
    return [bool(a["status"].get("allowed")) for a in answers]


def _attributes(verb: str, group: str, resource: str, name: str | None, namespace: str | None) -> dict[str, Any]:
    resource, _, sub = resource.partition("/")
    a: dict[str, Any] = {"verb": verb, "group": group, "resource": resource}
    if sub:
        a["subresource"] = sub
    if name:
        a["name"] = name
    if namespace:
        a["namespace"] = namespace
    return a


def _apply_rbac(cluster: KubeCluster, rendered: list[dict[str, Any]]) -> None:
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    apply(cluster, *(d for d in rendered if d["kind"] in kinds))


def _apply_webhook_configurations(cluster: KubeCluster, rendered: list[dict[str, Any]]) -> None:
    """config/webhook's two configurations, as `kubectl apply -k config/` leaves them: admitd may only get and patch
    them (here to its URL; until it has, they point at the Service, which has no pod here)."""
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    apply(cluster, *(one(rendered, kind, webhook.CONFIGURATION_NAME) for kind in kinds))


def test_the_api_server_authorizes_every_call_in_the_table_and_refuses_others(
    installed: KubeCluster, rendered: list[dict[str, Any]]
) -> None:
    _apply_rbac(installed, rendered)
    allowed_cases = sorted(expected_grants(), key=str)
    # A cluster-wide grant is checked across all namespaces (a list or watch of every Job) and in one of them.
    attributes = []
    for group, resource, verb, name, namespace in allowed_cases:
        attributes.append(_attributes(verb, group, resource, name, namespace))
        if namespace is None and resource.split("/")[0] in {"jobs", "events", "localqueues", "workloads"}:
            attributes.append(_attributes(verb, group, resource, name, "team-a"))
    denied = [_attributes(verb, group, resource, name, ns) for verb, group, resource, name, ns in DENIED]
    answers = _reviews(installed, attributes + denied)
    refused = [a for a, ok in zip(attributes, answers[: len(attributes)], strict=True) if not ok]
    assert refused == [], "the table's calls the API server refuses"
    let_through = [a for a, ok in zip(denied, answers[len(attributes) :], strict=True) if ok]
    assert let_through == [], "calls admitd never makes, allowed"


def _as_admitd(installed: KubeCluster, tmp_path: Path) -> KubeCluster:
    """The cluster as admitd's ServiceAccount sees it: a kubeconfig with a token of its own."""
    token = kubectl(installed, "create", "token", "admitd", "-n", NAMESPACE, "--duration=1h").strip()
    admin = yaml.safe_load(installed.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    ca = (
        server.get("certificate-authority-data")
        or base64.b64encode(Path(server["certificate-authority"]).read_bytes()).decode()
    )
    sa_config = tmp_path / "admitd.kubeconfig"
    sa_config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "local", "cluster": {"server": server["server"], "certificate-authority-data": ca}}
                ],
                "users": [{"name": "admitd", "user": {"token": token}}],
                "contexts": [{"name": "admitd", "context": {"cluster": "local", "user": "admitd"}}],
                "current-context": "admitd",
            }
        )
    )
    return dataclasses.replace(installed, kubeconfig=sa_config)


def test_the_daemon_runs_and_admits_under_its_service_account(
    installed: KubeCluster, rendered: list[dict[str, Any]], namespace: str, tmp_path: Path
) -> None:
    """Every call the real daemon makes goes through the ServiceAccount's RBAC; a refusal fails it or is logged."""
    _apply_rbac(installed, rendered)
    as_admitd = _as_admitd(installed, tmp_path)
    v = f"{KUEUE}/v1beta2"
    flavor, cq = f"{namespace}-h100", f"{namespace}-cq"
    daemon = Daemon(as_admitd, tmp_path / "run", extra=("--leader-election-lease", f"{NAMESPACE}/admitd"))
    daemon.workdir.mkdir(exist_ok=True)
    try:
        apply(
            installed,
            {
                "apiVersion": v,
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {"nodeLabels": {"gpu-type": "h100"}},
            },
            {
                "apiVersion": v,
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [{"name": flavor, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}],
                        }
                    ],
                },
            },
            {
                "apiVersion": v,
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": namespace},
                "spec": {"clusterQueue": cq},
            },
        )
        _apply_webhook_configurations(installed, rendered)
        daemon.start()
        apply(installed, job(namespace, "train", queue="lq", gpus=4))
        wait_for(
            "the Job to be admitted (unsuspended) by admitd under its ServiceAccount",
            lambda: get_job(installed, namespace, "train")["spec"].get("suspend") is False,
        )
        pod_spec = get_job(installed, namespace, "train")["spec"]["template"]["spec"]
        assert pod_spec["nodeSelector"] == {"gpu-type": "h100"}

        def workload_admitted() -> bool:
            items = json.loads(kubectl(installed, "get", "workloads", "-n", namespace, "-o", "json"))["items"]
            return any(
                o.get("kind") == "Job" and o.get("name") == "train"
                for w in items
                for o in w["metadata"].get("ownerReferences", [])
            ) and any(
                c["type"] == "Admitted" and c["status"] == "True"
                for w in items
                for c in (w.get("status") or {}).get("conditions", [])
            )

        wait_for("kubectl get workloads to show the Job's Workload, Admitted", workload_admitted)
        assert daemon.stop() == 0, daemon.stderr.read_text()[-3000:]
        # An RBAC refusal is a 403 naming the ServiceAccount ("User system:serviceaccount:... cannot ..."); other 403s
        # (a write into a namespace an earlier test is deleting: "because it is being terminated") are not RBAC's.
        refused = [
            line
            for line in daemon.stderr.read_text().splitlines()
            if "forbidden" in line.lower() and "is being terminated" not in line
        ]
        assert refused == []
    finally:
        if daemon.proc is not None:
            daemon.kill()
        kubectl(
            installed,
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "admitd",
            "--ignore-not-found",
        )
        kubectl(installed, "delete", "clusterqueue", cq, "--ignore-not-found", "--wait=false")
        kubectl(installed, "delete", "resourceflavor", flavor, "--ignore-not-found", "--wait=false")


def test_the_daemon_serves_visibility_under_its_service_account_with_the_components_rbac(
    installed: KubeCluster,
    rendered: list[dict[str, Any]],
    rendered_visibility: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    """With config/components/visibility's RBAC and APIService, `admitd run --visibility` under admitd's
    ServiceAccount reads the front proxy's ConfigMap (else it would not start) and patches the APIService's caBundle;
    the API server allows each VISIBILITY_ONLY call and refuses the same on other objects."""
    added = _added(rendered, rendered_visibility, {"ClusterRole", "ClusterRoleBinding", "RoleBinding"})
    _apply_rbac(installed, rendered)
    apply(installed, *added)
    grants = sorted(expected_grants(VISIBILITY_ONLY), key=str)
    attributes = [_attributes(verb, group, resource, name, ns) for group, resource, verb, name, ns in grants]
    # The API server's RBAC authorizer learns of new bindings from its watch, moments after the apply.
    wait_for("the component's grants to reach the authorizer", lambda: all(_reviews(installed, attributes)))
    others = [
        _attributes("patch", "apiregistration.k8s.io", "apiservices", "v1beta1.metrics.k8s.io", None),
        _attributes("delete", "apiregistration.k8s.io", "apiservices", APISERVICE_NAME, None),
        _attributes("get", "", "configmaps", "kube-proxy", "kube-system"),
        _attributes("update", "", "configmaps", "extension-apiserver-authentication", "kube-system"),
    ]
    assert [a for a, ok in zip(others, _reviews(installed, others), strict=True) if ok] == []
    daemon = Daemon(
        _as_admitd(installed, tmp_path),
        tmp_path / "run",
        extra=("--visibility", "--leader-election-lease", f"{NAMESPACE}/admitd"),
    )
    try:
        # The APIService as the component ships it (at the webhook Service, which has no pod here: unavailable).
        apply(installed, one(rendered_visibility, "APIService", APISERVICE_NAME))
        _apply_webhook_configurations(installed, rendered)
        daemon.start()

        def ca_bundle() -> str:
            got = json.loads(kubectl(installed, "get", "apiservice", APISERVICE_NAME, "-o", "json"))
            return str(got["spec"].get("caBundle") or "")

        wait_for("admitd to patch the APIService's caBundle", lambda: bool(ca_bundle()))
        served = (daemon.workdir / "certs" / "webhook.crt").read_bytes()
        assert base64.b64decode(ca_bundle()) == served
        assert daemon.stop() == 0, daemon.stderr.read_text()[-3000:]
        refused = [
            line
            for line in daemon.stderr.read_text().splitlines()
            if "forbidden" in line.lower() and "is being terminated" not in line  # see the test above
        ]
        assert refused == []
    finally:
        kubectl(installed, "delete", "apiservice", APISERVICE_NAME, "--ignore-not-found")
        if daemon.proc is not None:
            daemon.kill()
        kubectl(
            installed,
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "admitd",
            "--ignore-not-found",
        )
        for d in added:
            kind, name, ns = d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")
            if kind != "ClusterRole" or name == "admitd-visibility":
                kubectl(installed, "delete", kind.lower(), name, *(["-n", ns] if ns else []), "--ignore-not-found")
