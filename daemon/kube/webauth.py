"""Who sees what in the web view of `admitd run --ui`: the caller's bearer token (the Authorization header, or the
cookie the view's sign-in form sets) is checked by the API server, as `metricsauth` does for /metrics.

A TokenReview says who the token belongs to. Then SubjectAccessReviews, as `kubectl auth can-i` would ask them:
- queue-level figures (usage, counts, reasons by count) to a user who may `list` kueue.x-k8s.io `clusterqueues`;
- a namespace's jobs (names, reasons, timelines, their events) to a user who may `get` kueue.x-k8s.io `workloads`
  in that namespace (Kueue's own per-namespace object for a job; KEP-11143 authorizes KueueViz the same way).
Verdicts are cached per token and question for a short while (allowed 60 s, denied 10 s), so a page that polls
costs the API server a few requests a minute, not one per namespace per poll.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from daemon.kube.client import KubeClient
from daemon.kube.errors import KubeError
from daemon.kube.guard import user_may
from daemon.obs.logging import get_logger
from daemon.web.policy import Viewer, bearer

log = get_logger(__name__)

ALLOWED_TTL_S = 60.0
DENIED_TTL_S = 10.0
KUEUE_GROUP = "kueue.x-k8s.io"


@dataclass(frozen=True, slots=True)
class User:
    name: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, Any]


class KubePolicy:
    """`daemon.web.policy.Policy` by TokenReview and SubjectAccessReview."""

    def __init__(self, client: KubeClient, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._users: dict[bytes, tuple[float, User | None]] = {}
        self._verdicts: dict[tuple[bytes, str, str, str], tuple[float, bool]] = {}
        self.requests = 0  # API requests made (for tests and logs)

    async def viewer(self, request: web.Request) -> Viewer | web.StreamResponse:
        token = bearer(request)
        if token is None:
            return web.Response(status=401, text="a bearer token is required\n", headers={"WWW-Authenticate": "Bearer"})
        key = hashlib.sha256(token.encode()).digest()  # never keep the token itself
        try:
            user = await self._user(key, token)
            if user is None:
                return web.Response(status=401, text="the token is not valid\n", headers={"WWW-Authenticate": "Bearer"})
            queues = await self._may(key, user, "list", "clusterqueues", "")
        except KubeError as e:
            log.warning("web: cannot check a viewer with the API server", error=str(e))
            return web.Response(status=503, text=f"cannot check the token with the API server: {e}\n")

        async def namespaces(names: Iterable[str]) -> frozenset[str]:
            out = set()
            for ns in sorted(set(names)):
                try:
                    if await self._may(key, user, "get", "workloads", ns):
                        out.add(ns)
                except KubeError as e:  # not shown: the next page asks again
                    log.warning("web: cannot check a namespace with the API server", namespace=ns, error=str(e))
            return frozenset(out)

        return Viewer(queues, namespaces)

    def _prune(self, now: float) -> None:
        if len(self._users) > 1024:
            self._users = {k: v for k, v in self._users.items() if v[0] > now}
        if len(self._verdicts) > 8192:
            self._verdicts = {k: v for k, v in self._verdicts.items() if v[0] > now}

    async def _user(self, key: bytes, token: str) -> User | None:
        now = self.clock()
        cached = self._users.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        self.requests += 1
        review = await self.client.request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status = review.get("status") or {}
        user: User | None = None
        if status.get("authenticated"):
            u = status.get("user") or {}
            user = User(
                str(u.get("username", "")), str(u.get("uid", "")), tuple(u.get("groups") or ()), u.get("extra") or {}
            )
        self._prune(now)
        self._users[key] = (now + (ALLOWED_TTL_S if user is not None else DENIED_TTL_S), user)
        return user

    async def _may(self, key: bytes, user: User, verb: str, resource: str, namespace: str) -> bool:
        now = self.clock()
        ck = (key, verb, resource, namespace)
        cached = self._verdicts.get(ck)
        if cached is not None and cached[0] > now:
            return cached[1]
        attributes: dict[str, str] = {"group": KUEUE_GROUP, "resource": resource, "verb": verb}
        if namespace:
            attributes["namespace"] = namespace
        self.requests += 1
        allowed = await user_may(
            self.client,
            {
                "user": user.name,
                "uid": user.uid,
                "groups": list(user.groups),
                "extra": user.extra,
                "resourceAttributes": attributes,
            },
        )
        self._prune(now)
        self._verdicts[ck] = (now + (ALLOWED_TTL_S if allowed else DENIED_TTL_S), allowed)
        return allowed
