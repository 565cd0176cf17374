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
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from daemon.domain.state import STATE_VERSION
from daemon.eventlog import EventStore, LogReader, codec, replay, save_snapshot
from daemon.eventlog.errors import AppendFailed, BadSnapshot
from daemon.eventlog.replay import decode_snapshot
from daemon.eventlog.store import SNAPSHOTS_KEPT
from tests.integration.logtools import admitd
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
    edited = codec.encode_json({**json.loads(body), **change})
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
    for name in ("snapshots_are_never_updated", "snapshots_follow_the_chain", "snapshots_keep_the_newest_three"):
        conn.execute(f"DROP TRIGGER {name}")
    (body,) = conn.execute("SELECT body FROM snapshots WHERE seq = 10").fetchone()
    other = bytes(32)
    digest = codec.snapshot_digest(12, STATE_VERSION, other, body)
    conn.execute("INSERT INTO snapshots VALUES (12, ?, ?, 0, ?, ?)", (other, STATE_VERSION, body, digest))
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
    with pytest.raises(sqlite3.DatabaseError, match="the newest 3 snapshots are kept"):
        conn.execute("DELETE FROM snapshots")
    row = conn.execute("SELECT seq, event_hash, state_version, created_at, body, digest FROM snapshots").fetchone()
    with pytest.raises(sqlite3.DatabaseError, match="newer than the newest kept one"):
        conn.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?, ?, ?)", row)
    with pytest.raises(sqlite3.DatabaseError, match="carry its event's hash"):
        conn.execute("INSERT INTO snapshots VALUES (12, ?, ?, ?, ?, ?)", row[1:])
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
