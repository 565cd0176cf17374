"""A writer that appends fixed-size batches forever; test_eventlog kills it with SIGKILL mid-batch."""

from __future__ import annotations

import asyncio
import sys

from daemon.domain.events import JobFinished
from daemon.eventlog import EventStore


async def main(path: str, batch: int) -> None:
    store = await EventStore.open(path, max_batch=batch)
    n = 0
    print("ready", flush=True)
    while True:
        # Long subjects make each batch take a while, so a kill lands inside one.
        events = [JobFinished(job=f"ns/{'x' * 400}-{n + i}", at=n + i) for i in range(batch)]
        await store.append(events)
        n += batch


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
