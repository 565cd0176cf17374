"""Snapshots are tied to the hash chain and checked: an edited or foreign snapshot is never used (replay falls back
to the first event and warns) and `log verify` reports it; triggers refuse updates and unchecked inserts; the
writer keeps only the newest few, so snapshots cannot outgrow the log.

Real: SQLite files and triggers, EventStore/LogReader, replay and the fold, structlog's output (captured), the
`admitd` CLI as a subprocess. Faked: nothing; edits are SQL a user with write access could run (after dropping
the guard triggers where they would refuse it).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from daemon.domain.state import STATE_VERSION
from daemon.eventlog import EventStore, LogReader, codec, replay, save_snapshot
from daemon.eventlog.errors import AppendFailed, BadSnapshot
from daemon.eventlog.migrate import APPLICATION_ID, latest_version, load_migrations
from daemon.eventlog.replay import (
    SNAPSHOT_ZJSON,
    compress_snapshot,
    decode_snapshot,
    snapshot_json,
    snapshot_raw_json,
)
from daemon.eventlog.store import SNAPSHOTS_KEPT
from daemon.query.moment import state_at
from daemon.sim import run as sim_run
from daemon.sim.scenario import load_scenario
from daemon.stages import recorder as stages_recorder
from tests.integration.logtools import ROOT, admitd
from tests.samples import one_of_each


@pytest.fixture
async def log(tmp_path: Path) -> Path:
    """A log with a snapshot at seq 10 and five events after it."""
    path = tmp_path / "snap.db"
    events = one_of_each()
    async with await EventStore.open(path) as store:
        await store.append(events[:10])
        with LogReader(path) as reader:
            await save_snapshot(store, replay(reader))
        await store.append(events[10:15])
    return path


def edit_body(path: Path, seq: int, change: dict[str, object]) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER snapshots_are_never_updated")
    (body,) = conn.execute("SELECT body FROM snapshots WHERE seq = ?", (seq,)).fetchone()
    assert bytes(body).startswith(SNAPSHOT_ZJSON)  # as the writer stores it since migration 0005
    edited = compress_snapshot(codec.encode_json({**json.loads(snapshot_raw_json(bytes(body))), **change}))
    conn.execute("UPDATE snapshots SET body = ? WHERE seq = ?", (edited, seq))
    conn.commit()
    conn.close()
    return edited


async def test_an_edited_snapshot_that_still_decodes_is_not_used_and_verify_reports_it(log: Path) -> None:
    with LogReader(log) as reader:
        truth = replay(reader, use_snapshots=False).to_snapshot()
    edited = edit_body(log, 10, {"namespaces": []})
    assert decode_snapshot(edited).to_snapshot() != replay(LogReader(log), use_snapshots=False, upto=10).to_snapshot()

    with capture_logs() as logs, LogReader(log) as reader:
        assert replay(reader).to_snapshot() == truth
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["seq"] == 10, logs
    assert "digest does not match" in warnings[0]["problem"]

    with pytest.raises(BadSnapshot, match="snapshot at seq 10 does not check: its digest") as info:
        LogReader(log).check()
    assert info.value.seq == 10
    result = admitd("log", "verify", "--db", str(log))
    assert result.returncode == 1
    assert "snapshot at seq 10 does not check" in result.stderr and "Traceback" not in result.stderr


async def test_a_snapshot_whose_event_hash_is_not_the_chains_is_not_used(log: Path) -> None:
    # A snapshot copied from another log (or left from before a rewrite): its own digest checks, the chain does not.
    conn = sqlite3.connect(log)
    for name in (
        "snapshots_are_never_updated",
        "snapshots_follow_the_chain",
        "snapshots_keep_the_newest_three_and_the_kept",
    ):
        conn.execute(f"DROP TRIGGER {name}")
    (body,) = conn.execute("SELECT body FROM snapshots WHERE seq = 10").fetchone()
    other = bytes(32)
    digest = codec.snapshot_digest(12, STATE_VERSION, other, body)
    conn.execute("INSERT INTO snapshots VALUES (12, ?, ?, 0, ?, ?, 0)", (other, STATE_VERSION, body, digest))
    conn.commit()
    conn.close()
    with capture_logs() as logs, LogReader(log) as reader:
        assert replay(reader).to_snapshot() == replay(reader, use_snapshots=False).to_snapshot()
    assert any("event hash does not match" in e.get("problem", "") for e in logs), logs
    with pytest.raises(BadSnapshot, match="snapshot at seq 12 does not check: its event hash"):
        LogReader(log).check()


async def test_the_triggers_refuse_updates_unchecked_inserts_and_deleting_a_kept_snapshot(log: Path) -> None:
    conn = sqlite3.connect(log)
    with pytest.raises(sqlite3.DatabaseError, match="snapshots are never updated"):
        conn.execute("UPDATE snapshots SET body = x'7b7d'")
    with pytest.raises(sqlite3.DatabaseError, match="the newest 3 snapshots and the kept ones are kept"):
        conn.execute("DELETE FROM snapshots")
    row = conn.execute(
        "SELECT seq, event_hash, state_version, created_at, body, digest, kept FROM snapshots"
    ).fetchone()
    with pytest.raises(sqlite3.DatabaseError, match="newer than the newest kept one"):
        conn.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?, ?, ?, ?)", row)
    with pytest.raises(sqlite3.DatabaseError, match="carry its event's hash"):
        conn.execute("INSERT INTO snapshots VALUES (12, ?, ?, ?, ?, ?, ?)", row[1:])
    conn.close()
    assert LogReader(log).check().snapshots == 1


async def test_the_writer_keeps_only_the_newest_snapshots_and_the_file_stays_bounded(tmp_path: Path) -> None:
    # 124,000 jobs once wrote 800 MB of snapshots for 89 MB of events: every snapshot was kept.
    path = tmp_path / "many.db"
    body_size, written = 256 * 1024, 40
    async with await EventStore.open(path) as store:
        await store.append(one_of_each())
        size_after_kept = 0
        for i in range(1, written + 1):
            seq = (await store.append(one_of_each()[-1:]))[0]
            await store.write_snapshot(seq, STATE_VERSION, bytes([i % 251]) * body_size)
            if i == SNAPSHOTS_KEPT + 1:
                size_after_kept = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
        with pytest.raises(AppendFailed, match="is newer or equal"):
            await store.write_snapshot(seq, STATE_VERSION, b"{}")
    size = path.stat().st_size
    conn = sqlite3.connect(path)
    kept = [r[0] for r in conn.execute("SELECT seq FROM snapshots ORDER BY seq")]
    conn.close()
    assert len(kept) == SNAPSHOTS_KEPT and kept[-1] == seq
    # Pruned pages are reused: 40 snapshots take about the room of the first few, not 40 times a snapshot.
    assert size < max(size_after_kept, 1) + 4 * body_size
    assert size < written * body_size / 4
    assert LogReader(path).check().snapshots == SNAPSHOTS_KEPT


# --- historical snapshots (migration 0004): kept for good when the log grew by their size since the last kept one


def kept_rows(path: Path) -> list[tuple[int, int, int]]:
    """`(seq, kept, body bytes)` of every snapshot row, in seq order."""
    conn = sqlite3.connect(path)
    try:
        return [
            (int(s), int(k), int(n))
            for s, k, n in conn.execute("SELECT seq, kept, length(body) FROM snapshots ORDER BY seq")
        ]
    finally:
        conn.close()


def payload_bytes(path: Path, after: int, upto: int) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(
            conn.execute(
                "SELECT total(length(payload)) FROM events WHERE seq > ? AND seq <= ?", (after, upto)
            ).fetchone()[0]
        )
    finally:
        conn.close()


async def test_historical_snapshots_are_kept_when_the_log_grew_by_their_size_and_bound_the_total(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.db"
    events = one_of_each()
    body = 300  # bytes of each snapshot body; each round below appends 66 bytes of payloads
    results: list[tuple[int, bool]] = []
    async with await EventStore.open(path) as store:
        await store.append(events)
        for i in range(30):
            seq = (await store.append(events[-3:]))[-1]
            results.append((seq, await store.write_snapshot(seq, STATE_VERSION, bytes([i % 251]) * body)))
    rows = kept_rows(path)
    kept = [s for s, k, _ in rows if k]
    # What the writer said it kept is what the log holds, and the newest SNAPSHOTS_KEPT are there besides.
    assert kept == [s for s, k in results if k]
    assert [s for s, _, _ in rows[-SNAPSHOTS_KEPT:]] == [s for s, _ in results[-SNAPSHOTS_KEPT:]]
    assert {s for s, _, _ in rows} == set(kept) | {s for s, _ in results[-SNAPSHOTS_KEPT:]}
    assert 5 <= len(kept) < 30
    # Each kept one follows at least its own size of event payloads since the previous kept one, and the first
    # snapshot after that much growth is the one kept (none is skipped that should have been kept).
    previous = 0
    for seq, was_kept in results:
        grown = payload_bytes(path, previous, seq)
        assert was_kept == (grown >= body), (seq, previous, grown)
        if was_kept:
            previous = seq
    # The bound: kept snapshots never take more room than the events' payloads.
    assert sum(n for _, k, n in rows if k) <= payload_bytes(path, 0, results[-1][0])
    assert LogReader(path).check().snapshots == len(rows)


async def test_a_kept_snapshot_of_the_current_shape_cannot_be_deleted_one_of_an_old_shape_is_pruned(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shapes.db"
    events = one_of_each()
    async with await EventStore.open(path) as store:
        await store.append(events)
        first = (await store.append(events[-1:]))[0]
        assert await store.write_snapshot(first, STATE_VERSION - 1, b"{}")  # an old shape, kept
        seqs = []
        for _ in range(SNAPSHOTS_KEPT + 1):
            seqs.append((await store.append(events[-1:]))[0])
            await store.write_snapshot(seqs[-1], STATE_VERSION, b"{}")
    rows = kept_rows(path)
    assert first not in [s for s, _, _ in rows]  # the old shape's kept snapshot went with the first new-shape prune
    kept_now = [s for s, k, _ in rows if k]
    assert kept_now and kept_now[0] == seqs[0]
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError, match="the kept ones are kept"):
        conn.execute("DELETE FROM snapshots WHERE seq = ?", (kept_now[0],))
    conn.close()


async def test_a_past_moment_folds_from_the_nearest_kept_snapshot_and_equals_the_full_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Compressed (migration 0005), a small scenario's state is small next to its events: the default ratio keeps
    # several snapshots of it, and prunes others.
    monkeypatch.setattr(sim_run, "SNAPSHOT_EVERY", 5)
    monkeypatch.setattr(stages_recorder, "_CATCH_UP_EVERY", 1)
    db = tmp_path / "sim.db"
    await sim_run.run_simulation(load_scenario(ROOT / "config" / "samples" / "fair-sharing.yaml"), db_path=db)
    rows = kept_rows(db)
    kept = [s for s, k, _ in rows if k]
    assert len(kept) >= 3 and len(rows) > len(kept), rows
    with LogReader(db) as reader:
        last = reader.last_seq()
        for seq in range(1, last + 1):
            nearest = reader.snapshot_at_or_before(STATE_VERSION, seq)
            below = [s for s, _, _ in rows if s <= seq]
            assert (nearest[0] if nearest else None) == (below[-1] if below else None)
            assert state_at(reader, seq).to_snapshot() == replay(reader, use_snapshots=False, upto=seq).to_snapshot()
        assert reader.check().snapshots == len(rows)


def _log_at_schema(path: Path, version: int) -> Path:
    """An empty log as the build whose newest migration was `version` left it."""
    conn = sqlite3.connect(path, isolation_level=None)
    for m in load_migrations()[:version]:
        conn.executescript(
            f"BEGIN; PRAGMA application_id = {APPLICATION_ID}; {m.sql}\nPRAGMA user_version = {m.version}; COMMIT;"
        )
    conn.close()
    return path


async def test_a_schema_3_log_migrates_its_snapshots_stay_checked_and_are_not_kept_for_good(tmp_path: Path) -> None:
    path = _log_at_schema(tmp_path / "v3.db", 3)
    events = one_of_each()
    async with await EventStore.open(path) as store:  # migrates to the newest version first
        await store.append(events)
    # Rewind the schema to version 3 with a snapshot as 0003 wrote it (no `kept` column), then migrate again.
    conn = sqlite3.connect(path, isolation_level=None)
    seq, event_hash = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    conn.executescript(
        "BEGIN; DROP TABLE snapshots;"
        + load_migrations()[2].sql.split("DROP TABLE snapshots;", 1)[1]
        + "PRAGMA user_version = 3; COMMIT;"
    )
    body = codec.encode_json(replay(LogReader(path)).to_snapshot())
    digest = codec.snapshot_digest(seq, STATE_VERSION, event_hash, body)
    conn.execute("INSERT INTO snapshots VALUES (?, ?, ?, 0, ?, ?)", (seq, event_hash, STATE_VERSION, body, digest))
    conn.close()
    async with await EventStore.open(path) as store:
        more = await store.append(events[-1:])
        # No kept one yet: the whole log counts as grown since, and it is bigger than this body.
        assert await store.write_snapshot(more[0], STATE_VERSION, b"{}") is True
    assert kept_rows(path) == [(seq, 0, len(body)), (more[0], 1, 2)]
    with LogReader(path) as reader:
        assert reader.schema_version == latest_version() == 5
        assert reader.check().snapshots == 2
        assert reader.snapshot_at_or_before(STATE_VERSION, seq) == (seq, body)


# --- compressed bodies (migration 0005) and the bodies written before them


async def test_a_schema_4_log_with_a_plain_json_snapshot_migrates_and_its_snapshot_is_still_used(
    tmp_path: Path,
) -> None:
    # A log as the previous build left it: schema 4, a snapshot body of plain canonical JSON.
    path = _log_at_schema(tmp_path / "v4.db", 4)
    events = one_of_each()
    async with await EventStore.open(path) as store:
        await store.append(events)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA user_version = 4")
    seq, event_hash = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    with LogReader(path) as reader:
        state = replay(reader, use_snapshots=False)
    body = snapshot_json(state)  # the previous build's body: `codec.encode_json(state.to_snapshot())`
    assert body.startswith(b"{")
    digest = codec.snapshot_digest(seq, STATE_VERSION, event_hash, body)
    conn.execute("INSERT INTO snapshots VALUES (?, ?, ?, 0, ?, ?, 1)", (seq, event_hash, STATE_VERSION, body, digest))
    conn.close()
    with LogReader(path) as reader:
        assert reader.schema_version == 4
        assert reader.snapshot_at_or_before(STATE_VERSION, seq) == (seq, body)
    async with await EventStore.open(path) as store:  # migrates to 5; the old body stays as it was
        more = await store.append(events[-2:])
        with LogReader(path) as reader:
            assert await save_snapshot(store, replay(reader)) is False  # 2 events do not outweigh it
    with capture_logs() as logs, LogReader(path) as reader:
        assert reader.schema_version == 5
        assert reader.check().snapshots == 2
        assert reader.snapshot_at_or_before(STATE_VERSION, seq) == (seq, body)
        assert decode_snapshot(body).to_snapshot() == state.to_snapshot()
        for at in (seq, more[0]):  # from the old JSON snapshot, with and without a tail
            assert state_at(reader, at).to_snapshot() == replay(reader, use_snapshots=False, upto=at).to_snapshot()
        newest = reader.snapshot_at_or_before(STATE_VERSION, more[-1])
        assert newest is not None and newest[0] == more[-1] and newest[1].startswith(SNAPSHOT_ZJSON)
        assert replay(reader).to_snapshot() == replay(reader, use_snapshots=False).to_snapshot()
    assert not [e for e in logs if e["log_level"] == "warning"], logs


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda raw: SNAPSHOT_ZJSON + b"not a zlib stream", "does not inflate"),
        (lambda raw: compress_snapshot(raw)[:-9], "cut short"),
        (lambda raw: compress_snapshot(raw[:-1]), "JSON"),
        (lambda raw: compress_snapshot(raw) + b"x", "bytes follow"),
    ],
    ids=["not-zlib", "cut-short", "json-cut", "trailing"],
)
async def test_a_compressed_body_that_checks_but_does_not_decode_costs_time_never_correctness(
    log: Path, damage: object, problem: str
) -> None:
    # Written with a valid digest (as a buggy writer would): the digest checks, decoding does not.
    conn = sqlite3.connect(log)
    conn.execute("DROP TRIGGER snapshots_are_never_updated")
    body, event_hash = conn.execute("SELECT body, event_hash FROM snapshots WHERE seq = 10").fetchone()
    bad = damage(snapshot_raw_json(bytes(body)))  # type: ignore[operator]
    digest = codec.snapshot_digest(10, STATE_VERSION, bytes(event_hash), bad)
    conn.execute("UPDATE snapshots SET body = ?, digest = ? WHERE seq = 10", (bad, digest))
    conn.commit()
    conn.close()
    with capture_logs() as logs, LogReader(log) as reader:
        truth = replay(reader, use_snapshots=False).to_snapshot()
        assert replay(reader).to_snapshot() == truth
        assert state_at(reader, 12).to_snapshot() == replay(reader, use_snapshots=False, upto=12).to_snapshot()
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["seq"] == 10, logs
    if problem != "JSON":
        assert problem in warnings[0]["problem"], warnings


def test_a_body_that_would_inflate_beyond_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = b"{" + b" " * 100_000 + b"}"
    eventlog_replay = sys.modules[decode_snapshot.__module__]  # the package's `replay` name is the function
    monkeypatch.setattr(eventlog_replay, "SNAPSHOT_MAX_BYTES", 50_000)
    with pytest.raises(ValueError, match="inflates to more than 50000 bytes"):
        snapshot_raw_json(compress_snapshot(raw))
    monkeypatch.setattr(eventlog_replay, "SNAPSHOT_MAX_BYTES", 200_000)
    assert snapshot_raw_json(compress_snapshot(raw)) == raw
