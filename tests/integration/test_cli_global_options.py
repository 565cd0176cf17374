"""Global options (`--log-level`) are taken before or after the subcommand, at every depth.

Why: the Deployment's `args` start with `run ...`, and an overlay that wants debug logs appends `--log-level debug`
to the list (a JSON patch `add` at `/args/-`); before this, argparse refused an option of the top level after the
subcommand. Real: argparse as `admitd` builds it, and a fresh `admitd simulate` whose stderr shows the level.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.cli import LOG_LEVELS, build_parser, command_in

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "config" / "samples" / "seed.yaml"


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*path, name))


def test_every_parser_at_every_depth_takes_the_global_options() -> None:
    paths = []
    for path, parser in _parsers(build_parser()):
        options = {o for a in parser._actions for o in a.option_strings}
        assert "--log-level" in options, f"admitd {' '.join(path)} does not take --log-level"
        paths.append(path)
    # The walk found the commands and the nested ones (a new command gets the options without a change here).
    assert {("run",), ("simulate",), ("log", "verify"), ("log", "export"), ("pending",)} <= set(paths)


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        pytest.param(["run"], "warning", id="default"),
        pytest.param(["--log-level", "debug", "run"], "debug", id="before"),
        pytest.param(["run", "--log-level", "debug"], "debug", id="after"),
        pytest.param(["run", "--db", "x.db", "--log-level=info", "--config", "c.yaml"], "info", id="between"),
        pytest.param(["--log-level", "error", "run", "--log-level", "debug"], "debug", id="after wins"),
        pytest.param(["log", "verify", "--log-level", "info"], "info", id="nested"),
        pytest.param(["log", "--log-level", "info", "verify"], "info", id="between nested"),
        pytest.param(["simulate", "s.yaml", "--log-level", "error"], "error", id="simulate"),
        pytest.param(["pending", "--log-level", "debug"], "debug", id="a read command"),
    ],
)
def test_the_log_level_is_read_wherever_it_stands(argv: list[str], level: str) -> None:
    args = build_parser(command_in(argv)).parse_args(argv)
    assert args.log_level == level
    assert args.command == command_in(argv) and args.func is not None  # the command itself is still the one named


def test_a_bad_level_after_the_subcommand_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser("run").parse_args(["run", "--log-level", "loud"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --log-level: invalid choice: 'loud'" in err and all(level in err for level in LOG_LEVELS)


def test_a_level_after_the_subcommand_is_the_one_the_process_logs_at() -> None:
    def run(*argv: str) -> list[dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "-m", "daemon.cli", *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]

    debug = run("simulate", str(SEED), "--json", "--log-level", "debug")
    assert any(line["event"] == "admission cycle" and line["level"] == "debug" for line in debug), debug[:5]
    quiet = run("--log-level", "debug", "simulate", str(SEED), "--json", "--log-level", "error")
    assert [line for line in quiet if line["level"] in {"debug", "info", "warning"}] == []
