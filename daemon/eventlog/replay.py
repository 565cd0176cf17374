"""Rebuild state from the log: the newest snapshot that checks, then the tail folded event by event.

A snapshot is only an accelerator. `replay(reader, use_snapshots=False)` must give the same state; tests check it.
"""

from __future__ import annotations

import msgspec

from daemon.domain.state import STATE_VERSION, State, StateSnapshot
from daemon.eventlog import codec
from daemon.eventlog.store import INTEGER_MAX, EventStore, LogReader
from daemon.obs.logging import get_logger

_snapshot_decoder = msgspec.json.Decoder(StateSnapshot)
log = get_logger(__name__)


def encode_snapshot(state: State) -> bytes:
    return codec.encode_json(state.to_snapshot())


def decode_snapshot(body: bytes) -> State:
    return State.from_snapshot(_snapshot_decoder.decode(body))


def replay(reader: LogReader, *, use_snapshots: bool = True, upto: int | None = None) -> State:
    """The state after every event up to `upto` (default: the whole log).

    A snapshot is used only if it checks against the hash chain and its digest (`LogReader.snapshot_at_or_before`)
    and decodes; otherwise a warning is logged and the replay starts from the first event.
    """
    state = State()
    since = 0
    if use_snapshots:
        found = reader.snapshot_at_or_before(STATE_VERSION, INTEGER_MAX if upto is None else upto)
        if found is not None:
            try:
                state = decode_snapshot(found[1])
                if state.seq != found[0]:
                    raise ValueError(f"its body is the state at seq {state.seq}")
                since = found[0]
            except (msgspec.MsgspecError, ValueError, TypeError, KeyError) as e:
                # An unreadable snapshot costs time, never correctness.
                log.warning("snapshot ignored; replaying from the first event", seq=found[0], problem=str(e))
                state, since = State(), 0
    decode, apply = codec.decode, state.apply
    for seq, type_, version, payload in reader.iter_payloads(since):
        if upto is not None and seq > upto:
            break
        apply(decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=seq), seq)
    return state


async def save_snapshot(store: EventStore, state: State) -> bool:
    """Write a snapshot of `state`; True when the log keeps it for good (a historical one, `write_snapshot`)."""
    if state.seq > 0:
        return await store.write_snapshot(state.seq, STATE_VERSION, encode_snapshot(state))
    return False
