"""`admitd preemptions`: the preemption ledger of a window of the log, per preemption and per ClusterQueue.

The window starts at `--since` (a duration back from now, `7d`, or any time `--at` takes) and runs to the log's
end. The state at the window's start comes from the nearest snapshot (`moment.state_at`), and the ledger
(`daemon.views.ledger`) follows the log from there. A victim whose pods were started before the window began has
its run counted from its admission (the fold keeps when a workload was admitted, not when its pods started).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daemon.domain.state import Phase, State
from daemon.eventlog import LogReader
from daemon.eventlog.codec import encode_json
from daemon.query.moment import Clock, QueryError, parse_duration_ms, parse_time, state_at
from daemon.views.follow import Following
from daemon.views.ledger import GPU_RESOURCES, Preemption, Preemptions

__all__ = [
    "GPU_RESOURCES",
    "preemption_row",
    "preemptions_body",
    "preemptions_encoded",
    "preemptions_json",
    "preemptions_text",
    "since_ms",
    "table",
]

MS_PER_HOUR = 3_600_000


def since_ms(text: str | None, clock: Clock, now_ms: int) -> int:
    """`--since`: a bare duration (`7d`) counts back from now (a virtual log's end); else as `--at`."""
    if text is None:
        return clock.first_ms
    t = text.strip()
    try:
        back = parse_duration_ms(t)
    except QueryError:
        return parse_time(t, clock, now_ms)
    return (clock.last_ms if clock.virtual else now_ms) - back


def ledger_since(reader: LogReader, start_ms: int) -> Preemptions:
    """The ledger from the last event before `start_ms` to the log's end (filter on `at` for the window)."""
    seq = reader.seq_at(start_ms - 1)
    state = state_at(reader, seq) if seq > 0 else State(pending_indexes=False)
    ledger = Preemptions(state)
    for key, rec in state.workloads.items():
        # Runs that began before the window: counted from their admission (see the module's docstring).
        if rec.phase is Phase.ADMITTED and rec.admitted_at is not None and not rec.evicting:
            ledger.started(key, rec.admitted_at)
    Following(state, (ledger,)).follow(reader)
    return ledger


def _hours(milli_ms: int) -> float:
    """milli-units x ms -> unit-hours"""
    return milli_ms / 1000 / MS_PER_HOUR


def _gpu_hours(p: Preemption) -> float:
    return sum(_hours(p.lost.get(r, 0)) for r in GPU_RESOURCES)


@dataclass(frozen=True, slots=True)
class _Totals:
    preempted: int  # its workloads preempted
    preempting: int  # preemptions its workloads made
    lost_pod_hours: float
    lost_gpu_hours: float
    rerun_median_s: float | None
    not_rerun: int


def _totals(entries: list[Preemption], queues: list[str]) -> dict[str, _Totals]:
    """Per ClusterQueue of `queues`, in one pass over `entries` (each queue's sums in entry order, as the CLI's)."""
    wanted = set(queues)
    victims: dict[str, list[Preemption]] = {q: [] for q in queues}
    preempting = dict.fromkeys(queues, 0)
    for p in entries:
        if p.victim_cluster_queue in wanted:
            victims[p.victim_cluster_queue].append(p)
        if p.preemptor_cluster_queue in wanted:
            preempting[p.preemptor_cluster_queue] += 1
    out: dict[str, _Totals] = {}
    for q in queues:
        mine = victims[q]
        reruns = [p.rerun_after for p in mine if p.rerun_after is not None]
        out[q] = _Totals(
            preempted=len(mine),
            preempting=preempting[q],
            lost_pod_hours=round(sum(p.lost_pod_ms for p in mine) / MS_PER_HOUR, 3),
            lost_gpu_hours=round(sum(_gpu_hours(p) for p in mine), 3),
            rerun_median_s=round(statistics.median(reruns) / 1000, 3) if reruns else None,
            not_rerun=len(mine) - len(reruns),
        )
    return out


def preemptions_json(reader: LogReader, clock: Clock, *, start_ms: int, queue: str | None = None) -> dict[str, Any]:
    ledger = ledger_since(reader, start_ms)
    return preemptions_body(ledger.entries, clock, start_ms=start_ms, until_ms=clock.last_ms, queue=queue)


def preemption_row(p: Preemption, clock: Clock) -> dict[str, Any]:
    """One preemption as the answer's `preemptions` list has it."""
    return {
        "seq": p.seq,
        "at": clock.show(p.at),
        "victim": p.victim,
        "victimClusterQueue": p.victim_cluster_queue,
        "preemptor": p.preemptor,
        "preemptorClusterQueue": p.preemptor_cluster_queue,
        "rule": p.rule,
        "policy": p.policy,
        "cohort": p.cohort,
        "level": p.level,
        "ranFrom": clock.show(p.ran_from),
        "pods": p.pods,
        "lostPodHours": round(p.lost_pod_ms / MS_PER_HOUR, 4),
        "lostGpuHours": round(_gpu_hours(p), 4),
        "lost": {r: round(_hours(v), 4) for r, v in sorted(p.lost.items())},
        "rerunAfterSeconds": None if p.rerun_after is None else p.rerun_after / 1000,
    }


def _window(ledger: list[Preemption], start_ms: int, queue: str | None) -> tuple[list[Preemption], list[str]]:
    entries = [p for p in ledger if p.at >= start_ms]
    if queue is not None:
        entries = [p for p in entries if queue in (p.victim_cluster_queue, p.preemptor_cluster_queue)]
    queues = sorted({p.victim_cluster_queue for p in entries} | {p.preemptor_cluster_queue or "" for p in entries})
    return entries, [q for q in queues if q and (queue is None or q == queue)]


def _queue_rows(entries: list[Preemption], queues: list[str]) -> dict[str, Any]:
    return {
        q: {
            "preempted": t.preempted,
            "preempting": t.preempting,
            "lostPodHours": t.lost_pod_hours,
            "lostGpuHours": t.lost_gpu_hours,
            "rerunMedianSeconds": t.rerun_median_s,
            "notRerun": t.not_rerun,
        }
        for q, t in _totals(entries, queues).items()
    }


def preemptions_body(
    ledger: list[Preemption], clock: Clock, *, start_ms: int, until_ms: int, queue: str | None = None
) -> dict[str, Any]:
    """The answer from a ledger's entries (in log order): those from `start_ms` on, of or by `queue`."""
    entries, queues = _window(ledger, start_ms, queue)
    return {
        "since": clock.show(start_ms),
        "until": clock.show(until_ms),
        "clock": clock.kind,
        "preemptions": [preemption_row(p, clock) for p in entries],
        "clusterQueues": _queue_rows(entries, queues),
    }


def preemptions_encoded(
    ledger: list[Preemption],
    clock: Clock,
    row: Callable[[Preemption], bytes],
    *,
    start_ms: int,
    until_ms: int,
    queue: str | None = None,
) -> bytes:
    """`preemptions_body` as JSON, each row's JSON from `row` (a cache of `preemption_row`'s encoding: a week's
    rows, tens of thousands, are encoded once, not at every answer)."""
    entries, queues = _window(ledger, start_ms, queue)
    head = encode_json({"since": clock.show(start_ms), "until": clock.show(until_ms), "clock": clock.kind})
    return b"".join(
        (
            head[:-1],
            b',"preemptions":[',
            b",".join(row(p) for p in entries),
            b'],"clusterQueues":',
            encode_json(_queue_rows(entries, queues)),
            b"}",
        )
    )


def table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns as wide as their widest cell (as `admitd queues` prints)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def preemptions_text(body: dict[str, Any]) -> str:
    rows = body["preemptions"]
    lines = [f"preemptions from {body['since']} to {body['until']}: {len(rows)}"]
    if rows:
        cells: list[tuple[str, ...]] = [
            ("SEQ", "AT", "VICTIM", "BY", "RULE", "WHERE", "LOST POD-H", "LOST GPU-H", "RERUN AFTER")
        ]
        for r in rows:
            where = "ClusterQueue" if r["level"] == 0 else f"{r['cohort']} (level {r['level']})"
            rerun = "-" if r["rerunAfterSeconds"] is None else f"{r['rerunAfterSeconds']:g}s"
            cells.append(
                (
                    str(r["seq"]),
                    r["at"],
                    r["victim"],
                    r["preemptor"] or "-",
                    r["rule"],
                    where,
                    f"{r['lostPodHours']:.3f}",
                    f"{r['lostGpuHours']:.3f}",
                    rerun,
                )
            )
        lines += table(cells)
    if body["clusterQueues"]:
        cells = [("CLUSTERQUEUE", "PREEMPTED", "PREEMPTING", "LOST POD-H", "LOST GPU-H", "RERUN P50", "NOT RERUN")]
        for q, t in body["clusterQueues"].items():
            p50 = "-" if t["rerunMedianSeconds"] is None else f"{t['rerunMedianSeconds']:g}s"
            cells.append(
                (
                    q,
                    str(t["preempted"]),
                    str(t["preempting"]),
                    f"{t['lostPodHours']:.3f}",
                    f"{t['lostGpuHours']:.3f}",
                    p50,
                    str(t["notRerun"]),
                )
            )
        lines += ["", *table(cells)]
    return "\n".join(lines)
