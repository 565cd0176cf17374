"""Failures a user can cause or meet get one clear line on stderr and the documented exit status, never a
traceback or asyncio's noise: damage met while rows are fetched, a configuration that is not UTF-8, Ctrl-C, a
scenario that is not a regular file, a full disk.

Real: the `admitd` CLI as a subprocess, SQLite files damaged on disk, FIFOs, /dev/zero, SIGINT, a real 1 MiB tmpfs
(in a private mount namespace, `unshare -rm`; skipped where user namespaces are not allowed). Faked: nothing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.domain import events as ev
from daemon.eventlog import EventStore
from tests.integration.logtools import ROOT, admitd, assert_one_clean_line, interruptible, scenario

EXIT_BAD_INPUT, EXIT_LOG_FAILED, EXIT_INTERRUPTED = 2, 1, 130


async def _damaged_log(path: Path, n: int, at: int) -> None:
    """A log of `n` events whose table page holding event `at` (and only that page) is overwritten with junk: the
    query starts fine and the damage is met while rows are fetched."""
    async with await EventStore.open(path) as store:
        await store.append([ev.JobFinished(job=f"ns/{'x' * 200}-{i}", at=i) for i in range(1, n + 1)])
    data = bytearray(path.read_bytes())
    marker = b'{"at":%d,' % at
    offset = data.index(marker)
    page = 16384
    start = offset // page * page
    data[start : start + page] = b"\xde\xad\xbe\xef" * (page // 4)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("command", [["verify"], ["export"], ["export", "--since", "10"]])
def test_damage_met_while_rows_are_fetched_is_one_line(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "damaged.db"
    asyncio.run(_damaged_log(path, 6000, 5500))
    result = admitd("log", *command, "--db", str(path))
    assert_one_clean_line(result, EXIT_BAD_INPUT, str(path), "corrupt")
    if command[0] == "export":
        assert result.stdout.count("\n") >= 1000, "rows before the damage were fetched first"


def test_a_configuration_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(b"apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n# \xff\xfe\xfa\n")
    result = admitd("simulate", str(scenario(tmp_path / "s.yaml", 1)), "--config", str(config))
    assert_one_clean_line(result, EXIT_BAD_INPUT, str(config), "not UTF-8")


def _fifo(tmp_path: Path) -> Path:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize(
    "make",
    [lambda tmp: Path("/dev/zero"), lambda tmp: tmp, _fifo],
    ids=["dev-zero", "a-directory", "a-fifo"],
)
@pytest.mark.parametrize("role", ["scenario", "config"])
def test_an_input_that_is_not_a_regular_file_is_one_line(tmp_path: Path, make: object, role: str) -> None:
    bad = make(tmp_path)  # type: ignore[operator]
    if role == "scenario":
        result = admitd("simulate", str(bad), timeout=60)
    else:
        result = admitd("simulate", str(scenario(tmp_path / "s.yaml", 1)), "--config", str(bad), timeout=60)
    assert_one_clean_line(result, EXIT_BAD_INPUT, str(bad), "not a regular file")


@pytest.mark.timeout(180)
def test_ctrl_c_during_a_run_is_one_line_and_exit_130(tmp_path: Path) -> None:
    db = tmp_path / "interrupted.db"
    spec = scenario(tmp_path / "s.yaml", 20000)
    proc = subprocess.Popen(
        interruptible("-m", "daemon.cli", "simulate", str(spec), "--db", str(db), "--json"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not db.exists() and proc.poll() is None:  # the log exists once the scenario is loaded: a run is on
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert_one_clean_line(result, EXIT_INTERRUPTED, "interrupted")
    assert out == ""


def _in_private_mount_namespace() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.timeout(180)
@pytest.mark.skipif(not _in_private_mount_namespace(), reason="needs unshare -rm (user and mount namespaces)")
def test_a_full_disk_is_one_line_and_exit_1(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    spec = scenario(tmp_path / "s.yaml", 3000)
    command = (
        f"mount -t tmpfs -o size=1m tmpfs {disk} && "
        f"exec {sys.executable} -m daemon.cli simulate {spec} --db {disk}/full.db --json"
    )
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", command],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=150,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert_one_clean_line(result, EXIT_LOG_FAILED, "batch not written", "database or disk is full", "is full")
    assert result.stdout == ""
