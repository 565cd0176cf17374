"""Moments in a log: parsing `--at TIME` / `--seq N`, the state as of a seq, and showing times to people.

A log written by `admitd simulate` has virtual times (`recorded_at` = milliseconds since the scenario's start, so
near 0); a daemon's log has milliseconds since the epoch. Virtual logs are shown as offsets from the start
(`+1m30s`), real ones as RFC 3339 UTC.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import msgspec

from daemon.domain import events as ev
from daemon.domain.durations import format_seconds
from daemon.domain.model import ClusterQueue, Cohort, LocalQueue, Millis, Namespace, PriorityClass, ResourceFlavor
from daemon.domain.state import STATE_VERSION, State, StateSnapshot, WorkloadRecord
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


def state_at(reader: LogReader, seq: int, *, checkpoints: Checkpoints | None = None) -> State:
    """The fold's state after event `seq`: the nearest valid snapshot at or before it (or the nearest of
    `checkpoints`, kept in memory by a fold of this log), then the tail up to it.

    Built with the cyclic collector paused and frozen afterwards (`paused_gc`): a query command builds one state
    and exits, and a state of 100,000 workloads would otherwise be walked by the collector again and again. From
    `checkpoints` (a long-running process) paused only."""
    kept = checkpoints.at_or_before(seq) if checkpoints is not None else None
    if kept is not None:
        with paused_gc():
            return _fold_tail(reader, seq, kept.select(range(len(kept.workloads))), kept.seq)
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
    checkpoints: Checkpoints | None = None,
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

    `checkpoints`: states kept in memory by a fold of the same log (`Checkpoints`, the web view's); the nearest one
    at or before `seq` is F when it is nearer than the file's, and its records are not decoded at all.

    The whole state instead when: no snapshot at or before `seq`, a snapshot without an index (written before it
    existed), one that does not decode or whose index does not match it, or a tail with a configuration event
    (queues, cohorts, flavors, namespaces, priority classes) or an event type not audited here. The snapshot's JSON,
    once inflated, is not inflated again for it.

    A query command builds one state and exits: built with the collector paused and frozen (`paused_gc`); with
    `checkpoints` (a long-running process) paused only."""
    kept = checkpoints.at_or_before(seq) if checkpoints is not None else None
    if kept is not None:
        with paused_gc():
            built = _partial(reader, seq, kept, keys, local_queues, cluster_queues)
            if built is None:
                built = PartialState(_fold_tail(reader, seq, kept.select(range(len(kept.workloads))), kept.seq))
        return built
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


def _fold_tail(reader: LogReader, seq: int, state: State, since: int) -> State:
    apply = state.apply
    for s, event in _tail(reader, since, seq):
        apply(event, s)
    state.seq = seq
    return state


class _Index(Protocol):
    @property
    def keys(self) -> Sequence[str]: ...
    @property
    def admitted(self) -> Iterable[int]: ...
    @property
    def pending(self) -> Iterable[tuple[str, Sequence[int]]]: ...


class _Source(Protocol):
    """A state at a seq whose workload records can be picked (`UnreadSnapshot`, `Checkpoint`)."""

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


# --- checkpoints: states kept in memory by a long-running fold ---------------------------------------------------

CHECKPOINT_EVERY = 2_000
"""Events between two checkpoints at first (`Checkpoints`): a past moment's answer folds at most this many."""
CHECKPOINT_BUDGET_BYTES = 1 * 2**30
"""What the checkpoints' own arrays may take (`Checkpoints.nbytes`) before every other one is dropped."""


@dataclass(frozen=True, slots=True)
class CheckpointIndex:
    """Where things are in a checkpoint's `workloads` (as `SnapshotIndex` for a stored snapshot): the keys (sorted,
    aligned with the records), the positions of the admitted ones, and per ClusterQueue those pending in it."""

    keys: tuple[str, ...]
    admitted: array[int]
    pending: tuple[tuple[str, array[int]], ...]


@dataclass(frozen=True, slots=True, eq=False)
class Checkpoint:
    """The fold's state after event `seq`, by reference: its workload records (immutable, shared with the fold and
    with the other checkpoints while they do not change), its configuration, and how many of the fold's finished
    jobs (`Checkpoints`' list, in the order they finished) it had seen. What `partial_state_at` picks records from,
    as from a stored snapshot, with nothing to decode. Its generations, outbox and tampering records are not kept:
    no answer reads them (`partial_state_at`'s audit)."""

    seq: int
    flavors: tuple[ResourceFlavor, ...]
    cluster_queues: tuple[ClusterQueue, ...]
    cohorts: tuple[Cohort, ...]
    local_queues: tuple[LocalQueue, ...]
    namespaces: tuple[Namespace, ...]
    priority_classes: tuple[PriorityClass, ...]
    rejected: tuple[tuple[str, tuple[str, ...]], ...]
    workloads: tuple[WorkloadRecord, ...]
    index: CheckpointIndex
    finished: list[tuple[str, Millis]]
    finished_upto: int

    @property
    def nbytes(self) -> int:
        """About what this checkpoint adds to the process (the records themselves are shared, so not counted):
        one reference per key and record, 4 bytes per position."""
        positions = len(self.index.admitted) + sum(len(p) for _, p in self.index.pending)
        return 16 * len(self.workloads) + 4 * positions + 512

    def select(self, positions: Iterable[int]) -> State:
        """The state after `seq` with only the workloads at `positions`, built by `State.from_snapshot` as a stored
        snapshot's records are (`UnreadSnapshot.select`)."""
        records = self.workloads
        return State.from_snapshot(
            StateSnapshot(
                seq=self.seq,
                flavors=self.flavors,
                cluster_queues=self.cluster_queues,
                cohorts=self.cohorts,
                local_queues=self.local_queues,
                namespaces=self.namespaces,
                priority_classes=self.priority_classes,
                workloads=tuple(records[i] for i in sorted(set(positions))),
                finished=tuple(self.finished[: self.finished_upto]),
                generations=(),
                config_generation=0,
                counter=0,
                rejected=self.rejected,
            )
        )


class Checkpoints:
    """States of one log at regular seqs, kept in memory by a process that folds the log once and keeps following
    it (the web view's `Series`), so that an answer at a past moment starts from a state at most `every` events
    before it without decoding anything (`partial_state_at(checkpoints=)`).

    `observe` is called after each event the fold applies. A checkpoint is taken `every` events, and right after a
    run of configuration events (so that a tail rarely holds one, which would need the whole state). Memory: each
    checkpoint holds a reference per live workload and a position per admitted or pending one (`nbytes`), plus the
    records it shares no longer with the fold (those changed since). When their sum passes `budget_bytes`, every
    other checkpoint is dropped and `every` doubles: memory stays bounded, and a past moment's answer folds longer
    tails as the log grows (a stored snapshot remains the floor: `partial_state_at` uses the nearer one)."""

    def __init__(self, *, every: int = CHECKPOINT_EVERY, budget_bytes: int = CHECKPOINT_BUDGET_BYTES) -> None:
        self.every = every
        self.budget_bytes = budget_bytes
        self._kept: list[Checkpoint] = []
        self._finished: list[tuple[str, Millis]] | None = None
        self._last = -1
        self._config_seen = False  # a configuration event since the last checkpoint: take one at the next event
        self._config_dirty = True  # the configuration changed since the last checkpoint: do not share its own
        self._added: set[str] = set()  # the jobs observed since the last checkpoint

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._kept)

    @property
    def seqs(self) -> list[int]:
        return [c.seq for c in self._kept]

    def at_or_before(self, seq: int) -> Checkpoint | None:
        kept = self._kept  # replaced whole when thinned: read once (a reader may run in another thread)
        i = bisect_right(kept, seq, key=lambda c: c.seq)
        return kept[i - 1] if i else None

    def observe(self, event: ev.Event, seq: int, state: State) -> None:
        """After `state.apply(event, seq)` by the fold these are kept for."""
        finished = self._finished
        if finished is None:
            # The first event observed: the fold may have started from a snapshot; its finished jobs come first.
            finished = self._finished = list(state.finished.items())
            self._last = seq
        elif isinstance(event, ev.JobFinished):
            finished.append((event.job, event.at))
        if isinstance(event, ev.JobObserved):
            self._added.add(event.workload.key)
        if isinstance(event, ev.ObjectRejected):
            self._config_dirty = True
        if _touched(event) is None:
            self._config_seen = self._config_dirty = True
            return
        if self._config_seen or seq - self._last >= self.every:
            self._config_seen = False
            self.capture(state)

    def capture(self, state: State) -> Checkpoint:
        """A checkpoint of `state` now (`observe` calls it), with the cyclic collector paused: its containers of a
        quarter of a million references would each set off a collection walking the fold's whole heap."""
        with paused_gc():
            return self._capture(state)

    def _capture(self, state: State) -> Checkpoint:
        assert self._finished is not None or not state.finished
        if self._finished is None:
            self._finished = []
        workloads = state.workloads
        # The keys in order, from the last checkpoint's (those still there) and the jobs observed since: two sorted
        # runs, which one sort merges; a whole sort of 250,000 keys each time cost several times more.
        added = self._added
        before = self._kept[-1].index.keys if self._kept else ()
        keys = [k for k in before if k in workloads and k not in added]
        keys += sorted(k for k in added if k in workloads)
        keys.sort()
        if len(keys) != len(workloads):  # a record the fold made without a job.observed of its own (a snapshot's)
            keys = sorted(workloads)
        self._added = set()
        where = dict(zip(keys, range(len(keys)), strict=True))
        view = state.view()
        index = CheckpointIndex(
            keys=tuple(keys),
            admitted=array("i", sorted(map(where.__getitem__, view.admitted))),
            pending=tuple(
                (cq, array("i", map(where.__getitem__, [p.key for p in bucket])))
                for cq, bucket in sorted(view.pending_by_cq.items())
            ),
        )
        prev = self._kept[-1] if self._kept and not self._config_dirty else None
        self._config_dirty = False
        kept = Checkpoint(
            seq=state.seq,
            flavors=prev.flavors if prev else tuple(state.flavors[k] for k in sorted(state.flavors)),
            cluster_queues=(
                prev.cluster_queues if prev else tuple(state.cluster_queues[k] for k in sorted(state.cluster_queues))
            ),
            cohorts=prev.cohorts if prev else tuple(state.cohorts[k] for k in sorted(state.cohorts)),
            local_queues=prev.local_queues
            if prev
            else tuple(state.local_queues[k] for k in sorted(state.local_queues)),
            namespaces=prev.namespaces if prev else tuple(state.namespaces[k] for k in sorted(state.namespaces)),
            priority_classes=(
                prev.priority_classes
                if prev
                else tuple(state.priority_classes[k] for k in sorted(state.priority_classes))
            ),
            rejected=prev.rejected if prev else tuple(sorted(state.rejected.items())),
            workloads=tuple(map(workloads.__getitem__, keys)),
            index=index,
            finished=self._finished,
            finished_upto=len(self._finished),
        )
        self._last = state.seq
        kept_now = [*self._kept, kept]
        while len(kept_now) > 1 and sum(c.nbytes for c in kept_now) > self.budget_bytes:
            end = len(kept_now) - 1
            kept_now = [c for i, c in enumerate(kept_now) if (end - i) % 2 == 0]
            self.every *= 2
        self._kept = kept_now
        return kept
