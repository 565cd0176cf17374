"""What `admitd simulate` prints: the JSON contract (`--json`) or a table and a summary for people.

Every string in the table is escaped for the terminal (`printable`); JSON escapes control characters itself.
"""

from __future__ import annotations

from typing import Any

from daemon.domain.durations import format_seconds
from daemon.domain.model import Millis
from daemon.manifests.fields import printable
from daemon.sim.run import SimResult
from daemon.views.jobs import JobOutcome


def _seconds(ms: Millis) -> int | float:
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


def pending_text(out: JobOutcome) -> str | None:
    """Why the job is not running at the end; None when it runs or has finished."""
    if out.running or out.finished_at is not None:
        return None
    if out.pending_reason is None:
        return "Pending: not evaluated yet when the simulation ended"
    return f"{out.pending_reason.kind.value}: {out.pending_reason.message}"


def to_json(result: SimResult) -> dict[str, Any]:
    """The contract: {"end": s, "jobs": {"ns/name": {...}}}; see README "admitd simulate"."""
    return {
        "end": _seconds(result.end),
        "jobs": {
            key: {
                "cluster_queue": out.cluster_queue,
                "admitted_at": [_seconds(t) for t in out.admitted_at],
                "evicted_at": [_seconds(t) for t in out.evicted_at],
                "finished_at": None if out.finished_at is None else _seconds(out.finished_at),
                "flavors": out.flavors,
                "counts": out.counts,
                "pending_reason": pending_text(out),
            }
            for key, out in sorted(result.jobs.items())
        },
    }


def _flavor_summary(out: JobOutcome) -> str:
    if not out.flavors:
        return "-"
    names = sorted({f for per_set in out.flavors.values() for f in per_set.values()})
    return ",".join(names)


def _partial(out: JobOutcome) -> str:
    """' (4 of 8 pods)' when the last admission was partial, per pod set when there are several."""
    assert out.counts is not None
    fewer = [(name, n, out.asked.get(name, n)) for name, n in sorted(out.counts.items()) if n < out.asked.get(name, n)]
    if not fewer:
        return ""
    if len(out.counts) == 1:
        return f" ({fewer[0][1]} of {fewer[0][2]} pods)"
    return " (" + ", ".join(f"{name}: {n} of {m} pods" for name, n, m in fewer) + ")"


def to_table(result: SimResult) -> str:
    rows: list[tuple[str, ...]] = [("JOB", "CLUSTERQUEUE", "FLAVOR", "ADMITTED", "FINISHED", "WAITED", "STATUS")]
    waits: list[Millis] = []
    for key, out in sorted(result.jobs.items(), key=lambda kv: (kv[1].created_at, kv[0])):
        first = out.admitted_at[0] if out.admitted_at else None
        waited = (first if first is not None else result.end) - out.created_at
        if first is not None:
            waits.append(waited)
        if out.finished_at is not None:
            status = "finished"
        elif out.running:
            status = "running"
        else:
            status = pending_text(out) or "pending"
        if out.counts and (out.running or out.finished_at is not None):
            status += _partial(out)
        if out.evicted_at:
            status += f" (evicted {len(out.evicted_at)}x)"
        rows.append(
            (
                key,
                out.cluster_queue or "-",
                _flavor_summary(out),
                ",".join(format_seconds(t) for t in out.admitted_at) or "-",
                "-" if out.finished_at is None else format_seconds(out.finished_at),
                format_seconds(waited) + ("" if first is not None else "+"),
                status,
            )
        )
    # Names are validated at the border; escaping here too means no input can ever reach the terminal raw.
    rows = [tuple(printable(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows]
    jobs = result.jobs.values()
    finished = sum(1 for o in jobs if o.finished_at is not None)
    running = sum(1 for o in jobs if o.running)
    pending = len(result.jobs) - finished - running
    evictions = sum(len(o.evicted_at) for o in jobs)
    mean_wait = format_seconds(sum(waits) // len(waits)) if waits else "-"
    lines += [
        "",
        f"end {format_seconds(result.end)}: {len(result.jobs)} jobs, {finished} finished, {running} running, "
        f"{pending} pending; {evictions} evictions; mean wait to first admission {mean_wait} (admitted jobs)",
        f"engine: {result.cycles} cycles, {result.decisions} decisions, {result.events} events logged, "
        f"{result.engine_seconds:.2f}s in the engine, {result.wall_seconds:.2f}s wall",
    ]
    return "\n".join(lines)
