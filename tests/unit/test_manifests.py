"""Raw Kueue and core manifests turned into domain objects, and every validation message (`daemon.manifests`).

Real: the parser, the validation, the YAML loader reading real files (a fixture from the seed and files written
to pytest's tmp_path). Faked: nothing; manifests are built as plain dicts by the small builders below, the same
shape the Kubernetes API and PyYAML hand over.
"""

from __future__ import annotations

import copy
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemon.domain.model import (
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LabelRequirement,
    LabelSelector,
    LocalQueue,
    Namespace,
    Preemption,
    PreemptionPolicy,
    PriorityClass,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    Taint,
    Toleration,
)
from daemon.manifests import ManifestError, Parsed, load_documents, parse_documents, parse_object

DATA = Path(__file__).parent / "data"
GI = 2**30

# --- builders -------------------------------------------------------------------------------------------------

Doc = dict[str, Any]


def flavor(name: str, quotas: dict[str, Any]) -> Doc:
    """A flavor's quotas: a scalar is the nominalQuota, a dict is the whole resource entry (without its name)."""
    resources = [{"name": r, **(q if isinstance(q, dict) else {"nominalQuota": q})} for r, q in quotas.items()]
    return {"name": name, "resources": resources}


def group(covered: list[str], *flavors: Doc) -> Doc:
    return {"coveredResources": covered, "flavors": list(flavors)}


def cluster_queue(name: str = "team-a", version: str = "v1beta2", **spec: Any) -> Doc:
    """A valid ClusterQueue: one group (cpu, memory) with flavors on-demand and spot; `spec` overrides fields."""
    base: Doc = {
        "namespaceSelector": {},
        "resourceGroups": [
            group(
                ["cpu", "memory"],
                flavor("on-demand", {"cpu": "8", "memory": "64Gi"}),
                flavor("spot", {"cpu": 4, "memory": "32Gi"}),
            )
        ],
    }
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {**base, **spec},
    }


def cohort(name: str = "pool", version: str = "v1beta2", **spec: Any) -> Doc:
    return {"apiVersion": f"kueue.x-k8s.io/{version}", "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def put(doc: Doc, path: str, value: Any) -> Doc:
    """A copy of `doc` with the field at a dotted path (``spec.resourceGroups[0].flavors[1].name``) set."""
    out = copy.deepcopy(doc)
    steps = [int(s) if s.isdigit() else s for s in re.findall(r"[^.\[\]]+", path)]
    node: Any = out
    for step in steps[:-1]:
        node = node[step]
    node[steps[-1]] = value
    return out


def drop(doc: Doc, path: str) -> Doc:
    out = copy.deepcopy(doc)
    steps = [int(s) if s.isdigit() else s for s in re.findall(r"[^.\[\]]+", path)]
    node: Any = out
    for step in steps[:-1]:
        node = node[step]
    del node[steps[-1]]
    return out


def errors(parsed: Parsed) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in parsed.errors]


# --- the seed ---------------------------------------------------------------------------------------------------


def test_seed_minimal_setup_is_accepted_with_a_borrowing_limit_warning() -> None:
    docs = load_documents(DATA / "seed_minimal_setup.yaml")

    assert [(p.kind, p.name, p.namespace, p.doc_index, p.line) for p in docs] == [
        ("ResourceFlavor", "h100-flavor", None, 0, 3),
        ("ClusterQueue", "team-research", None, 1, 11),
        ("LocalQueue", "research-queue", "research", 2, 26),
    ]
    assert all(p.errors == () for p in docs)
    assert docs[0].obj == ResourceFlavor(name="h100-flavor", node_labels={"gpu-type": "h100"})
    assert docs[1].obj == ClusterQueue(
        name="team-research",
        namespace_selector=LabelSelector(),
        resource_groups=(
            ResourceGroup(
                covered_resources=("nvidia.com/gpu",),
                flavors=(
                    FlavorQuotas(
                        name="h100-flavor",
                        resources=(ResourceQuota(name="nvidia.com/gpu", nominal=8000, borrowing_limit=4000),),
                    ),
                ),
            ),
        ),
    )
    assert docs[1].warnings == (
        "ClusterQueue team-research: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit "
        "has no effect until the ClusterQueue joins a cohort",
    )
    assert docs[2].obj == LocalQueue(namespace="research", name="research-queue", cluster_queue="team-research")
    assert docs[0].warnings == docs[2].warnings == ()


# --- ClusterQueue: a full valid object, both API versions --------------------------------------------------------


def test_cluster_queue_v1beta2_reads_every_field() -> None:
    doc = cluster_queue(
        cohortName="pool",
        queueingStrategy="StrictFIFO",
        namespaceSelector={
            "matchLabels": {"team": "a"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gold", "silver"]},
                {"key": "frozen", "operator": "DoesNotExist"},
            ],
        },
        preemption={
            "withinClusterQueue": "LowerOrNewerEqualPriority",
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
        },
        flavorFungibility={
            "whenCanBorrow": "TryNextFlavor",
            "whenCanPreempt": "TryNextFlavor",
            "preference": "PreemptionOverBorrowing",
        },
        stopPolicy="Hold",
        fairSharing={"weight": "2.5"},
    )
    doc = put(
        doc,
        "spec.resourceGroups[0].flavors[0].resources[0]",
        {"name": "cpu", "nominalQuota": "8", "borrowingLimit": "500m", "lendingLimit": 2},
    )

    parsed = parse_object(doc)

    assert parsed.errors == () and parsed.warnings == ()
    assert parsed.obj == ClusterQueue(
        name="team-a",
        cohort="pool",
        namespace_selector=LabelSelector(
            match_labels={"team": "a"},
            match_expressions=(
                LabelRequirement(key="tier", operator="In", values=("gold", "silver")),
                LabelRequirement(key="frozen", operator="DoesNotExist"),
            ),
        ),
        queueing_strategy=QueueingStrategy.STRICT_FIFO,
        resource_groups=(
            ResourceGroup(
                covered_resources=("cpu", "memory"),
                flavors=(
                    FlavorQuotas(
                        name="on-demand",
                        resources=(
                            ResourceQuota(name="cpu", nominal=8000, borrowing_limit=500, lending_limit=2000),
                            ResourceQuota(name="memory", nominal=64 * GI * 1000),
                        ),
                    ),
                    FlavorQuotas(
                        name="spot",
                        resources=(
                            ResourceQuota(name="cpu", nominal=4000),
                            ResourceQuota(name="memory", nominal=32 * GI * 1000),
                        ),
                    ),
                ),
            ),
        ),
        preemption=Preemption(
            within_cluster_queue=PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY,
            reclaim_within_cohort=PreemptionPolicy.ANY,
            borrow_within_cohort=PreemptionPolicy.LOWER_PRIORITY,
            borrow_max_priority_threshold=100,
        ),
        flavor_fungibility=FlavorFungibility(
            when_can_borrow=FungibilityPolicy.TRY_NEXT_FLAVOR,
            when_can_preempt=FungibilityPolicy.TRY_NEXT_FLAVOR,
            preference=FungibilityPreference.PREEMPTION_OVER_BORROWING,
        ),
        stop_policy=StopPolicy.HOLD,
        fair_sharing_weight=2500,
    )


def test_cluster_queue_defaults() -> None:
    doc = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "empty"}}

    parsed = parse_object(doc)

    assert parsed.errors == ()
    assert parsed.obj == ClusterQueue(name="empty")
    assert isinstance(parsed.obj, ClusterQueue)
    assert parsed.obj.namespace_selector is None
    assert parsed.obj.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
    assert parsed.obj.stop_policy is StopPolicy.NONE
    assert parsed.obj.fair_sharing_weight == 1000


@pytest.mark.parametrize(
    ("doc", "cohort_name", "errs"),
    [
        (cluster_queue(version="v1beta1", cohort="pool"), "pool", []),
        (cluster_queue(version="v1beta2", cohortName="pool"), "pool", []),
        (cluster_queue(version="v1beta2", cohortName=""), None, []),
        (
            cluster_queue(version="v1beta2", cohort="pool"),
            None,
            [("spec.cohort", "unknown field (kueue.x-k8s.io/v1beta2 renamed it to spec.cohortName)")],
        ),
        (
            cluster_queue(version="v1beta1", cohortName="pool"),
            None,
            [
                (
                    "spec.cohortName",
                    "unknown field (kueue.x-k8s.io/v1beta1 calls it spec.cohort; spec.cohortName is the v1beta2 name)",
                )
            ],
        ),
        (
            cluster_queue(cohortName="Pool_A"),
            None,
            [
                (
                    "spec.cohortName",
                    "invalid value 'Pool_A': must consist of lower case alphanumeric characters, '-' or '.', "
                    "and start and end alphanumerically",
                )
            ],
        ),
    ],
    ids=[
        "v1beta1 names the cohort spec.cohort",
        "v1beta2 names it spec.cohortName",
        "an empty cohortName means no cohort",
        "v1beta2 with the old name is an error that says the new one",
        "v1beta1 with the new name is an error that says the old one",
        "a cohort reference must be an object name",
    ],
)
def test_cohort_field_per_api_version(doc: Doc, cohort_name: str | None, errs: list[tuple[str, str]]) -> None:
    parsed = parse_object(doc)
    assert errors(parsed) == errs
    if not errs:
        assert isinstance(parsed.obj, ClusterQueue)
        assert parsed.obj.cohort == cohort_name
    else:
        assert parsed.obj is None


@pytest.mark.parametrize(
    ("version", "fungibility", "expected", "errs"),
    [
        (
            "v1beta1",
            {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"},
            FlavorFungibility(
                when_can_borrow=FungibilityPolicy.MAY_STOP_SEARCH, when_can_preempt=FungibilityPolicy.MAY_STOP_SEARCH
            ),
            [],
        ),
        (
            "v1beta1",
            {"whenCanBorrow": "TryNextFlavor"},
            FlavorFungibility(when_can_borrow=FungibilityPolicy.TRY_NEXT_FLAVOR),
            [],
        ),
        (
            "v1beta2",
            {"whenCanBorrow": "Borrow"},
            None,
            [
                (
                    "spec.flavorFungibility.whenCanBorrow",
                    "unsupported value 'Borrow' (allowed: MayStopSearch, TryNextFlavor)",
                )
            ],
        ),
        (
            "v1beta1",
            {"whenCanBorrow": "Preempt"},
            None,
            [
                (
                    "spec.flavorFungibility.whenCanBorrow",
                    "unsupported value 'Preempt' (allowed: MayStopSearch, TryNextFlavor, Borrow)",
                )
            ],
        ),
        (
            "v1beta2",
            {"preference": "BorrowingOverPreemption"},
            None,
            [
                (
                    "spec.flavorFungibility.preference",
                    "can only be set when whenCanBorrow and whenCanPreempt are both TryNextFlavor "
                    "(got whenCanBorrow=MayStopSearch, whenCanPreempt=TryNextFlavor)",
                )
            ],
        ),
        (
            "v1beta1",
            {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor", "preference": "BorrowingOverPreemption"},
            None,
            [
                (
                    "spec.flavorFungibility.preference",
                    "can only be set when whenCanBorrow and whenCanPreempt are both TryNextFlavor "
                    "(got whenCanBorrow=Borrow, whenCanPreempt=TryNextFlavor)",
                )
            ],
        ),
    ],
    ids=[
        "v1beta1 legacy Borrow and Preempt both read as MayStopSearch",
        "TryNextFlavor stays TryNextFlavor",
        "v1beta2 no longer knows Borrow",
        "Preempt is a whenCanPreempt value only",
        "preference needs both policies at TryNextFlavor (defaults are not)",
        "a legacy value is reported as written",
    ],
)
def test_flavor_fungibility(
    version: str, fungibility: Doc, expected: FlavorFungibility | None, errs: list[tuple[str, str]]
) -> None:
    parsed = parse_object(cluster_queue(version=version, flavorFungibility=fungibility))
    assert errors(parsed) == errs
    if expected is not None:
        assert isinstance(parsed.obj, ClusterQueue)
        assert parsed.obj.flavor_fungibility == expected


@pytest.mark.parametrize(
    ("weight", "milli"),
    [("2", 2000), (0.5, 500), ("0", 0), ("1.5n", 1), (3, 3000)],
    ids=[
        "a whole weight",
        "a fractional weight from a YAML float",
        "weight 0: an infinite share whenever the queue borrows",
        "a tiny weight above 1n is held as one milli",
        "a YAML integer",
    ],
)
def test_fair_sharing_weight(weight: object, milli: int) -> None:
    parsed = parse_object(cluster_queue(fairSharing={"weight": weight}))
    assert parsed.errors == ()
    assert isinstance(parsed.obj, ClusterQueue)
    assert parsed.obj.fair_sharing_weight == milli


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (None, None),
        ({}, LabelSelector()),
        (
            {"matchLabels": {"kubernetes.io/metadata.name": "research"}},
            LabelSelector(match_labels={"kubernetes.io/metadata.name": "research"}),
        ),
        (
            {
                "matchExpressions": [
                    {"key": "team", "operator": "NotIn", "values": ["ops"]},
                    {"key": "gpu", "operator": "Exists"},
                ]
            },
            LabelSelector(
                match_expressions=(
                    LabelRequirement(key="team", operator="NotIn", values=("ops",)),
                    LabelRequirement(key="gpu", operator="Exists"),
                )
            ),
        ),
    ],
    ids=[
        "null selects no namespace",
        "the empty selector selects every namespace",
        "matchLabels",
        "NotIn and Exists expressions",
    ],
)
def test_namespace_selector(selector: Doc | None, expected: LabelSelector | None) -> None:
    parsed = parse_object(cluster_queue(namespaceSelector=selector))
    assert parsed.errors == ()
    assert isinstance(parsed.obj, ClusterQueue)
    assert parsed.obj.namespace_selector == expected


def test_absent_namespace_selector_selects_nothing() -> None:
    parsed = parse_object(drop(cluster_queue(), "spec.namespaceSelector"))
    assert isinstance(parsed.obj, ClusterQueue)
    assert parsed.obj.namespace_selector is None


# --- ClusterQueue: every validation error ---------------------------------------------------------------------

RG0 = "spec.resourceGroups[0]"
F0R0 = f"{RG0}.flavors[0].resources[0]"
WITH_COHORT = cluster_queue(cohortName="pool")
TWO_GROUPS = cluster_queue(
    resourceGroups=[
        group(["cpu", "memory"], flavor("on-demand", {"cpu": 8, "memory": "64Gi"})),
        group(["nvidia.com/gpu"], flavor("a100", {"nvidia.com/gpu": 8})),
    ]
)

CQ_ERROR_CASES: list[tuple[str, Doc, list[tuple[str, str]]]] = [
    (
        "negative nominalQuota",
        put(cluster_queue(), f"{RG0}.flavors[1].resources[0].nominalQuota", -1),
        [(f"{RG0}.flavors[1].resources[0].nominalQuota", "must not be negative (got -1)")],
    ),
    (
        "negative borrowingLimit",
        put(WITH_COHORT, f"{F0R0}.borrowingLimit", "-2"),
        [(f"{F0R0}.borrowingLimit", "must not be negative (got -2)")],
    ),
    (
        "negative lendingLimit",
        put(WITH_COHORT, f"{F0R0}.lendingLimit", "-500m"),
        [(f"{F0R0}.lendingLimit", "must not be negative (got -500m)")],
    ),
    (
        "lendingLimit above nominalQuota",
        put(WITH_COHORT, f"{F0R0}.lendingLimit", "9"),
        [(f"{F0R0}.lendingLimit", "must be less than or equal to nominalQuota (got 9, nominalQuota 8)")],
    ),
    (
        "missing nominalQuota",
        drop(cluster_queue(), f"{F0R0}.nominalQuota"),
        [(f"{F0R0}.nominalQuota", "required")],
    ),
    (
        "nominalQuota that is no quantity",
        put(cluster_queue(), f"{F0R0}.nominalQuota", "lots"),
        [
            (
                f"{F0R0}.nominalQuota",
                "invalid quantity 'lots': expected a number with an optional suffix, "
                "e.g. 500m, 2, 64Gi, 1.5e3 (suffixes n u m k M G T P E Ki Mi Gi Ti Pi Ei)",
            )
        ],
    ),
    (
        "misspelt borrowingLimit",
        put(WITH_COHORT, f"{F0R0}.borowingLimit", "4"),
        [(f"{F0R0}.borowingLimit", "unknown field (known fields: borrowingLimit, lendingLimit, name, nominalQuota)")],
    ),
    (
        "a flavor twice in one group",
        put(cluster_queue(), f"{RG0}.flavors[1].name", "on-demand"),
        [
            (
                f"{RG0}.flavors[1].name",
                f"flavor 'on-demand' is already listed at {RG0}.flavors[0].name; a flavor appears once, in one group",
            )
        ],
    ),
    (
        "a flavor in two groups",
        put(TWO_GROUPS, "spec.resourceGroups[1].flavors[0].name", "on-demand"),
        [
            (
                "spec.resourceGroups[1].flavors[0].name",
                f"flavor 'on-demand' is already listed at {RG0}.flavors[0].name; a flavor appears once, in one group",
            )
        ],
    ),
    (
        "a resource in two groups",
        put(
            put(TWO_GROUPS, "spec.resourceGroups[1].coveredResources", ["cpu"]),
            "spec.resourceGroups[1].flavors[0].resources[0].name",
            "cpu",
        ),
        [
            (
                "spec.resourceGroups[1].coveredResources[0]",
                f"resource 'cpu' is already covered at {RG0}.coveredResources[0]; a resource belongs to one group only",
            )
        ],
    ),
    (
        "a flavor missing a covered resource",
        put(cluster_queue(), f"{RG0}.flavors[0]", flavor("on-demand", {"cpu": 8})),
        [
            (
                f"{RG0}.flavors[0].resources",
                "must list one entry per covered resource (cpu, memory), in that order (got 1, want 2)",
            )
        ],
    ),
    (
        "a flavor with a resource the group does not cover",
        put(
            cluster_queue(), f"{RG0}.flavors[0]", flavor("on-demand", {"cpu": 8, "memory": "1Gi", "nvidia.com/gpu": 1})
        ),
        [
            (
                f"{RG0}.flavors[0].resources",
                "must list one entry per covered resource (cpu, memory), in that order (got 3, want 2)",
            )
        ],
    ),
    (
        "a flavor listing the covered resources in another order",
        put(cluster_queue(), f"{RG0}.flavors[0]", flavor("on-demand", {"memory": "1Gi", "cpu": 8})),
        [
            (
                f"{RG0}.flavors[0].resources[0].name",
                "must match coveredResources[0] ('cpu'), got 'memory'; list resources in the order of coveredResources",
            ),
            (
                f"{RG0}.flavors[0].resources[1].name",
                "must match coveredResources[1] ('memory'), got 'cpu'; list resources in the order of coveredResources",
            ),
        ],
    ),
    (
        "more than 16 resource groups",
        cluster_queue(
            resourceGroups=[group([f"example.com/r{i}"], flavor(f"f{i}", {f"example.com/r{i}": 1})) for i in range(17)]
        ),
        [("spec.resourceGroups", "must have at most 16 items (got 17)")],
    ),
    (
        "more than 64 flavors in a group",
        cluster_queue(resourceGroups=[group(["cpu"], *[flavor(f"f{i}", {"cpu": 1}) for i in range(65)])]),
        [(f"{RG0}.flavors", "must have at most 64 items (got 65)")],
    ),
    (
        "a group without flavors",
        cluster_queue(resourceGroups=[{"coveredResources": ["cpu"], "flavors": []}]),
        [(f"{RG0}.flavors", "must have at least 1 item (got 0)")],
    ),
    (
        "coveredResources written as a string",
        put(cluster_queue(), f"{RG0}.coveredResources", "cpu"),
        [(f"{RG0}.coveredResources", "expected a list, got a string ('cpu')")],
    ),
    (
        "resourceGroups written as an object",
        cluster_queue(resourceGroups={"cpu": 8}),
        [("spec.resourceGroups", "expected a list, got an object")],
    ),
    (
        "unknown queueingStrategy",
        cluster_queue(queueingStrategy="FIFO"),
        [("spec.queueingStrategy", "unsupported value 'FIFO' (allowed: BestEffortFIFO, StrictFIFO)")],
    ),
    (
        "unknown stopPolicy",
        cluster_queue(stopPolicy="Pause"),
        [("spec.stopPolicy", "unsupported value 'Pause' (allowed: None, Hold, HoldAndDrain)")],
    ),
    (
        "withinClusterQueue does not take Any",
        cluster_queue(preemption={"withinClusterQueue": "Any"}),
        [
            (
                "spec.preemption.withinClusterQueue",
                "unsupported value 'Any' (allowed: Never, LowerPriority, LowerOrNewerEqualPriority)",
            )
        ],
    ),
    (
        "reclaimWithinCohort does not take LowerOrNewerEqualPriority",
        cluster_queue(preemption={"reclaimWithinCohort": "LowerOrNewerEqualPriority"}),
        [
            (
                "spec.preemption.reclaimWithinCohort",
                "unsupported value 'LowerOrNewerEqualPriority' (allowed: Never, LowerPriority, Any)",
            )
        ],
    ),
    (
        "borrowWithinCohort preempting while reclaimWithinCohort is Never",
        cluster_queue(preemption={"borrowWithinCohort": {"policy": "LowerPriority"}}),
        [
            (
                "spec.preemption.borrowWithinCohort.policy",
                "must be Never while reclaimWithinCohort is Never (got LowerPriority); "
                "set reclaimWithinCohort to LowerPriority or Any to preempt while borrowing",
            )
        ],
    ),
    (
        "maxPriorityThreshold beyond int32",
        cluster_queue(
            preemption={
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 2**31},
            }
        ),
        [("spec.preemption.borrowWithinCohort.maxPriorityThreshold", "must be at most 2147483647 (got 2147483648)")],
    ),
    (
        "negative fair-sharing weight",
        cluster_queue(fairSharing={"weight": "-1"}),
        [("spec.fairSharing.weight", "must not be negative (got -1)")],
    ),
    (
        "a fair-sharing weight that collapses to zero",
        cluster_queue(fairSharing={"weight": "0.5n"}),
        [("spec.fairSharing.weight", "when not 0, must be greater than 1n (got 0.5n)")],
    ),
    (
        "a set-based selector expression without values",
        cluster_queue(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "In"}]}),
        [("spec.namespaceSelector.matchExpressions[0].values", "must be specified when operator is In")],
    ),
    (
        "an existence selector expression with values",
        cluster_queue(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]}),
        [("spec.namespaceSelector.matchExpressions[0].values", "may not be specified when operator is Exists")],
    ),
    (
        "an unknown selector operator",
        cluster_queue(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "Equals", "values": ["a"]}]}),
        [
            (
                "spec.namespaceSelector.matchExpressions[0].operator",
                "unsupported value 'Equals' (allowed: In, NotIn, Exists, DoesNotExist)",
            )
        ],
    ),
    (
        "an empty selector operator",
        cluster_queue(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "", "values": ["a"]}]}),
        [
            (
                "spec.namespaceSelector.matchExpressions[0].operator",
                "required (allowed: In, NotIn, Exists, DoesNotExist)",
            )
        ],
    ),
    (
        "a YAML number where a label value belongs",
        cluster_queue(namespaceSelector={"matchLabels": {"tier": 1}}),
        [("spec.namespaceSelector.matchLabels[tier]", "expected a string, got a number (1)")],
    ),
    (
        "a flavor name that is no object name",
        put(cluster_queue(), f"{RG0}.flavors[1].name", "Spot"),
        [
            (
                f"{RG0}.flavors[1].name",
                "invalid value 'Spot': must consist of lower case alphanumeric characters, '-' or '.', "
                "and start and end alphanumerically",
            )
        ],
    ),
    (
        "an unknown spec field",
        cluster_queue(cohortname="pool"),
        [
            (
                "spec.cohortname",
                "unknown field (known fields: admissionChecksStrategy, admissionScope, cohortName, "
                "concurrentAdmissionPolicy, fairSharing, flavorFungibility, namespaceSelector, preemption, "
                "queueingStrategy, resourceGroups, stopPolicy)",
            )
        ],
    ),
]


@pytest.mark.parametrize(("doc", "errs"), [c[1:] for c in CQ_ERROR_CASES], ids=[c[0] for c in CQ_ERROR_CASES])
def test_cluster_queue_validation_errors(doc: Doc, errs: list[tuple[str, str]]) -> None:
    parsed = parse_object(doc)
    assert errors(parsed) == errs
    assert parsed.obj is None
    assert all(e.kind == "ClusterQueue" and e.name == "team-a" and e.namespace is None for e in parsed.errors)


def test_error_prints_as_one_line_with_object_and_field() -> None:
    parsed = parse_object(put(cluster_queue(), f"{RG0}.flavors[1].resources[0].nominalQuota", -1))
    assert [str(e) for e in parsed.errors] == [
        "ClusterQueue team-a: spec.resourceGroups[0].flavors[1].resources[0].nominalQuota: "
        "must not be negative (got -1)"
    ]


def test_several_errors_are_all_reported() -> None:
    doc = put(put(cluster_queue(queueingStrategy="FIFO"), f"{F0R0}.nominalQuota", "-1"), "spec.stopPolicy", "Pause")
    assert [f for f, _ in errors(parse_object(doc))] == [
        f"{F0R0}.nominalQuota",
        "spec.queueingStrategy",
        "spec.stopPolicy",
    ]


@pytest.mark.parametrize(
    ("doc", "warnings"),
    [
        (
            put(cluster_queue(), f"{F0R0}.lendingLimit", "2"),
            (f"ClusterQueue team-a: {F0R0}.lendingLimit has no effect until the ClusterQueue joins a cohort",),
        ),
        (put(put(WITH_COHORT, f"{F0R0}.lendingLimit", "2"), f"{F0R0}.borrowingLimit", "2"), ()),
        (
            cluster_queue(admissionChecksStrategy={"admissionChecks": [{"name": "prov"}]}),
            ("ClusterQueue team-a: spec.admissionChecksStrategy is not implemented by admitd and is ignored",),
        ),
        (
            {**cluster_queue(), "metadata": {"name": "team-a", "namespace": "research"}},
            ("ClusterQueue team-a: metadata.namespace is ignored: ClusterQueue is cluster-scoped",),
        ),
    ],
    ids=[
        "lendingLimit without a cohort: accepted, with a warning",
        "limits with a cohort: no warning",
        "admission checks are read but not implemented",
        "a namespace on a cluster-scoped object is dropped",
    ],
)
def test_cluster_queue_warnings(doc: Doc, warnings: tuple[str, ...]) -> None:
    parsed = parse_object(doc)
    assert parsed.errors == ()
    assert parsed.warnings == warnings
    assert parsed.obj is not None
    assert parsed.namespace is None


# --- ResourceFlavor ---------------------------------------------------------------------------------------------


def resource_flavor(name: str = "a100", version: str = "v1beta2", **spec: Any) -> Doc:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_resource_flavor_reads_labels_taints_tolerations() -> None:
    doc = resource_flavor(
        nodeLabels={"cloud.example.com/gpu": "a100", "pool": "batch"},
        nodeTaints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}, {"key": "spot", "effect": "NoExecute"}],
        tolerations=[
            {"key": "maintenance", "operator": "Exists"},
            {"key": "zone", "value": "b", "effect": "PreferNoSchedule"},
        ],
    )

    parsed = parse_object(doc)

    assert parsed.errors == ()
    assert parsed.obj == ResourceFlavor(
        name="a100",
        node_labels={"cloud.example.com/gpu": "a100", "pool": "batch"},
        node_taints=(Taint(key="gpu", value="true", effect="NoSchedule"), Taint(key="spot", effect="NoExecute")),
        tolerations=(
            Toleration(key="maintenance", operator="Exists"),
            Toleration(key="zone", operator="Equal", value="b", effect="PreferNoSchedule"),
        ),
    )


RF_ERROR_CASES: list[tuple[str, Doc, list[tuple[str, str]]]] = [
    (
        "nine node labels",
        resource_flavor(nodeLabels={f"l{i}": "x" for i in range(9)}),
        [("spec.nodeLabels", "must have at most 8 entries (got 9)")],
    ),
    (
        "a taint effect Kubernetes does not know",
        resource_flavor(nodeTaints=[{"key": "gpu", "effect": "NoRun"}]),
        [("spec.nodeTaints[0].effect", "unsupported value 'NoRun' (allowed: NoSchedule, PreferNoSchedule, NoExecute)")],
    ),
    (
        "a taint without effect",
        resource_flavor(nodeTaints=[{"key": "gpu"}]),
        [("spec.nodeTaints[0].effect", "required (allowed: NoSchedule, PreferNoSchedule, NoExecute)")],
    ),
    (
        "the same taint twice",
        resource_flavor(
            nodeTaints=[{"key": "gpu", "effect": "NoSchedule"}, {"key": "gpu", "value": "x", "effect": "NoSchedule"}]
        ),
        [
            (
                "spec.nodeTaints[1]",
                "duplicate taint gpu:NoSchedule (already at spec.nodeTaints[0]); "
                "taints must be unique by key and effect",
            )
        ],
    ),
    (
        "a toleration with an empty key must be Exists",
        resource_flavor(tolerations=[{"operator": "Equal", "value": "x"}]),
        [("spec.tolerations[0].operator", "must be Exists when key is empty (got Equal)")],
    ),
    (
        "an Exists toleration with a value",
        resource_flavor(tolerations=[{"key": "gpu", "operator": "Exists", "value": "x"}]),
        [("spec.tolerations[0].value", "must be empty when operator is Exists (got 'x')")],
    ),
    (
        "tolerationSeconds outside NoExecute",
        resource_flavor(
            tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}]
        ),
        [("spec.tolerations[0].effect", "must be NoExecute when tolerationSeconds is set (got NoSchedule)")],
    ),
    (
        "a label key that is no qualified name",
        resource_flavor(nodeLabels={"gpu type": "a100"}),
        [
            (
                "spec.nodeLabels[gpu type]",
                "invalid key 'gpu type': name part must consist of alphanumeric characters, '-', '_' or '.', "
                "and start and end alphanumerically",
            )
        ],
    ),
]


@pytest.mark.parametrize(("doc", "errs"), [c[1:] for c in RF_ERROR_CASES], ids=[c[0] for c in RF_ERROR_CASES])
def test_resource_flavor_validation_errors(doc: Doc, errs: list[tuple[str, str]]) -> None:
    parsed = parse_object(doc)
    assert errors(parsed) == errs
    assert parsed.obj is None


# --- Cohort -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"], ids=["v1beta1 uses parentName", "v1beta2 uses parentName"])
def test_cohort_reads_parent_groups_and_weight(version: str) -> None:
    doc = cohort(
        version=version,
        parentName="org",
        resourceGroups=[group(["cpu"], flavor("on-demand", {"cpu": {"nominalQuota": "10", "lendingLimit": "20"}}))],
        fairSharing={"weight": "3"},
    )

    parsed = parse_object(doc)

    # A Cohort's lendingLimit may exceed its own nominalQuota: the Cohort webhook does not compare them.
    assert parsed.errors == () and parsed.warnings == ()
    assert parsed.obj == Cohort(
        name="pool",
        parent="org",
        resource_groups=(
            ResourceGroup(
                covered_resources=("cpu",),
                flavors=(
                    FlavorQuotas(
                        name="on-demand", resources=(ResourceQuota(name="cpu", nominal=10_000, lending_limit=20_000),)
                    ),
                ),
            ),
        ),
        fair_sharing_weight=3000,
    )


@pytest.mark.parametrize(
    ("doc", "errs", "warnings"),
    [
        (
            cohort(parent="org"),
            [("spec.parent", "unknown field (v1beta1 and v1beta2 call it spec.parentName (spec.parent was v1alpha1))")],
            (),
        ),
        (cohort(parentName="pool"), [("spec.parentName", "a Cohort cannot be its own parent (got 'pool')")], ()),
        (
            cohort(resourceGroups=[group(["cpu"], flavor("on-demand", {"cpu": "-4"}))]),
            [("spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "must not be negative (got -4)")],
            (),
        ),
        (
            cohort(
                resourceGroups=[group(["cpu"], flavor("on-demand", {"cpu": {"nominalQuota": 4, "borrowingLimit": 1}}))]
            ),
            [],
            (
                "Cohort pool: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit "
                "has no effect until the Cohort has a parent (spec.parentName)",
            ),
        ),
    ],
    ids=[
        "the v1alpha1 field name is an error that says the current one",
        "a cohort that is its own parent",
        "resource groups are validated as a ClusterQueue's",
        "a limit on a root cohort: accepted, with a warning",
    ],
)
def test_cohort_validation(doc: Doc, errs: list[tuple[str, str]], warnings: tuple[str, ...]) -> None:
    parsed = parse_object(doc)
    assert errors(parsed) == errs
    assert parsed.warnings == warnings
    assert (parsed.obj is None) == bool(errs)


# --- LocalQueue, priority classes, Namespace ------------------------------------------------------------------


def local_queue(namespace: str | None = "research", **spec: Any) -> Doc:
    meta: Doc = {"name": "research-queue"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("doc", "obj", "errs"),
    [
        (
            local_queue(clusterQueue="team-a", stopPolicy="HoldAndDrain"),
            LocalQueue(
                namespace="research",
                name="research-queue",
                cluster_queue="team-a",
                stop_policy=StopPolicy.HOLD_AND_DRAIN,
            ),
            [],
        ),
        (
            local_queue(namespace=None, clusterQueue="team-a"),
            None,
            [("metadata.namespace", "required: LocalQueue is namespaced")],
        ),
        (local_queue(), None, [("spec.clusterQueue", "required")]),
        (local_queue(clusterQueue=""), None, [("spec.clusterQueue", "required (must not be empty)")]),
        (
            local_queue(clusterQueue="team-a", stopPolicy="Stop"),
            None,
            [("spec.stopPolicy", "unsupported value 'Stop' (allowed: None, Hold, HoldAndDrain)")],
        ),
    ],
    ids=[
        "a LocalQueue with a stop policy",
        "a LocalQueue needs a namespace",
        "a LocalQueue needs a ClusterQueue",
        "an empty ClusterQueue name is missing too",
        "unknown stop policy",
    ],
)
def test_local_queue(doc: Doc, obj: LocalQueue | None, errs: list[tuple[str, str]]) -> None:
    parsed = parse_object(doc)
    assert errors(parsed) == errs
    assert parsed.obj == obj


def test_missing_namespace_message() -> None:
    parsed = parse_object(local_queue(namespace=None, clusterQueue="team-a"))
    assert [str(e) for e in parsed.errors] == [
        "LocalQueue research-queue: metadata.namespace: required: LocalQueue is namespaced"
    ]


@pytest.mark.parametrize(
    ("doc", "obj", "errs"),
    [
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": "high"},
                "value": 1000,
                "description": "urgent",
            },
            PriorityClass(name="high", value=1000, kind="WorkloadPriorityClass"),
            [],
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": "low"},
                "value": -5,
            },
            PriorityClass(name="low", value=-5, kind="WorkloadPriorityClass"),
            [],
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": "huge"},
                "value": 2**31,
            },
            None,
            [("value", "must be at most 2147483647 (got 2147483648)")],
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": "quoted"},
                "value": "100",
            },
            None,
            [("value", "expected an integer, got a string ('100')")],
        ),
        (
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "none"}},
            None,
            [("value", "required")],
        ),
        (
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "batch-default"},
                "value": 100,
                "globalDefault": True,
                "preemptionPolicy": "Never",
            },
            PriorityClass(name="batch-default", value=100, kind="PriorityClass", global_default=True),
            [],
        ),
        (
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "too-high"},
                "value": 1_000_000_001,
            },
            None,
            [("value", "must be at most 1000000000 (got 1000000001); higher values are reserved for system-* classes")],
        ),
        (
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "system-node-critical"},
                "value": 2_000_001_000,
            },
            PriorityClass(name="system-node-critical", value=2_000_001_000, kind="PriorityClass"),
            [],
        ),
        (
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "x"},
                "value": 1,
                "globalDefault": "yes",
            },
            None,
            [("globalDefault", "expected true or false, got a string ('yes')")],
        ),
    ],
    ids=[
        "WorkloadPriorityClass v1beta1, description ignored",
        "WorkloadPriorityClass v1beta2, negative value",
        "a value beyond int32",
        "a quoted value is not an integer",
        "a value is required",
        "core PriorityClass with globalDefault",
        "core PriorityClass above the user-definable ceiling",
        "system-* classes may go higher",
        "globalDefault must be a boolean",
    ],
)
def test_priority_classes(doc: Doc, obj: PriorityClass | None, errs: list[tuple[str, str]]) -> None:
    parsed = parse_object(doc)
    assert errors(parsed) == errs
    assert parsed.obj == obj


@pytest.mark.parametrize(
    ("doc", "obj", "errs"),
    [
        (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research", "labels": {"team": "ml"}}},
            Namespace(name="research", labels={"team": "ml"}),
            [],
        ),
        ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bare"}}, Namespace(name="bare"), []),
        (
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}},
            None,
            [
                (
                    "metadata.name",
                    "invalid value 'a.b': must consist of lower case alphanumeric characters or '-', "
                    "and start and end alphanumerically",
                )
            ],
        ),
    ],
    ids=["a Namespace with labels", "a Namespace without labels", "a namespace name is a DNS label, no dots"],
)
def test_namespace(doc: Doc, obj: Namespace | None, errs: list[tuple[str, str]]) -> None:
    parsed = parse_object(doc)
    assert errors(parsed) == errs
    assert parsed.obj == obj


# --- documents that are not objects we read ---------------------------------------------------------------------


def test_batch_job_is_kept_raw_for_its_adapter() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "labels": {"kueue.x-k8s.io/queue-name": "research-queue"}},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}}},
    }
    parsed = parse_object(job, 4)
    assert (parsed.obj, parsed.raw_job, parsed.errors) == (None, job, ())
    assert (parsed.kind, parsed.name, parsed.namespace, parsed.doc_index) == ("Job", "train", "default", 4)


def test_a_bad_job_is_reported_at_parse_time() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "x"}}}]}}},
    }
    parsed = parse_object(job)
    assert parsed.raw_job is None
    assert [e.field for e in parsed.errors] == ["spec.template.spec.containers[0].resources.requests[cpu]"]


@pytest.mark.parametrize(
    ("doc", "kind", "errs"),
    [
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
            "Deployment",
            [
                (
                    "kind",
                    "unsupported kind 'Deployment' in apps/v1 (supported: "
                    "ResourceFlavor (kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2); "
                    "ClusterQueue (kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2); "
                    "Cohort (kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2); "
                    "LocalQueue (kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2); "
                    "WorkloadPriorityClass (kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2); "
                    "PriorityClass (scheduling.k8s.io/v1); Namespace (v1); Job (batch/v1); "
                    "PyTorchJob (kubeflow.org/v1); RayJob (ray.io/v1); JobSet (jobset.x-k8s.io/v1alpha2))",
                )
            ],
        ),
        (
            {"apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "Cohort", "metadata": {"name": "old"}},
            "Cohort",
            [
                (
                    "apiVersion",
                    "unsupported apiVersion 'kueue.x-k8s.io/v1alpha1' for Cohort "
                    "(supported: kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2)",
                )
            ],
        ),
        (
            {"kind": "ClusterQueue", "metadata": {"name": "x"}},
            "ClusterQueue",
            [("apiVersion", "required")],
        ),
        (
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {}},
            "ClusterQueue",
            [("metadata.name", "required")],
        ),
        (
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "x"}, "sepc": {}},
            "ClusterQueue",
            [("sepc", "unknown field (known fields: apiVersion, kind, metadata, spec, status)")],
        ),
    ],
    ids=[
        "an unsupported kind lists what is supported",
        "a known kind in an unsupported version lists the versions",
        "apiVersion is required",
        "metadata.name is required",
        "a misspelt top-level field",
    ],
)
def test_unsupported_or_incomplete_documents(doc: Doc, kind: str, errs: list[tuple[str, str]]) -> None:
    parsed = parse_object(doc)
    assert errors(parsed) == errs
    assert parsed.obj is None and parsed.raw_job is None
    assert parsed.kind == kind


def test_missing_name_is_named_by_document_index() -> None:
    parsed = parse_object({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {}}, 3)
    assert [str(e) for e in parsed.errors] == ["ClusterQueue (document 3): metadata.name: required"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (["a", "b"], "document 2: expected an object with apiVersion, kind and metadata, got a list"),
        ("hello", "document 2: expected an object with apiVersion, kind and metadata, got a string ('hello')"),
        (42, "document 2: expected an object with apiVersion, kind and metadata, got a number (42)"),
    ],
    ids=["a list", "a bare string", "a number"],
)
def test_non_mapping_document_names_its_index(doc: object, message: str) -> None:
    parsed = parse_object(doc, 2)
    assert [str(e) for e in parsed.errors] == [message]
    assert parsed.errors[0].document == 2


# --- files ------------------------------------------------------------------------------------------------------


def test_load_documents_returns_every_document_despite_errors(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(
        """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
---
---
# only a comment
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: broken}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: -1}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
""",
        encoding="utf-8",
    )

    docs = load_documents(path)

    assert [(p.doc_index, p.line, p.kind, p.name, p.ok) for p in docs] == [
        (0, 1, "Deployment", "web", False),
        (3, 8, "ClusterQueue", "broken", False),
        (4, 18, "ResourceFlavor", "default", True),
    ]
    assert docs[1].errors[0].field == "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert docs[2].obj == ResourceFlavor(name="default")
    assert {p.source for p in docs} == {str(path)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n   labels: {}\n",
            # libyaml and PyYAML's pure-Python scanner word this one differently
            "invalid YAML: mapping values are not allowed " + ("in this context" if yaml.__with_libyaml__ else "here"),
        ),
        (
            "kind: Namespace\n---\nmetadata: [unclosed\n",
            "invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence)",
        ),
        (
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  name: b\n",
            "invalid YAML: found duplicate key 'name' (first at line 4) (while constructing a mapping)",
        ),
    ],
    ids=["bad indentation", "an unclosed flow list in a later document", "a key given twice"],
)
def test_broken_yaml_raises_naming_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text, encoding="utf-8")

    with pytest.raises(ManifestError) as e:
        load_documents(path)

    assert e.value.message == message
    assert e.value.source == str(path)
    assert e.value.line is not None
    assert str(e.value) == f"{path}:{e.value.line}: {message}"


def test_broken_yaml_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  name: b\n", encoding="utf-8")
    with pytest.raises(ManifestError) as e:
        load_documents(path)
    assert e.value.line == 5


def test_missing_file_raises_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ManifestError) as e:
        load_documents(path)
    assert str(e.value) == f"{path}: cannot read: No such file or directory"


def test_parse_documents_reads_text() -> None:
    docs = parse_documents("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n", source="stdin")
    assert [(p.obj, p.source, p.line) for p in docs] == [(Namespace(name="a"), "stdin", 1)]


def test_yaml_merge_keys_may_be_overridden_without_a_duplicate_key_error() -> None:
    text = """\
apiVersion: v1
kind: Namespace
metadata:
  name: a
  labels:
    <<: &common {team: ml, tier: gold}
    tier: silver
"""
    docs = parse_documents(text)
    assert [p.obj for p in docs] == [Namespace(name="a", labels={"team": "ml", "tier": "silver"})]


def test_manifest_error_keeps_its_fields_through_pickle() -> None:
    error = ManifestError(
        "must not be negative (got -1)", kind="ClusterQueue", name="team-a", field="spec.x", document=1
    )
    copy_ = pickle.loads(pickle.dumps(error))
    assert copy_ == error
    assert (copy_.kind, copy_.name, copy_.field, copy_.message) == (
        "ClusterQueue",
        "team-a",
        "spec.x",
        "must not be negative (got -1)",
    )
    assert str(copy_) == "ClusterQueue team-a: spec.x: must not be negative (got -1)"
