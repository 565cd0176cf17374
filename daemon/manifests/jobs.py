"""Job adapters: each turns one job kind's raw object into a `Workload`, and a registry finds the adapter for an
(apiVersion, kind), so PyTorchJob, RayJob or JobSet plug in by registering an adapter, without touching the engine.

Per-pod requests follow Kubernetes' `resourcehelper.PodRequests`, as Kueue's `totalRequestsFromPodSets` uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Protocol

from daemon.domain.model import Millis, PodSet, Workload
from daemon.domain.quantity import format_quantity, resource_milli
from daemon.manifests.core import read_annotations, read_labels, read_tolerations
from daemon.manifests.fields import (
    INT32_MAX,
    INT64_MAX,
    Reader,
    at,
    describe,
    dns_label,
    dns_label_name,
    dns_subdomain,
    index,
    key,
    label_value,
    qualified_name,
    shown,
)

__all__ = [
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "BatchJobAdapter",
    "JobAdapter",
    "JobMetadata",
    "PodTemplate",
    "adapter_for",
    "managed_owner",
    "pod_requests",
    "read_job_metadata",
    "read_pod_template",
    "register_adapter",
    "registered_adapters",
]

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
"""Partial admission of a batch/v1 Job: it may run with as few pods as this (Kueue's PodSet.minCount)."""
FULL_PARALLELISM_ANNOTATION = "admitd.io/full-parallelism"
"""Written by admitd on a Job it admitted with fewer pods than it asked for (partial admission): the pod count it
asked for, so that whoever reads the running Job (another replica, a restarted admitd) sees the Job as created.
Set back to "" when the Job is suspended and its parallelism restored."""

# PodLevelResources (KEP-2837): only these may be set at pod level, and then they replace the container sum.
_POD_LEVEL_RESOURCES = ("cpu", "memory")
_POD_LEVEL_PREFIX = "hugepages-"

Requests = dict[str, Fraction]


class JobAdapter(Protocol):
    """Turns one job kind into a Workload. Implementations are stateless and safe to share."""

    @property
    def api_version(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def to_workload(self, obj: Mapping[str, object], *, created_at: Millis, uid: str) -> Workload:
        """The job as the engine admits it. Raises `ManifestError` naming the field when the job is malformed."""
        ...

    def is_managed(self, obj: Mapping[str, object]) -> bool:
        """Whether admitd queues this job: it carries the `kueue.x-k8s.io/queue-name` label."""
        ...


_registry: dict[tuple[str, str], JobAdapter] = {}


def register_adapter(adapter: JobAdapter) -> None:
    """Make `adapter_for` find `adapter` for its (apiVersion, kind); a later registration replaces an earlier one."""
    _registry[(adapter.api_version, adapter.kind)] = adapter


def adapter_for(api_version: str, kind: str) -> JobAdapter | None:
    return _registry.get((api_version, kind))


def managed_owner(obj: Mapping[str, object]) -> str | None:
    """The kind of the object's controller when admitd admits that kind itself (a JobSet's child Jobs, say), else
    None. Such a job is its owner's part, never a job of its own: Kueue neither defaults its queue nor suspends it
    (IsOwnerManagedByKueue)."""
    meta = obj.get("metadata")
    owners = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    if not isinstance(owners, list):
        return None
    for owner in owners:
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            api_version, kind = owner.get("apiVersion"), owner.get("kind")
            if isinstance(api_version, str) and isinstance(kind, str) and adapter_for(api_version, kind) is not None:
                return kind
    return None


def registered_adapters() -> tuple[JobAdapter, ...]:
    return tuple(_registry.values())


def _labels(obj: Mapping[str, object]) -> Mapping[str, object]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _label(obj: Mapping[str, object], name: str) -> str | None:
    value = _labels(obj).get(name)
    return value if isinstance(value, str) and value else None


class JobReader:
    """The shared half of the job adapters: `read` records every problem in a Reader, `to_workload` raises the
    first one."""

    __slots__ = ()
    kind: str

    def to_workload(self, obj: Mapping[str, object], *, created_at: Millis, uid: str) -> Workload:
        r = Reader(kind=self.kind)
        workload = self.read(r, obj, created_at=created_at, uid=uid)
        if r.errors:
            raise r.errors[0]
        assert workload is not None  # read returns None only with errors recorded
        return workload

    def read(self, r: Reader, obj: Mapping[str, object], *, created_at: Millis, uid: str) -> Workload | None:
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchJobAdapter(JobReader):
    """batch/v1 Job: one PodSet "main" of `min(parallelism, completions)` pods (Kueue's `podsCount`)."""

    api_version: str = "batch/v1"
    kind: str = "Job"

    def is_managed(self, obj: Mapping[str, object]) -> bool:
        return _label(obj, QUEUE_NAME_LABEL) is not None

    def read(self, r: Reader, obj: Mapping[str, object], *, created_at: Millis, uid: str) -> Workload | None:
        """Like `to_workload`, but records every problem in `r` instead of raising the first."""
        meta = read_job_metadata(r, obj)
        spec = r.mapping(obj.get("spec"), "spec", required=True)
        if spec is None:
            return None
        parallelism = r.integer(spec.get("parallelism"), "spec.parallelism", minimum=0, maximum=INT32_MAX)
        completions = r.integer(spec.get("completions"), "spec.completions", minimum=0, maximum=INT32_MAX)
        # The apiserver defaults parallelism to 1; a Job never runs more pods at once than it has completions left.
        count = 1 if parallelism is None else parallelism
        if completions is not None and completions < count:
            count = completions
        annotations = _annotations(obj)
        count = _full_count(r, annotations, count)
        min_count = _min_count(r, annotations, count)
        template = read_pod_template(r, spec.get("template"), "spec.template", "main", count, "spec.parallelism")
        deadline = r.integer(
            spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds", minimum=1, maximum=_DEADLINE_MAX_S
        )
        if template is None or r.errors or meta.name is None:
            return None
        return Workload(
            namespace=meta.namespace,
            name=meta.name,
            kind=self.kind,
            uid=uid,
            created_at=created_at,
            queue_name=meta.queue_name,
            priority_class=meta.priority_class,
            pod_priority_class=template.priority_class,
            pod_sets=(replace(template.pod_set, min_count=min_count),),
            active_deadline_ms=None if deadline is None else deadline * 1000,
        )


_DEADLINE_MAX_S = (2**63 - 1) // 1000  # the API's int64, in ms without overflow


def _annotations(obj: Mapping[str, object]) -> Mapping[str, object]:
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def _decimal(value: object) -> int | None:
    """An annotation's integer, as Go's strconv.Atoi reads it (an optional sign, then decimal digits)."""
    if not isinstance(value, str):
        return None
    digits = value[1:] if value[:1] in "+-" else value
    if not digits.isascii() or not digits.isdigit() or len(digits) > 19:
        return None
    return int(value)


def _full_count(r: Reader, annotations: Mapping[str, object], count: int) -> int:
    """The pod count the Job asked for: `admitd.io/full-parallelism` while admitd runs it with fewer pods."""
    raw = annotations.get(FULL_PARALLELISM_ANNOTATION)
    if raw is None or raw == "":
        return count
    full = _decimal(raw)
    if full is None or not count <= full <= INT32_MAX:
        r.error(
            key("metadata.annotations", FULL_PARALLELISM_ANNOTATION),
            f"must be the Job's full pod count, an integer from {count} to {INT32_MAX} (admitd writes it when it "
            f"admits the Job with fewer pods), got {shown(str(raw))}",
        )
        return count
    return full


def _min_count(r: Reader, annotations: Mapping[str, object], count: int) -> int | None:
    """`kueue.x-k8s.io/job-min-parallelism`, checked as Kueue's job webhook does: an integer from 1 to one less
    than the Job's pod count (min(parallelism, completions))."""
    raw = annotations.get(MIN_PARALLELISM_ANNOTATION)
    if raw is None:
        return None
    path = key("metadata.annotations", MIN_PARALLELISM_ANNOTATION)
    value = _decimal(raw)
    if value is None:
        r.error(path, f"must be an integer (a minimum pod count for partial admission), got {shown(str(raw))}")
        return None
    if count < 2:
        r.error(path, f"partial admission needs a Job of at least 2 pods; this one has {count} (got {value})")
        return None
    if not 1 <= value < count:
        r.error(path, f"must be from 1 to {count - 1}, fewer than the Job's {count} pods (got {value})")
        return None
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class JobMetadata:
    """What every job kind's metadata says to admission. `name` is None when it is missing or invalid."""

    name: str | None
    namespace: str
    labels: Mapping[str, str]
    queue_name: str | None
    priority_class: str | None


def read_job_metadata(r: Reader, obj: Mapping[str, object]) -> JobMetadata:
    """A job's metadata, checked; it also sets `r`'s subject (name, namespace) for the messages that follow."""
    meta = r.mapping(obj.get("metadata"), "metadata") or {}
    # The subject of later messages; a name or namespace that fails its syntax is named escaped (repr).
    raw_name, raw_ns = meta.get("name"), meta.get("namespace")
    name = r.string(raw_name, "metadata.name", required=True, syntax=dns_label_name)
    namespace = r.string(raw_ns, "metadata.namespace", syntax=dns_label) or "default"
    r.name = name if name is not None else (shown(raw_name) if isinstance(raw_name, str) and raw_name else "")
    r.namespace = namespace if raw_ns is None or raw_ns == namespace else shown(str(raw_ns))
    labels = read_labels(r, meta)
    read_annotations(r, meta)
    # Kueue's job webhook (ValidateQueueName) also requires the queue name to be a DNS-1123 subdomain.
    queue_name = r.string(labels.get(QUEUE_NAME_LABEL), key("metadata.labels", QUEUE_NAME_LABEL), syntax=dns_subdomain)
    priority_class = r.string(
        labels.get(PRIORITY_CLASS_LABEL), key("metadata.labels", PRIORITY_CLASS_LABEL), syntax=dns_subdomain
    )
    return JobMetadata(
        name=name,
        namespace=namespace,
        labels=labels,
        queue_name=queue_name or None,
        priority_class=priority_class or None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PodTemplate:
    """One pod template read as a pod set, with the pod's own priorityClassName (None when unset)."""

    pod_set: PodSet
    priority_class: str | None


def read_pod_template(
    r: Reader, value: object, path: str, pod_set: str, count: int, count_field: str
) -> PodTemplate | None:
    """The pod template at `path` (a PodTemplateSpec) as the pod set `pod_set` of `count` pods: per-pod requests
    (`pod_requests`), nodeSelector, tolerations. `count_field` is where an overflowing count x request is reported.
    None when the template or its spec is missing (reported)."""
    template = r.mapping(value, path, required=True)
    spec_path = at(path, "spec")
    pod = r.mapping(template.get("spec"), spec_path, required=True) if template is not None else None
    if pod is None:
        return None
    requests = pod_requests(r, pod, spec_path)
    for resource, milli in requests.items():
        # What the admission holds (and the log stores) is count x request, an int64 of milli-units in Kueue.
        if count * milli > INT64_MAX:
            r.error(
                count_field,
                f"{count} pods x {format_quantity(milli, resource)} {resource} per pod do not fit in a 64-bit "
                "integer of milli-units; request less per pod or run fewer pods",
            )
    node_selector = r.string_map(
        pod.get("nodeSelector"),
        at(spec_path, "nodeSelector"),
        key_syntax=qualified_name,
        value_syntax=label_value,
    )
    tolerations = read_tolerations(r, pod.get("tolerations"), at(spec_path, "tolerations"))
    priority_class = (
        r.string(pod.get("priorityClassName"), at(spec_path, "priorityClassName"), syntax=dns_subdomain) or None
    )
    return PodTemplate(
        pod_set=PodSet(
            name=pod_set, count=count, requests=requests, node_selector=node_selector, tolerations=tolerations
        ),
        priority_class=priority_class,
    )


def pod_requests(r: Reader, pod: Mapping[str, object], path: str) -> dict[str, int]:
    """Per-pod requests in milli-units, as `resourcehelper.PodRequests` (k8s.io/component-helpers) computes them
    for Kueue, after Kueue's `UseLimitsAsMissingRequestsInPod`:

    - a container's request for a resource is its limit when only the limit is set (the apiserver defaults it so);
    - the regular containers are summed; sidecars (init containers with ``restartPolicy: Always``) are added too;
    - init containers run one at a time, each next to the sidecars started before it, so the pod needs at least
      ``max_i(init_i + sidecars before i)`` (for a sidecar, ``sidecars up to and including i``);
    - pod-level ``resources.requests`` (cpu, memory, hugepages-*) replace the container total for that resource;
    - ``overhead`` (RuntimeClass) is added last.

    Sums are exact; each total is then rounded up once, CPU to milli-cores and all else to whole units, as Kueue's
    `ResourceValue` does. Zero totals are dropped: Kueue's flavor assigner skips zero requests, so a zero request
    for a resource no ClusterQueue covers does not make a job inadmissible.
    """
    total: Requests = {}
    containers_path = at(path, "containers")
    containers = r.sequence(pod.get("containers"), containers_path, required=True, min_items=1) or []
    for i, c in enumerate(containers):
        _add(total, _container_requests(r, c, index(containers_path, i)))

    sidecars: Requests = {}
    init_peak: Requests = {}
    init_path = at(path, "initContainers")
    for i, c in enumerate(r.sequence(pod.get("initContainers"), init_path) or ()):
        p = index(init_path, i)
        own = _container_requests(r, c, p)
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            in_use = dict(sidecars)
        else:
            in_use = dict(own)
            _add(in_use, sidecars)
        _max(init_peak, in_use)
    _max(total, init_peak)

    pod_resources = r.mapping(pod.get("resources"), at(path, "resources"))
    if pod_resources is not None:
        level = _requests_with_limits(r, pod_resources, at(path, "resources"), "pod")
        for name, amount in level.items():
            if name in _POD_LEVEL_RESOURCES or name.startswith(_POD_LEVEL_PREFIX):
                total[name] = amount

    overhead = _resource_list(r, pod.get("overhead"), at(path, "overhead"), "pod overhead: ")
    _add(total, overhead)

    out: dict[str, int] = {}
    for name in sorted(total):
        milli = resource_milli(total[name], name)
        if milli > INT64_MAX:
            r.error(
                path,
                f"the pod's total request for {name} ({format_quantity(milli, name)}) does not fit in a 64-bit "
                "integer of milli-units",
            )
        elif milli:
            out[name] = milli
    return out


def _container_requests(r: Reader, c: object, path: str) -> Requests:
    m = r.mapping(c, path, required=True)
    if m is None:
        return {}
    cname = m.get("name")
    who = f'container "{cname}"' if isinstance(cname, str) and cname else f"container #{path.rsplit('[', 1)[-1][:-1]}"
    resources = r.mapping(m.get("resources"), at(path, "resources"))
    if resources is None:
        return {}
    return _requests_with_limits(r, resources, at(path, "resources"), who)


def _requests_with_limits(r: Reader, resources: Mapping[str, object], path: str, who: str) -> Requests:
    requests = _resource_list(r, resources.get("requests"), at(path, "requests"), f"{who}: ")
    limits = _resource_list(r, resources.get("limits"), at(path, "limits"), f"{who}: ")
    for name, limit in limits.items():
        request = requests.setdefault(name, limit)
        if request > limit:
            # The apiserver rejects such a pod template, and Kueue's ValidateResources the Workload.
            r.error(
                key(at(path, "requests"), name),
                f"{who}: request {_show(request, name)} must not exceed limit {_show(limit, name)}",
            )
    return requests


def _resource_list(r: Reader, value: object, path: str, context: str) -> Requests:
    m = r.mapping(value, path)
    out: Requests = {}
    if m is None:
        return out
    for name, raw in m.items():
        problem = qualified_name(name)
        p = key(path, name if problem is None else shown(name))
        if problem:
            r.error(p, f"{context}invalid resource name {name!r}: {problem}")
            continue
        if raw is None:
            r.error(p, f"{context}expected a quantity, got {describe(raw)}")
            continue
        q = r.quantity(raw, p, non_negative=True, context=context)
        if q is not None:
            out[name] = q.exact
    return out


def _add(into: Requests, more: Mapping[str, Fraction]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _max(into: Requests, other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        if name not in into or amount > into[name]:
            into[name] = amount


def _show(exact: Fraction, resource: str) -> str:
    # Messages show what Kueue would account, which is what a user compares with quotas.
    return format_quantity(resource_milli(exact, resource), resource)


register_adapter(BatchJobAdapter())
