"""Every Prometheus metric admitd exposes, defined here and nowhere else.

Two kinds. Figures that follow from the log (queue gauges, Kueue's workload counters and wait-time histograms,
`admitd_events_appended_total`...) are computed by `FoldedMetrics`, a fold over the same events as the state, so a
restarted process that replays the log reports exactly what it reported before. Figures only a running process
sees (cycle durations, append latency, watch restarts, leadership) are ordinary prometheus-client instruments in
`LIVE`, fed by `admitd run` through the callables below (`admitd simulate` feeds none of them).

Kueue's metrics keep Kueue's names, types and labels (kueue-notes.md section 3), `replica_role` included; labels
are bounded: queue, flavor, resource, priority class, reason, never a job name.

Exposition is rendered here rather than by `prometheus_client.generate_latest`: that took 1.4 s for 52,000 samples
on the development machine (1,000 ClusterQueues x 3 priority classes of histograms), against a 50 ms target. The
text of each (metric, ClusterQueue) is cached and re-rendered only when an event touched that queue.
"""

from __future__ import annotations

import http.server
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from daemon.domain import events as ev
from daemon.domain.model import (
    ClusterQueue,
    FlavorResource,
    Milli,
    PendingReasonKind,
    ResourceQuota,
    StopPolicy,
    Workload,
)
from daemon.domain.quota import UNLIMITED, QuotaTree
from daemon.domain.state import Phase, State
from daemon.domain.view import is_sticky
from daemon.eventlog import LogReader, codec
from daemon.eventlog.errors import NotAnEventLog
from daemon.eventlog.store import WriteObserver

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

WAIT_BUCKETS: tuple[float, ...] = (1.0, *(2.5 * 2**i for i in range(13)))
"""Kueue's `generateExponentialBuckets(14)`: 1, 2.5, 5, 10, 20 ... 10240 seconds."""

# --- live instruments: fed by the process that runs the cycle, writes the log, watches, leads ------------------

LIVE = CollectorRegistry(auto_describe=True)
ADMISSION_ATTEMPTS = Counter(
    "kueue_admission_attempts_total",
    "Admission cycles, by result: success when the cycle admitted something, inadmissible otherwise",
    ["replica_role", "result"],
    registry=LIVE,
)
ADMISSION_ATTEMPT_DURATION = Histogram(
    "kueue_admission_attempt_duration_seconds",
    "Duration of one admission cycle, by result",
    ["replica_role", "result"],
    registry=LIVE,
)
APPEND_LATENCY = Histogram(
    "admitd_append_latency_seconds",
    "From append() to its batch being committed and fsynced (what an appender waits)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=LIVE,
)
COMMIT_LATENCY = Histogram(
    "admitd_commit_latency_seconds",
    "Duration of one group-commit transaction, fsync included",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=LIVE,
)
APPEND_FAILURES = Counter("admitd_append_failures_total", "Batches the log writer failed to commit", registry=LIVE)
WATCH_RESTARTS = Counter(
    "admitd_watch_restarts_total",
    "Kubernetes watches restarted (410 Gone, errors, timeouts)",
    ["resource"],
    registry=LIVE,
)
LEADER = Gauge("admitd_leader", "1 while this process holds the leader lease, else 0", registry=LIVE)
REPLAY_DURATION = Gauge(
    "admitd_replay_duration_seconds", "How long the last replay of the log into state took at start-up", registry=LIVE
)
_STARTUP_REPLAY = threading.Event()  # set once the process reported its own start-up replay


# --- feeding the live instruments: plain callables the edge (`admitd run`) hands to the writer, the stages, the
# watches and the elector, so that none of those packages knows prometheus-client.


def write_observer() -> WriteObserver:
    """The log writer's reports -> append latency, commit latency, append failures."""
    return WriteObserver(
        appended=APPEND_LATENCY.observe,
        committed=lambda _events, seconds: COMMIT_LATENCY.observe(seconds),
        failed=APPEND_FAILURES.inc,
    )


def admission_attempt(admitted: bool, seconds: float, role: str = "leader") -> None:
    """One admission cycle: Kueue's result is `success` when it admitted something, `inadmissible` otherwise."""
    result = "success" if admitted else "inadmissible"
    ADMISSION_ATTEMPTS.labels(replica_role=role, result=result).inc()
    ADMISSION_ATTEMPT_DURATION.labels(replica_role=role, result=result).observe(seconds)


def watch_restarted(resource: str) -> None:
    WATCH_RESTARTS.labels(resource=resource).inc()


def leader_is(is_leader: Callable[[], bool]) -> None:
    """`admitd_leader` reads `is_leader()` at every scrape."""
    LEADER.set_function(lambda: 1.0 if is_leader() else 0.0)


def replayed(seconds: float) -> None:
    """The start-up replay's duration (the process's own; a scrape's fold no longer sets it after this)."""
    _STARTUP_REPLAY.set()
    REPLAY_DURATION.set(seconds)


# --- the fold of metrics ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Hist:
    counts: list[int] = field(default_factory=lambda: [0] * len(WAIT_BUCKETS))
    total: float = 0.0
    n: int = 0

    def observe(self, seconds: float) -> None:
        self.n += 1
        self.total += seconds
        for i, le in enumerate(WAIT_BUCKETS):
            if seconds <= le:
                self.counts[i] += 1


def priority_class_of(wl: Workload) -> str:
    return wl.priority_class or wl.pod_priority_class or ""


class FoldedMetrics:
    """The state plus the counters Kueue keeps, folded from the same events. `follow` folds what a reader has
    beyond what was folded already; building one from a log means folding it from its first event, so that counters
    cover the whole log (a start from a snapshot would have the gauges right but the counters from that seq on)."""

    def __init__(self) -> None:
        self.state = State()
        self.last_recorded_at: int | None = None
        self.events_by_type: dict[str, int] = {}
        self.admitted: dict[tuple[str, str], int] = {}  # (cluster_queue, priority_class)
        self.finished: dict[tuple[str, str], int] = {}
        self.evicted: dict[tuple[str, str, str, str], int] = {}  # (cq, reason, underlying_cause, priority_class)
        self.preempted: dict[tuple[str, str], int] = {}  # (preempting cq, reason)
        self.actuation_failures: dict[str, int] = {}  # "true" | "false" (permanent)
        self.wait: dict[tuple[str, str], Hist] = {}
        self.execution: dict[tuple[str, str], Hist] = {}
        self.usage: dict[str, dict[FlavorResource, Milli]] = {}
        self.priority_classes: dict[str, set[str]] = {}  # cluster queue -> the priority_class labels it has
        self.counted_queues: set[str] = set()  # queues named by a counter (they stay after the queue is deleted)
        self._queued_at: dict[str, int] = {}  # requeue times of evicted workloads (Kueue's wait starts there)
        # LocalQueue mirrors (Kueue's kueue_local_queue_*, rendered only when enabled, as Kueue's LocalQueueMetrics
        # gate), keyed by (namespace, LocalQueue, ...): folded always, so that enabling them shows the whole log.
        self.lq_admitted: dict[tuple[str, str, str], int] = {}  # (ns, lq, priority_class)
        self.lq_finished: dict[tuple[str, str, str], int] = {}
        self.lq_evicted: dict[tuple[str, str, str, str, str], int] = {}  # (ns, lq, reason, underlying_cause, pc)
        self.lq_wait: dict[tuple[str, str, str], Hist] = {}
        self._preempt_reason: dict[str, str] = {}
        self.dirty: set[tuple[str, str]] = set()  # (cluster queue, group of metrics) changed since the last render
        self.config_changed = True
        self.replay_seconds: float | None = None

    # --- folding ---

    def follow(self, reader: LogReader) -> int:
        """Fold the events after the last one folded; return how many."""
        n = 0
        decode = codec.decode
        t0 = time.perf_counter()
        first = self.state.seq == 0
        for seq, type_, version, payload in reader.iter_payloads(self.state.seq):
            self.apply(
                decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=seq), seq
            )
            n += 1
        if n:
            b = reader.bounds()
            if b is not None:
                self.last_recorded_at = b[3]
        if first and n:
            self.replay_seconds = time.perf_counter() - t0
        return n

    def _cq_of(self, key: str) -> str | None:
        rec = self.state.workloads.get(key)
        if rec is None:
            return None
        if rec.admission is not None:
            return rec.admission.cluster_queue
        lq = self.state.local_queues.get(f"{rec.workload.namespace}/{rec.workload.queue_name}")
        return lq.cluster_queue if lq is not None else None

    def _touch(self, cq: str, *groups: str) -> None:
        for group in groups:
            self.dirty.add((cq, group))

    def _add_usage(self, cq: str, usage: dict[FlavorResource, Milli], sign: int) -> None:
        acc = self.usage.setdefault(cq, {})
        for fr, v in usage.items():
            left = acc.get(fr, 0) + sign * v
            if left:
                acc[fr] = left
            else:
                acc.pop(fr, None)

    def apply(self, event: ev.Event, seq: int) -> None:
        self.events_by_type[event.TYPE] = self.events_by_type.get(event.TYPE, 0) + 1
        state = self.state
        match event:
            case ev.WorkloadAdmitted(workload=key, at=at, admission=adm):
                rec = state.workloads.get(key)
                if rec is not None and rec.phase is Phase.PENDING:
                    label = (adm.cluster_queue, priority_class_of(rec.workload))
                    if label not in self.admitted:
                        self.priority_classes.setdefault(label[0], set()).add(label[1])
                        self.counted_queues.add(label[0])
                    self.admitted[label] = self.admitted.get(label, 0) + 1
                    since = self._queued_at.pop(key, rec.workload.created_at)
                    self.wait.setdefault(label, Hist()).observe(max(0, at - since) / 1000)
                    wl = rec.workload
                    if wl.queue_name is not None:
                        lq3 = (wl.namespace, wl.queue_name, label[1])
                        self.lq_admitted[lq3] = self.lq_admitted.get(lq3, 0) + 1
                        self.lq_wait.setdefault(lq3, Hist()).observe(max(0, at - since) / 1000)
                    self._add_usage(adm.cluster_queue, adm.usage(), 1)
                    self._touch(adm.cluster_queue, "pending", "admitted", "admissions")
            case ev.WorkloadAdopted(workload=key, admission=adm):
                # Admitted by another replica: its quota is in use, but this process admitted nothing.
                rec = state.workloads.get(key)
                if rec is not None and rec.phase is Phase.PENDING:
                    self._queued_at.pop(key, None)
                    self._add_usage(adm.cluster_queue, adm.usage(), 1)
                    self._touch(adm.cluster_queue, "pending", "admitted")
            case ev.WorkloadPreempted(workload=key, cluster_queue=cq, preemptor_cluster_queue=by_cq, reason=why):
                self._preempt_reason[key] = why
                if by_cq is not None:
                    self.preempted[(by_cq, why)] = self.preempted.get((by_cq, why), 0) + 1
                    self.counted_queues.add(by_cq)
                    self._touch(by_cq, "preemptions")
                self._touch(cq, "preemptions")
            case ev.WorkloadEvicted(workload=key, at=at, reason=why):
                rec = state.workloads.get(key)
                if rec is not None and rec.phase is Phase.ADMITTED and rec.admission is not None:
                    cq = rec.admission.cluster_queue
                    label4 = (cq, why, self._preempt_reason.pop(key, ""), priority_class_of(rec.workload))
                    self.evicted[label4] = self.evicted.get(label4, 0) + 1
                    self.counted_queues.add(cq)
                    if rec.workload.queue_name is not None:
                        lq5 = (rec.workload.namespace, rec.workload.queue_name, *label4[1:])
                        self.lq_evicted[lq5] = self.lq_evicted.get(lq5, 0) + 1
                    self._add_usage(cq, rec.admission.usage(), -1)
                    self._queued_at[key] = at
                    self._touch(cq, "pending", "admitted", "evictions")
            case ev.JobFinished(job=key, at=at) | ev.JobDeleted(job=key, at=at):
                rec = state.workloads.get(key)
                if rec is not None:
                    cq = self._cq_of(key)
                    if rec.phase is Phase.ADMITTED and rec.admission is not None and rec.admitted_at is not None:
                        self._add_usage(rec.admission.cluster_queue, rec.admission.usage(), -1)
                        if isinstance(event, ev.JobFinished):
                            label = (rec.admission.cluster_queue, priority_class_of(rec.workload))
                            if label not in self.finished:
                                self.priority_classes.setdefault(label[0], set()).add(label[1])
                                self.counted_queues.add(label[0])
                            self.finished[label] = self.finished.get(label, 0) + 1
                            if rec.workload.queue_name is not None:
                                lq3 = (rec.workload.namespace, rec.workload.queue_name, label[1])
                                self.lq_finished[lq3] = self.lq_finished.get(lq3, 0) + 1
                            self.execution.setdefault(label, Hist()).observe(max(0, at - rec.admitted_at) / 1000)
                    if cq is not None:
                        self._touch(cq, "pending", "admitted", "finishes")
                self._queued_at.pop(key, None)
                self._preempt_reason.pop(key, None)
            case ev.WorkloadPending(cluster_queue=cq):
                if cq is not None:
                    self._touch(cq, "pending")
            case ev.ActuationFailed(permanent=permanent):
                k = "true" if permanent else "false"
                self.actuation_failures[k] = self.actuation_failures.get(k, 0) + 1
            case ev.JobObserved() | ev.JobUnsuspended() | ev.JobSuspended() | ev.ObjectRejected():
                pass
            case ev.PriorityClassObserved():
                pass
            case _:
                self.config_changed = True  # queues, cohorts, flavors, namespaces: every queue may change
        state.apply(event, seq)
        if isinstance(event, ev.JobObserved):
            cq = self._cq_of(event.workload.key)
            if cq is not None:
                self._touch(cq, "pending")


# --- rendering ---------------------------------------------------------------------------------------------------


def _esc(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _num(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v)}.0"
    return repr(float(v))


def _amount(milli: Milli) -> float:
    return math.inf if milli >= UNLIMITED else milli / 1000


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: str  # gauge | counter | histogram
    help: str


PER_QUEUE: tuple[Family, ...] = (
    Family("kueue_pending_workloads", "gauge", "Pending workloads per ClusterQueue, by status (active/inadmissible)"),
    Family("kueue_unadmitted_workloads", "gauge", "Pending workloads per ClusterQueue, by the reason they wait"),
    Family("kueue_admitted_active_workloads", "gauge", "Admitted workloads that hold quota now"),
    Family("kueue_reserving_active_workloads", "gauge", "Workloads reserving quota now (admitd: the admitted ones)"),
    Family("kueue_cluster_queue_status", "gauge", "1 for the ClusterQueue's status (pending/active/terminated)"),
    Family("kueue_cluster_queue_resource_usage", "gauge", "Quota in use, per flavor and resource"),
    Family("kueue_cluster_queue_resource_reservation", "gauge", "Quota reserved, per flavor and resource"),
    Family("kueue_cluster_queue_nominal_quota", "gauge", "Nominal quota, per flavor and resource"),
    Family("kueue_cluster_queue_borrowing_limit", "gauge", "Borrowing limit (+Inf when unset)"),
    Family("kueue_cluster_queue_lending_limit", "gauge", "Lending limit (+Inf when unset)"),
    Family("kueue_admitted_workloads_total", "counter", "Workloads admitted, re-admissions included"),
    Family("kueue_quota_reserved_workloads_total", "counter", "Workloads that reserved quota (admitd: admitted)"),
    Family("kueue_finished_workloads_total", "counter", "Admitted workloads that finished"),
    Family("kueue_evicted_workloads_total", "counter", "Workloads evicted, by reason and underlying cause"),
    Family("kueue_preempted_workloads_total", "counter", "Workloads preempted, by the preempting ClusterQueue"),
    Family("kueue_admission_wait_time_seconds", "histogram", "From creation or requeue to admission"),
    Family("kueue_quota_reserved_wait_time_seconds", "histogram", "From creation or requeue to quota reservation"),
    Family("kueue_execution_time_seconds", "histogram", "From admission to finish"),
)

_LES = [_num(b) for b in WAIT_BUCKETS] + ["+Inf"]


class _Context:
    """What one render's fragments share, computed at most once per render."""

    def __init__(self, fm: FoldedMetrics, role: str) -> None:
        self.fm = fm
        self.role = role
        self.view = fm.state.view()
        self._evicted: dict[str, list[tuple[tuple[str, str, str, str], int]]] | None = None
        self._preempted: dict[str, list[tuple[tuple[str, str], int]]] | None = None

    def pcs(self, cq: str) -> list[str]:
        """The queue's priority_class labels: those of its admissions and finishes (wait and execution histograms
        have the same labels as those counters), kept by the fold as they appear."""
        return sorted(self.fm.priority_classes.get(cq, ()))

    def evicted(self, cq: str) -> list[tuple[tuple[str, str, str, str], int]]:
        if self._evicted is None:
            self._evicted = {}
            for k, v in self.fm.evicted.items():
                self._evicted.setdefault(k[0], []).append((k, v))
        return self._evicted.get(cq, [])

    def preempted(self, cq: str) -> list[tuple[tuple[str, str], int]]:
        if self._preempted is None:
            self._preempted = {}
            for k, v in self.fm.preempted.items():
                self._preempted.setdefault(k[0], []).append((k, v))
        return self._preempted.get(cq, [])


_FAMILY = {f.name: f for f in PER_QUEUE}


GROUPS: dict[str, tuple[str, ...]] = {
    "config": (
        "kueue_cluster_queue_status",
        "kueue_cluster_queue_nominal_quota",
        "kueue_cluster_queue_borrowing_limit",
        "kueue_cluster_queue_lending_limit",
    ),
    "pending": ("kueue_pending_workloads", "kueue_unadmitted_workloads"),
    "admitted": (
        "kueue_admitted_active_workloads",
        "kueue_reserving_active_workloads",
        "kueue_cluster_queue_resource_usage",
        "kueue_cluster_queue_resource_reservation",
    ),
    "admissions": (
        "kueue_admitted_workloads_total",
        "kueue_quota_reserved_workloads_total",
        "kueue_admission_wait_time_seconds",
        "kueue_quota_reserved_wait_time_seconds",
    ),
    "finishes": ("kueue_finished_workloads_total", "kueue_execution_time_seconds"),
    "evictions": ("kueue_evicted_workloads_total",),
    "preemptions": ("kueue_preempted_workloads_total",),
}
"""Which families each group renders. An event marks (queue, group) dirty; only those fragments are rendered again."""


class Renderer:
    """The exposition text of a `FoldedMetrics`, with the text of every (ClusterQueue, group of metrics) cached and
    rendered again only when an event touched it (`FoldedMetrics.dirty`) or the configuration changed."""

    def __init__(self, replica_role: str = "leader", *, local_queue_metrics: bool = False) -> None:
        self.role = _esc(replica_role)
        self.local_queue_metrics = local_queue_metrics
        self._frags: dict[str, dict[str, dict[str, bytes]]] = {}  # cluster queue -> group -> family -> text
        self._labels: dict[tuple[str, str], str] = {}  # (cluster queue, priority class) -> label set ("" for none)
        self._inactive: set[str] = set()  # ClusterQueues that cannot admit (unknown flavor, cohort cycle)
        self._hist_templates: dict[tuple[str, str], str] = {}  # (family, labels) -> its lines with %-slots
        self._hist_text: dict[tuple[str, str], tuple[int, str]] = {}  # (family, labels) -> (observations, text)
        self._resource_labels: dict[str, tuple[ClusterQueue, list[tuple[FlavorResource, str, ResourceQuota]]]] = {}
        self._family_bytes: dict[str, bytes] = {}  # a family's whole text, while none of its fragments changed
        self._order: list[str] = []

    def render(self, fm: FoldedMetrics, reader_info: Callable[[], Iterable[str]] | None = None) -> bytes:
        state = fm.state
        if fm.config_changed:
            self._frags.clear()
            self._family_bytes.clear()
            self._inactive = set(QuotaTree.build(state.cluster_queues, state.cohorts, state.flavors).inactive)
            fm.config_changed = False
        names = fm.counted_queues.union(state.cluster_queues)
        gone = set(self._frags) - names
        for name in gone:
            del self._frags[name]
        if gone:  # rare (a queue deleted): start the label and histogram caches afresh rather than sift them
            self._labels.clear()
            self._hist_text.clear()
            self._hist_templates.clear()
            self._resource_labels.clear()
        todo: dict[str, set[str]] = {n: set(GROUPS) for n in names if n not in self._frags}
        for name, group in fm.dirty:
            if name in names:
                todo.setdefault(name, set()).add(group)
        fm.dirty.clear()
        order = sorted(self._frags.keys() | todo.keys())
        if order != self._order:
            self._family_bytes.clear()  # a queue came or went: every family's text changes
            self._order = order
        if todo:
            ctx = _Context(fm, self.role)
            for name, groups in todo.items():
                frag = self._frags.setdefault(name, {})
                for group in groups:
                    frag[group] = {k: v.encode() for k, v in self._group(ctx, name, group).items()}
                    for fam_name in GROUPS[group]:
                        self._family_bytes.pop(fam_name, None)
        out: list[bytes] = []
        frags = self._frags
        for group, families in GROUPS.items():
            for fam_name in families:
                text = self._family_bytes.get(fam_name)
                if text is None:
                    fam = _FAMILY[fam_name]
                    head = f"# HELP {fam.name} {fam.help}\n# TYPE {fam.name} {fam.type}\n".encode()
                    text = head + b"".join([frags[n][group].get(fam_name, b"") for n in order])
                    self._family_bytes[fam_name] = text
                out.append(text)
        tail = [self._global(fm)]
        if self.local_queue_metrics:
            tail.append(self._local_queues(fm))
        if reader_info is not None:
            tail.extend(reader_info())
        out.append("".join(tail).encode())
        return b"".join(out)

    def _label(self, cq: str, pc: str | None) -> str:
        """`replica_role,cluster_queue[,priority_class]` of a queue, escaped once and kept."""
        key = (cq, "\0" if pc is None else pc)
        text = self._labels.get(key)
        if text is None:
            text = f'replica_role="{self.role}",cluster_queue="{_esc(cq)}"'
            if pc is not None:
                text += f',priority_class="{_esc(pc)}"'
            self._labels[key] = text
        return text

    def _hist(self, name: str, labels: str, h: Hist) -> str:
        """A histogram's lines; rendered again only when it has new observations (a queue's fragment is dirty
        when any of its figures changed, most of its histograms usually did not)."""
        key = (name, labels)
        cached = self._hist_text.get(key)
        if cached is not None and cached[0] == h.n:
            return cached[1]
        template = self._hist_templates.get(key)
        if template is None:
            lab = labels.replace("%", "%%")
            template = "".join(f'{name}_bucket{{{lab},le="{le}"}} %d\n' for le in _LES)
            template += f"{name}_sum{{{lab}}} %s\n{name}_count{{{lab}}} %d\n"
            self._hist_templates[key] = template
        text = template % (*h.counts, h.n, _num(h.total), h.n)
        self._hist_text[key] = (h.n, text)
        return text

    def _group(self, ctx: _Context, name: str, group: str) -> dict[str, str]:
        fm, role = ctx.fm, self.role
        state = fm.state
        base = self._label(name, None)
        f: dict[str, str] = {}
        cq = state.cluster_queues.get(name)
        if group == "pending" and cq is not None:
            index = ctx.view.pending_index.get(name) if ctx.view.pending_index is not None else None
            active = inadmissible = 0
            reasons: dict[str, int] = {}
            if index is not None:
                active += len(index.sticky)
                if len(index.sticky):
                    reasons["WaitingForPreemptedWorkloads"] = len(index.sticky)
                for by_reason in index.groups.values():
                    for coarse, run in by_reason.items():
                        if coarse is None:
                            active += len(run)
                        else:
                            inadmissible += len(run)
                            kind = coarse[0]
                            why = kind.value if isinstance(kind, PendingReasonKind) else str(kind)
                            reasons[why] = reasons.get(why, 0) + len(run)
            f["kueue_pending_workloads"] = (
                f'kueue_pending_workloads{{{base},status="active"}} {active}\n'
                f'kueue_pending_workloads{{{base},status="inadmissible"}} {inadmissible}\n'
            )
            f["kueue_unadmitted_workloads"] = "".join(
                f'kueue_unadmitted_workloads{{{base},reason="{r}",underlying_cause=""}} {n}\n'
                for r, n in sorted(reasons.items())
            )
        elif group == "admitted" and cq is not None:
            admitted = len(ctx.view.admitted_by_cq.get(name, {}))
            f["kueue_admitted_active_workloads"] = f"kueue_admitted_active_workloads{{{base}}} {admitted}\n"
            f["kueue_reserving_active_workloads"] = f"kueue_reserving_active_workloads{{{base}}} {admitted}\n"
            usage = fm.usage.get(name, {})
            lines = [f"{{{lab}}} {_num(usage.get(fr, 0) / 1000)}\n" for fr, lab, _ in self._resources(cq)]
            f["kueue_cluster_queue_resource_usage"] = "".join("kueue_cluster_queue_resource_usage" + x for x in lines)
            f["kueue_cluster_queue_resource_reservation"] = "".join(
                "kueue_cluster_queue_resource_reservation" + x for x in lines
            )
        elif group == "config" and cq is not None:
            status = "pending" if name in self._inactive or cq.stop_policy is not StopPolicy.NONE else "active"
            f["kueue_cluster_queue_status"] = "".join(
                f'kueue_cluster_queue_status{{{base},status="{s}"}} {1 if s == status else 0}\n'
                for s in ("pending", "active", "terminated")
            )
            nominal, borrowing, lending = [], [], []
            for _, lab, rq in self._resources(cq):
                nominal.append(f"kueue_cluster_queue_nominal_quota{{{lab}}} {_num(_amount(rq.nominal))}\n")
                bl = math.inf if rq.borrowing_limit is None else _amount(rq.borrowing_limit)
                ll = math.inf if rq.lending_limit is None else _amount(rq.lending_limit)
                borrowing.append(f"kueue_cluster_queue_borrowing_limit{{{lab}}} {_num(bl)}\n")
                lending.append(f"kueue_cluster_queue_lending_limit{{{lab}}} {_num(ll)}\n")
            f["kueue_cluster_queue_nominal_quota"] = "".join(nominal)
            f["kueue_cluster_queue_borrowing_limit"] = "".join(borrowing)
            f["kueue_cluster_queue_lending_limit"] = "".join(lending)
        elif group == "admissions":
            adm, qr, wait, qrw = [], [], [], []
            for pc in ctx.pcs(name):
                label = (name, pc)
                lab = self._label(name, pc)
                if label in fm.admitted:
                    adm.append(f"kueue_admitted_workloads_total{{{lab}}} {fm.admitted[label]}\n")
                    qr.append(f"kueue_quota_reserved_workloads_total{{{lab}}} {fm.admitted[label]}\n")
                if label in fm.wait:
                    wait.append(self._hist("kueue_admission_wait_time_seconds", lab, fm.wait[label]))
                    qrw.append(self._hist("kueue_quota_reserved_wait_time_seconds", lab, fm.wait[label]))
            f["kueue_admitted_workloads_total"] = "".join(adm)
            f["kueue_quota_reserved_workloads_total"] = "".join(qr)
            f["kueue_admission_wait_time_seconds"] = "".join(wait)
            f["kueue_quota_reserved_wait_time_seconds"] = "".join(qrw)
        elif group == "finishes":
            fin, exe = [], []
            for pc in ctx.pcs(name):
                label = (name, pc)
                lab = self._label(name, pc)
                if label in fm.finished:
                    fin.append(f"kueue_finished_workloads_total{{{lab}}} {fm.finished[label]}\n")
                if label in fm.execution:
                    exe.append(self._hist("kueue_execution_time_seconds", lab, fm.execution[label]))
            f["kueue_finished_workloads_total"] = "".join(fin)
            f["kueue_execution_time_seconds"] = "".join(exe)
        elif group == "evictions":
            f["kueue_evicted_workloads_total"] = "".join(
                f'kueue_evicted_workloads_total{{{base},reason="{_esc(k[1])}",underlying_cause="{_esc(k[2])}",'
                f'priority_class="{_esc(k[3])}"}} {v}\n'
                for k, v in sorted(ctx.evicted(name))
            )
        elif group == "preemptions":
            f["kueue_preempted_workloads_total"] = "".join(
                f'kueue_preempted_workloads_total{{replica_role="{role}",preempting_cluster_queue="{_esc(name)}",'
                f'reason="{_esc(k[1])}"}} {v}\n'
                for k, v in sorted(ctx.preempted(name))
            )
        return f

    def _resources(self, cq: ClusterQueue) -> list[tuple[FlavorResource, str, ResourceQuota]]:
        """Each (flavor, resource) of the queue with its label set, built again only when the queue's object
        changed (the fold replaces a ClusterQueue's value when its spec changes)."""
        cached = self._resource_labels.get(cq.name)
        if cached is not None and cached[0] is cq:
            return cached[1]
        role, cohort, cqn = self.role, _esc(cq.cohort or ""), _esc(cq.name)
        found = [
            (
                (fq.name, rq.name),
                f'replica_role="{role}",cohort="{cohort}",cluster_queue="{cqn}",flavor="{_esc(fq.name)}",'
                f'resource="{_esc(rq.name)}"',
                rq,
            )
            for g in cq.resource_groups
            for fq in g.flavors
            for rq in fq.resources
        ]
        self._resource_labels[cq.name] = (cq, found)
        return found

    def _local_queues(self, fm: FoldedMetrics) -> str:
        """Kueue's kueue_local_queue_* that the fold can answer, rendered whole at each scrape (off by default, as in
        Kueue: they cost a walk over the pending and admitted workloads per scrape and more series)."""
        role, state = self.role, fm.state
        view = state.view()
        pending: dict[str, list[int]] = {}  # "ns/name" -> [active, inadmissible]
        for entries in view.pending_by_cq.values():
            for p in entries:
                counts = pending.setdefault(p.local_queue, [0, 0])
                counts[0 if p.last_reason is None or is_sticky(p) else 1] += 1
        admitted: dict[str, int] = {}
        for keys in view.admitted_by_cq.values():
            for key in keys:
                rec = state.workloads.get(key)
                if rec is not None and rec.workload.queue_name is not None:
                    lq = f"{rec.workload.namespace}/{rec.workload.queue_name}"
                    admitted[lq] = admitted.get(lq, 0) + 1

        def lab(ns: str, name: str) -> str:
            return f'replica_role="{role}",name="{_esc(name)}",namespace="{_esc(ns)}"'

        out: list[str] = []

        def head(name: str, kind: str, text: str) -> None:
            out.append(f"# HELP {name} {text}\n# TYPE {name} {kind}\n")

        head("kueue_local_queue_pending_workloads", "gauge", "Pending workloads per LocalQueue, by status")
        for key in sorted(state.local_queues):
            ns, _, name = key.partition("/")
            active, inadmissible = pending.get(key, (0, 0))
            out.append(f'kueue_local_queue_pending_workloads{{{lab(ns, name)},status="active"}} {active}\n')
            out.append(f'kueue_local_queue_pending_workloads{{{lab(ns, name)},status="inadmissible"}} {inadmissible}\n')
        for family, text in (
            ("kueue_local_queue_admitted_active_workloads", "Admitted workloads that hold quota now, per LocalQueue"),
            ("kueue_local_queue_reserving_active_workloads", "Workloads reserving quota now, per LocalQueue"),
        ):
            head(family, "gauge", text)
            for key in sorted(state.local_queues):
                ns, _, name = key.partition("/")
                out.append(f"{family}{{{lab(ns, name)}}} {admitted.get(key, 0)}\n")
        for family, table, text in (
            ("kueue_local_queue_admitted_workloads_total", fm.lq_admitted, "Workloads admitted, per LocalQueue"),
            ("kueue_local_queue_quota_reserved_workloads_total", fm.lq_admitted, "Workloads that reserved quota"),
            ("kueue_local_queue_finished_workloads_total", fm.lq_finished, "Admitted workloads that finished"),
        ):
            head(family, "counter", text)
            for (ns, name, pc), n in sorted(table.items()):
                out.append(f'{family}{{{lab(ns, name)},priority_class="{_esc(pc)}"}} {n}\n')
        head("kueue_local_queue_evicted_workloads_total", "counter", "Workloads evicted, per LocalQueue")
        for (ns, name, why, cause, pc), n in sorted(fm.lq_evicted.items()):
            out.append(
                f'kueue_local_queue_evicted_workloads_total{{{lab(ns, name)},reason="{_esc(why)}",'
                f'underlying_cause="{_esc(cause)}",priority_class="{_esc(pc)}"}} {n}\n'
            )
        for family, text in (
            ("kueue_local_queue_admission_wait_time_seconds", "From creation or requeue to admission, per LocalQueue"),
            ("kueue_local_queue_quota_reserved_wait_time_seconds", "From creation or requeue to quota reservation"),
        ):
            head(family, "histogram", text)
            for (ns, name, pc), h in sorted(fm.lq_wait.items()):
                out.append(self._hist(family, f'{lab(ns, name)},priority_class="{_esc(pc)}"', h))
        return "".join(out)

    def _global(self, fm: FoldedMetrics) -> str:
        out = [
            "# HELP admitd_events_appended_total Events in the log, by type (folded from the log)\n"
            "# TYPE admitd_events_appended_total counter\n"
        ]
        out += [
            f'admitd_events_appended_total{{type="{_esc(t)}"}} {n}.0\n' for t, n in sorted(fm.events_by_type.items())
        ]
        out.append("# HELP admitd_log_last_seq The seq of the newest event folded\n# TYPE admitd_log_last_seq gauge\n")
        out.append(f"admitd_log_last_seq {fm.state.seq}.0\n")
        out.append(
            "# HELP admitd_log_last_event_timestamp_seconds recorded_at of the newest event (virtual seconds in a "
            "simulation)\n# TYPE admitd_log_last_event_timestamp_seconds gauge\n"
        )
        out.append(f"admitd_log_last_event_timestamp_seconds {_num((fm.last_recorded_at or 0) / 1000)}\n")
        out.append(
            "# HELP admitd_actuation_failures_total Failed actuations recorded in the log, by permanence\n"
            "# TYPE admitd_actuation_failures_total counter\n"
        )
        out += [
            f'admitd_actuation_failures_total{{permanent="{k}"}} {fm.actuation_failures.get(k, 0)}.0\n'
            for k in ("false", "true")
        ]
        unrouted: dict[str, int] = {}
        for p in fm.state.view().pending_unrouted.values():
            r = p.last_reason.kind.value if p.last_reason is not None else ""
            unrouted[r] = unrouted.get(r, 0) + 1
        out.append(
            "# HELP admitd_unrouted_pending_workloads Pending workloads whose LocalQueue or ClusterQueue is missing\n"
            "# TYPE admitd_unrouted_pending_workloads gauge\n"
        )
        out += [f'admitd_unrouted_pending_workloads{{reason="{_esc(r)}"}} {n}.0\n' for r, n in sorted(unrouted.items())]
        if fm.replay_seconds is not None and not _STARTUP_REPLAY.is_set():
            REPLAY_DURATION.set(fm.replay_seconds)
        return "".join(out)


def log_file_figures(reader: LogReader, fm: FoldedMetrics, now_ms: int | None = None) -> list[str]:
    """admitd_log_size_bytes and the snapshot age, read from the file itself."""
    path = Path(reader.path)
    size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    out = [
        "# HELP admitd_log_size_bytes The event log file, WAL included\n# TYPE admitd_log_size_bytes gauge\n",
        f"admitd_log_size_bytes {size}.0\n",
    ]
    snap = reader.newest_snapshot_info()
    out.append(
        "# HELP admitd_snapshot_age_events Events after the newest snapshot (what a restart replays)\n"
        "# TYPE admitd_snapshot_age_events gauge\n"
        "# HELP admitd_snapshot_age_seconds Wall time since the newest snapshot was written\n"
        "# TYPE admitd_snapshot_age_seconds gauge\n"
    )
    if snap is not None:
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        out.append(f"admitd_snapshot_age_events {max(0, fm.state.seq - snap[0])}.0\n")
        out.append(f"admitd_snapshot_age_seconds {_num(max(0, now - snap[1]) / 1000)}\n")
    return out


class MetricsNotReady(Exception):
    """The log file exists but its writer has not created the schema yet: a scrape says so (HTTP 503) and the
    next one tries again."""


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _being_created(path: Path) -> bool:
    """An empty file, a SQLite header still being written, or a SQLite file with no schema and no application id:
    what a writer's log looks like before its first migration commits."""
    try:
        with path.open("rb") as f:
            head = f.read(100)
    except OSError:
        return False
    if len(head) < 100:
        return _SQLITE_MAGIC.startswith(head[:16])
    return head.startswith(_SQLITE_MAGIC) and head[68:72] == bytes(4) and head[40:44] == bytes(4)


class LogMetrics:
    """Metrics of one log file, folded on demand: every scrape first folds what was appended since the last one.
    Thread-safe (the HTTP server's threads share it). A log its writer is still creating raises MetricsNotReady."""

    def __init__(self, path: Path, replica_role: str = "leader", *, local_queue_metrics: bool = False) -> None:
        self.path = path
        self.fm = FoldedMetrics()
        self.renderer = Renderer(replica_role, local_queue_metrics=local_queue_metrics)
        self._reader: LogReader | None = None
        self._lock = threading.Lock()

    def render(self) -> bytes:
        with self._lock:
            if self._reader is None:
                if not self.path.exists():
                    return generate_latest(LIVE)
                try:
                    self._reader = LogReader(self.path)
                except NotAnEventLog as e:
                    if _being_created(self.path):
                        raise MetricsNotReady(
                            f"not ready: {self.path} is being created by its writer (no schema yet); scrape again"
                        ) from e
                    raise
            reader = self._reader
            self.fm.follow(reader)
            folded = self.renderer.render(self.fm, lambda: log_file_figures(reader, self.fm))
            return folded + generate_latest(LIVE)

    def close(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None


def serve(address: tuple[str, int], render: Callable[[], bytes]) -> http.server.ThreadingHTTPServer:
    """Serve `render()` at /metrics in a daemon thread; stop it with `.shutdown()` and `.server_close()`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served")
                return
            try:
                body = render()
            except MetricsNotReady as e:
                self.send_error(503, str(e))
                return
            except Exception as e:  # a scrape must answer, and say why it failed
                self.send_error(500, f"rendering metrics failed: {e}")
                return
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every 15 s would drown the simulator's output

    server = http.server.ThreadingHTTPServer(address, Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="admitd-metrics", daemon=True).start()
    return server


LOCAL_QUEUE_FAMILIES = (
    "kueue_local_queue_pending_workloads",
    "kueue_local_queue_admitted_active_workloads",
    "kueue_local_queue_reserving_active_workloads",
    "kueue_local_queue_admitted_workloads_total",
    "kueue_local_queue_quota_reserved_workloads_total",
    "kueue_local_queue_finished_workloads_total",
    "kueue_local_queue_evicted_workloads_total",
    "kueue_local_queue_admission_wait_time_seconds",
    "kueue_local_queue_quota_reserved_wait_time_seconds",
)
"""What `Renderer(local_queue_metrics=True)` adds (`admitd run --local-queue-metrics`)."""


def metric_names() -> set[str]:
    """Every metric family name admitd can expose (for checking dashboards and alert rules against)."""
    names = {f.name for f in PER_QUEUE} | set(LOCAL_QUEUE_FAMILIES)
    names |= {
        "admitd_events_appended_total",
        "admitd_log_last_seq",
        "admitd_log_last_event_timestamp_seconds",
        "admitd_actuation_failures_total",
        "admitd_unrouted_pending_workloads",
        "admitd_log_size_bytes",
        "admitd_snapshot_age_events",
        "admitd_snapshot_age_seconds",
    }
    for metric in LIVE.collect():
        names.add(metric.name + ("_total" if metric.type == "counter" else ""))
    return names
