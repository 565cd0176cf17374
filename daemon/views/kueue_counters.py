"""Kueue's workload counters and wait-time histograms, folded from the log (kueue-notes.md section 3).

A projection (`views.projection`): it reads the fold's record as of each event. Counters count the whole log from
its first event (a start from a snapshot would have the gauges right but the counters from that seq on), so a
restarted process that follows the log again reports exactly what it reported before. The labels are Kueue's and
bounded: queue, priority class, reason, never a job name.

`dirty`, `lq_dirty` and `config_changed` say what changed since a renderer last looked (`daemon.metrics`): marks for
a cache of rendered text, consumed by it, not figures (`figures()` leaves them out).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.domain import events as ev
from daemon.domain.model import Workload
from daemon.domain.state import Phase, State


def kueue_buckets(count: int) -> tuple[float, ...]:
    """Kueue's `generateExponentialBuckets(count)` (pkg/metrics, v0.17): 1, then 2.5 doubling, `count` in all."""
    return (1.0, *(2.5 * 2**i for i in range(count - 1)))


WAIT_BUCKETS = kueue_buckets(14)
"""1, 2.5, 5 ... 10240 s: Kueue v0.17's buckets of quota_reserved_wait_time_seconds, the LocalQueue wait times and
admitd's execution time."""
ADMISSION_WAIT_BUCKETS = kueue_buckets(16)
"""1, 2.5, 5 ... 40960 s: Kueue v0.17's buckets of kueue_admission_wait_time_seconds (16, not 14)."""


@dataclass(slots=True)
class Hist:
    buckets: tuple[float, ...] = WAIT_BUCKETS
    counts: list[int] = field(default_factory=list)  # cumulative, per bucket
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)

    def observe(self, seconds: float) -> None:
        self.n += 1
        self.total += seconds
        for i, le in enumerate(self.buckets):
            if seconds <= le:
                self.counts[i] += 1


def priority_class_of(wl: Workload) -> str:
    return wl.priority_class or wl.pod_priority_class or ""


class KueueCounters:
    """Counters per ClusterQueue, LocalQueue and Cohort, of the events seen, reading `state` as of each event."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.seq = state.seq
        self.events_by_type: dict[str, int] = {}
        self.admitted: dict[tuple[str, str], int] = {}  # (cluster_queue, priority_class)
        self.finished: dict[tuple[str, str], int] = {}
        self.evicted: dict[tuple[str, str, str, str], int] = {}  # (cq, reason, underlying_cause, priority_class)
        self.preempted: dict[tuple[str, str], int] = {}  # (preempting cq, reason)
        self.actuation_failures: dict[str, int] = {}  # "true" | "false" (permanent)
        self.wait: dict[tuple[str, str], Hist] = {}  # admission wait (ADMISSION_WAIT_BUCKETS)
        self.qr_wait: dict[tuple[str, str], Hist] = {}  # the same waits in quota_reserved_wait's buckets
        self.execution: dict[tuple[str, str], Hist] = {}
        self.priority_classes: dict[str, set[str]] = {}  # cluster queue -> the priority_class labels it has
        self.counted_queues: set[str] = set()  # queues named by a counter (they stay after the queue is deleted)
        self._queued_at: dict[str, int] = {}  # requeue times of evicted workloads (Kueue's wait starts there)
        # LocalQueue counters (Kueue's kueue_local_queue_*, rendered only when enabled, as Kueue's LocalQueueMetrics
        # gate), keyed by (namespace, LocalQueue, ...): folded always, so that enabling them shows the whole log.
        self.lq_admitted: dict[tuple[str, str, str], int] = {}  # (ns, lq, priority_class)
        self.lq_finished: dict[tuple[str, str, str], int] = {}
        self.lq_evicted: dict[tuple[str, str, str, str, str], int] = {}  # (ns, lq, reason, underlying_cause, pc)
        self.lq_wait: dict[tuple[str, str, str], Hist] = {}
        self._preempt_reason: dict[str, str] = {}
        self.counted_lqs: set[str] = set()  # LocalQueues ("ns/name") named by a counter
        self.cohort_admitted: dict[tuple[str, str], int] = {}  # (cohort, priority_class), every cohort up the tree
        self.dirty: set[tuple[str, str]] = set()  # (cluster queue, group of metrics) changed since the last render
        self.lq_dirty: set[str] = set()  # LocalQueues ("ns/name") whose figures may have changed since then
        self.config_changed = True

    def figures(self) -> object:
        def hists(d: dict[tuple[str, ...], Hist]) -> dict[tuple[str, ...], tuple[tuple[int, ...], float, int]]:
            return {k: (tuple(h.counts), h.total, h.n) for k, h in d.items()}

        return {
            "events_by_type": dict(self.events_by_type),
            "admitted": dict(self.admitted),
            "finished": dict(self.finished),
            "evicted": dict(self.evicted),
            "preempted": dict(self.preempted),
            "actuation_failures": dict(self.actuation_failures),
            "wait": hists(self.wait),  # type: ignore[arg-type]
            "qr_wait": hists(self.qr_wait),  # type: ignore[arg-type]
            "execution": hists(self.execution),  # type: ignore[arg-type]
            "priority_classes": {k: sorted(v) for k, v in self.priority_classes.items()},
            "counted_queues": sorted(self.counted_queues),
            "queued_at": dict(self._queued_at),
            "lq_admitted": dict(self.lq_admitted),
            "lq_finished": dict(self.lq_finished),
            "lq_evicted": dict(self.lq_evicted),
            "lq_wait": hists(self.lq_wait),  # type: ignore[arg-type]
            "preempt_reason": dict(self._preempt_reason),
            "counted_lqs": sorted(self.counted_lqs),
            "cohort_admitted": dict(self.cohort_admitted),
        }

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

    def apply(self, event: ev.Event, seq: int) -> None:
        self.seq = seq
        self.events_by_type[event.TYPE] = self.events_by_type.get(event.TYPE, 0) + 1
        state = self.state
        # The most frequent events first (pending reasons, observed jobs, suspensions: 3 in 4 of a busy log): a
        # `match` tries its cases in order, and this runs for every event the recorder appends (bench/bench_fold.py).
        match event:
            case ev.WorkloadPending(workload=key, cluster_queue=cq):
                rec = state.workloads.get(key)
                if rec is not None and rec.workload.queue_name is not None:
                    self.lq_dirty.add(f"{rec.workload.namespace}/{rec.workload.queue_name}")
                if cq is not None:
                    self.dirty.add((cq, "pending"))
            case ev.JobObserved(workload=wl):
                # The queues it leaves (as folded so far) and the ones it joins (as the event says) may change.
                rec = state.workloads.get(wl.key)
                if rec is not None:
                    old_wl = rec.workload
                    old_lq = f"{old_wl.namespace}/{old_wl.queue_name}" if old_wl.queue_name is not None else None
                    if old_lq is not None:
                        self.lq_dirty.add(old_lq)
                    if rec.admission is not None:
                        self.dirty.add((rec.admission.cluster_queue, "pending"))
                    elif old_lq is not None and (via := state.local_queues.get(old_lq)) is not None:
                        self.dirty.add((via.cluster_queue, "pending"))
                if wl.queue_name is not None:
                    lq_key = f"{wl.namespace}/{wl.queue_name}"
                    self.lq_dirty.add(lq_key)
                    lq = state.local_queues.get(lq_key)
                    if lq is not None:
                        self.dirty.add((lq.cluster_queue, "pending"))
            case ev.JobUnsuspended() | ev.JobSuspended() | ev.ChainBreakAccepted():
                pass
            case ev.WorkloadAdmitted(workload=key, at=at, admission=adm):
                rec = state.workloads.get(key)
                if rec is not None and rec.phase is Phase.PENDING:
                    label = (adm.cluster_queue, priority_class_of(rec.workload))
                    if label not in self.admitted:
                        self.priority_classes.setdefault(label[0], set()).add(label[1])
                        self.counted_queues.add(label[0])
                    self.admitted[label] = self.admitted.get(label, 0) + 1
                    since = self._queued_at.pop(key, rec.workload.created_at)
                    waited = max(0, at - since) / 1000
                    self.wait.setdefault(label, Hist(ADMISSION_WAIT_BUCKETS)).observe(waited)
                    self.qr_wait.setdefault(label, Hist()).observe(waited)  # admitd reserves quota and admits at once
                    wl = rec.workload
                    if wl.queue_name is not None:
                        lq3 = (wl.namespace, wl.queue_name, label[1])
                        self.counted_lqs.add(f"{wl.namespace}/{wl.queue_name}")
                        self.lq_admitted[lq3] = self.lq_admitted.get(lq3, 0) + 1
                        self.lq_wait.setdefault(lq3, Hist()).observe(max(0, at - since) / 1000)
                        self.lq_dirty.add(f"{wl.namespace}/{wl.queue_name}")
                    for cohort in self._cohorts_above(adm.cluster_queue):
                        c2 = (cohort, label[1])
                        self.cohort_admitted[c2] = self.cohort_admitted.get(c2, 0) + 1
                    self._touch(adm.cluster_queue, "pending", "admitted", "admissions")
            case ev.WorkloadAdopted(workload=key, admission=adm):
                # Admitted by another replica: its quota is in use, but this process admitted nothing.
                rec = state.workloads.get(key)
                if rec is not None and rec.phase is Phase.PENDING:
                    self._queued_at.pop(key, None)
                    self._touch_lq(key)
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
                self._touch_lq(key)
                if rec is not None and rec.phase is Phase.ADMITTED and rec.admission is not None:
                    cq = rec.admission.cluster_queue
                    label4 = (cq, why, self._preempt_reason.pop(key, ""), priority_class_of(rec.workload))
                    self.evicted[label4] = self.evicted.get(label4, 0) + 1
                    self.counted_queues.add(cq)
                    if rec.workload.queue_name is not None:
                        lq5 = (rec.workload.namespace, rec.workload.queue_name, *label4[1:])
                        self.counted_lqs.add(f"{lq5[0]}/{lq5[1]}")
                        self.lq_evicted[lq5] = self.lq_evicted.get(lq5, 0) + 1
                    self._queued_at[key] = at
                    self._touch(cq, "pending", "admitted", "evictions")
            case ev.JobFinished(job=key, at=at) | ev.JobDeleted(job=key, at=at):
                rec = state.workloads.get(key)
                if rec is not None:
                    cq = self._cq_of(key)
                    self._touch_lq(key)
                    held, admitted_at = rec.admission, rec.admitted_at
                    finished = isinstance(event, ev.JobFinished) and rec.phase is Phase.ADMITTED
                    if finished and held is not None and admitted_at is not None:
                        label = (held.cluster_queue, priority_class_of(rec.workload))
                        if label not in self.finished:
                            self.priority_classes.setdefault(label[0], set()).add(label[1])
                            self.counted_queues.add(label[0])
                        self.finished[label] = self.finished.get(label, 0) + 1
                        if rec.workload.queue_name is not None:
                            lq3 = (rec.workload.namespace, rec.workload.queue_name, label[1])
                            self.counted_lqs.add(f"{lq3[0]}/{lq3[1]}")
                            self.lq_finished[lq3] = self.lq_finished.get(lq3, 0) + 1
                        self.execution.setdefault(label, Hist()).observe(max(0, at - admitted_at) / 1000)
                    if cq is not None:
                        self._touch(cq, "pending", "admitted", "finishes")
                self._queued_at.pop(key, None)
                self._preempt_reason.pop(key, None)
            case ev.ActuationFailed(permanent=permanent):
                k = "true" if permanent else "false"
                self.actuation_failures[k] = self.actuation_failures.get(k, 0) + 1
            case ev.PriorityClassObserved() | ev.PriorityClassDeleted() | ev.JobPodsNotCreated():
                pass
            case _:
                self.config_changed = True  # queues, cohorts, flavors, namespaces: every queue may change
