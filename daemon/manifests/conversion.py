"""Conversion of the six kueue.x-k8s.io kinds admitd serves between v1beta1 and v1beta2, transcribed from Kueue
v0.17.0 (`apis/kueue/v1beta1/*_conversion.go`, the generated `zz_generated.conversion.go` and
`pkg/util/tas/tas_assignment.go`), and the answer to an apiextensions.k8s.io/v1 ConversionReview (`review`), which
admitd's webhook serves at /convert. Pure: dicts in, new dicts out; no I/O.

What changes between the versions (everything else is copied as is):

    kind                  v1beta1                                   v1beta2
    ClusterQueue          spec.cohort                               spec.cohortName
                          spec.admissionChecks: [name]              spec.admissionChecksStrategy.admissionChecks:
                                                                    [{name}] (one way: back as the strategy)
                          flavorFungibility Preempt / Borrow        MayStopSearch (one way)
                          status.pendingWorkloadsStatus,
                          status.fairSharing.admissionFairSharingStatus  (dropped)
    Cohort                status.fairSharing.admissionFairSharingStatus  (dropped)
    LocalQueue            status.flavorUsage                        status.flavorsUsage
                          status.flavors                            (dropped)
    Workload              spec.priorityClassSource + Name           spec.priorityClassRef {group, kind, name}
                          status.accumulatedPastExexcutionTimeSeconds  status.accumulatedPastExecutionTimeSeconds
                          ...topologyAssignment.domains             ...topologyAssignment.slices (compact encoding)
                          (dropped)                                 spec.preemptionGates, status.preemptionGates,
                                                                    podSets[].topologyRequest
                                                                      .podsetSliceRequiredTopologyConstraints
    ResourceFlavor, WorkloadPriorityClass: the same schema in both versions; only apiVersion changes.

Kueue keeps no annotations to carry one version's extra fields through the other, so neither does this module:
a round trip is lossless exactly where Kueue's is. As in Go's `omitempty`, a renamed field whose value is null or
the empty string is left out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Final

from daemon.manifests.errors import ManifestError
from daemon.manifests.fields import at, describe, index

__all__ = [
    "KINDS",
    "REVIEW_API_VERSION",
    "V1BETA1",
    "V1BETA2",
    "convert",
    "review",
]

GROUP: Final = "kueue.x-k8s.io"
V1BETA1: Final = f"{GROUP}/v1beta1"
V1BETA2: Final = f"{GROUP}/v1beta2"
KINDS: Final = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "WorkloadPriorityClass", "Workload")
REVIEW_API_VERSION: Final = "apiextensions.k8s.io/v1"

# v1beta1 Workload.spec.priorityClassSource <-> v1beta2 Workload.spec.priorityClassRef (group, kind).
_PRIORITY_SOURCES: Final = {
    "kueue.x-k8s.io/workloadpriorityclass": ("kueue.x-k8s.io", "WorkloadPriorityClass"),
    "scheduling.k8s.io/priorityclass": ("scheduling.k8s.io", "PriorityClass"),
}

MAX_TOPOLOGY_DOMAINS: Final = 100_000
"""The most domains a topology assignment may expand to in v1beta1. Kueue bounds each v1beta2 list (roots, pod
counts) at 100,000; a v1beta1 object with more domains would not fit etcd's 1.5 MiB object limit anyway. Without
a bound, a slice with `domainCount: 2147483647` and universal values would expand until memory runs out."""


class _Where:
    """Which object a conversion error is about."""

    __slots__ = ("kind", "name", "namespace")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        kind = obj.get("kind")
        self.kind = kind if isinstance(kind, str) else ""
        metadata = obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        self.name = name if isinstance(name, str) else ""
        self.namespace = namespace if isinstance(namespace, str) and namespace else None

    def error(self, field: str, message: str) -> ManifestError:
        return ManifestError(message, kind=self.kind, name=self.name, namespace=self.namespace, field=field)


def _target_version(to_version: str) -> str:
    """``v1beta2`` or ``kueue.x-k8s.io/v1beta2`` (a ConversionReview's desiredAPIVersion) -> the apiVersion."""
    full = to_version if "/" in to_version else f"{GROUP}/{to_version}"
    if full not in (V1BETA1, V1BETA2):
        raise ManifestError(f"cannot convert to {to_version!r}: admitd converts between {V1BETA1} and {V1BETA2}")
    return full


def convert(obj: Mapping[str, Any], to_version: str) -> dict[str, Any]:
    """`obj` (a ResourceFlavor, ClusterQueue, LocalQueue, Cohort, WorkloadPriorityClass or Workload, in v1beta1 or
    v1beta2) as a new object in `to_version`, as Kueue v0.17.0's webhook converts it. An object already in
    `to_version` comes back unchanged. Raises ManifestError naming the object and field when it cannot be read."""
    target = _target_version(to_version)
    if not isinstance(obj, Mapping):
        raise ManifestError(f"must be an object, got {describe(obj)}")
    where = _Where(obj)
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise where.error("kind", f"must be one of {', '.join(KINDS)}, got {describe(kind)}")
    source = obj.get("apiVersion")
    if source not in (V1BETA1, V1BETA2):
        raise where.error("apiVersion", f"must be {V1BETA1} or {V1BETA2}, got {describe(source)}")
    out: dict[str, Any] = copy.deepcopy(dict(obj))
    out["apiVersion"] = target
    if source != target:
        steps = _TO_V1BETA2 if target == V1BETA2 else _TO_V1BETA1
        steps[kind](out, where)
    return out


# --- reading the few fields a conversion touches --------------------------------------------------------------


def _object(parent: dict[str, Any], name: str, path: str, where: _Where) -> dict[str, Any] | None:
    """parent[name] when it is an object; None when absent or null (Go: a nil pointer); an error otherwise."""
    value = parent.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise where.error(at(path, name), f"must be an object, got {describe(value)}")
    return value


def _list(parent: dict[str, Any], name: str, path: str, where: _Where) -> list[Any] | None:
    value = parent.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise where.error(at(path, name), f"must be a list, got {describe(value)}")
    return value


def _string(value: object, path: str, where: _Where) -> str:
    if not isinstance(value, str):
        raise where.error(path, f"must be a string, got {describe(value)}")
    return value


def _int(value: object, path: str, where: _Where, *, minimum: int = -(2**31)) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise where.error(path, f"must be an integer, got {describe(value)}")
    if not minimum <= value <= 2**31 - 1:
        raise where.error(path, f"must be an int32 of at least {minimum}, got {value}")
    return value


def _optional_string(parent: dict[str, Any], name: str, path: str, where: _Where) -> str:
    """parent[name], or "" when absent or null (Go: a nil *string or an empty string)."""
    value = parent.get(name)
    return "" if value is None else _string(value, at(path, name), where)


def _strings(value: object, path: str, where: _Where) -> list[str]:
    if not isinstance(value, list):
        raise where.error(path, f"must be a list of strings, got {describe(value)}")
    return [_string(v, index(path, i), where) for i, v in enumerate(value)]


def _rename(parent: dict[str, Any], old: str, new: str) -> None:
    """Moves parent[old] to parent[new]. `new` is not a field of the source version (a decoder in Go drops it), so
    any value already there goes; a null or empty-string value is left out (Go: omitempty)."""
    parent.pop(new, None)
    if old in parent:
        value = parent.pop(old)
        if value is not None and value != "":
            parent[new] = value


def _each_object(items: list[Any], path: str, where: _Where) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for i, item in enumerate(items):
        if item is None:
            continue
        if not isinstance(item, dict):
            raise where.error(index(path, i), f"must be an object, got {describe(item)}")
        out.append((index(path, i), item))
    return out


# --- ClusterQueue (clusterqueue_conversion.go) ------------------------------------------------------------------


def _drop_admission_fair_sharing(obj: dict[str, Any], where: _Where) -> None:
    """v1beta1 FairSharingStatus.admissionFairSharingStatus has no v1beta2 peer (fairsharing_conversion.go)."""
    status = _object(obj, "status", "", where)
    fair_sharing = _object(status, "fairSharing", "status", where) if status is not None else None
    if fair_sharing is not None:
        fair_sharing.pop("admissionFairSharingStatus", None)


def _cluster_queue_to_v1beta2(obj: dict[str, Any], where: _Where) -> None:
    spec = _object(obj, "spec", "", where)
    if spec is not None:
        _rename(spec, "cohort", "cohortName")
        checks = _list(spec, "admissionChecks", "spec", where)
        spec.pop("admissionChecks", None)
        if checks:  # an empty list converts to nothing, and any strategy given stays
            names = _strings(checks, "spec.admissionChecks", where)
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in names]}
        fungibility = _object(spec, "flavorFungibility", "spec", where)
        if fungibility is not None:
            if fungibility.get("whenCanPreempt") == "Preempt":
                fungibility["whenCanPreempt"] = "MayStopSearch"
            if fungibility.get("whenCanBorrow") == "Borrow":
                fungibility["whenCanBorrow"] = "MayStopSearch"
    status = _object(obj, "status", "", where)
    if status is not None:
        status.pop("pendingWorkloadsStatus", None)
    _drop_admission_fair_sharing(obj, where)


def _cluster_queue_to_v1beta1(obj: dict[str, Any], where: _Where) -> None:
    spec = _object(obj, "spec", "", where)
    if spec is not None:
        _rename(spec, "cohortName", "cohort")


# --- Cohort (cohort_conversion.go: generated only) -----------------------------------------------------------------


def _cohort_to_v1beta2(obj: dict[str, Any], where: _Where) -> None:
    _drop_admission_fair_sharing(obj, where)


# --- LocalQueue (localqueue_conversion.go) --------------------------------------------------------------------------


def _local_queue_to_v1beta2(obj: dict[str, Any], where: _Where) -> None:
    status = _object(obj, "status", "", where)
    if status is not None:
        _rename(status, "flavorUsage", "flavorsUsage")
        status.pop("flavors", None)


def _local_queue_to_v1beta1(obj: dict[str, Any], where: _Where) -> None:
    status = _object(obj, "status", "", where)
    if status is not None:
        _rename(status, "flavorsUsage", "flavorUsage")


# --- Workload (workload_conversion.go, pkg/util/tas/tas_assignment.go) ----------------------------------------------


def _topology_assignments(obj: dict[str, Any], where: _Where) -> list[tuple[str, dict[str, Any]]]:
    """(path, object) of every status.admission.podSetAssignments[].topologyAssignment."""
    status = _object(obj, "status", "", where)
    admission = _object(status, "admission", "status", where) if status is not None else None
    if admission is None:
        return []
    assignments = _list(admission, "podSetAssignments", "status.admission", where) or []
    out = []
    for path, assignment in _each_object(assignments, "status.admission.podSetAssignments", where):
        topology = _object(assignment, "topologyAssignment", path, where)
        if topology is not None:
            out.append((at(path, "topologyAssignment"), topology))
    return out


def _workload_to_v1beta2(obj: dict[str, Any], where: _Where) -> None:
    spec = _object(obj, "spec", "", where)
    if spec is not None:
        spec.pop("priorityClassRef", None)
        source = _optional_string(spec, "priorityClassSource", "spec", where)
        name = _optional_string(spec, "priorityClassName", "spec", where)
        spec.pop("priorityClassSource", None)
        spec.pop("priorityClassName", None)
        if source in _PRIORITY_SOURCES:  # any other source ("" included) converts to no reference, as in Kueue
            group, kind = _PRIORITY_SOURCES[source]
            ref = {"group": group, "kind": kind}
            if name:
                ref["name"] = name
            spec["priorityClassRef"] = ref
    status = _object(obj, "status", "", where)
    if status is not None:
        _rename(status, "accumulatedPastExexcutionTimeSeconds", "accumulatedPastExecutionTimeSeconds")
    for path, topology in _topology_assignments(obj, where):
        _domains_to_slices(topology, path, where)


def _workload_to_v1beta1(obj: dict[str, Any], where: _Where) -> None:
    spec = _object(obj, "spec", "", where)
    if spec is not None:
        spec.pop("priorityClassSource", None)
        spec.pop("priorityClassName", None)
        ref = _object(spec, "priorityClassRef", "spec", where)
        spec.pop("priorityClassRef", None)
        if ref is not None:
            pair = (ref.get("group"), ref.get("kind"))
            for source, known in _PRIORITY_SOURCES.items():
                if pair == known:  # any other pair has no v1beta1 form and is dropped, as in Kueue
                    spec["priorityClassSource"] = source
                    name = _optional_string(ref, "name", "spec.priorityClassRef", where)
                    if name:
                        spec["priorityClassName"] = name
        spec.pop("preemptionGates", None)
        for path, pod_set in _each_object(_list(spec, "podSets", "spec", where) or [], "spec.podSets", where):
            request = _object(pod_set, "topologyRequest", path, where)
            if request is not None:
                request.pop("podsetSliceRequiredTopologyConstraints", None)
    status = _object(obj, "status", "", where)
    if status is not None:
        _rename(status, "accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds")
        status.pop("preemptionGates", None)
    for path, topology in _topology_assignments(obj, where):
        _slices_to_domains(topology, path, where)


def _compact(values: list[str]) -> dict[str, Any]:
    """tas.fillSingleCompactSliceValues: one level's values as a universal value, or as roots with the longest
    common prefix and suffix taken out (never overlapping). Label values are ASCII, so characters are Go's bytes."""
    prefix = suffix = values[0]
    min_len = max_len = len(values[0])
    for s in values[1:]:
        n = len(s)
        min_len = min(min_len, n)
        max_len = max(max_len, n)
        prefix = prefix[:n]
        if n < len(suffix):
            suffix = suffix[len(suffix) - n :]
        for i in range(len(prefix)):
            if s[i] != prefix[i]:
                prefix = prefix[:i]
                break
        for i in range(len(suffix)):
            if s[len(s) - 1 - i] != suffix[len(suffix) - 1 - i]:
                suffix = suffix[len(suffix) - i :]
                break
    if len(prefix) == max_len:  # all equal
        return {"universal": prefix}
    if len(prefix) + len(suffix) > min_len:  # e.g. {"ababa", "aba"}
        prefix = prefix[: min_len - len(suffix)]
    individual: dict[str, Any] = {}
    if prefix:
        individual["prefix"] = prefix
    if suffix:
        individual["suffix"] = suffix
    individual["roots"] = [s[len(prefix) : len(s) - len(suffix)] for s in values]
    return {"individual": individual}


def _domains_to_slices(topology: dict[str, Any], path: str, where: _Where) -> None:
    """Convert_v1beta1_TopologyAssignment_To_v1beta2_TopologyAssignment: tas.V1Beta2From, one compact slice."""
    levels = _strings(topology.get("levels") or [], at(path, "levels"), where)
    domains = _list(topology, "domains", path, where) or []
    topology.pop("domains", None)
    topology.pop("slices", None)
    values_by_level: list[list[str]] = [[] for _ in levels]
    counts: list[int] = []
    for i, domain in enumerate(domains):
        domain_path = index(at(path, "domains"), i)
        if not isinstance(domain, dict):
            raise where.error(domain_path, f"must be an object, got {describe(domain)}")
        values = _strings(domain.get("values") or [], at(domain_path, "values"), where)
        if len(values) != len(levels):
            raise where.error(at(domain_path, "values"), f"has {len(values)} values for {len(levels)} levels")
        for level, value in enumerate(values):
            values_by_level[level].append(value)
        counts.append(_int(domain.get("count", 0), at(domain_path, "count"), where))
    if not domains:
        topology["slices"] = []
        return
    pod_counts: dict[str, Any] = (
        {"universal": counts[0]} if all(c == counts[0] for c in counts) else {"individual": counts}
    )
    topology["slices"] = [
        {
            "domainCount": len(domains),
            "valuesPerLevel": [_compact(values) for values in values_by_level],
            "podCounts": pod_counts,
        }
    ]


def _level_values(values: object, path: str, count: int, where: _Where) -> list[str]:
    """tas.valueAtIndex for every index of a slice: the universal value, or prefix + root + suffix."""
    if not isinstance(values, dict):
        raise where.error(path, f"must be an object, got {describe(values)}")
    universal = values.get("universal")
    if universal is not None:
        return [_string(universal, at(path, "universal"), where)] * count
    individual = _object(values, "individual", path, where)
    if individual is None:
        raise where.error(path, "must set universal or individual")
    ind_path = at(path, "individual")
    prefix = _optional_string(individual, "prefix", ind_path, where)
    suffix = _optional_string(individual, "suffix", ind_path, where)
    roots = _strings(individual.get("roots") or [], at(ind_path, "roots"), where)
    if len(roots) < count:
        raise where.error(at(ind_path, "roots"), f"has {len(roots)} roots for domainCount {count}")
    return [prefix + root + suffix for root in roots[:count]]


def _slices_to_domains(topology: dict[str, Any], path: str, where: _Where) -> None:
    """Convert_v1beta2_TopologyAssignment_To_v1beta1_TopologyAssignment: every slice's domains, in order."""
    levels = _strings(topology.get("levels") or [], at(path, "levels"), where)
    slices = _list(topology, "slices", path, where) or []
    topology.pop("slices", None)
    topology.pop("domains", None)
    domains: list[dict[str, Any]] = []
    for i, piece in enumerate(slices):
        slice_path = index(at(path, "slices"), i)
        if not isinstance(piece, dict):
            raise where.error(slice_path, f"must be an object, got {describe(piece)}")
        count = _int(piece.get("domainCount", 0), at(slice_path, "domainCount"), where, minimum=0)
        if len(domains) + count > MAX_TOPOLOGY_DOMAINS:
            raise where.error(slice_path, f"expands to more than {MAX_TOPOLOGY_DOMAINS:,} topology domains")
        per_level = _list(piece, "valuesPerLevel", slice_path, where) or []
        if len(per_level) < len(levels):
            raise where.error(
                at(slice_path, "valuesPerLevel"), f"has {len(per_level)} entries for {len(levels)} levels"
            )
        columns = [
            _level_values(per_level[level], index(at(slice_path, "valuesPerLevel"), level), count, where)
            for level in range(len(levels))
        ]
        pods = _pod_counts(piece, slice_path, count, where)
        for d in range(count):
            domains.append({"values": [column[d] for column in columns], "count": pods[d]})
    topology["domains"] = domains


def _pod_counts(piece: dict[str, Any], path: str, count: int, where: _Where) -> list[int]:
    """tas.countAtIndex for every index of a slice."""
    pod_counts = _object(piece, "podCounts", path, where) or {}
    counts_path = at(path, "podCounts")
    universal = pod_counts.get("universal")
    if universal is not None:
        return [_int(universal, at(counts_path, "universal"), where)] * count
    individual = pod_counts.get("individual")
    if individual is None:
        if count == 0:
            return []
        raise where.error(counts_path, "must set universal or individual")
    if not isinstance(individual, list):
        raise where.error(at(counts_path, "individual"), f"must be a list, got {describe(individual)}")
    if len(individual) < count:
        raise where.error(at(counts_path, "individual"), f"has {len(individual)} counts for domainCount {count}")
    return [_int(v, index(at(counts_path, "individual"), i), where) for i, v in enumerate(individual[:count])]


def _same_schema(obj: dict[str, Any], where: _Where) -> None:
    """ResourceFlavor and WorkloadPriorityClass: the versions differ only in apiVersion."""


_Step = Callable[[dict[str, Any], _Where], None]

_TO_V1BETA2: Final[dict[str, _Step]] = {
    "ResourceFlavor": _same_schema,
    "ClusterQueue": _cluster_queue_to_v1beta2,
    "LocalQueue": _local_queue_to_v1beta2,
    "Cohort": _cohort_to_v1beta2,
    "WorkloadPriorityClass": _same_schema,
    "Workload": _workload_to_v1beta2,
}
_TO_V1BETA1: Final[dict[str, _Step]] = {
    "ResourceFlavor": _same_schema,
    "ClusterQueue": _cluster_queue_to_v1beta1,
    "LocalQueue": _local_queue_to_v1beta1,
    "Cohort": _same_schema,
    "WorkloadPriorityClass": _same_schema,
    "Workload": _workload_to_v1beta1,
}


# --- the ConversionReview -----------------------------------------------------------------------------------------


def review(request: Mapping[str, Any]) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 ConversionReview answering `request` (the decoded JSON body the API server
    POSTs to /convert): every object converted, in order, with result status Success; or, if any object (or
    the review itself) cannot be converted, none, with status Failure and a message naming the object and field.
    Never raises on bad input: the API server shows the message to whoever made the request."""
    uid = ""
    try:
        if not isinstance(request, Mapping):
            raise ManifestError(f"the ConversionReview must be an object, got {describe(request)}")
        if request.get("apiVersion") != REVIEW_API_VERSION or request.get("kind") != "ConversionReview":
            raise ManifestError(
                f"expected a ConversionReview of {REVIEW_API_VERSION}, got kind {describe(request.get('kind'))} "
                f"of apiVersion {describe(request.get('apiVersion'))}"
            )
        body = request.get("request")
        if not isinstance(body, Mapping):
            raise ManifestError(f"request: must be an object, got {describe(body)}")
        raw_uid = body.get("uid")
        if not isinstance(raw_uid, str) or not raw_uid:
            raise ManifestError(f"request.uid: must be a non-empty string, got {describe(raw_uid)}")
        uid = raw_uid
        desired = body.get("desiredAPIVersion")
        if desired not in (V1BETA1, V1BETA2):
            raise ManifestError(
                f"request.desiredAPIVersion: admitd converts to {V1BETA1} or {V1BETA2}, got {describe(desired)}"
            )
        target = desired
        objects = body.get("objects")
        if objects is None:
            objects = []
        if not isinstance(objects, list):
            raise ManifestError(f"request.objects: must be a list, got {describe(objects)}")
        converted = []
        for i, obj in enumerate(objects):
            try:
                converted.append(convert(obj, target))
            except ManifestError as err:
                subject = (
                    err.subject if err.name else f"request.objects[{i}]{' (' + err.kind + ')' if err.kind else ''}"
                )
                detail = ": ".join(p for p in (err.field, err.message) if p)
                raise ManifestError(f"cannot convert {subject} to {target}: {detail}") from err
    except ManifestError as err:
        return {
            "apiVersion": REVIEW_API_VERSION,
            "kind": "ConversionReview",
            "response": {"uid": uid, "result": {"status": "Failure", "message": f"admitd: {err}"}},
        }
    return {
        "apiVersion": REVIEW_API_VERSION,
        "kind": "ConversionReview",
        "response": {"uid": uid, "convertedObjects": converted, "result": {"status": "Success"}},
    }
