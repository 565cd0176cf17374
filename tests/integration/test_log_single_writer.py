"""A log has exactly one writer: the newcomer fails at open naming the holder's PID, and the holder is unharmed.

Real: SQLite, flock on `<log>.lock`, writer processes (tests/integration/logtools.py) and `admitd simulate` runs
started together as subprocesses, SIGKILL. Faked: nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from daemon.domain import events as ev
from daemon.eventlog import EventStore, LogReader
from daemon.eventlog.errors import DatabaseUnavailable, LogLocked
from daemon.eventlog.store import create_new_log, lock_path
from tests.integration.logtools import ROOT, admitd, assert_one_clean_line, scenario


def last_seq(path: Path) -> int:
    with LogReader(path) as reader:
        return reader.last_seq()


@contextmanager
def writer_process(path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that opened `path` for writing and appends to it until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.logtools", "write", str(path), "10", "fast"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()


def test_a_second_writer_fails_at_open_naming_the_first_ones_pid_and_the_first_keeps_writing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "one.db"
    with writer_process(path) as first:
        assert lock_path(path).read_text().strip() == str(first.pid)
        with pytest.raises(LogLocked, match=f"process {first.pid} is writing this log") as info:
            asyncio.run(EventStore.open(path))
        assert info.value.holder == first.pid
        before = last_seq(path)
        # The first writer is not the one that dies: it goes on appending after the newcomer's attempt.
        while last_seq(path) < before + 50:
            time.sleep(0.01)
        assert first.poll() is None
    with LogReader(path) as reader:
        assert reader.verify() >= before + 50


async def test_the_lock_is_released_when_its_holder_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    with writer_process(path) as first:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    async with await EventStore.open(path) as store:  # the kernel dropped the flock with the process
        await store.append([ev.JobFinished(job="ns/after", at=1)])
        assert lock_path(path).read_text().strip() == str(os.getpid())
    assert LogReader(path).verify() >= 1


def test_the_cli_names_the_holder_when_a_log_is_being_written(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    with writer_process(path) as first:
        # simulate refuses the existing file before it would even try the lock; both are one line, exit 2.
        result = admitd("simulate", str(scenario(tmp_path / "s.yaml", 2)), "--db", str(path))
        assert_one_clean_line(result, 2, str(path), "already exists")
        assert first.poll() is None


async def test_a_new_log_is_created_exclusively(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with await EventStore.open(path, new=True) as store:
        await store.append([ev.JobFinished(job="ns/a", at=1)])
    with pytest.raises(DatabaseUnavailable, match="already exists"):
        await EventStore.open(path, new=True)
    with pytest.raises(DatabaseUnavailable, match="already exists"):
        create_new_log(path)
    assert LogReader(path).verify() == 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("round_", range(4))
def test_two_simulations_started_together_on_one_db_leave_exactly_one_run(tmp_path: Path, round_: int) -> None:
    spec = scenario(tmp_path / "s.yaml", 40)
    alone = admitd("simulate", str(spec), "--db", str(tmp_path / "alone.db"), "--json")
    assert alone.returncode == 0, alone.stderr
    one_run = LogReader(tmp_path / "alone.db").verify()

    db = tmp_path / "shared.db"
    argv = [sys.executable, "-m", "daemon.cli", "simulate", str(spec), "--db", str(db), "--json"]
    procs = [
        subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outcomes = [(p.wait(timeout=240), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0, 2], outcomes
    _, out, _ = next(o for o in outcomes if o[0] == 0)
    _, _, err = next(o for o in outcomes if o[0] == 2)
    assert json.loads(out)["jobs"]
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(db) in err and ("already exists" in err or "is writing this log" in err), err
    with LogReader(db) as reader:
        assert reader.verify() == one_run
