"""Moments in a log: parsing `--at TIME` / `--seq N`, the state as of a seq, and showing times to people.

A log written by `admitd simulate` has virtual times (`recorded_at` = milliseconds since the scenario's start, so
near 0); a daemon's log has milliseconds since the epoch. Virtual logs are shown as offsets from the start
(`+1m30s`), real ones as RFC 3339 UTC.
"""

from __future__ import annotations

import heapq
import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import msgspec

from daemon.domain import events as ev
from daemon.domain.durations import format_seconds
from daemon.domain.model import ClusterQueue, Cohort, LocalQueue, Millis, Namespace, PriorityClass, ResourceFlavor
from daemon.domain.state import STATE_VERSION, Phase, State, StateSnapshot, WorkloadRecord
from daemon.eventlog import LogReader, codec
from daemon.eventlog.replay import (
    SnapshotUndecodable,
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


def state_at(reader: LogReader, seq: int, *, timeline: Timeline | None = None) -> State:
    """The fold's state after event `seq`: the nearest valid snapshot at or before it, then the tail up to it; or,
    when `timeline` (kept in memory by a fold of this log) covers `seq`, its records as they were then.

    Built with the cyclic collector paused and frozen afterwards (`paused_gc`): a query command builds one state
    and exits, and a state of 100,000 workloads would otherwise be walked by the collector again and again. From
    `timeline` (a long-running process) paused only."""
    if timeline is not None:
        with paused_gc():
            got = timeline.whole(seq)
        if got is not None:
            return got
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
    ev.WorkloadActiveChanged,
    ev.WorkloadPending,
)


def _touched(event: ev.Event) -> str | None:
    """The one workload record `State.apply` reads or writes for `event` (its key), "" for an event that changes
    nothing (`object.rejected`, `object.warned`, `log.break_accepted`, `workload.estimated`), None for any other
    event (configuration: it may re-route or re-prioritise any workload, so a partial state cannot fold it).

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
    if isinstance(event, ev.ObjectRejected | ev.ObjectWarned | ev.ChainBreakAccepted | ev.WorkloadEstimated):
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
    reader: LogReader,
    seq: int,
    *,
    keys: Iterable[str] = (),
    local_queues: Iterable[str] = (),
    cluster_queues: Iterable[str] = (),
    timeline: Timeline | None = None,
    first: int | None = None,
) -> PartialState:
    """The state after event `seq` with only the workloads an answer about the queues or about one job reads, built
    from the nearest snapshot F at or before `seq` and the tail (F, seq] by the fold itself (`State.from_snapshot`,
    `State.apply`); the whole state (`state_at`) when it cannot be built so.

    Loaded from the snapshot: every workload admitted at F (so the quota usage is exact), every workload an event
    of the tail touches (see `_touched`), the workloads `keys`, and every workload pending at F in the ClusterQueues
    the `local_queues` (`namespace/name`) point at and in `cluster_queues`. Any other workload is not touched by the
    tail and, without a configuration event there, stays where it was at F, so each ClusterQueue's pending count is
    its count at F (in the snapshot's `SnapshotIndex`), less the loaded ones pending there at F, plus the loaded ones
    pending there now.

    `timeline`: kept in memory by a fold of the same log (`Timeline`, the web view's); when it covers `seq`, the
    same workloads are taken from it as they were at `seq` (the admitted ones, those pending in the queues named,
    `keys`) with every ClusterQueue's pending count then: nothing decoded, nothing folded. It holds fewer workloads
    than a tail's fold would (none only because the tail touched it), which no answer on a partial state reads.
    `first` (from a timeline only): of each of those queues' pending workloads only the first `first` in queue order
    (what `pending_entries(limit=first)` shows of it; `whole_queues` then empty: no queue is whole).

    The whole state instead when: no snapshot at or before `seq`, a snapshot without an index (written before it
    existed), one that does not decode or whose index does not match it, or a tail with a configuration event
    (queues, cohorts, flavors, namespaces, priority classes) or an event type not audited here. The snapshot's JSON,
    once inflated, is not inflated again for it.

    A query command builds one state and exits: built with the collector paused and frozen (`paused_gc`); with
    `timeline` (a long-running process) paused only."""
    if timeline is not None:
        with paused_gc():
            got = timeline.partial(
                seq, keys=keys, local_queues=local_queues, cluster_queues=cluster_queues, first=first
            )
        if got is not None:
            return got
    found = reader.snapshot_at_or_before(STATE_VERSION, seq)
    if found is None:
        return PartialState(_whole_state(reader, seq, None))
    since, body = found
    try:
        raw = snapshot_raw_json(body)
    except SnapshotUndecodable:
        return PartialState(_whole_state(reader, seq, found))
    with paused_gc(freeze=True):
        try:
            unread = decode_unread(raw)
        except (msgspec.MsgspecError, SnapshotUndecodable, ValueError, TypeError, KeyError):
            built = None
        else:
            built = _partial(reader, seq, unread, keys, local_queues, cluster_queues) if unread.seq == since else None
    return built if built is not None else PartialState(_whole_state(reader, seq, (since, raw)))


class _Index(Protocol):
    @property
    def keys(self) -> Sequence[str]: ...
    @property
    def admitted(self) -> Iterable[int]: ...
    @property
    def pending(self) -> Iterable[tuple[str, Sequence[int]]]: ...


class _Source(Protocol):
    """A state at a seq whose workload records can be picked (`UnreadSnapshot`)."""

    @property
    def seq(self) -> int: ...
    @property
    def local_queues(self) -> Sequence[LocalQueue]: ...
    @property
    def workloads(self) -> Sized: ...
    @property
    def index(self) -> _Index | None: ...
    def select(self, positions: Iterable[int]) -> State: ...


def _partial(
    reader: LogReader,
    seq: int,
    source: _Source,
    keys: Iterable[str],
    local_queues: Iterable[str],
    cluster_queues: Iterable[str],
) -> PartialState | None:
    since = source.seq
    index = source.index
    if index is None or len(index.keys) != len(source.workloads):
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
    routes = {lq.key: lq.cluster_queue for lq in source.local_queues}
    whole = frozenset(cq for lq in local_queues if (cq := routes.get(lq)) is not None) | frozenset(cluster_queues)
    pending_at_f = dict(index.pending)
    chosen = set(index.admitted)
    chosen.update(_positions(index, touched))
    chosen.update(_positions(index, keys))
    for cq in whole:
        chosen.update(pending_at_f.get(cq, ()))
    state = source.select(chosen)
    apply = state.apply
    for s, event in tail:
        apply(event, s)
    state.seq = seq
    return PartialState(state, _pending_counts(index, chosen, state), whole)


def _positions(index: _Index, keys: Iterable[str]) -> list[int]:
    """Where `keys` are in the snapshot's (sorted) workloads; keys it does not hold are skipped."""
    out = []
    all_keys = index.keys
    for key in keys:
        i = bisect_left(all_keys, key)
        if i < len(all_keys) and all_keys[i] == key:
            out.append(i)
    return out


def _pending_counts(index: _Index, chosen: set[int], state: State) -> dict[str, int]:
    now = state.view().pending_by_cq
    counts = {cq: len(members) - len(chosen.intersection(members)) for cq, members in index.pending}
    for cq, bucket in now.items():
        counts[cq] = counts.get(cq, 0) + len(bucket)
    return counts


# --- the timeline: each workload's records and each queue's members over the log, kept by a long-running fold ---

TIMELINE_BUDGET_BYTES = 1 * 2**30
"""What a `Timeline` may take (`Timeline.nbytes`) by default before it forgets its older half."""
BASE_EVERY_MIN = 256
"""A `_Members` set is copied whole at the latest after max(its size, this) changes."""
VERSION_BYTES = 400
"""About what one kept version of a workload record costs (its slot, its seq, the record and its reason)."""
KEY_BYTES = 200
"""About what each workload's own containers of versions (or of row seqs) cost."""
CHANGE_BYTES = 32
"""About what one change to a set of members costs (its seq, key reference, sign and size), or one member of a copy."""


@dataclass(frozen=True, slots=True)
class _Config:
    """The configuration at a moment, as a snapshot stores it (each part sorted)."""

    flavors: tuple[ResourceFlavor, ...]
    cluster_queues: tuple[ClusterQueue, ...]
    cohorts: tuple[Cohort, ...]
    local_queues: tuple[LocalQueue, ...]
    namespaces: tuple[Namespace, ...]
    priority_classes: tuple[PriorityClass, ...]
    rejected: tuple[tuple[str, tuple[str, ...]], ...]


def _config_of(state: State) -> _Config:
    return _Config(
        flavors=tuple(state.flavors[k] for k in sorted(state.flavors)),
        cluster_queues=tuple(state.cluster_queues[k] for k in sorted(state.cluster_queues)),
        cohorts=tuple(state.cohorts[k] for k in sorted(state.cohorts)),
        local_queues=tuple(state.local_queues[k] for k in sorted(state.local_queues)),
        namespaces=tuple(state.namespaces[k] for k in sorted(state.namespaces)),
        priority_classes=tuple(state.priority_classes[k] for k in sorted(state.priority_classes)),
        rejected=tuple(sorted(state.rejected.items())),
    )


def _cells(c: _Config) -> int:
    """What `Timeline.nbytes` counts for one kept configuration (a reference per object, the objects shared)."""
    return 8 + sum(len(part) for part in (c.flavors, c.cluster_queues, c.cohorts, c.local_queues, c.namespaces))


class _Members:
    """A set of keys over the log (the admitted workloads, those pending in one ClusterQueue, the live ones): each
    change in order (seq, key, added or removed, the size after it) and a frozen copy of the whole set each time as
    many changes as it has members have passed since the last copy. The set at any seq then costs one copy and at
    most about its size in changes applied, and what is kept stays proportional to the changes (a copy of n members
    after at least n changes), not to the members times the moments."""

    __slots__ = ("_added", "_bases", "_keys", "_seqs", "_since", "_sizes", "cells", "now")

    def __init__(self, start: int) -> None:
        self.now: set[str] = set()
        self._seqs = array("q")
        self._keys: list[str] = []
        self._added = bytearray()
        self._sizes = array("q")
        self._bases: list[tuple[int, int, frozenset[str]]] = [(start, 0, frozenset())]  # (seq, first change after)
        self._since = 0
        self.cells = 0  # changes and copied members kept: what `Timeline.nbytes` counts

    def add(self, key: str, seq: int) -> None:
        if key not in self.now:
            self.now.add(key)
            self._log(key, seq, 1)

    def discard(self, key: str, seq: int) -> None:
        if key in self.now:
            self.now.remove(key)
            self._log(key, seq, 0)

    def _log(self, key: str, seq: int, added: int) -> None:
        self._seqs.append(seq)
        self._keys.append(key)
        self._added.append(added)
        self._sizes.append(len(self.now))
        self.cells += 1
        self._since += 1
        if self._since >= max(len(self.now), BASE_EVERY_MIN):
            self._since = 0
            self._bases.append((seq, len(self._keys), frozenset(self.now)))
            self.cells += len(self.now)

    def at(self, seq: int) -> set[str]:
        """The members after event `seq` (the last copy at or before it, then the changes up to it)."""
        bases = self._bases
        _, lo, base = bases[bisect_right(bases, seq, key=_first) - 1]
        out = set(base)
        keys, added = self._keys, self._added
        for j in range(lo, bisect_right(self._seqs, seq, lo)):
            if added[j]:
                out.add(keys[j])
            else:
                out.discard(keys[j])
        return out

    def size_at(self, seq: int) -> int:
        hi = bisect_right(self._seqs, seq)
        return self._sizes[hi - 1] if hi else 0


def _first(item: tuple[int, int, frozenset[str]]) -> int:
    return item[0]


class _Span:
    """The timeline from seq `start` (a state the fold held then, all of it recorded) to `seq`."""

    def __init__(self, start: int, state: State, before: dict[str, tuple[int, int]] | None = None) -> None:
        """`before`: each job's row seqs (`row_seqs_now`) from the span before, if any."""
        self.start = self.seq = start
        self._seqs: dict[str, array[int]] = {}  # per workload key: the seqs of its versions
        self._recs: dict[str, list[WorkloadRecord | None]] = {}  # ... and the versions (None: gone)
        self.versions = 0
        self._alive = _Members(start)
        self._admitted = _Members(start)
        self._pending: dict[str, _Members] = {}  # per ClusterQueue: the workloads pending in it
        self._where: dict[str, str] = {}  # the ClusterQueue each workload is pending in now
        self._configs: list[tuple[int, _Config]] = [(start, _config_of(state))]
        self._config_cells = _cells(self._configs[0][1])
        self._finished: list[tuple[str, Millis]] = list(state.finished.items())
        self._finished_seqs = array("q", [start] * len(self._finished))
        # Per job: what `pending_seqs` reads from its events, as of each seq it changed (queued, reason; 0: None).
        self._row_seqs: dict[str, array[int]] = {} if before is None else {k: array("q", [start]) for k in before}
        self._row_vals: dict[str, array[int]] = {} if before is None else {k: array("q", v) for k, v in before.items()}
        self.row_cells = 2 * len(self._row_vals)  # each job's two seqs
        self.resync(state, start)

    @property
    def nbytes(self) -> int:
        cells = self._alive.cells + self._admitted.cells + sum(m.cells for m in self._pending.values())
        cells += self.row_cells + len(self._finished) + self._config_cells
        keys = len(self._recs) + len(self._row_vals)
        return VERSION_BYTES * self.versions + KEY_BYTES * keys + CHANGE_BYTES * cells

    # --- following the fold ---

    def one(self, state: State, key: str, seq: int, *, equal: bool = False) -> None:
        """Record workload `key` as the fold holds it after event `seq`; `equal`: not again if its record equals the
        last one kept (`resync`)."""
        rec = state.workloads.get(key)
        recs = self._recs.get(key)
        if recs is None:
            if rec is None:
                return
            self._seqs[key] = array("q", [seq])
            self._recs[key] = [rec]
            self.versions += 1
        elif recs[-1] is not rec and not (equal and recs[-1] == rec):
            seqs = self._seqs[key]
            if seqs[-1] == seq:
                recs[-1] = rec
            else:
                seqs.append(seq)
                recs.append(rec)
                self.versions += 1
        cq = None
        if rec is None:
            self._alive.discard(key, seq)
            self._admitted.discard(key, seq)
        else:
            self._alive.add(key, seq)
            if rec.phase is Phase.ADMITTED:
                self._admitted.add(key, seq)
            else:
                self._admitted.discard(key, seq)
                cq = state.pending_in(key)
        was = self._where.get(key)
        if was != cq:
            if was is not None:
                self._pending[was].discard(key, seq)
                del self._where[key]
            if cq is not None:
                members = self._pending.get(cq)
                if members is None:
                    members = self._pending[cq] = _Members(self.start)
                members.add(key, seq)
                self._where[key] = cq

    def resync(self, state: State, seq: int) -> None:
        """Record every workload after event `seq` (a configuration event: it may re-route, re-prioritise or release
        any of them). O(live workloads): configuration changes are rare. A record equal to the last one kept but
        another object (the daemon's: the catch-up's records until the hand-over, the live state's after, equal
        then) is not kept again: a configuration event after the hand-over would otherwise add a version of every
        live workload."""
        one = self.one
        for key in list(self._alive.now):
            if key not in state.workloads:
                one(state, key, seq, equal=True)
        for key in state.workloads:
            one(state, key, seq, equal=True)

    def config(self, state: State, seq: int) -> None:
        got = _config_of(state)
        if got != self._configs[-1][1]:
            self._config_cells += _cells(got)
            if self._configs[-1][0] == seq:
                self._configs[-1] = (seq, got)
            else:
                self._configs.append((seq, got))

    def rejected(self, state: State, seq: int) -> None:
        """After an audit event: `State.rejected` may have changed (a held queue's new version rejected)."""
        if tuple(sorted(state.rejected.items())) != self._configs[-1][1].rejected:
            self.config(state, seq)

    def finished(self, job: str, at: Millis, seq: int) -> None:
        self._finished.append((job, at))
        self._finished_seqs.append(seq)

    def row_seqs(self, event: ev.Event, seq: int) -> None:
        """`pending_seqs`' rule, event by event on the job's own (its subject): the event that put it in its queue
        (its first observation, or its latest eviction) and its latest `workload.pending` since (`_row_step`)."""
        step = _row_step(event, seq)
        if step is None:
            return
        key, kind = step
        vals = self._row_vals.get(key)
        got = _row_next(kind, vals[-2] if vals is not None else 0, seq)
        if got is None:
            return
        if vals is None:
            self._row_seqs[key] = array("q", [seq])
            self._row_vals[key] = array("q", got)
        else:
            seqs = self._row_seqs[key]
            if seqs[-1] == seq:
                vals[-2:] = array("q", got)
            else:
                seqs.append(seq)
                vals.extend(got)
        self.row_cells += 1

    def row_seqs_now(self) -> dict[str, tuple[int, int]]:
        return {k: (v[-2], v[-1]) for k, v in self._row_vals.items()}

    def row_seqs_at(self, upto: int) -> Callable[[str], tuple[int | None, int | None]]:
        """`pending_seqs(reader, upto)` from what was kept (`row_seqs`): no read."""
        all_seqs, all_vals = self._row_seqs, self._row_vals

        def get(key: str) -> tuple[int | None, int | None]:
            seqs = all_seqs.get(key)
            i = 0 if seqs is None else bisect_right(seqs, upto)
            if not i:
                return None, None
            vals = all_vals[key]
            return vals[2 * i - 2] or None, vals[2 * i - 1] or None

        return get

    # --- reading ---

    def _config_at(self, seq: int) -> _Config:
        configs = self._configs
        return configs[bisect_right(configs, seq, key=_first_config) - 1][1]

    def record_at(self, key: str, seq: int) -> WorkloadRecord | None:
        seqs = self._seqs.get(key)
        if seqs is None:
            return None
        i = bisect_right(seqs, seq)
        return self._recs[key][i - 1] if i else None

    def state_at(self, seq: int, keys: Iterable[str], config: _Config | None = None) -> State:
        """The fold's state after `seq` holding the workloads `keys` (those live then), built by
        `State.from_snapshot` as a stored snapshot's records are."""
        c = self._config_at(seq) if config is None else config
        record_at = self.record_at
        records = tuple(r for k in sorted(keys) if (r := record_at(k, seq)) is not None)
        state = State.from_snapshot(
            StateSnapshot(
                seq=seq,
                flavors=c.flavors,
                cluster_queues=c.cluster_queues,
                cohorts=c.cohorts,
                local_queues=c.local_queues,
                namespaces=c.namespaces,
                priority_classes=c.priority_classes,
                workloads=records,
                finished=tuple(self._finished[: bisect_right(self._finished_seqs, seq)]),
                generations=(),
                config_generation=0,
                counter=0,
                rejected=c.rejected,
            )
        )
        return state

    def whole(self, seq: int) -> State:
        return self.state_at(seq, self._alive.at(seq))

    def partial(
        self,
        seq: int,
        keys: Iterable[str],
        local_queues: Iterable[str],
        cluster_queues: Iterable[str],
        first: int | None = None,
    ) -> PartialState:
        c = self._config_at(seq)
        routes = {lq.key: lq.cluster_queue for lq in c.local_queues}
        whole = frozenset(cq for lq in local_queues if (cq := routes.get(lq)) is not None) | frozenset(cluster_queues)
        chosen = self._admitted.at(seq)
        chosen.update(keys)
        record_at = self.record_at
        for cq in whole:
            members = self._pending.get(cq)
            if members is None:
                continue
            them = members.at(seq)
            if first is not None and len(them) > first:
                # The first ones in queue order (`queue_key`: priority, then older, then key) without the others.
                order = ((-r.priority, r.queue_order_at, k) for k in them if (r := record_at(k, seq)) is not None)
                them = {k for _, _, k in heapq.nsmallest(first, order)}
            chosen |= them
        counts = {cq: n for cq, m in list(self._pending.items()) if (n := m.size_at(seq))}
        return PartialState(self.state_at(seq, chosen, c), counts, whole if first is None else frozenset())


def _span_estimate(workloads: int, jobs: int) -> int:
    """About what `_Span.nbytes` is when it starts from a state of `workloads` live workloads, carrying the row seqs
    of `jobs` jobs: a version and its containers per workload and a membership or two (alive; admitted or pending),
    two seqs and their containers per job. The configuration is left out (small beside them)."""
    return workloads * (VERSION_BYTES + KEY_BYTES + 2 * CHANGE_BYTES) + jobs * (KEY_BYTES + 2 * CHANGE_BYTES)


def _first_config(item: tuple[int, _Config]) -> int:
    return item[0]


_OBSERVED, _EVICTED, _PENDING = ev.JobObserved.TYPE, ev.WorkloadEvicted.TYPE, ev.WorkloadPending.TYPE
_ROW_TYPES = frozenset({_OBSERVED, _EVICTED, _PENDING})


def _row_step(event: ev.Event, seq: int) -> tuple[str, str] | None:
    """The job whose row seqs `event` may change and the event's type, None for an event that changes none."""
    kind = event.TYPE
    if kind not in _ROW_TYPES:
        return None
    subject = event.subject
    return (subject[4:], kind) if subject.startswith("job/") else None


def _row_next(kind: str, queued: int, seq: int) -> tuple[int, int] | None:
    """A job's row seqs (queued, reason; 0: None) after an event of type `kind` at `seq`, `queued` before it; None:
    unchanged."""
    if kind == _EVICTED or (kind == _OBSERVED and not queued):
        return (seq, 0)
    if kind == _PENDING:
        return (queued, seq)
    return None


class Timeline:
    """Every workload record the fold held and when, each ClusterQueue's pending workloads, the admitted ones and
    the configuration over the log, kept in memory by a process that folds the log once and keeps following it (the
    web view's `Series`), so that an answer at any past moment it covers is built from the records as they were
    then, with nothing decoded and nothing folded (`partial_state_at(timeline=)`, `state_at(timeline=)`).

    `observe` is called after each event the fold applies; it costs O(1) for a job or workload event (the one record
    it touched: `_touched`) and O(live workloads) for a configuration event (rare), and keeps only what changed: a
    version per changed record, a change per set membership, and a whole copy of a set once as many changes as it
    has members have passed (`_Members`). Nothing is copied per moment. When what it keeps (`nbytes`, an estimate)
    passes half of `budget_bytes`, it starts a new span from the fold's state then and keeps the previous one, whose
    predecessor it forgets: memory stays under the budget, and moments before the older span's start are the file's
    answers again (`covers`).

    Threads: one feeds it (`observe`), others read it at once (the web view's pages, in worker threads), without a
    lock (a reader must not hold up the fold, which in a daemon is the recorder's). That is safe because what a
    reader reads is never changed: `observe` only appends what happened at a seq after the last one covered, or
    replaces entries of that new seq, and sets the span's `seq` (what `covers` reads) once all of the event is
    kept; a new span is built whole before it replaces the list of spans. A reader at a covered seq finds each
    record, set change, copy and configuration at or before it as they were (bisections bounded by it), and never
    part of a later event (tests/integration/test_daemon_past_pages.py feeds one thread while another reads)."""

    def __init__(self, *, budget_bytes: int = TIMELINE_BUDGET_BYTES, check_every: int = 1024) -> None:
        """`check_every`: events between two looks at `nbytes` (a sum over the queues)."""
        self.budget_bytes = budget_bytes
        self.check_every = check_every
        self._spans: list[_Span] = []  # at most two, oldest first; replaced whole (a reader may be in a thread)
        self._new_span = True
        self._rows: dict[str, tuple[int, int]] | None = None  # paused: each job's row seqs now (`row_seqs_now`)

    @property
    def paused(self) -> bool:
        """Whether it keeps nothing now (the live workloads alone would take more than a new span may: `observe`)."""
        return self._rows is not None

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self._spans)

    @property
    def start(self) -> int | None:
        """The first seq covered (None: nothing yet)."""
        spans = self._spans
        return spans[0].start if spans else None

    @property
    def seq(self) -> int:
        spans = self._spans
        return spans[-1].seq if spans else -1

    def covers(self, seq: int) -> bool:
        return self._span(seq) is not None

    def _span(self, seq: int) -> _Span | None:
        for span in reversed(self._spans):
            if span.start <= seq <= span.seq:
                return span
        return None

    def observe(self, event: ev.Event, seq: int, state: State) -> None:
        """After `state.apply(event, seq)` by the fold this is kept for.

        A new span costs O(live workloads) (each one's record, once) on the fold's thread (in a daemon, its
        recorder's), so it is started only while the live workloads take at most a quarter of the budget
        (`_span_estimate`): the span then has at least that much room before the next one, and a backlog too large
        for the budget does not start a span every `check_every` events. Otherwise the timeline pauses: it keeps
        its spans as they are and follows only each job's row seqs (O(1) an event), and looks again every
        `check_every` events; the moments from there on are the file's answers until a new span starts."""
        rows = self._rows
        if rows is not None:
            if seq % self.check_every == 0 and self._fits(state, rows):
                self._rows = None
                self._start(event, seq, state, rows)
            else:
                step = _row_step(event, seq)
                if step is not None:
                    got = _row_next(step[1], rows.get(step[0], (0, 0))[0], seq)
                    if got is not None:
                        rows[step[0]] = got
            return
        if self._new_span:
            self._new_span = False
            before = self._spans[-1].row_seqs_now() if self._spans else None
            if before is not None and not self._fits(state, before):
                self._rows = before
                self.observe(event, seq, state)  # paused from this event on
                return
            self._start(event, seq, state, before)
            return
        span = self._spans[-1]
        span.row_seqs(event, seq)
        key = _touched(event)
        if key is None:
            span.resync(state, seq)
            span.config(state, seq)
        elif key:
            span.one(state, key, seq)
            if isinstance(event, ev.JobFinished):
                span.finished(event.job, event.at, seq)
        else:
            span.rejected(state, seq)
        span.seq = seq
        if seq % self.check_every == 0 and span.nbytes > self.budget_bytes // 2:
            self._new_span = True

    def _start(self, event: ev.Event, seq: int, state: State, before: dict[str, tuple[int, int]] | None) -> None:
        """A new span from `state` after `event`, kept with the last one (the one before that forgotten)."""
        span = _Span(seq, state, before)
        span.row_seqs(event, seq)
        self._spans = [*self._spans[-1:], span]  # whole: a reader in a thread sees the old list or the new

    def _fits(self, state: State, rows: dict[str, tuple[int, int]]) -> bool:
        """Whether a span started from `state` now would take at most a quarter of the budget (`_span_estimate`)."""
        return _span_estimate(len(state.workloads), len(rows)) <= self.budget_bytes // 4

    def row_seqs(self, seq: int) -> Callable[[str], tuple[int | None, int | None]] | None:
        """What `daemon.query.listing.pending_seqs(reader, seq)` gives each job, without reading the file (the fold
        followed starts at the log's first event, as a `Series`'s does); None if `seq` is not covered."""
        span = self._span(seq)
        return None if span is None else span.row_seqs_at(seq)

    def record_at(self, key: str, seq: int) -> tuple[bool, WorkloadRecord | None]:
        """Whether `seq` is covered, and if so workload `key`'s record after it (None: not live then)."""
        span = self._span(seq)
        return (False, None) if span is None else (True, span.record_at(key, seq))

    def whole(self, seq: int) -> State | None:
        """The whole state after `seq`, None if not covered."""
        span = self._span(seq)
        return None if span is None else span.whole(seq)

    def partial(
        self,
        seq: int,
        *,
        keys: Iterable[str] = (),
        local_queues: Iterable[str] = (),
        cluster_queues: Iterable[str] = (),
        first: int | None = None,
    ) -> PartialState | None:
        """As `partial_state_at` (the same workloads loaded, the same counts), None if `seq` is not covered."""
        span = self._span(seq)
        return None if span is None else span.partial(seq, keys, local_queues, cluster_queues, first)
