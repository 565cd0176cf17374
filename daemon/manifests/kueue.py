"""Kueue's objects (kueue.x-k8s.io v1beta1 and v1beta2) turned into domain values, with the checks of Kueue's CRD
schemas and webhooks (`apis/kueue/v1beta2/*_types.go`, `pkg/webhooks/{clusterqueue,cohort,common}_webhook.go`).

One deliberate difference: a borrowingLimit or lendingLimit without a cohort (or parent) is a warning, not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from daemon.domain.model import (
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LocalQueue,
    Milli,
    Preemption,
    PreemptionPolicy,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
)
from daemon.domain.quantity import ceil_milli
from daemon.manifests.core import read_label_selector, read_taints, read_tolerations
from daemon.manifests.fields import (
    INT32_MAX,
    INT32_MIN,
    Reader,
    at,
    dns_subdomain,
    index,
    label_value,
    qualified_name,
)

__all__ = [
    "KUEUE_GROUP",
    "KUEUE_VERSIONS",
    "parse_cluster_queue",
    "parse_cohort",
    "parse_local_queue",
    "parse_resource_flavor",
]

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta1", "v1beta2")

# Limits from the CRD schemas (+kubebuilder:validation:MaxItems) and the ClusterQueue webhook.
MAX_RESOURCE_GROUPS = 16
MAX_COVERED_RESOURCES = 64  # per group
MAX_FLAVORS = 64  # per group
MAX_RESOURCES = 64  # per flavor
MAX_TOTAL_FLAVORS = 256  # validateTotalFlavors
MAX_TOTAL_COVERED_RESOURCES = 256  # validateTotalCoveredResources
MAX_FLAVOR_RESOURCES_PER_GROUP = 512  # validateFlavorResourceCombinations
MAX_NODE_LABELS = 8
MAX_NODE_TAINTS = 8
MAX_TOLERATIONS = 8

_ONE_NANO = Fraction(1, 10**9)
_NOT_IMPLEMENTED = "is not implemented by admitd and is ignored"

_QUEUEING = {s.value: s for s in QueueingStrategy}
_STOP = {s.value: s for s in StopPolicy}
_WITHIN_CQ = {
    p.value: p
    for p in (PreemptionPolicy.NEVER, PreemptionPolicy.LOWER_PRIORITY, PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY)
}
_RECLAIM = {p.value: p for p in (PreemptionPolicy.NEVER, PreemptionPolicy.LOWER_PRIORITY, PreemptionPolicy.ANY)}
_BORROW_WITHIN_COHORT = {p.value: p for p in (PreemptionPolicy.NEVER, PreemptionPolicy.LOWER_PRIORITY)}
_FUNGIBILITY = {p.value: p for p in FungibilityPolicy}
# v1beta1 still accepts the pre-0.11 names; its conversion webhook maps both to MayStopSearch
# (apis/kueue/v1beta1/clusterqueue_conversion.go).
_WHEN_CAN_BORROW = {"v1beta1": {**_FUNGIBILITY, "Borrow": FungibilityPolicy.MAY_STOP_SEARCH}, "v1beta2": _FUNGIBILITY}
_WHEN_CAN_PREEMPT = {"v1beta1": {**_FUNGIBILITY, "Preempt": FungibilityPolicy.MAY_STOP_SEARCH}, "v1beta2": _FUNGIBILITY}
_PREFERENCE = {p.value: p for p in FungibilityPreference}

# v1beta2 renamed spec.cohort to spec.cohortName; each version knows only its own name.
_COHORT_FIELD = {"v1beta1": "cohort", "v1beta2": "cohortName"}
_CQ_SPEC_FIELDS = {
    "v1beta1": (
        "resourceGroups",
        "cohort",
        "queueingStrategy",
        "namespaceSelector",
        "flavorFungibility",
        "preemption",
        "admissionChecks",
        "admissionChecksStrategy",
        "stopPolicy",
        "fairSharing",
        "admissionScope",
    ),
    "v1beta2": (
        "resourceGroups",
        "cohortName",
        "queueingStrategy",
        "namespaceSelector",
        "flavorFungibility",
        "preemption",
        "admissionChecksStrategy",
        "stopPolicy",
        "fairSharing",
        "admissionScope",
        "concurrentAdmissionPolicy",
    ),
}
_CQ_IGNORED = ("admissionChecks", "admissionChecksStrategy", "admissionScope", "concurrentAdmissionPolicy")
_CQ_HINTS = {
    "v1beta1": {"cohortName": "kueue.x-k8s.io/v1beta1 calls it spec.cohort; spec.cohortName is the v1beta2 name"},
    "v1beta2": {"cohort": "kueue.x-k8s.io/v1beta2 renamed it to spec.cohortName"},
}
_COHORT_HINTS = {"parent": "v1beta1 and v1beta2 call it spec.parentName (spec.parent was v1alpha1)"}


def parse_resource_flavor(r: Reader, doc: Mapping[str, object], version: str) -> ResourceFlavor | None:
    spec = r.mapping(doc.get("spec"), "spec", known=("nodeLabels", "nodeTaints", "tolerations", "topologyName")) or {}
    labels = r.string_map(
        spec.get("nodeLabels"),
        "spec.nodeLabels",
        max_items=MAX_NODE_LABELS,
        key_syntax=qualified_name,
        value_syntax=label_value,
    )
    taints = read_taints(r, spec.get("nodeTaints"), "spec.nodeTaints", max_items=MAX_NODE_TAINTS)
    tolerations = read_tolerations(r, spec.get("tolerations"), "spec.tolerations", max_items=MAX_TOLERATIONS)
    if spec.get("topologyName"):
        r.warn("spec.topologyName", f"(topology-aware scheduling) {_NOT_IMPLEMENTED}")
    return ResourceFlavor(name=r.name, node_labels=labels, node_taints=taints, tolerations=tolerations)


def parse_cluster_queue(r: Reader, doc: Mapping[str, object], version: str) -> ClusterQueue | None:
    spec = r.mapping(doc.get("spec"), "spec", known=_CQ_SPEC_FIELDS[version], hints=_CQ_HINTS[version]) or {}
    cohort_field = _COHORT_FIELD[version]
    cohort = r.string(spec.get(cohort_field), at("spec", cohort_field), syntax=dns_subdomain) or None
    for name in _CQ_IGNORED:
        if spec.get(name):
            r.warn(at("spec", name), _NOT_IMPLEMENTED)
    groups = read_resource_groups(
        r,
        spec.get("resourceGroups"),
        "spec.resourceGroups",
        has_parent=cohort is not None,
        lending_at_most_nominal=True,
        no_parent_effect="has no effect until the ClusterQueue joins a cohort",
    )
    weight = read_fair_sharing_weight(r, spec.get("fairSharing"), "spec.fairSharing")
    return ClusterQueue(
        name=r.name,
        cohort=cohort,
        namespace_selector=read_label_selector(r, spec.get("namespaceSelector"), "spec.namespaceSelector"),
        queueing_strategy=r.enum(spec.get("queueingStrategy"), "spec.queueingStrategy", _QUEUEING)
        or QueueingStrategy.BEST_EFFORT_FIFO,
        resource_groups=groups,
        preemption=read_preemption(r, spec.get("preemption"), "spec.preemption"),
        flavor_fungibility=read_fungibility(r, spec.get("flavorFungibility"), "spec.flavorFungibility", version),
        stop_policy=r.enum(spec.get("stopPolicy"), "spec.stopPolicy", _STOP) or StopPolicy.NONE,
        fair_sharing_weight=weight,
    )


def parse_cohort(r: Reader, doc: Mapping[str, object], version: str) -> Cohort | None:
    spec = (
        r.mapping(doc.get("spec"), "spec", known=("parentName", "resourceGroups", "fairSharing"), hints=_COHORT_HINTS)
        or {}
    )
    parent = r.string(spec.get("parentName"), "spec.parentName", syntax=dns_subdomain) or None
    if parent is not None and parent == r.name:
        r.error("spec.parentName", f"a Cohort cannot be its own parent (got {parent!r})")
    groups = read_resource_groups(
        r,
        spec.get("resourceGroups"),
        "spec.resourceGroups",
        has_parent=parent is not None,
        # The Cohort webhook does not compare lendingLimit with nominalQuota (enforceNominalGreaterThanLending
        # is false there): a Cohort may lend what its children contribute on top of its own quota.
        lending_at_most_nominal=False,
        no_parent_effect="has no effect until the Cohort has a parent (spec.parentName)",
    )
    weight = read_fair_sharing_weight(r, spec.get("fairSharing"), "spec.fairSharing")
    return Cohort(name=r.name, parent=parent, resource_groups=groups, fair_sharing_weight=weight)


def parse_local_queue(r: Reader, doc: Mapping[str, object], version: str) -> LocalQueue | None:
    spec = r.mapping(doc.get("spec"), "spec", required=True, known=("clusterQueue", "stopPolicy", "fairSharing")) or {}
    cq = r.string(spec.get("clusterQueue"), "spec.clusterQueue", required=True, syntax=dns_subdomain)
    stop = r.enum(spec.get("stopPolicy"), "spec.stopPolicy", _STOP) or StopPolicy.NONE
    if spec.get("fairSharing"):
        r.warn("spec.fairSharing", f"(admission fair sharing) {_NOT_IMPLEMENTED}")
    if r.namespace is None or cq is None:
        return None  # the missing namespace is reported by the caller, which knows the object's scope
    return LocalQueue(namespace=r.namespace, name=r.name, cluster_queue=cq, stop_policy=stop)


# --- shared pieces --------------------------------------------------------------------------------------------


def read_resource_groups(
    r: Reader,
    value: object,
    path: str,
    *,
    has_parent: bool,
    lending_at_most_nominal: bool,
    no_parent_effect: str,
) -> tuple[ResourceGroup, ...]:
    """`spec.resourceGroups` of a ClusterQueue or Cohort, with `validateResourceGroups` and the CRD's rules: each
    resource and each flavor in one group only; each flavor lists exactly the group's coveredResources, by name, in
    the same order (`validateFlavorQuotas` compares names index by index; the CRD compares counts)."""
    groups: list[ResourceGroup] = []
    resource_at: dict[str, str] = {}
    flavor_at: dict[str, str] = {}
    total_flavors = 0
    total_covered = 0
    for i, item in enumerate(r.sequence(value, path, max_items=MAX_RESOURCE_GROUPS) or ()):
        gp = index(path, i)
        g = r.mapping(item, gp, required=True, known=("coveredResources", "flavors"))
        if g is None:
            continue
        before = len(r.errors)
        cp = at(gp, "coveredResources")
        covered = r.strings(
            g.get("coveredResources"),
            cp,
            required=True,
            min_items=1,
            max_items=MAX_COVERED_RESOURCES,
            syntax=qualified_name,
        )
        for j, res in enumerate(covered or ()):
            if res is None:
                continue
            if res in resource_at:
                r.error(
                    index(cp, j),
                    f"resource {res!r} is already covered at {resource_at[res]}; a resource belongs to one group only",
                )
            else:
                resource_at[res] = index(cp, j)
        total_covered += len(covered or ())
        fp_list = at(gp, "flavors")
        flavor_items = r.sequence(g.get("flavors"), fp_list, required=True, min_items=1, max_items=MAX_FLAVORS) or []
        total_flavors += len(flavor_items)
        combos = 0
        flavors: list[FlavorQuotas] = []
        for j, fitem in enumerate(flavor_items):
            fp = index(fp_list, j)
            f = r.mapping(fitem, fp, required=True, known=("name", "resources"))
            if f is None:
                continue
            fname = r.string(f.get("name"), at(fp, "name"), required=True, syntax=dns_subdomain)
            if fname is not None:
                if fname in flavor_at:
                    r.error(
                        at(fp, "name"),
                        f"flavor {fname!r} is already listed at {flavor_at[fname]}; "
                        "a flavor appears once, in one group",
                    )
                else:
                    flavor_at[fname] = at(fp, "name")
            quotas = _read_flavor_quotas(
                r,
                f.get("resources"),
                at(fp, "resources"),
                covered,
                has_parent=has_parent,
                lending_at_most_nominal=lending_at_most_nominal,
                no_parent_effect=no_parent_effect,
            )
            combos += len(quotas)
            if fname is not None:
                flavors.append(FlavorQuotas(name=fname, resources=quotas))
        if combos > MAX_FLAVOR_RESOURCES_PER_GROUP:
            r.error(
                gp, f"must have at most {MAX_FLAVOR_RESOURCES_PER_GROUP} flavor-resource combinations (got {combos})"
            )
        if len(r.errors) == before and covered is not None:
            groups.append(
                ResourceGroup(covered_resources=tuple(c for c in covered if c is not None), flavors=tuple(flavors))
            )
    if total_flavors > MAX_TOTAL_FLAVORS:
        r.error(path, f"must have at most {MAX_TOTAL_FLAVORS} flavors across all resource groups (got {total_flavors})")
    if total_covered > MAX_TOTAL_COVERED_RESOURCES:
        r.error(
            path,
            f"must cover at most {MAX_TOTAL_COVERED_RESOURCES} resources across all resource groups "
            f"(got {total_covered})",
        )
    return tuple(groups)


def _read_flavor_quotas(
    r: Reader,
    value: object,
    path: str,
    covered: list[str | None] | None,
    *,
    has_parent: bool,
    lending_at_most_nominal: bool,
    no_parent_effect: str,
) -> tuple[ResourceQuota, ...]:
    items = r.sequence(value, path, required=True, min_items=1, max_items=MAX_RESOURCES) or []
    if covered is not None and items and len(items) != len(covered):
        names = ", ".join(c or "?" for c in covered)
        r.error(
            path,
            f"must list one entry per covered resource ({names}), in that order "
            f"(got {len(items)}, want {len(covered)})",
        )
    quotas: list[ResourceQuota] = []
    for k, item in enumerate(items):
        qp = index(path, k)
        q = r.mapping(item, qp, required=True, known=("name", "nominalQuota", "borrowingLimit", "lendingLimit"))
        if q is None:
            continue
        name = r.string(q.get("name"), at(qp, "name"), required=True, syntax=qualified_name)
        want = covered[k] if covered is not None and k < len(covered) else None
        if name is not None and want is not None and name != want:
            r.error(
                at(qp, "name"),
                f"must match coveredResources[{k}] ({want!r}), got {name!r}; "
                "list resources in the order of coveredResources",
            )
        nominal = r.quantity(q.get("nominalQuota"), at(qp, "nominalQuota"), required=True, non_negative=True)
        borrowing = r.quantity(q.get("borrowingLimit"), at(qp, "borrowingLimit"), non_negative=True)
        lending = r.quantity(q.get("lendingLimit"), at(qp, "lendingLimit"), non_negative=True)
        for limit_name, limit in (("borrowingLimit", borrowing), ("lendingLimit", lending)):
            # Kueue rejects this (`validateLimit`, and a CEL rule for borrowingLimit); admitd accepts it and says
            # why it does nothing, so a queue that is about to join a cohort can be written ahead of time.
            if limit is not None and not has_parent:
                r.warn(at(qp, limit_name), no_parent_effect)
        if lending_at_most_nominal and lending is not None and nominal is not None and lending.exact > nominal.exact:
            r.error(
                at(qp, "lendingLimit"),
                f"must be less than or equal to nominalQuota (got {lending.text}, nominalQuota {nominal.text})",
            )
        if name is None or nominal is None:
            continue
        quotas.append(
            ResourceQuota(
                name=name,
                nominal=nominal.milli(name),
                borrowing_limit=borrowing.milli(name) if borrowing is not None else None,
                lending_limit=lending.milli(name) if lending is not None else None,
            )
        )
    return tuple(quotas)


def read_fair_sharing_weight(r: Reader, value: object, path: str) -> Milli:
    """`fairSharing.weight` in milli-units (default 1). Weights between 0 and 1m are held as 1m."""
    fs = r.mapping(value, path, known=("weight",))
    if fs is None:
        return 1000
    wp = at(path, "weight")
    weight = r.quantity(fs.get("weight"), wp, non_negative=True)
    if weight is None:
        return 1000
    # validateFairSharing: a non-zero weight at or below 1n would collapse to zero in Kueue's share arithmetic.
    if 0 < weight.exact <= _ONE_NANO:
        r.error(wp, f"when not 0, must be greater than 1n (got {weight.text})")
        return 1000
    return ceil_milli(weight.exact)


def read_preemption(r: Reader, value: object, path: str) -> Preemption:
    p = r.mapping(value, path, known=("withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"))
    if p is None:
        return Preemption()
    within = r.enum(p.get("withinClusterQueue"), at(path, "withinClusterQueue"), _WITHIN_CQ) or PreemptionPolicy.NEVER
    reclaim = r.enum(p.get("reclaimWithinCohort"), at(path, "reclaimWithinCohort"), _RECLAIM) or PreemptionPolicy.NEVER
    bp = at(path, "borrowWithinCohort")
    b = r.mapping(p.get("borrowWithinCohort"), bp, known=("policy", "maxPriorityThreshold")) or {}
    borrow = r.enum(b.get("policy"), at(bp, "policy"), _BORROW_WITHIN_COHORT) or PreemptionPolicy.NEVER
    threshold = r.integer(
        b.get("maxPriorityThreshold"), at(bp, "maxPriorityThreshold"), minimum=INT32_MIN, maximum=INT32_MAX
    )
    if reclaim == PreemptionPolicy.NEVER and borrow != PreemptionPolicy.NEVER:
        # validatePreemption and the CRD's CEL rule: preempting while borrowing implies reclaiming.
        r.error(
            at(bp, "policy"),
            f"must be Never while reclaimWithinCohort is Never (got {borrow.value}); "
            "set reclaimWithinCohort to LowerPriority or Any to preempt while borrowing",
        )
    return Preemption(
        within_cluster_queue=within,
        reclaim_within_cohort=reclaim,
        borrow_within_cohort=borrow,
        borrow_max_priority_threshold=threshold,
    )


def read_fungibility(r: Reader, value: object, path: str, version: str) -> FlavorFungibility:
    f = r.mapping(value, path, known=("whenCanBorrow", "whenCanPreempt", "preference"))
    if f is None:
        return FlavorFungibility()
    borrow = r.enum(f.get("whenCanBorrow"), at(path, "whenCanBorrow"), _WHEN_CAN_BORROW[version])
    preempt = r.enum(f.get("whenCanPreempt"), at(path, "whenCanPreempt"), _WHEN_CAN_PREEMPT[version])
    preference = r.enum(f.get("preference"), at(path, "preference"), _PREFERENCE)
    borrow = borrow or FungibilityPolicy.MAY_STOP_SEARCH
    preempt = preempt or FungibilityPolicy.TRY_NEXT_FLAVOR
    if preference is not None and (
        borrow != FungibilityPolicy.TRY_NEXT_FLAVOR or preempt != FungibilityPolicy.TRY_NEXT_FLAVOR
    ):
        r.error(
            at(path, "preference"),
            "can only be set when whenCanBorrow and whenCanPreempt are both TryNextFlavor "
            f"(got whenCanBorrow={f.get('whenCanBorrow') or borrow.value}, "
            f"whenCanPreempt={f.get('whenCanPreempt') or preempt.value})",
        )
    if preference is None:
        return FlavorFungibility(when_can_borrow=borrow, when_can_preempt=preempt)
    return FlavorFungibility(when_can_borrow=borrow, when_can_preempt=preempt, preference=preference)
