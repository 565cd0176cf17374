"""The event codec: canonical bytes, golden fixtures of every stored (type, version), upcasting, unknown events.

Real: msgspec encoding and the upcaster chain. Faked: nothing; no database is involved.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from daemon.domain.events import EVENT_TYPES, JobObserved
from daemon.eventlog import codec
from daemon.eventlog.errors import UnknownEvent
from tests.samples import one_of_each

GOLDEN = Path(__file__).parent.parent / "golden"
FIXTURES = sorted(GOLDEN.glob("*.json"))


def _parse_name(path: Path) -> tuple[str, int]:
    m = re.fullmatch(r"(.+)@v(\d+)\.json", path.name)
    assert m, path.name
    return m.group(1), int(m.group(2))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_every_golden_payload_still_decodes(path: Path) -> None:
    type_, version = _parse_name(path)
    event = codec.decode(type_, version, path.read_bytes().strip(), seq=1)
    assert type_ == event.TYPE


def test_every_current_type_and_version_has_a_golden_fixture() -> None:
    have = {_parse_name(p) for p in FIXTURES}
    missing = [(c.TYPE, c.VERSION) for c in EVENT_TYPES if (c.TYPE, c.VERSION) not in have]
    assert missing == [], "run `python -m tests.golden.generate` and commit the new fixtures"


def test_current_fixtures_are_byte_identical_to_a_fresh_encoding() -> None:
    # A silent change of field names or order would change hashes of new rows and break old readers' expectations.
    for event in one_of_each():
        stored = (GOLDEN / f"{event.TYPE}@v{event.VERSION}.json").read_bytes().strip()
        assert codec.encode_payload(event) == stored, event.TYPE


def test_a_version_0_job_observed_payload_is_upcast_to_the_current_shape() -> None:
    event = codec.decode("job.observed", 0, (GOLDEN / "job.observed@v0.json").read_bytes(), seq=7)
    assert isinstance(event, JobObserved)
    assert event.workload.key == "research/legacy"
    assert event.workload.pod_sets[0].requests == {"nvidia.com/gpu": 1000}


@pytest.mark.parametrize(
    ("type_", "version", "payload", "message"),
    [
        ("job.exploded", 1, b"{}", "unknown event type or version"),
        ("job.observed", 9, b"{}", "this build reads up to version 3"),
        ("job.finished", 1, b'{"job": "a/b"}', "payload does not decode"),
    ],
    ids=["unknown-type", "future-version", "payload-missing-a-field"],
)
def test_an_undecodable_event_is_a_clear_error_naming_its_seq(
    type_: str, version: int, payload: bytes, message: str
) -> None:
    with pytest.raises(UnknownEvent) as info:
        codec.decode(type_, version, payload, seq=42)
    assert info.value.seq == 42
    assert "event seq 42" in str(info.value)
    assert message in str(info.value)


def test_the_hash_covers_every_column() -> None:
    payload = b'{"at":1,"job":"a/b","succeeded":true}'
    base = codec.row_bytes(5, 1000, "job.finished", 1, "job/a/b", None, payload)
    variants = [
        codec.row_bytes(6, 1000, "job.finished", 1, "job/a/b", None, payload),
        codec.row_bytes(5, 1001, "job.finished", 1, "job/a/b", None, payload),
        codec.row_bytes(5, 1000, "job.deleted", 1, "job/a/b", None, payload),
        codec.row_bytes(5, 1000, "job.finished", 2, "job/a/b", None, payload),
        codec.row_bytes(5, 1000, "job.finished", 1, "job/a/c", None, payload),
        codec.row_bytes(5, 1000, "job.finished", 1, "job/a/b", 3, payload),
        codec.row_bytes(5, 1000, "job.finished", 1, "job/a/b", None, payload.replace(b"true", b"false")),
    ]
    digest = codec.chain_hash(codec.GENESIS_HASH, base)
    assert all(codec.chain_hash(codec.GENESIS_HASH, v) != digest for v in variants)
    assert codec.chain_hash(b"\x01" * 32, base) != digest  # and the previous row's hash
