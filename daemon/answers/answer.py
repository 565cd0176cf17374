"""What each answer is, given its parameters: the same public functions of `daemon.query` the CLI calls, so that a
daemon's answer and `admitd ... --json` on its file are the same JSON.

`preemptions` and `usage` come from the daemon's live ledger and usage windows when it keeps them
(`daemon.answers.windows`), else from the file.

Two sources. At the present (no `at`, or `at=now`), from the daemon's live fold, on the event loop, once every event
folded into it is in the file (the job's own events are read from the file's subject index, which must hold them
too); "now" is the wall clock, so a running job's time runs to the present. At a past moment (`at`, `seq`), and for
`replay` always (a whole state's JSON would hold up the loop), from the file in a worker thread, exactly as the CLI.
A parameter that is unknown, repeated or malformed is a `BadRequest` naming it (400); an unknown job or queue is a
404 naming it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.answers.windows import Windows
from daemon.domain import events as ev
from daemon.domain.state import State
from daemon.eventlog import EventLogError, LogReader
from daemon.eventlog.codec import encode_json
from daemon.query import explain as explain_mod
from daemon.query import history as history_mod
from daemon.query import ledger as ledger_mod
from daemon.query import usage as usage_mod
from daemon.query.estimates import ENDS_A_WAIT, Estimates, Recorded, pending_estimates
from daemon.query.listing import (
    Seqs,
    pending_json,
    pending_seqs,
    pending_text,
    queues_at,
    queues_json,
    queues_text,
    replay_json,
)
from daemon.query.moment import Clock, Moment, QueryError, clock_of, resolve, state_at

PREFIX = "/answers/v1"
"""The versioned root of the answers API. A change to a body's shape that is not an added field is a new version."""

COMMANDS: dict[str, tuple[str, ...]] = {  # each command's query parameters
    "explain": ("at", "format"),
    "history": ("format",),
    "queues": ("at", "format"),
    "pending": ("queue", "at", "format"),
    "replay": ("at", "seq"),
    "preemptions": ("since", "queue", "format"),
    "usage": ("since", "by", "format"),
    "eta": ("queue", "format"),
    "simulate": ("name", "format"),  # POST, the body JOB.yaml
}
WINDOW_COMMANDS = frozenset({"preemptions", "usage", "eta"})
"""Answered from the file in a worker thread, always: each folds a window of the log (or all of it, `eta`)."""
JOB_COMMANDS = frozenset({"explain", "history"})  # these name a job in the path: /answers/v1/explain/NS/NAME

USAGE_GROUPINGS = ("clusterqueue", "localqueue", "namespace")  # as daemon.query.usage.GROUPINGS

SETTLE_ROUNDS = 3  # waits for the events in flight before an answer at the present falls back to the file


def paths() -> dict[str, Any]:
    """The index served at /answers/v1: every path and its parameters."""
    out = []
    for command, params in COMMANDS.items():
        path = f"{PREFIX}/{command}" + ("/{namespace}/{name}" if command in JOB_COMMANDS else "")
        out.append({"path": path, "method": "POST" if command == "simulate" else "GET", "parameters": list(params)})
    return {"version": "v1", "paths": out}


class BadRequest(Exception):
    """A request the API cannot answer: its HTTP status, the parameter at fault (or None) and why."""

    def __init__(self, status: int, parameter: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.parameter, self.message = status, parameter, message

    def body(self) -> dict[str, Any]:
        return {"error": {"status": self.status, "parameter": self.parameter, "message": self.message}}


@dataclass(frozen=True, slots=True)
class Query:
    """One request, checked: the command, its job (NAMESPACE/NAME) and its parameters."""

    command: str
    job: str | None = None
    at: str | None = None
    seq: int | None = None
    queue: str | None = None
    text: bool = False
    since: str | None = None
    by: str | None = None

    @property
    def present(self) -> bool:
        """Answered from the live fold (the others from the file)."""
        return (
            self.seq is None
            and (self.at is None or self.at.strip() == "now")
            and self.command != "replay"
            and self.command not in WINDOW_COMMANDS
        )


def parse(command: str, params: Mapping[str, list[str]], job: str | None = None) -> Query:
    """A `Query` from a command name and its query parameters (each with every value given); BadRequest naming the
    first parameter that is unknown, repeated or malformed."""
    allowed = COMMANDS.get(command)
    if allowed is None:
        raise BadRequest(404, None, f"no answer {command!r}; the answers are {', '.join(COMMANDS)} (see {PREFIX})")
    if command == "simulate":
        raise BadRequest(405, None, f"simulate is a POST to {PREFIX}/simulate with the job(s) to try as the body")
    for name, values in params.items():
        if name not in allowed:
            raise BadRequest(
                400, name, f"{command} takes no parameter {name!r}; it takes {', '.join(allowed) or 'none'}"
            )
        if len(values) != 1:
            raise BadRequest(400, name, f"{name!r} is given {len(values)} times; give it once")
    one = {name: values[0] for name, values in params.items()}
    fmt = one.get("format", "json")
    if fmt not in ("json", "text"):
        raise BadRequest(400, "format", f"format must be json or text, got {fmt!r}")
    seq: int | None = None
    if "seq" in one:
        try:
            seq = int(one["seq"])
        except ValueError:
            raise BadRequest(400, "seq", f"seq must be a whole number, got {one['seq']!r}") from None
        if seq < 1:
            raise BadRequest(400, "seq", f"a seq starts at 1, got {seq}")
    if command == "replay" and ("at" in one) == (seq is not None):
        raise BadRequest(400, "at", "replay takes exactly one of at (a moment) or seq (the state right after it)")
    for name in ("at", "queue", "since"):
        if name in one and not one[name].strip():
            raise BadRequest(400, name, f"{name} is empty")
    by = one.get("by")
    if command == "usage" and by is not None and by not in USAGE_GROUPINGS:
        raise BadRequest(400, "by", f"by must be one of {', '.join(USAGE_GROUPINGS)}, got {by!r}")
    if command in JOB_COMMANDS and (job is None or job.count("/") != 1 or not all(job.split("/"))):
        raise BadRequest(400, "job", f"{command} needs a job as {PREFIX}/{command}/NAMESPACE/NAME")
    return Query(command, job, one.get("at"), seq, one.get("queue"), fmt == "text", one.get("since"), by)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Rendered:
    """An answer's body and its media type."""

    body: bytes
    content_type: str


def _json(body: dict[str, Any]) -> Rendered:
    return Rendered(encode_json(body), "application/json")


def _text(text: str) -> Rendered:
    return Rendered((text + "\n").encode(), "text/plain; charset=utf-8")


def present_moment(clock: Clock, seq: int, now_ms: int) -> Moment:
    """The present of a log being written: the state after its last event, as of now (never before that event)."""
    return Moment(seq, max(now_ms, clock.last_ms) if not clock.virtual else clock.last_ms)


class LiveSeqs:
    """What `pending_seqs` says of each pending job (the seqs its row rests on), remembered once read and kept up to
    date by the recorder's listener (`apply`), so that a `pending` answer at the present does not read every row's
    events from the file again. `apply` follows `pending_seqs` rule for rule on the job's own events (its subject);
    a job that finishes or is deleted is forgotten (read again if it is ever asked about)."""

    _OBSERVED, _EVICTED, _PENDING = ev.JobObserved.TYPE, ev.WorkloadEvicted.TYPE, ev.WorkloadPending.TYPE
    _GONE = frozenset({ev.JobDeleted.TYPE, ev.JobFinished.TYPE})

    def __init__(self) -> None:
        self._known: dict[str, tuple[int | None, int | None]] = {}
        self._estimates: dict[str, Recorded | None] = {}  # the same for `estimates.last_estimate`

    def __len__(self) -> int:
        return len(self._known)

    def apply(self, event: ev.Event, seq: int) -> None:
        subject = event.subject
        if not subject.startswith("job/"):
            return
        key = subject[4:]
        kind = event.TYPE
        if key in self._estimates:
            if isinstance(event, ev.WorkloadEstimated):
                self._estimates[key] = (event, seq)
            elif kind in ENDS_A_WAIT:
                self._estimates[key] = None
            elif kind in self._GONE:
                del self._estimates[key]
        got = self._known.get(key)
        if got is None:
            return
        if kind == self._EVICTED or (kind == self._OBSERVED and got[0] is None):
            self._known[key] = (seq, None)
        elif kind == self._PENDING:
            self._known[key] = (got[0], seq)
        elif kind in self._GONE:
            del self._known[key]

    def seqs(self, reader: LogReader, upto: int) -> Seqs:
        """For a state after `upto` that has every event the listener saw (the live fold, the file settled)."""
        read = pending_seqs(reader, upto)
        known = self._known

        def get(key: str) -> tuple[int | None, int | None]:
            got = known.get(key)
            if got is None:
                got = known[key] = read(key)
            return got

        return get

    def estimates(self, reader: LogReader, upto: int) -> Estimates:
        """Each pending job's last recorded estimate, as `estimates.pending_estimates` reads it, kept as `seqs`."""
        read = pending_estimates(reader, upto)
        known = self._estimates

        def get(key: str) -> Recorded | None:
            if key not in known:
                known[key] = read(key)
            return known[key]

        return get


def render(
    q: Query,
    reader: LogReader,
    clock: Clock,
    moment: Moment,
    state: State | None,
    until_ms: int | None,
    live_seqs: LiveSeqs | None = None,
) -> Rendered:
    """The answer to `q` at `moment`: from `state` (the state after `moment.seq`) when given, else built from the
    file as the CLI builds it. `until_ms`: where a running job's time stops (history; the present on a live log)."""
    try:
        if q.command == "explain":
            assert q.job is not None
            try:
                x = explain_mod.explain(reader, clock, q.job, moment, state=state)
            except QueryError as e:
                raise BadRequest(404, "job", str(e)) from None
            return _text(explain_mod.to_text(x, clock)) if q.text else _json(explain_mod.to_json(x, clock))
        if q.command == "history":
            assert q.job is not None
            try:
                h = history_mod.history(reader, q.job, clock, until=until_ms)
            except QueryError as e:
                raise BadRequest(404, "job", str(e)) from None
            return _text(history_mod.to_text(h, clock)) if q.text else _json(history_mod.to_json(h, clock))
        if q.command == "queues":
            counts = None
            if state is None:
                state, counts = queues_at(reader, moment.seq)
            if q.text:
                return _text(queues_text(state, clock, moment, counts))
            return _json(queues_json(state, clock, moment, counts))
        if q.command == "pending":
            if state is None:
                state = state_at(reader, moment.seq)
            if live_seqs is not None:
                seqs, estimates = live_seqs.seqs(reader, moment.seq), live_seqs.estimates(reader, moment.seq)
            else:
                seqs, estimates = pending_seqs(reader, moment.seq), pending_estimates(reader, moment.seq)
            try:
                if q.text:
                    return _text(pending_text(state, clock, moment, q.queue, seqs, estimates))
                return _json(pending_json(state, clock, moment, q.queue, seqs, estimates))
            except QueryError as e:
                raise BadRequest(404, "queue", str(e)) from None
        assert q.command == "replay"
        return _json(replay_json(state if state is not None else state_at(reader, moment.seq), clock, moment))
    except EventLogError as e:
        raise BadRequest(503, None, f"the log cannot be read: {e}") from None


def _window(q: Query, reader: LogReader, clock: Clock, now_ms: int) -> Rendered:
    """preemptions, usage, eta: as the CLI's commands of those names answer them."""
    from daemon.query import eta as eta_mod  # noqa: PLC0415  (the engine: only eta needs it)

    try:
        if q.command == "eta":
            body = eta_mod.eta_json(reader, clock, queue=q.queue)
            return _text(eta_mod.eta_text(body)) if q.text else _json(body)
        start = ledger_mod.since_ms(q.since, clock, now_ms)
    except QueryError as e:
        raise BadRequest(
            404 if q.command == "eta" else 400, "queue" if q.command == "eta" else "since", str(e)
        ) from None
    if q.command == "preemptions":
        body = ledger_mod.preemptions_json(reader, clock, start_ms=start, queue=q.queue)
        return _text(ledger_mod.preemptions_text(body)) if q.text else _json(body)
    body = usage_mod.usage_json(reader, clock, start_ms=start, by=q.by or "clusterqueue")
    return _text(usage_mod.usage_text(body)) if q.text else _json(body)


def answer_from_file(db: Path, q: Query, now_ms: int, *, live: bool) -> Rendered:
    """`q` answered from the file alone, as the CLI answers it (blocking: call it in a worker thread). `live`: the
    log is being written (a daemon's), so the present is now, not its last event."""
    try:
        with LogReader(db) as reader:
            clock = _clock(reader)
            if q.command in WINDOW_COMMANDS:
                return _window(q, reader, clock, now_ms)
            if q.present:
                moment = (
                    present_moment(clock, clock.last_seq, now_ms)
                    if live
                    else resolve(reader, clock, at=None, seq=None, now_ms=now_ms)
                )
            else:
                try:
                    moment = resolve(reader, clock, at=q.at, seq=q.seq, now_ms=now_ms)
                except QueryError as e:
                    raise BadRequest(400, "seq" if q.seq is not None else "at", str(e)) from None
            until = moment.recorded_at if (live and q.present) else None
            return render(q, reader, clock, moment, None, until)
    except EventLogError as e:
        raise BadRequest(503, None, f"the log cannot be read: {e}") from None


def _clock(reader: LogReader) -> Clock:
    try:
        return clock_of(reader)
    except QueryError as e:
        raise BadRequest(503, None, str(e)) from None


class Answers:
    """The daemon's answers: its live fold for the present, its file for the past.

    `state` is the fold the recorder applies events to before they are durable; `settle` waits until every event
    applied so far is in the file (`Recorder.catch_up`). An answer at the present is built on the event loop from
    `state` once the file's last seq is the state's (so the job's own events, read from the file, are all there);
    when appends keep arriving for `SETTLE_ROUNDS` waits, it is built from the file at its last seq instead."""

    def __init__(
        self,
        db: Path,
        *,
        state: State | None = None,
        settle: Callable[[], Awaitable[None]] | None = None,
        live_seqs: LiveSeqs | None = None,
        windows: Windows | None = None,
        now_ms: Callable[[], int] = _now_ms,
        workers: int = 2,
    ) -> None:
        """`live_seqs`: fed by the same recorder as `state` (its `apply` a listener), or None to read them.
        `windows`: the live ledger and usage (`daemon.answers.windows`), fed by that recorder too, or None to answer
        `preemptions` and `usage` from the file."""
        self.db = db
        self.windows = windows
        self.state = state
        self.live_seqs = live_seqs
        self.settle = settle
        self.now_ms = now_ms
        self._reader: LogReader | None = None  # the event loop's own (SQLite connections stay on their thread)
        self._workers = asyncio.Semaphore(workers)  # past moments: at most this many folds at once
        self.live_answers = 0  # answered from the live fold (the rest from the file); for tests and logs

    def close(self) -> None:
        if self.windows is not None:
            self.windows.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _loop_reader(self) -> LogReader:
        if self._reader is None:
            self._reader = LogReader(self.db)
        return self._reader

    async def answer(self, q: Query) -> Rendered:
        if q.present and self.state is not None:
            got = await self._from_live(q)
            if got is not None:
                return got
        if q.command in ("preemptions", "usage") and self.windows is not None and self.windows.ready:
            got = await self._from_windows(q, self.windows)
            if got is not None:
                return got
        async with self._workers:
            return await asyncio.to_thread(answer_from_file, self.db, q, self.now_ms(), live=True)

    async def _from_live(self, q: Query) -> Rendered | None:
        state = self.state
        assert state is not None
        reader = await self._settled(lambda: state.seq)
        if reader is None:
            return None
        clock = _clock(reader)  # nothing folded that the file does not hold: answer now, before any await
        moment = present_moment(clock, state.seq, self.now_ms())
        self.live_answers += 1
        return render(q, reader, clock, moment, state, moment.recorded_at, self.live_seqs)

    async def _settled(self, folded: Callable[[], int | None]) -> LogReader | None:
        """The loop's reader once the file's last event is the one `folded()` names (what a live fold or projection
        has taken); the caller answers before any further await. None: no file yet, an empty log, `folded()` None,
        or the two not met within SETTLE_ROUNDS (then the file answers)."""
        try:
            reader = self._loop_reader()
        except EventLogError:
            return None  # no file yet: the worker's answer says so
        for _ in range(SETTLE_ROUNDS):
            if self.settle is not None:
                await self.settle()
            try:
                bounds = reader.bounds()
            except EventLogError as e:
                raise BadRequest(503, None, f"the log cannot be read: {e}") from None
            seq = folded()
            if bounds is None or seq is None:
                return None
            if bounds[2] == seq:
                return reader
        return None

    async def _from_windows(self, q: Query, windows: Windows) -> Rendered | None:
        """`preemptions` or `usage` from the live projections, once the file holds every event they took (so that
        the window's end is the file's last event, as the CLI's is); None: from the file."""
        reader = await self._settled(lambda: windows.seq if windows.ready else None)
        if reader is None:
            return None
        clock = _clock(reader)
        try:
            start = ledger_mod.since_ms(q.since, clock, self.now_ms())
        except QueryError as e:
            raise BadRequest(400, "since", str(e)) from None
        if q.command == "preemptions" and not q.text:
            encoded = windows.preemptions_json(clock, start, q.queue)
            if encoded is None:
                return None
            self.live_answers += 1
            return Rendered(encoded, "application/json")
        if q.command == "preemptions":
            body = windows.preemptions(clock, start, q.queue)
            text = ledger_mod.preemptions_text
        else:
            body = windows.usage_body(clock, start, q.by or "clusterqueue")
            text = usage_mod.usage_text
        if body is None:
            return None  # the window starts before what the projections hold
        self.live_answers += 1
        return _text(text(body)) if q.text else _json(body)

    async def simulate(self, name: str, body: bytes, text: bool) -> Rendered:
        """`POST /answers/v1/simulate?name=JOB.yaml`: the dry run of the jobs in `body` on the live state, the
        answer `admitd simulate --against LOG -f JOB.yaml` gives on the file (whose last event is the present; the
        runtimes recorded since the live projections begin, 8 days back)."""
        from daemon.domain.state import State as _State  # noqa: PLC0415
        from daemon.query import dryrun  # noqa: PLC0415  (the engine: only the dry run needs it)

        state, windows = self.state, self.windows
        if state is None or windows is None or not windows.ready:
            raise BadRequest(503, None, "the daemon's projections for a dry run are being built; ask again shortly")
        try:
            content = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadRequest(400, "body", f"JOB.yaml is not UTF-8 text ({e.reason} at byte {e.start})") from None
        try:
            reader = self._loop_reader()
        except EventLogError as e:
            raise BadRequest(503, None, f"the log cannot be read: {e}") from None
        for _ in range(SETTLE_ROUNDS):
            if self.settle is not None:
                await self.settle()
            bounds = reader.bounds()
            if bounds is None:
                raise BadRequest(503, None, "the log has no events yet")
            if bounds[2] == state.seq:
                try:
                    jobs, _ = dryrun.jobs_of(content, name, state)
                except dryrun.DryRunError as e:
                    raise BadRequest(400, "body", str(e)) from None
                copy = _State.from_snapshot(state.to_snapshot())  # the state as of now; the run goes on in a thread
                durations = windows.durations()
                break
        else:
            raise BadRequest(503, None, "events keep arriving faster than the log settles; ask again")
        async with self._workers:
            try:
                got = await asyncio.to_thread(dryrun.answer, copy, durations, bounds[1], bounds[3], jobs)
            except dryrun.DryRunError as e:
                raise BadRequest(409, "body", str(e)) from None
        self.live_answers += 1
        return _text(dryrun.text(got)) if text else _json(got)


def error_body(e: BadRequest) -> bytes:
    return encode_json(e.body())
