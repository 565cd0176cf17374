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
text of each (metric, ClusterQueue) and (metric, LocalQueue) is kept and rendered again only when an event touched
that queue, and `admitd run` does that rendering in a background thread as events come (`LogMetrics(follow_every=
...)`), so that a scrape joins kept text (5 ms for 1,000 ClusterQueues, bench/RESULTS.md). One `Renderer` per
`FoldedMetrics`: a render consumes the fold's dirty marks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import http.server
import math
import platform
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from daemon.buildinfo import BuildInfo
from daemon.domain import events as ev
from daemon.domain.fairsharing import dominant_resource_share
from daemon.domain.model import (
    ClusterQueue,
    FlavorResource,
    Milli,
    PendingReasonKind,
    ResourceQuota,
    StopPolicy,
    Workload,
)
from daemon.domain.quota import UNLIMITED, Node, QuotaTree
from daemon.domain.state import Phase, State
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
STATUS_SYNC_DELAY = Histogram(
    "admitd_status_sync_delay_seconds",
    "From a change being marked for the cluster (a Workload, a queue's status, an Event) to its write done, by kind "
    "and by the writer's lane (urgent, routine, queues); the linger and retries included",
    ["kind", "lane"],
    buckets=(0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0),
    registry=LIVE,
)
STATUS_BACKLOG = Gauge(
    "admitd_status_backlog", "Objects and Events marked for the cluster and not yet written", registry=LIVE
)
BUILD_INFO = Gauge(
    "admitd_build_info",
    "Always 1; its labels say which admitd runs: the package version, the source commit, the Python version",
    ["version", "commit", "python"],
    registry=LIVE,
)
_WAITING = PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS  # a preemptor waiting: active, as in Kueue
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


def status_synced(kind: str, lane: str, seconds: float) -> None:
    STATUS_SYNC_DELAY.labels(kind=kind, lane=lane).observe(seconds)


def status_backlog_is(backlog: Callable[[], int]) -> None:
    """`admitd_status_backlog` reads `backlog()` at every scrape."""
    STATUS_BACKLOG.set_function(lambda: float(backlog()))


def build_info_is(info: BuildInfo) -> None:
    """`admitd_build_info{version,commit,python} 1` (daemon.buildinfo), set once by `admitd run` at start."""
    BUILD_INFO.labels(version=info.version, commit=info.commit, python=info.python).set(1)


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
        self.state = State(pending_indexes=False)  # the metrics never read the cycle's pending indexes
        self.last_recorded_at: int | None = None
        self._stopped_at_limit = False  # the last `follow` folded exactly its limit (see there)
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
        self.counted_lqs: set[str] = set()  # LocalQueues ("ns/name") named by a counter
        self.lq_active: dict[str, int] = {}  # "ns/name" -> admitted workloads holding quota, by their LocalQueue
        self._lq_of_admitted: dict[str, str] = {}  # workload -> the LocalQueue it was admitted through
        self.cohort_admitted: dict[tuple[str, str], int] = {}  # (cohort, priority_class), every cohort up the tree
        self.dirty: set[tuple[str, str]] = set()  # (cluster queue, group of metrics) changed since the last render
        self.lq_dirty: set[str] = set()  # LocalQueues ("ns/name") whose figures may have changed since then
        self.config_changed = True
        self.replay_seconds: float | None = None

    # --- folding ---

    def follow(self, reader: LogReader, limit: int | None = None) -> int:
        """Fold the events after the last one folded, at most `limit` of them; return how many."""
        n = 0
        decode = codec.decode
        t0 = time.perf_counter()
        first = self.state.seq == 0
        rows = reader.iter_payloads(self.state.seq, chunk=min(limit, 20_000) if limit else 20_000)
        for seq, type_, version, payload in rows:
            self.apply(
                decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=seq), seq
            )
            n += 1
            if n == limit:
                break
        if n != limit and (n or self._stopped_at_limit):
            # At the end of the log: its newest event is the one folded last. Also when this call folded nothing
            # after one that stopped at its limit, which may have been exactly the log's end.
            b = reader.bounds()
            if b is not None:
                self.last_recorded_at = b[3]
        self._stopped_at_limit = n == limit
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

    def _touch_lq(self, key: str) -> None:
        rec = self.state.workloads.get(key)
        if rec is not None and rec.workload.queue_name is not None:
            self.lq_dirty.add(f"{rec.workload.namespace}/{rec.workload.queue_name}")

    def _lq_admitted(self, key: str, wl: Workload) -> None:
        if wl.queue_name is not None:
            lq = f"{wl.namespace}/{wl.queue_name}"
            self._lq_of_admitted[key] = lq
            self.lq_active[lq] = self.lq_active.get(lq, 0) + 1
            self.lq_dirty.add(lq)

    def _lq_released(self, key: str) -> None:
        lq = self._lq_of_admitted.pop(key, None)
        if lq is not None:
            left = self.lq_active[lq] - 1
            if left:
                self.lq_active[lq] = left
            else:
                del self.lq_active[lq]
            self.lq_dirty.add(lq)

    def _cohorts_above(self, cq: str) -> list[str]:
        """The ClusterQueue's cohort and every cohort above it, as configured now (a cycle stops the walk)."""
        q = self.state.cluster_queues.get(cq)
        out: list[str] = []
        name = q.cohort if q is not None else None
        while name and name not in out:
            out.append(name)
            co = self.state.cohorts.get(name)
            name = co.parent if co is not None else None
        return out

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
                        self.counted_lqs.add(f"{wl.namespace}/{wl.queue_name}")
                        self.lq_admitted[lq3] = self.lq_admitted.get(lq3, 0) + 1
                        self.lq_wait.setdefault(lq3, Hist()).observe(max(0, at - since) / 1000)
                    self._lq_admitted(key, wl)
                    for cohort in self._cohorts_above(adm.cluster_queue):
                        c2 = (cohort, label[1])
                        self.cohort_admitted[c2] = self.cohort_admitted.get(c2, 0) + 1
                    self._add_usage(adm.cluster_queue, adm.usage(), 1)
                    self._touch(adm.cluster_queue, "pending", "admitted", "admissions")
            case ev.WorkloadAdopted(workload=key, admission=adm):
                # Admitted by another replica: its quota is in use, but this process admitted nothing.
                rec = state.workloads.get(key)
                if rec is not None and rec.phase is Phase.PENDING:
                    self._queued_at.pop(key, None)
                    self._lq_admitted(key, rec.workload)
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
                        self.counted_lqs.add(f"{lq5[0]}/{lq5[1]}")
                        self.lq_evicted[lq5] = self.lq_evicted.get(lq5, 0) + 1
                    self._add_usage(cq, rec.admission.usage(), -1)
                    self._lq_released(key)
                    self._queued_at[key] = at
                    self._touch(cq, "pending", "admitted", "evictions")
            case ev.JobFinished(job=key, at=at) | ev.JobDeleted(job=key, at=at):
                rec = state.workloads.get(key)
                if rec is not None:
                    cq = self._cq_of(key)
                    self._touch_lq(key)
                    if rec.phase is Phase.ADMITTED and rec.admission is not None and rec.admitted_at is not None:
                        self._add_usage(rec.admission.cluster_queue, rec.admission.usage(), -1)
                        self._lq_released(key)
                        if isinstance(event, ev.JobFinished):
                            label = (rec.admission.cluster_queue, priority_class_of(rec.workload))
                            if label not in self.finished:
                                self.priority_classes.setdefault(label[0], set()).add(label[1])
                                self.counted_queues.add(label[0])
                            self.finished[label] = self.finished.get(label, 0) + 1
                            if rec.workload.queue_name is not None:
                                lq3 = (rec.workload.namespace, rec.workload.queue_name, label[1])
                                self.counted_lqs.add(f"{lq3[0]}/{lq3[1]}")
                                self.lq_finished[lq3] = self.lq_finished.get(lq3, 0) + 1
                            self.execution.setdefault(label, Hist()).observe(max(0, at - rec.admitted_at) / 1000)
                    if cq is not None:
                        self._touch(cq, "pending", "admitted", "finishes")
                self._queued_at.pop(key, None)
                self._preempt_reason.pop(key, None)
            case ev.WorkloadPending(workload=key, cluster_queue=cq):
                self._touch_lq(key)
                if cq is not None:
                    self._touch(cq, "pending")
            case ev.ActuationFailed(permanent=permanent):
                k = "true" if permanent else "false"
                self.actuation_failures[k] = self.actuation_failures.get(k, 0) + 1
            case ev.JobObserved(workload=wl):
                self._touch_lq(wl.key)  # the LocalQueue it leaves, if its queue changed
            case ev.JobUnsuspended() | ev.JobSuspended() | ev.ChainBreakAccepted():
                pass
            case ev.PriorityClassObserved() | ev.PriorityClassDeleted() | ev.JobPodsNotCreated():
                pass
            case _:
                self.config_changed = True  # queues, cohorts, flavors, namespaces: every queue may change
        state.apply(event, seq)
        if isinstance(event, ev.JobObserved | ev.WorkloadEvicted):
            self._touch_lq(event.workload.key if isinstance(event, ev.JobObserved) else event.workload)
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
    if math.isnan(v):
        return "NaN"
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

    def head(self) -> bytes:
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.type}\n".encode()


PER_QUEUE: tuple[Family, ...] = (
    Family("kueue_pending_workloads", "gauge", "Pending workloads per ClusterQueue, by status (active/inadmissible)"),
    Family("kueue_unadmitted_workloads", "gauge", "Pending workloads per ClusterQueue, by the reason they wait"),
    Family("kueue_admitted_active_workloads", "gauge", "Admitted workloads that hold quota now"),
    Family("kueue_reserving_active_workloads", "gauge", "Workloads reserving quota now (admitd: the admitted ones)"),
    Family("kueue_cluster_queue_status", "gauge", "1 for the ClusterQueue's status (pending/active/terminated)"),
    Family("kueue_cluster_queue_info", "gauge", "1 per ClusterQueue, with its parent and root cohort"),
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

COHORT_FAMILIES: tuple[Family, ...] = (
    Family("kueue_cohort_info", "gauge", "1 per Cohort, with its parent and root cohort"),
    Family(
        "kueue_cohort_subtree_quota",
        "gauge",
        "Nominal quota of the Cohort's subtree (what it holds for its "
        "members, lending limits applied), per flavor and resource",
    ),
    Family(
        "kueue_cohort_subtree_resource_reservations",
        "gauge",
        "Quota reserved in the Cohort's subtree beyond what its members hold locally, per flavor and resource",
    ),
    Family("kueue_cohort_subtree_admitted_active_workloads", "gauge", "Admitted workloads in the Cohort's subtree"),
    Family("kueue_cohort_subtree_admitted_workloads_total", "counter", "Workloads admitted in the Cohort's subtree"),
)
"""Kueue's cohort metrics that the fold can answer (the weighted shares are in FAIR_SHARING_FAMILIES)."""

FAIR_SHARING_FAMILIES: tuple[Family, ...] = (
    Family(
        "kueue_cluster_queue_weighted_share",
        "gauge",
        "The largest ratio, over the resources the ClusterQueue provides, of its usage above nominal quota to what the "
        "cohort can lend, in thousandths, divided by its weight; 0 below nominal quota, NaN when a queue of weight 0 "
        "borrows",
    ),
    Family(
        "kueue_cohort_weighted_share",
        "gauge",
        "The same ratio for a Cohort within its parent; 0 for a root cohort or below nominal quota, NaN when a cohort "
        "of weight 0 borrows",
    ),
)
"""Kueue's fair-sharing shares, rendered when fair sharing is on (Kueue reports them only then)."""


def weighted_share(node: Node) -> float:
    """Kueue's PreciseWeightedShare of a ClusterQueue or Cohort node with usage loaded: the dominant resource share
    (thousandths) over the weight; NaN for a weight of 0 that borrows (Kueue: +Inf, reported as NaN)."""
    drs = dominant_resource_share(node)
    infinite, ratio = drs.key
    return math.nan if infinite else float(ratio)


LOCAL_QUEUE: tuple[Family, ...] = (
    Family("kueue_local_queue_pending_workloads", "gauge", "Pending workloads per LocalQueue, by status"),
    Family(
        "kueue_local_queue_admitted_active_workloads", "gauge", "Admitted workloads that hold quota now, per LocalQueue"
    ),
    Family("kueue_local_queue_reserving_active_workloads", "gauge", "Workloads reserving quota now, per LocalQueue"),
    Family("kueue_local_queue_admitted_workloads_total", "counter", "Workloads admitted, per LocalQueue"),
    Family("kueue_local_queue_quota_reserved_workloads_total", "counter", "Workloads that reserved quota"),
    Family("kueue_local_queue_finished_workloads_total", "counter", "Admitted workloads that finished"),
    Family("kueue_local_queue_evicted_workloads_total", "counter", "Workloads evicted, per LocalQueue"),
    Family(
        "kueue_local_queue_admission_wait_time_seconds",
        "histogram",
        "From creation or requeue to admission, per LocalQueue",
    ),
    Family(
        "kueue_local_queue_quota_reserved_wait_time_seconds",
        "histogram",
        "From creation or requeue to quota reservation",
    ),
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
        "kueue_cluster_queue_info",
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

_QR_WAIT = b"kueue_quota_reserved_wait_time_seconds"
_LQ_WAIT = b"kueue_local_queue_admission_wait_time_seconds"
_LQ_QR_WAIT = b"kueue_local_queue_quota_reserved_wait_time_seconds"
_USAGE = b"kueue_cluster_queue_resource_usage"
_RESERVATION = b"kueue_cluster_queue_resource_reservation"


def _rename(text: bytes, old: bytes, new: bytes) -> bytes:
    """`text`, lines of the family `old`, as the same lines of the family `new` (a name is only ever at the start
    of a line: newlines inside label values are escaped)."""
    if not text:
        return text
    assert text.startswith(old), (text[:80], old)
    return new + text[len(old) :].replace(b"\n" + old, b"\n" + new)


class Renderer:
    """The exposition text of a `FoldedMetrics`. Each family is kept as a list of byte strings, one per
    ClusterQueue (or LocalQueue) in name order after the family's header; an event marks (queue, group) dirty
    (`FoldedMetrics.dirty`, `lq_dirty`) and a render replaces only those queues' entries, so a scrape costs the
    changed queues' text plus one join. A configuration change, or a queue appearing or going, renders all again.
    Rendering everything from scratch gives the same bytes (tests compare the two after random events)."""

    def __init__(
        self, replica_role: str = "leader", *, local_queue_metrics: bool = False, fair_sharing: bool = False
    ) -> None:
        self.role = _esc(replica_role)
        self.local_queue_metrics = local_queue_metrics
        self.fair_sharing = fair_sharing  # Kueue's *_weighted_share families (set before the first render)
        self._names: set[str] = set()
        self._pos: dict[str, int] = {}  # cluster queue -> its index in every family's list (0 is the header)
        self._pieces: dict[str, list[bytes]] = {}  # family -> [header, text of queue 1, text of queue 2, ...]
        self._lq_names: set[str] = set()
        self._lq_pos: dict[str, int] = {}
        self._lq_pieces: dict[str, list[bytes]] = {}
        self._labels: dict[tuple[str, str], str] = {}  # (cluster queue, priority class) -> label set ("" for none)
        self._inactive: set[str] = set()  # ClusterQueues that cannot admit (unknown flavor, cohort cycle)
        self._tree: QuotaTree | None = None
        self._in_cycles: set[str] = set()
        self._cq_objects: Mapping[str, ClusterQueue] = {}
        self._cohorts = b""
        self._hist_templates: dict[tuple[str, str], bytes] = {}  # (family, labels) -> its lines with %-slots
        self._hist_text: dict[tuple[str, str], tuple[int, bytes]] = {}  # (family, labels) -> (observations, text)
        self._twin_text: dict[tuple[str, str], tuple[bytes, bytes]] = {}  # (family, labels) -> (text, its twin's)
        self._resource_labels: dict[str, tuple[ClusterQueue, list[tuple[FlavorResource, str, ResourceQuota]]]] = {}

    def render(
        self, fm: FoldedMetrics, reader_info: Callable[[], Iterable[str]] | None = None, *, extra: bytes = b""
    ) -> bytes:
        """The whole exposition: what `refresh` leaves, joined, with the global figures, `reader_info`'s and
        `extra` (the live instruments) at the end."""
        self.refresh(fm)
        out: list[bytes] = []
        for group_families in GROUPS.values():
            for fam_name in group_families:
                out += self._pieces[fam_name]
        out.append(self._cohorts)
        out.append(self._global(fm).encode())
        if self.local_queue_metrics:
            for f in LOCAL_QUEUE:
                out += self._lq_pieces[f.name]
        if reader_info is not None:
            out.append("".join(reader_info()).encode())
        out.append(extra)
        return b"".join(out)

    def refresh(self, fm: FoldedMetrics) -> None:
        """Render again what changed since the last call (the queues `fm` marked dirty, all after a configuration
        change): the work of a render minus the join, so that a process can do it as events arrive rather than
        when it is scraped (`LogMetrics(follow_every=...)`)."""
        state = fm.state
        config = fm.config_changed or self._tree is None  # another renderer may have seen the change first
        if config:
            self._tree = QuotaTree.build(state.cluster_queues, state.cohorts, state.flavors, state.rejected)
            self._inactive = set(self._tree.inactive)
            roots = {r.name for r in self._tree.roots}
            self._in_cycles = {n for n, c in self._tree.cohorts.items() if c.parent is None and n not in roots}
            self._cq_objects = state.cluster_queues
            fm.config_changed = False
        names = fm.counted_queues.union(state.cluster_queues)
        ctx = _Context(fm, self.role)
        usage_changed = config
        if config or names != self._names:
            if self._names - names:  # rare (a queue deleted): start the label and text caches afresh
                self._labels.clear()
                self._hist_text.clear()
                self._twin_text.clear()
                self._hist_templates.clear()
                self._resource_labels.clear()
            self._names = names
            order = sorted(names)
            self._pos = {n: i for i, n in enumerate(order, 1)}
            self._pieces = {f.name: [f.head(), *(b"" for _ in order)] for f in PER_QUEUE}
            todo: Iterable[tuple[str, str]] = [(n, g) for n in order for g in GROUPS]
        else:
            todo = [(n, g) for n, g in fm.dirty if n in names]
        fm.dirty.clear()
        pieces, pos = self._pieces, self._pos
        for name, group in todo:
            at = pos[name]
            texts = self._group(ctx, name, group)
            for fam_name in GROUPS[group]:
                pieces[fam_name][at] = texts.get(fam_name, b"")
            usage_changed = usage_changed or group == "admitted"
        if usage_changed:
            self._cohorts = self._cohort_text(ctx)
        if self.local_queue_metrics:
            self._local_queues(ctx, config)
        else:
            fm.lq_dirty.clear()

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

    def _hist(self, name: str, labels: str, h: Hist) -> bytes:
        """A histogram's lines; rendered again only when it has new observations (a queue's fragment is dirty
        when any of its figures changed, most of its histograms usually did not)."""
        key = (name, labels)
        cached = self._hist_text.get(key)
        if cached is not None and cached[0] == h.n:
            return cached[1]
        template = self._hist_templates.get(key)
        if template is None:
            lab = labels.replace("%", "%%")
            text = "".join(f'{name}_bucket{{{lab},le="{le}"}} %d\n' for le in _LES)
            text += f"{name}_sum{{{lab}}} %s\n{name}_count{{{lab}}} %d\n"
            template = self._hist_templates[key] = text.encode()
        out = template % (*h.counts, h.n, _num(h.total).encode(), h.n)
        self._hist_text[key] = (h.n, out)
        return out

    def _hist_twins(self, name: str, twin: bytes, labels: str, h: Hist) -> tuple[bytes, bytes]:
        """`_hist`'s text and the same lines under the family `twin` (same observations), both kept until the
        histogram has new observations."""
        text = self._hist(name, labels, h)
        cached = self._twin_text.get((name, labels))
        if cached is not None and cached[0] is text:
            return text, cached[1]
        renamed = _rename(text, name.encode(), twin)
        self._twin_text[(name, labels)] = (text, renamed)
        return text, renamed

    def _group(self, ctx: _Context, name: str, group: str) -> dict[str, bytes]:
        fm, role = ctx.fm, self.role
        state = fm.state
        base = self._label(name, None)
        f: dict[str, bytes] = {}
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
            ).encode()
            f["kueue_unadmitted_workloads"] = "".join(
                f'kueue_unadmitted_workloads{{{base},reason="{r}",underlying_cause=""}} {n}\n'
                for r, n in sorted(reasons.items())
            ).encode()
        elif group == "admitted" and cq is not None:
            admitted = len(ctx.view.admitted_by_cq.get(name, {}))
            f["kueue_admitted_active_workloads"] = f"kueue_admitted_active_workloads{{{base}}} {admitted}\n".encode()
            f["kueue_reserving_active_workloads"] = f"kueue_reserving_active_workloads{{{base}}} {admitted}\n".encode()
            usage = fm.usage.get(name, {})
            lines = "".join(
                f"kueue_cluster_queue_resource_usage{{{lab}}} {_num(usage.get(fr, 0) / 1000)}\n"
                for fr, lab, _ in self._resources(cq)
            ).encode()
            f["kueue_cluster_queue_resource_usage"] = lines
            f["kueue_cluster_queue_resource_reservation"] = _rename(lines, _USAGE, _RESERVATION)
        elif group == "config" and cq is not None:
            status = "pending" if name in self._inactive or cq.stop_policy is not StopPolicy.NONE else "active"
            f["kueue_cluster_queue_status"] = "".join(
                f'kueue_cluster_queue_status{{{base},status="{s}"}} {1 if s == status else 0}\n'
                for s in ("pending", "active", "terminated")
            ).encode()
            parent, root = self._parent_and_root(name, is_cq=True)
            f["kueue_cluster_queue_info"] = (
                f'kueue_cluster_queue_info{{{base},parent_cohort="{_esc(parent)}",root_cohort="{_esc(root)}"}} 1\n'
            ).encode()
            nominal, borrowing, lending = [], [], []
            for _, lab, rq in self._resources(cq):
                nominal.append(f"kueue_cluster_queue_nominal_quota{{{lab}}} {_num(_amount(rq.nominal))}\n")
                bl = math.inf if rq.borrowing_limit is None else _amount(rq.borrowing_limit)
                ll = math.inf if rq.lending_limit is None else _amount(rq.lending_limit)
                borrowing.append(f"kueue_cluster_queue_borrowing_limit{{{lab}}} {_num(bl)}\n")
                lending.append(f"kueue_cluster_queue_lending_limit{{{lab}}} {_num(ll)}\n")
            f["kueue_cluster_queue_nominal_quota"] = "".join(nominal).encode()
            f["kueue_cluster_queue_borrowing_limit"] = "".join(borrowing).encode()
            f["kueue_cluster_queue_lending_limit"] = "".join(lending).encode()
        elif group == "admissions":
            adm, qr, wait, qrw = [], [], [], []
            for pc in ctx.pcs(name):
                label = (name, pc)
                lab = self._label(name, pc)
                n = fm.admitted.get(label)
                if n is not None:
                    adm.append(f"kueue_admitted_workloads_total{{{lab}}} {n}\n")
                    qr.append(f"kueue_quota_reserved_workloads_total{{{lab}}} {n}\n")
                h = fm.wait.get(label)
                if h is not None:
                    # The same observations (admitd reserves quota and admits at once).
                    text, twin = self._hist_twins("kueue_admission_wait_time_seconds", _QR_WAIT, lab, h)
                    wait.append(text)
                    qrw.append(twin)
            f["kueue_admitted_workloads_total"] = "".join(adm).encode()
            f["kueue_quota_reserved_workloads_total"] = "".join(qr).encode()
            f["kueue_admission_wait_time_seconds"] = b"".join(wait)
            f["kueue_quota_reserved_wait_time_seconds"] = b"".join(qrw)
        elif group == "finishes":
            fin: list[str] = []
            exe: list[bytes] = []
            for pc in ctx.pcs(name):
                label = (name, pc)
                lab = self._label(name, pc)
                n = fm.finished.get(label)
                if n is not None:
                    fin.append(f"kueue_finished_workloads_total{{{lab}}} {n}\n")
                h = fm.execution.get(label)
                if h is not None:
                    exe.append(self._hist("kueue_execution_time_seconds", lab, h))
            f["kueue_finished_workloads_total"] = "".join(fin).encode()
            f["kueue_execution_time_seconds"] = b"".join(exe)
        elif group == "evictions":
            f["kueue_evicted_workloads_total"] = "".join(
                f'kueue_evicted_workloads_total{{{base},reason="{_esc(k[1])}",underlying_cause="{_esc(k[2])}",'
                f'priority_class="{_esc(k[3])}"}} {v}\n'
                for k, v in sorted(ctx.evicted(name))
            ).encode()
        elif group == "preemptions":
            f["kueue_preempted_workloads_total"] = "".join(
                f'kueue_preempted_workloads_total{{replica_role="{role}",preempting_cluster_queue="{_esc(name)}",'
                f'reason="{_esc(k[1])}"}} {v}\n'
                for k, v in sorted(ctx.preempted(name))
            ).encode()
        return f

    def _parent_and_root(self, name: str, *, is_cq: bool) -> tuple[str, str]:
        """Kueue's parent_cohort and root_cohort labels: "" where there is none; a cohort in or under a cycle of
        cohorts has no root, a ClusterQueue in such a cohort has its configured cohort as parent and no root."""
        tree = self._tree
        node = None if tree is None else (tree.cqs if is_cq else tree.cohorts).get(name)
        if node is None:
            return "", ""
        if node.parent is not None:
            return node.parent.name, node.root().name
        if is_cq:
            cq = self._cq_objects.get(name)
            return (cq.cohort or "" if cq is not None else ""), ""
        return "", ("" if name in self._in_cycles else name)

    def _cohort_text(self, ctx: _Context) -> bytes:
        """Kueue's kueue_cohort_* for every cohort (named by a Cohort object, a ClusterQueue or a parent), from the
        quota tree of the configuration with the fold's usage (`QuotaTree.load_usage`, as the cycle sees it)."""
        fm, tree, role = ctx.fm, self._tree, self.role
        assert tree is not None  # built by the first render (config_changed starts True)
        tree.load_usage(fm.usage)
        active: dict[str, int] = {}
        for cq_name, wls in ctx.view.admitted_by_cq.items():
            node = tree.cqs.get(cq_name)
            if node is not None and wls:
                for up in node.path_to_root():
                    active[up.name] = active.get(up.name, 0) + len(wls)
        info, quota, reserved, counts = [], [], [], []
        for name in sorted(tree.cohorts):
            node = tree.cohorts[name]
            lab = f'replica_role="{role}",cohort="{_esc(name)}"'
            parent, root = self._parent_and_root(name, is_cq=False)
            info.append(f'kueue_cohort_info{{{lab},parent_cohort="{_esc(parent)}",root_cohort="{_esc(root)}"}} 1\n')
            for fr in sorted(node.subtree.keys() | node.usage.keys()):
                frl = f'{lab},flavor="{_esc(fr[0])}",resource="{_esc(fr[1])}"'
                quota.append(f"kueue_cohort_subtree_quota{{{frl}}} {_num(_amount(node.subtree.get(fr, 0)))}\n")
                reserved.append(
                    f"kueue_cohort_subtree_resource_reservations{{{frl}}} {_num(node.usage.get(fr, 0) / 1000)}\n"
                )
            counts.append(f"kueue_cohort_subtree_admitted_active_workloads{{{lab}}} {active.get(name, 0)}\n")
        totals = [
            f'kueue_cohort_subtree_admitted_workloads_total{{replica_role="{role}",cohort="{_esc(co)}",'
            f'priority_class="{_esc(pc)}"}} {n}\n'
            for (co, pc), n in sorted(fm.cohort_admitted.items())
        ]
        out = []
        for fam, lines in zip(COHORT_FAMILIES, (info, quota, reserved, counts, totals), strict=True):
            out.append(fam.head())
            out.append("".join(lines).encode())
        if self.fair_sharing:  # a share moves with any usage in its tree: rendered with the cohorts, as often
            cq_shares = []
            for cq_name in sorted(tree.cqs):
                cq = self._cq_objects.get(cq_name)
                cohort = _esc(cq.cohort or "") if cq is not None else ""
                lab = f'replica_role="{role}",cluster_queue="{_esc(cq_name)}",cohort="{cohort}"'
                cq_shares.append(
                    f"kueue_cluster_queue_weighted_share{{{lab}}} {_num(weighted_share(tree.cqs[cq_name]))}\n"
                )
            cohort_shares = [
                f'kueue_cohort_weighted_share{{replica_role="{role}",cohort="{_esc(name)}"}} '
                f"{_num(weighted_share(tree.cohorts[name]))}\n"
                for name in sorted(tree.cohorts)
            ]
            for fam, lines in zip(FAIR_SHARING_FAMILIES, (cq_shares, cohort_shares), strict=True):
                out.append(fam.head())
                out.append("".join(lines).encode())
        return b"".join(out)

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

    def _local_queues(self, ctx: _Context, config: bool) -> None:
        """Kueue's kueue_local_queue_* that the fold can answer (off by default, as in Kueue), kept like the
        ClusterQueue families: one entry per LocalQueue, rendered again when the fold marked it (`lq_dirty`)."""
        fm = ctx.fm
        state = fm.state
        names = fm.counted_lqs.union(state.local_queues)
        if config or names != self._lq_names:
            self._lq_names = names
            order = sorted(names)
            self._lq_pos = {n: i for i, n in enumerate(order, 1)}
            self._lq_pieces = {f.name: [f.head(), *(b"" for _ in order)] for f in LOCAL_QUEUE}
            dirty: set[str] = names
        else:
            dirty = fm.lq_dirty & names
        fm.lq_dirty.clear()
        if not dirty:
            return
        # Pending by status, walking only the pending lists of the ClusterQueues that hold dirty LocalQueues.
        pending: dict[str, list[int]] = {lq: [0, 0] for lq in dirty}
        index = ctx.view.pending_index
        cqs = (
            {cq for cq, idx in index.items() if not dirty.isdisjoint(idx.local_queues)}
            if index is not None and len(dirty) < len(names)
            else ctx.view.pending_by_cq.keys()
        )
        for cq in cqs:
            for p in ctx.view.pending_by_cq.get(cq, ()):
                counts = pending.get(p.local_queue)
                if counts is not None:
                    counts[0 if p.last_reason is None or p.last_reason.kind is _WAITING else 1] += 1
        by_lq: dict[str, list[tuple[str, tuple[Any, ...], object]]] = {}
        for table_name, table in (
            ("admitted", fm.lq_admitted),
            ("finished", fm.lq_finished),
            ("evicted", fm.lq_evicted),
            ("wait", fm.lq_wait),
        ):
            for key, v in table.items():
                lq = f"{key[0]}/{key[1]}"
                if lq in dirty:
                    by_lq.setdefault(lq, []).append((table_name, key[2:], v))
        role, pieces, pos = self.role, self._lq_pieces, self._lq_pos
        for lq in dirty:
            lab = self._labels.get(("\0lq", lq))
            if lab is None:
                ns, _, name = lq.partition("/")
                lab = self._labels[("\0lq", lq)] = f'replica_role="{role}",name="{_esc(name)}",namespace="{_esc(ns)}"'
            at = pos[lq]
            if lq in state.local_queues:
                active, inadmissible = pending[lq]
                held = fm.lq_active.get(lq, 0)
                pieces["kueue_local_queue_pending_workloads"][at] = (
                    f'kueue_local_queue_pending_workloads{{{lab},status="active"}} {active}\n'
                    f'kueue_local_queue_pending_workloads{{{lab},status="inadmissible"}} {inadmissible}\n'
                ).encode()
                pieces["kueue_local_queue_admitted_active_workloads"][at] = (
                    f"kueue_local_queue_admitted_active_workloads{{{lab}}} {held}\n".encode()
                )
                pieces["kueue_local_queue_reserving_active_workloads"][at] = (
                    f"kueue_local_queue_reserving_active_workloads{{{lab}}} {held}\n".encode()
                )
            else:
                for fam in LOCAL_QUEUE[:3]:
                    pieces[fam.name][at] = b""
            admitted: list[tuple[str, object]] = []
            finished: list[str] = []
            evicted: list[str] = []
            wait: list[bytes] = []
            qr_wait: list[bytes] = []
            for table_name, rest, val in sorted(by_lq.get(lq, ()), key=lambda t: (t[0], t[1])):
                if table_name == "admitted":
                    admitted.append((f'{lab},priority_class="{_esc(rest[0])}"', val))
                elif table_name == "finished":
                    finished.append(
                        f'kueue_local_queue_finished_workloads_total{{{lab},priority_class="{_esc(rest[0])}"}} {val}\n'
                    )
                elif table_name == "evicted":
                    evicted.append(
                        f'kueue_local_queue_evicted_workloads_total{{{lab},reason="{_esc(rest[0])}",'
                        f'underlying_cause="{_esc(rest[1])}",priority_class="{_esc(rest[2])}"}} {val}\n'
                    )
                else:
                    assert isinstance(val, Hist)
                    text, twin = self._hist_twins(
                        _LQ_WAIT.decode(), _LQ_QR_WAIT, f'{lab},priority_class="{_esc(rest[0])}"', val
                    )
                    wait.append(text)
                    qr_wait.append(twin)
            pieces["kueue_local_queue_admitted_workloads_total"][at] = "".join(
                f"kueue_local_queue_admitted_workloads_total{{{x}}} {v}\n" for x, v in admitted
            ).encode()
            pieces["kueue_local_queue_quota_reserved_workloads_total"][at] = "".join(
                f"kueue_local_queue_quota_reserved_workloads_total{{{x}}} {v}\n" for x, v in admitted
            ).encode()
            pieces["kueue_local_queue_finished_workloads_total"][at] = "".join(finished).encode()
            pieces["kueue_local_queue_evicted_workloads_total"][at] = "".join(evicted).encode()
            pieces["kueue_local_queue_admission_wait_time_seconds"][at] = b"".join(wait)
            pieces["kueue_local_queue_quota_reserved_wait_time_seconds"][at] = b"".join(qr_wait)

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


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_heap_threshold = [0]  # what keep_on_heap set last
_heap_lock = threading.Lock()


def keep_on_heap(nbytes: int) -> bool:
    """Let glibc's malloc serve blocks of `nbytes` (an exposition's size) from its heap and keep them there.

    A scrape builds one bytes object of the whole exposition (41 MB with 1,000 ClusterQueues and their LocalQueues);
    glibc maps a block above its mmap threshold (at most 32 MB) afresh each time and unmaps it when freed, so every
    scrape paid a page fault per 4 KiB of it: 33-38 ms of the 41 MB join against 8 ms from the heap (measured, see
    bench/RESULTS.md). Raising the threshold above the exposition's size, and the trim threshold with it, makes the
    next scrape reuse the previous one's memory; the cost is that much more resident memory. A no-op (False) where
    the C library is not glibc."""
    want = 2 * nbytes
    if want <= max(_heap_threshold[0], 32 * 2**20):
        return True
    with _heap_lock:
        if platform.libc_ver()[0] != "glibc":
            return False
        name = ctypes.util.find_library("c")
        if name is None:
            return False
        libc = ctypes.CDLL(name)
        if libc.mallopt(_M_MMAP_THRESHOLD, want) != 1 or libc.mallopt(_M_TRIM_THRESHOLD, 2 * want) != 1:
            return False
        _heap_threshold[0] = want
        return True


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
    """Metrics of one log file. Thread-safe (the HTTP server's threads share it). A log its writer is still creating
    raises MetricsNotReady.

    Without `follow_every`, folded on demand: every scrape first folds what was appended since the last one and
    renders what it changed. With it, a thread folds new events and renders what they changed every
    `follow_every` seconds, a chunk of events at a time, so a scrape only folds and renders the last moments and
    joins the text; until that thread has caught up with the log once, a scrape is answered "not ready"."""

    CHUNK = 5_000  # events folded per hold of the lock while catching up, so a scrape never waits for a whole fold
    READY_WAIT = 5.0  # seconds a scrape waits for the background fold to catch up before answering "not ready"

    def __init__(
        self,
        path: Path,
        replica_role: str = "leader",
        *,
        local_queue_metrics: bool = False,
        fair_sharing: bool = False,
        follow_every: float | None = None,
    ) -> None:
        self.path = path
        self.fm = FoldedMetrics()
        self.renderer = Renderer(replica_role, local_queue_metrics=local_queue_metrics, fair_sharing=fair_sharing)
        self._reader: LogReader | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._caught_up = threading.Event()
        self._follower: threading.Thread | None = None
        self.follow_error: BaseException | None = None
        if follow_every is not None:
            self._follower = threading.Thread(
                target=self._follow, args=(follow_every,), name="admitd-metrics-fold", daemon=True
            )
        else:
            self._caught_up.set()

    def set_fair_sharing(self, on: bool) -> None:
        """Render Kueue's weighted shares (fair sharing on) or not, from the next scrape on."""
        with self._lock:
            self.renderer.fair_sharing = on
            self.fm.config_changed = True  # the cohort text, which holds them, is rendered again

    def start(self) -> LogMetrics:
        """Start the background fold (with `follow_every`; until then a scrape is "not ready")."""
        if self._follower is not None and not self._follower.is_alive():
            self._follower.start()
        return self

    def _open(self) -> LogReader | None:
        """The reader, opened at the first call that finds the log; None while there is no log file (lock held)."""
        if self._reader is None:
            if not self.path.exists():
                return None
            try:
                self._reader = LogReader(self.path)
            except NotAnEventLog as e:
                if _being_created(self.path):
                    raise MetricsNotReady(
                        f"not ready: {self.path} is being created by its writer (no schema yet); scrape again"
                    ) from e
                raise
        return self._reader

    def _follow(self, every: float) -> None:
        started = time.perf_counter()
        while not self._stop.is_set():
            try:
                with self._lock:
                    reader = self._open()
                    n = self.fm.follow(reader, self.CHUNK) if reader is not None else 0
                    if n < self.CHUNK:
                        self.renderer.refresh(self.fm)
                        if reader is not None and not self._caught_up.is_set():
                            self.fm.replay_seconds = time.perf_counter() - started
                            self._caught_up.set()
            except MetricsNotReady:
                n = 0
            except Exception as e:  # said by every scrape from now on (`render`), rather than lost in a thread
                self.follow_error = e
                return
            if n < self.CHUNK:
                self._stop.wait(every)

    def caught_up(self, timeout: float | None = None) -> bool:
        """Has the log been folded to its end once (always true without `follow_every`)?"""
        return self._caught_up.wait(timeout)

    def render(self) -> bytes:
        if self.follow_error is not None:
            raise RuntimeError(
                f"folding {self.path} for the metrics failed: {self.follow_error}"
            ) from self.follow_error
        if self._follower is not None and self._follower.is_alive() and self.path.exists():
            self._caught_up.wait(self.READY_WAIT)  # a small log is folded by then; a large one answers 503
        with self._lock:
            reader = self._open()
            if reader is None:
                return generate_latest(LIVE)
            if not self._caught_up.is_set():
                raise MetricsNotReady(
                    f"not ready: folding {self.path} for the metrics, at seq {self.fm.state.seq} of "
                    f"{reader.last_seq()}; scrape again"
                )
            self.fm.follow(reader)
            body = self.renderer.render(self.fm, lambda: log_file_figures(reader, self.fm), extra=generate_latest(LIVE))
        keep_on_heap(len(body))
        return body

    def close(self) -> None:
        self._stop.set()
        if self._follower is not None and self._follower.is_alive():
            self._follower.join()
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


LOCAL_QUEUE_FAMILIES = tuple(f.name for f in LOCAL_QUEUE)
"""What `Renderer(local_queue_metrics=True)` adds (`admitd run --local-queue-metrics`)."""


def metric_names() -> set[str]:
    """Every metric family name admitd can expose (for checking dashboards and alert rules against)."""
    names = {f.name for f in (*PER_QUEUE, *COHORT_FAMILIES, *FAIR_SHARING_FAMILIES)} | set(LOCAL_QUEUE_FAMILIES)
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
