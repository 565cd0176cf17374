"""Moments in a log: parsing `--at TIME` / `--seq N`, the state as of a seq, and showing times to people.

A log written by `admitd simulate` has virtual times (`recorded_at` = milliseconds since the scenario's start, so
near 0); a daemon's log has milliseconds since the epoch. Virtual logs are shown as offsets from the start
(`+1m30s`), real ones as RFC 3339 UTC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from daemon.domain.durations import format_seconds
from daemon.domain.state import STATE_VERSION, State
from daemon.eventlog import LogReader, codec
from daemon.eventlog.replay import decode_snapshot, paused_gc

VIRTUAL_BEFORE_MS = 946_684_800_000
"""2000-01-01T00:00:00Z. A log whose first event is recorded before this is taken to be virtual (simulated)."""


class QueryError(Exception):
    """A question the log cannot answer (unknown job, a time before the log begins...). One line for users."""


@dataclass(frozen=True, slots=True)
class Clock:
    """How this log's times read: `virtual` (offsets from the scenario's start) or `wall` (epoch milliseconds)."""

    virtual: bool
    first_seq: int
    first_ms: int
    last_seq: int
    last_ms: int

    @property
    def kind(self) -> str:
        return "virtual" if self.virtual else "wall"

    def show(self, ms: int | None) -> str | None:
        """A time for people: `+1m30s` on a virtual log, RFC 3339 UTC with milliseconds on a real one."""
        if ms is None:
            return None
        if self.virtual:
            return ("-" if ms < 0 else "+") + format_seconds(abs(ms))
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock_of(reader: LogReader) -> Clock:
    b = reader.bounds()
    if b is None:
        raise QueryError(f"{reader.path}: the log has no events yet")
    first_seq, first_ms, last_seq, last_ms = b
    return Clock(first_ms < VIRTUAL_BEFORE_MS, first_seq, first_ms, last_seq, last_ms)


def is_virtual(first_recorded_at: int | None) -> bool:
    """For `admitd log stats`: does a log starting at this time have virtual times?"""
    return first_recorded_at is not None and first_recorded_at < VIRTUAL_BEFORE_MS


_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h|d))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration_ms(text: str) -> int:
    """`90s`, `1m30s`, `2h`, `1.5h`, `250ms`, `1d` -> milliseconds (rounded down to whole ms)."""
    if not _DURATION.match(text):
        raise QueryError(f"{text!r} is not a duration; expected e.g. 90s, 1m30s, 2h or 250ms")
    total = 0.0
    for num, unit in _PART.findall(text):
        total += float(num) * _UNIT_MS[unit]
    return int(total)


def parse_time(text: str, clock: Clock, now_ms: int) -> int:
    """`--at TIME` -> a `recorded_at` value.

    Relative `-2h` counts back from now (`now_ms`; on a virtual log, from the log's last event, the simulation's
    end). On a virtual log `+1m30s` (or `1m30s`) is an offset from the scenario's start. On a real log: RFC 3339
    (`2026-12-01T03:00:00Z`, an offset or a naive time taken as UTC). `now` is the present (a virtual log's end).
    """
    t = text.strip()
    if t == "now":
        return clock.last_ms if clock.virtual else now_ms
    if t.startswith("-"):
        back = parse_duration_ms(t[1:])
        return (clock.last_ms if clock.virtual else now_ms) - back
    if clock.virtual:
        if t.startswith("+") or _DURATION.match(t):
            return parse_duration_ms(t.removeprefix("+"))
        raise QueryError(
            f"{text!r}: this log has virtual times (from `admitd simulate`); give an offset from the scenario's "
            "start such as +1m30s, or a relative time such as -30s (from the simulation's end)"
        )
    if t.startswith("+"):
        raise QueryError(f"{text!r}: an offset (+...) only applies to a simulated log; use RFC 3339 or -2h")
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise QueryError(
            f"{text!r} is not a time; expected RFC 3339 (2026-12-01T03:00:00Z) or relative (-2h)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Moment:
    seq: int
    recorded_at: int


def resolve(reader: LogReader, clock: Clock, *, at: str | None, seq: int | None, now_ms: int) -> Moment:
    """The moment `--at TIME` or `--seq N` names (default: the log's end); clear errors outside the log."""
    if seq is not None:
        if seq < clock.first_seq or seq > clock.last_seq:
            raise QueryError(f"seq {seq} is outside the log (seq {clock.first_seq} .. {clock.last_seq})")
        return Moment(seq, _recorded_at(reader, seq, clock))
    if at is None:
        return Moment(clock.last_seq, clock.last_ms)
    ms = parse_time(at, clock, now_ms)
    if ms < clock.first_ms:
        raise QueryError(
            f"{at}: before the log begins (its first event, seq {clock.first_seq}, is at {clock.show(clock.first_ms)})"
        )
    return Moment(reader.seq_at(ms), ms)


def _recorded_at(reader: LogReader, seq: int, clock: Clock) -> int:
    if seq == clock.last_seq:
        return clock.last_ms
    if seq == clock.first_seq:
        return clock.first_ms
    for ev in reader.iter_events(seq - 1, chunk=1):
        return ev.recorded_at
    return clock.last_ms


def state_at(reader: LogReader, seq: int) -> State:
    """The fold's state after event `seq`: the nearest valid snapshot at or before it, then the tail up to it.

    Built with the cyclic collector paused and frozen afterwards (`paused_gc`): a query command builds one state
    and exits, and a state of 100,000 workloads would otherwise be walked by the collector again and again."""
    state, since = State(pending_indexes=False), 0
    found = reader.snapshot_at_or_before(STATE_VERSION, seq)
    with paused_gc(freeze=True):
        if found is not None:
            try:
                state, since = decode_snapshot(found[1]), found[0]
            except (msgspec.MsgspecError, ValueError, TypeError, KeyError):
                state, since = State(pending_indexes=False), 0  # an unreadable snapshot costs time, not correctness
        decode, apply = codec.decode, state.apply
        if since < seq:
            for s, type_, version, payload in reader.iter_payloads(since, chunk=min(20_000, seq - since)):
                if s > seq:
                    break
                apply(decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=s), s)
    state.seq = seq
    return state
