"""Who sees what in the web view: a `Policy` turns a request into a `Viewer` (or a refusal), and the pages ask the
viewer which namespaces' jobs it may see and whether it may see the queues' figures.

The web package knows no Kubernetes: `admitd run --ui` hands it `daemon.kube.webauth.KubePolicy` (TokenReview and
SubjectAccessReview); `admitd ui` on a local file hands it `Everyone` (the owner's file); tests hand it `Tokens`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web


@dataclass(frozen=True, slots=True)
class Viewer:
    """`queues`: may see queue-level figures (usage, counts, reasons by count). `namespaces`: of these namespaces,
    the ones whose jobs it may see."""

    queues: bool
    namespaces: Callable[[Iterable[str]], Awaitable[frozenset[str]]]


class Policy(Protocol):
    async def viewer(self, request: web.Request) -> Viewer | web.StreamResponse:
        """The viewer behind `request`, or the response that refuses it (401 without credentials...)."""
        ...


async def _all(namespaces: Iterable[str]) -> frozenset[str]:
    return frozenset(namespaces)


class Everyone:
    """Everyone sees everything: `admitd ui` on a log file, bound to 127.0.0.1 by default."""

    async def viewer(self, request: web.Request) -> Viewer:
        return Viewer(True, _all)


TOKEN_COOKIE = "admitd-ui-token"
"""Where the sign-in form (`{root}/login`) keeps a browser's token: HttpOnly, SameSite=Strict, the view's path only."""


def bearer(request: web.Request) -> str | None:
    """The request's bearer token (the Authorization header, else the sign-in cookie), or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        return token
    cookie = request.cookies.get(TOKEN_COOKIE, "").strip()
    return cookie or None


class Tokens:
    """A fixed table: bearer token -> the namespaces it may see (`"*"`: all) and whether it may see the queues. A
    request without a known token is refused (401)."""

    def __init__(self, table: Mapping[str, tuple[bool, frozenset[str]]]) -> None:
        self.table = dict(table)

    async def viewer(self, request: web.Request) -> Viewer | web.StreamResponse:
        token = bearer(request)
        got = self.table.get(token) if token is not None else None
        if got is None:
            return web.Response(status=401, text="a bearer token is needed\n", headers={"WWW-Authenticate": "Bearer"})
        queues, allowed = got

        async def namespaces(names: Iterable[str]) -> frozenset[str]:
            return frozenset(n for n in names if "*" in allowed or n in allowed)

        return Viewer(queues, namespaces)
