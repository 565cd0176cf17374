"""`log verify` reads one consistent snapshot of a live log, so a writer appending meanwhile never raises a false
tamper alarm, and it prints the head (seq and hash) for comparison with a copy kept elsewhere.

Real: SQLite (WAL), a writer process appending single events (tests/integration/logtools.py), LogReader and the
`admitd` CLI as a subprocess. Faked: nothing.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from daemon.domain import events as ev
from daemon.eventlog import EventStore, LogReader
from tests.integration.logtools import ROOT, admitd


async def _prefill(path: Path, n: int) -> None:
    async with await EventStore.open(path) as store:
        await store.append([ev.JobFinished(job=f"ns/pre-{i}", at=i) for i in range(n)])


def test_verify_never_reports_a_cut_tail_while_a_writer_appends_single_events(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    asyncio.run(_prefill(path, 3000))  # a few thousand rows, so that each walk takes a while
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.logtools", "write", str(path), "1", "fast"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    heads: list[int] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for _ in range(60):
            with LogReader(path) as reader:
                checked = reader.check()  # raised ChainBroken ("rows ... at the end are missing") before
            assert checked.events == checked.head_seq
            heads.append(checked.head_seq)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
    assert heads == sorted(heads) and heads[-1] > heads[0], "the writer was appending throughout"


async def test_the_cli_prints_the_head_seq_and_hash(tmp_path: Path) -> None:
    path = tmp_path / "head.db"
    async with await EventStore.open(path) as store:
        await store.append([ev.JobFinished(job=f"ns/j{i}", at=i) for i in range(7)])
    result = admitd("log", "verify", "--db", str(path))
    assert result.returncode == 0, result.stderr
    conn = sqlite3.connect(path)
    (stored,) = conn.execute("SELECT hash FROM events WHERE seq = 7").fetchone()
    conn.close()
    match = re.search(r"head seq (\d+) hash ([0-9a-f]{64})", result.stdout)
    assert match is not None, result.stdout
    assert (int(match[1]), match[2]) == (7, stored.hex())
    assert "7 events" in result.stdout


async def test_an_empty_log_verifies_with_the_genesis_head(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    async with await EventStore.open(path):
        pass
    result = admitd("log", "verify", "--db", str(path))
    assert result.returncode == 0, result.stderr
    assert f"head seq 0 hash {'00' * 32}" in result.stdout
