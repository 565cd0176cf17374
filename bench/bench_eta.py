"""The start-time estimate's accuracy, back-tested on a recorded log of Kueue's baseline shape (issue 26).

Usage: python -m bench.bench_eta [--scale PERCENT] [--every DURATION] [--recorded] [--dir bench/out]
Simulates the baseline shape (5 cohorts x 6 ClusterQueues; `--scale` percent of its 15,000 workloads, default 10)
into a cached, git-ignored log, then runs `admitd eta-report` on it by priority class (small, medium, large) and by
ClusterQueue, and prints one JSON object with both reports and their times. With `--recorded` the simulation records
its estimates as the daemon does (`admitd simulate --estimate-every` at `--every`: `workload.estimated` when new or
moved), and the reports' `recorded` part scores those.

Speed: python -m bench.bench_eta --speed [--runs 3] [--dir bench/out]
The forward run for every workload pending at the end of bench_answers' small log (Kueue's baseline 9 times as long,
a tenth of its workloads, simulated until half its arrivals: 9,630 pending), p50 and p90 as `admitd eta` asks, in
this process after the fold: `estimates` (the shortcuts) against the plain loop (`tests/unit/test_eta_fast.plain`),
alternated, CPU seconds per run and their medians, and whether both found the same. Twice: with the log's recorded
runtimes (the simulator runs every job of a class for the same time, so p50 and p90 draw alike), and with each
class's runs spread (every recorded run replaced by three, 0.3 to 3 times as long, seeded), where the quantiles
differ and the runs end one by one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from bench.kueue_shapes import BASELINE, scenario
from daemon.domain.eta import MAX_CYCLES, Class, estimates
from daemon.domain.state import Phase, State
from daemon.eventlog import LogReader
from daemon.obs.logging import configure as configure_logging
from daemon.query.eta import eta_report_json
from daemon.query.moment import clock_of, parse_duration_ms
from daemon.views.follow import Following
from daemon.views.runtimes import Runtimes

ROOT = Path(__file__).resolve().parent.parent


def _spread(by_class: dict[Class, list[int]]) -> Callable[[Class], Sequence[int]]:
    rng = random.Random(26)
    runs = {
        c: sorted(max(1, int(d * rng.uniform(0.3, 3.0))) for d in ds for _ in range(3)) for c, ds in by_class.items()
    }
    by_queue: dict[str, list[int]] = {}
    for c, ds in runs.items():
        by_queue.setdefault(c[0], []).extend(ds)
    for ds in by_queue.values():
        ds.sort()
    return lambda c: runs.get(c) or by_queue.get(c[0]) or ()


def speed(directory: Path, runs: int, plain_spread: bool) -> dict[str, object]:
    from bench.bench_answers import build, scaled  # noqa: PLC0415
    from bench.bench_query import BIG  # noqa: PLC0415
    from tests.unit.test_eta_fast import plain  # noqa: PLC0415  (the reference the test compares with)

    db = directory / "eta-speed.db"
    out: dict[str, object] = {"log": str(db)}
    if not db.exists():
        out["built"] = build(db, scaled(BIG, 0.1), 0.5)
    with LogReader(db) as reader:
        state = State(pending_indexes=False)
        runtimes = Runtimes(state)
        Following(state, (runtimes,)).follow(reader)
        now = clock_of(reader).last_ms
    out["pending"] = sum(1 for r in state.workloads.values() if r.phase is Phase.PENDING)
    for name, durations in (("recorded", runtimes.durations), ("spread", _spread(runtimes.by_class))):
        fast_s: list[float] = []
        plain_s: list[float] = []
        same = True
        for _ in range(runs):
            c0 = time.process_time()
            found = estimates(state, now, durations, (0.5, 0.9))
            fast_s.append(time.process_time() - c0)
            if name == "recorded" or plain_spread:
                c0 = time.process_time()
                ref = {q: plain(state, now, durations, q, cap=MAX_CYCLES) for q in (0.5, 0.9)}
                plain_s.append(time.process_time() - c0)
                same = same and ref == dict(found)
        out[name] = {
            "estimated": sum(1 for v in found[0.5].values() if v is not None),
            "fast_cpu_s": [round(x, 2) for x in fast_s],
            "fast_median_cpu_s": round(statistics.median(fast_s), 2),
            "plain_cpu_s": [round(x, 2) for x in plain_s],
            "plain_median_cpu_s": round(statistics.median(plain_s), 2) if plain_s else None,
            "same_estimates": same if plain_s else None,
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--speed", action="store_true", help="time the forward run for ~10,000 pending workloads")
    p.add_argument("--runs", type=int, default=3, help="--speed: runs of each variant, alternated (default 3)")
    p.add_argument("--plain-spread", action="store_true", help="--speed: the plain loop on spread runtimes too (slow)")
    p.add_argument("--scale", type=int, default=10, help="percent of the baseline's workloads (default 10)")
    p.add_argument("--every", default="5s", help="one estimate moment per DURATION of the log (default 5s)")
    p.add_argument(
        "--recorded",
        action="store_true",
        help="simulate with estimates recorded once per --every (as admitd run --estimate-every), and score those",
    )
    p.add_argument("--dir", type=Path, default=ROOT / "bench" / "out")
    args = p.parse_args()
    configure_logging(level="warning")
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.speed:
        print(json.dumps(speed(args.dir, args.runs, args.plain_spread), indent=2))
        return
    shape = replace(
        BASELINE,
        name=f"baseline-{args.scale}pct",
        classes=tuple(replace(c, count=max(1, c.count * args.scale // 100)) for c in BASELINE.classes),
    )
    every = parse_duration_ms(args.every)
    recording = every if args.recorded else None
    db = args.dir / (f"eta-{shape.name}.db" if recording is None else f"eta-{shape.name}-recorded-{args.every}.db")
    out: dict[str, object] = {"shape": shape.name, "log": str(db)}
    if not db.exists():
        from daemon.sim.run import run_simulation  # noqa: PLC0415  (only to build the cached log)

        t0, c0 = time.perf_counter(), time.process_time()
        result = asyncio.run(run_simulation(scenario(shape), db_path=db, estimate_every=recording))
        out["built"] = {
            "seconds": round(time.perf_counter() - t0, 1),
            "cpu_seconds": round(time.process_time() - c0, 1),
            "events": result.events,
            "estimate_every_ms": recording,
        }
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
