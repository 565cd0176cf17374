"""Rebuild state from the log: the newest valid snapshot, then the tail folded event by event.

A snapshot is only an accelerator. `replay(reader, use_snapshots=False)` must give the same state; tests check it.
"""

from __future__ import annotations

import msgspec

from daemon.domain.state import STATE_VERSION, State, StateSnapshot
from daemon.eventlog import codec
from daemon.eventlog.store import EventStore, LogReader

_snapshot_decoder = msgspec.json.Decoder(StateSnapshot)


def encode_snapshot(state: State) -> bytes:
    return codec.encode_json(state.to_snapshot())


def decode_snapshot(body: bytes) -> State:
    return State.from_snapshot(_snapshot_decoder.decode(body))


def replay(reader: LogReader, *, use_snapshots: bool = True, upto: int | None = None) -> State:
    """The state after every event up to `upto` (default: the whole log)."""
    state = State()
    since = 0
    if use_snapshots:
        found = reader.latest_snapshot(STATE_VERSION)
        if found is not None and (upto is None or found[0] <= upto):
            try:
                state = decode_snapshot(found[1])
                since = found[0]
            except msgspec.MsgspecError:
                state, since = State(), 0  # an unreadable snapshot costs time, never correctness
    decode, apply = codec.decode, state.apply
    for seq, type_, version, payload in reader.iter_payloads(since):
        if upto is not None and seq > upto:
            break
        apply(decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=seq), seq)
    return state


async def save_snapshot(store: EventStore, state: State) -> None:
    if state.seq > 0:
        await store.write_snapshot(state.seq, STATE_VERSION, encode_snapshot(state))
