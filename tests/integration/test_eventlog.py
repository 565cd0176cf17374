"""The event log on a real SQLite file: append-only guards, hash chain, crash atomicity, migrations, bad files, CLI.

Real: SQLite (WAL, triggers), aiosqlite, the `admitd` CLI run as a subprocess, SIGKILL of a real writer process.
Faked: nothing; events are samples rather than cluster observations.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.domain import events as ev
from daemon.domain.state import STATE_VERSION
from daemon.eventlog import EventStore, LogReader, codec, default_db_path, replay, save_snapshot
from daemon.eventlog.errors import (
    ChainBroken,
    CorruptDatabase,
    LogLocked,
    NotAnEventLog,
    SchemaTooNew,
    UnknownEvent,
)
from daemon.eventlog.migrate import latest_version
from tests.samples import one_of_each

ROOT = Path(__file__).resolve().parents[2]


def admitd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )


async def make_log(path: Path, events: list[ev.Event] | None = None) -> None:
    async with await EventStore.open(path) as store:
        await store.append(events if events is not None else one_of_each())


@pytest.fixture
async def log(tmp_path: Path) -> Path:
    path = tmp_path / "admitd.db"
    await make_log(path)
    return path


def drop_guards(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TRIGGER events_are_append_only_no_update")
    conn.execute("DROP TRIGGER events_are_append_only_no_delete")
    return conn


@pytest.mark.parametrize(
    "statement",
    ["UPDATE events SET payload = x'00' WHERE seq = 3", "DELETE FROM events WHERE seq = 3", "DELETE FROM events"],
    ids=["update-a-payload", "delete-a-row", "delete-everything"],
)
async def test_update_and_delete_are_refused_by_the_database_itself(log: Path, statement: str) -> None:
    conn = sqlite3.connect(log)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute(statement)
    conn.close()
    assert LogReader(log).verify() == len(one_of_each())


async def test_verify_names_the_first_edited_row(log: Path) -> None:
    conn = drop_guards(log)
    conn.execute("""UPDATE events SET payload = replace(payload, 'team-research', 'team-evil') WHERE seq = 4""")
    conn.close()
    with pytest.raises(ChainBroken) as info:
        LogReader(log).verify()
    assert info.value.seq == 4
    result = admitd("log", "verify", "--db", str(log))
    assert result.returncode == 1
    assert "seq 4" in result.stderr


async def test_verify_names_a_deleted_row(log: Path) -> None:
    conn = drop_guards(log)
    conn.execute("DELETE FROM events WHERE seq = 6")
    conn.close()
    with pytest.raises(ChainBroken) as info:
        LogReader(log).verify()
    assert info.value.seq == 6
    assert "missing" in str(info.value)


async def test_verify_catches_a_deleted_tail(log: Path) -> None:
    conn = drop_guards(log)
    last = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
    conn.execute("DELETE FROM events WHERE seq >= ?", (last - 1,))
    conn.close()
    with pytest.raises(ChainBroken) as info:
        LogReader(log).verify()
    assert info.value.seq == last - 1


async def test_verify_catches_a_rewritten_row_with_a_recomputed_own_hash(log: Path) -> None:
    # Someone who rewrites a row and recomputes its hash still breaks the link to the next row.
    conn = drop_guards(log)
    seq, at, type_, ver, subj, payload, cause, prev = conn.execute(
        "SELECT e.seq, e.recorded_at, e.type, e.version, e.subject, e.payload, e.cause, p.hash "
        "FROM events e JOIN events p ON p.seq = e.seq - 1 WHERE e.seq = 5"
    ).fetchone()
    forged = payload.replace(b"high", b"evil")
    digest = codec.chain_hash(prev, codec.row_bytes(seq, at, type_, ver, subj, cause, forged))
    conn.execute("UPDATE events SET payload = ?, hash = ? WHERE seq = 5", (forged, digest))
    conn.close()
    with pytest.raises(ChainBroken) as info:
        LogReader(log).verify()
    assert info.value.seq == 6


@pytest.mark.timeout(180)
@pytest.mark.parametrize("delay", [0.4, 0.9, 1.6], ids=["early-kill", "mid-kill", "late-kill"])
def test_a_writer_killed_mid_batch_leaves_all_of_the_batch_or_none(tmp_path: Path, delay: float) -> None:
    path, batch = tmp_path / "killed.db", 500
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.killed_writer", str(path), str(batch)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
    with LogReader(path) as reader:
        count = reader.verify()
    assert count > 0
    assert count % batch == 0, f"{count} events is not a whole number of {batch}-event batches"


async def test_migrations_apply_once_and_reopening_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await make_log(path, [])
    await make_log(path, [])
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version()
    assert (
        conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'events'").fetchone()[0] == 1
    )


async def test_a_database_from_a_newer_admitd_is_refused_and_left_untouched(log: Path) -> None:
    conn = sqlite3.connect(log)
    conn.execute(f"PRAGMA user_version = {latest_version() + 1}")
    conn.close()
    before = log.read_bytes()
    with pytest.raises(SchemaTooNew):
        await EventStore.open(log)
    result = admitd("log", "stats", "--db", str(log))
    assert result.returncode == 2
    assert "newer admitd" in result.stderr and str(log) in result.stderr
    assert log.read_bytes() == before


async def test_a_foreign_sqlite_file_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(NotAnEventLog):
        await EventStore.open(path)
    assert path.read_bytes() == before
    result = admitd("log", "verify", "--db", str(path))
    assert (result.returncode, result.stderr.count("\n")) == (2, 1)
    assert "not an admitd event log" in result.stderr


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "not a regular file"),
        (lambda p: p.write_text("hello, I am a text file\n" * 100), "not a SQLite database"),
    ],
    ids=["missing-file", "a-directory", "not-sqlite-at-all"],
)
def test_bad_database_paths_get_one_line_exit_2_and_are_not_created(
    tmp_path: Path, setup: object, message: str
) -> None:
    path = tmp_path / "x.db"
    setup(path)  # type: ignore[operator]
    for sub in (["verify"], ["export"], ["stats"]):
        result = admitd("log", *sub, "--db", str(path))
        assert result.returncode == 2, result
        assert result.stderr.strip().count("\n") == 0
        assert message in result.stderr and str(path) in result.stderr
    assert path.exists() == (message != "no such file")


async def test_a_corrupt_file_is_reported_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    await make_log(path, [ev.JobFinished(job=f"ns/{'y' * 300}-{i}", at=i) for i in range(2000)])
    data = bytearray(path.read_bytes())
    data[4096 * 3 : 4096 * 6] = b"\xde\xad\xbe\xef" * 3072
    path.write_bytes(bytes(data))
    with pytest.raises((CorruptDatabase, ChainBroken)):
        LogReader(path).verify()
    result = admitd("log", "verify", "--db", str(path))
    assert result.returncode in (1, 2)
    assert "corrupt" in result.stderr or "hash chain broken" in result.stderr


async def test_export_writes_one_json_object_per_event_with_stable_keys(log: Path) -> None:
    n = len(one_of_each())  # the sample log ends with the four deletions
    result = admitd("log", "export", "--db", str(log), "--since", str(n - 4))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["seq"] for row in lines] == [n - 3, n - 2, n - 1, n]
    assert list(lines[0]) == ["cause", "hash", "payload", "recorded_at", "seq", "subject", "type", "version"]
    assert lines[0]["type"] == "localqueue.deleted"
    assert lines[0]["payload"] == {"name": "research-queue", "namespace": "research"}


async def test_stats_counts_events_per_type(log: Path) -> None:
    result = admitd("log", "stats", "--db", str(log), "--json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["events"] == len(one_of_each())
    assert body["by_type"]["workload.admitted"] == 1
    assert body["first_seq"] == 1 and body["last_seq"] == len(one_of_each())


async def test_a_reader_never_blocks_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    async with await EventStore.open(path) as store:
        await store.append([ev.JobFinished(job=f"ns/j{i}", at=i) for i in range(100)])
        reader = LogReader(path)
        it = reader.iter_events(chunk=10)
        first = [next(it) for _ in range(5)]  # a read transaction is open on a live log
        stored = await asyncio.wait_for(store.append([ev.JobFinished(job="ns/late", at=1)]), timeout=5)
        assert stored == [101]
        rest = list(it)
        assert len(first) + len(rest) >= 100
        assert LogReader(path).last_seq() == 101


async def test_concurrent_appends_are_grouped_and_chained_in_order(tmp_path: Path) -> None:
    path = tmp_path / "group.db"
    async with await EventStore.open(path, max_batch=1000) as store:
        results = await asyncio.gather(*(store.append([ev.JobFinished(job=f"ns/j{i}", at=i)]) for i in range(300)))
    seqs = sorted(r[0] for r in results)
    assert seqs == list(range(1, 301))
    assert LogReader(path).verify() == 300


async def test_replay_with_snapshots_equals_replay_without(tmp_path: Path) -> None:
    path = tmp_path / "snap.db"
    events = one_of_each()
    async with await EventStore.open(path) as store:
        await store.append(events[:10])
        with LogReader(path) as reader:
            await save_snapshot(store, replay(reader))
        await store.append(events[10:15])
    with LogReader(path) as reader:
        assert reader.latest_snapshot(STATE_VERSION) is not None
        with_snap = replay(reader)
        scratch = replay(reader, use_snapshots=False)
    assert with_snap.to_snapshot() == scratch.to_snapshot()
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER snapshots_keep_the_newest_three_and_the_kept")  # the newest snapshots are guarded
    conn.execute("DELETE FROM snapshots")
    conn.commit()
    conn.close()
    with LogReader(path) as reader:
        assert replay(reader).to_snapshot() == scratch.to_snapshot()


async def test_replay_of_an_unknown_stored_event_names_its_seq(log: Path) -> None:
    conn = sqlite3.connect(log)
    seq = len(one_of_each()) + 1
    conn.execute(
        "INSERT INTO events (seq, recorded_at, type, version, subject, payload, cause, hash) "
        "VALUES (?, 0, 'job.teleported', 1, 'job/a/b', '{}', NULL, x'00')",
        (seq,),
    )
    conn.commit()
    conn.close()
    with pytest.raises(UnknownEvent, match=rf"event seq {seq}: cannot decode 'job.teleported' version 1"):
        replay(LogReader(log))


@pytest.mark.parametrize(
    ("state_directory", "expected"),
    [(None, "admitd.db"), ("/var/lib/admitd", "/var/lib/admitd/admitd.db"), ("/a:/b", "/a/admitd.db")],
    ids=["no-systemd", "systemd-state-directory", "several-state-directories-take-the-first"],
)
def test_the_default_db_path_follows_systemds_state_directory(
    monkeypatch: pytest.MonkeyPatch, state_directory: str | None, expected: str
) -> None:
    if state_directory is None:
        monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    else:
        monkeypatch.setenv("STATE_DIRECTORY", state_directory)
    assert default_db_path() == Path(expected)


async def test_a_second_writer_fails_at_open_instead_of_forking_the_chain(tmp_path: Path) -> None:
    # More in test_log_single_writer.py (two processes, the lock's PID, simulate --db started twice).
    path = tmp_path / "two.db"
    async with await EventStore.open(path) as first:
        with pytest.raises(LogLocked, match=f"process {os.getpid()} is writing this log"):
            await EventStore.open(path)
        await first.append([ev.JobFinished(job="ns/a", at=1)])
    assert LogReader(path).verify() == 1


def test_opening_a_log_cancelled_while_connecting_leaves_no_thread_to_answer_a_closed_loop(tmp_path: Path) -> None:
    """Ctrl-C just after a run began: the open is cancelled while aiosqlite's thread makes the connection. That
    thread must be done before the event loop closes, or it dies on stderr with "Event loop is closed"."""
    import threading  # noqa: PLC0415

    errors: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        for i in range(5):

            async def cancelled_open(path: Path = tmp_path / f"log-{i}.db") -> None:
                task = asyncio.create_task(EventStore.open(path))
                await asyncio.sleep(0)  # it runs up to its first await: the connection
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

            before = threading.active_count()
            asyncio.run(cancelled_open())
            time.sleep(0.2)  # a thread left behind would answer now, to a closed loop
            assert threading.active_count() <= before
        assert errors == []
        assert asyncio.run(_open_and_close(tmp_path / "log-0.db"))  # the writer lock was released
    finally:
        threading.excepthook = previous


async def _open_and_close(path: Path) -> bool:
    store = await EventStore.open(path)
    await store.close()
    return True
