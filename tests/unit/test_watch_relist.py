"""`Reflector.relist`: a standby taking the Lease over lists every job kind again before it decides.

Real: the Reflector (daemon/kube/watch.py). Faked: the API server (a list that counts, a watch that stays open)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from daemon.kube.watch import Reflector, Resource


class QuietServer:
    """Lists one job at resourceVersion `lists`; a watch stays open (no event) until cancelled."""

    def __init__(self) -> None:
        self.lists = 0
        self.watches: list[str] = []  # the resourceVersion each watch started from
        self.closed = 0
        self.watching = asyncio.Condition()

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.lists += 1
        item = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": str(self.lists)}}
        return {
            "kind": "JobList",
            "apiVersion": "batch/v1",
            "items": [item],
            "metadata": {"resourceVersion": str(self.lists)},
        }

    async def stream(
        self, path: str, params: dict[str, str], *, on_open: Callable[[], None] | None = None, **_: Any
    ) -> AsyncIterator[tuple[str, Any]]:
        self.watches.append(params["resourceVersion"])
        async with self.watching:
            self.watching.notify_all()
        try:
            await asyncio.Event().wait()
        finally:
            self.closed += 1
        yield "", {}  # an async generator


async def test_relist_lists_again_closes_the_open_watch_and_watches_on_from_the_new_list() -> None:
    server = QuietServer()
    listed: list[list[dict[str, Any]]] = []
    reflector = Reflector(
        server,  # type: ignore[arg-type]
        Resource("jobs", "/apis/batch/v1/jobs"),
        on_event=lambda *_: None,
        on_listed=listed.append,
    )
    task = asyncio.create_task(reflector.run())
    try:
        async with asyncio.timeout(5):
            await reflector.synced.wait()
            async with server.watching:
                await server.watching.wait_for(lambda: len(server.watches) == 1)
            await reflector.relist()  # returns once the new list was handed over
            assert server.lists == 2 and len(listed) == 2
            assert listed[1][0]["metadata"]["resourceVersion"] == "2"
            async with server.watching:
                await server.watching.wait_for(lambda: len(server.watches) == 2)
        assert server.watches == ["1", "2"]  # the second watch follows the second list
        assert server.closed == 1  # the first stream was closed, not left open beside the second
        assert reflector.restarts == 0  # a relist asked for is no failure
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_relist_before_the_first_list_returns_after_a_list() -> None:
    server = QuietServer()
    reflector = Reflector(
        server,  # type: ignore[arg-type]
        Resource("jobs", "/apis/batch/v1/jobs"),
        on_event=lambda *_: None,
        on_listed=lambda _: None,
    )
    relisted = asyncio.create_task(reflector.relist())
    task = asyncio.create_task(reflector.run())
    try:
        async with asyncio.timeout(5):
            await relisted
        assert server.lists >= 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
