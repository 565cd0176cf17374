"""Conversion of kueue.x-k8s.io objects between v1beta1 and v1beta2, and the ConversionReview answer
(`daemon.manifests.conversion`).

Real: `convert` and `review`, on plain dicts shaped as the API server sends them (JSON decoded), the seed's YAML
and the samples in config/samples read from disk. Faked: nothing. The tables transcribe Kueue v0.17.0's own tests
(`apis/kueue/v1beta1/{clusterqueue,localqueue,workload}_conversion_test.go`, `pkg/util/tas/tas_assignment_test.go`),
written as the JSON each Go value serializes to; the case names are Kueue's.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.manifests import ManifestError
from daemon.manifests.conversion import KINDS, V1BETA1, V1BETA2, convert, review

REPO = Path(__file__).resolve().parents[2]
SEED = Path(__file__).parent / "data" / "seed_minimal_setup.yaml"

Obj = dict[str, Any]


def obj(kind: str, version: str, spec: Obj | None = None, status: Obj | None = None, **meta: str) -> Obj:
    metadata = {"name": meta.get("name", f"test-{kind.lower()}")}
    if kind in ("LocalQueue", "Workload"):
        metadata["namespace"] = meta.get("namespace", "default")
    out: Obj = {"apiVersion": version, "kind": kind, "metadata": metadata}
    if spec is not None:
        out["spec"] = spec
    if status is not None:
        out["status"] = status
    return out


def cq(version: str, spec: Obj | None = None, status: Obj | None = None) -> Obj:
    return obj("ClusterQueue", version, spec, status, name="test-clusterqueue")


def lq(version: str, spec: Obj | None = None, status: Obj | None = None) -> Obj:
    return obj("LocalQueue", version, spec, status, name="test-localqueue")


def wl(version: str, spec: Obj | None = None, status: Obj | None = None) -> Obj:
    return obj("Workload", version, spec, status, name="test-workload")


def topology(version: str, assignment: Obj) -> Obj:
    return wl(version, status={"admission": {"podSetAssignments": [{"topologyAssignment": assignment}]}})


ACTIVE = [{"type": "Active", "status": "True", "reason": "Ready"}]
CPU_10 = [{"name": "default-flavor", "resources": [{"name": "cpu", "total": "10"}]}]
TWO_FLAVORS = [
    {"name": "flavor-1", "resources": [{"name": "cpu", "total": "10"}, {"name": "memory", "total": "20Gi"}]},
    {"name": "flavor-2", "resources": [{"name": "cpu", "total": "5"}]},
]
ADMISSION_FAIR_SHARING = {"consumedResources": {"cpu": "10"}, "lastUpdate": "2026-01-02T03:04:05Z"}
POD_PRIORITY = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "low"}
WORKLOAD_PRIORITY = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "low"}

# --- v1beta1 -> v1beta2 (Kueue: Test*ConvertTo) ----------------------------------------------------------------

TO_V1BETA2 = [
    # TestClusterQueueConvertTo
    pytest.param(cq(V1BETA1, {}), cq(V1BETA2, {}), id="ClusterQueue: nil cohort"),
    pytest.param(cq(V1BETA1, {"cohort": ""}), cq(V1BETA2, {}), id="ClusterQueue: empty cohort is left out"),
    pytest.param(
        cq(V1BETA1, {"cohort": "test-cohort"}),
        cq(V1BETA2, {"cohortName": "test-cohort"}),
        id="ClusterQueue: cohort to cohortName conversion",
    ),
    pytest.param(
        cq(V1BETA1, {"admissionChecks": ["check1", "check2"]}),
        cq(V1BETA2, {"admissionChecksStrategy": {"admissionChecks": [{"name": "check1"}, {"name": "check2"}]}}),
        id="ClusterQueue: AdmissionChecks to AdmissionChecksStrategy conversion",
    ),
    pytest.param(
        cq(V1BETA1, {"admissionChecksStrategy": {"admissionChecks": [{"name": "s1"}, {"name": "s2"}]}}),
        cq(V1BETA2, {"admissionChecksStrategy": {"admissionChecks": [{"name": "s1"}, {"name": "s2"}]}}),
        id="ClusterQueue: AdmissionChecksStrategy preserved",
    ),
    pytest.param(cq(V1BETA1, {"admissionChecks": []}), cq(V1BETA2, {}), id="ClusterQueue: empty AdmissionChecks"),
    pytest.param(
        cq(V1BETA1, {"flavorFungibility": {"whenCanPreempt": "Preempt"}}),
        cq(V1BETA2, {"flavorFungibility": {"whenCanPreempt": "MayStopSearch"}}),
        id="ClusterQueue: FlavorFungibility Preempt to MayStopSearch",
    ),
    pytest.param(
        cq(V1BETA1, {"flavorFungibility": {"whenCanBorrow": "Borrow"}}),
        cq(V1BETA2, {"flavorFungibility": {"whenCanBorrow": "MayStopSearch"}}),
        id="ClusterQueue: FlavorFungibility Borrow to MayStopSearch",
    ),
    pytest.param(
        cq(V1BETA1, {"flavorFungibility": {"whenCanPreempt": "MayStopSearch", "whenCanBorrow": "MayStopSearch"}}),
        cq(V1BETA2, {"flavorFungibility": {"whenCanPreempt": "MayStopSearch", "whenCanBorrow": "MayStopSearch"}}),
        id="ClusterQueue: FlavorFungibility MayStopSearch preserved",
    ),
    pytest.param(
        cq(V1BETA1, {"flavorFungibility": {"whenCanPreempt": "TryNextFlavor", "whenCanBorrow": "TryNextFlavor"}}),
        cq(V1BETA2, {"flavorFungibility": {"whenCanPreempt": "TryNextFlavor", "whenCanBorrow": "TryNextFlavor"}}),
        id="ClusterQueue: FlavorFungibility TryNextFlavor preserved",
    ),
    pytest.param(
        cq(
            V1BETA1,
            {
                "cohort": "prod-cohort",
                "admissionChecks": ["multikueue-check"],
                "flavorFungibility": {"whenCanPreempt": "TryNextFlavor", "whenCanBorrow": "MayStopSearch"},
                "queueingStrategy": "StrictFIFO",
            },
            {
                "fairSharing": {"weightedShare": 100, "admissionFairSharingStatus": ADMISSION_FAIR_SHARING},
                "conditions": ACTIVE,
                "pendingWorkloads": 5,
                "pendingWorkloadsStatus": {"clusterQueuePendingWorkload": [{"name": "a", "namespace": "b"}]},
            },
        ),
        cq(
            V1BETA2,
            {
                "cohortName": "prod-cohort",
                "admissionChecksStrategy": {"admissionChecks": [{"name": "multikueue-check"}]},
                "flavorFungibility": {"whenCanPreempt": "TryNextFlavor", "whenCanBorrow": "MayStopSearch"},
                "queueingStrategy": "StrictFIFO",
            },
            {"fairSharing": {"weightedShare": 100}, "conditions": ACTIVE, "pendingWorkloads": 5},
        ),
        id="ClusterQueue: complete ClusterQueue with all fields",
    ),
    # Cohort: the generated conversion drops FairSharingStatus.admissionFairSharingStatus
    pytest.param(
        obj(
            "Cohort",
            V1BETA1,
            {"parentName": "root", "fairSharing": {"weight": "2"}},
            {"fairSharing": {"weightedShare": 7, "admissionFairSharingStatus": ADMISSION_FAIR_SHARING}},
        ),
        obj(
            "Cohort",
            V1BETA2,
            {"parentName": "root", "fairSharing": {"weight": "2"}},
            {"fairSharing": {"weightedShare": 7}},
        ),
        id="Cohort: admissionFairSharingStatus has no v1beta2 peer",
    ),
    # TestLocalQueueConvertTo
    pytest.param(lq(V1BETA1, status={}), lq(V1BETA2, status={}), id="LocalQueue: nil FlavorUsage"),
    pytest.param(
        lq(V1BETA1, status={"flavorUsage": []}),
        lq(V1BETA2, status={"flavorsUsage": []}),
        id="LocalQueue: empty FlavorUsage",
    ),
    pytest.param(
        lq(V1BETA1, status={"flavorUsage": CPU_10}),
        lq(V1BETA2, status={"flavorsUsage": CPU_10}),
        id="LocalQueue: single FlavorUsage",
    ),
    pytest.param(
        lq(
            V1BETA1,
            status={"flavorUsage": TWO_FLAVORS, "pendingWorkloads": 3, "reservingWorkloads": 2, "admittedWorkloads": 1},
        ),
        lq(
            V1BETA2,
            status={
                "flavorsUsage": TWO_FLAVORS,
                "pendingWorkloads": 3,
                "reservingWorkloads": 2,
                "admittedWorkloads": 1,
            },
        ),
        id="LocalQueue: multiple FlavorUsage with various resources",
    ),
    pytest.param(
        lq(
            V1BETA1,
            {"clusterQueue": "cluster-queue-1"},
            {
                "fairSharing": {"weightedShare": 100, "admissionFairSharingStatus": ADMISSION_FAIR_SHARING},
                "conditions": ACTIVE,
                "flavorUsage": CPU_10,
                "pendingWorkloads": 5,
            },
        ),
        lq(
            V1BETA2,
            {"clusterQueue": "cluster-queue-1"},
            {
                "fairSharing": {"weightedShare": 100, "admissionFairSharingStatus": ADMISSION_FAIR_SHARING},
                "conditions": ACTIVE,
                "flavorsUsage": CPU_10,
                "pendingWorkloads": 5,
            },
        ),
        id="LocalQueue: with conditions and status fields",
    ),
    pytest.param(
        lq(V1BETA1, status={"flavors": [{"name": "f", "resources": ["cpu"], "nodeLabels": {"a": "b"}}]}),
        lq(V1BETA2, status={}),
        id="LocalQueue: status.flavors has no v1beta2 peer",
    ),
    # TestWorkloadConvertTo
    pytest.param(
        wl(V1BETA1, status={}), wl(V1BETA2, status={}), id="Workload: nil AccumulatedPastExexcutionTimeSeconds"
    ),
    pytest.param(
        wl(V1BETA1, status={"accumulatedPastExexcutionTimeSeconds": 0}),
        wl(V1BETA2, status={"accumulatedPastExecutionTimeSeconds": 0}),
        id="Workload: zero AccumulatedPastExexcutionTimeSeconds",
    ),
    pytest.param(
        wl(V1BETA1, status={"accumulatedPastExexcutionTimeSeconds": 3600}),
        wl(V1BETA2, status={"accumulatedPastExecutionTimeSeconds": 3600}),
        id="Workload: non-zero AccumulatedPastExexcutionTimeSeconds",
    ),
    pytest.param(
        wl(
            V1BETA1,
            status={
                "conditions": [{"type": "Admitted", "status": "True", "reason": "AdmittedByClusterQueue"}],
                "accumulatedPastExexcutionTimeSeconds": 7200,
            },
        ),
        wl(
            V1BETA2,
            status={
                "conditions": [{"type": "Admitted", "status": "True", "reason": "AdmittedByClusterQueue"}],
                "accumulatedPastExecutionTimeSeconds": 7200,
            },
        ),
        id="Workload: with conditions and other fields",
    ),
    pytest.param(
        wl(
            V1BETA1,
            {"priority": 100, "priorityClassSource": "scheduling.k8s.io/priorityclass", "priorityClassName": "low"},
        ),
        wl(V1BETA2, {"priority": 100, "priorityClassRef": POD_PRIORITY}),
        id="Workload: with PodPriorityClassSource",
    ),
    pytest.param(
        wl(
            V1BETA1,
            {
                "priority": 100,
                "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
                "priorityClassName": "low",
            },
        ),
        wl(V1BETA2, {"priority": 100, "priorityClassRef": WORKLOAD_PRIORITY}),
        id="Workload: with WorkloadPriorityClassSource",
    ),
    pytest.param(
        topology(
            V1BETA1,
            {
                "levels": ["a", "b"],
                "domains": [{"values": ["a1", "b1"], "count": 10}, {"values": ["a1", "b2"], "count": 20}],
            },
        ),
        topology(
            V1BETA2,
            {
                "levels": ["a", "b"],
                "slices": [
                    {
                        "domainCount": 2,
                        "valuesPerLevel": [{"universal": "a1"}, {"individual": {"prefix": "b", "roots": ["1", "2"]}}],
                        "podCounts": {"individual": [10, 20]},
                    }
                ],
            },
        ),
        id="Workload: with TopologyAssignment",
    ),
]

# --- v1beta2 -> v1beta1 (Kueue: Test*ConvertFrom) --------------------------------------------------------------

TO_V1BETA1 = [
    # TestClusterQueueConvertFrom
    pytest.param(cq(V1BETA2, {}), cq(V1BETA1, {}), id="ClusterQueue: nil cohortName"),
    pytest.param(
        cq(V1BETA2, {"cohortName": "test-cohort"}),
        cq(V1BETA1, {"cohort": "test-cohort"}),
        id="ClusterQueue: cohortName to cohort conversion",
    ),
    pytest.param(
        cq(V1BETA2, {"flavorFungibility": {"whenCanPreempt": "MayStopSearch", "whenCanBorrow": "MayStopSearch"}}),
        cq(V1BETA1, {"flavorFungibility": {"whenCanPreempt": "MayStopSearch", "whenCanBorrow": "MayStopSearch"}}),
        id="ClusterQueue: FlavorFungibility MayStopSearch preserved",
    ),
    pytest.param(
        cq(V1BETA2, {"flavorFungibility": {"whenCanPreempt": "TryNextFlavor", "whenCanBorrow": "TryNextFlavor"}}),
        cq(V1BETA1, {"flavorFungibility": {"whenCanPreempt": "TryNextFlavor", "whenCanBorrow": "TryNextFlavor"}}),
        id="ClusterQueue: FlavorFungibility TryNextFlavor preserved",
    ),
    pytest.param(
        cq(
            V1BETA2,
            {
                "cohortName": "prod-cohort",
                "flavorFungibility": {"whenCanPreempt": "MayStopSearch", "whenCanBorrow": "TryNextFlavor"},
                "queueingStrategy": "StrictFIFO",
            },
            {"fairSharing": {"weightedShare": 100}, "conditions": ACTIVE, "pendingWorkloads": 5},
        ),
        cq(
            V1BETA1,
            {
                "cohort": "prod-cohort",
                "flavorFungibility": {"whenCanPreempt": "MayStopSearch", "whenCanBorrow": "TryNextFlavor"},
                "queueingStrategy": "StrictFIFO",
            },
            {"fairSharing": {"weightedShare": 100}, "conditions": ACTIVE, "pendingWorkloads": 5},
        ),
        id="ClusterQueue: complete ClusterQueue with all fields",
    ),
    # TestLocalQueueConvertFrom
    pytest.param(lq(V1BETA2, status={}), lq(V1BETA1, status={}), id="LocalQueue: nil FlavorsUsage"),
    pytest.param(
        lq(V1BETA2, status={"flavorsUsage": []}),
        lq(V1BETA1, status={"flavorUsage": []}),
        id="LocalQueue: empty FlavorsUsage",
    ),
    pytest.param(
        lq(V1BETA2, status={"flavorsUsage": CPU_10}),
        lq(V1BETA1, status={"flavorUsage": CPU_10}),
        id="LocalQueue: single FlavorsUsage",
    ),
    pytest.param(
        lq(
            V1BETA2,
            status={
                "flavorsUsage": TWO_FLAVORS,
                "pendingWorkloads": 3,
                "reservingWorkloads": 2,
                "admittedWorkloads": 1,
            },
        ),
        lq(
            V1BETA1,
            status={"flavorUsage": TWO_FLAVORS, "pendingWorkloads": 3, "reservingWorkloads": 2, "admittedWorkloads": 1},
        ),
        id="LocalQueue: multiple FlavorsUsage with various resources",
    ),
    pytest.param(
        lq(
            V1BETA2,
            {"clusterQueue": "cluster-queue-1"},
            {"conditions": ACTIVE, "flavorsUsage": CPU_10, "pendingWorkloads": 5},
        ),
        lq(
            V1BETA1,
            {"clusterQueue": "cluster-queue-1"},
            {"conditions": ACTIVE, "flavorUsage": CPU_10, "pendingWorkloads": 5},
        ),
        id="LocalQueue: with conditions and status fields",
    ),
    # TestWorkloadConvertFrom
    pytest.param(
        wl(V1BETA2, status={}), wl(V1BETA1, status={}), id="Workload: nil AccumulatedPastExecutionTimeSeconds"
    ),
    pytest.param(
        wl(V1BETA2, status={"accumulatedPastExecutionTimeSeconds": 0}),
        wl(V1BETA1, status={"accumulatedPastExexcutionTimeSeconds": 0}),
        id="Workload: zero AccumulatedPastExecutionTimeSeconds",
    ),
    pytest.param(
        wl(V1BETA2, status={"accumulatedPastExecutionTimeSeconds": 3600}),
        wl(V1BETA1, status={"accumulatedPastExexcutionTimeSeconds": 3600}),
        id="Workload: non-zero AccumulatedPastExecutionTimeSeconds",
    ),
    pytest.param(
        wl(
            V1BETA2,
            status={
                "conditions": [{"type": "Finished", "status": "True", "reason": "JobFinished"}],
                "accumulatedPastExecutionTimeSeconds": 1800,
            },
        ),
        wl(
            V1BETA1,
            status={
                "conditions": [{"type": "Finished", "status": "True", "reason": "JobFinished"}],
                "accumulatedPastExexcutionTimeSeconds": 1800,
            },
        ),
        id="Workload: with conditions and other fields",
    ),
    pytest.param(
        wl(V1BETA2, {"priority": 100, "priorityClassRef": POD_PRIORITY}),
        wl(
            V1BETA1,
            {"priority": 100, "priorityClassSource": "scheduling.k8s.io/priorityclass", "priorityClassName": "low"},
        ),
        id="Workload: with PodPriorityClassRef",
    ),
    pytest.param(
        wl(V1BETA2, {"priority": 100, "priorityClassRef": WORKLOAD_PRIORITY}),
        wl(
            V1BETA1,
            {
                "priority": 100,
                "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
                "priorityClassName": "low",
            },
        ),
        id="Workload: with WorkloadPriorityClassRef",
    ),
    pytest.param(
        topology(
            V1BETA2,
            {
                "levels": ["a", "b"],
                "slices": [
                    {
                        "domainCount": 2,
                        "valuesPerLevel": [{"universal": "a1"}, {"individual": {"prefix": "b", "roots": ["1", "2"]}}],
                        "podCounts": {"individual": [10, 20]},
                    }
                ],
            },
        ),
        topology(
            V1BETA1,
            {
                "levels": ["a", "b"],
                "domains": [{"values": ["a1", "b1"], "count": 10}, {"values": ["a1", "b2"], "count": 20}],
            },
        ),
        id="Workload: with TopologyAssignment",
    ),
    pytest.param(
        topology(
            V1BETA2,
            {
                "levels": ["a", "b"],
                "slices": [
                    {
                        "domainCount": 2,
                        "valuesPerLevel": [{"universal": "a1"}, {"individual": {"prefix": "b", "roots": ["1", "2"]}}],
                        "podCounts": {"individual": [10, 20]},
                    },
                    {
                        "domainCount": 2,
                        "valuesPerLevel": [
                            {"universal": "a2"},
                            {"individual": {"roots": ["first", "second"], "suffix": "-in-a2"}},
                        ],
                        "podCounts": {"universal": 50},
                    },
                ],
            },
        ),
        topology(
            V1BETA1,
            {
                "levels": ["a", "b"],
                "domains": [
                    {"values": ["a1", "b1"], "count": 10},
                    {"values": ["a1", "b2"], "count": 20},
                    {"values": ["a2", "first-in-a2"], "count": 50},
                    {"values": ["a2", "second-in-a2"], "count": 50},
                ],
            },
        ),
        id="Workload: with TopologyAssignment, multiple slices",
    ),
    # v1beta2-only fields (zz_generated.conversion.go: "does not exist in peer-type")
    pytest.param(
        wl(
            V1BETA2,
            {
                "preemptionGates": [{"name": "g"}],
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "template": {"spec": {"containers": []}},
                        "topologyRequest": {
                            "required": "rack",
                            "podsetSliceRequiredTopologyConstraints": [{"topology": "rack", "size": 2}],
                        },
                    }
                ],
            },
            {"preemptionGates": [{"name": "g", "position": "Open", "lastTransitionTime": "2026-01-02T03:04:05Z"}]},
        ),
        wl(
            V1BETA1,
            {
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "template": {"spec": {"containers": []}},
                        "topologyRequest": {"required": "rack"},
                    }
                ]
            },
            {},
        ),
        id="Workload: preemption gates and slice constraints have no v1beta1 peer",
    ),
    pytest.param(
        wl(V1BETA2, {"priorityClassRef": {"group": "scheduling.k8s.io", "kind": "WorkloadPriorityClass", "name": "x"}}),
        wl(V1BETA1, {}),
        id="Workload: a priorityClassRef of another group and kind has no v1beta1 form",
    ),
]


@pytest.mark.parametrize(("v1beta1", "v1beta2"), TO_V1BETA2)
def test_to_v1beta2(v1beta1: Obj, v1beta2: Obj) -> None:
    before = copy.deepcopy(v1beta1)
    assert convert(v1beta1, V1BETA2) == v1beta2
    assert v1beta1 == before  # the input is not changed


@pytest.mark.parametrize(("v1beta2", "v1beta1"), TO_V1BETA1)
def test_to_v1beta1(v1beta2: Obj, v1beta1: Obj) -> None:
    before = copy.deepcopy(v1beta2)
    assert convert(v1beta2, "v1beta1") == v1beta1
    assert v1beta2 == before


# --- round trips (Kueue: Test*Conversion_RoundTrip) -------------------------------------------------------------

ROUND_TRIPS = [
    pytest.param(
        cq(
            V1BETA1,
            {
                "cohort": "prod-cohort",
                "flavorFungibility": {"whenCanPreempt": "TryNextFlavor", "whenCanBorrow": "MayStopSearch"},
                "queueingStrategy": "StrictFIFO",
            },
            {"conditions": ACTIVE, "pendingWorkloads": 10},
        ),
        id="ClusterQueue: complete ClusterQueue with cohort and FlavorFungibility",
    ),
    pytest.param(obj("ClusterQueue", V1BETA1, name="minimal-cq"), id="ClusterQueue: minimal ClusterQueue"),
    pytest.param(
        lq(
            V1BETA1,
            {"clusterQueue": "main-cluster-queue"},
            {
                "conditions": ACTIVE,
                "flavorUsage": [{"name": "flavor-1", "resources": [{"name": "cpu", "total": "10"}]}],
                "pendingWorkloads": 5,
                "reservingWorkloads": 3,
                "admittedWorkloads": 2,
            },
        ),
        id="LocalQueue: complete LocalQueue with multiple flavors",
    ),
    pytest.param(obj("LocalQueue", V1BETA1, status={}, name="simple-localqueue"), id="LocalQueue: nil FlavorUsage"),
    pytest.param(
        obj("LocalQueue", V1BETA1, status={"flavorUsage": []}, name="empty-flavor-localqueue"),
        id="LocalQueue: empty FlavorUsage",
    ),
    pytest.param(
        wl(
            V1BETA1,
            status={
                "conditions": [{"type": "Admitted", "status": "True", "reason": "AdmittedByClusterQueue"}],
                "accumulatedPastExexcutionTimeSeconds": 5400,
            },
        ),
        id="Workload: complete Workload with AccumulatedPastExexcutionTimeSeconds",
    ),
    pytest.param(wl(V1BETA1, status={}), id="Workload: nil AccumulatedPastExexcutionTimeSeconds"),
    pytest.param(
        wl(V1BETA1, status={"accumulatedPastExexcutionTimeSeconds": 0}),
        id="Workload: zero AccumulatedPastExexcutionTimeSeconds",
    ),
    pytest.param(
        wl(
            V1BETA1,
            {"priority": 100, "priorityClassSource": "scheduling.k8s.io/priorityclass", "priorityClassName": "low"},
        ),
        id="Workload: with PodPriorityClassSource",
    ),
    pytest.param(
        wl(
            V1BETA1,
            {
                "priority": 100,
                "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
                "priorityClassName": "low",
            },
        ),
        id="Workload: with WorkloadPriorityClassSource",
    ),
    pytest.param(
        topology(
            V1BETA1,
            {
                "levels": ["a", "b"],
                "domains": [{"values": ["a1", "b1"], "count": 10}, {"values": ["a1", "b2"], "count": 20}],
            },
        ),
        id="Workload: with TopologyAssignment",
    ),
    pytest.param(
        obj(
            "ResourceFlavor",
            V1BETA1,
            {"nodeLabels": {"gpu-type": "h100"}, "nodeTaints": [{"key": "k", "effect": "NoSchedule"}]},
        ),
        id="ResourceFlavor: same schema",
    ),
    pytest.param(
        {
            "apiVersion": V1BETA1,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
            "description": "d",
        },
        id="WorkloadPriorityClass: same schema",
    ),
    pytest.param(
        obj(
            "Cohort",
            V1BETA1,
            {
                "parentName": "root",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "4"}]}],
                    }
                ],
            },
            {"fairSharing": {"weightedShare": 3}},
        ),
        id="Cohort: no admissionFairSharingStatus",
    ),
]


@pytest.mark.parametrize("v1beta1", ROUND_TRIPS)
def test_round_trip_through_v1beta2_is_lossless(v1beta1: Obj) -> None:
    v1beta2 = convert(v1beta1, V1BETA2)
    assert v1beta2["apiVersion"] == V1BETA2
    assert convert(v1beta2, V1BETA1) == v1beta1


@pytest.mark.parametrize(
    ("v1beta1", "after_round_trip"),
    [
        pytest.param(
            cq(V1BETA1, {"admissionChecks": ["a", "b"]}),
            cq(V1BETA1, {"admissionChecksStrategy": {"admissionChecks": [{"name": "a"}, {"name": "b"}]}}),
            id="ClusterQueue: admissionChecks come back as the strategy",
        ),
        pytest.param(
            cq(V1BETA1, {"flavorFungibility": {"whenCanPreempt": "Preempt", "whenCanBorrow": "Borrow"}}),
            cq(V1BETA1, {"flavorFungibility": {"whenCanPreempt": "MayStopSearch", "whenCanBorrow": "MayStopSearch"}}),
            id="ClusterQueue: the deprecated Preempt and Borrow come back as MayStopSearch",
        ),
        pytest.param(
            cq(V1BETA1, status={"pendingWorkloadsStatus": {"lastChangeTime": "2026-01-02T03:04:05Z"}}),
            cq(V1BETA1, status={}),
            id="ClusterQueue: pendingWorkloadsStatus is dropped",
        ),
        pytest.param(
            wl(V1BETA1, {"priority": 5, "priorityClassName": "orphan", "priorityClassSource": ""}),
            wl(V1BETA1, {"priority": 5}),
            id="Workload: a priorityClassName without a source is dropped",
        ),
    ],
)
def test_round_trip_loses_what_kueue_loses(v1beta1: Obj, after_round_trip: Obj) -> None:
    assert convert(convert(v1beta1, V1BETA2), V1BETA1) == after_round_trip


# --- each renamed field, both ways ---------------------------------------------------------------------------

RENAMED = [
    ("ClusterQueue", ("spec", "cohort"), ("spec", "cohortName"), "team-cohort"),
    ("LocalQueue", ("status", "flavorUsage"), ("status", "flavorsUsage"), CPU_10),
    (
        "Workload",
        ("status", "accumulatedPastExexcutionTimeSeconds"),
        ("status", "accumulatedPastExecutionTimeSeconds"),
        42,
    ),
]


@pytest.mark.parametrize(("kind", "old", "new", "value"), RENAMED, ids=[f"{r[0]}.{'.'.join(r[1])}" for r in RENAMED])
def test_each_renamed_field_moves_both_ways(kind: str, old: tuple[str, str], new: tuple[str, str], value: Any) -> None:
    v1beta1 = obj(kind, V1BETA1, **{})
    v1beta1[old[0]] = {old[1]: value, "kept": "as is"}
    v1beta2 = convert(v1beta1, V1BETA2)
    assert v1beta2[new[0]] == {new[1]: value, "kept": "as is"}
    assert convert(v1beta2, V1BETA1) == v1beta1


def test_a_target_only_field_in_the_source_is_dropped_as_a_go_decoder_would() -> None:
    # v1beta1 has no cohortName: the cohort's value wins.
    assert convert(cq(V1BETA1, {"cohort": "a", "cohortName": "b"}), V1BETA2)["spec"] == {"cohortName": "a"}


def test_admission_checks_replace_a_strategy_given_alongside_as_kueue_does() -> None:
    v1beta1 = cq(V1BETA1, {"admissionChecks": ["a"], "admissionChecksStrategy": {"admissionChecks": [{"name": "b"}]}})
    assert convert(v1beta1, V1BETA2)["spec"] == {"admissionChecksStrategy": {"admissionChecks": [{"name": "a"}]}}


def test_metadata_is_never_changed() -> None:
    # The API server rejects a conversion that changes metadata other than labels and annotations.
    v1beta1 = cq(V1BETA1, {"cohort": "c"})
    v1beta1["metadata"] = {
        "name": "q",
        "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        "resourceVersion": "17",
        "generation": 3,
        "labels": {"team": "a"},
        "annotations": {"note": "x"},
        "managedFields": [{"manager": "kubectl", "apiVersion": V1BETA1, "operation": "Apply"}],
    }
    assert convert(v1beta1, V1BETA2)["metadata"] == v1beta1["metadata"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_object_already_in_the_target_version_comes_back_unchanged(kind: str) -> None:
    v1beta2 = obj(kind, V1BETA2, {"cohortName": "x", "flavorsUsage": []})
    assert convert(v1beta2, V1BETA2) == v1beta2
    assert convert(v1beta2, V1BETA2) is not v1beta2


# --- the topology assignment's compact encoding (Kueue: pkg/util/tas/tas_assignment_test.go) ----------------------


def slice_(count: int, values: list[Obj], pods: Obj) -> Obj:
    return {"domainCount": count, "valuesPerLevel": values, "podCounts": pods}


def ind(roots: list[str], prefix: str | None = None, suffix: str | None = None) -> Obj:
    out: Obj = {}
    if prefix is not None:
        out["prefix"] = prefix
    if suffix is not None:
        out["suffix"] = suffix
    out["roots"] = roots
    return {"individual": out}


def uni(value: str) -> Obj:
    return {"universal": value}


def domains(*pairs: tuple[list[str], int]) -> list[Obj]:
    return [{"values": values, "count": count} for values, count in pairs]


# bothWaysTestCases: v1beta1 (levels, domains) <-> v1beta2 (levels, slices)
BOTH_WAYS = [
    pytest.param(["a", "b"], [], [], id="empty"),
    pytest.param(
        ["a", "b"], domains((["a1", "b1"], 1)), [slice_(1, [uni("a1"), uni("b1")], {"universal": 1})], id="one domain"
    ),
    pytest.param(
        ["a", "b"],
        domains((["a1", "b1"], 1), (["a2", "b2"], 1)),
        [slice_(2, [ind(["1", "2"], prefix="a"), ind(["1", "2"], prefix="b")], {"universal": 1})],
        id="multiple domains, same counts, no common prefix",
    ),
    pytest.param(
        ["a", "b"],
        domains((["p.a1.s", "p.b1.s"], 1), (["p.a2.s", "p.b2.s"], 2)),
        [
            slice_(
                2,
                [ind(["1", "2"], prefix="p.a", suffix=".s"), ind(["1", "2"], prefix="p.b", suffix=".s")],
                {"individual": [1, 2]},
            )
        ],
        id="multiple domains, different counts, common prefix and suffix",
    ),
    pytest.param(
        ["a", "b"],
        domains((["a1", "x"], 1), (["a1", "y"], 2)),
        [slice_(2, [uni("a1"), ind(["x", "y"])], {"individual": [1, 2]})],
        id="multiple domains, universal value",
    ),
    pytest.param(
        ["a"],
        domains((["a123"], 1), (["a12"], 1), (["a1"], 1), (["a13"], 1)),
        [slice_(4, [ind(["23", "2", "", "3"], prefix="a1")], {"universal": 1})],
        id="multiple domains, same counts, shrinking prefix",
    ),
    pytest.param(
        ["a"],
        domains((["123b"], 1), (["23b"], 1), (["3b"], 1), (["13b"], 1)),
        [slice_(4, [ind(["12", "2", "", "1"], suffix="3b")], {"universal": 1})],
        id="multiple domains, same counts, shrinking suffix",
    ),
    pytest.param(
        ["a"],
        domains((["abacacada"], 1), (["abacada"], 1)),
        [slice_(2, [ind(["ac", ""], prefix="ab", suffix="acada")], {"universal": 1})],
        id="multiple domains, same counts, max prefix & suffix overlap partially",
    ),
    pytest.param(
        ["a"],
        domains((["ababa"], 1), (["aba"], 1)),
        [slice_(2, [ind(["ab", ""], suffix="aba")], {"universal": 1})],
        id="multiple domains, same counts, max prefix & suffix overlap fully, shrinking strings",
    ),
    pytest.param(
        ["a"],
        domains((["aba"], 1), (["ababa"], 1)),
        [slice_(2, [ind(["", "ab"], suffix="aba")], {"universal": 1})],
        id="multiple domains, same counts, max prefix & suffix overlap fully, growing strings",
    ),
]

# oneWayTestCases: v1beta2 forms V1Beta2From does not produce, read back to v1beta1
ONE_WAY = [
    pytest.param(
        ["a", "b"],
        domains((["a", "b"], 1), (["c", "d"], 2), (["e", "f"], 3)),
        [
            slice_(1, [ind(["a"]), ind(["b"])], {"individual": [1]}),
            slice_(2, [ind(["c", "e"]), ind(["d", "f"])], {"individual": [2, 3]}),
        ],
        id="multiple slices, no prefixes/suffixes or universal values",
    ),
    pytest.param(
        ["a", "b"],
        domains(
            (["a1", "b1-s"], 2),
            (["a1", "b2-s"], 3),
            (["a2", "x-t"], 5),
            (["a3", "y-t"], 5),
            (["a4", "z-t"], 5),
            (["a10", "b10"], 10),
            (["a10", "b10"], 10),
        ),
        [
            slice_(2, [uni("a1"), ind(["1", "2"], prefix="b", suffix="-s")], {"individual": [2, 3]}),
            slice_(3, [ind(["2", "3", "4"], prefix="a"), ind(["x", "y", "z"], suffix="-t")], {"universal": 5}),
            slice_(2, [uni("a10"), uni("b10")], {"universal": 10}),
        ],
        id="multiple slices, prefixes, suffixes & universal values",
    ),
]


@pytest.mark.parametrize(("levels", "v1beta1_domains", "v1beta2_slices"), BOTH_WAYS)
def test_topology_assignment_to_v1beta2(
    levels: list[str], v1beta1_domains: list[Obj], v1beta2_slices: list[Obj]
) -> None:
    converted = convert(topology(V1BETA1, {"levels": levels, "domains": v1beta1_domains}), V1BETA2)
    assert converted == topology(V1BETA2, {"levels": levels, "slices": v1beta2_slices})


@pytest.mark.parametrize(("levels", "v1beta1_domains", "v1beta2_slices"), BOTH_WAYS + ONE_WAY)
def test_topology_assignment_to_v1beta1(
    levels: list[str], v1beta1_domains: list[Obj], v1beta2_slices: list[Obj]
) -> None:
    converted = convert(topology(V1BETA2, {"levels": levels, "slices": v1beta2_slices}), V1BETA1)
    assert converted == topology(V1BETA1, {"levels": levels, "domains": v1beta1_domains})


label_values = st.text(alphabet="ab.-1", max_size=6)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=3).flatmap(
        lambda n: st.lists(
            st.tuples(st.lists(label_values, min_size=n, max_size=n), st.integers(min_value=1, max_value=4)),
            max_size=6,
        ).map(lambda ds: (n, ds))
    )
)
def test_topology_assignment_round_trip_is_lossless_for_any_domains(
    case: tuple[int, list[tuple[list[str], int]]],
) -> None:
    n, pairs = case
    original = topology(V1BETA1, {"levels": [f"level-{i}" for i in range(n)], "domains": domains(*pairs)})
    assert convert(convert(original, V1BETA2), V1BETA1) == original


# --- the seed and the samples ----------------------------------------------------------------------------------


def kueue_documents(path: Path) -> list[Obj]:
    return [
        d for d in yaml.safe_load_all(path.read_text()) if d and d.get("apiVersion", "").startswith("kueue.x-k8s.io/")
    ]


def test_the_seeds_objects_convert_to_v1beta2_and_back_unchanged() -> None:
    flavor, queue, local = kueue_documents(SEED)
    assert [d["kind"] for d in (flavor, queue, local)] == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    up = [convert(d, V1BETA2) for d in (flavor, queue, local)]
    # Nothing in the seed is renamed: each object differs only in its apiVersion.
    assert up == [{**d, "apiVersion": V1BETA2} for d in (flavor, queue, local)]
    assert up[1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 8,
        "borrowingLimit": 4,
    }
    assert [convert(d, V1BETA1) for d in up] == [flavor, queue, local]


@pytest.mark.parametrize("sample", sorted((REPO / "config" / "samples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_kueue_object_in_the_samples_survives_a_round_trip(sample: Path) -> None:
    documents = kueue_documents(sample)
    assert documents, f"{sample} has no kueue.x-k8s.io objects"
    for document in documents:
        other = V1BETA2 if document["apiVersion"] == V1BETA1 else V1BETA1
        assert convert(convert(document, other), document["apiVersion"]) == document


# --- errors -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "to", "message"),
    [
        pytest.param(
            {"apiVersion": V1BETA1, "kind": "AdmissionCheck", "metadata": {"name": "x"}},
            V1BETA2,
            "AdmissionCheck x: kind: must be one of ResourceFlavor, ClusterQueue, LocalQueue, Cohort, "
            "WorkloadPriorityClass, Workload, got a string ('AdmissionCheck')",
            id="a kind admitd does not serve",
        ),
        pytest.param(
            {"apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "Cohort", "metadata": {"name": "x"}},
            V1BETA2,
            "Cohort x: apiVersion: must be kueue.x-k8s.io/v1beta1 or kueue.x-k8s.io/v1beta2, "
            "got a string ('kueue.x-k8s.io/v1alpha1')",
            id="an unknown version",
        ),
        pytest.param(
            cq(V1BETA1, {"admissionChecks": ["ok", 7]}),
            V1BETA2,
            "ClusterQueue test-clusterqueue: spec.admissionChecks[1]: must be a string, got a number (7)",
            id="an admission check that is not a name",
        ),
        pytest.param(
            cq(V1BETA1, "not an object"),  # type: ignore[arg-type]
            V1BETA2,
            "ClusterQueue test-clusterqueue: spec: must be an object, got a string ('not an object')",
            id="a spec that is not an object",
        ),
        pytest.param(
            topology(V1BETA1, {"levels": ["rack", "host"], "domains": [{"values": ["r1"], "count": 1}]}),
            V1BETA2,
            "Workload default/test-workload: status.admission.podSetAssignments[0].topologyAssignment.domains[0]"
            ".values: has 1 values for 2 levels",
            id="a domain with fewer values than levels",
        ),
        pytest.param(
            topology(V1BETA2, {"levels": ["a"], "slices": [slice_(2, [ind(["x"])], {"universal": 1})]}),
            V1BETA1,
            "Workload default/test-workload: status.admission.podSetAssignments[0].topologyAssignment.slices[0]"
            ".valuesPerLevel[0].individual.roots: has 1 roots for domainCount 2",
            id="fewer roots than domains",
        ),
        pytest.param(
            topology(V1BETA2, {"levels": ["a"], "slices": [slice_(2, [uni("x")], {"individual": [1]})]}),
            V1BETA1,
            "Workload default/test-workload: status.admission.podSetAssignments[0].topologyAssignment.slices[0]"
            ".podCounts.individual: has 1 counts for domainCount 2",
            id="fewer pod counts than domains",
        ),
        pytest.param(
            topology(V1BETA2, {"levels": ["a", "b"], "slices": [slice_(1, [uni("x")], {"universal": 1})]}),
            V1BETA1,
            "Workload default/test-workload: status.admission.podSetAssignments[0].topologyAssignment.slices[0]"
            ".valuesPerLevel: has 1 entries for 2 levels",
            id="fewer level values than levels",
        ),
        pytest.param(
            topology(V1BETA2, {"levels": ["a"], "slices": [slice_(2**31 - 1, [uni("x")], {"universal": 1})]}),
            V1BETA1,
            "Workload default/test-workload: status.admission.podSetAssignments[0].topologyAssignment.slices[0]: "
            "expands to more than 100,000 topology domains",
            id="a slice too big to expand",
        ),
        pytest.param(
            wl(V1BETA2, {"priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": 3}}),
            V1BETA1,
            "Workload default/test-workload: spec.priorityClassRef.name: must be a string, got a number (3)",
            id="a priority class name that is not a string",
        ),
    ],
)
def test_what_cannot_be_converted_is_named_with_its_object_and_field(bad: Obj, to: str, message: str) -> None:
    with pytest.raises(ManifestError) as caught:
        convert(bad, to)
    assert str(caught.value) == message


def test_only_the_two_kueue_versions_are_targets() -> None:
    with pytest.raises(ManifestError, match=r"cannot convert to 'v1'"):
        convert(cq(V1BETA1), "v1")


# --- the ConversionReview ----------------------------------------------------------------------------------------


def conversion_review(
    objects: list[Any], desired: str = V1BETA2, uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002"
) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    }


def test_review_converts_every_object_in_order_and_echoes_the_uid() -> None:
    objects = [
        cq(V1BETA1, {"cohort": "c"}),
        lq(V1BETA1, status={"flavorUsage": []}),
        obj("ResourceFlavor", V1BETA1, {}),
    ]
    answer = review(conversion_review(objects, uid="u-1"))
    assert answer == {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {
            "uid": "u-1",
            "convertedObjects": [convert(o, V1BETA2) for o in objects],
            "result": {"status": "Success"},
        },
    }
    assert answer["response"]["convertedObjects"][0]["spec"] == {"cohortName": "c"}


def test_review_of_no_objects_succeeds() -> None:
    answer = review(conversion_review([], desired=V1BETA1))
    assert answer["response"] == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "convertedObjects": [],
        "result": {"status": "Success"},
    }


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        pytest.param(
            conversion_review([cq(V1BETA1), cq(V1BETA1, {"admissionChecks": "one"})]),
            "admitd: cannot convert ClusterQueue test-clusterqueue to kueue.x-k8s.io/v1beta2: spec.admissionChecks: "
            "must be a list, got a string ('one')",
            id="one bad object fails the review, naming it and its field",
        ),
        pytest.param(
            conversion_review([{"apiVersion": V1BETA1, "kind": "Workload", "metadata": {}}, 5]),
            "admitd: cannot convert request.objects[1] to kueue.x-k8s.io/v1beta2: must be an object, got a number (5)",
            id="an object with no name is named by its index",
        ),
        pytest.param(
            conversion_review([cq(V1BETA1)], desired="kueue.x-k8s.io/v1beta3"),
            "admitd: request.desiredAPIVersion: admitd converts to kueue.x-k8s.io/v1beta1 or kueue.x-k8s.io/v1beta2, "
            "got a string ('kueue.x-k8s.io/v1beta3')",
            id="a version admitd does not serve",
        ),
        pytest.param(
            {**conversion_review([]), "apiVersion": "apiextensions.k8s.io/v1beta1"},
            "admitd: expected a ConversionReview of apiextensions.k8s.io/v1, got kind a string ('ConversionReview') "
            "of apiVersion a string ('apiextensions.k8s.io/v1beta1')",
            id="a v1beta1 ConversionReview",
        ),
    ],
)
def test_review_failure_says_what_and_where(request_: Obj, message: str) -> None:
    answer = review(request_)
    assert answer["apiVersion"] == "apiextensions.k8s.io/v1"
    assert answer["response"]["result"] == {"status": "Failure", "message": message}
    assert "convertedObjects" not in answer["response"]
    assert answer["response"]["uid"] == request_.get("request", {}).get("uid", "") or answer["response"]["uid"] == ""


def test_review_without_a_uid_fails() -> None:
    bad = conversion_review([])
    del bad["request"]["uid"]
    assert review(bad)["response"] == {
        "uid": "",
        "result": {"status": "Failure", "message": "admitd: request.uid: must be a non-empty string, got null"},
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**40), max_value=2**40) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
field_names = st.sampled_from(
    [
        "spec",
        "status",
        "cohort",
        "cohortName",
        "admissionChecks",
        "flavorFungibility",
        "flavorUsage",
        "flavorsUsage",
        "priorityClassRef",
        "priorityClassSource",
        "admission",
        "podSetAssignments",
        "topologyAssignment",
        "domains",
        "slices",
        "levels",
        "values",
        "count",
        "domainCount",
        "valuesPerLevel",
        "podCounts",
        "universal",
        "individual",
        "roots",
        "podSets",
        "topologyRequest",
        "fairSharing",
    ]
)
kueue_shaped = st.recursive(
    json_values,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(field_names, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    version=st.sampled_from([V1BETA1, V1BETA2]),
    desired=st.sampled_from([V1BETA1, V1BETA2]),
    body=st.dictionaries(st.sampled_from(["spec", "status", "metadata"]), kueue_shaped, max_size=3),
)
def test_review_answers_any_object_without_raising(kind: str, version: str, desired: str, body: Obj) -> None:
    answer = review(conversion_review([{"apiVersion": version, "kind": kind, **body}], desired=desired))
    result = answer["response"]["result"]
    if result["status"] == "Success":
        (converted,) = answer["response"]["convertedObjects"]
        assert converted["apiVersion"] == desired
        assert converted.get("metadata") == body.get("metadata")
    else:
        assert result["status"] == "Failure"
        assert result["message"].startswith("admitd: cannot convert ")
