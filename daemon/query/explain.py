"""`admitd explain NS/JOB [--at TIME]`: a job's state at a moment in plain language, each statement with the seq of
the event it rests on.

Built from two reads: the job's own events (subject index) and the state at the moment (nearest snapshot + tail).
Quota figures ("8 in use of a nominal 8") rest on the state after the moment's seq; the engine's own verdict rests
on the job's last `workload.pending` event, whose numbers are those of the cycle that wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from daemon.domain import events as ev
from daemon.domain.model import FlavorResource, Milli, PendingReasonKind, selects
from daemon.domain.quota import QuotaTree
from daemon.domain.reasons import quota_reserved_reason
from daemon.domain.state import Phase, State, WorkloadRecord
from daemon.eventlog import LogReader
from daemon.eventlog.codec import StoredEvent
from daemon.query.estimates import estimate_json, last_estimate
from daemon.query.history import amounts, job_events, q, timed_out_detail, timed_out_text
from daemon.query.moment import Clock, Moment, QueryError, partial_state_at, state_at
from daemon.query.quota import FlavorFit, flavor_analysis, in_tree, loaded_tree, requests_of

AHEAD_SHOWN = 10
HOLDERS_SHOWN = 5

NEVER = (PendingReasonKind.EXCEEDS_MAX_QUOTA, PendingReasonKind.NO_MATCHING_FLAVOR)
CONFIG = (
    PendingReasonKind.LOCAL_QUEUE_NOT_FOUND,
    PendingReasonKind.CLUSTER_QUEUE_NOT_FOUND,
    PendingReasonKind.NAMESPACE_NOT_SELECTED,
    PendingReasonKind.QUEUE_STOPPED,
    PendingReasonKind.CLUSTER_QUEUE_INACTIVE,
)


@dataclass(slots=True)
class Explanation:
    job: str
    moment: Moment
    status: str  # pending | admitted | preempted-stopping | finished | deleted | rejected
    verdict: str | None = None  # pending only: waiting | never-fits | blocked-by-configuration | not-evaluated
    statements: list[tuple[str, int]] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)

    def say(self, text: str, seq: int) -> None:
        self.statements.append((text, seq))


def _last(rows: list[tuple[StoredEvent, ev.Event]], kind: type[Any]) -> tuple[StoredEvent, Any] | None:
    for row, event in reversed(rows):
        if isinstance(event, kind):
            return row, event
    return None


def _config_seq(reader: LogReader, subject: str, upto: int) -> int | None:
    rows = reader.events_of(subject, upto)
    return rows[-1].seq if rows else None


def _fmt_requests(requests: dict[str, Milli]) -> str:
    return ", ".join(f"{q(v, r)} {r}" for r, v in sorted(requests.items())) or "nothing"


def explain(reader: LogReader, clock: Clock, key: str, moment: Moment, *, state: State | None = None) -> Explanation:
    """`state`: the state after `moment.seq` when the caller holds it (a daemon's live fold); else built here."""
    rows = job_events(reader, key, moment.seq)
    if not rows:
        first = reader.events_of(f"job/{key}")[0]
        raise QueryError(
            f"{key} had not been seen yet at {clock.show(moment.recorded_at)} (seq {moment.seq}); "
            f"it first appears at seq {first.seq}, {clock.show(first.recorded_at)}"
        )
    if state is None:
        state = _state_for(reader, key, rows, moment.seq)
    x = Explanation(job=key, moment=moment, status="pending")
    observed = next(((r, e) for r, e in rows if isinstance(e, ev.JobObserved)), None)
    if observed is not None:
        wl = observed[1].workload
        x.say(
            f"observed at {clock.show(observed[0].recorded_at)} in LocalQueue {wl.namespace}/{wl.queue_name}",
            observed[0].seq,
        )
        x.body["observed"] = {"seq": observed[0].seq, "time": clock.show(observed[0].recorded_at)}
    _preemptions(x, rows, clock)
    _timeouts(x, rows, clock)
    rec = state.workloads.get(key)
    if rec is None:
        _gone(x, rows, state, clock, key)
    elif rec.phase is Phase.ADMITTED:
        _admitted(x, rows, rec, clock)
    else:
        _pending(x, reader, rows, state, rec, clock)
    return x


def _state_for(reader: LogReader, key: str, rows: list[tuple[StoredEvent, ev.Event]], seq: int) -> State:
    """The state `explain` reads at `seq`: a partial one (`partial_state_at`) holding the job, every admitted
    workload (the quota figures, the holders) and every workload pending in the ClusterQueues the job's LocalQueues
    point at (its position and what is ahead: exact there); the whole state when that cannot be built
    (`partial_state_at` gives it then).

    The job's record holds the workload of one of its `job.observed` events (`rows`), so its LocalQueue is one of
    theirs; checked after the fold all the same (the whole state if its queue's pending list was not loaded)."""
    local_queues = {f"{e.workload.namespace}/{e.workload.queue_name}" for _, e in rows if isinstance(e, ev.JobObserved)}
    partial = partial_state_at(reader, seq, keys=(key,), local_queues=local_queues)
    state = partial.state
    if partial.partial:
        rec = state.workloads.get(key)
        if rec is None or rec.phase is not Phase.PENDING:
            return state
        lq = state.local_queues.get(f"{rec.workload.namespace}/{rec.workload.queue_name}")
        if lq is None or lq.cluster_queue not in state.cluster_queues or lq.cluster_queue in partial.whole_queues:
            return state
        return state_at(reader, seq)
    return state


def _preemptions(x: Explanation, rows: list[tuple[StoredEvent, ev.Event]], clock: Clock) -> None:
    out = []
    for row, e in rows:
        if isinstance(e, ev.WorkloadPreempted):
            out.append(
                {
                    "seq": row.seq,
                    "time": clock.show(row.recorded_at),
                    "preemptor": e.preemptor,
                    "preemptor_cluster_queue": e.preemptor_cluster_queue,
                    "reason": e.reason,
                    "policy": e.policy,
                    "freed": amounts(e.freed),
                }
            )
    x.body["preemptions"] = out


def _timeouts(x: Explanation, rows: list[tuple[StoredEvent, ev.Event]], clock: Clock) -> None:
    """waitForPodsReady: every PodsReadyTimeout eviction, and the sentence for the last one."""
    out = []
    for row, e in rows:
        if isinstance(e, ev.WorkloadTimedOut):
            detail = timed_out_detail(e, clock)
            out.append(
                {"seq": row.seq, "time": clock.show(row.recorded_at), "text": timed_out_text(e, clock), **detail}
            )
    x.body["timeouts"] = out


def _last_eviction_timed_out(x: Explanation) -> dict[str, Any] | None:
    """The last PodsReadyTimeout eviction, if it came after the last preemption."""
    timeouts, preemptions = x.body["timeouts"], x.body["preemptions"]
    if not timeouts or (preemptions and preemptions[-1]["seq"] > timeouts[-1]["seq"]):
        return None
    last: dict[str, Any] = timeouts[-1]
    return last


def _say_timeout(x: Explanation, t: dict[str, Any]) -> None:
    x.say(f"at {t['time']}: {t['text']}", t["seq"])


def _say_preemption(x: Explanation, p: dict[str, Any]) -> None:
    freed = ", ".join(f"{a['amount']} {a['resource']} in {a['flavor']}" for a in p["freed"]) or "nothing"
    who = (
        f"by {p['preemptor']} (ClusterQueue {p['preemptor_cluster_queue']})"
        if p["preemptor"]
        else "for its Workload's spec.active: false"
        if p["reason"] == "Deactivated"
        else "by its queue's stop policy"
    )
    x.say(f"preempted at {p['time']} {who}: {p['reason']}, allowed by {p['policy']}; freed {freed}", p["seq"])


def _admission(x: Explanation, rows: list[tuple[StoredEvent, ev.Event]], clock: Clock, verb: str) -> None:
    found = _last(rows, ev.WorkloadAdmitted)
    if found is None:
        return
    row, adm = found
    pod_sets = adm.admission.pod_sets
    flavors = "; ".join(
        # Several pod sets (a PyTorchJob's master and workers...) each get their own flavors: name them.
        (f"{ps.name}: " if len(pod_sets) > 1 else "")
        + ", ".join(sorted({f"{r} in flavor {f}" for r, f in ps.flavors.items()}))
        for ps in pod_sets
    )
    text = f"{verb} ClusterQueue {adm.admission.cluster_queue} at {clock.show(row.recorded_at)} with {flavors}"
    if adm.borrowed:
        text += "; borrowing " + ", ".join(
            f"{q(b.amount, b.resource)} {b.resource} in {b.flavor} from cohort {b.cohort}" for b in adm.borrowed
        )
    observed = _last(rows, ev.JobObserved)
    asked = {ps.name: ps for ps in observed[1].workload.pod_sets} if observed is not None else {}
    fewer = [
        (ps, asked[ps.name]) for ps in adm.admission.pod_sets if ps.name in asked and ps.count < asked[ps.name].count
    ]
    if fewer:
        text += "; partial admission: " + ", ".join(
            f"{got.count} of {want.count} pods"
            + (f" in pod set {got.name}" if len(adm.admission.pod_sets) > 1 else "")
            + f" (at least {want.min_count})"
            for got, want in fewer
        )
    x.say(text, row.seq)
    x.body["admission"] = {
        "seq": row.seq,
        "time": clock.show(row.recorded_at),
        "cluster_queue": adm.admission.cluster_queue,
        "flavors": {ps.name: dict(ps.flavors) for ps in adm.admission.pod_sets},
        "counts": {ps.name: ps.count for ps in adm.admission.pod_sets},
        "borrowed": amounts(adm.borrowed),
    }


def _admitted(x: Explanation, rows: list[tuple[StoredEvent, ev.Event]], rec: WorkloadRecord, clock: Clock) -> None:
    x.status = "admitted"
    _admission(x, rows, clock, "admitted to")
    timed_out = _last_eviction_timed_out(x)
    ready = _last(rows, ev.JobReady)
    if ready is not None and rec.ready:
        x.say(f"its pods are all ready (PodsReady) since {clock.show(ready[0].recorded_at)}", ready[0].seq)
    failed, admitted = _last(rows, ev.JobPodsNotCreated), _last(rows, ev.WorkloadAdmitted)
    if failed is not None and not rec.ready and (admitted is None or failed[0].seq > admitted[0].seq):
        x.say(
            f"the Job controller cannot create its pods (FailedCreate, {clock.show(failed[0].recorded_at)}): "
            f"{failed[1].message}; it holds its quota until it is fixed or deleted (or, with waitForPodsReady, "
            "until its PodsReady timeout evicts it)",
            failed[0].seq,
        )
        x.body["pods_not_created"] = failed[1].message
    if rec.evicting and timed_out is not None:
        x.status = "timed-out-stopping"
        _say_timeout(x, timed_out)
    elif rec.evicting and x.body["preemptions"]:
        x.status = "preempted-stopping"
        _say_preemption(x, x.body["preemptions"][-1])


def _gone(x: Explanation, rows: list[tuple[StoredEvent, ev.Event]], state: State, clock: Clock, key: str) -> None:
    last_row, last = rows[-1]
    if key in state.finished:
        x.status = "finished"
        _admission(x, rows, clock, "ran in")
        fin = _last(rows, ev.JobFinished)
        if fin is not None:
            x.say(f"finished at {clock.show(fin[0].recorded_at)}", fin[0].seq)
            x.body["finished"] = {"seq": fin[0].seq, "time": clock.show(fin[0].recorded_at)}
    elif isinstance(last, ev.JobDeleted):
        x.status = "deleted"
        x.say(f"deleted at {clock.show(last_row.recorded_at)}", last_row.seq)
    else:
        rej = _last(rows, ev.ObjectRejected)
        x.status = "rejected"
        if rej is not None:
            x.say("rejected, so never queued: " + "; ".join(rej[1].errors), rej[0].seq)
            x.body["rejected"] = {"seq": rej[0].seq, "errors": list(rej[1].errors)}
        else:
            x.say("not managed at this moment", last_row.seq)


def _pending(
    x: Explanation,
    reader: LogReader,
    rows: list[tuple[StoredEvent, ev.Event]],
    state: State,
    rec: WorkloadRecord,
    clock: Clock,
) -> None:
    wl = rec.workload
    at = x.moment.seq
    # The job's own story up to now: back in the queue after a preemption?
    requeued = _last(rows, ev.WorkloadEvicted)
    requeue_seq = requeued[0].seq if requeued is not None else 0
    timed_out = _last_eviction_timed_out(x)
    if requeued is not None:
        if timed_out is not None:
            _say_timeout(x, timed_out)
        elif x.body["preemptions"]:
            _say_preemption(x, x.body["preemptions"][-1])
        x.say(
            f"evicted ({requeued[1].reason}) and back in its queue since {clock.show(requeued[0].recorded_at)}",
            requeue_seq,
        )
    lq_key = f"{wl.namespace}/{wl.queue_name}"
    lq = state.local_queues.get(lq_key)
    lq_seq = _config_seq(reader, f"localqueue/{lq_key}", at)
    x.body["local_queue"] = {"name": lq_key, "exists": lq is not None, "seq": lq_seq}
    cq_name = lq.cluster_queue if lq is not None else None
    cq = state.cluster_queues.get(cq_name) if cq_name is not None else None
    cq_seq = _config_seq(reader, f"clusterqueue/{cq_name}", at) if cq_name is not None else None
    x.body["cluster_queue"] = (
        None
        if cq_name is None
        else {"name": cq_name, "exists": cq is not None, "seq": cq_seq, "cohort": cq.cohort if cq is not None else None}
    )
    # The engine's last verdict, written by the cycle that evaluated it (after its latest requeue).
    pending = _last(rows, ev.WorkloadPending)
    reason = rec.last_reason
    reason_seq = pending[0].seq if pending is not None and pending[0].seq > requeue_seq and reason is not None else None
    requests = requests_of(wl)
    x.body["requests"] = {r: q(v, r) for r, v in sorted(requests.items())}
    x.body["priority"] = rec.priority
    if lq is None:
        x.verdict = "blocked-by-configuration"
        x.say(
            f"pending: LocalQueue {lq_key} does not exist (yet), so no ClusterQueue considers it",
            reason_seq or x.moment.seq,
        )
    elif cq is None:
        x.verdict = "blocked-by-configuration"
        x.say(
            f"pending: LocalQueue {lq_key} points at ClusterQueue {cq_name}, which does not exist",
            lq_seq if lq_seq is not None else x.moment.seq,
        )
    else:
        x.say(
            f"queued in LocalQueue {lq_key} -> ClusterQueue {cq_name}"
            + (f" (cohort {cq.cohort})" if cq.cohort else " (no cohort)")
            + f", priority {rec.priority}, requesting {_fmt_requests(requests)}",
            cq_seq if cq_seq is not None else x.moment.seq,
        )
    if reason is None or reason_seq is None:
        x.verdict = x.verdict or "not-evaluated"
        if lq is not None and cq is not None:
            x.say("no admission cycle had evaluated it yet at this moment (Kueue: PendingEvaluation)", x.moment.seq)
        x.body["pending"] = None
    else:
        assert pending is not None
        x.verdict = (
            "never-fits" if reason.kind in NEVER else "blocked-by-configuration" if reason.kind in CONFIG else "waiting"
        )
        kueue = quota_reserved_reason(reason.kind)
        as_kueue = "" if kueue == reason.kind.value else f" (Kueue: {kueue})"
        x.say(
            f"pending since {clock.show(pending[0].recorded_at)}: {reason.kind.value}{as_kueue}: {reason.message}",
            reason_seq,
        )
        shortages = []
        for s in reason.shortages:
            short = max(0, s.requested - s.available)
            shortages.append(
                {
                    "flavor": s.flavor,
                    "resource": s.resource,
                    "requested": q(s.requested, s.resource),
                    "available": q(s.available, s.resource),
                    "short": q(short, s.resource),
                }
            )
            verb = "at most" if reason.kind is PendingReasonKind.EXCEEDS_MAX_QUOTA else "only"
            x.say(
                f"{s.resource} in flavor {s.flavor}: needs {q(s.requested, s.resource)}, {verb} "
                f"{q(s.available, s.resource)} available: short by {q(short, s.resource)}",
                reason_seq,
            )
        x.body["pending"] = {
            "seq": reason_seq,
            "time": clock.show(pending[0].recorded_at),
            "reason": reason.kind.value,
            "kueue_reason": quota_reserved_reason(reason.kind),
            "message": reason.message,
            "blocked_by": reason.blocked_by,
            "shortages": shortages,
        }
        if reason.kind is PendingReasonKind.NAMESPACE_NOT_SELECTED and cq is not None:
            ns = state.namespaces.get(wl.namespace)
            ns_seq = _config_seq(reader, f"namespace/{wl.namespace}", at)
            labels = dict(ns.labels) if ns is not None else {}
            sel = cq.namespace_selector
            shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"
            wanted = ",".join(f"{k}={v}" for k, v in sorted(sel.match_labels.items())) if sel is not None else ""
            x.say(
                f"namespace {wl.namespace} has labels {shown}"
                + ("" if ns is not None else " (never observed)")
                + f"; ClusterQueue {cq_name}'s namespaceSelector "
                + ("is unset, which selects no namespace" if sel is None else f"(matchLabels {wanted or 'none'})")
                + f" {'selects' if selects(sel, labels) else 'does not select'} it",
                ns_seq if ns_seq is not None else (cq_seq or x.moment.seq),
            )
        if reason.blocked_by:
            blocker_rows = reader.events_of(f"job/{reason.blocked_by}", at)
            if blocker_rows:
                x.say(f"it waits on {reason.blocked_by}", blocker_rows[-1].seq)
    recorded = last_estimate(row for row, _ in rows if row.seq <= at)
    x.body["estimate"] = estimate_json(recorded, clock)
    if recorded is not None:
        e, seq = recorded
        x.say(
            f"estimated start (recorded at {clock.show(e.at)}, from the fold at seq {e.inputs}): "
            f"p50 {clock.show(e.p50) or 'unknown'}, p90 {clock.show(e.p90) or 'unknown'}",
            seq,
        )
    if cq is not None and cq_name is not None:
        _position(x, state, rec, cq_name, lq_key, reader)
        tree = loaded_tree(state)
        if cq_name in tree.inactive:
            x.say(f"ClusterQueue {cq_name} is inactive: {tree.inactive[cq_name].message}", cq_seq or x.moment.seq)
        fits = flavor_analysis(state, tree, cq_name, wl)
        _flavors(x, fits, cq.cohort, cq_seq or x.moment.seq)
        if fits and all(f.unsuitable or any(r.verdict == "never" for r in f.resources) for f in fits):
            x.verdict = "never-fits"
        x.body["never_fits"] = x.verdict == "never-fits"
        if x.verdict == "never-fits":
            x.say(
                "it can never be admitted with this configuration: no flavor could ever hold it",
                reason_seq or x.moment.seq,
            )
        short_frs = {
            (f.flavor, r.resource) for f in fits if not f.unsuitable for r in f.resources if r.verdict == "short"
        }
        _holders(x, state, tree, cq_name, short_frs, reader, clock)
    x.body.setdefault("position", None)
    x.body.setdefault("flavors", [])
    x.body.setdefault("holders", [])
    x.body.setdefault("never_fits", x.verdict == "never-fits")


def _position(x: Explanation, state: State, rec: WorkloadRecord, cq_name: str, lq_key: str, reader: LogReader) -> None:
    bucket = state.view().pending_by_cq.get(cq_name)
    if bucket is None:
        return
    idx = bucket.bisect_key_left((-rec.priority, rec.queue_order_at, rec.workload.key))  # type: ignore[attr-defined]
    ahead = list(islice(iter(bucket), idx))
    in_lq = sum(1 for p in ahead if p.local_queue == lq_key)
    x.body["position"] = {"cluster_queue": idx, "local_queue": in_lq, "pending_in_cluster_queue": len(bucket)}
    x.say(
        f"position {idx} of {len(bucket)} pending in ClusterQueue {cq_name} ({idx} ahead of it; 0-based, as "
        f"Kueue's visibility API), position {in_lq} in LocalQueue {lq_key}",
        x.moment.seq,
    )
    shown = []
    for p in ahead[:AHEAD_SHOWN]:
        last = reader.last_seq_of(f"job/{p.key}", x.moment.seq)
        seq = last if last is not None else x.moment.seq
        reason = p.last_reason.kind.value if p.last_reason is not None else None
        req = requests_of(p.workload)
        shown.append(
            {
                "job": p.key,
                "priority": p.priority,
                "requests": {r: q(v, r) for r, v in sorted(req.items())},
                "reason": reason,
                "seq": seq,
            }
        )
        x.say(
            f"ahead: {p.key} (priority {p.priority}, requesting {_fmt_requests(req)})"
            + (f", itself pending: {reason}" if reason else ""),
            seq,
        )
    if idx > AHEAD_SHOWN:
        x.say(f"... and {idx - AHEAD_SHOWN} more ahead", x.moment.seq)
    x.body["ahead"] = {"count": idx, "first": shown}


def _flavors(x: Explanation, fits: list[FlavorFit], cohort: str | None, cq_seq: int) -> None:
    out = []
    for f in fits:
        entry: dict[str, Any] = {"flavor": f.flavor, "unsuitable": f.unsuitable, "resources": []}
        if f.unsuitable:
            x.say(f"flavor {f.flavor} cannot be used: {f.unsuitable}", cq_seq)
        for r in f.resources:
            res = r.resource
            entry["resources"].append(
                {
                    "resource": res,
                    "requested": q(r.requested, res),
                    "nominal": q(r.nominal, res),
                    "borrowing_limit": None if r.borrowing_limit is None else q(r.borrowing_limit, res),
                    "used": q(r.used, res),
                    "free": q(r.free_own, res),
                    "cohort_free": None if r.cohort_free is None else q(r.cohort_free, res),
                    "borrow_left": None if r.borrow_left is None else q(r.borrow_left, res),
                    "available": q(r.available, res),
                    "max_possible": q(r.max_possible, res),
                    "verdict": r.verdict,
                }
            )
            if f.unsuitable:
                continue
            head = (
                f"{res} in flavor {f.flavor}: needs {q(r.requested, res)}; nominal {q(r.nominal, res)}, "
                f"{q(r.used, res)} in use, {q(r.free_own, res)} of its own free"
            )
            if r.verdict == "never":
                x.say(
                    f"{head}; it could never hold more than {q(r.max_possible, res)}"
                    + (
                        f" (nominal {q(r.nominal, res)} + borrowingLimit {q(r.borrowing_limit, res)})"
                        if r.borrowing_limit is not None and cohort
                        else " (no cohort to borrow from)"
                        if not cohort
                        else ""
                    ),
                    cq_seq,
                )
                continue
            if r.verdict == "fits":
                x.say(
                    f"{head}: quota is not what stops it, it would fit now ({q(r.available, res)} available)",
                    x.moment.seq,
                )
                continue
            need_borrow = r.requested - r.free_own
            if cohort is None:
                why = "it cannot borrow: ClusterQueue is in no cohort"
            elif r.borrow_left is not None and r.borrow_left < need_borrow and (r.cohort_free or 0) >= need_borrow:
                why = (
                    f"it would have to borrow {q(need_borrow, res)}; the rest of cohort {cohort} has "
                    f"{q(r.cohort_free or 0, res)} unused, but borrowingLimit {q(r.borrowing_limit or 0, res)} "
                    f"allows only {q(r.borrow_left, res)} more: blocked by the borrowing limit"
                )
            else:
                why = (
                    f"it would have to borrow {q(need_borrow, res)}; the rest of cohort {cohort} has only "
                    f"{q(r.cohort_free or 0, res)} unused"
                    + (
                        f" (and borrowingLimit {q(r.borrowing_limit or 0, res)} allows {q(r.borrow_left, res)} more)"
                        if r.borrow_left is not None
                        else ""
                    )
                )
            x.say(f"{head}: short by {q(r.requested - r.available, res)}; {why}", x.moment.seq)
        out.append(entry)
    x.body["flavors"] = out


def _holders(
    x: Explanation,
    state: State,
    tree: QuotaTree,
    cq_name: str,
    short: set[FlavorResource],
    reader: LogReader,
    clock: Clock,
) -> None:
    """The admitted workloads holding the short (flavor, resource)s in this ClusterQueue's tree, biggest first."""
    if not short:
        x.body["holders"] = []
        return
    view = state.view()
    held: list[tuple[Milli, str, str, dict[FlavorResource, Milli]]] = []
    for name in in_tree(tree, tree.cqs[cq_name]):
        for key, aw in view.admitted_by_cq.get(name, {}).items():
            usage = {fr: v for fr, v in aw.admission.usage().items() if fr in short}
            if usage:
                held.append((sum(usage.values()), key, name, usage))
    held.sort(key=lambda h: (-h[0], h[1]))
    out = []
    for _, key, name, usage in held[:HOLDERS_SHOWN]:
        rows = reader.events_of(f"job/{key}", x.moment.seq)
        adm = next((r for r in reversed(rows) if r.type == ev.WorkloadAdmitted.TYPE), None)
        seq = adm.seq if adm is not None else x.moment.seq
        what = ", ".join(f"{q(v, fr[1])} {fr[1]} in {fr[0]}" for fr, v in sorted(usage.items()))
        out.append(
            {
                "job": key,
                "cluster_queue": name,
                "holds": [
                    {"flavor": fr[0], "resource": fr[1], "amount": q(v, fr[1])} for fr, v in sorted(usage.items())
                ],
                "admitted_seq": seq,
                "admitted_at": clock.show(adm.recorded_at) if adm is not None else None,
            }
        )
        x.say(f"held by {key} (ClusterQueue {name}): {what}", seq)
    if len(held) > HOLDERS_SHOWN:
        x.say(f"... and {len(held) - HOLDERS_SHOWN} more admitted workloads hold some of it", x.moment.seq)
    x.body["holders"] = out


def to_json(x: Explanation, clock: Clock) -> dict[str, Any]:
    return {
        "clock": clock.kind,
        "at": {"seq": x.moment.seq, "time": clock.show(x.moment.recorded_at)},
        "job": x.job,
        "status": x.status,
        "verdict": x.verdict,
        "statements": [{"seq": seq, "text": text} for text, seq in x.statements],
        **x.body,
    }


def to_text(x: Explanation, clock: Clock) -> str:
    head = f"{x.job}: {x.status}" + (f" ({x.verdict})" if x.verdict else "")
    head += f", as of {clock.show(x.moment.recorded_at)} (seq {x.moment.seq})"
    width = max((len(str(seq)) for _, seq in x.statements), default=1)
    return "\n".join([head, *(f"  [seq {seq:>{width}}] {text}" for text, seq in x.statements)])
