"""`admitd eta`: when each pending workload is estimated to start (p50 and p90), from the log's present state.

The runtimes come from every run the log recorded (`daemon.views.runtimes`, folded from the log's start); the
forward run is `daemon.domain.eta`. The present is the log's last event.
"""

from __future__ import annotations

from typing import Any

from daemon.domain.eta import estimates
from daemon.domain.state import Phase, State
from daemon.eventlog import LogReader
from daemon.query.ledger import table
from daemon.query.moment import Clock, QueryError
from daemon.views.follow import Following
from daemon.views.runtimes import Runtimes

QUANTILES = (0.5, 0.9)


def eta_json(reader: LogReader, clock: Clock, *, queue: str | None = None) -> dict[str, Any]:
    state = State(pending_indexes=False)
    runtimes = Runtimes(state)
    Following(state, (runtimes,)).follow(reader)
    if queue is not None and queue not in state.cluster_queues:
        raise QueryError(f"no ClusterQueue {queue!r} at the log's end")
    now = clock.last_ms
    found = estimates(state, now, runtimes.durations, QUANTILES)
    rows = []
    for key, rec in sorted(state.workloads.items(), key=lambda kv: (kv[1].queue_order_at, kv[0])):
        if rec.phase is not Phase.PENDING:
            continue
        cq = state.local_queues.get(f"{rec.workload.namespace}/{rec.workload.queue_name}")
        cluster_queue = cq.cluster_queue if cq is not None else None
        if queue is not None and cluster_queue != queue:
            continue
        p50, p90 = (found[q].get(key) for q in QUANTILES)
        rows.append(
            {
                "job": key,
                "cluster_queue": cluster_queue,
                "p50": clock.show(p50),
                "p90": clock.show(p90),
                "p50_in_seconds": None if p50 is None else (p50 - now) / 1000,
                "p90_in_seconds": None if p90 is None else (p90 - now) / 1000,
            }
        )
    return {
        "clock": clock.kind,
        "now": clock.show(now),
        "runs_recorded": sum(map(len, runtimes.by_queue.values())),
        "estimates": rows,
    }


def _in(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    return f"in {seconds:g}s" if seconds > 0 else "now"


def eta_text(body: dict[str, Any]) -> str:
    cells: list[tuple[str, ...]] = [("JOB", "CLUSTERQUEUE", "P50", "P90")]
    for r in body["estimates"]:
        cells.append(
            (
                r["job"],
                r["cluster_queue"] or "-",
                f"{r['p50'] or '-'} ({_in(r['p50_in_seconds'])})",
                f"{r['p90'] or '-'} ({_in(r['p90_in_seconds'])})",
            )
        )
    head = f"estimated starts as of {body['now']}, from {body['runs_recorded']} recorded runs"
    return "\n".join([head, *(table(cells) if body["estimates"] else ["nothing pending"])])
