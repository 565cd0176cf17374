"""What `admitd simulate --from-log` prints: the JSON contract (`--json`) or tables for people.

Times are seconds from the recording's origin (README, "What-if on a recorded log"); a delta is what-if minus
recorded, so a negative wait delta means the job would have started sooner.
"""

from __future__ import annotations

from typing import Any

from daemon.domain.durations import format_seconds
from daemon.domain.model import Millis
from daemon.manifests.fields import printable
from daemon.sim.whatif import Figures, GroupDiff, JobDiff, Side, WhatIf


def _s(ms: Millis | None) -> int | float | None:
    if ms is None:
        return None
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


def _side_json(side: Side) -> dict[str, Any]:
    return {
        "cluster_queue": side.cluster_queue,
        "admitted_at": [_s(t) for t in side.admitted_at],
        "finished_at": _s(side.finished_at),
        "wait": _s(side.wait),
    }


def _job_json(j: JobDiff) -> dict[str, Any]:
    return {
        "arrival": _s(j.arrival),
        "runtime": _s(j.runtime),
        "recorded": _side_json(j.recorded),
        "what_if": _side_json(j.what_if),
        "wait_delta": _s(j.wait_delta),
        "finish_delta": _s(j.finish_delta),
    }


def _figures_json(f: Figures) -> dict[str, Any]:
    return {
        "admitted": f.admitted,
        "waits_cut_at_end": f.censored,
        "mean_wait": _s(f.mean_wait),
        "max_wait": _s(f.max_wait),
        "makespan": _s(f.makespan),
    }


def _group_json(g: GroupDiff) -> dict[str, Any]:
    return {
        "jobs": g.jobs,
        "recorded": _figures_json(g.recorded),
        "what_if": _figures_json(g.what_if),
        "mean_wait_delta": _s(g.mean_wait_delta),
        "max_wait_delta": _s(g.max_wait_delta),
        "makespan_delta": _s(g.makespan_delta),
    }


def to_json(w: WhatIf) -> dict[str, Any]:
    """The contract; see README "What-if on a recorded log"."""
    rec = w.recording
    return {
        "log": rec.source,
        "origin_ms": rec.origin,
        "virtual": rec.virtual,
        "changed": [f"{kind}/{name}" for kind, name in w.changed],
        "recorded_end": _s(rec.end),
        "what_if_end": _s(w.what_if_end),
        "left_out": list(rec.left_out),
        "total": _group_json(w.total),
        "queues": {g.name: _group_json(g) for g in w.queues},
        "jobs": {j.key: _job_json(j) for j in w.jobs},
    }


def _t(ms: Millis | None) -> str:
    return "-" if ms is None else format_seconds(ms)


def _delta(ms: Millis | None) -> str:
    if ms is None:
        return "-"
    return ("-" if ms < 0 else "+" if ms > 0 else "") + format_seconds(abs(ms))


def _wait(f: Figures, ms: Millis | None) -> str:
    if ms is None:
        return "-"
    return format_seconds(ms) + ("+" if f.censored else "")  # a lower bound: a job started only in the other run


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    rows = [tuple(printable(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def to_table(w: WhatIf) -> str:
    rec = w.recording
    changed = ", ".join(f"{kind} {name}" for kind, name in w.changed) or "nothing (a replay of the recording)"
    lines = [
        f"what-if on {rec.source}: {len(w.jobs)} jobs; changed: {changed}",
        f"recorded end {format_seconds(rec.end)}, what-if end {format_seconds(w.what_if_end)}"
        + ("" if rec.virtual else f" (times from the origin, {rec.origin} ms since the epoch)"),
        "",
    ]
    heading = ("CLUSTERQUEUE", "JOBS", "MEAN WAIT", "WHAT-IF", "DELTA", "MAX WAIT", "WHAT-IF", "DELTA")
    queue_rows: list[tuple[str, ...]] = [(*heading, "MAKESPAN", "WHAT-IF", "DELTA")]
    for g in (*w.queues, w.total):
        queue_rows.append(
            (
                "(all)" if g is w.total else g.name,
                str(g.jobs),
                _wait(g.recorded, g.recorded.mean_wait),
                _wait(g.what_if, g.what_if.mean_wait),
                _delta(g.mean_wait_delta),
                _wait(g.recorded, g.recorded.max_wait),
                _wait(g.what_if, g.what_if.max_wait),
                _delta(g.max_wait_delta),
                _t(g.recorded.makespan),
                _t(g.what_if.makespan),
                _delta(g.makespan_delta),
            )
        )
    lines += _table(queue_rows)
    lines.append("")
    job_rows: list[tuple[str, ...]] = [
        ("JOB", "CLUSTERQUEUE", "ARRIVED", "RUNTIME", "WAITED", "WHAT-IF", "DELTA", "FINISHED", "WHAT-IF", "DELTA")
    ]
    for j in w.jobs:
        queue = j.recorded.cluster_queue or j.what_if.cluster_queue or "-"
        if j.what_if.cluster_queue not in (None, queue):
            queue += f" -> {j.what_if.cluster_queue}"
        job_rows.append(
            (
                j.key,
                queue,
                format_seconds(j.arrival),
                "unknown" if j.runtime is None else format_seconds(j.runtime),
                "never" if j.recorded.wait is None else format_seconds(j.recorded.wait),
                "never" if j.what_if.wait is None else format_seconds(j.what_if.wait),
                _delta(j.wait_delta),
                _t(j.recorded.finished_at),
                _t(j.what_if.finished_at),
                _delta(j.finish_delta),
            )
        )
    lines += _table(job_rows)
    sooner = sum(1 for j in w.jobs if (j.wait_delta or 0) < 0)
    later = sum(1 for j in w.jobs if (j.wait_delta or 0) > 0)
    unknown = sum(1 for j in w.jobs if j.runtime is None)
    lines += [
        "",
        f"{sooner} jobs would have started sooner, {later} later; {unknown} of unknown runtime (they run to the "
        "end once admitted). DELTA is what-if minus recorded; a wait with + is a lower bound (a job admitted in only "
        "one run counts in the other until that run's end); jobs admitted in neither run are left out of the waits",
    ]
    if rec.left_out:
        lines.append(f"{len(rec.left_out)} jobs deleted before they were admitted are left out")
    return "\n".join(lines)
