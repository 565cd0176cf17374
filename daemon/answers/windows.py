"""The daemon's `preemptions` and `usage` answers from live projections: the preemption ledger and the usage figures
of the log's last `RETENTION_MS`, kept by the recorder as it appends (`daemon.views.ledger`, `daemon.views.usage`),
so that an answer over 7 days costs the window's entries, not a fold of the window's events.

Two feeders, as every projection of `daemon.views` has: at the daemon's start the projections are a part of its one
catch-up fold (`views.follow.CatchingUp.add_late`, in a worker thread, with the metrics' counters): begun on that
fold's state where `RETENTION_MS` before now begins (`plan`, `begin_on`), folded with it up to the state the daemon
replayed and through the recorder's events kept meanwhile, then handed the daemon's own state (`attach`), and from
then on fed live with the rest of the feed. (`build` and `take_over` make them from a file on their own, for the
benchmark and tests.) Until they are ready, and for a window that starts before what they hold, the answer comes
from the file as the CLI's does.

The recorded runtimes of the same span are kept too (`daemon.views.runtimes`): a dry run (`simulate`) on the
daemon's state draws from them.

Where a live answer differs from the CLI's on the same file (each said in README "Served by the daemon"):
- usage: a window starts at the last kept moment at or before the one asked for (each minute of the last day,
  each hour before that; `views.usage.UsageWindows`), and `since` says which; the whole log when the projections
  began at the log's first event and the window starts before it.
- preemptions: a victim whose pods started before the window is charged from its pods' start (the ledger saw it),
  where the CLI, starting its fold at the window, charges it from its admission.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from daemon.domain import events as ev
from daemon.domain.state import Phase, State
from daemon.eventlog import EventLogError, LogReader
from daemon.eventlog.codec import encode_json
from daemon.query import ledger as ledger_mod
from daemon.query import usage as usage_mod
from daemon.query.moment import Clock, clock_of, state_at
from daemon.views.dispatch import Handler, events_with_at, join
from daemon.views.follow import Following
from daemon.views.ledger import Preemption, Preemptions
from daemon.views.runtimes import Runtimes
from daemon.views.usage import DAY_MS, HOUR_MS, MINUTE_MS, UsageWindows

if TYPE_CHECKING:  # a read command imports this module: the engine (daemon.domain.eta's) must not load with it
    from daemon.domain.eta import Class

RETENTION_MS = 8 * DAY_MS
"""How far back the live projections reach: a week's window and a day to spare."""


class Windows:
    """The ledger and the usage windows, fed as a recorder's projection (`apply`, before the state folds), or as a
    part of the daemon's one fold (`views.follow.CatchingUp.add_late`: `plan`, `begin`, `handlers`, `attach`)."""

    def __init__(
        self,
        *,
        retention_ms: int = RETENTION_MS,
        bucket_ms: int = MINUTE_MS,
        recent_ms: int = DAY_MS,
        coarse_ms: int = HOUR_MS,
        hold: bool = True,
        now: Callable[[], int] | None = None,
    ) -> None:
        """`hold`: keep the events `apply` is given until `take_over` (built from the file meanwhile), and answer
        nothing until then or until `attach` (a part of the daemon's catch-up); False: apply them as they come,
        once `begin` has made the projections. `now`: the daemon's clock, milliseconds (default the wall clock):
        where a wall-clock log's retention begins."""
        self.retention_ms, self.bucket_ms, self.recent_ms, self.coarse_ms = (
            retention_ms,
            bucket_ms,
            recent_ms,
            coarse_ms,
        )
        self.ledger: Preemptions | None = None
        self.usage: UsageWindows | None = None
        self.runtimes: Runtimes | None = None  # the runs finished since the start (the dry run draws from them)
        self.whole = False  # the projections began at the log's first event
        self.ledger_from = 0  # the earliest preemption time the ledger still holds all of
        self._seq = 0  # before `begin`
        # The recorder's events while the projections are built (None: fed as they come).
        self._buffer: list[tuple[ev.Event, int]] | None = [] if hold else None
        self._prune_at = 0
        self._rows: dict[int, tuple[int | None, bytes]] = {}  # seq -> (its rerun_after, its row's JSON)
        self._rows_clock = ""
        self._now = now or _now_ms
        self._plan: tuple[int, bool] | None = None  # (origin, whole) once `plan` has read the log
        self._clock: Clock | None = None
        self._table: dict[type[ev.Event], Handler | None] = {}
        self._subs: dict[type[ev.Event], tuple[Handler, ...]] = {}
        self._parts: list[dict[type[ev.Event], Handler | None]] = []  # the projections' tables, in their order

    @property
    def ready(self) -> bool:
        return self._buffer is None and self.ledger is not None

    @property
    def seq(self) -> int:
        """The last event applied (the state's the projections read, folded after each)."""
        return self.ledger.state.seq if self.ledger is not None else self._seq

    # --- feeding -------------------------------------------------------------------------------------------------

    def apply(self, event: ev.Event, seq: int) -> None:
        if self._buffer is not None:
            self._buffer.append((event, seq))
            return
        self._apply(event, seq)

    def _apply(self, event: ev.Event, seq: int) -> None:
        h = self._table[type(event)]
        if h is not None:
            h(event, seq)

    def tables(self) -> list[dict[type[ev.Event], Handler | None]]:
        """The projections' handlers by event type (`views.dispatch`), for a feeder to join with its others; the
        feeder gives each new time of the events to `clocks` first."""
        assert self.ledger is not None, "begin first"
        return [dict(t) for t in self._parts]

    def clocks(self) -> list[Callable[[int], None]]:
        """`move_clocks`: a feeder calls it with each new time of the events, before the first event that carries
        it (`views.follow.CatchingUp`); given the time it was last given, it does nothing."""
        return [self.move_clocks]

    def _timed(self, event: Any, seq: int) -> None:
        self._move_clocks(event, seq)
        for h in self._subs[type(event)]:
            h(event, seq)

    def _move_clocks(self, event: Any, seq: int) -> None:
        """Every event with a time, before the projections (fed on its own: `_apply`): `move_clocks`."""
        self.move_clocks(event.at)

    def move_clocks(self, at: int) -> None:
        """An event at `at` comes, before the projections take it: the usage windows' checkpoint when one is due
        (the figures as of before this event), the usage clock, the ledger's pruning when due (what it forgets is
        older than any preemption or rerun this event records, so before or after them is the same). Given the
        same `at` again it does nothing: the checkpoint and the pruning are then due later than `at`, the clock is
        at `at` already (a feeder calls it once per time of the events)."""
        usage = self.usage
        assert usage is not None
        if at >= usage.due:
            usage.checkpoint(at)
        core = usage.usage
        core.now = max(core.now, at)
        if at >= self._prune_at:
            self._prune(at)

    def _prune(self, at: int) -> None:
        ledger, usage = self.ledger, self.usage
        assert ledger is not None and usage is not None
        self.ledger_from = max(self.ledger_from, at - self.retention_ms)
        ledger.prune(self.ledger_from)
        self.whole = self.whole and usage.oldest == usage.origin and self.ledger_from <= usage.origin
        self._prune_at = at + self.bucket_ms

    def begin(self, state: State, origin: int, *, whole: bool) -> None:
        """New projections on `state`, counting from `origin` (`whole`: `state` is the log's start), fed as they are
        built (the hold, if any, is for `take_over`)."""
        ledger = Preemptions(state, totals=False)  # the metrics' ledger keeps the per-queue totals
        for key, rec in state.workloads.items():
            # Runs that began before the start: counted from their admission (as `admitd preemptions`).
            if rec.phase is Phase.ADMITTED and rec.admitted_at is not None and not rec.evicting:
                ledger.started(key, rec.admitted_at)
        usage = UsageWindows(
            state,
            origin,
            bucket_ms=self.bucket_ms,
            recent_ms=self.recent_ms,
            coarse_ms=self.coarse_ms,
            retention_ms=self.retention_ms,
        )
        runtimes = Runtimes(state)
        self.ledger, self.usage, self.runtimes, self.ledger_from, self.whole = ledger, usage, runtimes, origin, whole
        self._prune_at = 0
        core = usage.usage.handlers()
        timed = usage.usage.timed
        # The usage clock's move (`Usage.timed`) is done by `_timed` itself, for every event with a time.
        parts = [ledger.handlers(), {t: None if h == timed else h for t, h in core.items()}, runtimes.handlers()]
        self._parts = parts
        self._subs = join(parts)
        with_at = events_with_at()
        timed_h: Handler = self._timed
        clock_h: Handler = self._move_clocks
        self._table = {
            t: (timed_h if subs else clock_h) if t in with_at else (subs[0] if subs else None)
            for t, subs in self._subs.items()
        }
        assert all(len(subs) <= 1 for t, subs in self._subs.items() if t not in with_at), "one handler at most"

    # --- the start-up's part: in the daemon's one catch-up fold (`views.follow.CatchingUp.add_late`) -------------

    def plan(self, reader: LogReader | None, upto: int) -> int:
        """Where the projections begin in a fold of the log from its first event to `upto`: the seq after which
        `begin_on` is to be called (0: with the log). From `retention_ms` before now (a simulated log's end), the
        log's start when that is before it, or now for a new log."""
        if reader is None or reader.bounds() is None or upto == 0:  # a new log: the projections begin with it
            self._plan = (self._now(), True)
            return 0
        clock = self._clock = clock_of(reader)
        start = (clock.last_ms if clock.virtual else self._now()) - self.retention_ms
        seq = reader.seq_at(start - 1)
        if seq <= 0:
            self._plan = (clock.first_ms, True)  # the whole log (see `whole`)
            return 0
        # A start after `upto` (a simulated log's end moved on since): begun at `upto`, counting from `start`.
        self._plan = (start, False)
        return min(seq, upto)

    def begin_on(self, state: State) -> None:
        """`begin` where `plan` said, on the fold's state there."""
        assert self._plan is not None, "plan first"
        origin, whole = self._plan
        self.begin(state, origin, whole=whole)

    def ticks(self) -> list[Callable[[int], None]]:
        """None: these projections keep the log's own times (`clocks`), not the recorded_at."""
        return []

    def counted(self, by_type: Mapping[type[ev.Event], int]) -> None:
        """They count no events by type."""

    def attach(self, state: State, queues: object = None) -> None:
        """Read `state` (the daemon's, equal to the one read so far) from now on, and answer."""
        assert self.ledger is not None and self.usage is not None and self.runtimes is not None
        self.ledger.attach(state)
        self.usage.state = state
        self.runtimes.state = state
        self._buffer = None

    def warm_kept(self) -> None:
        """`warm` with the clock `plan` read (in the catch-up's thread, before the hand-over)."""
        if self._clock is not None:
            self.warm(self._clock)

    # --- built from a file on its own (the benchmark, tests) -----------------------------------------------------

    def build(self, reader: LogReader, upto: int, now_ms: int) -> Following:
        """Blocking: the projections from `RETENTION_MS` before `now_ms` (or the log's start) to event `upto`, with a
        state of their own (what `take_over` hands the daemon's). Not yet fed live."""
        if reader.bounds() is None or upto == 0:  # a new log: the projections begin with it
            state = State(pending_indexes=False)
            self.begin(state, now_ms, whole=True)
            return Following(state, (_Direct(self),))
        clock = clock_of(reader)
        start = (clock.last_ms if clock.virtual else now_ms) - self.retention_ms
        seq = reader.seq_at(start - 1)
        if seq > 0:
            state = state_at(reader, seq)
        else:
            state, start = State(pending_indexes=False), clock.first_ms  # the whole log (see `whole`)
        self.begin(state, start, whole=seq == 0)
        following = Following(state, (_Direct(self),))  # past the hold: the recorder's events wait in it meanwhile
        if upto > seq:
            following.follow(reader, limit=upto - seq)
        if following.seq != upto:
            raise EventLogError(f"the log ends at seq {following.seq}, before the daemon's state at seq {upto}")
        return following

    def take_over(self, following: Following, state: State) -> None:
        """Apply the events held back on top of `following` (built up to where they begin), then go live on
        `state` (which has folded them all)."""
        held = self._buffer or []
        self._buffer = None
        following.projections = (_Direct(self),)
        for event, seq in held:
            following.apply(event, seq)
        if following.seq != state.seq:
            self.ledger = self.usage = self.runtimes = None
            raise RuntimeError(f"the projections reached seq {following.seq}, the daemon's state is at {state.seq}")
        self.attach(state)

    def close(self) -> None:
        """Nothing runs on its own any more (the daemon's catch-up builds the projections)."""

    def figures(self) -> object:
        """Everything the two projections hold (live and rebuilt compare equal)."""
        return (
            None if self.ledger is None else self.ledger.figures(),
            None if self.usage is None else self.usage.figures(),
            None if self.runtimes is None else self.runtimes.figures(),
            self.ledger_from,
        )

    # --- answering -----------------------------------------------------------------------------------------------

    def covers(self, start_ms: int) -> bool:
        """The ledger holds every preemption from `start_ms` on."""
        return self.ledger is not None and (start_ms >= self.ledger_from or self.whole)

    def preemptions(self, clock: Clock, start_ms: int, queue: str | None) -> dict[str, Any] | None:
        """The answer from `start_ms`, or None when the ledger no longer holds all of it."""
        if self.ledger is None or not self.covers(start_ms):
            return None
        entries = self.ledger.entries
        return ledger_mod.preemptions_body(entries, clock, start_ms=start_ms, until_ms=clock.last_ms, queue=queue)

    def preemptions_json(self, clock: Clock, start_ms: int, queue: str | None) -> bytes | None:
        """`preemptions` encoded, each row's JSON kept once made (until its victim reruns, which changes it)."""
        if self.ledger is None or not self.covers(start_ms):
            return None
        return ledger_mod.preemptions_encoded(
            self.ledger.entries, clock, self._row(clock), start_ms=start_ms, until_ms=clock.last_ms, queue=queue
        )

    def _row(self, clock: Clock) -> Callable[[Preemption], bytes]:
        cache = self._rows
        if self._rows_clock != clock.kind or (self.ledger is not None and len(cache) > 2 * len(self.ledger.entries)):
            cache.clear()  # pruned rows: rebuilt from the entries held
            self._rows_clock = clock.kind

        def row(p: Preemption) -> bytes:
            got = cache.get(p.seq)
            if got is None or got[0] != p.rerun_after:
                got = cache[p.seq] = (p.rerun_after, encode_json(ledger_mod.preemption_row(p, clock)))
            return got[1]

        return row

    def warm(self, clock: Clock) -> None:
        """Encode every row held (in the worker thread that built the projections: the first answer is then fast)."""
        if self.ledger is not None:
            row = self._row(clock)
            for p in list(self.ledger.entries):
                row(p)

    def durations(self) -> Callable[[Class], Sequence[int]]:
        """The recorded runtimes as they are now, copied (for a dry run in a worker thread while events come)."""
        assert self.runtimes is not None
        by_class = {k: list(v) for k, v in self.runtimes.by_class.items()}
        by_queue = {k: list(v) for k, v in self.runtimes.by_queue.items()}

        def durations(cls: Class) -> Sequence[int]:
            return by_class.get(cls) or by_queue.get(cls[0]) or ()

        return durations

    def usage_body(self, clock: Clock, start_ms: int, by: str) -> dict[str, Any] | None:
        """The answer from the kept moment at or before `start_ms` (before the log's start: from `start_ms`), or None
        when `start_ms` is before every kept moment."""
        usage = self.usage
        if usage is None:
            return None
        if self.whole and start_ms <= usage.origin:
            got = usage.since(usage.origin, clock.last_ms)
            assert got is not None
            shown = start_ms
        else:
            got = usage.since(start_ms, clock.last_ms)
            if got is None:
                return None
            shown = got[0]
        return usage_mod.usage_body(got[1], clock, start_ms=shown, until_ms=clock.last_ms, by=by)


class _Direct:
    """`Windows` as a projection past its hold (the feeder that builds it)."""

    def __init__(self, windows: Windows) -> None:
        self.windows = windows

    @property
    def seq(self) -> int:
        return self.windows.seq

    def apply(self, event: ev.Event, seq: int) -> None:
        self.windows._apply(event, seq)

    def figures(self) -> object:
        return self.windows.figures()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
