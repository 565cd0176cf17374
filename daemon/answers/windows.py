"""The daemon's `preemptions` and `usage` answers from live projections: the preemption ledger and the usage figures
of the log's last `RETENTION_MS`, kept by the recorder as it appends (`daemon.views.ledger`, `daemon.views.usage`),
so that an answer over 7 days costs the window's entries, not a fold of the window's events.

Two feeders, as every projection of `daemon.views` has: at the daemon's start the projections are built by
following the file from `RETENTION_MS` before now up to the state the daemon replayed (in a worker thread), while
the recorder's events are held back; then those events are applied on top, the projections take the daemon's own
state, and from then on the recorder feeds them live. Until they are ready, and for a window that starts before
what they hold, the answer comes from the file as the CLI's does.

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

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.domain import events as ev
from daemon.domain.state import Phase, State
from daemon.eventlog import EventLogError, LogReader
from daemon.eventlog.codec import encode_json
from daemon.obs.logging import get_logger
from daemon.query import ledger as ledger_mod
from daemon.query import usage as usage_mod
from daemon.query.moment import Clock, clock_of, state_at
from daemon.views.follow import Following
from daemon.views.ledger import Preemption, Preemptions
from daemon.views.runtimes import Runtimes
from daemon.views.usage import DAY_MS, HOUR_MS, MINUTE_MS, UsageWindows

if TYPE_CHECKING:  # a read command imports this module: the engine (daemon.domain.eta's) must not load with it
    from daemon.domain.eta import Class

log = get_logger("admitd.answers")

RETENTION_MS = 8 * DAY_MS
"""How far back the live projections reach: a week's window and a day to spare."""


class Windows:
    """The ledger and the usage windows, fed as a recorder's projection (`apply`, before the state folds)."""

    def __init__(
        self,
        *,
        retention_ms: int = RETENTION_MS,
        bucket_ms: int = MINUTE_MS,
        recent_ms: int = DAY_MS,
        coarse_ms: int = HOUR_MS,
        hold: bool = True,
    ) -> None:
        """`hold`: keep the events `apply` is given until `take_over` (the daemon, whose projections are built from
        the file meanwhile); False: apply them as they come, once `begin` has made the projections."""
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
        self.seq = 0
        # The recorder's events while the projections are built (None: fed as they come).
        self._buffer: list[tuple[ev.Event, int]] | None = [] if hold else None
        self._prune_at = 0
        self._rows: dict[int, tuple[int | None, bytes]] = {}  # seq -> (its rerun_after, its row's JSON)
        self._rows_clock = ""
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self._buffer is None and self.ledger is not None

    # --- feeding -------------------------------------------------------------------------------------------------

    def apply(self, event: ev.Event, seq: int) -> None:
        if self._buffer is not None:
            self._buffer.append((event, seq))
            return
        self._apply(event, seq)

    def _apply(self, event: ev.Event, seq: int) -> None:
        ledger, usage, runtimes = self.ledger, self.usage, self.runtimes
        assert ledger is not None and usage is not None and runtimes is not None
        ledger.apply(event, seq)
        usage.apply(event, seq)
        runtimes.apply(event, seq)
        self.seq = seq
        at: object = getattr(event, "at", None)
        if isinstance(at, int) and at >= self._prune_at:
            self.ledger_from = max(self.ledger_from, at - self.retention_ms)
            ledger.prune(self.ledger_from)
            self.whole = self.whole and usage.oldest == usage.origin and self.ledger_from <= usage.origin
            self._prune_at = at + self.bucket_ms

    def begin(self, state: State, origin: int, *, whole: bool) -> None:
        """New projections on `state`, counting from `origin` (`whole`: `state` is the log's start), fed as they are
        built (the hold, if any, is for `take_over`)."""
        ledger = Preemptions(state)
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
        self.ledger, self.usage, self.ledger_from, self.whole = ledger, usage, origin, whole
        self.runtimes = Runtimes(state)
        self.seq = state.seq

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
        `state` (the recorder's, which has folded them all)."""
        held = self._buffer or []
        self._buffer = None
        following.projections = (_Direct(self),)
        for event, seq in held:
            following.apply(event, seq)
        if following.seq != state.seq:
            self.ledger = self.usage = self.runtimes = None
            raise RuntimeError(f"the projections reached seq {following.seq}, the daemon's state is at {state.seq}")
        assert self.ledger is not None and self.usage is not None and self.runtimes is not None
        self.ledger.state = state
        self.usage.state = state
        self.runtimes.state = state

    def start(
        self,
        db: Path,
        state: State,
        settle: Callable[[], Awaitable[None]] | None = None,
        now: Callable[[], int] | None = None,
    ) -> None:
        """Build the projections in a worker thread from the file up to `state` (the recorder's: `apply` must be its
        projection already), then go live. `now`: the recorder's clock (default the wall clock). A failure is
        logged and leaves the answers to the file."""
        self._task = asyncio.get_running_loop().create_task(self._start(db, state, state.seq, settle, now or _now_ms))

    async def _start(
        self,
        db: Path,
        state: State,
        upto: int,
        settle: Callable[[], Awaitable[None]] | None,
        now: Callable[[], int],
    ) -> None:
        try:
            if settle is not None:
                await settle()  # every event up to `upto` in the file

            at = now()

            def build() -> Following:
                with LogReader(db) as reader:
                    following = self.build(reader, upto, at)
                    if reader.bounds() is not None:
                        self.warm(clock_of(reader))
                    return following

            following = await asyncio.to_thread(build)
            self.take_over(following, state)
            assert self.usage is not None
            log.info("answers: preemptions and usage kept live", since=self.usage.origin, seq=self.seq)
        except Exception as e:  # any failure: the answers degrade to the file's, the daemon goes on admitting
            self._buffer = None
            self.ledger = self.usage = self.runtimes = None
            log.error("answers: preemptions and usage are answered from the file", error=str(e), exc_info=e)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

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
        self.seq = windows.seq

    def apply(self, event: ev.Event, seq: int) -> None:
        self.windows._apply(event, seq)
        self.seq = seq

    def figures(self) -> object:
        return self.windows.figures()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
