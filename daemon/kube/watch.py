"""List, then watch: one Reflector per resource keeps a stream of changes flowing, whatever the API server does.

It lists (in pages), hands the whole list to `on_listed`, then watches from the list's resourceVersion with
bookmarks. A stream that ends is resumed from the last resourceVersion seen; a 410 Gone (the version was compacted
away) means a fresh list, whose differences the observer appends; any other failure is retried with jittered
exponential backoff, which starts again from its first step once a list or a watch succeeds (the API server
accepted it), so one outage's backoff never delays the recovery from the next. While the API server cannot be
reached at all (down, restarting) the retries stay at most a second apart, as client-go's reflector retries a
refused connection, so a watch is back within about a second of the server; an answer that says the server is
overloaded or failing (429, 5xx) backs off to 30 s. Every restart is logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from daemon.kube.client import KubeClient, Obj
from daemon.kube.errors import Gone, KubeError, Permanent, Temporary
from daemon.obs.logging import get_logger
from daemon.stages.actuate import jittered_backoff

log = get_logger("admitd.watch")

WATCH_TIMEOUT_S = 290  # the server closes a watch after this; we resume from the last resourceVersion
PAGE = 500


@dataclass(frozen=True, slots=True)
class Resource:
    """A watched collection: `path` lists it in every namespace, e.g. /apis/batch/v1/jobs."""

    name: str
    path: str
    field_selector: str = ""  # e.g. the Events of one reason only


UNREACHABLE_CAP_S = 1.0  # a watch's retries while the API server cannot be reached at all


def backoff_s(attempt: int, rng: random.Random, *, cap: float = 30.0) -> float:
    """A watch's (or a registration's) retry: from 0.2 s, capped at `cap` (30 s), ±25%."""
    return jittered_backoff(attempt, rng, first=0.2, cap=cap, jitter=0.25)


class Reflector:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        on_event: Callable[[str, Obj], None],
        on_listed: Callable[[list[Obj]], None],
        seed: int | None = None,
        on_restart: Callable[[str], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.client = client
        self.resource = resource
        self.on_event = on_event
        self.on_listed = on_listed
        self.synced = asyncio.Event()  # set after the first full list
        self.restarts = 0
        self.on_restart = on_restart  # called with the resource's name at every restart (the daemon's metrics)
        self.resource_version: str | None = None
        self.watch_timeout_s = WATCH_TIMEOUT_S
        self._rng = random.Random(seed)
        self._sleep = sleep  # the tests' virtual time
        self._attempt = 0  # failures since the last list or watch the API server accepted
        self._relist_wanted = asyncio.Event()
        self._listed = asyncio.Event()  # set after each full list

    async def _list(self) -> str:
        items: list[Obj] = []
        selector = {"fieldSelector": self.resource.field_selector} if self.resource.field_selector else {}
        params = {"limit": str(PAGE), **selector}
        while True:
            page = await self.client.request("GET", self.resource.path, params=params)
            # List items come without apiVersion and kind; the list names them (kind "JobList" holds Jobs).
            api_version, kind = page.get("apiVersion", ""), str(page.get("kind", "")).removesuffix("List")
            for item in page.get("items") or []:
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                items.append(item)
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                self.on_listed(items)
                return str(meta.get("resourceVersion", ""))
            params = {"limit": str(PAGE), "continue": token, **selector}

    async def run(self) -> None:
        while True:
            try:
                if self.resource_version is None:
                    self.resource_version = await self._list()
                    self._attempt = 0
                    self.synced.set()
                    self._listed.set()
                if await self._watch_unless_relisting():
                    self._attempt = 0  # the server ended a healthy stream: resume at once
            except Gone as e:
                self._restarted()
                log.info("watch expired; listing again", resource=self.resource.name, error=str(e))
                self.resource_version = None
            except (Temporary, Permanent) as e:
                self._restarted()
                unreachable = isinstance(e, Temporary) and e.status is None
                delay = backoff_s(self._attempt, self._rng, cap=UNREACHABLE_CAP_S if unreachable else 30.0)
                self._attempt += 1
                level = log.error if isinstance(e, Permanent) else log.warning
                level("watch failed; retrying", resource=self.resource.name, error=str(e), retry_in_s=round(delay, 2))
                await self._sleep(delay)

    async def relist(self) -> None:
        """List again now, and watch on from that list; returns once the list was handed over. A standby that
        takes the Lease over does this before it decides: its watch may lag, or be down and retrying, and a job the
        old leader started just before must be seen running (and adopted), not admitted a second time."""
        self._listed.clear()
        self._relist_wanted.set()
        await self._listed.wait()

    async def _watch_unless_relisting(self) -> bool:
        """Watch until the stream ends (True) or a relist is asked for (False: the stream is closed, the next round
        lists). The stream's errors are raised."""
        watch = asyncio.ensure_future(self._watch())
        wanted = asyncio.ensure_future(self._relist_wanted.wait())
        try:
            await asyncio.wait([watch, wanted], return_when=asyncio.FIRST_COMPLETED)
        finally:
            wanted.cancel()
            if not watch.done():
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
        if self._relist_wanted.is_set():
            self._relist_wanted.clear()
            self.resource_version = None
            if watch.cancelled() or watch.exception() is None:
                return False
        watch.result()  # the stream's error, if it had one
        return True

    def _opened(self) -> None:
        """The API server accepted the watch: the next failure is retried from the first step of the backoff."""
        self._attempt = 0

    def _restarted(self) -> None:
        self.restarts += 1
        if self.on_restart is not None:
            self.on_restart(self.resource.name)

    async def _watch(self) -> None:
        params = {
            "resourceVersion": self.resource_version or "",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout_s),
        }
        if self.resource.field_selector:
            params["fieldSelector"] = self.resource.field_selector
        stream = self.client.stream(
            self.resource.path, params, server_timeout_s=self.watch_timeout_s, on_open=self._opened
        )
        async for type_, obj in stream:
            meta = obj.get("metadata") or {}
            if type_ == "ERROR":
                code = obj.get("code")
                message = f"{obj.get('reason', '')}: {obj.get('message', '')}"
                if code == 410:
                    raise Gone("WATCH", self.resource.path, 410, message)
                raise Temporary("WATCH", self.resource.path, code if isinstance(code, int) else None, message)
            rv = meta.get("resourceVersion")
            if rv:
                self.resource_version = str(rv)
            if type_ in ("ADDED", "MODIFIED", "DELETED"):
                self.on_event(type_, obj)


__all__ = ["KubeError", "Reflector", "Resource", "backoff_s"]
