"""Helpers for the event-log test modules: the `admitd` CLI as a subprocess, generated scenarios, and a writer
process (`python -m tests.integration.logtools write PATH BATCH DURABLE`) that appends until it is killed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from daemon.domain.events import JobFinished
from daemon.eventlog import EventStore

ROOT = Path(__file__).resolve().parents[2]
NOISE = ("Traceback", "exception was never retrieved", "Task was destroyed", "Exception ignored")


def admitd(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run `admitd ARGS` as a user would; a hang becomes subprocess.TimeoutExpired, so the test fails."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        check=False,
        env=env,
        **kw,
    )


_SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def interruptible(*args: str) -> list[str]:
    """The argv of `python ARGS` with SIGINT at its default disposition, for a child a test interrupts with SIGINT.
    A non-interactive shell starts its background jobs with SIGINT ignored (`cmd &`, nohup, many CI runners), the
    children inherit that, and a Python started with SIGINT ignored keeps ignoring it (no KeyboardInterrupt, no
    asyncio handler), so the test's Ctrl-C would never arrive. A tiny Python resets it and execs the real one (same
    pid); `preexec_fn` would do it too, but is unsafe in a process with threads."""
    return [sys.executable, "-c", _SIGINT_DEFAULT, *args]


def assert_one_clean_line(result: subprocess.CompletedProcess[str], status: int, *needles: str) -> None:
    """Exactly the expected status, one line on stderr naming what went wrong, none of Python's or asyncio's noise."""
    assert result.returncode == status, (result.returncode, result.stderr[-3000:])
    for noise in NOISE:
        assert noise not in result.stderr, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("admitd: "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


_HEAD = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: gpu
      resources:
      - {name: "nvidia.com/gpu", nominalQuota: 4}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: ns}
spec: {clusterQueue: cq}
"""

_JOB = """\
---
apiVersion: batch/v1
kind: Job
metadata:
  name: job-{i}
  namespace: ns
  labels: {{kueue.x-k8s.io/queue-name: lq}}
  annotations: {{simulate.admitd.io/submit-at: {at}s, simulate.admitd.io/runtime: {runtime}}}
spec:
  parallelism: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: c
        resources: {{requests: {{nvidia.com/gpu: 1}}}}
"""


def scenario(path: Path, jobs: int, *, runtime: str = "90s") -> Path:
    """`jobs` one-GPU Jobs in a 4-GPU queue, one submitted per second: a run as long as `jobs` makes it."""
    path.write_text(_HEAD + "".join(_JOB.format(i=i, at=i, runtime=runtime) for i in range(jobs)))
    return path


async def _write_forever(path: str, batch: int, durable: bool) -> None:
    store = await EventStore.open(path, max_batch=max(batch, 1000), durable=durable)
    n = 0
    print("ready", flush=True)
    while True:
        await store.append([JobFinished(job=f"ns/w-{n + i}", at=n + i) for i in range(batch)])
        n += batch


if __name__ == "__main__":
    if sys.argv[1] == "write":
        asyncio.run(_write_forever(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "durable"))
