"""What a command loads before it answers: a read command loads neither the simulator, nor the Kubernetes client, nor
structlog (until something is logged), and the logging set-up still applies to the first line logged later.

Real: fresh interpreters (subprocess), the `admitd` CLI on a log written by `admitd simulate`, structlog's output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "config" / "samples" / "seed.yaml"

HEAVY = ("structlog", "daemon.sim", "daemon.kube", "daemon.manifests", "daemon.domain.admission", "yaml")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def seed_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("startup") / "seed.db"
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", str(SEED), "--db", str(db)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return db


@pytest.mark.parametrize(
    "argv",
    [
        ["queues", "--json"],
        ["--log-level", "debug", "pending", "--json"],
        ["replay", "--seq", "3"],
        ["history", "research/pretrain-a"],
        ["log", "stats"],
    ],
)
def test_a_read_command_answers_without_loading_the_simulator_the_cluster_client_or_structlog(
    seed_log: Path, argv: list[str]
) -> None:
    code = f"""
import os, sys
from daemon.cli import main
real_stdout, sys.stdout = sys.stdout, open(os.devnull, "w")
status = main({[*argv, "--db", str(seed_log)]!r})
sys.stdout = real_stdout
loaded = [m for m in {HEAVY!r} if m in sys.modules or any(k.startswith(m + ".") for k in sys.modules)]
print(status, loaded)
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last == "0 []", last


def test_every_command_is_offered_when_none_or_an_unknown_one_is_named() -> None:
    for argv in (["--help"], ["no-such-command"]):
        done = subprocess.run(
            [sys.executable, "-m", "daemon.cli", *argv], cwd=ROOT, capture_output=True, text=True, check=False
        )
        text = done.stdout + done.stderr
        for command in ("log", "explain", "history", "queues", "pending", "replay", "run", "simulate"):
            assert command in text, (argv, command, text)


def test_logging_set_up_before_structlog_loads_applies_to_the_first_line() -> None:
    code = """
import sys
from daemon.obs.logging import configure, get_logger
log = get_logger("admitd.test")
configure(level="warning", json=True)
assert "structlog" not in sys.modules
log.info("not shown")  # below the level set before structlog was loaded
log.warning("shown", seq=7)
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(line["event"], line["level"], line["seq"]) for line in lines] == [("shown", "warning", 7)]


def test_an_unknown_log_level_fails_when_set_not_when_first_used() -> None:
    done = _python("from daemon.obs.logging import configure\nconfigure(level='loud')")
    assert done.returncode != 0
    assert "KeyError: 'LOUD'" in done.stderr
