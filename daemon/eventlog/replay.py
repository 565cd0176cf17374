"""Rebuild state from the log: the newest snapshot that checks, then the tail folded event by event.

A snapshot is only an accelerator. `replay(reader, use_snapshots=False)` must give the same state; tests check it.

A snapshot body is stored in one of two encodings, told apart by its first bytes (which the snapshot's digest
covers, so the encoding cannot be changed without the snapshot being refused):

- `SNAPSHOT_ZJSON` + zlib(canonical JSON of `StateSnapshot`): written since migration 0005. The state's JSON is
  very repetitive (the same keys and specs for every workload) and compresses about 35x at zlib level 1, so the
  log can keep a snapshot every few tens of thousands of events within the same room (`SNAPSHOT_KEEP_RATIO`).
- canonical JSON of `StateSnapshot` (starts with `{`): written before; still read.

Bodies written now also hold the state's `SnapshotIndex` (`StateSnapshot.index`: the workloads' keys, which are
admitted, which wait in which ClusterQueue), so that a query at a past moment can decode only the workload records its
answer reads (`UnreadSnapshot`, `daemon.query.moment.partial_state_at`). A body without it (written before) is read
as before; `decode_snapshot` ignores it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import msgspec

from daemon.domain.actuation import Order
from daemon.domain.model import ClusterQueue, Cohort, LocalQueue, Millis, Namespace, PriorityClass, ResourceFlavor
from daemon.domain.state import STATE_VERSION, SnapshotIndex, State, StateSnapshot, WorkloadRecord
from daemon.eventlog import codec
from daemon.eventlog.store import INTEGER_MAX, AcceptedBreaks, EventStore, LogReader
from daemon.obs.logging import get_logger

_snapshot_decoder = msgspec.json.Decoder(StateSnapshot)
log = get_logger(__name__)

SNAPSHOT_ZJSON = b"\x00admitd-zjson1\n"
"""The first bytes of a zlib-compressed JSON snapshot body (migration 0005). A JSON body never starts with a NUL."""

SNAPSHOT_MAX_BYTES = 4 * 2**30
"""The most a compressed snapshot may inflate to; a body that claims more is refused (as any undecodable one)."""

_ZLIB_LEVEL = 1  # level 6 is 30% smaller and 2-3x slower to write; level 1 is already ~35x smaller than the JSON


class SnapshotUndecodable(ValueError):
    """A snapshot body that checks against the chain but does not decode (another build's, or damaged)."""


def snapshot_json(state: State) -> bytes:
    """The canonical JSON of the state's snapshot value (what a snapshot body holds, compressed)."""
    return codec.encode_json(state.to_snapshot(index=True))


def compress_snapshot(raw_json: bytes) -> bytes:
    """The stored body for a snapshot's JSON (zlib releases the GIL: the writer runs this in a thread)."""
    return SNAPSHOT_ZJSON + zlib.compress(raw_json, _ZLIB_LEVEL)


def encode_snapshot(state: State) -> bytes:
    return compress_snapshot(snapshot_json(state))


def snapshot_raw_json(body: bytes) -> bytes:
    """A stored body (either encoding) as the snapshot's JSON."""
    if body.startswith(SNAPSHOT_ZJSON):
        inflate = zlib.decompressobj()
        try:
            raw = inflate.decompress(memoryview(body)[len(SNAPSHOT_ZJSON) :], SNAPSHOT_MAX_BYTES)
        except zlib.error as e:
            raise SnapshotUndecodable(f"its compressed body does not inflate: {e}") from e
        if inflate.unconsumed_tail:
            raise SnapshotUndecodable(f"it inflates to more than {SNAPSHOT_MAX_BYTES} bytes")
        if not inflate.eof:
            raise SnapshotUndecodable("its compressed body is cut short")
        if inflate.unused_data:
            raise SnapshotUndecodable("bytes follow its compressed stream")
        return raw
    return body


def decode_snapshot(body: bytes) -> State:
    """The state a stored body holds (either encoding). Raises SnapshotUndecodable or msgspec's errors.
    Callers building a large state run this inside `paused_gc()`, and call `State.build_pending_indexes` there too
    if they will run the cycle (the state builds them when first read otherwise)."""
    return State.from_snapshot(_snapshot_decoder.decode(snapshot_raw_json(body)))


@dataclass(frozen=True, slots=True, kw_only=True)
class UnreadSnapshot:
    """A snapshot body read without its workloads: `StateSnapshot`'s fields (the same names, in the same order, which
    tests/integration/test_partial_moments.py checks) with each workload record left as its raw JSON, so that
    reading one costs a scan of its bytes, not an object. `select` builds a state from the records a caller names."""

    seq: int
    flavors: tuple[ResourceFlavor, ...]
    cluster_queues: tuple[ClusterQueue, ...]
    cohorts: tuple[Cohort, ...]
    local_queues: tuple[LocalQueue, ...]
    namespaces: tuple[Namespace, ...]
    priority_classes: tuple[PriorityClass, ...]
    workloads: tuple[msgspec.Raw, ...]
    finished: tuple[tuple[str, Millis], ...]
    generations: tuple[tuple[str, int], ...]
    config_generation: int
    counter: int
    outbox: tuple[Order, ...] = ()
    rejected: tuple[tuple[str, tuple[str, ...]], ...] = ()
    tampered: tuple[tuple[str, str, int], ...] = ()
    index: SnapshotIndex | None = None

    def select(self, positions: Iterable[int]) -> State:
        """The state this snapshot holds with only the workloads at `positions` (in `workloads`); the rest of the
        value (configuration, finished jobs, generations, outbox, tampering records) whole. Built by
        `State.from_snapshot` itself."""
        decode = _record_decoder.decode
        return State.from_snapshot(
            StateSnapshot(
                seq=self.seq,
                flavors=self.flavors,
                cluster_queues=self.cluster_queues,
                cohorts=self.cohorts,
                local_queues=self.local_queues,
                namespaces=self.namespaces,
                priority_classes=self.priority_classes,
                workloads=tuple(decode(self.workloads[i]) for i in sorted(set(positions))),
                finished=self.finished,
                generations=self.generations,
                config_generation=self.config_generation,
                counter=self.counter,
                outbox=self.outbox,
                rejected=self.rejected,
                tampered=self.tampered,
            )
        )


_unread_decoder = msgspec.json.Decoder(UnreadSnapshot)
_record_decoder = msgspec.json.Decoder(WorkloadRecord)


def decode_unread(body: bytes) -> UnreadSnapshot:
    """A stored body (either encoding) with its workloads left unread. Raises as `decode_snapshot` does."""
    return _unread_decoder.decode(snapshot_raw_json(body))


@contextlib.contextmanager
def paused_gc(*, freeze: bool = False) -> Iterator[None]:
    """No cyclic garbage collection while a state is built (decoded or folded).

    Building a state makes hundreds of thousands of objects that all stay alive, so every collection on the way
    walks the growing heap again for nothing (measured: 0.75-0.94 s to decode a 10 MiB snapshot with the collector
    on, 0.26 s with it paused; the backlog benchmark's fold, 69-79 us per event before, 21 us after). Reference
    counting frees the fold's garbage as always; only the search for cycles waits.

    `freeze=True` (a one-shot reader, such as a query command) then moves everything that exists into the
    collector's permanent generation, so that no later collection walks the state either (the first one after
    `gc.enable()` would walk every object built meanwhile: ~2 s for a state of 115,000 workloads). A long-running
    process should not freeze repeatedly: cyclic garbage frozen that way is never collected.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        gc.enable()


def replay(
    reader: LogReader,
    *,
    use_snapshots: bool = True,
    upto: int | None = None,
    verify: bool = False,
    accepted: AcceptedBreaks | None = None,
) -> State:
    """The state after every event up to `upto` (default: the whole log), its pending indexes built (the cycle reads
    them; a query that reads no index builds its state with `decode_snapshot` and a fold, and never pays for them).

    A snapshot is used only if it checks against the hash chain and its digest (`LogReader.snapshot_at_or_before`)
    and decodes; otherwise a warning is logged and the replay starts from the first event.

    `verify=True` (the daemon's start-up) checks every row it folds against the hash chain, from the snapshot's
    row (the snapshot's digest vouches for the state before it) to the head, and raises ChainBroken at the first
    break that `accepted` (default: the breaks the log records as accepted) does not cover.
    """
    state = State()
    since = 0
    if use_snapshots:
        found = reader.snapshot_at_or_before(STATE_VERSION, INTEGER_MAX if upto is None else upto)
        if found is not None:
            try:
                with paused_gc():
                    state = decode_snapshot(found[1])
                if state.seq != found[0]:
                    raise ValueError(f"its body is the state at seq {state.seq}")
                since = found[0]
            except (msgspec.MsgspecError, ValueError, TypeError, KeyError) as e:
                # An unreadable snapshot costs time, never correctness.
                log.warning("snapshot ignored; replaying from the first event", seq=found[0], problem=str(e))
                state, since = State(), 0
    decode, apply = codec.decode, state.apply
    rows = reader.iter_verified_payloads(since, accepted=accepted) if verify else reader.iter_payloads(since)
    with paused_gc():
        for seq, type_, version, payload in rows:
            if upto is not None and seq > upto:
                break
            apply(decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=seq), seq)
        state.build_pending_indexes()
    return state


async def save_snapshot(store: EventStore, state: State) -> bool:
    """Write a snapshot of `state`; True when the log keeps it for good (a historical one, `write_snapshot`).

    The state is encoded at once (it must not change meanwhile); the compression runs in a thread, so the event
    loop (the writer's commits, the other stages) goes on meanwhile."""
    seq = state.seq
    if seq > 0:
        raw = snapshot_json(state)
        body = await asyncio.to_thread(compress_snapshot, raw)
        return await store.write_snapshot(seq, STATE_VERSION, body)
    return False
