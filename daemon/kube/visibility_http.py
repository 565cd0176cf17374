"""Kueue's visibility API served as an aggregated API server (`admitd run --visibility`), on the webhook's HTTPS port.

The kube-apiserver's aggregation layer proxies `/apis/visibility.kueue.x-k8s.io/...` to admitd (the APIService
v1beta1.visibility.kueue.x-k8s.io, config/components/visibility) as every aggregated API server is called:

- **Who calls**: the front proxy connects with a client certificate signed by the requestheader client CA, which
  the API server publishes in the ConfigMap kube-system/extension-apiserver-authentication
  (requestheader-client-ca-file, -allowed-names, -username-headers, -group-headers, -extra-headers-prefix). admitd
  reads it at start, and its TLS server trusts that CA alone for client certificates (CERT_OPTIONAL: the webhook
  callers present none). Only on a connection whose certificate verified, with an allowed common name (any, when
  the list is empty, as Kubernetes), are the user, group and extra headers read; any other request is a 401 Status.
- **What they may read**: a SubjectAccessReview for the user, as Kueue's RBAC names it: `get` on
  `clusterqueues/pendingworkloads` (name: the ClusterQueue) or `localqueues/pendingworkloads` (namespace, name)
  in group visibility.kueue.x-k8s.io; discovery paths as non-resource URLs (system:discovery grants them). Not
  allowed: a 403 Status naming the user and the resource. Answers are cached for a few seconds per user and
  attributes (allowed 10 s, denied 2 s).
- **The answer**: `daemon.kube.visibility` on the live fold's view (`State.view()`, the fold the answers API reads
  at the present and `admitd pending` shows), built on the event loop between two appends, so it is one state.

admitd patches the APIService's caBundle with its serving CA (`register_apiservice`), as it patches its webhook
configurations: the leader, at start and after a certificate change.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from daemon.domain.events import Event, JobObserved
from daemon.domain.view import ClusterView
from daemon.eventlog.codec import encode_json
from daemon.kube import visibility as vis
from daemon.kube.client import JSON_PATCH, KubeClient, Obj
from daemon.kube.errors import KubeError, NotFound
from daemon.kube.guard import user_may
from daemon.obs.logging import get_logger

log = get_logger("admitd.visibility")

AUTH_CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
APISERVICE_NAME = f"{vis.VERSION}.{vis.GROUP}"
APISERVICE_PATH = f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE_NAME}"
ALLOWED_TTL_S = 10.0
DENIED_TTL_S = 2.0
FIELD_MANAGER = "admitd"


class VisibilityConfigError(Exception):
    """The front proxy's settings cannot be read or used: one line saying what and what to do."""


@dataclass(frozen=True, slots=True)
class FrontProxy:
    """The requestheader settings of the API server (extension-apiserver-authentication)."""

    ca_pem: bytes
    allowed_names: frozenset[str]
    username_headers: tuple[str, ...]
    group_headers: tuple[str, ...]
    extra_prefixes: tuple[str, ...]


def _string_list(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    raw = data.get(key)
    if raw in (None, ""):
        return ()
    try:
        got = json.loads(raw)
    except (TypeError, ValueError):
        raise VisibilityConfigError(
            f"ConfigMap kube-system/extension-apiserver-authentication: {key} is not a JSON list of strings: {raw!r}"
        ) from None
    if not isinstance(got, list) or not all(isinstance(s, str) for s in got):
        raise VisibilityConfigError(
            f"ConfigMap kube-system/extension-apiserver-authentication: {key} is not a JSON list of strings: {raw!r}"
        )
    return tuple(got)


def front_proxy_of(configmap: Obj) -> FrontProxy:
    """The settings in the ConfigMap as the API server writes them (each list a JSON string)."""
    data = configmap.get("data") or {}
    ca = str(data.get("requestheader-client-ca-file") or "")
    if "BEGIN CERTIFICATE" not in ca:
        raise VisibilityConfigError(
            "ConfigMap kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: the API "
            "server runs without the aggregation layer (start kube-apiserver with --requestheader-client-ca-file "
            "and --proxy-client-cert-file), so it cannot call admitd's visibility API"
        )
    users = _string_list(data, "requestheader-username-headers")
    if not users:
        raise VisibilityConfigError(
            "ConfigMap kube-system/extension-apiserver-authentication has no requestheader-username-headers: start "
            "kube-apiserver with --requestheader-username-headers=X-Remote-User"
        )
    return FrontProxy(
        ca_pem=ca.encode(),
        allowed_names=frozenset(_string_list(data, "requestheader-allowed-names")),
        username_headers=users,
        group_headers=_string_list(data, "requestheader-group-headers"),
        extra_prefixes=_string_list(data, "requestheader-extra-headers-prefix"),
    )


async def load_front_proxy(client: KubeClient) -> FrontProxy:
    try:
        configmap = await client.request("GET", AUTH_CONFIGMAP)
    except NotFound:
        raise VisibilityConfigError(
            "ConfigMap kube-system/extension-apiserver-authentication does not exist: this API server publishes no "
            "front-proxy settings, so --visibility cannot authenticate its calls"
        ) from None
    except KubeError as e:
        raise VisibilityConfigError(
            f"cannot read ConfigMap kube-system/extension-apiserver-authentication ({e}): bind admitd to the Role "
            "extension-apiserver-authentication-reader in kube-system (config/components/visibility)"
        ) from e
    return front_proxy_of(configmap)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...]
    extra: Mapping[str, tuple[str, ...]]


def common_name(peercert: Mapping[str, Any] | None) -> str | None:
    """The subject's CN of a verified peer certificate (ssl's getpeercert() dict), or None without one."""
    if not peercert:
        return None
    for rdn in peercert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def identify(proxy: FrontProxy, peercert: Mapping[str, Any] | None, headers: Iterable[tuple[str, str]]) -> User:
    """The user the front proxy vouches for, read from the headers (every (name, value) pair, repeated names kept)
    only on a connection whose client certificate the TLS handshake verified against the requestheader CA (the only
    CA the server trusts for clients) and whose common name is allowed; a 401 VisibilityError otherwise."""
    cn = common_name(peercert)
    if cn is None:
        raise vis.VisibilityError(
            401, "Unauthorized", "Unauthorized: no client certificate of the API server's front proxy"
        )
    if proxy.allowed_names and cn not in proxy.allowed_names:
        raise vis.VisibilityError(
            401, "Unauthorized", f"Unauthorized: client certificate {cn!r} is not in requestheader-allowed-names"
        )
    pairs = [(k.lower(), v) for k, v in headers]

    def values(header: str) -> list[str]:
        wanted = header.lower()
        return [v for k, v in pairs if k == wanted]

    name = next((v for h in proxy.username_headers for v in values(h) if v), None)
    if name is None:
        raise vis.VisibilityError(401, "Unauthorized", "Unauthorized: the front proxy named no user")
    groups = tuple(g for h in proxy.group_headers for g in values(h))
    extra: dict[str, list[str]] = {}
    for key, value in pairs:
        for prefix in proxy.extra_prefixes:
            if key.startswith(prefix.lower()) and len(key) > len(prefix):
                extra.setdefault(key[len(prefix) :], []).append(value)
    return User(name, groups, {k: tuple(v) for k, v in extra.items()})


def resource_attributes(resource: str, namespace: str | None, name: str) -> dict[str, str]:
    """What RBAC decides a pendingworkloads request by, as Kueue's ClusterRoles name it."""
    attrs = {
        "verb": "get",
        "group": vis.GROUP,
        "version": vis.VERSION,
        "resource": resource,
        "subresource": "pendingworkloads",
        "name": name,
    }
    if namespace is not None:
        attrs["namespace"] = namespace
    return attrs


class Authorizer:
    """SubjectAccessReviews for the front proxy's users, cached briefly per user and attributes."""

    def __init__(self, client: KubeClient, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.clock = client, clock
        self._cache: dict[str, tuple[float, bool]] = {}
        self.reviews = 0  # SubjectAccessReviews sent (tests read it)

    async def allowed(self, user: User, resource: Mapping[str, str] | None, path: str) -> bool:
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "extra": {k: list(v) for k, v in user.extra.items()},
        }
        if resource is not None:
            spec["resourceAttributes"] = dict(resource)
        else:
            spec["nonResourceAttributes"] = {"path": path, "verb": "get"}
        key = json.dumps(spec, sort_keys=True)
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        self.reviews += 1
        allowed = await user_may(self.client, spec)
        if len(self._cache) > 4096:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        self._cache[key] = (now + (ALLOWED_TTL_S if allowed else DENIED_TTL_S), allowed)
        return allowed


def forbidden(user: User, resource: Mapping[str, str] | None, path: str) -> vis.VisibilityError:
    """apimachinery's Forbidden Status, as an API server words it."""
    if resource is None:
        return vis.VisibilityError(403, "Forbidden", f'forbidden: User "{user.name}" cannot get path "{path}"')
    what = f"{resource['resource']}/{resource['subresource']}"
    where = f' in the namespace "{resource["namespace"]}"' if "namespace" in resource else " at the cluster scope"
    return vis.VisibilityError(
        403,
        "Forbidden",
        f'{what}.{vis.GROUP} "{resource["name"]}" is forbidden: User "{user.name}" cannot get resource '
        f'"{resource["resource"]}/{resource["subresource"]}" in API group "{vis.GROUP}"{where}',
        {"name": resource["name"], "group": vis.GROUP, "kind": resource["resource"]},
    )


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(body=encode_json(body), status=status, content_type="application/json")


def add_routes(
    app: web.Application,
    view: Callable[[], ClusterView],
    proxy: FrontProxy,
    authorizer: Authorizer,
    requested: Callable[[str, int, float], None] | None = None,
) -> None:
    """GET /apis, /apis/visibility.kueue.x-k8s.io, its v1beta1 discovery and the two pendingworkloads paths on
    `app` (the webhook server's). `view` is the live fold's view at the moment of the request."""
    group_root = f"/apis/{vis.GROUP}"
    discovery: dict[str, Callable[[], Obj]] = {
        "/apis": vis.api_group_list,
        group_root: vis.api_group,
        vis.ROOT: vis.api_resource_list,
    }

    async def answer(request: web.Request) -> web.Response:
        path = request.path.rstrip("/") or "/"
        peercert = request.transport.get_extra_info("peercert") if request.transport is not None else None
        user = identify(proxy, peercert, request.headers.items())
        routed = vis.route(path)
        if routed is None and path not in discovery:
            raise vis.VisibilityError(404, "NotFound", f"the server could not find the requested resource ({path})")
        attrs = resource_attributes(*routed) if routed is not None else None
        try:
            allowed = await authorizer.allowed(user, attrs, path)
        except KubeError as e:
            log.warning("cannot ask the API server whether a caller may read", path=path, error=str(e))
            raise vis.VisibilityError(503, "ServiceUnavailable", f"cannot authorize the request: {e}") from e
        if not allowed:
            raise forbidden(user, attrs, path)
        if routed is None:
            if request.query:
                raise vis.bad_request(f"{path} takes no query parameters")
            return _json(discovery[path]())
        params = {name: request.query.getall(name) for name in request.query}
        body = vis.pending_json(view(), *routed, params)  # assembled from each row's kept JSON
        return web.Response(body=body, status=200, content_type="application/json")

    async def handle(request: web.Request) -> web.Response:
        started, status = time.perf_counter(), 500
        try:
            try:
                response = await answer(request)
            except vis.VisibilityError as e:
                response = _json(e.status(), e.code)
            status = response.status
            return response
        finally:
            if requested is not None:
                requested("/apis/" + vis.GROUP, status, time.perf_counter() - started)

    app.router.add_get("/apis", handle)
    app.router.add_get(group_root, handle)
    app.router.add_get(group_root + "/{tail:.*}", handle)


def remember_observed(event: Event, _seq: int) -> None:
    """The recorder's listener: each Job observed gets its pending row's metadata made now (`visibility.remember`),
    off the path of the list that first shows it."""
    if isinstance(event, JobObserved):
        vis.remember(event.workload)


def remember_pending(view: ClusterView) -> int:
    """`visibility.remember` for the pending workloads of a replayed fold, up to what is kept; how many."""
    count = 0
    for rows in view.pending_by_cq.values():
        for p in rows:
            if count >= vis.REFS_BOUND:
                return count
            vis.remember(p.workload)
            count += 1
    return count


def ca_bundle_patch(current: Obj, ca_bundle: bytes) -> list[dict[str, Any]] | None:
    """The JSON patch that sets the APIService's caBundle (and turns insecureSkipTLSVerify off); None when it has
    it already."""
    spec = current.get("spec") or {}
    wanted = base64.b64encode(ca_bundle).decode()
    if spec.get("caBundle") == wanted and not spec.get("insecureSkipTLSVerify"):
        return None
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/name", "value": APISERVICE_NAME},
        {"op": "add", "path": "/spec/caBundle", "value": wanted},
    ]
    if spec.get("insecureSkipTLSVerify"):
        ops.append({"op": "add", "path": "/spec/insecureSkipTLSVerify", "value": False})
    return ops


async def register_apiservice(client: KubeClient, ca_bundle: bytes) -> bool:
    """Patch the APIService v1beta1.visibility.kueue.x-k8s.io (shipped by config/components/visibility) with the
    serving CA; False (logged) when it is not installed, so that the API server does not route to admitd yet."""
    try:
        current = await client.request("GET", APISERVICE_PATH)
    except NotFound:
        log.warning(
            "APIService not installed: the visibility API is served, but the API server does not route to it; "
            "apply config/components/visibility",
            apiservice=APISERVICE_NAME,
        )
        return False
    ops = ca_bundle_patch(current, ca_bundle)
    if ops is not None:
        await client.request(
            "PATCH", APISERVICE_PATH, body=ops, content_type=JSON_PATCH, params={"fieldManager": FIELD_MANAGER}
        )
    service = (current.get("spec") or {}).get("service") or {}
    log.info("APIService trusts this daemon's CA", apiservice=APISERVICE_NAME, service=service, patched=bool(ops))
    return True
