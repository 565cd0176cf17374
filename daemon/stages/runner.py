"""Two ways to run the same stages: step by step (the simulator) or as concurrent loops (the daemon).

`run_stepped` gives each stage a turn in a fixed order (ingest, actuate, admit) and lets the world move on only when
none has work, so a simulation is deterministic and replays exactly. `run_concurrently` runs each stage as its own
loop under a guard: an unexpected crash of any loop is logged and ends the whole run with an error, because restart
(replay) is the recovery path; the caller exits non-zero.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

from daemon.domain.model import Millis
from daemon.obs.logging import get_logger
from daemon.stages.ports import Clock

log = get_logger("admitd.stages")


class Stage(Protocol):
    name: str
    wake: asyncio.Event

    def has_work(self) -> bool: ...

    async def step(self) -> None: ...


class StageCrashed(RuntimeError):
    """A long-running task ended with an unexpected exception; the process must exit non-zero."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(f"{name} crashed: {type(error).__name__}: {error}")
        self.name = name
        self.error = error


async def run_stepped(stages: Sequence[Stage], advance: Callable[[], Awaitable[bool]]) -> None:
    """Give the first stage that has work a step, in order; when none has, `advance` the world (False: done)."""
    while True:
        for stage in stages:
            if stage.has_work():
                await stage.step()
                break
        else:
            if not await advance():
                return


async def _loop(stage: Stage, clock: Clock, next_due: Callable[[], Millis | None] | None) -> None:
    while True:
        while stage.has_work():
            await stage.step()
        stage.wake.clear()
        if stage.has_work():  # work that arrived during the last step, or a retry that came due
            continue
        due = next_due() if next_due is not None else None
        timeout = None if due is None else max(0.0, (due - clock.now()) / 1000)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stage.wake.wait(), timeout)


async def guarded(name: str, work: Coroutine[Any, Any, None]) -> None:
    """Run `work`; an unexpected exception is logged with its traceback and re-raised as StageCrashed."""
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.exception("task crashed; exiting so that a restart replays the log", task=name)
        raise StageCrashed(name, e) from e


async def run_concurrently(
    stages: Sequence[Stage],
    clock: Clock,
    *,
    others: Sequence[tuple[str, Coroutine[Any, Any, None]]] = (),
    due: dict[str, Callable[[], Millis | None]] | None = None,
) -> None:
    """Run every stage (and `others`, e.g. watches and servers) until one crashes or the caller cancels.

    The first crash cancels the rest and is raised as StageCrashed.
    """
    due = due or {}
    try:
        async with asyncio.TaskGroup() as group:
            for stage in stages:
                group.create_task(guarded(stage.name, _loop(stage, clock, due.get(stage.name))), name=stage.name)
            for name, work in others:
                group.create_task(guarded(name, work), name=name)
    except* StageCrashed as crashed:
        raise crashed.exceptions[0] from None
