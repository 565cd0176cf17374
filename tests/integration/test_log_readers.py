"""Readers leave nothing behind and work where they can only read; `--db` paths are handled as a shell and a
careful user expect: the hint printed after a run is shell-quoted, and a dangling symlink is never followed.

Real: SQLite files (WAL), LogReader, EventStore, the `admitd` CLI as a subprocess, and a read-only bind mount in a
private mount namespace (`unshare -rm`; skipped where user namespaces are not allowed, as root ignores file
modes). Faked: nothing.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.domain import events as ev
from daemon.eventlog import EventStore, LogReader
from daemon.eventlog.errors import DatabaseUnavailable, NotAnEventLog
from tests.integration.logtools import ROOT, admitd, assert_one_clean_line, scenario


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def make_log(path: Path, n: int = 5) -> None:
    async with await EventStore.open(path) as store:
        await store.append([ev.JobFinished(job=f"ns/j{i}", at=i) for i in range(n)])


async def test_reading_a_closed_log_leaves_no_files_behind(tmp_path: Path) -> None:
    path = tmp_path / "closed.db"
    await make_log(path)
    before = listing(tmp_path)
    assert before == ["closed.db", "closed.db.lock"]
    with LogReader(path) as reader:
        assert reader.verify() == 5
        assert reader.stats().events == 5
    for command in (["verify"], ["export"], ["stats", "--json"]):
        assert admitd("log", *command, "--db", str(path)).returncode == 0
    assert listing(tmp_path) == before


async def test_a_reader_never_writes_even_when_it_opens_the_file_read_write(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    await make_log(path)
    before = path.read_bytes()
    with LogReader(path) as reader, pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader._conn.execute("CREATE TABLE t (x)")
    assert path.read_bytes() == before


async def test_a_reader_beside_a_running_writer_leaves_the_writers_files_to_it(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    async with await EventStore.open(path) as store:
        await store.append([ev.JobFinished(job="ns/a", at=1)])
        with LogReader(path) as reader:
            assert reader.verify() == 1
        assert (tmp_path / "live.db-wal").exists()
        await store.append([ev.JobFinished(job="ns/b", at=2)])
    assert listing(tmp_path) == ["live.db", "live.db.lock"]
    assert LogReader(path).verify() == 2


def _foreign_wal_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()


async def test_a_foreign_database_is_refused_without_a_file_made_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    _foreign_wal_database(path)
    before, content = listing(tmp_path), path.read_bytes()
    with pytest.raises(NotAnEventLog, match="application_id is 0x0"):
        LogReader(path)
    with pytest.raises(NotAnEventLog, match="application_id is 0x0"):
        await EventStore.open(path)
    result = admitd("log", "stats", "--db", str(path))
    assert_one_clean_line(result, 2, str(path), "not an admitd event log")
    assert listing(tmp_path) == before
    assert path.read_bytes() == content


def _can_bind_read_only() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _can_bind_read_only(), reason="needs unshare -rm (user and mount namespaces)")
@pytest.mark.parametrize("command", [["verify"], ["export"], ["stats"]])
def test_a_log_in_a_read_only_directory_can_be_read(tmp_path: Path, command: list[str]) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "log.db"
    asyncio.run(make_log(path))
    before = listing(folder)
    script = (
        f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder} && "
        f"exec {sys.executable} -m daemon.cli log {' '.join(command)} --db {path}"
    )
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert listing(folder) == before


def test_the_db_hint_after_a_run_is_shell_quoted(tmp_path: Path) -> None:
    db = tmp_path / "my runs; $HOME 'a'.db"
    result = admitd("simulate", str(scenario(tmp_path / "s.yaml", 2)), "--db", str(db))
    assert result.returncode == 0, result.stderr
    (hint,) = [line for line in result.stdout.splitlines() if line.startswith("event log: ")]
    words = shlex.split(hint.split("(try: ", 1)[1].rstrip(")"))
    assert words == ["admitd", "log", "stats", "--db", str(db)]


async def test_a_dangling_symlink_as_db_is_refused_and_nothing_is_created_where_it_points(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "log.db"
    target.parent.mkdir()
    link = tmp_path / "link.db"
    link.symlink_to(target)
    result = admitd("simulate", str(scenario(tmp_path / "s.yaml", 2)), "--db", str(link))
    assert_one_clean_line(result, 2, str(link), "symbolic link", "does not exist")
    with pytest.raises(DatabaseUnavailable, match="symbolic link"):
        await EventStore.open(link)
    assert not target.exists()
    assert listing(target.parent) == []


_APPEND_ONE = """
import asyncio, sys
from daemon.domain import events as ev
from daemon.eventlog import EventStore

async def main() -> None:
    async with await EventStore.open(sys.argv[1]) as store:
        await store.append([ev.JobFinished(job="ns/late", at=99)])
        print("appended", flush=True)
        sys.stdin.readline()  # keep the writer open until the test has read

asyncio.run(main())
"""


def test_readers_in_one_process_see_what_another_process_appends(tmp_path: Path) -> None:
    """`admitd ui` (and a daemon's answers) keep several readers open while another process appends. Two readers
    opened before the writer, on a log without a -wal file: the second's header check used to close a descriptor of
    the database, which dropped the first's POSIX locks; the writer then took itself for the only connection,
    replaced the -wal and -shm files, and neither reader ever saw its appends."""
    path = tmp_path / "shared.db"
    asyncio.run(make_log(path, 3))
    assert not (tmp_path / "shared.db-wal").exists()
    first, second = LogReader(path), LogReader(path)
    try:
        assert (first.last_seq(), second.last_seq()) == (3, 3)
        writer = subprocess.Popen(
            [sys.executable, "-c", _APPEND_ONE, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            assert writer.stdout is not None and writer.stdout.readline().strip() == "appended"
            with LogReader(path) as third:
                assert (first.last_seq(), second.last_seq(), third.last_seq()) == (4, 4, 4)
        finally:
            assert writer.stdin is not None
            writer.stdin.close()
            assert writer.wait(timeout=30) == 0
            assert writer.stdout is not None
            writer.stdout.close()
        assert (first.last_seq(), second.last_seq()) == (4, 4)
    finally:
        first.close()
        second.close()
