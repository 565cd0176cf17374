"""The recorder's CPU per event with every live view `admitd run` feeds, against without them, in whichever tree is
imported: this one's or main's (issue 25's "the live views add at most 10% to the recorder's CPU per event, paired
against today"). `bench_fold cpu` pairs the same inside this tree; main's `bench_fold` does not feed the answers'
windows (main's recorder fed them as a projection of their own, `Windows.apply`), so this one runs in both.

Off: the state and the status writer's `Queues` (what the recorder folds without views). On: plus the metrics'
counters and the plots' series (`views.follow.CatchingUp`), and the answers' preemptions and usage windows (here a
part of the feed, `CatchingUp.add_late`; in main a recorder projection of their own, begun on the empty state).
Alternating off and on in one process; medians, ratios pair by pair. Prints one JSON object.

Usage, from the root of either tree (main's: `git archive main | tar -x -C DIR`, then copy this file into DIR/bench):
  PYTHONPATH=. python bench/bench_live_views.py LOG [EVENTS [RUNS]]
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench.bench_fold import events_of
from daemon.answers.windows import Windows
from daemon.domain.state import State
from daemon.metrics import FedMetrics
from daemon.views.follow import CatchingUp
from daemon.views.queues import Queues
from daemon.views.series import QueueSeries


class Rec:
    """The recorder's `recorded_at` (of the batch being appended)."""

    recorded_at = 0


def fold(events: list[tuple[int, int, Any]], views: bool) -> float:
    gc.collect()
    state = State()
    queues = Queues(state)
    now = Rec()
    projections: list[Any] = []
    new = hasattr(CatchingUp, "add_late")
    if views:
        feed = CatchingUp(
            Path("unused.db"), state, queues, partial(getattr, now, "recorded_at") if new else (lambda: now.recorded_at)
        )
        fed = FedMetrics(Path("unused.db"), feed.state, feed.queues, lambda: "leader")
        feed.add(fed)
        feed.add(QueueSeries(feed.state, feed.queues))
        if new:
            feed.add_late(Windows(now=lambda: events[0][1]))
        feed.catch_up()
        feed.hand_over()
        projections.append(feed.apply)
    projections.append(queues.apply)
    if views and not new:
        w = Windows(hold=False)
        w.begin(state, events[0][1], whole=True)  # main: fed by the recorder after the build
        projections.append(w.apply)
    apply = state.apply
    c0 = time.process_time()
    for seq, at, event in events:
        now.recorded_at = at
        for p in projections:
            p(event, seq)
        apply(event, seq)
    return time.process_time() - c0


def main() -> None:
    events = events_of(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40_000)
    fold(events[:2000], True)
    fold(events[:2000], False)
    off: list[float] = []
    on: list[float] = []
    for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
        off.append(fold(events, False))
        on.append(fold(events, True))
    r = [a / b for a, b in zip(on, off, strict=True)]
    print(
        json.dumps(
            {
                "tree": "now" if hasattr(CatchingUp, "add_late") else "main",
                "off_us": round(statistics.median(off) / len(events) * 1e6, 2),
                "on_us": round(statistics.median(on) / len(events) * 1e6, 2),
                "ratio": round(statistics.median(r), 3),
                "min_max": [round(min(r), 3), round(max(r), 3)],
            }
        )
    )


if __name__ == "__main__":
    main()
