"""The start-time estimate's accuracy, back-tested on a recorded log of Kueue's baseline shape (issue 26).

Usage: python -m bench.bench_eta [--scale PERCENT] [--every DURATION] [--dir bench/out]
Simulates the baseline shape (5 cohorts x 6 ClusterQueues; `--scale` percent of its 15,000 workloads, default 10)
into a cached, git-ignored log, then runs `admitd eta-report` on it by priority class (small, medium, large) and by
ClusterQueue, and prints one JSON object with both reports and their times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

from bench.kueue_shapes import BASELINE, scenario
from daemon.eventlog import LogReader
from daemon.obs.logging import configure as configure_logging
from daemon.query.eta import eta_report_json
from daemon.query.moment import clock_of, parse_duration_ms

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scale", type=int, default=10, help="percent of the baseline's workloads (default 10)")
    p.add_argument("--every", default="5s", help="one estimate moment per DURATION of the log (default 5s)")
    p.add_argument("--dir", type=Path, default=ROOT / "bench" / "out")
    args = p.parse_args()
    configure_logging(level="warning")
    args.dir.mkdir(parents=True, exist_ok=True)
    shape = replace(
        BASELINE,
        name=f"baseline-{args.scale}pct",
        classes=tuple(replace(c, count=max(1, c.count * args.scale // 100)) for c in BASELINE.classes),
    )
    db = args.dir / f"eta-{shape.name}.db"
    out: dict[str, object] = {"shape": shape.name, "log": str(db)}
    if not db.exists():
        from daemon.sim.run import run_simulation  # noqa: PLC0415  (only to build the cached log)

        t0 = time.perf_counter()
        result = asyncio.run(run_simulation(scenario(shape), db_path=db))
        out["built"] = {"seconds": round(time.perf_counter() - t0, 1), "events": result.events}
    every = parse_duration_ms(args.every)
    for by in ("priorityclass", "clusterqueue"):
        t0, c0 = time.perf_counter(), time.process_time()
        with LogReader(db) as reader:
            report = eta_report_json(reader, clock_of(reader), every_ms=every, by=by)
        out[by] = {
            "seconds": round(time.perf_counter() - t0, 1),
            "cpu_seconds": round(time.process_time() - c0, 1),
            **report,
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
