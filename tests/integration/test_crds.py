"""admitd's CustomResourceDefinitions (config/crd/, written by scripts/gen-crds from Kueue v0.17.0) in a real API
server: they install, the seed's YAML applies unchanged, Kueue's validation rules reject bad objects with Kueue's
messages, status is a subresource, and `kubectl get` prints Kueue's columns.

Real: kube-apiserver v1.36 and etcd of the local control plane (tests/cluster), kubectl v1.36 (its built-in
kustomize reads config/crd/kustomization.yaml), the committed CRD files, the seed's YAML
(tests/unit/data/seed_minimal_setup.yaml, verbatim from shared/seed). Faked: the conversion webhook. admitd's
webhook server is not running in these tests, so the CRDs are installed with spec.conversion strategy None
(`install_without_webhook` below): the API server then only relabels objects between v1beta1 and v1beta2, which
is exact for the objects used here (none sets a field that is renamed between the versions). A later test with
the daemon's webhook covers Webhook conversion; daemon/manifests/conversion.py has its own unit tests. Objects are
created through kubectl, as a user would, and removed afterwards; CRDs found installed are left installed, with
their conversion restored.

The first tests read the committed files only and need no cluster; `test_generator_reproduces_config_crd` needs
Go (it downloads Kueue's module), so it carries the `cluster` mark like the rest of the Go-built layer.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from .conftest import KubeCluster

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "config" / "crd"
SEED = REPO / "tests" / "unit" / "data" / "seed_minimal_setup.yaml"
GROUP = "kueue.x-k8s.io"
PLURALS = ["resourceflavors", "clusterqueues", "localqueues", "cohorts", "workloadpriorityclasses", "workloads"]
CONVERTED = {"clusterqueues", "localqueues", "cohorts", "workloads"}  # their v1beta1 and v1beta2 differ
MANAGED_BY = ("app.kubernetes.io/managed-by", "admitd")
FIELD_MANAGER = "admitd-test-crds"

Obj = dict[str, Any]


def crd_file(plural: str) -> Obj:
    document: Obj = yaml.safe_load((CRD_DIR / f"{GROUP}_{plural}.yaml").read_text())
    return document


def versions(crd: Obj) -> dict[str, Obj]:
    return {v["name"]: v for v in crd["spec"]["versions"]}


# --- the committed files (no cluster) ----------------------------------------------------------------------------


def test_kustomization_lists_the_six_crds_and_nothing_else() -> None:
    kustomization = yaml.safe_load((CRD_DIR / "kustomization.yaml").read_text())
    assert kustomization["resources"] == [f"{GROUP}_{p}.yaml" for p in PLURALS]
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == sorted([*kustomization["resources"], "kustomization.yaml"])


@pytest.mark.parametrize("plural", PLURALS)
def test_each_crd_is_labelled_serves_both_versions_and_stores_v1beta2(plural: str) -> None:
    crd = crd_file(plural)
    assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
    assert crd["metadata"]["labels"][MANAGED_BY[0]] == MANAGED_BY[1]
    assert crd["metadata"]["annotations"]["admitd.io/derived-from"] == "sigs.k8s.io/kueue@v0.17.0"
    assert {n: (v["served"], v["storage"]) for n, v in versions(crd).items()} == {
        "v1beta1": (True, False),
        "v1beta2": (True, True),
    }


@pytest.mark.parametrize("plural", PLURALS)
def test_conversion_goes_to_admitds_webhook_where_the_versions_differ(plural: str) -> None:
    conversion = crd_file(plural)["spec"]["conversion"]
    if plural not in CONVERTED:
        assert conversion == {"strategy": "None"}
        return
    assert conversion == {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"service": {"namespace": "admitd-system", "name": "admitd-webhook", "path": "/convert"}},
            "conversionReviewVersions": ["v1"],
        },
    }


def test_the_workload_crd_keeps_pod_templates_open_and_is_small() -> None:
    assert (CRD_DIR / f"{GROUP}_workloads.yaml").stat().st_size < 200_000  # Kueue's own is 1.4 MB
    for version in versions(crd_file("workloads")).values():
        schema = version["schema"]["openAPIV3Schema"]
        template = schema["properties"]["spec"]["properties"]["podSets"]["items"]["properties"]["template"]
        assert template["type"] == "object"
        assert template["x-kubernetes-preserve-unknown-fields"] is True
        assert "properties" not in template
        # The status is Kueue's, exact: e.g. the topology assignment of each pod set.
        admission = schema["properties"]["status"]["properties"]["admission"]
        assert "topologyAssignment" in admission["properties"]["podSetAssignments"]["items"]["properties"]


@pytest.mark.cluster  # needs Go, and Kueue's module from the Go module proxy, like the rest of this layer
def test_generator_reproduces_config_crd() -> None:
    result = subprocess.run(
        [str(REPO / "scripts" / "gen-crds"), "--check"], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr


# --- in the API server ----------------------------------------------------------------------------------------


def kubectl(
    cluster: KubeCluster, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and result.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def install_without_webhook(cluster: KubeCluster) -> None:
    """config/crd as kustomize builds it, with spec.conversion replaced by strategy None (no webhook runs here)."""
    built = kubectl(cluster, "kustomize", str(CRD_DIR)).stdout
    crds = [d for d in yaml.safe_load_all(built) if d]
    assert sorted(d["metadata"]["name"] for d in crds) == sorted(f"{p}.{GROUP}" for p in PLURALS)
    for crd in crds:
        crd["spec"]["conversion"] = {"strategy": "None"}
    kubectl(
        cluster,
        "apply",
        "--server-side",
        "--force-conflicts",  # another test may have installed them with the webhook
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(crds),
    )
    names = [f"crd/{p}.{GROUP}" for p in PLURALS]
    kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", *names)


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """The six CRDs installed without conversion; afterwards, removed if they were not there before, else given
    back the conversion they had."""
    before: dict[str, Obj] = {}
    for plural in PLURALS:
        found = kubectl(kube_cluster, "get", "crd", f"{plural}.{GROUP}", "-o", "json", check=False)
        if found.returncode == 0:
            before[plural] = json.loads(found.stdout)["spec"]["conversion"]
    install_without_webhook(kube_cluster)
    yield kube_cluster
    for plural in PLURALS:
        name = f"{plural}.{GROUP}"
        if plural in before:
            patch = json.dumps({"spec": {"conversion": before[plural]}})
            kubectl(kube_cluster, "patch", "crd", name, "--type=merge", "-p", patch)
        else:
            kubectl(kube_cluster, "delete", "crd", name, "--wait=true")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cleanup(crds: KubeCluster) -> Iterator[list[tuple[str, ...]]]:
    """kubectl delete arguments, run after the test (cluster-scoped objects outlive namespaces)."""
    todo: list[tuple[str, ...]] = []
    yield todo
    for args in reversed(todo):
        kubectl(crds, "delete", "--ignore-not-found", "--wait=false", *args)


def apply(cluster: KubeCluster, manifest: Obj | str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
    return kubectl(cluster, "apply", "-f", "-", stdin=text, check=check)


def cluster_queue(name: str, version: str = "v1beta2", **spec: Any) -> Obj:
    spec.setdefault(
        "resourceGroups",
        [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}],
            }
        ],
    )
    return {"apiVersion": f"{GROUP}/{version}", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_the_crds_install_and_serve_both_versions(crds: KubeCluster) -> None:
    listed = json.loads(kubectl(crds, "get", "crd", "-l", "=".join(MANAGED_BY), "-o", "json").stdout)["items"]
    assert sorted(c["metadata"]["name"] for c in listed) == sorted(f"{p}.{GROUP}" for p in PLURALS)
    for crd in listed:
        assert crd["status"]["storedVersions"] == ["v1beta2"]
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions["Established"] == "True"
        assert conditions["NamesAccepted"] == "True"
    resources = kubectl(crds, "api-resources", f"--api-group={GROUP}", "-o", "name").stdout.split()
    assert sorted(resources) == sorted(f"{p}.{GROUP}" for p in PLURALS)
    # Kueue's short names, so `kubectl get cq` works as it does with Kueue
    table = kubectl(crds, "api-resources", f"--api-group={GROUP}", "--no-headers").stdout.splitlines()
    short = {row.split()[0]: row.split()[1] for row in table if len(row.split()) == 5}
    assert short == {
        "clusterqueues": "cq",
        "localqueues": "queue,queues,lq",
        "resourceflavors": "flavor,flavors,rf",
        "workloads": "kwl,kueueworkload,kueueworkloads",
    }


@pytest.mark.cluster
def test_the_seeds_yaml_applies_unchanged_and_reads_back_in_both_versions(crds: KubeCluster) -> None:
    seed = [d for d in yaml.safe_load_all(SEED.read_text()) if d]
    existed = {
        (d["kind"], d["metadata"]["name"]): kubectl(
            crds,
            "get",
            d["kind"].lower(),
            d["metadata"]["name"],
            "-n",
            d["metadata"].get("namespace", "default"),
            check=False,
        ).returncode
        == 0
        for d in seed
    }
    namespace_existed = kubectl(crds, "get", "namespace", "research", check=False).returncode == 0
    if not namespace_existed:
        kubectl(crds, "create", "namespace", "research")
    try:
        result = kubectl(crds, "apply", "-f", str(SEED))  # the file as it is, as a user applies it
        assert "resourceflavor.kueue.x-k8s.io/h100-flavor" in result.stdout
        assert "clusterqueue.kueue.x-k8s.io/team-research" in result.stdout
        assert "localqueue.kueue.x-k8s.io/research-queue" in result.stdout
        for version in ("v1beta1", "v1beta2"):
            queue = json.loads(
                kubectl(crds, "get", f"clusterqueues.{version}.{GROUP}", "team-research", "-o", "json").stdout
            )
            assert queue["apiVersion"] == f"{GROUP}/{version}"
            assert queue["spec"]["resourceGroups"] == seed[1]["spec"]["resourceGroups"]
            assert queue["spec"]["namespaceSelector"] == {}
            # Kueue's schema defaults, filled in by the API server
            assert queue["spec"]["queueingStrategy"] == "BestEffortFIFO"
            flavor = json.loads(
                kubectl(crds, "get", f"resourceflavors.{version}.{GROUP}", "h100-flavor", "-o", "json").stdout
            )
            assert flavor["spec"]["nodeLabels"] == {"gpu-type": "h100"}
            local = json.loads(
                kubectl(
                    crds, "get", f"localqueues.{version}.{GROUP}", "research-queue", "-n", "research", "-o", "json"
                ).stdout
            )
            assert local["spec"]["clusterQueue"] == "team-research"
    finally:
        for document in reversed(seed):
            if not existed[(document["kind"], document["metadata"]["name"])]:
                kubectl(crds, "delete", "-f", "-", "--ignore-not-found", stdin=yaml.safe_dump(document))
        if not namespace_existed:
            kubectl(crds, "delete", "namespace", "research", "--wait=false")


GPU_GROUP = {"coveredResources": ["nvidia.com/gpu"]}


def flavors(count: int) -> list[Obj]:
    return [{"name": f"f{i}", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}]} for i in range(count)]


REJECTED = [
    pytest.param(
        cluster_queue(
            "{name}",
            resourceGroups=[
                {
                    **GPU_GROUP,
                    "flavors": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": -1}]}],
                }
            ],
        ),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: -1: "
        "must be greater than or equal to 0",
        id="a negative nominalQuota (Kueue's webhook message)",
    ),
    pytest.param(
        cluster_queue(
            "{name}",
            "v1beta1",
            cohort="shared",
            resourceGroups=[
                {
                    **GPU_GROUP,
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "4", "lendingLimit": "-2"}],
                        }
                    ],
                }
            ],
        ),
        'spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "-2": '
        "must be greater than or equal to 0",
        id="a negative lendingLimit written as a string",
    ),
    pytest.param(
        cluster_queue("{name}", resourceGroups=[{**GPU_GROUP, "flavors": flavors(65)}]),
        "spec.resourceGroups[0].flavors: Too many: 65: must have at most 64 items",
        id="more flavors in a resource group than the limit",
    ),
    pytest.param(
        cluster_queue("{name}", cohortName="Team_A"),
        'spec.cohortName: Invalid value: "Team_A": spec.cohortName in body should match '
        "'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
        id="a cohort name that is not a DNS name",
    ),
    pytest.param(
        cluster_queue("{name}", "v1beta1", cohort="Team_A"),
        'spec.cohort: Invalid value: "Team_A": spec.cohort in body should match',
        id="a v1beta1 cohort name that is not a DNS name",
    ),
    pytest.param(
        cluster_queue(
            "{name}",
            resourceGroups=[
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}]}],
                }
            ],
        ),
        "spec.resourceGroups[0]: Invalid value: flavors must have the same number of resources as the coveredResources",
        id="a flavor that does not cover every resource (Kueue's CEL rule)",
    ),
    pytest.param(
        cluster_queue(
            "{name}", preemption={"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}
        ),
        "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
        id="borrowWithinCohort without reclaimWithinCohort",
    ),
    pytest.param(
        cluster_queue("{name}", queueingStrategy="LIFO"),
        'spec.queueingStrategy: Unsupported value: "LIFO": supported values: "StrictFIFO", "BestEffortFIFO"',
        id="an unknown queueing strategy",
    ),
    pytest.param(
        {
            "apiVersion": f"{GROUP}/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "{name}"},
            "spec": {"parentName": "Not A Name"},
        },
        'spec.parentName: Invalid value: "Not A Name": spec.parentName in body should match',
        id="a Cohort parent that is not a DNS name",
    ),
    pytest.param(
        {
            "apiVersion": f"{GROUP}/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "{name}"},
            "spec": {"topologyName": "t"},
        },
        "at least one nodeLabel is required when topology is set",
        id="a ResourceFlavor with a topology and no node labels",
    ),
]


@pytest.mark.cluster
@pytest.mark.parametrize(("manifest", "message"), REJECTED)
def test_invalid_objects_are_rejected_with_kueues_messages(
    crds: KubeCluster, cleanup: list[tuple[str, ...]], manifest: Obj, message: str
) -> None:
    name = unique("bad")
    text = yaml.safe_dump(manifest).replace("'{name}'", name).replace("{name}", name)
    cleanup.append((manifest["kind"].lower(), name))
    result = apply(crds, text, check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert message in result.stderr
    assert kubectl(crds, "get", manifest["kind"].lower(), name, check=False).returncode != 0


@pytest.mark.cluster
def test_a_zero_or_positive_quota_is_accepted(crds: KubeCluster, cleanup: list[tuple[str, ...]]) -> None:
    # The counterpart of the rejections: the quota rule must not reject what Kueue accepts.
    name = unique("ok")
    cleanup.append(("clusterqueue", name))
    resources = [{"name": "nvidia.com/gpu", "nominalQuota": "0", "borrowingLimit": "-0", "lendingLimit": 0}]
    queue = cluster_queue(
        name, cohortName="shared", resourceGroups=[{**GPU_GROUP, "flavors": [{"name": "h100", "resources": resources}]}]
    )
    apply(crds, queue)


@pytest.mark.cluster
def test_status_is_a_subresource_and_kubectl_get_prints_kueues_columns(
    crds: KubeCluster, cleanup: list[tuple[str, ...]]
) -> None:
    name = unique("cq")
    cleanup.append(("clusterqueue", name))
    queue = cluster_queue(name, cohortName="research-pool", queueingStrategy="StrictFIFO")
    queue["status"] = {"pendingWorkloads": 99}
    apply(crds, queue)
    # Status written with the object is ignored: it is a subresource, written by admitd alone.
    assert "status" not in json.loads(kubectl(crds, "get", "clusterqueue", name, "-o", "json").stdout)
    status = {"status": {"pendingWorkloads": 3, "reservingWorkloads": 2, "admittedWorkloads": 2}}
    kubectl(crds, "patch", "clusterqueue", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))

    table = kubectl(crds, "get", "clusterqueues", name).stdout.splitlines()
    assert table[0].split() == ["NAME", "COHORT", "PENDING", "WORKLOADS", "ADMITTED", "WORKLOADS"]
    assert table[1].split() == [name, "research-pool", "3", "2"]
    # As in Kueue, the strategy is a priority-1 column: `-o wide` shows it (the admitted count is shown always).
    wide = kubectl(crds, "get", "clusterqueues", name, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "COHORT", "STRATEGY", "PENDING", "WORKLOADS", "ADMITTED", "WORKLOADS"]
    assert wide[1].split() == [name, "research-pool", "StrictFIFO", "3", "2"]
    # Through v1beta1 the Cohort column reads spec.cohort, which only the conversion webhook fills in from
    # spec.cohortName; without it (strategy None here) the column is empty. The webhook's test covers it.


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_local_queue_and_workload_columns_and_an_open_pod_template(crds: KubeCluster, namespace: str) -> None:
    local = {
        "apiVersion": f"{GROUP}/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": namespace},
        "spec": {"clusterQueue": "team-research"},
    }
    apply(crds, local)
    kubectl(
        crds,
        "patch",
        "localqueue",
        "lq",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"pendingWorkloads": 4, "admittedWorkloads": 1}}),
    )
    table = kubectl(crds, "get", "localqueues", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "CLUSTERQUEUE", "PENDING", "WORKLOADS", "ADMITTED", "WORKLOADS"]
    assert table[1].split() == ["lq", "team-research", "4", "1"]
    # Kueue's rule on LocalQueue: the ClusterQueue cannot change.
    local["spec"]["clusterQueue"] = "other"
    moved = apply(crds, local, check=False)
    assert moved.returncode != 0
    assert 'spec.clusterQueue: Invalid value: "other": field is immutable' in moved.stderr

    template = {
        "metadata": {"labels": {"app": "train"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"gpu-type": "h100"},
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"nvidia.com/gpu": "4"}}}],
            "anyFieldAtAll": {"kept": True},  # not validated here (the pod template is open) and not pruned
        },
    }
    workload = {
        "apiVersion": f"{GROUP}/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-train", "namespace": namespace},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 2, "template": template}]},
    }
    apply(crds, workload)
    stored = json.loads(kubectl(crds, "get", "workload", "job-train", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["podSets"][0]["template"] == template
    assert stored["spec"]["podSets"][0]["count"] == 2
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
        {
            "type": "Admitted",
            "status": "True",
            "reason": "Admitted",
            "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
    ]
    admission = {
        "clusterQueue": "team-research",
        "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "h100-flavor"}, "count": 2}],
    }
    kubectl(
        crds,
        "patch",
        "workload",
        "job-train",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"admission": admission, "conditions": conditions}}),
    )
    table = kubectl(crds, "get", "workloads", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"]
    assert table[1].split()[:4] == ["job-train", "lq", "team-research", "True"]
    # Kueue's rule on the whole Workload: an admission must assign every pod set.
    bad = {"status": {"admission": {**admission, "podSetAssignments": []}}}
    rejected = kubectl(
        crds,
        "patch",
        "workload",
        "job-train",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(bad),
        check=False,
    )
    assert rejected.returncode != 0
    assert "podSetAssignments must have the same number of podSets as the spec" in rejected.stderr
