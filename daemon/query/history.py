"""`admitd history NS/JOB`: one job's timeline from its own events (the log's subject index, no replay).

Waiting is the time between being queued (observed, or evicted back to the queue) and the next admission; running
is admission to eviction or finish. An open interval runs to `until` (the log's end, or the moment asked about).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.domain import events as ev
from daemon.domain.durations import format_seconds
from daemon.domain.model import Milli
from daemon.domain.quantity import format_quantity
from daemon.eventlog import LogReader, codec
from daemon.eventlog.codec import StoredEvent
from daemon.query.moment import Clock, QueryError


@dataclass(slots=True)
class Entry:
    seq: int
    recorded_at: int
    kind: str  # observed | updated | rejected | pending | admitted | preempted | evicted | finished | deleted | ...
    text: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class History:
    job: str
    entries: list[Entry]
    waiting_ms: int
    running_ms: int
    admissions: int
    preemptions: int
    status: str  # pending | running | finished | deleted | rejected


def job_subject(key: str) -> str:
    return f"job/{key}"


def check_key(key: str) -> str:
    parts = key.split("/")
    if len(parts) != 2 or not all(parts):
        raise QueryError(f"{key!r}: expected NAMESPACE/JOB, e.g. research/train-a")
    return key


def job_events(reader: LogReader, key: str, upto: int | None = None) -> list[tuple[StoredEvent, ev.Event]]:
    """The job's events (decoded), oldest first; QueryError when the log has never heard of it."""
    rows = reader.events_of(job_subject(check_key(key)), upto)
    if not rows and (upto is None or not reader.events_of(job_subject(key))):
        raise QueryError(f"no job {key} in the log {reader.path} (names are NAMESPACE/JOB, as in kubectl)")
    return [(r, codec.decode(r.type, r.version, r.payload, seq=r.seq)) for r in rows]


def amounts(items: Any) -> list[dict[str, str]]:
    """`Freed`/`Borrowed` tuples as `{"flavor", "resource", "amount"}` with Kubernetes quantity strings."""
    return [
        {"flavor": i.flavor, "resource": i.resource, "amount": format_quantity(i.amount, i.resource)} for i in items
    ]


def q(milli: Milli, resource: str) -> str:
    return format_quantity(milli, resource)


def history(reader: LogReader, key: str, clock: Clock, until: int | None = None) -> History:
    until_ms = clock.last_ms if until is None else until
    entries: list[Entry] = []
    waiting = running = admissions = preemptions = 0
    queued_since: int | None = None
    running_since: int | None = None
    status = "pending"
    seen = False
    last_reason: tuple[object, ...] | None = None
    for row, event in job_events(reader, key):
        t = row.recorded_at
        match event:
            case ev.JobObserved(workload=wl):
                if not seen:
                    seen, queued_since, status = True, t, "pending"
                    lq = f"{wl.namespace}/{wl.queue_name}" if wl.queue_name else None
                    entries.append(
                        Entry(
                            row.seq,
                            t,
                            "observed",
                            f"observed; LocalQueue {lq or '(none: not managed)'}"
                            + (f", priority class {wl.priority_class}" if wl.priority_class else ""),
                            {
                                "local_queue": lq,
                                "priority_class": wl.priority_class,
                                "created_at": clock.show(wl.created_at),
                            },
                        )
                    )
                else:
                    entries.append(Entry(row.seq, t, "updated", "observed again (spec changed while pending)", {}))
            case ev.ObjectRejected(errors=errors):
                status = "rejected"
                entries.append(
                    Entry(row.seq, t, "rejected", "rejected: " + "; ".join(errors), {"errors": list(errors)})
                )
            case ev.WorkloadPending(reason=reason, cluster_queue=cq):
                this = (
                    reason.kind,
                    reason.blocked_by,
                    tuple((s.flavor, s.resource, s.requested) for s in reason.shortages),
                )
                if this == last_reason:
                    continue
                last_reason = this
                entries.append(
                    Entry(
                        row.seq,
                        t,
                        "pending",
                        f"pending: {reason.kind.value}: {reason.message}",
                        {"cluster_queue": cq, "reason": reason.kind.value, "message": reason.message},
                    )
                )
            case ev.WorkloadAdmitted(admission=adm, borrowed=borrowed):
                admissions += 1
                if queued_since is not None:
                    waiting += t - queued_since
                queued_since, running_since, status, last_reason = None, t, "running", None
                flavors = {ps.name: dict(ps.flavors) for ps in adm.pod_sets}
                fl = "; ".join(
                    (f"{ps.name}: " if len(adm.pod_sets) > 1 else "")
                    + ", ".join(sorted({f"{r} in {f}" for r, f in ps.flavors.items()}))
                    for ps in adm.pod_sets
                )
                text = f"admitted to ClusterQueue {adm.cluster_queue} ({fl})"
                if borrowed:
                    text += "; borrowing " + ", ".join(
                        f"{q(b.amount, b.resource)} {b.resource} in {b.flavor} from cohort {b.cohort}" for b in borrowed
                    )
                if admissions > 1:
                    text = "re" + text
                entries.append(
                    Entry(
                        row.seq,
                        t,
                        "admitted",
                        text,
                        {"cluster_queue": adm.cluster_queue, "flavors": flavors, "borrowed": amounts(borrowed)},
                    )
                )
            case ev.WorkloadPreempted(
                preemptor=by, preemptor_cluster_queue=by_cq, reason=why, policy=policy, freed=freed
            ):
                preemptions += 1
                who = (
                    f"by {by} (ClusterQueue {by_cq})"
                    if by
                    else "for its Workload's spec.active: false"
                    if why == "Deactivated"
                    else "by its queue's stop policy (drained)"
                )
                entries.append(
                    Entry(
                        row.seq,
                        t,
                        "preempted",
                        f"preempted {who}: {why}, allowed by {policy}",
                        {
                            "preemptor": by,
                            "preemptor_cluster_queue": by_cq,
                            "reason": why,
                            "policy": policy,
                            "freed": amounts(freed),
                        },
                    )
                )
            case ev.WorkloadEvicted(reason=why):
                if running_since is not None:
                    running += t - running_since
                running_since, queued_since, status = None, t, "pending"
                then = (
                    "deactivated, not requeued"
                    if why == "InactiveWorkload"
                    else "held out of its queue while deactivated"
                    if why == "Deactivated"
                    else "back in its queue"
                )
                entries.append(Entry(row.seq, t, "evicted", f"evicted ({why}); {then}", {"reason": why}))
            case ev.JobFinished(succeeded=ok):
                if running_since is not None:
                    running += t - running_since
                running_since = queued_since = None
                status = "finished"
                entries.append(
                    Entry(row.seq, t, "finished", "finished" + ("" if ok else " (failed)"), {"succeeded": ok})
                )
            case ev.JobDeleted():
                if running_since is not None:
                    running += t - running_since
                if queued_since is not None:
                    waiting += t - queued_since
                running_since = queued_since = None
                status = "deleted"
                entries.append(Entry(row.seq, t, "deleted", "deleted", {}))
            case ev.JobUnsuspended():
                entries.append(Entry(row.seq, t, "unsuspended", "unsuspended in the cluster", {}))
            case ev.JobSuspended():
                entries.append(Entry(row.seq, t, "suspended", "suspended in the cluster", {}))
            case ev.ActuationFailed(error=error, permanent=permanent):
                kind = "permanent" if permanent else "temporary"
                entries.append(
                    Entry(
                        row.seq,
                        t,
                        "actuation-failed",
                        f"actuation failed ({kind}): {error}",
                        {"error": error, "permanent": permanent},
                    )
                )
            case ev.JobReady():
                entries.append(Entry(row.seq, t, "ready", "its pods are all ready (PodsReady)", {}))
            case ev.JobPodsNotCreated(message=message):
                text = f"the Job controller cannot create its pods (FailedCreate): {message}"
                entries.append(Entry(row.seq, t, "pods-not-created", text, {"message": message}))
            case ev.WorkloadTimedOut() as timed_out:
                entries.append(
                    Entry(row.seq, t, "timed-out", timed_out_text(timed_out, clock), timed_out_detail(timed_out, clock))
                )
            case ev.WorkloadRequeued():
                entries.append(Entry(row.seq, t, "requeued", "backoff over: back in its queue", {}))
            case ev.WorkloadActiveChanged(active=active):
                text = (
                    "reactivated (spec.active: true): back in its queue"
                    if active
                    else "deactivated (spec.active: false): stopped if running, held out of its queue"
                )
                entries.append(Entry(row.seq, t, "reactivated" if active else "deactivated", text, {}))
            case ev.WorkloadEstimated(p10=p10, p50=p50, p90=p90, inputs=inputs):
                shown = {k: clock.show(v) for k, v in (("p10", p10), ("p50", p50), ("p90", p90))}
                text = f"estimated start: p50 {shown['p50'] or 'unknown'}, p90 {shown['p90'] or 'unknown'}"
                entries.append(Entry(row.seq, t, "estimated", text, {**shown, "inputs": inputs}))
            case ev.JobTampered(what=what, detail=detail, manager=manager, claimed_cluster_queue=claimed):
                by = f" (changed by {manager})" if manager else ""
                entries.append(
                    Entry(
                        row.seq,
                        t,
                        "tampered",
                        f"security: {what}: {detail}{by}; the leader suspends it and it holds no quota",
                        {"what": what, "detail": detail, "manager": manager, "claimed_cluster_queue": claimed},
                    )
                )
            case _:
                entries.append(Entry(row.seq, t, row.type, row.type, {}))
    if queued_since is not None:
        waiting += max(0, until_ms - queued_since)
    if running_since is not None:
        running += max(0, until_ms - running_since)
    return History(key, entries, waiting, running, admissions, preemptions, status)


def timed_out_text(e: ev.WorkloadTimedOut, clock: Clock) -> str:
    """A PodsReadyTimeout eviction in a sentence (history and explain)."""
    seconds = e.timeout / 1000
    head = f"{e.reason}: its pods were not all ready {seconds:g}s after its admission (waitForPodsReady), so it stops"
    if e.deactivated:
        return f"{head}; timeout {e.timeouts} exceeds backoffLimitCount, so it is deactivated and stays suspended"
    return f"{head}; timeout {e.timeouts}, back in its queue at {clock.show(e.requeue_at)} after its backoff"


def timed_out_detail(e: ev.WorkloadTimedOut, clock: Clock) -> dict[str, Any]:
    return {
        "reason": e.reason,
        "timeout_seconds": e.timeout / 1000,
        "timeouts": e.timeouts,
        "requeue_at": None if e.requeue_at is None else clock.show(e.requeue_at),
        "deactivated": e.deactivated,
    }


def to_json(h: History, clock: Clock) -> dict[str, Any]:
    return {
        "clock": clock.kind,
        "job": h.job,
        "status": h.status,
        "waiting_seconds": h.waiting_ms / 1000,
        "running_seconds": h.running_ms / 1000,
        "admissions": h.admissions,
        "preemptions": h.preemptions,
        "events": [
            {"seq": e.seq, "time": clock.show(e.recorded_at), "kind": e.kind, "text": e.text, **e.detail}
            for e in h.entries
        ],
    }


def to_text(h: History, clock: Clock) -> str:
    width = max((len(clock.show(e.recorded_at) or "") for e in h.entries), default=4)
    lines = [f"{h.job}: {h.status}"]
    for e in h.entries:
        lines.append(f"  {clock.show(e.recorded_at):<{width}}  seq {e.seq:<8} {e.text}")
    lines.append(
        f"waited {format_seconds(h.waiting_ms)}, ran {format_seconds(h.running_ms)}; "
        f"{h.admissions} admission(s), {h.preemptions} preemption(s)"
    )
    return "\n".join(lines)
