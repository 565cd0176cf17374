"""`admitd simulate --against LOG -f JOB.yaml`: would this job be admitted now, when, or never, and what would it
preempt; without writing anything. The I/O around the pure `daemon.domain.eta.dry_run`.

The log is read to its last event (the state then, and the recorded runtimes), each Job of JOB.yaml is taken as
created at that moment, on its own (not together with the file's other jobs), and the engine decides as the daemon
would. Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from daemon.domain.durations import format_seconds
from daemon.domain.eta import DryRun, dry_run
from daemon.domain.state import State
from daemon.eventlog import EventLogError, LogReader
from daemon.manifests import ManifestError
from daemon.sim.scenario import load_scenario
from daemon.sim.whatif import VIRTUAL_BEFORE_MS
from daemon.views.follow import Following
from daemon.views.runtimes import Runtimes

QUANTILES = (0.5, 0.9)


def _shower(first_ms: int) -> Callable[[int | None], str | None]:
    """Times as `admitd explain` shows them: offsets on a simulated log, RFC 3339 UTC on a real one."""
    virtual = first_ms < VIRTUAL_BEFORE_MS

    def show(ms: int | None) -> str | None:
        if ms is None:
            return None
        if virtual:
            return ("-" if ms < 0 else "+") + format_seconds(abs(ms))
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    return show


def _json(d: DryRun, show: Any, now: int) -> dict[str, Any]:
    a = d.admitted_now
    return {
        "job": d.workload,
        "admitted_now": a is not None,
        "admission": None
        if a is None
        else {"cluster_queue": a.cluster_queue, "flavors": {ps.name: dict(ps.flavors) for ps in a.pod_sets}},
        "would_preempt": list(d.would_preempt),
        "reason": None if d.reason is None else {"kind": d.reason.kind.value, "message": d.reason.message},
        "never": d.never,
        "p50": show(d.starts.get(0.5)),
        "p90": show(d.starts.get(0.9)),
        "p50_in_seconds": None if d.starts.get(0.5) is None else (d.starts[0.5] - now) / 1000,  # type: ignore[operator]
        "p90_in_seconds": None if d.starts.get(0.9) is None else (d.starts[0.9] - now) / 1000,  # type: ignore[operator]
    }


def _text(r: dict[str, Any]) -> str:
    victims = f", preempting {', '.join(r['would_preempt'])}" if r["would_preempt"] else ""
    if r["admitted_now"]:
        flavors = "; ".join(
            f"{name}: " + ", ".join(f"{res} in {fl}" for res, fl in sorted(f.items()))
            for name, f in r["admission"]["flavors"].items()
        )
        return (
            f"{r['job']}: would be admitted now to ClusterQueue {r['admission']['cluster_queue']} ({flavors}){victims}"
        )
    reason = f"{r['reason']['kind']}: {r['reason']['message']}" if r["reason"] else "not assessed"
    if r["never"]:
        return f"{r['job']}: would never be admitted: {reason}"

    def when(q: str) -> str:
        if r[q] is None:
            return "unknown"
        seconds = r[q + "_in_seconds"]
        return f"{r[q]} ({'now' if seconds <= 0 else f'in {seconds:g}s'})"

    return f"{r['job']}: would wait: {reason}{victims}\n  estimated start: p50 {when('p50')}, p90 {when('p90')}"


def cmd_dry_run(args: argparse.Namespace) -> int:
    if args.job_file is None:
        print("admitd: --against needs -f JOB.yaml: the job to try", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.job_file)
    except ManifestError as e:
        print(f"admitd: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"admitd: {e.filename or args.job_file}: {e.strerror or e}", file=sys.stderr)
        return 2
    for line in scenario.problems:
        print(f"admitd: rejected: {line}", file=sys.stderr)
    if not scenario.jobs:
        print(
            f"admitd: {args.job_file}: no Job admitd would manage (a kueue.x-k8s.io/queue-name label)", file=sys.stderr
        )
        return 2
    try:
        with LogReader(args.against) as reader:
            bounds = reader.bounds()
            if bounds is None:
                print(f"admitd: {args.against}: the log has no events yet", file=sys.stderr)
                return 2
            state = State(pending_indexes=False)
            runtimes = Runtimes(state)
            Following(state, (runtimes,)).follow(reader)
    except EventLogError as e:
        print(f"admitd: {e}", file=sys.stderr)
        return 2
    now, show = bounds[3], _shower(bounds[1])
    results = []
    for job in scenario.jobs:
        wl = dataclasses.replace(job.workload, created_at=now)
        if wl.key in state.workloads:
            print(f"admitd: {wl.key}: the log already has a live job of that name", file=sys.stderr)
            return 2
        results.append(_json(dry_run(state, now, runtimes.durations, wl, QUANTILES), show, now))
    if args.json:
        clock = "virtual" if bounds[1] < VIRTUAL_BEFORE_MS else "wall"
        sys.stdout.write(json.dumps({"now": show(now), "clock": clock, "jobs": results}) + "\n")
    else:
        print("\n".join(_text(r) for r in results))
    return 0
