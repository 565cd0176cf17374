"""`admitd eta`: when each pending workload is estimated to start (p50 and p90), from the log's present state.

The runtimes come from every run the log recorded (`daemon.views.runtimes`, folded from the log's start); the
forward run is `daemon.domain.eta`. The present is the log's last event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from daemon.domain import events as ev
from daemon.domain.eta import estimates
from daemon.domain.state import Phase, State, WorkloadRecord
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


class _Starts:
    """Every admission's time per workload (the projection eta-report scores against), and every recorded estimate
    with its workload's group as the estimate was made (fed before the state folds the event)."""

    def __init__(self, state: State, by: str) -> None:
        self.seq = 0
        self.state = state
        self.by = by
        self.admitted: dict[str, list[int]] = {}
        self.recorded: list[tuple[ev.WorkloadEstimated, str | None]] = []

    def apply(self, event: ev.Event, seq: int) -> None:
        self.seq = seq
        if isinstance(event, ev.WorkloadAdmitted):
            self.admitted.setdefault(event.workload, []).append(event.at)
        elif isinstance(event, ev.WorkloadEstimated):
            rec = self.state.workloads.get(event.workload)
            self.recorded.append((event, None if rec is None else _group(self.state, rec, self.by)))

    def figures(self) -> object:
        return sorted(self.admitted.items()), [(e.workload, e.at) for e, _ in self.recorded]


def _group(state: State, rec: WorkloadRecord, by: str) -> str | None:
    if by == "priorityclass":
        return rec.workload.priority_class or rec.workload.pod_priority_class
    lq = state.local_queues.get(f"{rec.workload.namespace}/{rec.workload.queue_name}")
    return lq.cluster_queue if lq is not None else None


REPORT_QUANTILES = (0.1, 0.5, 0.9)
Sample = tuple[int, str, str | None, Mapping[float, int | None]]  # (made at, job, its group, p10/p50/p90)


def _scored(samples: Iterable[Sample], admitted: Mapping[str, list[int]]) -> dict[str, Any]:
    """Each estimate against its workload's next admission at or after the moment it was made: per group and
    overall, the median absolute error of p50 and the share of starts inside p10-p90."""
    groups: dict[str, list[tuple[int, bool]]] = {}
    made = unknown = never_started = 0
    for at, key, group, est in samples:
        made += 1
        actual = next((a for a in admitted.get(key, ()) if a >= at), None)
        if actual is None:
            never_started += 1
            continue
        p10, p50, p90 = est[0.1], est[0.5], est[0.9]
        if p50 is None:
            unknown += 1
            continue
        inside = p10 is not None and p90 is not None and p10 <= actual <= p90
        for g in (group or "-", "all"):
            groups.setdefault(g, []).append((abs(actual - p50), inside))

    def score(rows: list[tuple[int, bool]]) -> dict[str, Any]:
        errors = sorted(e for e, _ in rows)
        return {
            "estimates": len(rows),
            "median_abs_error_seconds": errors[len(errors) // 2] / 1000 if errors else None,
            "inside_p10_p90": round(sum(1 for _, i in rows if i) / len(rows), 3) if rows else None,
        }

    return {
        "estimates_made": made,
        "not_started_by_the_end": never_started,
        "unknown": unknown,
        "scores": {g: score(rows) for g, rows in sorted(groups.items())},
    }


def eta_report_json(
    reader: LogReader, clock: Clock, *, every_ms: int, by: str = "clusterqueue", recompute: bool = True
) -> dict[str, Any]:
    """Back-test, twice. `recorded`: the estimates the daemon made and recorded (`workload.estimated`), each
    scored against when its workload was next admitted. And (unless `recompute` is off) at every `every_ms` of the
    log, the estimates `admitd eta` would have given then (from what the log held then: the state and the runs
    recorded so far), scored the same way: for logs without recorded estimates (a simulation without
    `--estimate-every`), or to compare.

    The estimator is deterministic, so the re-computed ones are those a daemon running this build would have made
    at those moments; the recorded ones are what was said, by whichever build said it."""
    if every_ms <= 0:
        raise QueryError("--every must be a positive duration")
    state = State(pending_indexes=False)
    runtimes = Runtimes(state)
    starts = _Starts(state, by)
    following = Following(state, (runtimes, starts))
    samples: list[Sample] = []
    t = clock.first_ms + every_ms
    while recompute and t <= clock.last_ms:
        target = reader.seq_at(t)
        if target > state.seq:
            following.follow(reader, limit=target - state.seq)
        found = estimates(state, t, runtimes.durations, REPORT_QUANTILES)
        for key, rec in state.workloads.items():
            if rec.phase is Phase.PENDING:
                samples.append((t, key, _group(state, rec, by), {q: found[q].get(key) for q in REPORT_QUANTILES}))
        t += every_ms
    following.follow(reader)
    recorded = ((e.at, e.workload, group, {0.1: e.p10, 0.5: e.p50, 0.9: e.p90}) for e, group in starts.recorded)
    return {
        "clock": clock.kind,
        "every_seconds": every_ms / 1000 if recompute else None,
        "by": by,
        "moments": max(0, (clock.last_ms - clock.first_ms) // every_ms) if recompute else 0,
        **_scored(samples, starts.admitted),
        "recorded": _scored(recorded, starts.admitted),
    }


def _score_table(by: str, scores: dict[str, Any]) -> list[str]:
    cells: list[tuple[str, ...]] = [(by.upper(), "SCORED", "MEDIAN |ERROR| OF P50", "STARTS INSIDE P10-P90")]
    for g, s in scores.items():
        err = "-" if s["median_abs_error_seconds"] is None else f"{s['median_abs_error_seconds']:g}s"
        share = "-" if s["inside_p10_p90"] is None else f"{s['inside_p10_p90'] * 100:.1f}%"
        cells.append((g, str(s["estimates"]), err, share))
    return table(cells)


def eta_report_text(body: dict[str, Any]) -> str:
    rec = body["recorded"]
    lines = [
        f"recorded estimates (workload.estimated): {rec['estimates_made']} made, "
        f"{rec['not_started_by_the_end']} for workloads not started by the log's end, {rec['unknown']} unknown",
        *(_score_table(body["by"], rec["scores"]) if rec["scores"] else []),
    ]
    if body["every_seconds"] is not None:
        lines += [
            f"re-computed every {body['every_seconds']:g}s: {body['estimates_made']} made, "
            f"{body['not_started_by_the_end']} for workloads not started by the log's end, {body['unknown']} unknown",
            *_score_table(body["by"], body["scores"]),
        ]
    return "\n".join(lines)
