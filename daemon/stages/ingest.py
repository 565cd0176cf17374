"""watch -> log: append what the Cluster observed, then tell the admit stage that the fold changed."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from daemon.domain.events import Event
from daemon.stages.ports import Observed
from daemon.stages.recorder import Recorder


class Ingest:
    """Drains the inbox into one append per step (a burst of watch events costs one batch in the log)."""

    name = "ingest"

    def __init__(self, recorder: Recorder, on_changed: Callable[[int], None]) -> None:
        self.recorder = recorder
        self.on_changed = on_changed
        self.inbox: deque[Observed] = deque()
        self.wake = asyncio.Event()

    def put(self, observed: Observed) -> None:
        self.inbox.append(observed)
        self.wake.set()

    def has_work(self) -> bool:
        return bool(self.inbox)

    async def step(self) -> None:
        items: list[tuple[Event, int | None]] = []
        while self.inbox:
            observed = self.inbox.popleft()
            items.extend((event, observed.cause) for event in observed.events)
        if items:
            seqs = await self.recorder.append(items)
            self.on_changed(seqs[-1])
