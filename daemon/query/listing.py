"""`admitd queues`, `admitd pending` and `admitd replay`: views of the whole state at one moment."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from daemon.domain import events as ev
from daemon.domain.model import Milli
from daemon.domain.reasons import quota_reserved_reason
from daemon.domain.state import State
from daemon.eventlog import LogReader
from daemon.query.estimates import Estimates, estimate_json, estimate_text
from daemon.query.history import q
from daemon.query.moment import Clock, Moment, QueryError, partial_state_at
from daemon.query.quota import QueueRow, queues, requests_of


def _q(v: Milli | None, res: str) -> str | None:
    return None if v is None else q(v, res)


def queues_json(
    state: State, clock: Clock, moment: Moment, pending_counts: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """`pending_counts`: see `quota.queues` (a `PartialState`'s)."""
    return {
        "clock": clock.kind,
        "at": {"seq": moment.seq, "time": clock.show(moment.recorded_at)},
        "cluster_queues": [_queue_json(r) for r in queues(state, pending_counts=pending_counts)],
    }


def _queue_json(r: QueueRow) -> dict[str, Any]:
    return {
        "name": r.name,
        "cohort": r.cohort,
        "status": r.status,
        "status_message": r.status_message,
        "pending": r.pending,
        "admitted": r.admitted,
        "resources": [
            {
                "flavor": f.flavor,
                "resource": f.resource,
                "nominal": q(f.nominal, f.resource),
                "borrowing_limit": _q(f.borrowing_limit, f.resource),
                "lending_limit": _q(f.lending_limit, f.resource),
                "used": q(f.used, f.resource),
                "borrowed": q(f.borrowed, f.resource),
                "lent": q(f.lent, f.resource),
            }
            for f in r.resources
        ],
    }


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def queues_text(state: State, clock: Clock, moment: Moment, pending_counts: Mapping[str, int] | None = None) -> str:
    rows: list[tuple[str, ...]] = [
        (
            "CLUSTERQUEUE",
            "COHORT",
            "STATUS",
            "PENDING",
            "ADMITTED",
            "FLAVOR/RESOURCE",
            "NOMINAL",
            "BORROW-LIMIT",
            "USED",
            "BORROWED",
            "LENT",
        )
    ]
    for r in queues(state, pending_counts=pending_counts):
        lead = (r.name, r.cohort or "-", r.status, str(r.pending), str(r.admitted))
        if not r.resources:
            rows.append((*lead, "-", "-", "-", "-", "-", "-"))
        for i, f in enumerate(r.resources):
            if i:
                lead = ("",) * 5
            rows.append(
                (
                    *lead,
                    f"{f.flavor}/{f.resource}",
                    q(f.nominal, f.resource),
                    "-" if f.borrowing_limit is None else q(f.borrowing_limit, f.resource),
                    q(f.used, f.resource),
                    q(f.borrowed, f.resource),
                    q(f.lent, f.resource),
                )
            )
    head = f"as of {clock.show(moment.recorded_at)} (seq {moment.seq})"
    return "\n".join([head, *_table(rows)])


Seqs = Callable[[str], tuple[int | None, int | None]]
"""A pending job's `(queued_seq, reason_seq)`: the events its row rests on (see `pending_seqs`)."""


def pending_seqs(reader: LogReader, upto: int) -> Seqs:
    """For a pending job at seq `upto`: the event that put it in its queue (its observation, or its latest eviction)
    and the engine's latest verdict on it since then (`workload.pending`, None when no cycle evaluated it yet). One
    read of the job's own events through the subject index per row."""
    observed, evicted, pending = ev.JobObserved.TYPE, ev.WorkloadEvicted.TYPE, ev.WorkloadPending.TYPE

    def seqs(key: str) -> tuple[int | None, int | None]:
        queued: int | None = None
        reason: int | None = None
        for row in reader.events_of(f"job/{key}", upto):
            if row.type == evicted or (row.type == observed and queued is None):
                queued, reason = row.seq, None
            elif row.type == pending:
                reason = row.seq
        return queued, reason

    return seqs


def pending_entries(
    state: State,
    clock: Clock,
    queue: str | None,
    seqs: Seqs | None = None,
    limit: int | None = None,
    estimates: Estimates | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Pending workloads per ClusterQueue in admission order; `queue` is a ClusterQueue or a LocalQueue ns/name.
    With `seqs`, each row names the seqs it rests on (`queued_seq`, `reason_seq`). `limit`: at most that many rows
    per ClusterQueue, the first ones (the web view's page of a deep queue; the rest are not built). With
    `estimates`, each row has its last recorded start estimate (`estimate`, None when there is none)."""
    view = state.view()
    lq_filter: str | None = None
    if queue is None:
        cqs = sorted(view.pending_by_cq)
    elif queue in view.cluster_queues:
        cqs = [queue] if queue in view.pending_by_cq else []
    elif queue in view.local_queues:
        lq_filter = queue
        target = view.local_queues[queue].cluster_queue
        cqs = [target] if target in view.pending_by_cq else []
    else:
        raise QueryError(f"no ClusterQueue or LocalQueue {queue!r} at this moment (a LocalQueue is NAMESPACE/NAME)")
    out: dict[str, list[dict[str, Any]]] = {}
    for cq in cqs:
        rows: list[dict[str, Any]] = []
        per_lq: dict[str, int] = {}
        for pos, p in enumerate(view.pending_by_cq[cq]):
            lq_pos = per_lq.get(p.local_queue, 0)
            per_lq[p.local_queue] = lq_pos + 1
            if lq_filter is not None and p.local_queue != lq_filter:
                continue
            if limit is not None and len(rows) >= limit:
                break
            reason = p.last_reason
            queued_seq, reason_seq = seqs(p.key) if seqs is not None else (None, None)
            rows.append(
                {
                    "position": pos,
                    "local_queue_position": lq_pos,
                    "job": p.key,
                    "local_queue": p.local_queue,
                    "priority": p.priority,
                    "queued_at": clock.show(p.queue_order_at),
                    "requests": {r: q(v, r) for r, v in sorted(requests_of(p.workload).items())},
                    "reason": None if reason is None else reason.kind.value,
                    "message": None if reason is None else reason.message,
                    "kueue_reason": quota_reserved_reason(None if reason is None else reason.kind),
                    "queued_seq": queued_seq,
                    "reason_seq": reason_seq if reason is not None else None,
                    "estimate": estimate_json(estimates(p.key), clock) if estimates is not None else None,
                }
            )
        out[cq] = rows
    return out


def unrouted_entries(state: State, clock: Clock, seqs: Seqs | None = None) -> list[dict[str, Any]]:
    view = state.view()
    return [
        {
            "job": p.key,
            "local_queue": p.local_queue,
            "priority": p.priority,
            "queued_at": clock.show(p.queue_order_at),
            "reason": None if p.last_reason is None else p.last_reason.kind.value,
            "message": None if p.last_reason is None else p.last_reason.message,
            "kueue_reason": quota_reserved_reason(None if p.last_reason is None else p.last_reason.kind),
            **_seq_fields(seqs, p.key, p.last_reason is not None),
        }
        for _, p in sorted(view.pending_unrouted.items())
    ]


def _seq_fields(seqs: Seqs | None, key: str, has_reason: bool) -> dict[str, int | None]:
    queued, reason = seqs(key) if seqs is not None else (None, None)
    return {"queued_seq": queued, "reason_seq": reason if has_reason else None}


def pending_json(
    state: State,
    clock: Clock,
    moment: Moment,
    queue: str | None,
    seqs: Seqs | None = None,
    estimates: Estimates | None = None,
) -> dict[str, Any]:
    return {
        "clock": clock.kind,
        "at": {"seq": moment.seq, "time": clock.show(moment.recorded_at)},
        "cluster_queues": pending_entries(state, clock, queue, seqs, estimates=estimates),
        "unrouted": unrouted_entries(state, clock, seqs) if queue is None else [],
    }


def pending_text(
    state: State,
    clock: Clock,
    moment: Moment,
    queue: str | None,
    seqs: Seqs | None = None,
    estimates: Estimates | None = None,
) -> str:
    body = pending_json(state, clock, moment, queue, seqs, estimates)
    lines = [f"as of {clock.show(moment.recorded_at)} (seq {moment.seq})"]
    rows: list[tuple[str, ...]] = [
        ("CLUSTERQUEUE", "POS", "LQ-POS", "JOB", "LOCALQUEUE", "PRIO", "QUEUED", "SEQ", "EST. START", "REASON")
    ]
    for cq, entries in body["cluster_queues"].items():
        for e in entries:
            rows.append(
                (
                    cq,
                    str(e["position"]),
                    str(e["local_queue_position"]),
                    e["job"],
                    e["local_queue"],
                    str(e["priority"]),
                    e["queued_at"],
                    _seq_text(e),
                    estimate_text(e["estimate"]),
                    (e["message"] and f"{e['reason']}: {e['message']}") or "-",
                )
            )
    for e in body["unrouted"]:
        rows.append(
            (
                "-",
                "-",
                "-",
                e["job"],
                e["local_queue"] or "-",
                str(e["priority"]),
                e["queued_at"],
                _seq_text(e),
                "-",
                (e["message"] and f"{e['reason']}: {e['message']}") or "-",
            )
        )
    if len(rows) == 1:
        lines.append("no pending workloads")
    else:
        lines += _table(rows)
    return "\n".join(lines)


def _seq_text(e: dict[str, Any]) -> str:
    """`queued/reason` seqs of a row, e.g. `12/15`, `12/-` before any cycle evaluated it, `-` without seqs."""
    if e["queued_seq"] is None:
        return "-"
    return f"{e['queued_seq']}/{e['reason_seq'] if e['reason_seq'] is not None else '-'}"


def replay_json(state: State, clock: Clock, moment: Moment) -> dict[str, Any]:
    """The whole folded state (`StateSnapshot`, the shape snapshots store) with the moment it is for."""
    return {
        "clock": clock.kind,
        "at": {"seq": moment.seq, "time": clock.show(moment.recorded_at)},
        "state": state.to_snapshot(),
    }


def queues_at(reader: LogReader, seq: int) -> tuple[State, Mapping[str, int] | None]:
    """What `queues_json`/`queues_text` read at `seq`: a partial state (the admitted workloads and those the tail
    touched; `moment.partial_state_at`) with every queue's pending count, or, when that cannot be built, the whole
    state (counts None: counted in it)."""
    got = partial_state_at(reader, seq)
    return got.state, got.pending_counts
