"""The second feeder: projections fed from the log, with a `State` of their own.

The first is live: `daemon.stages.recorder.Recorder.projections`, applied as events are appended, with the
recorder's own state. Both apply every projection to an event before the state folds it (`views.projection`). This
is the one place outside `daemon.eventlog.replay` that decodes rows of the log. `CatchingUp` joins the two: what
counts from the log's first event, folded from the log until it has caught up with a live state that began at a
snapshot, then fed live.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from daemon.domain.events import EVENT_TYPES, Event
from daemon.domain.state import State
from daemon.eventlog import LogReader, codec
from daemon.views.dispatch import Handler, events_with_at, join
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

    def ticks(self) -> Sequence[Callable[[int], None]]:
        """What takes each new recorded_at: the next events were recorded then, another time than the last event's
        (called once per time; none for a part that keeps only the events' own times)."""
        ...

    def counted(self, by_type: Mapping[type[Event], int]) -> None:
        """The feed's count of the events it gave, by event class, from the log's first event (kept up to date by
        the feed, one increment an event): for a part that counts events by type, so that its handlers need not
        (a part added with `add`; a late part is given it too, and must not read it as counting from its start)."""
        ...

    def tables(self) -> Sequence[Mapping[type[Event], Handler | None]]:
        """Its handlers by event type (`views.dispatch`), in the order they are to be called."""
        ...

    def clocks(self) -> Sequence[Callable[[int], None]]:
        """What takes each new time of the events (`at`, the log's time of the fact; `dispatch.events_with_at`),
        before the handlers of the first event that carries it: called once per time, not per event, so each
        must do nothing when given the time it was given last."""
        ...

    def attach(self, state: State, queues: Queues) -> None:
        """Read `state` and `queues` from now on (equal to the ones read so far)."""
        ...


class Late(Timed, Protocol):
    """A part that counts from a point of the log, not its first event (the answers' windows: its last 8 days)."""

    def plan(self, reader: LogReader | None, upto: int) -> int:
        """Where it begins in a fold from the log's first event to `upto` (at most): after this seq (0: at once)."""
        ...

    def begin_on(self, state: State) -> None:
        """Begin on `state`, the fold's state after the seq `plan` said."""
        ...


Folded = Callable[[Event, int, State], None]
"""A reader told of each event after a state folded it, with that state (`CatchingUp.add_folded`)."""


class CatchingUp:
    """Projections that count from the log's first event (Kueue's counters, the plots' series) or from a point of it
    (`Late`: the answers' windows), in a process whose state began at a snapshot: the live feeder's, once they have
    caught up with it.

    They are folded from the log with a `State` and a `Queues` of their own up to `upto`, the seq the live state had
    when they were made, then through the events the live feeder gave `apply` meanwhile (kept until then), and
    then `hand_over` moves them onto the live state and queues (equal to their own by then: snapshot + tail ==
    full replay), and `apply` feeds them as events come. From then on the process holds one fold, not two, and the
    log was read once at the start for all of them. Each event goes only to the handlers its type has
    (`views.dispatch`: one lookup an event, no call for a type no part handles), each event counted by its class
    (`by_type`, which a part reads through `counted`), each new recorded_at once to every part's `ticks` (the
    feeder calls `tick` once a batch, before its events), each new time of the events (`at`, of an event that has
    one) once to every part's `clocks`.

    The live feeder's `Queues` (the status writer's, `live_queues`) is fed by `apply` too, after the parts (which
    read it as of the event): its handlers are joined to theirs once handed over, so that the recorder makes one
    call and one lookup an event for every view (the feeder does not apply it itself).

    Besides the projections (told of an event before the state folds it), readers of the fold told of it after,
    with the state (`add_folded`: the web view's timeline of the records, `daemon.query.moment.Timeline`): with the
    catch-up's own state as it folds, then, once handed over, with the live state, when the live feeder has folded
    the event (`folded`, a listener of the recorder's: it is called after the state applied the event). Each event
    reaches them once, in the log's order: before the hand-over the live feeder's events are kept and folded here,
    and `folded` ignores them; the hand-over runs between two of its events.

    Threads: `apply`, `folded` and `hand_over` run on the live feeder's thread (the recorder's event loop);
    `catch_up` on a worker thread, folding under `lock` (readers of the projections hold it until the hand-over)."""

    BUFFER_LEFT = 1_000  # `catch_up` returns once fewer events than this wait for it: `hand_over` folds those

    def __init__(self, db: Path, live_state: State, live_queues: Queues) -> None:
        self.db = db
        self.live_state = live_state
        self.live_queues = live_queues
        self.upto = live_state.seq
        self.state: State | None = State(pending_indexes=False)
        self.queues: Queues | None = Queues(self.state)
        self.parts: list[Timed] = []
        self.late: list[Late] = []
        self.lock = threading.Lock()
        self.live = False
        self.rows_read = 0  # rows of the log decoded by `catch_up` (one fold: each at most once)
        self._batch_at: int | None = None  # the recorded_at of the live feeder's batch (`tick`)
        self._kept: list[tuple[Event, int, int]] = []
        self._kept_lock = threading.Lock()
        self._stop = threading.Event()
        self._begun: list[Timed] = []
        self._starts: list[tuple[int, Late]] = []  # (seq after which it begins, the part), by seq, not yet begun
        # `_joined`'s: per event class, whether its `at` goes to the clocks, and its handlers (none until joined)
        self._table: dict[type[Event], tuple[bool, tuple[Handler, ...]]] = dict.fromkeys(EVENT_TYPES, (False, ()))
        # The same with the live queues' handlers last, for `apply` once handed over.
        self._live_table: dict[type[Event], tuple[bool, tuple[Handler, ...]]] = self._table
        self._queues_table = live_queues.handlers()
        self.by_type: dict[type[Event], int] = dict.fromkeys(EVENT_TYPES, 0)  # every event given, by class
        self._ticks: tuple[Callable[[int], None], ...] = ()
        self._at: int | None = None  # the recorded_at the parts were last told of
        self._clocks: tuple[Callable[[int], None], ...] = ()
        self._event_at: int | None = None  # the event time `_clocks` were last told of
        self._folded: tuple[Folded, ...] = ()

    def stop(self) -> None:
        """Make a `catch_up` under way return at its next chunk (the process is stopping)."""
        self._stop.set()

    def add(self, part: Timed) -> None:
        """A projection made on `self.state` and `self.queues` (before `catch_up`), counting from the log's start."""
        self._before_catch_up()
        self.parts.append(part)
        part.counted(self.by_type)
        self._joined(part)

    def add_late(self, part: Late) -> None:
        """A projection that begins where its `plan` says, on the catch-up's state there (before `catch_up`)."""
        self._before_catch_up()
        self.late.append(part)
        part.counted(self.by_type)

    def add_folded(self, reader: Folded) -> None:
        """A reader told of each event from the log's first after the state folded it, with that state (before
        `catch_up`; the live feeder's listener is then `folded`)."""
        self._before_catch_up()
        self._folded = (*self._folded, reader)

    def _before_catch_up(self) -> None:
        if self.live or (self.state is not None and self.state.seq) or self._starts or self.rows_read:
            raise RuntimeError("projections are added before the catch-up begins")

    def _joined(self, part: Timed) -> None:
        self._begun.append(part)
        self._ticks = tuple(tick for p in self._begun for tick in p.ticks())
        self._clocks = tuple(c for p in self._begun for c in p.clocks())
        timed = events_with_at() if self._clocks else frozenset()
        # One lookup an event: whether its type's `at` goes to the clocks, and its handlers (none for most types).
        tables = [t for p in self._begun for t in p.tables()]
        self._table = {t: (t in timed, hs) for t, hs in join(tables).items()}
        self._live_table = {t: (t in timed, hs) for t, hs in join([*tables, self._queues_table]).items()}
        self._event_at = None  # the part just begun has been told of no time yet (the others ignore a repeat)

    def tick(self, recorded_at: int) -> None:
        """The live feeder's, once a batch, before its events: they were recorded at `recorded_at`. The hand-over
        runs between two batches."""
        self._batch_at = recorded_at
        if self.live:
            self._tell_ticks(recorded_at)

    def _tell_ticks(self, recorded_at: int) -> None:
        """The parts' ticks told of `recorded_at` when it is not the time they were told last (`_fold` does the same
        inline, at every event it folds)."""
        if recorded_at != self._at:
            self._at = recorded_at
            for tick in self._ticks:
                tick(recorded_at)

    def apply(self, event: Event, seq: int) -> None:
        """The live feeder's: before the hand-over each event is kept for `catch_up` (and the live queues take it);
        after it, applied to the parts and the live queues."""
        if self.live:
            t = type(event)
            self.by_type[t] += 1
            timed, handlers = self._live_table[t]
            if timed and event.at != self._event_at:  # type: ignore[union-attr]
                self._move_clocks(event.at)  # type: ignore[union-attr]
            if handlers:  # most events have none: no iterator made for them
                for h in handlers:
                    h(event, seq)
            return
        self.live_queues.apply(event, seq)
        at = self._batch_at
        assert at is not None, "tick before the first batch's events"
        with self._kept_lock:
            self._kept.append((event, seq, at))

    def _move_clocks(self, when: int) -> None:
        self._event_at = when
        for clock in self._clocks:
            clock(when)

    def folded(self, event: Event, seq: int) -> None:
        """The live feeder's, after its state folded `event`: the `add_folded` readers told, once handed over (before,
        the event was kept by `apply` and is folded by `catch_up` or `hand_over`, which tell them)."""
        if self.live:
            state = self.live_state
            for reader in self._folded:
                reader(event, seq, state)

    def _fold(self, event: Event, seq: int, at: int) -> None:
        state, queues = self.state, self.queues
        assert state is not None and queues is not None
        if at != self._at:
            self._at = at
            for tick in self._ticks:
                tick(at)
        t = type(event)
        self.by_type[t] += 1
        timed, handlers = self._table[t]
        if timed:
            when: int = event.at  # type: ignore[union-attr]
            if when != self._event_at:
                self._event_at = when
                for clock in self._clocks:
                    clock(when)
        for h in handlers:
            h(event, seq)
        queues.apply(event, seq)
        state.apply(event, seq)
        for reader in self._folded:
            reader(event, seq, state)

    def _plan(self, reader: LogReader | None) -> None:
        """Each late part's start; those at the log's start begun at once."""
        state = self.state
        assert state is not None
        starts: list[tuple[int, Late]] = []
        for part in self.late:
            seq = part.plan(reader, self.upto)
            if not 0 <= seq <= self.upto:
                raise RuntimeError(f"{type(part).__name__} begins after seq {seq}, outside the fold's 0..{self.upto}")
            starts.append((seq, part))
        starts.sort(key=lambda s: s[0])
        self._starts = []
        for seq, part in starts:
            if seq == state.seq:
                part.begin_on(state)
                self._joined(part)
            else:
                self._starts.append((seq, part))

    def _begin_due(self) -> None:
        """The late parts that begin after the state's seq, begun on it (the fold stops there for them)."""
        state = self.state
        assert state is not None
        while self._starts and self._starts[0][0] == state.seq:
            part = self._starts.pop(0)[1]
            part.begin_on(state)
            self._joined(part)

    def catch_up(self) -> int:
        """Fold the log up to `upto`, then the events kept meanwhile until few are left; how many in all (sooner
        after `stop`)."""
        state = self.state
        assert state is not None
        n = 0
        decode = codec.decode
        if not self.upto:
            with self.lock:
                self._plan(None)
        else:
            with LogReader(self.db) as reader:
                with self.lock:
                    self._plan(reader)
                while state.seq < self.upto:
                    if self._stop.is_set():
                        return n
                    folded = 0
                    # A chunk ends where a late part begins: it is begun on the state there, between two chunks.
                    stop = min([self.upto, *(s for s, _ in self._starts)])
                    with self.lock:
                        for seq, at, type_, version, payload in reader.iter_timed_payloads(state.seq, chunk=CHUNK):
                            if seq > stop:
                                break
                            raw = payload if isinstance(payload, bytes) else payload.encode()
                            self._fold(decode(type_, version, raw, seq=seq), seq, at)
                            folded += 1
                            if folded == CHUNK or seq == stop:
                                break
                        self.rows_read += folded
                        self._begin_due()
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
            if self._starts:
                raise RuntimeError(f"{[type(p).__name__ for _, p in self._starts]} never began: the fold ended first")
            for p in self._begun:
                p.attach(self.live_state, self.live_queues)
            self.live = True
            if self._batch_at is not None:  # a batch begun (`tick`) with none of its events kept yet: its time
                self._tell_ticks(self._batch_at)
            self.state = self.queues = None  # the second fold, no longer needed
