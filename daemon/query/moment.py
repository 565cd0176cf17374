"""Moments in a log: parsing `--at TIME` / `--seq N`, the state as of a seq, and showing times to people.

A log written by `admitd simulate` has virtual times (`recorded_at` = milliseconds since the scenario's start, so
near 0); a daemon's log has milliseconds since the epoch. Virtual logs are shown as offsets from the start
(`+1m30s`), real ones as RFC 3339 UTC.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from daemon.domain import events as ev
from daemon.domain.durations import format_seconds
from daemon.domain.state import STATE_VERSION, SnapshotIndex, State
from daemon.eventlog import LogReader, codec
from daemon.eventlog.replay import (
    SnapshotUndecodable,
    UnreadSnapshot,
    decode_snapshot,
    decode_unread,
    paused_gc,
    snapshot_raw_json,
)

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
    for row in reader.iter_events(seq - 1, chunk=1):
        return row.recorded_at
    return clock.last_ms


def state_at(reader: LogReader, seq: int) -> State:
    """The fold's state after event `seq`: the nearest valid snapshot at or before it, then the tail up to it.

    Built with the cyclic collector paused and frozen afterwards (`paused_gc`): a query command builds one state
    and exits, and a state of 100,000 workloads would otherwise be walked by the collector again and again."""
    return _whole_state(reader, seq, reader.snapshot_at_or_before(STATE_VERSION, seq))


def _whole_state(reader: LogReader, seq: int, found: tuple[int, bytes] | None) -> State:
    """`state_at` from `found` (a snapshot's seq and body, the body as stored or as its JSON), None: no snapshot."""
    state, since = State(pending_indexes=False), 0
    with paused_gc(freeze=True):
        if found is not None:
            try:
                state, since = decode_snapshot(found[1]), found[0]
            except (msgspec.MsgspecError, ValueError, TypeError, KeyError):
                state, since = State(pending_indexes=False), 0  # an unreadable snapshot costs time, not correctness
        apply = state.apply
        for s, event in _tail(reader, since, seq):
            apply(event, s)
    state.seq = seq
    return state


def _tail(reader: LogReader, since: int, seq: int) -> Iterator[tuple[int, ev.Event]]:
    """The events (since, seq], decoded, with their seqs."""
    if since >= seq:
        return
    decode = codec.decode
    for s, type_, version, payload in reader.iter_payloads(since, chunk=min(20_000, seq - since)):
        if s > seq:
            return
        yield s, decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=s)


# --- a partial state: only the workloads an answer reads ---------------------------------------------------------

_JOB_KEYED = (
    ev.JobFinished,
    ev.JobDeleted,
    ev.JobReady,
    ev.JobPodsNotCreated,
    ev.JobUnsuspended,
    ev.JobSuspended,
    ev.ActuationFailed,
    ev.JobTampered,
)
_WORKLOAD_KEYED = (
    ev.WorkloadAdmitted,
    ev.WorkloadAdopted,
    ev.WorkloadPreempted,
    ev.WorkloadEvicted,
    ev.WorkloadTimedOut,
    ev.WorkloadRequeued,
    ev.WorkloadPending,
)


def _touched(event: ev.Event) -> str | None:
    """The one workload record `State.apply` reads or writes for `event` (its key), "" for an event that changes
    nothing (`object.rejected`, `log.break_accepted`), None for any other event (configuration: it may re-route or
    re-prioritise any workload, so a partial state cannot fold it).

    From an audit of `State.apply`: each job or workload event reads and writes only its own record (`job`,
    `workload`, or the observed workload's key) and, besides, the outbox and the generation counters, which no
    answer built on a partial state reads; it reads the configuration and `finished`, which a partial state holds
    whole. `WorkloadPreempted.preemptor` only goes into the victim's suspend order."""
    if isinstance(event, ev.JobObserved):
        return event.workload.key
    if isinstance(event, _JOB_KEYED):
        return event.job
    if isinstance(event, _WORKLOAD_KEYED):
        return event.workload
    if isinstance(event, ev.ObjectRejected | ev.ChainBreakAccepted):
        return ""
    return None


@dataclass(frozen=True, slots=True)
class PartialState:
    """The fold's state at a seq for an answer about the queues or one job (`partial_state_at`): either the whole
    state (`pending_counts` None), or one holding only some workloads, with what it cannot count itself.

    A partial one is exact at `seq` in: the configuration, `finished`, every admitted workload, every workload some
    event in the tail touched, and every workload pending in a ClusterQueue of `whole_queues` (in the pending lists of
    those queues, nothing is missing). `pending_counts` is then every ClusterQueue's pending count at `seq`."""

    state: State
    pending_counts: dict[str, int] | None = None
    whole_queues: frozenset[str] = frozenset()

    @property
    def partial(self) -> bool:
        return self.pending_counts is not None


def partial_state_at(
    reader: LogReader, seq: int, *, keys: Iterable[str] = (), local_queues: Iterable[str] = ()
) -> PartialState:
    """The state after event `seq` with only the workloads an answer about the queues or about one job reads, built
    from the nearest snapshot F at or before `seq` and the tail (F, seq] by the fold itself (`State.from_snapshot`,
    `State.apply`); the whole state (`state_at`) when it cannot be built so.

    Loaded from the snapshot: every workload admitted at F (so the quota usage is exact), every workload an event
    of the tail touches (see `_touched`), the workloads `keys`, and every workload pending at F in the ClusterQueues
    the `local_queues` (`namespace/name`) point at. Any other workload is not touched by the tail and, without a
    configuration event there, stays where it was at F, so each ClusterQueue's pending count is its count at F (in
    the snapshot's `SnapshotIndex`), less the loaded ones pending there at F, plus the loaded ones pending there now.

    The whole state instead when: no snapshot at or before `seq`, a snapshot without an index (written before it
    existed), one that does not decode or whose index does not match it, or a tail with a configuration event
    (queues, cohorts, flavors, namespaces, priority classes) or an event type not audited here. The snapshot's JSON,
    once inflated, is not inflated again for it.

    A query command builds one state and exits: built with the collector paused and frozen (`paused_gc`)."""
    found = reader.snapshot_at_or_before(STATE_VERSION, seq)
    if found is None:
        return PartialState(_whole_state(reader, seq, None))
    since, body = found
    try:
        raw = snapshot_raw_json(body)
    except SnapshotUndecodable:
        return PartialState(_whole_state(reader, seq, found))
    with paused_gc(freeze=True):
        built = _partial(reader, seq, since, raw, keys, local_queues)
    return built if built is not None else PartialState(_whole_state(reader, seq, (since, raw)))


def _partial(
    reader: LogReader, seq: int, since: int, raw: bytes, keys: Iterable[str], local_queues: Iterable[str]
) -> PartialState | None:
    try:
        unread = decode_unread(raw)
    except (msgspec.MsgspecError, SnapshotUndecodable, ValueError, TypeError, KeyError):
        return None
    index = unread.index
    if index is None or unread.seq != since or len(index.keys) != len(unread.workloads):
        return None
    tail: list[tuple[int, ev.Event]] = []
    touched: set[str] = set()
    for s, event in _tail(reader, since, seq):
        key = _touched(event)
        if key is None:
            return None
        if key:
            touched.add(key)
        tail.append((s, event))
    routes = {lq.key: lq.cluster_queue for lq in unread.local_queues}
    whole = frozenset(cq for lq in local_queues if (cq := routes.get(lq)) is not None)
    pending_at_f = dict(index.pending)
    chosen = set(index.admitted)
    chosen.update(_positions(index, touched))
    chosen.update(_positions(index, keys))
    for cq in whole:
        chosen.update(pending_at_f.get(cq, ()))
    state = unread.select(chosen)
    apply = state.apply
    for s, event in tail:
        apply(event, s)
    state.seq = seq
    return PartialState(state, _pending_counts(unread, chosen, state), whole)


def _positions(index: SnapshotIndex, keys: Iterable[str]) -> list[int]:
    """Where `keys` are in the snapshot's (sorted) workloads; keys it does not hold are skipped."""
    out = []
    all_keys = index.keys
    for key in keys:
        i = bisect_left(all_keys, key)
        if i < len(all_keys) and all_keys[i] == key:
            out.append(i)
    return out


def _pending_counts(unread: UnreadSnapshot, chosen: set[int], state: State) -> dict[str, int]:
    assert unread.index is not None
    now = state.view().pending_by_cq
    counts = {cq: len(members) - len(chosen.intersection(members)) for cq, members in unread.index.pending}
    for cq, bucket in now.items():
        counts[cq] = counts.get(cq, 0) + len(bucket)
    return counts
