"""The live views' cost in the recorder (issue 25: at most +10% CPU per event): the events of a log folded into a
fresh `State`, as the Recorder does, alone and with the projections `admitd run` feeds live (`views.queues.Queues`,
which the status writer renders), alternating, in one process; and the memory each adds (tracemalloc).

Usage: python -m bench.bench_views [--db bench/out/query-1000cq.db] [--runs 5] [--events 120000]

The log is the one `python -m bench.bench_query --build-only` builds (Kueue's large-scale shape). Prints one JSON
object: medians of `--runs` folds of the first `--events` events, CPU seconds, per event in microseconds, the ratio
with/without, and the traced memory of the state alone and of the state with the projections after the fold.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.domain.events import Event
from daemon.domain.state import State
from daemon.eventlog import LogReader, codec
from daemon.views.queues import Queues

ROOT = Path(__file__).resolve().parent.parent


def fold(events: list[tuple[int, Event]], with_views: bool) -> tuple[State, list[object]]:
    state = State()
    apply = state.apply
    projections: list[Callable[[Event, int], None]] = []
    kept: list[object] = []
    if with_views:
        q = Queues(state)
        projections.append(q.apply)
        kept.append(q)
    for seq, event in events:  # the Recorder's loop: projections, then the state
        for project in projections:
            project(event, seq)
        apply(event, seq)
    return state, kept


def cpu(events: list[tuple[int, Event]], with_views: bool) -> float:
    gc.collect()
    c0 = time.process_time()
    fold(events, with_views)
    return time.process_time() - c0


def traced(events: list[tuple[int, Event]], with_views: bool) -> int:
    gc.collect()
    tracemalloc.start()
    kept = fold(events, with_views)
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept
    return size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, default=ROOT / "bench" / "out" / "query-1000cq.db")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=120_000)
    args = parser.parse_args()
    with LogReader(args.db) as reader:
        events = [
            (e.seq, codec.decode(e.type, e.version, e.payload, seq=e.seq))
            for _, e in zip(range(args.events), reader.iter_events(), strict=False)
        ]
    alone: list[float] = []
    views: list[float] = []
    for _ in range(args.runs):  # alternating, so that a drift of the machine's speed hits both
        alone.append(cpu(events, False))
        views.append(cpu(events, True))
    ratios = [v / a for a, v in zip(alone, views, strict=True)]
    out: dict[str, Any] = {
        "db": str(args.db),
        "events": len(events),
        "runs": args.runs,
        "state_alone_cpu_s": round(statistics.median(alone), 3),
        "state_with_live_views_cpu_s": round(statistics.median(views), 3),
        "per_event_us": {
            "state_alone": round(statistics.median(alone) / len(events) * 1e6, 2),
            "with_live_views": round(statistics.median(views) / len(events) * 1e6, 2),
        },
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_min_max": [round(min(ratios), 3), round(max(ratios), 3)],
        "traced_bytes": {"state_alone": traced(events, False), "state_with_live_views": traced(events, True)},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
