"""Read-side benchmarks: explain, history, queues and replay --at a middle moment on ~1,000,000-event simulator
logs, and the metrics endpoint's render with 1,000 ClusterQueues.

Usage: python -m bench.bench_query [--runs 3] [--dir bench/out] [--build-only] [--logs steady,backlog,1000cq]
The logs are built once by `admitd simulate`'s driver and cached, git-ignored (delete them to rebuild):
bench/out/query-1m-steady.db (`STEADY`: a short queue all along), bench/out/query-1m.db (`BIG`: a deep backlog) and
bench/out/query-1000cq.db (Kueue's large-scale shape, 10 cohorts x 100 ClusterQueues, for the metrics). Prints one
JSON object; figures are medians of `--runs` runs, each on a freshly opened reader (as one CLI call would be).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import pickle
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.kueue_shapes import BASELINE, LARGE_SCALE, Shape, WorkloadClass, scenario
from daemon.eventlog import LogReader, codec
from daemon.metrics import FoldedMetrics, Renderer
from daemon.obs.logging import configure as configure_logging
from daemon.query import explain as explain_mod
from daemon.query import history as history_mod
from daemon.query.listing import queues_at, queues_json, replay_json
from daemon.query.moment import Moment, clock_of, resolve, state_at

ROOT = Path(__file__).resolve().parent.parent

BIG = Shape(
    "baseline-x9",
    BASELINE.cohorts,
    BASELINE.queues_per_cohort,
    tuple(WorkloadClass(c.name, c.count * 9, c.cpu, c.priority, c.runtime_ms, c.every_ms) for c in BASELINE.classes),
)
"""Kueue's baseline (5 cohorts x 6 ClusterQueues, preemption and borrowing) running 9 times as long: ~1M events.
Its arrivals are about twice its capacity, so by the middle ~100,000 workloads wait (a deep backlog)."""

STEADY = Shape(
    "baseline-x15-steady",
    BASELINE.cohorts,
    BASELINE.queues_per_cohort,
    tuple(
        WorkloadClass(c.name, c.count * 15, c.cpu, c.priority, c.runtime_ms, c.every_ms * 22 // 10)
        for c in BASELINE.classes
    ),
)
"""Baseline running 15 times as long with arrivals 2.2 times as far apart (about 85% of capacity): ~1M events and
a short queue all along."""


def build(path: Path, shape: Shape) -> dict[str, Any]:
    from daemon.sim.run import run_simulation  # noqa: PLC0415  (only to build the cached log)

    t0 = time.perf_counter()
    result = asyncio.run(run_simulation(scenario(shape), db_path=path))
    return {"built_in_s": round(time.perf_counter() - t0, 1), "events": result.events}


def median_s(fn: Callable[[], object], runs: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def pick_jobs(db: Path, middle: int) -> dict[str, str]:
    """A job pending at the middle moment, and the job with the longest history."""
    with LogReader(db) as reader:
        state = state_at(reader, middle)
        view = state.view()
        cq = max(view.pending_by_cq, key=lambda c: len(view.pending_by_cq[c]))
        bucket = view.pending_by_cq[cq]
        pending = bucket[len(bucket) // 2].key
        busiest = max(view.admitted, key=lambda k: len(reader.events_of(f"job/{k}")), default=pending)
    return {"pending_at_middle": pending, "history": busiest, "cluster_queue": cq}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--build-only", action="store_true", help="only build the cached logs")
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument(
        "--logs", default="steady,backlog,1000cq", help="which logs to measure (comma-separated; default: all three)"
    )
    args = parser.parse_args()
    chosen = set(args.logs.split(","))
    configure_logging(level="warning")  # the simulator's debug lines would go to stdout, into the JSON
    args.dir.mkdir(parents=True, exist_ok=True)
    logs = {"steady": (args.dir / "query-1m-steady.db", STEADY), "backlog": (args.dir / "query-1m.db", BIG)}
    logs = {name: log for name, log in logs.items() if name in chosen}
    wide = args.dir / "query-1000cq.db"
    out: dict[str, Any] = {}
    for name, (db, shape) in [*logs.items(), *([("1000cq", (wide, LARGE_SCALE))] if "1000cq" in chosen else [])]:
        if not db.exists():
            out[f"build_{name}"] = build(db, shape)
    if args.build_only:
        print(json.dumps(out, indent=2))
        return
    out["calibration_sum_range_1e6_ms"] = calibration_ms()
    for name, (db, _) in logs.items():
        out[name] = command_phase(db, args.runs, cli_once=True)
    if "1000cq" in chosen:
        out["metrics"] = metrics_phase(wide, args.runs)
    out["calibration_sum_range_1e6_ms_at_the_end"] = calibration_ms()
    print(json.dumps(out, indent=2))


def calibration_ms() -> float:
    """How fast this machine runs Python right now (best of 5 of `sum(range(10**6))`; ~12 ms on an idle core of
    the development machine): the machine is shared, so read the figures against it."""
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        sum(range(10**6))
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def queues_answer(reader: LogReader, m: Moment) -> dict[str, Any]:
    """What `admitd queues --json` computes: from a partial state when it can (`queues_at`)."""
    state, pending_counts = queues_at(reader, m.seq)
    return queues_json(state, clock_of(reader), m, pending_counts)


def command_phase(db: Path, runs: int, *, cli_once: bool) -> dict[str, Any]:
    with LogReader(db) as reader:
        clock = clock_of(reader)
        snapshots = reader.stats().snapshots
        middle = resolve(reader, clock, at=None, seq=clock.last_seq // 2, now_ms=0)
    at_text = clock.show(middle.recorded_at) or ""
    jobs = pick_jobs(db, middle.seq)
    out: dict[str, Any] = {
        "log": str(db),
        "events": clock.last_seq,
        "snapshots": snapshots,
        "file_mib": round(db.stat().st_size / 2**20),
        "middle": {"seq": middle.seq, "at": at_text},
        "jobs": jobs,
    }
    with LogReader(db) as reader:
        out["live_workloads_at_middle"] = len(state_at(reader, middle.seq).workloads)
    out["snapshots_kept"] = snapshot_figures(db)
    out["middle_from_its_snapshot"] = fold_cost(db, middle.seq, runs)

    def with_reader(fn: Callable[[LogReader], object]) -> Callable[[], object]:
        def go() -> object:
            with LogReader(db) as reader:
                return fn(reader)

        return go

    def moment(reader: LogReader) -> Moment:
        return resolve(reader, clock_of(reader), at=at_text, seq=None, now_ms=0)

    def end(reader: LogReader) -> Moment:
        return resolve(reader, clock_of(reader), at=None, seq=None, now_ms=0)

    timed: dict[str, Callable[[], object]] = {
        "explain_at_end": with_reader(
            lambda r: explain_mod.to_json(explain_mod.explain(r, clock_of(r), jobs["history"], end(r)), clock_of(r))
        ),
        "history": with_reader(
            lambda r: history_mod.to_json(history_mod.history(r, jobs["history"], clock_of(r)), clock_of(r))
        ),
        "queues_at_end": with_reader(lambda r: queues_answer(r, end(r))),
        "explain_pending_job_at_middle": with_reader(
            lambda r: explain_mod.to_json(
                explain_mod.explain(r, clock_of(r), jobs["pending_at_middle"], moment(r)), clock_of(r)
            )
        ),
        "queues_at_middle": with_reader(lambda r: queues_answer(r, moment(r))),
        "replay_at_middle_json": with_reader(
            lambda r: codec.encode_json(replay_json(state_at(r, moment(r).seq), clock_of(r), moment(r)))
        ),
    }
    results: dict[str, Any] = {}
    for name, fn in timed.items():
        cpu: list[float] = []

        def timed_cpu(fn: Callable[[], object] = fn, cpu: list[float] = cpu) -> None:
            c0 = time.process_time()
            fn()
            cpu.append(time.process_time() - c0)

        med, all_runs = median_s(timed_cpu, runs)
        results[name] = {
            "median_s": round(med, 3),
            "runs_s": [round(t, 3) for t in all_runs],
            "cpu_median_s": round(statistics.median(cpu), 3),  # the process's CPU time: less sensitive to load
        }
    out["commands"] = results
    out["replay_with_a_snapshot_20000_events_before"] = snapshot_replay_phase(db, middle.seq, runs)
    if cli_once:  # the CLI end to end (process start-up and imports included), once each
        cli = {}
        for name, cmd in {
            "explain_at_end": ["explain", jobs["history"]],
            "history": ["history", jobs["history"]],
            "queues_at_end": ["queues"],
            "explain_pending_job_at_middle": ["explain", jobs["pending_at_middle"], "--at", at_text],
            "queues_at_middle": ["queues", "--at", at_text],
            "replay_at_middle": ["replay", "--at", at_text],
        }.items():
            t0 = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "daemon.cli", *cmd, "--db", str(db), "--json"],
                cwd=ROOT,
                capture_output=True,
                check=False,
            )
            cli[name] = {
                "wall_s": round(time.perf_counter() - t0, 3),
                "exit": done.returncode,
                "stdout_kib": len(done.stdout) // 1024,
            }
        out["cli_once"] = cli
    return out


def snapshot_figures(db: Path) -> dict[str, Any]:
    """What the log keeps (migration 0004): snapshot rows, the kept ones, their bytes against the events' payloads,
    and the longest stretch of events without a kept snapshot."""
    import sqlite3  # noqa: PLC0415  (a bench may read the file directly)

    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT seq, kept, length(body) FROM snapshots ORDER BY seq").fetchall()
        last, payload = conn.execute("SELECT max(seq), total(length(payload)) FROM events").fetchone()
    kept = [s for s, k, _ in rows if k]
    gaps = [b - a for a, b in zip([0, *kept], [*kept, last], strict=True)]
    return {
        "rows": len(rows),
        "kept": len(kept),
        "all_mib": round(sum(n for _, _, n in rows) / 2**20, 1),
        "kept_mib": round(sum(n for _, k, n in rows if k) / 2**20, 1),
        "events_payload_mib": round(payload / 2**20, 1),
        "largest_mib": round(max((n for _, _, n in rows), default=0) / 2**20, 1),
        "longest_stretch_without_a_kept_one_events": max(gaps, default=last),
    }


def fold_cost(db: Path, seq: int, runs: int) -> dict[str, Any]:
    """`state_at(seq)` in its parts: reading the nearest snapshot at or before it (and checking its digest),
    inflating its body, decoding the JSON into a `StateSnapshot`, building the fold's state and indexes from it
    (`State.from_snapshot`), and folding the tail after it (the per-event figure is what a moment between two kept
    snapshots costs per event of distance). With the collector paused as `state_at` does."""
    from daemon.domain.state import STATE_VERSION, State  # noqa: PLC0415
    from daemon.eventlog.replay import _snapshot_decoder, paused_gc, snapshot_raw_json  # noqa: PLC0415

    parts: dict[str, list[float]] = {"read": [], "inflate": [], "decode_json": [], "from_snapshot": [], "fold": []}
    with LogReader(db) as reader:
        found = reader.snapshot_at_or_before(STATE_VERSION, seq)
        base = 0 if found is None else found[0]
        raw_bytes = 0
        for _ in range(runs):
            t0 = time.perf_counter()
            found = reader.snapshot_at_or_before(STATE_VERSION, seq)
            t1 = time.perf_counter()
            with paused_gc(freeze=True):
                raw = snapshot_raw_json(found[1]) if found is not None else b""
                raw_bytes = len(raw)
                t2 = time.perf_counter()
                snap = _snapshot_decoder.decode(raw) if found is not None else None
                t3 = time.perf_counter()
                state = State.from_snapshot(snap) if snap is not None else State()
                t4 = time.perf_counter()
                for s, type_, version, payload in reader.iter_payloads(base, chunk=min(20_000, max(1, seq - base))):
                    if s > seq:
                        break
                    state.apply(codec.decode(type_, version, payload, seq=s), s)
                t5 = time.perf_counter()
            for name, took in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                parts[name].append(took)
            del raw, snap, state
    tail = seq - base
    fold = statistics.median(parts["fold"])
    return {
        "snapshot_seq": base,
        "tail_events": tail,
        "snapshot_mib": round(len(found[1]) / 2**20, 2) if found is not None else 0,
        "snapshot_json_mib": round(raw_bytes / 2**20, 1),
        **{f"{name}_median_s": round(statistics.median(ts), 3) for name, ts in parts.items()},
        "fold_us_per_event": round(fold / tail * 1e6, 1) if tail else None,
    }


def snapshot_replay_phase(db: Path, seq: int, runs: int) -> dict[str, Any]:
    """What `replay --seq` costs when the nearest snapshot is exactly 20,000 events before the moment (the writer's
    interval; the nearest kept one may be further, see `fold_cost`): decode the snapshot, fold the tail, encode the
    JSON. The snapshot body is prepared untimed."""
    from daemon.eventlog.replay import decode_snapshot, encode_snapshot, paused_gc  # noqa: PLC0415

    with LogReader(db) as reader:
        base = seq - 20_000
        body = encode_snapshot(state_at(reader, base))
        clock = clock_of(reader)

        def go() -> object:
            with paused_gc(freeze=True):  # as state_at builds a state
                state = decode_snapshot(body)
                for s, type_, version, payload in reader.iter_payloads(base):
                    if s > seq:
                        break
                    state.apply(codec.decode(type_, version, payload, seq=s), s)
            return codec.encode_json(replay_json(state, clock, Moment(seq, 0)))

        med, all_runs = median_s(go, runs)
    return {"snapshot_mib": round(len(body) / 2**20, 1), "median_s": round(med, 3),
            "runs_s": [round(t, 3) for t in all_runs]}  # fmt: skip


def fold_but_tail(db: Path, tail_events: int) -> tuple[FoldedMetrics, list[tuple[int, Any]], float]:
    """The log folded into metrics but for its last `tail_events` events, returned decoded; the fold's seconds."""
    with LogReader(db) as reader:
        cut = reader.last_seq() - tail_events
        fm = FoldedMetrics()
        tail = []
        t0 = time.perf_counter()
        for e in reader.iter_events():
            event = codec.decode(e.type, e.version, e.payload, seq=e.seq)
            if e.seq <= cut:
                fm.apply(event, e.seq)
            else:
                tail.append((e.seq, event))
        return fm, tail, time.perf_counter() - t0


def metrics_phase(db: Path, runs: int) -> dict[str, Any]:
    """Fold the whole log into metrics (what a start costs), then time renders: cold (every queue rendered), warm
    with nothing new, and after the last 20,000 events of the log (the queues they touched re-rendered)."""
    fm, tail, fold_s = fold_but_tail(db, 20_000)
    queues = len(fm.state.cluster_queues)
    cold = []
    for _ in range(runs):
        fm.config_changed = True  # forces every queue's text to be rendered again
        t0 = time.perf_counter()
        body = Renderer().render(fm)
        cold.append(time.perf_counter() - t0)
    renderer = Renderer()
    renderer.render(fm)
    warm = []
    for _ in range(runs):
        t0 = time.perf_counter()
        renderer.render(fm)
        warm.append(time.perf_counter() - t0)
    # The same scrape `runs` times: each run starts from a copy of the folded metrics and the warm renderer.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))  # pickling the fold's nested values
    before_tail = pickle.dumps((fm, renderer), protocol=pickle.HIGHEST_PROTOCOL)
    after_wall, after_cpu = [], []
    for _ in range(runs):
        fm, renderer = pickle.loads(before_tail)
        for seq, event in tail:
            fm.apply(event, seq)
        touched = len(fm.dirty)
        c0, t0 = time.process_time(), time.perf_counter()
        after_tail = renderer.render(fm)
        after_wall.append(time.perf_counter() - t0)
        after_cpu.append(time.process_time() - c0)
    return {
        "cluster_queues": queues,
        "fold_whole_log_s": round(fold_s, 2),
        "exposition_bytes": len(body),
        "exposition_lines": body.count(b"\n"),
        "render_cold_median_s": round(statistics.median(cold), 4),
        "render_unchanged_median_s": round(statistics.median(warm), 4),
        "render_after_20000_events_median_s": round(statistics.median(after_wall), 4),
        "render_after_20000_events_runs_s": [round(t, 4) for t in after_wall],
        "render_after_20000_events_cpu_median_s": round(statistics.median(after_cpu), 4),
        "queues_touched_by_those_events": touched,
        "exposition_bytes_after": len(after_tail),
    }


if __name__ == "__main__":
    main()
