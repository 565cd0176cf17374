"""One fold in `admitd run` (issue 25): what the daemon holds after start-up with the metrics' second fold and the
web view's third (before: `LogMetrics` following the log in a thread, `daemon.web.series.Series` folding it again)
against one fold fed by the recorder (after: `views.follow.CatchingUp` caught up and handed over), and the
recorder's CPU per event with the live views (Kueue's counters, the plots' series) against without them.

Usage:
  python -m bench.bench_fold memory --db LOG --layout before|after [--ui] [--trace]
      one process: the log replayed as `admitd run` replays it (newest snapshot + tail), the status writer's
      `Queues`, then the metrics (and with --ui the plots) as each layout builds them, every text rendered once.
      Prints the process's resident memory (VmRSS now, VmHWM its peak, VmRSS after glibc's malloc_trim gave the
      freed heap back) and with --trace tracemalloc's current and peak bytes (slower).
  python -m bench.bench_fold cpu --db LOG [--runs 5] [--events 120000] [--refresh-every 2000]
      in one process, alternating: the first --events events folded into a fresh State as the Recorder does it,
      with the projection main's recorder feeds (`Queues`, off), with the metrics' counters and the answers'
      windows as well (`admitd run` without --ui), with the counters and the plots' series (on without windows,
      main's `on`), with all three (on, `admitd run --ui`), and with the metrics' text rendered every
      --refresh-every events as `admitd run` does every 2 s (on+render); and, for the
      process's whole CPU, the second fold that the views replace (`FoldedMetrics` with its renders, and the web
      series' own fold). Medians, per event, ratios pair by pair.
  python -m bench.bench_fold start --db LOG --layout before|after
      the start-up's folds after the replay: the views' catch-up and the answers' windows, as two folds (main) or
      one (now); CPU and wall seconds, rows of the log decoded.
  python -m bench.bench_fold recorder --db LOG --views on|off [--events N]
      one side of `cpu` alone (decoding included), for timing two whole processes against each other.

LOG: any log, e.g. the one `python -m bench.bench_answers --scale 0.5` builds (git-ignored, bench/out/).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.answers.windows import Windows
from daemon.domain.events import Event
from daemon.domain.state import State
from daemon.eventlog import LogReader, codec, replay
from daemon.metrics import FedMetrics, FoldedMetrics, LogMetrics, Renderer
from daemon.query.moment import clock_of
from daemon.views.follow import CatchingUp
from daemon.views.queues import Queues
from daemon.views.series import QueueSeries
from daemon.web.series import Series


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def memory(db: Path, layout: str, ui: bool, trace: bool) -> dict[str, Any]:
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    with LogReader(db) as reader:
        state = replay(reader)  # what `admitd run` holds after its start-up replay
    queues = Queues.of(state)  # the status writer's
    kept: list[object] = [state, queues]
    if layout == "before":
        metrics = LogMetrics(db)  # main: the metrics follow the log in a thread, with their own State
        body = metrics.render()
        kept.append(metrics)
        if ui:
            series = Series()
            with LogReader(db) as reader:
                series.follow(reader)
            kept.append(series)
    else:
        feed = CatchingUp(db, state, queues)
        assert feed.state is not None and feed.queues is not None
        fed = FedMetrics(db, feed.state, feed.queues, lambda: "leader")
        feed.add(fed)
        if ui:
            feed.add(QueueSeries(feed.state, feed.queues))
        feed.catch_up()
        fed.refresh()
        feed.hand_over()
        body = fed.finish(fed.parts())
        kept.append(feed)
    seconds = time.perf_counter() - t0
    del body
    gc.collect()
    out: dict[str, Any] = {
        "layout": layout,
        "ui": ui,
        "events": state.seq,
        "built_in_s": round(seconds, 1),
        **{k.lower(): v for k, v in _status().items()},
    }
    # What was freed (the catch-up's own state) stays in the C heap, counted in VmRSS, until malloc gives it back.
    libc = ctypes.util.find_library("c")
    if libc is not None and hasattr(ctypes.CDLL(libc), "malloc_trim"):
        ctypes.CDLL(libc).malloc_trim(0)
        out["vmrss_after_malloc_trim"] = _status()["VmRSS"]
    if trace:
        current, peak = tracemalloc.get_traced_memory()
        out["traced_current"], out["traced_peak"] = current, peak
    del kept
    return out


def start(db: Path, layout: str) -> dict[str, Any]:
    """`admitd run`'s start-up folds after its replay, in one process: the views' catch-up (the metrics' counters
    from the log's first event) and the answers' windows (the log's last 8 days, here all of it: a simulated log is
    shorter), `before` as two folds (the catch-up, then `Windows.build` reading the file again, as main's
    `Windows.start` did in its own thread), `after` as one (`CatchingUp.add_late`). CPU and wall seconds of those
    folds (the replay apart), and the rows of the log each decoded."""
    with LogReader(db) as reader:
        state = replay(reader)
    queues = Queues.of(state)
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    feed = CatchingUp(db, state, queues)
    assert feed.state is not None and feed.queues is not None
    fed = FedMetrics(db, feed.state, feed.queues, lambda: "leader")
    feed.add(fed)
    windows = Windows()
    rows = 0
    if layout == "after":
        feed.add_late(windows)
    feed.catch_up()
    with feed.lock:
        fed.refresh()
        windows.warm_kept()
    feed.hand_over()
    rows += feed.rows_read
    if layout == "before":
        with LogReader(db) as reader:
            following = windows.build(reader, state.seq, now_ms=time.time_ns() // 1_000_000)
            assert windows.whole  # a log shorter than 8 days: main's build folded it all, from an empty state
            rows += state.seq
            windows.warm(clock_of(reader))
        windows.take_over(following, state)
    assert windows.ready and windows.seq == state.seq
    return {
        "layout": layout,
        "events": state.seq,
        "cpu_s": round(time.process_time() - c0, 2),
        "wall_s": round(time.perf_counter() - t0, 2),
        "rows_decoded": rows,
        "preemptions_kept": len(windows.ledger.entries) if windows.ledger is not None else 0,
    }


def events_of(db: Path, n: int) -> list[tuple[int, int, Event]]:
    with LogReader(db) as reader:
        out = []
        for seq, at, type_, version, payload in reader.iter_timed_payloads(0):
            raw = payload if isinstance(payload, bytes) else payload.encode()
            out.append((seq, at, codec.decode(type_, version, raw, seq=seq)))
            if len(out) == n:
                break
        return out


def fold(
    events: list[tuple[int, int, Event]],
    views: bool,
    refresh_every: int = 0,
    ui: bool = True,
    windows: bool = True,
) -> float:
    """CPU seconds of the Recorder's loop over `events`: the feed (with `views`: the metrics' counters, with `ui` the
    plots' series, with `windows` the answers' preemptions and usage windows, as `admitd run` feeds them), the status
    writer's `Queues`, the state; the metrics' text rendered every `refresh_every` events (0: never)."""
    gc.collect()
    state = State()
    queues = Queues(state)
    projections: list[Callable[[Event, int], None]] = []
    ticks: list[Callable[[int], None]] = []
    fed = None
    if views:
        feed = CatchingUp(Path("unused.db"), state, queues)  # as admitd run: it feeds `queues` too
        assert feed.state is not None and feed.queues is not None
        fed = FedMetrics(Path("unused.db"), feed.state, feed.queues, lambda: "leader")
        feed.add(fed)
        if ui:
            feed.add(QueueSeries(feed.state, feed.queues))
        if windows:
            feed.add_late(Windows(now=lambda: events[0][1]))  # a new log: they begin with it, at its first time
        feed.catch_up()  # an empty log: nothing to fold
        feed.hand_over()
        projections.append(feed.apply)
        ticks.append(feed.tick)
    else:
        projections.append(queues.apply)
    apply = state.apply
    last_at: int | None = None
    c0 = time.process_time()
    for i, (seq, at, event) in enumerate(events, 1):
        if at != last_at:  # a batch of the recorder's: one recorded_at
            last_at = at
            for tick in ticks:
                tick(at)
        for project in projections:
            project(event, seq)
        apply(event, seq)
        if fed is not None and refresh_every and i % refresh_every == 0:
            fed.refresh()
    return time.process_time() - c0


def second_fold(events: list[tuple[int, int, Event]], refresh_every: int, ui: bool) -> float:
    """CPU seconds of what main does besides the recorder for the same events: `LogMetrics`' fold (its own State,
    `Queues`, `KueueCounters`) with a render every `refresh_every` events, and with `ui` the web series' fold."""
    gc.collect()
    fm = FoldedMetrics()
    renderer = Renderer()
    series = Series() if ui else None
    c0 = time.process_time()
    for i, (seq, at, event) in enumerate(events, 1):
        fm.apply(event, seq)
        if series is not None:
            series.apply(event, seq, at)
        if refresh_every and i % refresh_every == 0:
            renderer.refresh(fm)
    return time.process_time() - c0


def cpu(db: Path, runs: int, n: int, refresh_every: int) -> dict[str, Any]:
    events = events_of(db, n)
    fold(events[:2000], True, refresh_every)  # warm the caches of both paths once
    fold(events[:2000], False)
    off: list[float] = []
    metrics_only: list[float] = []
    no_windows: list[float] = []
    on: list[float] = []
    rendered: list[float] = []
    second: list[float] = []
    for _ in range(runs):  # alternating, so that a drift of the machine's speed hits every side alike
        off.append(fold(events, False))
        metrics_only.append(fold(events, True, ui=False))
        no_windows.append(fold(events, True, windows=False))
        on.append(fold(events, True))
        rendered.append(fold(events, True, refresh_every))
        second.append(second_fold(events, refresh_every, ui=True))

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    def us(xs: list[float]) -> float:
        return round(med(xs) / len(events) * 1e6, 2)

    def ratio(a: list[float], b: list[float]) -> dict[str, Any]:
        rs = [x / y for x, y in zip(a, b, strict=True)]
        return {"median": round(statistics.median(rs), 3), "min_max": [round(min(rs), 3), round(max(rs), 3)]}

    before_total = [o + s for o, s in zip(off, second, strict=True)]
    return {
        "db": str(db),
        "events": len(events),
        "runs": runs,
        "refresh_every": refresh_every,
        "cpu_s_median": {
            "recorder_off": round(med(off), 3),
            "recorder_on_metrics_only": round(med(metrics_only), 3),
            "recorder_on_without_windows": round(med(no_windows), 3),
            "recorder_on": round(med(on), 3),
            "recorder_on_with_renders": round(med(rendered), 3),
            "main_second_and_third_fold": round(med(second), 3),
        },
        "per_event_us": {
            "recorder_off": us(off),
            "recorder_on_metrics_only": us(metrics_only),
            "recorder_on_without_windows": us(no_windows),
            "recorder_on": us(on),
            "recorder_on_with_renders": us(rendered),
            "main_second_and_third_fold": us(second),
            "main_process_total": us(before_total),
        },
        "ratio_on_metrics_only_off": ratio(metrics_only, off),
        "ratio_on_without_windows_off": ratio(no_windows, off),
        "ratio_on_off": ratio(on, off),
        "ratio_on_with_renders_off": ratio(rendered, off),
        "ratio_process_after_before": ratio(rendered, before_total),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("memory")
    m.add_argument("--db", type=Path, required=True)
    m.add_argument("--layout", choices=["before", "after"], required=True)
    m.add_argument("--ui", action="store_true")
    m.add_argument("--trace", action="store_true")
    c = sub.add_parser("cpu")
    c.add_argument("--db", type=Path, required=True)
    c.add_argument("--runs", type=int, default=5)
    c.add_argument("--events", type=int, default=120_000)
    c.add_argument("--refresh-every", type=int, default=2_000)
    s = sub.add_parser("start")
    s.add_argument("--db", type=Path, required=True)
    s.add_argument("--layout", choices=["before", "after"], required=True)
    r = sub.add_parser("recorder")
    r.add_argument("--db", type=Path, required=True)
    r.add_argument("--views", choices=["on", "off"], required=True)
    r.add_argument("--events", type=int, default=120_000)
    r.add_argument("--refresh-every", type=int, default=2_000)
    args = parser.parse_args()
    if args.mode == "memory":
        out = memory(args.db, args.layout, args.ui, args.trace)
    elif args.mode == "start":
        out = start(args.db, args.layout)
    elif args.mode == "cpu":
        out = cpu(args.db, args.runs, args.events, args.refresh_every)
    else:
        events = events_of(args.db, args.events)
        on = args.views == "on"
        out = {"views": args.views, "cpu_s": round(fold(events, on, args.refresh_every if on else 0), 3)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
