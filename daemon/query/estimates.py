"""The last recorded estimate of a pending job's start (`workload.estimated`), as `explain` and `pending` show it.

An estimate belongs to the wait it was made in: an admission or an eviction after it ends that wait, so a job back
in its queue shows none until the daemon's next estimating round (`daemon.stages.estimate`) records one. These are
what the daemon said, read from the log; `admitd eta` computes them afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from daemon.domain import events as ev
from daemon.eventlog import LogReader
from daemon.eventlog.codec import StoredEvent, decode
from daemon.query.moment import Clock

Recorded = tuple[ev.WorkloadEstimated, int]  # the event and its seq
Estimates = Callable[[str], Recorded | None]
"""A pending job's last recorded estimate in its current wait, or None."""

ESTIMATED = ev.WorkloadEstimated.TYPE
ENDS_A_WAIT = frozenset({ev.WorkloadAdmitted.TYPE, ev.WorkloadEvicted.TYPE})


def last_estimate(rows: Iterable[StoredEvent]) -> Recorded | None:
    """Of a job's own events in log order: its last `workload.estimated` since its wait began."""
    got: StoredEvent | None = None
    for row in rows:
        if row.type == ESTIMATED:
            got = row
        elif row.type in ENDS_A_WAIT:
            got = None
    if got is None:
        return None
    event = decode(got.type, got.version, got.payload, seq=got.seq)
    assert isinstance(event, ev.WorkloadEstimated)
    return event, got.seq


def pending_estimates(reader: LogReader, upto: int) -> Estimates:
    """One read of the job's own events through the subject index per row (as `listing.pending_seqs`)."""
    return lambda key: last_estimate(reader.events_of(f"job/{key}", upto))


def estimate_json(got: Recorded | None, clock: Clock) -> dict[str, Any] | None:
    if got is None:
        return None
    e, seq = got
    return {
        "seq": seq,
        "made_at": clock.show(e.at),
        "inputs_seq": e.inputs,
        "p10": clock.show(e.p10),
        "p50": clock.show(e.p50),
        "p90": clock.show(e.p90),
    }


def estimate_text(shown: dict[str, Any] | None) -> str:
    if shown is None:
        return "-"
    return f"{shown['p50'] or 'unknown'} (p90 {shown['p90'] or 'unknown'})"
