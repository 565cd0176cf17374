"""Run the real `admitd` command in this process: `daemon.cli.main` with stdout and stderr captured.

Faster than a subprocess (no interpreter start-up per run), so property tests can afford many runs. An exception
that escapes `main` is returned as `Run.crash` (its traceback) instead of being raised, so tests can say what input
caused it; a real subprocess would have printed that traceback on stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import traceback
from dataclasses import dataclass

from daemon.cli import main


@dataclass(frozen=True, slots=True)
class Run:
    status: int
    stdout: str
    stderr: str
    crash: str | None  # the traceback of an exception that escaped main, or None

    def json(self) -> dict[str, object]:
        body: dict[str, object] = json.loads(self.stdout)
        return body


def admitd(*argv: str) -> Run:
    out, err = io.StringIO(), io.StringIO()
    crash: str | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as e:  # argparse's usage errors
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        except BaseException:  # reported to the test, which fails naming the input
            status, crash = -1, traceback.format_exc()
    return Run(status=status, stdout=out.getvalue(), stderr=err.getvalue(), crash=crash)
