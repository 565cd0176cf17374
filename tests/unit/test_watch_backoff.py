"""The Reflector's retries after an API server outage: the Job watch is back within 2 s of the server.

Real: the Reflector (daemon/kube/watch.py), its backoff and its jitter. Faked: the API server (a client whose list
and watch fail while the server is "down" and whose watch, once accepted, stays open until the next outage) and
time (virtual seconds; the Reflector's sleeps move them), so minutes of outages take no real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from daemon.kube.errors import Temporary
from daemon.kube.watch import Reflector, Resource


class Time:
    def __init__(self) -> None:
        self.t = 0.0

    async def sleep(self, seconds: float) -> None:
        self.t += seconds
        await asyncio.sleep(0)


class FlakyServer:
    """Down during each (start, end) outage, in virtual seconds; an accepted watch breaks when the next one starts.
    `opened_at` lists when each watch was accepted."""

    def __init__(self, time: Time, outages: list[tuple[float, float]], status: list[int | None]) -> None:
        self.time = time
        self.outages = outages
        self.status = status  # per outage, None: the server cannot be reached (connection refused); else its answer
        self.opened_at: list[float] = []

    def _down(self) -> int | bool | None:
        """False while the server is up, else what it answers (None: nothing, connections refused)."""
        return next((self.status[i] for i, (a, b) in enumerate(self.outages) if a <= self.time.t < b), False)

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        if (down := self._down()) is not False:
            raise Temporary(method, path, down, "connection refused")
        return {"kind": "JobList", "apiVersion": "batch/v1", "items": [], "metadata": {"resourceVersion": "1"}}

    async def stream(
        self, path: str, params: dict[str, str], *, on_open: Callable[[], None] | None = None, **_: Any
    ) -> AsyncIterator[tuple[str, Any]]:
        if (down := self._down()) is not False:
            raise Temporary("WATCH", path, down, "connection refused")
        if on_open is not None:
            on_open()
        self.opened_at.append(self.time.t)
        # A quiet cluster: no event; the stream stays open until the next outage breaks it.
        following = [a for a, _ in self.outages if a > self.time.t]
        if not following:
            await asyncio.Event().wait()  # open for good
        self.time.t = min(following)
        raise Temporary("WATCH", path, None, "stream broke: ServerDisconnectedError")
        yield "", {}  # an async generator


async def _reconnects(
    outages: list[tuple[float, float]], status: list[int | None], seed: int
) -> tuple[list[float], int]:
    time = Time()
    server = FlakyServer(time, outages, status)
    reflector = Reflector(
        server,  # type: ignore[arg-type]
        Resource("jobs", "/apis/batch/v1/jobs"),
        on_event=lambda *_: None,
        on_listed=lambda _: None,
        seed=seed,
        sleep=time.sleep,
    )
    task = asyncio.create_task(reflector.run())
    try:
        async with asyncio.timeout(10):
            while len(server.opened_at) < len(outages) + 1:  # noqa: ASYNC110 (a plain condition, not an event)
                await asyncio.sleep(0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return server.opened_at, reflector.restarts


@pytest.mark.parametrize("seed", range(20))
async def test_the_job_watch_is_back_within_2_s_of_the_api_server_after_each_outage(seed: int) -> None:
    # Three outages of the kind a restarted kube-apiserver makes (connections refused): 8 s, 5 s after an hour of
    # a healthy stream, and 20 s. Before the fix the backoff kept growing across outages (back 14.6 s late).
    outages = [(10.0, 18.0), (3618.0, 3623.0), (7223.0, 7243.0)]
    opened, _ = await _reconnects(outages, [None] * len(outages), seed)
    assert opened[0] == 0.0
    lateness = [back - end for back, (_, end) in zip(opened[1:], outages, strict=True)]
    assert all(0 <= late <= 2.0 for late in lateness), f"the watch came back {lateness} s after the server"


async def test_an_overloaded_server_is_backed_off_from_more_and_more() -> None:
    """A server that answers 503 is not hammered once a second: the backoff grows past the unreachable cap."""
    opened, restarts = await _reconnects([(10.0, 130.0)], [503], seed=1)
    assert restarts < 20, f"{restarts} retries in 2 minutes of 503s"  # about 11; once a second would be 120
    assert opened[1] - 130.0 <= 30 * 1.25


@pytest.mark.parametrize("seed", range(10))
async def test_an_overload_an_hour_ago_does_not_slow_the_next_recovery(seed: int) -> None:
    """The backoff starts again from 0.2 s once a watch is accepted: two minutes of 503s an hour ago leave no trace
    when a restarting API server answers 503 for 1.5 s."""
    outages = [(10.0, 130.0), (3730.0, 3731.5)]
    opened, _ = await _reconnects(outages, [503, 503], seed)
    assert 0 <= opened[2] - 3731.5 <= 2.0, f"back {opened[2] - 3731.5:.1f} s after the server"
