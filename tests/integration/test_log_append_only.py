"""Append-only holds against INSERT as well: INSERT OR REPLACE (which fires no DELETE trigger) cannot rewrite a
row, not even the last one with a recomputed hash, and a log written before migration 0003 gets the same guard.

Real: SQLite files and triggers, the migrations in `migrations/`, LogReader, the `admitd` CLI as a subprocess.
Faked: nothing; the attacks are SQL statements a user with write access to the file could run.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from daemon.domain import events as ev
from daemon.eventlog import EventStore, LogReader, codec
from daemon.eventlog.codec import GENESIS_HASH
from daemon.eventlog.migrate import APPLICATION_ID, latest_version, load_migrations
from tests.integration.logtools import admitd

N = 10


def job(i: int) -> ev.Event:
    return ev.JobFinished(job=f"ns/j{i}", at=i)


@pytest.fixture
async def log(tmp_path: Path) -> Path:
    path = tmp_path / "log.db"
    async with await EventStore.open(path) as store:
        await store.append([job(i) for i in range(1, N + 1)])
    return path


def forged(conn: sqlite3.Connection, seq: int) -> tuple[object, ...]:
    """Row `seq` with another payload and a hash recomputed to chain onto the row before it."""
    at, type_, version, subject, payload, cause = conn.execute(
        "SELECT recorded_at, type, version, subject, payload, cause FROM events WHERE seq = ?", (seq,)
    ).fetchone()
    previous = conn.execute("SELECT hash FROM events WHERE seq = ?", (seq - 1,)).fetchone()
    payload = payload.replace(b'"at":', b'"at":9')
    digest = codec.chain_hash(
        GENESIS_HASH if previous is None else previous[0],
        codec.row_bytes(seq, at, type_, version, subject, cause, payload),
    )
    return (seq, at, type_, version, subject, payload, cause, digest)


REPLACE = "INSERT OR REPLACE INTO events (seq, recorded_at, type, version, subject, payload, cause, hash) VALUES (?,?,?,?,?,?,?,?)"  # noqa: E501


def head(path: Path) -> tuple[int, bytes]:
    with LogReader(path) as reader:
        v = reader.check()
    return v.head_seq, v.head_hash


@pytest.mark.parametrize("seq", [3, N], ids=["a-row-in-the-middle", "the-last-row"])
async def test_insert_or_replace_cannot_rewrite_a_row(log: Path, seq: int) -> None:
    before = head(log)
    conn = sqlite3.connect(log)
    with pytest.raises(sqlite3.DatabaseError, match="append-only; an insert at or below the last seq is refused"):
        conn.execute(REPLACE, forged(conn, seq))
    conn.close()
    assert head(log) == before


@pytest.mark.parametrize(
    ("statement", "params"),
    [
        ("INSERT INTO events (recorded_at, type, version, subject, payload, cause, hash) "
         "VALUES (0, 'job.finished', 1, 'job/ns/x', '{}', NULL, x'00')", ()),
        ("INSERT OR IGNORE INTO events (seq, recorded_at, type, version, subject, payload, cause, hash) "
         "VALUES (?, 0, 'job.finished', 1, 'job/ns/x', '{}', NULL, x'00')", (1,)),
    ],
    ids=["without-a-seq", "or-ignore-below-the-end"],
)  # fmt: skip
async def test_an_insert_at_or_below_the_end_is_refused(log: Path, statement: str, params: tuple[int, ...]) -> None:
    conn = sqlite3.connect(log)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute(statement, params)
    conn.close()
    assert LogReader(log).verify() == N


async def test_a_rewritten_last_row_shows_in_the_printed_head_though_the_chain_is_intact(log: Path) -> None:
    # Someone who drops the guard and rewrites the last row with a recomputed hash leaves a chain that is intact on
    # its own; the head that `log verify` prints differs from the one an operator kept, and that is what tells.
    kept = admitd("log", "verify", "--db", str(log)).stdout
    conn = sqlite3.connect(log)
    conn.execute("DROP TRIGGER events_are_append_only_after_the_end")
    conn.execute(REPLACE, forged(conn, N))
    conn.commit()
    conn.close()
    now = admitd("log", "verify", "--db", str(log))
    assert now.returncode == 0
    assert f"head seq {N} hash" in now.stdout and f"head seq {N} hash" in kept
    assert now.stdout.split("hash ")[-1] != kept.split("hash ")[-1]


def _schema_2_log(path: Path) -> None:
    """A log as admitd wrote it before migration 0003: schema version 2, events and one old snapshot."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA page_size = 16384")
    for m in load_migrations()[:2]:
        conn.executescript(
            f"BEGIN; PRAGMA application_id = {APPLICATION_ID}; {m.sql}\nPRAGMA user_version = {m.version}; COMMIT;"
        )
    previous = GENESIS_HASH
    for seq in range(1, N + 1):
        e = job(seq)
        payload = codec.encode_payload(e)
        previous = codec.chain_hash(previous, codec.row_bytes(seq, seq, e.TYPE, e.VERSION, e.subject, None, payload))
        conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, seq, e.TYPE, e.VERSION, e.subject, payload, None, previous),
        )
    conn.execute("INSERT INTO snapshots VALUES (?, ?, 1, 0, x'7b7d')", (N, previous))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()


async def test_a_log_written_before_the_guard_migrates_and_gets_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_2_log(path)
    conn = sqlite3.connect(path)
    conn.execute(REPLACE, forged(conn, 4))  # the hole, before the migration
    conn.rollback()
    conn.close()
    async with await EventStore.open(path) as store:  # migrates
        assert await store.append([job(N + 1)]) == [N + 1]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version() >= 3
    assert conn.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 0  # unchecked old snapshots are dropped
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute(REPLACE, forged(conn, 4))
    conn.close()
    assert LogReader(path).verify() == N + 1
