"""The metrics endpoint's render with 1,000 ClusterQueues (issue 10: under 50 ms), on the cached log of Kueue's
large-scale shape that `python -m bench.bench_query --build-only` builds (bench/out/query-1000cq.db: 10 cohorts x
100 ClusterQueues, a LocalQueue each, 3 priority classes).

Usage: python -m bench.bench_metrics [--runs 21] [--db bench/out/query-1000cq.db] [--tail 20000] [--profile]

The log is folded up to its last `--tail` events, then each run starts from a copy of that fold with a warm
renderer (what a running process has after its previous scrape) and folds the tail (every ClusterQueue is touched
by those events); then either one render is timed (a process folding on demand), or `Renderer.refresh` (the work
the background fold of `admitd run` does as events come) and then the render a scrape does. Also timed: a render
with nothing new, a cold render (every fragment rendered), all of it again with the LocalQueue metrics, a new
process's first scrape folding the whole log on demand, and the background fold's catching up. Prints one JSON
object; figures are medians of `--runs` runs, wall and CPU.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pickle
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bench_query import calibration_ms, fold_but_tail
from daemon.metrics import FoldedMetrics, LogMetrics, Renderer, keep_on_heap
from daemon.obs.logging import configure as configure_logging

ROOT = Path(__file__).resolve().parent.parent


def timed(fn: Callable[[FoldedMetrics], object], fm: FoldedMetrics) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn(fm)
    return time.perf_counter() - t0, time.process_time() - c0


def summary(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    wall = [p[0] for p in pairs]
    cpu = [p[1] for p in pairs]
    return {
        "wall_median_ms": round(statistics.median(wall) * 1000, 1),
        "cpu_median_ms": round(statistics.median(cpu) * 1000, 1),
        "wall_min_max_ms": [round(min(wall) * 1000, 1), round(max(wall) * 1000, 1)],
        "runs": len(pairs),
    }


def after_tail(before: bytes, tail: list[tuple[int, Any]], runs: int, profile: bool) -> dict[str, Any]:
    """Each run: a copy of the fold and its warm renderer, the tail folded, then either one render (a process
    folding on demand) or `refresh` (what the background fold does as the events come) and then the render a
    scrape does."""
    on_demand, refresh, scrape = [], [], []
    touched = 0
    prof = cProfile.Profile() if profile else None
    body = b""
    for i in range(2 * runs):
        fm, renderer = pickle.loads(before)
        for seq, event in tail:
            fm.apply(event, seq)
        touched = len(fm.dirty)
        if i % 2 == 0:
            if prof is not None:
                prof.enable()
            on_demand.append(timed(renderer.render, fm))
            if prof is not None:
                prof.disable()
        else:
            refresh.append(timed(renderer.refresh, fm))
            c0, t0 = time.process_time(), time.perf_counter()
            body = renderer.render(fm)
            scrape.append((time.perf_counter() - t0, time.process_time() - c0))
    if prof is not None:
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    return {
        "render_on_demand": summary(on_demand),
        "background_refresh": summary(refresh),
        "scrape_after_background_refresh": summary(scrape),
        "fragments_touched": touched,
        "exposition_bytes": len(body),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--db", type=Path, default=ROOT / "bench" / "out" / "query-1000cq.db")
    parser.add_argument("--tail", type=int, default=20_000, help="events folded between the two scrapes")
    parser.add_argument("--profile", action="store_true", help="cProfile the renders after the tail, to stderr")
    args = parser.parse_args()
    configure_logging(level="warning")
    if not args.db.exists():
        sys.exit(f"{args.db}: no such log; build it with python -m bench.bench_query --build-only")
    out: dict[str, Any] = {"db": str(args.db), "calibration_sum_range_1e6_ms": calibration_ms()}
    fm, tail, fold_s = fold_but_tail(args.db, args.tail)
    out["cluster_queues"] = len(fm.state.cluster_queues)
    out["local_queues"] = len(fm.state.local_queues)
    out["fold_s"] = round(fold_s, 1)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))  # pickling the fold's nested values
    for lq in (False, True):
        key = "local_queue_metrics" if lq else "cluster_queue_metrics"
        cold = [timed(Renderer(local_queue_metrics=lq).render, fm) for _ in range(max(3, args.runs // 4))]
        renderer = Renderer(local_queue_metrics=lq)
        on_heap = keep_on_heap(len(renderer.render(fm)))  # as LogMetrics does after each scrape
        unchanged = [timed(renderer.render, fm) for _ in range(args.runs)]
        before = pickle.dumps((fm, renderer), protocol=pickle.HIGHEST_PROTOCOL)
        out[key] = {
            "exposition_kept_on_heap": on_heap,
            "cold": summary(cold),
            "nothing_new": summary(unchanged),
            f"after_{args.tail}_events": after_tail(before, tail, args.runs, args.profile and not lq),
        }
    metrics = LogMetrics(args.db)
    try:
        wall, cpu = timed(lambda _: metrics.render(), fm)
        out["first_scrape_folding_on_demand"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
    finally:
        metrics.close()
    t0 = time.perf_counter()
    background = LogMetrics(args.db, follow_every=1.0).start()
    try:
        background.caught_up()
        caught_up_s = time.perf_counter() - t0
        wall, cpu = timed(lambda _: background.render(), fm)
        out["background_fold"] = {
            "caught_up_after_s": round(caught_up_s, 2),
            "first_scrape_then_ms": round(wall * 1000, 1),
        }
    finally:
        background.close()
    out["calibration_sum_range_1e6_ms_at_the_end"] = calibration_ms()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
