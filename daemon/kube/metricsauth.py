"""Who may read /metrics (`admitd run --metrics-auth`): the caller's bearer token is checked by the API server, as
controller-runtime's `filters.WithAuthenticationAndAuthorization` does for Kueue's metrics endpoint.

A TokenReview (authentication.k8s.io/v1) says who the token belongs to; a SubjectAccessReview
(authorization.k8s.io/v1) asks whether that user may `get` the non-resource URL `/metrics`, which RBAC grants with a
ClusterRole rule `nonResourceURLs: ["/metrics"], verbs: ["get"]` (config/rbac/metrics_reader_role.yaml). Answers
are cached per token for a short while, so a scrape every few seconds costs the API server two requests a minute.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from daemon.kube.client import KubeClient
from daemon.kube.errors import KubeError
from daemon.kube.guard import user_may
from daemon.obs.logging import get_logger

log = get_logger(__name__)

ALLOWED_TTL_S = 60.0
DENIED_TTL_S = 10.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """The HTTP status to answer (200 to go on, 401 no or bad token, 403 not allowed, 503 could not ask) and why."""

    status: int
    reason: str


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class MetricsAuth:
    def __init__(self, client: KubeClient, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._cache: dict[bytes, tuple[float, Verdict]] = {}

    async def check(self, authorization: str | None, path: str = "/metrics") -> Verdict:
        """May the bearer of `authorization` get the non-resource URL `path` (/metrics, or an answer's path)?"""
        token = bearer_token(authorization)
        if token is None:
            return Verdict(401, "a bearer token is required (Authorization: Bearer <token>)")
        key = hashlib.sha256(token.encode() + b"\0" + path.encode()).digest()  # never keep the token itself
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            verdict = await self._ask(token, path)
        except KubeError as e:  # not cached: the next scrape asks again
            log.warning("cannot check a caller with the API server", path=path, error=str(e))
            return Verdict(503, f"cannot check the token with the API server: {e}")
        if len(self._cache) > 1024:  # a bound against many distinct tokens: drop what has expired
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        self._cache[key] = (now + (ALLOWED_TTL_S if verdict.status == 200 else DENIED_TTL_S), verdict)
        return verdict

    async def _ask(self, token: str, path: str) -> Verdict:
        review = await self.client.request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return Verdict(401, "the token is not valid" + (f": {status['error']}" if status.get("error") else ""))
        user = status.get("user") or {}
        name = str(user.get("username", ""))
        allowed = await user_may(
            self.client,
            {
                "user": name,
                "uid": user.get("uid", ""),
                "groups": user.get("groups") or [],
                "extra": user.get("extra") or {},
                "nonResourceAttributes": {"path": path, "verb": "get"},
            },
        )
        if not allowed:
            return Verdict(403, f"{name} may not get {path} (RBAC: nonResourceURLs {path}, verb get)")
        return Verdict(200, name)
