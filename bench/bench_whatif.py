"""What-if on a large recorded log: Kueue's baseline shape (5 cohorts x 6 ClusterQueues, 15,000 workloads) is
simulated into a log, then `admitd simulate --from-log`'s steps are timed on it: reading the log into a recording,
replaying it unchanged (which must reproduce every admission, eviction and finish), and a what-if with one
ClusterQueue given twice its nominal quota.

Usage: python -m bench.bench_whatif   Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path

from bench.kueue_shapes import BASELINE, cpu_queue, scenario
from daemon.domain import events as ev
from daemon.domain.model import Preemption, PreemptionPolicy
from daemon.eventlog import LogReader
from daemon.obs.logging import configure as configure_logging
from daemon.sim.run import SimResult, run_simulation
from daemon.sim.whatif import compare, what_if_scenario
from daemon.sim.whatif_cli import read_recording

CHANGED = "cohort-0-cq-0"


def _story(result: SimResult) -> dict[str, tuple[object, ...]]:
    return {k: (tuple(o.admitted_at), tuple(o.evicted_at), o.finished_at) for k, o in result.jobs.items()}


def main() -> None:
    configure_logging(level="warning")
    with tempfile.TemporaryDirectory(prefix="bench-whatif-") as tmp:
        db = Path(tmp) / "baseline.db"
        t0 = time.perf_counter()
        recorded = asyncio.run(run_simulation(scenario(BASELINE), db_path=db))
        record_s = time.perf_counter() - t0
        with LogReader(db) as reader:
            events = reader.last_seq()
        t0 = time.perf_counter()
        rec = read_recording(db)
        read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    replayed = asyncio.run(run_simulation(what_if_scenario(rec, [])))
    replay_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    unchanged = compare(rec, [], replayed)
    compare_s = time.perf_counter() - t0
    more = ev.ClusterQueueObserved(
        cluster_queue=cpu_queue(
            CHANGED,
            "cohort-0",
            2 * BASELINE.nominal_cpu,
            borrowing_limit=BASELINE.borrowing_limit_cpu,
            preemption=Preemption(
                within_cluster_queue=PreemptionPolicy.LOWER_PRIORITY,
                reclaim_within_cohort=PreemptionPolicy.ANY,
            ),
        )
    )
    t0 = time.perf_counter()
    changed_run = asyncio.run(run_simulation(what_if_scenario(rec, [more])))
    changed = compare(rec, [("ClusterQueue", CHANGED)], changed_run)
    changed_s = time.perf_counter() - t0
    queue = next(g for g in changed.queues if g.name == CHANGED)
    print(
        json.dumps(
            {
                "benchmark": "whatif",
                "shape": BASELINE.name,
                "jobs": len(rec.jobs),
                "log_events": events,
                "record_seconds": round(record_s, 2),
                "read_log_seconds": round(read_s, 2),
                "replay_unchanged_seconds": round(replay_s, 2),
                "compare_seconds": round(compare_s, 2),
                "reproduced_exactly": _story(replayed) == _story(recorded),
                "unchanged_mean_wait_delta_ms": unchanged.total.mean_wait_delta,
                "what_if_seconds": round(changed_s, 2),
                "what_if": {
                    "changed": f"ClusterQueue {CHANGED}: nominal cpu {BASELINE.nominal_cpu} -> "
                    f"{2 * BASELINE.nominal_cpu}",
                    "queue_mean_wait_ms": [queue.recorded.mean_wait, queue.what_if.mean_wait],
                    "queue_makespan_ms": [queue.recorded.makespan, queue.what_if.makespan],
                    "all_mean_wait_ms": [changed.total.recorded.mean_wait, changed.total.what_if.mean_wait],
                    "recorded_mean_wait_ms_per_queue_min_max": [
                        min(g.recorded.mean_wait or 0 for g in changed.queues),
                        max(g.recorded.mean_wait or 0 for g in changed.queues),
                    ],
                    "evictions": [
                        sum(len(o.evicted_at) for o in recorded.jobs.values()),
                        sum(len(o.evicted_at) for o in changed_run.jobs.values()),
                    ],
                    "all_makespan_ms": [changed.total.recorded.makespan, changed.total.what_if.makespan],
                },
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
