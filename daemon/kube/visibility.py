"""Kueue's visibility API (`visibility.kueue.x-k8s.io/v1beta1`) as pure functions of the live pending order.

Kueue serves it from its queue manager as an aggregated API server (pkg/visibility, apis/visibility/v1beta1 of
Kueue v0.17); admitd answers the same paths from its fold's pending order (`ClusterView.pending_by_cq`, the order
`admitd pending` shows), so `kubectl get --raw`, `kubectl kueue list pendingworkloads` and tools built on Kueue's
client read admitd's queues unchanged:

    GET /apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/CQ/pendingworkloads?limit=&offset=
    GET /apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/NS/localqueues/LQ/pendingworkloads?limit=&offset=

Rules copied from Kueue's REST storage (pending_workloads_cq.go, pending_workloads_lq.go, utils.go): positions
start at 0; a ClusterQueue's list counts each row's position in its LocalQueue over every row before it (also those
before `offset`); a LocalQueue's list is that queue's rows only, `positionInLocalQueue` = offset + index;
`limit` 0 or absent is 1000; an unknown queue is a NotFound `Status` naming it (`clusterqueue` / `localqueue`, the
singular resource names Kueue passes). Owner references carry apiVersion, kind, name and uid only (Kueue copies
those four). No I/O and no clock here: the HTTP side (`daemon.kube.visibility_http`) authenticates and renders.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import Any

import msgspec

from daemon.domain.model import Workload
from daemon.domain.view import ClusterView
from daemon.kube.status_objects import owner_kind, rfc3339, workload_name

GROUP = "visibility.kueue.x-k8s.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
ROOT = f"/apis/{GROUP}/{VERSION}"
SUMMARY_KIND = "PendingWorkloadsSummary"
DEFAULT_LIMIT = 1000  # Kueue's constants.DefaultPendingWorkloadsLimit
OPTIONS = ("limit", "offset")  # PendingWorkloadOptions; anything else is refused

Obj = dict[str, Any]


class VisibilityError(Exception):
    """A request answered with a Kubernetes `Status`: its HTTP code, `reason` (NotFound, BadRequest, Unauthorized,
    Forbidden, ServiceUnavailable), message and the `details` apimachinery's errors fill in."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        """The `Status` object (meta/v1) the API server's clients decode into an error."""
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def not_found(resource: str, name: str) -> VisibilityError:
    """apimachinery's `errors.NewNotFound(visibility.Resource(resource), name)`."""
    return VisibilityError(
        404,
        "NotFound",
        f'{resource}.{GROUP} "{name}" not found',
        {"name": name, "group": GROUP, "kind": resource},
    )


def bad_request(message: str) -> VisibilityError:
    return VisibilityError(400, "BadRequest", message)


def options(params: Mapping[str, list[str]]) -> tuple[int, int]:
    """`(limit, offset)` from the query parameters: whole numbers, not negative, each given at most once; limit 0
    or absent is Kueue's default 1000. A BadRequest naming the parameter otherwise."""
    got = {"limit": 0, "offset": 0}
    for name, values in params.items():
        if name not in OPTIONS:
            raise bad_request(f"unknown query parameter {name!r}: pendingworkloads takes limit and offset")
        if len(values) != 1:
            raise bad_request(f"query parameter {name!r} is given {len(values)} times; give it once")
        try:
            value = int(values[0])
        except ValueError:
            raise bad_request(f"query parameter {name!r} must be a whole number, got {values[0]!r}") from None
        if value < 0:
            raise bad_request(f"query parameter {name!r} must not be negative, got {value}")
        got[name] = value
    return got["limit"] or DEFAULT_LIMIT, got["offset"]


_REFS: dict[tuple[str, str, str, str, int], bytes] = {}
"""`remember`'s answers, by what they are made of: each pending row's metadata as JSON text. It is the same from one
request to the next, and making it (a SHA-1, a formatted time) was 3/4 of a 10,000-row list's time
(bench/bench_visibility.py). Kept as bytes, not dicts: 10,000 kept dicts (and the 30,000 inside them) made the
cyclic garbage collector walk the fold's heap during a list, and their JSON was encoded again at every request; bytes
are neither tracked by the collector nor encoded again. Dropped whole when it grows past `REFS_BOUND` (jobs long
gone, or a backlog deeper than it: then it is made again): about 500 bytes an entry, so 25 MB at most."""
REFS_BOUND = 50_000

_encode = msgspec.json.Encoder(order="sorted").encode  # the server's encoder (`codec.encode_json`): same bytes


def _metadata(wl: Workload) -> Obj:
    api_version, group = owner_kind(wl.kind)
    name = workload_name(wl.name, wl.uid, wl.kind, group)
    return {
        "name": name,
        "namespace": wl.namespace,
        "creationTimestamp": rfc3339(wl.created_at),
        "ownerReferences": [{"apiVersion": api_version, "kind": wl.kind, "name": wl.name, "uid": wl.uid}],
    }


def remember(wl: Workload) -> bytes:
    """A pending item's metadata as JSON (sorted keys, as the server encodes): the Workload's name as admitd writes
    it (`status_objects.workload_name`, Kueue's), namespace, creationTimestamp (the Job's creation: the Workload is
    made from it at once) and the owner reference to the Job. Made once and kept (`_REFS`): `admitd run
    --visibility` calls it for each Job it observes and for every pending one at start, so that no list has to
    make its rows' metadata."""
    key = (wl.kind, wl.namespace, wl.name, wl.uid, wl.created_at)
    got = _REFS.get(key)
    if got is None:
        got = _encode(_metadata(wl))
        if len(_REFS) >= REFS_BOUND:
            _REFS.clear()
        _REFS[key] = got
    return got


_ITEM = b'{"localQueueName":%b,"metadata":%b,"positionInClusterQueue":%d,"positionInLocalQueue":%d,"priority":%d}'
_SUMMARY = (
    b'{"apiVersion":' + _encode(API_VERSION) + b',"items":[',
    b'],"kind":' + _encode(SUMMARY_KIND) + b',"metadata":{}}',
)


class _Names:
    """Each LocalQueue's `localQueueName` as JSON, made once per request."""

    def __init__(self) -> None:
        self._made: dict[str, bytes] = {}

    def __call__(self, local_queue: str) -> bytes:
        got = self._made.get(local_queue)
        if got is None:
            got = self._made[local_queue] = _encode(local_queue.partition("/")[2])
        return got


def _summary(items: list[bytes]) -> bytes:
    return _SUMMARY[0] + b",".join(items) + _SUMMARY[1]


def cluster_queue_pending_json(view: ClusterView, name: str, limit: int = DEFAULT_LIMIT, offset: int = 0) -> bytes:
    """`clusterqueues/NAME/pendingworkloads` as the server sends it: rows offset..offset+limit of the ClusterQueue's
    pending order, each assembled from its kept metadata (no dict is made per row)."""
    if name not in view.cluster_queues:
        raise not_found("clusterqueue", name)
    rows = view.pending_by_cq.get(name)
    items: list[bytes] = []
    if rows:
        per_lq: dict[str, int] = {}
        lq_name = _Names()
        for index, p in enumerate(islice(rows, offset + limit)):
            lq = p.local_queue
            position_in_lq = per_lq.get(lq, 0)
            per_lq[lq] = position_in_lq + 1
            if index >= offset:
                items.append(_ITEM % (lq_name(lq), remember(p.workload), index, position_in_lq, p.priority))
    return _summary(items)


def local_queue_pending_json(
    view: ClusterView, namespace: str, name: str, limit: int = DEFAULT_LIMIT, offset: int = 0
) -> bytes:
    """`namespaces/NS/localqueues/NAME/pendingworkloads` as the server sends it: the LocalQueue's rows of its
    ClusterQueue's order, with their positions in the ClusterQueue. A LocalQueue whose ClusterQueue does not exist
    has none (as Kueue's)."""
    key = f"{namespace}/{name}"
    lq = view.local_queues.get(key)
    if lq is None:
        raise not_found("localqueue", name)
    items: list[bytes] = []
    skipped = 0
    encoded = _encode(name)
    for index, p in enumerate(view.pending_by_cq.get(lq.cluster_queue) or ()):
        if len(items) >= limit:
            break
        if p.local_queue != key:
            continue
        if skipped < offset:
            skipped += 1
        else:
            items.append(_ITEM % (encoded, remember(p.workload), index, len(items) + offset, p.priority))
    return _summary(items)


_decode = msgspec.json.Decoder().decode


def cluster_queue_pending(view: ClusterView, name: str, limit: int = DEFAULT_LIMIT, offset: int = 0) -> Obj:
    """`cluster_queue_pending_json`'s answer as objects."""
    got: Obj = _decode(cluster_queue_pending_json(view, name, limit, offset))
    return got


def local_queue_pending(
    view: ClusterView, namespace: str, name: str, limit: int = DEFAULT_LIMIT, offset: int = 0
) -> Obj:
    """`local_queue_pending_json`'s answer as objects."""
    got: Obj = _decode(local_queue_pending_json(view, namespace, name, limit, offset))
    return got


def summary(items: list[Obj]) -> Obj:
    return {"kind": SUMMARY_KIND, "apiVersion": API_VERSION, "metadata": {}, "items": items}


# --- discovery: what the aggregator and kubectl read before they ask -------------------------------------------

RESOURCES: tuple[tuple[str, str, bool, tuple[str, ...]], ...] = (  # name, singularName, namespaced, verbs
    ("clusterqueues", "clusterqueue", False, ()),
    ("clusterqueues/pendingworkloads", "", False, ("get",)),
    ("localqueues", "localqueue", True, ()),
    ("localqueues/pendingworkloads", "", True, ("get",)),
)


def api_group() -> Obj:
    version = {"groupVersion": API_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def api_group_list() -> Obj:
    """`/apis` of this server: its one group (legacy discovery; the aggregator falls back to it)."""
    group = api_group()
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def api_resource_list() -> Obj:
    """`/apis/visibility.kueue.x-k8s.io/v1beta1`, as Kueue's generic API server lists its four storages (the
    availability check of the APIService gets this path)."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [
            {"name": n, "singularName": s, "namespaced": ns, "kind": SUMMARY_KIND, "verbs": list(verbs)}
            for n, s, ns, verbs in RESOURCES
        ],
    }


def route(path: str) -> tuple[str, str | None, str] | None:
    """`(resource, namespace, name)` of a pendingworkloads path under ROOT ("clusterqueues" or "localqueues"), or
    None for any other path."""
    if not path.startswith(ROOT + "/"):
        return None
    parts = path[len(ROOT) + 1 :].split("/")
    if len(parts) == 3 and parts[0] == "clusterqueues" and parts[2] == "pendingworkloads" and parts[1]:
        return "clusterqueues", None, parts[1]
    if (
        len(parts) == 5
        and parts[0] == "namespaces"
        and parts[2] == "localqueues"
        and parts[4] == "pendingworkloads"
        and parts[1]
        and parts[3]
    ):
        return "localqueues", parts[1], parts[3]
    return None


def pending_json(
    view: ClusterView, resource: str, namespace: str | None, name: str, params: Mapping[str, list[str]]
) -> bytes:
    """The answer to a routed request (`route`) as the server sends it: the summary's JSON, or a VisibilityError to
    render as a Status."""
    limit, offset = options(params)
    if resource == "clusterqueues":
        return cluster_queue_pending_json(view, name, limit, offset)
    assert namespace is not None
    return local_queue_pending_json(view, namespace, name, limit, offset)


def pending(view: ClusterView, resource: str, namespace: str | None, name: str, params: Mapping[str, list[str]]) -> Obj:
    """`pending_json`'s answer as objects."""
    got: Obj = _decode(pending_json(view, resource, namespace, name, params))
    return got
