"""The recorder's CPU per event with every live view `admitd run` feeds, against without them (issue 25's "the live
views add at most 10% to the recorder's CPU per event, paired against today").

Off: the state and the status writer's `Queues` (what the recorder folds without views), one call each an event.
On: the feed (`views.follow.CatchingUp`) instead of that `Queues` call: the metrics' counters and ledger, the plots'
series, the answers' preemptions, usage windows and runtimes (`CatchingUp.add_late`), and the status writer's
`Queues` after them, joined into one lookup an event, each batch's recorded_at given once (`CatchingUp.tick`), as
`admitd run` wires it. Batches are the runs of one recorded_at in the log.

Two measures, each printing one JSON object:
- CPU time (default): alternating off and on in one process, `--runs` of each; medians, ratios pair by pair. On a
  shared machine these spread widely (other processes' load).
- `--instructions`: the instructions the loop executes, counted by valgrind's cachegrind (`--cache-sim=no`), which do
  not depend on the machine's load: one process per side folds the first `--events` events once, and one per side
  stops before the loop (its instructions, the decoding and the set-up, are subtracted); run under `setarch -R` and
  PYTHONHASHSEED=0, so that two runs of one tree agree to about 1e-6. `--no-gc`: with the garbage collector off
  in the loop (its runs depend on what was allocated, and move the count by a few M between runs of nearly the same
  code). Four valgrind runs, about 2 minutes on a quiet machine; needs valgrind and setarch.

LOG (default bench/out/fold-x0.5.db) is built when missing, as bench/RESULTS.md's "one fold in `admitd run`" says:
bench_query's `BIG` scaled 0.5, simulated until half its arrivals (195,149 events, ~25 s; git-ignored).

Usage, from the root of the tree:
  PYTHONPATH=. python bench/bench_live_views.py [LOG [EVENTS [RUNS]]]          (EVENTS 40000, RUNS 5)
  PYTHONPATH=. python bench/bench_live_views.py --instructions [--no-gc] [LOG [EVENTS]]   (EVENTS 10000)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_fold import events_of
from daemon.answers.windows import Windows
from daemon.domain.state import State
from daemon.metrics import FedMetrics
from daemon.views.follow import CatchingUp
from daemon.views.queues import Queues
from daemon.views.series import QueueSeries

ROOT = Path(__file__).resolve().parent.parent
LOG = Path("bench/out/fold-x0.5.db")


def batches(events: list[tuple[int, int, Any]]) -> list[tuple[int, list[tuple[int, Any]]]]:
    """The events as the recorder's batches: (recorded_at, [(seq, event), ...]), one per run of one recorded_at."""
    out: list[tuple[int, list[tuple[int, Any]]]] = []
    for seq, at, event in events:
        if not out or out[-1][0] != at:
            out.append((at, []))
        out[-1][1].append((seq, event))
    return out


def fold(events: list[tuple[int, int, Any]], views: bool, *, loop: bool = True) -> float:
    """CPU seconds of the recorder's loop over `events` (`loop=False`: the set-up only, no event folded): per batch,
    the feed told its recorded_at (`CatchingUp.tick`), then each event to the projections and the state. Off: the
    status writer's `Queues` is the one projection; on: the feed, which feeds those queues too (as `admitd run`)."""
    gc.collect()
    state = State()
    queues = Queues(state)
    grouped = batches(events)
    projections: list[Any] = []
    ticks: list[Any] = []
    if views:
        feed = CatchingUp(Path("unused.db"), state, queues)
        assert feed.state is not None and feed.queues is not None
        fed = FedMetrics(Path("unused.db"), feed.state, feed.queues, lambda: "leader")
        feed.add(fed)
        feed.add(QueueSeries(feed.state, feed.queues))
        feed.add_late(Windows(now=lambda: events[0][1]))
        feed.catch_up()
        feed.hand_over()
        projections.append(feed.apply)
        ticks.append(feed.tick)
    else:
        projections.append(queues.apply)
    apply = state.apply
    c0 = time.process_time()
    if loop:
        for at, batch in grouped:
            for tick in ticks:
                tick(at)
            for seq, event in batch:
                for p in projections:
                    p(event, seq)
                apply(event, seq)
    return time.process_time() - c0


def ensure_log(log: Path) -> None:
    """Build the default log when it is missing (bench_answers' `build` of `scaled(BIG, 0.5)` until 0.5)."""
    if log.exists():
        return
    if log.resolve() != (ROOT / LOG).resolve():
        raise SystemExit(f"{log}: no such log (only the default, {LOG}, is built when missing)")
    from bench.bench_answers import build, scaled  # noqa: PLC0415
    from bench.bench_query import BIG  # noqa: PLC0415

    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"building {log} ...", file=sys.stderr)
    built = build(log, scaled(BIG, 0.5), 0.5)
    print(f"built {log}: {built}", file=sys.stderr)


def cpu(log: Path, n: int, runs: int) -> dict[str, Any]:
    events = events_of(log, n)
    fold(events[:2000], True)
    fold(events[:2000], False)
    off: list[float] = []
    on: list[float] = []
    for _ in range(runs):
        off.append(fold(events, False))
        on.append(fold(events, True))
    r = [a / b for a, b in zip(on, off, strict=True)]
    return {
        "events": len(events),
        "load": [round(x, 1) for x in os.getloadavg()],
        "off_us": round(statistics.median(off) / len(events) * 1e6, 2),
        "on_us": round(statistics.median(on) / len(events) * 1e6, 2),
        "ratio": round(statistics.median(r), 3),
        "min_max": [round(min(r), 3), round(max(r), 3)],
    }


def child(log: Path, n: int, side: str, loop: bool, collector: bool) -> None:
    """One side folded once (or set up only), in a process of its own that valgrind counts."""
    events = events_of(log, n)
    if not collector:
        gc.disable()
    fold(events, side == "on", loop=loop)


def instructions(log: Path, n: int, collector: bool) -> dict[str, Any]:
    """The instructions of the loop, off and on (each less its own set-up), counted by cachegrind."""
    for tool in ("valgrind", "setarch"):
        if shutil.which(tool) is None:
            raise SystemExit(f"--instructions needs {tool} on PATH")
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(Path.cwd())}
    counts: dict[tuple[str, bool], int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("off", "on"):
            for loop in (False, True):
                out = Path(tmp) / f"cg.{side}.{int(loop)}"
                cmd = [
                    "setarch", platform.machine(), "-R",
                    "valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}",
                    sys.executable, str(Path(__file__).resolve()), "--child", side, "--loop", str(int(loop)),
                    *(() if collector else ("--no-gc",)), str(log), str(n),
                ]  # fmt: skip
                subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                counts[(side, loop)] = _summary(out)
    off = counts[("off", True)] - counts[("off", False)]
    on = counts[("on", True)] - counts[("on", False)]
    return {
        "events": n,
        "collector": "on" if collector else "off",
        "off_loop_M": round(off / 1e6, 1),
        "on_loop_M": round(on / 1e6, 1),
        "views_M": round((on - off) / 1e6, 1),
        "views_per_event": round((on - off) / n),
        "ratio": round(on / off, 3),
        "setup_M": {"off": round(counts[("off", False)] / 1e6, 1), "on": round(counts[("on", False)] / 1e6, 1)},
    }


def _summary(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"{path}: no summary line (did valgrind run?)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", nargs="?", type=Path, default=LOG)
    parser.add_argument("events", nargs="?", type=int)
    parser.add_argument("runs", nargs="?", type=int, default=5)
    parser.add_argument("--instructions", action="store_true", help="count the loop's instructions (cachegrind)")
    parser.add_argument("--no-gc", action="store_true", help="with --instructions: the garbage collector off")
    parser.add_argument("--child", choices=("off", "on"), help=argparse.SUPPRESS)
    parser.add_argument("--loop", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.log, args.events or 10_000, args.child, bool(args.loop), not args.no_gc)
        return
    ensure_log(args.log)
    if args.instructions:
        result = instructions(args.log, args.events or 10_000, not args.no_gc)
    else:
        result = cpu(args.log, args.events or 40_000, args.runs)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
