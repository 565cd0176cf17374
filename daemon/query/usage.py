"""`admitd usage`: GPU-hours, pod-hours and every resource's hours used per ClusterQueue, LocalQueue or namespace
over a window of the log, and per ClusterQueue what it borrowed and lent (`daemon.views.usage` says how each is
counted). The window runs from `--since` to the log's last event; the state at its start comes from the nearest
snapshot, so a window's cost is the events in it.
"""

from __future__ import annotations

from typing import Any

from daemon.domain.state import State
from daemon.eventlog import LogReader
from daemon.query.ledger import GPU_RESOURCES, MS_PER_HOUR, table
from daemon.query.moment import Clock, state_at
from daemon.views.follow import Following
from daemon.views.usage import Acc, Usage, flatten, nest

GROUPINGS = ("clusterqueue", "localqueue", "namespace")


def usage_since(reader: LogReader, start_ms: int) -> Usage:
    seq = reader.seq_at(start_ms - 1)
    state = state_at(reader, seq) if seq > 0 else State(pending_indexes=False)
    usage = Usage(state, start_ms)
    Following(state, (usage,)).follow(reader)
    return usage


def _hours(acc: Acc) -> dict[str, float]:
    return {r: round(v / 1000 / MS_PER_HOUR, 4) for r, v in sorted(acc.items()) if v}


def _gpu(acc: Acc) -> float:
    return round(sum(acc.get(r, 0) for r in GPU_RESOURCES) / 1000 / MS_PER_HOUR, 4)


def usage_json(reader: LogReader, clock: Clock, *, start_ms: int, by: str = "clusterqueue") -> dict[str, Any]:
    t = usage_since(reader, start_ms).totals(clock.last_ms)
    return usage_body(t, clock, start_ms=start_ms, until_ms=clock.last_ms, by=by)


def usage_body(totals: dict[str, object], clock: Clock, *, start_ms: int, until_ms: int, by: str) -> dict[str, Any]:
    """The answer from `Usage.totals`' figures of the window (a group whose every figure is zero is left out)."""
    if by not in GROUPINGS:
        raise ValueError(by)
    t = nest(flatten(totals))
    used: dict[str, Acc] = t["used"][by]  # type: ignore[index]
    pod_ms: dict[str, int] = t["pod_ms"][by]  # type: ignore[index]
    borrowed: dict[str, Acc] = t["borrowed"]  # type: ignore[assignment]
    lent: dict[str, Acc] = t["lent"]  # type: ignore[assignment]
    groups = sorted(set(used) | set(pod_ms) | (set(borrowed) | set(lent) if by == "clusterqueue" else set()))
    rows: dict[str, Any] = {}
    for g in groups:
        row: dict[str, Any] = {
            "gpuHours": _gpu(used.get(g, {})),
            "podHours": round(pod_ms.get(g, 0) / MS_PER_HOUR, 4),
            "used": _hours(used.get(g, {})),
        }
        if by == "clusterqueue":
            row["borrowed"] = _hours(borrowed.get(g, {}))
            row["lent"] = _hours(lent.get(g, {}))
            row["borrowedGpuHours"] = _gpu(borrowed.get(g, {}))
            row["lentGpuHours"] = _gpu(lent.get(g, {}))
        rows[g] = row
    return {
        "since": clock.show(start_ms),
        "until": clock.show(until_ms),
        "clock": clock.kind,
        "by": by,
        "usage": rows,
    }


def usage_text(body: dict[str, Any]) -> str:
    by = body["by"]
    resources = sorted({r for row in body["usage"].values() for r in row["used"]} - set(GPU_RESOURCES))
    head: tuple[str, ...] = (by.upper(), "GPU-H", "POD-H", *(f"{r} H" for r in resources))
    if by == "clusterqueue":
        head += ("BORROWED GPU-H", "LENT GPU-H")
    cells = [head]
    for g, row in body["usage"].items():
        line: tuple[str, ...] = (
            g,
            f"{row['gpuHours']:.3f}",
            f"{row['podHours']:.3f}",
            *(f"{row['used'].get(r, 0):.3f}" for r in resources),
        )
        if by == "clusterqueue":
            line += (f"{row['borrowedGpuHours']:.3f}", f"{row['lentGpuHours']:.3f}")
        cells.append(line)
    return "\n".join([f"usage by {by} from {body['since']} to {body['until']}, in hours", *table(cells)])
