"""Events to stored bytes and back: canonical JSON payloads, the hash chain's row bytes, and upcasting on read.

Canonical means sorted keys and no whitespace (msgspec), so the same event always has the same bytes and hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

from daemon.domain.events import EVENT_TYPES, Event
from daemon.domain.upcasts import UPCASTERS
from daemon.eventlog.errors import UnknownEvent

GENESIS_HASH = bytes(32)
"""The "previous hash" of seq 1."""

_encoder = msgspec.json.Encoder(order="sorted")
_by_type: dict[str, type[Event]] = {cls.TYPE: cls for cls in EVENT_TYPES}
_decoders: dict[str, msgspec.json.Decoder[Any]] = {cls.TYPE: msgspec.json.Decoder(cls) for cls in EVENT_TYPES}
_generic = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredEvent:
    """One row of the log, exactly as stored."""

    seq: int
    recorded_at: int
    type: str
    version: int
    subject: str
    payload: bytes
    cause: int | None
    hash: bytes


def encode_payload(event: Event) -> bytes:
    return _encoder.encode(event)


def encode_json(value: object) -> bytes:
    """Canonical JSON for anything msgspec can encode (snapshots, exports)."""
    return _encoder.encode(value)


def decode(type_: str, version: int, payload: bytes, *, seq: int) -> Event:
    """Decode a stored payload into its current event class, upcasting old versions; unknown -> UnknownEvent."""
    cls = _by_type.get(type_)
    if cls is None:
        raise UnknownEvent(seq, type_, version)
    try:
        if version == cls.VERSION:
            event: Event = _decoders[type_].decode(payload)
            return event
        if version > cls.VERSION:
            raise UnknownEvent(seq, type_, version, f"this build reads up to version {cls.VERSION}")
        raw = _generic.decode(payload)
        for v in range(version, cls.VERSION):
            upcast = UPCASTERS.get((type_, v))
            if upcast is None:
                raise UnknownEvent(seq, type_, version, f"no upcaster from version {v}")
            raw = upcast(raw)
        converted: Event = msgspec.convert(raw, cls)
        return converted
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError, TypeError) as e:
        raise UnknownEvent(seq, type_, version, f"payload does not decode: {e}") from e


def row_bytes(
    seq: int, recorded_at: int, type_: str, version: int, subject: str, cause: int | None, payload: bytes
) -> bytes:
    """The bytes a row's hash covers: every column but the hash itself."""
    return _encoder.encode([seq, recorded_at, type_, version, subject, cause]) + b"\n" + payload


def chain_hash(previous: bytes, row: bytes) -> bytes:
    return hashlib.sha256(previous + row).digest()


def snapshot_digest(seq: int, state_version: int, event_hash: bytes, body: bytes) -> bytes:
    """What a snapshot row's `digest` holds: it covers every column a replay trusts (the event hash is 32 bytes,
    so the framing is unambiguous)."""
    return hashlib.sha256(_encoder.encode([seq, state_version]) + b"\n" + event_hash + body).digest()
