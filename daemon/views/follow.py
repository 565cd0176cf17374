"""The second feeder: projections fed from the log, with a `State` of their own.

The first is live: `daemon.stages.recorder.Recorder.projections`, applied as events are appended, with the
recorder's own state. Both apply every projection to an event before the state folds it (`views.projection`). This
is the one place outside `daemon.eventlog.replay` that decodes rows of the log. `CatchingUp` joins the two: what
counts from the log's first event, folded from the log until it has caught up with a live state that began at a
snapshot, then fed live.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from daemon.domain.events import Event
from daemon.domain.state import State
from daemon.eventlog import LogReader, codec
from daemon.views.projection import Projection
from daemon.views.queues import Queues

CHUNK = 20_000  # rows read from SQLite at a time


class Following:
    """`state` and `projections` fed together: each event goes to every projection, then to the state."""

    def __init__(self, state: State, projections: Sequence[Projection]) -> None:
        self.state = state
        self.projections = tuple(projections)

    @property
    def seq(self) -> int:
        return self.state.seq

    def apply(self, event: Event, seq: int) -> None:
        for p in self.projections:
            p.apply(event, seq)
        self.state.apply(event, seq)

    def follow(self, reader: LogReader, limit: int | None = None) -> int:
        """Apply the events of `reader` after the last one applied, at most `limit` of them; return how many."""
        n = 0
        decode = codec.decode
        apply = self.apply
        rows = reader.iter_payloads(self.state.seq, chunk=min(limit, CHUNK) if limit else CHUNK)
        for seq, type_, version, payload in rows:
            apply(decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=seq), seq)
            n += 1
            if n == limit:
                break
        return n


class Timed(Protocol):
    """A projection that also takes each event's recorded_at, and can be moved onto another (equal) state."""

    def apply(self, event: Event, seq: int, recorded_at: int) -> None: ...

    def attach(self, state: State, queues: Queues) -> None:
        """Read `state` and `queues` from now on (equal to the ones read so far)."""
        ...


class CatchingUp:
    """Projections that count from the log's first event (Kueue's counters, the plots' series) in a process whose
    state began at a snapshot: the live feeder's, once they have caught up with it.

    They are folded from the log with a `State` and a `Queues` of their own up to `upto`, the seq the live state had
    when they were made, then through the events the live feeder gave `apply` meanwhile (kept until then), and
    then `hand_over` moves them onto the live state and queues (equal to their own by then: snapshot + tail ==
    full replay), and `apply` feeds them as events come. From then on the process holds one fold, not two.

    Threads: `apply` and `hand_over` run on the live feeder's thread (the recorder's event loop); `catch_up` on
    a worker thread, folding under `lock` (readers of the projections hold it until the hand-over)."""

    BUFFER_LEFT = 1_000  # `catch_up` returns once fewer events than this wait for it: `hand_over` folds those

    def __init__(
        self,
        db: Path,
        live_state: State,
        live_queues: Queues,
        recorded_at: Callable[[], int],
    ) -> None:
        self.db = db
        self.live_state = live_state
        self.live_queues = live_queues
        self.upto = live_state.seq
        self.state: State | None = State(pending_indexes=False)
        self.queues: Queues | None = Queues(self.state)
        self.parts: list[Timed] = []
        self.lock = threading.Lock()
        self.live = False
        self._recorded_at = recorded_at
        self._kept: list[tuple[Event, int, int]] = []
        self._kept_lock = threading.Lock()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Make a `catch_up` under way return at its next chunk (the process is stopping)."""
        self._stop.set()

    def add(self, part: Timed) -> None:
        """A projection made on `self.state` and `self.queues` (before `catch_up`)."""
        if self.live or (self.state is not None and self.state.seq):
            raise RuntimeError("projections are added before the catch-up begins")
        self.parts.append(part)

    def apply(self, event: Event, seq: int) -> None:
        """The live feeder's: before the hand-over each event is kept for `catch_up`; after it, applied."""
        at = self._recorded_at()
        if self.live:
            for p in self.parts:
                p.apply(event, seq, at)
            return
        with self._kept_lock:
            self._kept.append((event, seq, at))

    def _fold(self, event: Event, seq: int, at: int) -> None:
        assert self.state is not None and self.queues is not None
        for p in self.parts:
            p.apply(event, seq, at)
        self.queues.apply(event, seq)
        self.state.apply(event, seq)

    def catch_up(self) -> int:
        """Fold the log up to `upto`, then the events kept meanwhile until few are left; how many in all (sooner
        after `stop`)."""
        state = self.state
        assert state is not None
        n = 0
        decode = codec.decode
        if self.upto:
            with LogReader(self.db) as reader:
                while state.seq < self.upto:
                    if self._stop.is_set():
                        return n
                    folded = 0
                    with self.lock:
                        for seq, at, type_, version, payload in reader.iter_timed_payloads(state.seq, chunk=CHUNK):
                            if seq > self.upto:
                                break
                            raw = payload if isinstance(payload, bytes) else payload.encode()
                            self._fold(decode(type_, version, raw, seq=seq), seq, at)
                            folded += 1
                            if folded == CHUNK:
                                break
                    if not folded:
                        raise RuntimeError(
                            f"{self.db}: the log ends at seq {state.seq}, the live state was at {self.upto}"
                        )
                    n += folded
        while not self._stop.is_set():
            with self._kept_lock:
                kept, self._kept = self._kept, []
            with self.lock:
                for event, seq, at in kept:
                    self._fold(event, seq, at)
            n += len(kept)
            if len(kept) < self.BUFFER_LEFT:
                break
        return n

    def hand_over(self) -> None:
        """Fold what was kept since `catch_up` returned and move the projections onto the live state (on the live
        feeder's thread, so that no event comes meanwhile)."""
        with self.lock:
            with self._kept_lock:
                kept, self._kept = self._kept, []
            for event, seq, at in kept:
                self._fold(event, seq, at)
            assert self.state is not None
            if self.state.seq != self.live_state.seq:
                raise RuntimeError(
                    f"caught up to seq {self.state.seq}, the live state is at {self.live_state.seq}: an event was "
                    "folded by one and not the other"
                )
            for p in self.parts:
                p.attach(self.live_state, self.live_queues)
            self.live = True
            self.state = self.queues = None  # the second fold, no longer needed
