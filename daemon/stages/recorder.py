"""Append, then fold: the one place where events enter the log and the state, for every stage and both worlds.

The fold is applied as soon as the events are submitted (seqs follow submission order, so they are known at once):
a cycle that runs next sees its own decisions, and an admission counts against quota from the moment it is decided.
What the outside world may see waits for durability: `append` returns only once the batch is fsynced when
`wait_durable` is set (the daemon); the simulator, whose world cannot be harmed, does not wait: every few hundred
appends it gives the writer a turn of the event loop and checks the batches written meanwhile, so the log is
written on the writer's thread while the simulation goes on (event order and seqs are the same either way). It
waits only when a snapshot is due (a snapshot's seq must be in the log) or when the backlog grows too long. A due
snapshot needs a moment with nothing in flight: once one is due, a new append first waits for the batches in flight
and the snapshot (stages appending one after the other under load otherwise never leave such a moment: one
snapshot in 400 events where eight were due, tests/integration/test_stages.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from daemon.domain.events import Event
from daemon.domain.state import State
from daemon.eventlog import EventStore, save_snapshot
from daemon.obs.logging import get_logger
from daemon.stages.ports import Clock

SNAPSHOT_EVERY = 20_000  # events between state snapshots
_CATCH_UP_EVERY = 256  # appends between two looks at the log by a non-waiting recorder
_BACKLOG_MAX = 8 * _CATCH_UP_EVERY  # unwritten appends beyond which a non-waiting recorder waits for the oldest

Listener = Callable[[Event, int], None]
Projection = Callable[[Event, int], None]  # a `daemon.views` projection's `apply`: called before the state folds

log = get_logger("admitd.recorder")


class LogDiverged(RuntimeError):
    """The log gave other seqs than this process expected: another process wrote to it. Fatal."""


class Recorder:
    def __init__(
        self,
        store: EventStore,
        state: State,
        clock: Clock,
        *,
        wait_durable: bool,
        snapshot_every: int = SNAPSHOT_EVERY,
    ) -> None:
        self.store = store
        self.state = state
        self.clock = clock
        self.wait_durable = wait_durable
        self.snapshot_every = snapshot_every
        self.listeners: list[Listener] = []  # told of each event after the state folded it
        # `daemon.views` projections (their `apply`), the live feeder: each event before the state folds it, so that
        # a projection reads the record as of the event, as it does when it follows the log (`views.follow`).
        self.projections: list[Projection] = []
        # Told of each batch's recorded_at before its events go to the projections (`views.follow.CatchingUp.tick`:
        # what keeps a time of its own per batch, not per event).
        self.batches: list[Callable[[int], None]] = []
        self.appended = 0
        self._unawaited: dict[int, tuple[asyncio.Future[list[int]], int]] = {}  # first seq -> (future, count)
        self._snapshotting = False
        self._last_snapshot_seq = state.seq
        self._since_look = 0  # appends since the non-waiting recorder last looked at the log

    def _snapshot_due(self) -> bool:
        return self.state.seq - self._last_snapshot_seq >= self.snapshot_every

    async def append(self, items: Sequence[tuple[Event, int | None]]) -> list[int]:
        """Log and fold `items` (event, cause); return their seqs."""
        if not items:
            return []
        if self._snapshot_due() and not self._snapshotting:
            # A snapshot is due: it needs a moment with nothing in flight, which stages appending one after the
            # other under load may never leave. New batches wait for the ones in flight (and the snapshot).
            await self.catch_up()
        first = self.store.expected_seq
        recorded_at = self.clock.now()  # the store writes it with each event of the batch
        future = self.store.submit(items, recorded_at=recorded_at)
        for batch in self.batches:
            batch(recorded_at)
        apply, listeners, projections = self.state.apply, self.listeners, self.projections
        for offset, (event, _) in enumerate(items):
            for project in projections:
                project(event, first + offset)
            apply(event, first + offset)
            for listener in listeners:
                listener(event, first + offset)
        self.appended += len(items)
        self._unawaited[first] = (future, len(items))
        if self.wait_durable:
            await self._settle(first)
        else:
            self._since_look += 1
            if self._since_look >= _CATCH_UP_EVERY:
                self._since_look = 0
                await self._look()
        return list(range(first, first + len(items)))

    async def _look(self) -> None:
        """A non-waiting recorder's periodic look at the log: when a snapshot is due, wait for everything and take
        it; else give the writer one turn of the event loop (it takes what was submitted, or moves its commit on a
        step, and its thread then works while the caller goes on), settle what it has written, and wait only if the
        backlog is too long. Waiting at every look instead left the writer's thread idle while the simulation ran:
        2.2 s of a 10,000-job run were spent waiting (bench/RESULTS.md)."""
        if self._snapshot_due():
            await self.catch_up()
            return
        await asyncio.sleep(0)
        unawaited = self._unawaited
        while unawaited:
            first = next(iter(unawaited))  # the oldest: batches are written in order
            if len(unawaited) <= _BACKLOG_MAX and not unawaited[first][0].done():
                break
            await self._settle(first)  # checks the seqs; waits only when the backlog is too long

    async def catch_up(self) -> None:
        """Wait until everything appended so far is durable; write a snapshot when one is due."""
        for first in list(self._unawaited):
            await self._settle(first)

    async def _settle(self, first: int) -> None:
        # Several stages may wait for the same batch: each awaits it (shielded, so a cancelled waiter does not
        # cancel the write), and the entry leaves the table only once it is durable.
        entry = self._unawaited.get(first)
        if entry is None:
            return
        future, count = entry
        seqs = await asyncio.shield(future)
        if seqs != list(range(first, first + count)):
            raise LogDiverged(
                f"{self.store.path}: the log gave seqs {seqs[:3]}..., this process expected {first}..: "
                "another process wrote to it"
            )
        self._unawaited.pop(first, None)
        # A snapshot is taken only when every folded event is durable, so that its seq exists in the log.
        if self._snapshot_due() and not self._unawaited and not self._snapshotting:
            self._snapshotting = True
            try:
                kept = await save_snapshot(self.store, self.state)
                self._last_snapshot_seq = self.state.seq
                log.debug("snapshot written", seq=self.state.seq, kept=kept)
            finally:
                self._snapshotting = False
