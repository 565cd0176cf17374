"""Churn under eviction latency for Kueue's baseline shape (15,000 Jobs, 30 ClusterQueues), in the faulty simulator.

Runs the baseline scenario (bench/kueue_shapes.py) through the daemon's real stages against the faulty cluster with
only eviction latency on (each victim's pods take up to the given time to stop; its quota is free only then), once
per latency, and prints one JSON object: per latency the churn (admissions preempted within the churn window with no
higher-priority arrival or quota change to explain them), preemptions, admissions, virtual end, wall seconds, and
whether every invariant held. The idle check (`not-reconsidered`) is off here: on 15,000 jobs it would run a
second engine cycle at every idle instant; the harness's seeds check it.

Usage: python -m bench.bench_dst [--latencies 0s,1s,5s,30s] [--seed 1] [--churn-window 10s]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from bench.kueue_shapes import BASELINE, scenario
from daemon.manifests.durations import parse_duration
from daemon.obs.logging import configure
from daemon.sim.faults import Faults
from daemon.sim.faulty import run_faulty


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_dst", description=__doc__.split("\n\n")[0])
    p.add_argument("--latencies", default="0s,1s,5s,30s", help="eviction latencies (upper bounds), comma-separated")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--churn-window", default="10s")
    args = p.parse_args()
    configure(level="critical")
    sys.setswitchinterval(0.0005)
    scen = scenario(BASELINE)
    window = parse_duration(args.churn_window)
    runs = []
    for text in args.latencies.split(","):
        latency = parse_duration(text.strip())
        started = time.perf_counter()
        r = asyncio.run(
            run_faulty(
                scen,
                Faults(evict_latency=latency),
                args.seed,
                churn_window=window,
                expect_all_end=True,
                idle_check=False,
            )
        )
        runs.append(
            {
                "evict_latency": text.strip(),
                "churn": r.churn,
                "churn_by_reason": r.churn_by_reason,
                "preemptions": r.preemptions,
                "admissions": r.admissions,
                "jobs": r.jobs,
                "finished": r.finished,
                "end_s": r.end / 1000,
                "wall_s": round(time.perf_counter() - started, 1),
                "ok": r.ok,
                "violations": [str(v) for v in r.violations[:3]],
            }
        )
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"shape": "baseline", "seed": args.seed, "churn_window": args.churn_window, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
