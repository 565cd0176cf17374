"""Kueue's workload counters and wait-time histograms, folded from the log (kueue-notes.md section 3).

A projection (`views.projection`): it reads the fold's record as of each event. Counters count the whole log from
its first event (a start from a snapshot would have the gauges right but the counters from that seq on), so a
restarted process that follows the log again reports exactly what it reported before. The labels are Kueue's and
bounded: queue, priority class, reason, never a job name.

`dirty`, `lq_dirty` and `config_changed` say what changed since a renderer last looked (`daemon.metrics`): marks for
a cache of rendered text, consumed by it, not figures (`figures()` leaves them out). A ClusterQueue's pending figures
need no mark from a pending reason or an observed job: the renderer reads the state's pending versions for them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import ClassVar

from daemon.domain import events as ev
from daemon.domain.model import Workload
from daemon.domain.state import Phase, State
from daemon.views.dispatch import Spec, Table, bind


def kueue_buckets(count: int) -> tuple[float, ...]:
    """Kueue's `generateExponentialBuckets(count)` (pkg/metrics, v0.17): 1, then 2.5 doubling, `count` in all."""
    return (1.0, *(2.5 * 2**i for i in range(count - 1)))


WAIT_BUCKETS = kueue_buckets(14)
"""1, 2.5, 5 ... 10240 s: Kueue v0.17's buckets of quota_reserved_wait_time_seconds, the LocalQueue wait times and
admitd's execution time."""
ADMISSION_WAIT_BUCKETS = kueue_buckets(16)
"""1, 2.5, 5 ... 40960 s: Kueue v0.17's buckets of kueue_admission_wait_time_seconds (16, not 14)."""
_WAIT_BUCKETS = len(WAIT_BUCKETS)
_ADMISSION_BUCKETS = len(ADMISSION_WAIT_BUCKETS)
assert ADMISSION_WAIT_BUCKETS[:_WAIT_BUCKETS] == WAIT_BUCKETS  # `qr_wait_of` and the LocalQueue waits rely on it
_PENDING = Phase.PENDING
_ADMITTED = Phase.ADMITTED
_FINISHED = ev.JobFinished.TYPE


@dataclass(slots=True)
class Hist:
    """A histogram as Prometheus has it; an observation costs a bisection of the buckets (it is made for every
    admission and finish the recorder appends), the cumulative counts are summed when read."""

    buckets: tuple[float, ...] = WAIT_BUCKETS
    per: list[int] = field(default_factory=list)  # observations per bucket: above the one before, at most this one
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        if not self.per:
            self.per = [0] * len(self.buckets)

    def observe(self, seconds: float) -> None:
        self.n += 1
        self.total += seconds
        i = bisect_left(self.buckets, seconds)  # the first bucket with seconds <= le
        if i < len(self.per):
            self.per[i] += 1

    @property
    def counts(self) -> list[int]:
        """Cumulative, per bucket (`le`)."""
        return list(accumulate(self.per))


def priority_class_of(wl: Workload) -> str:
    return wl.priority_class or wl.pod_priority_class or ""


class KueueCounters:
    """Counters per ClusterQueue, LocalQueue and Cohort, of the events seen, reading `state` as of each event."""

    def __init__(self, state: State, *, lq_marks: bool = True) -> None:
        """`lq_marks`: keep `lq_dirty` (a renderer of the LocalQueue families reads it; without them nothing does,
        and marking a LocalQueue at each pending reason was a tenth of the counters' cost per event)."""
        self.state = state
        self.lq_marks = lq_marks
        self._by_type: dict[str, int] = {}  # `events_by_type`, counted by `apply`
        self._fed: Mapping[type[ev.Event], int] | None = None  # or a feeder's count (`count_by`)
        self.admitted: dict[tuple[str, str], int] = {}  # (cluster_queue, priority_class)
        self.finished: dict[tuple[str, str], int] = {}
        self.evicted: dict[tuple[str, str, str, str], int] = {}  # (cq, reason, underlying_cause, priority_class)
        self.preempted: dict[tuple[str, str], int] = {}  # (preempting cq, reason)
        self.actuation_failures: dict[str, int] = {}  # "true" | "false" (permanent)
        self.wait: dict[tuple[str, str], Hist] = {}  # admission wait (ADMISSION_WAIT_BUCKETS)
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
        self._marks: dict[tuple[str, tuple[str, ...]], tuple[tuple[str, str], ...]] = {}  # `_touch`'s, made once
        self._admit_marks: dict[str, tuple[tuple[str, str], ...]] = {}  # an admission's, made once per queue
        self._evict_marks: dict[str, tuple[tuple[str, str], ...]] = {}  # an eviction's
        self._finish_marks: dict[str, tuple[tuple[str, str], ...]] = {}  # a finish's or a deletion's
        self._cohorts: dict[str, list[str]] = {}  # `_cohorts_above`, for configuration generation `_cohorts_of`
        self._cohorts_of = -1
        self._table = bind(self, self.ON)
        if not lq_marks:  # they only mark a LocalQueue
            self._table[ev.WorkloadPending] = self._table[ev.JobObserved] = None

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
            "qr_wait": hists({k: self.qr_wait_of(k) for k in self.wait}),
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
        marks = self._marks.get((cq, groups))
        if marks is None:
            marks = self._marks[(cq, groups)] = tuple((cq, group) for group in groups)
        self.dirty.update(marks)

    def attach(self, state: State) -> None:
        """Read `state` from now on (equal to the one read so far; its configuration generations are its own)."""
        self.state = state
        self._cohorts.clear()
        self._cohorts_of = -1

    def _touch_lq(self, key: str) -> None:
        if not self.lq_marks:
            return
        rec = self.state.workloads.get(key)
        if rec is not None and rec.workload.queue_name is not None:
            self.lq_dirty.add(f"{rec.workload.namespace}/{rec.workload.queue_name}")

    def _cohorts_above(self, cq: str) -> list[str]:
        """The ClusterQueue's cohort and every cohort above it, as configured now (a cycle stops the walk); kept per
        queue until the configuration changes."""
        generation = self.state.config_generation
        if generation != self._cohorts_of:
            self._cohorts.clear()
            self._cohorts_of = generation
        got = self._cohorts.get(cq)
        if got is None:
            got = self._cohorts[cq] = self._walk_cohorts(cq)
        return got

    def _walk_cohorts(self, cq: str) -> list[str]:
        q = self.state.cluster_queues.get(cq)
        out: list[str] = []
        name = q.cohort if q is not None else None
        while name and name not in out:
            out.append(name)
            co = self.state.cohorts.get(name)
            name = co.parent if co is not None else None
        return out

    @property
    def seq(self) -> int:
        """The last event applied: the state's, which the feeder folds after each event (a handler skipped for an
        event it takes no part in leaves the projection as it was)."""
        return self.state.seq

    def apply(self, event: ev.Event, seq: int) -> None:
        """Count `event` by its type, then its handler, if its type has one."""
        if self._fed is not None:
            raise RuntimeError("KueueCounters: counted by a feeder's count (`count_by`); fed through its table only")
        t = event.TYPE
        by_type = self._by_type
        by_type[t] = by_type.get(t, 0) + 1
        h = self._table[type(event)]
        if h is not None:
            h(event, seq)

    def handlers(self) -> Table:
        """This projection's handler of each event type (`views.dispatch`), for a feeder that counts the events by
        type itself and gives its count to `count_by`: the handlers count nothing, and a type that only needs
        counting (most of a busy log's events without `lq_marks`: pending reasons, observed jobs) has none."""
        return dict(self._table)

    def count_by(self, by_type: Mapping[type[ev.Event], int]) -> None:
        """`events_by_type` is read from `by_type` (a feeder's count of the events it gave, from the log's first
        event, by event class) from now on, instead of counted by `apply`."""
        if self._by_type:
            raise RuntimeError("KueueCounters: counted by apply already; a feeder's count must begin with the log")
        self._fed = by_type

    @property
    def events_by_type(self) -> dict[str, int]:
        """The events seen, by type (`Event.TYPE`); a type not seen is left out."""
        fed = self._fed
        if fed is None:
            return self._by_type
        return {t.TYPE: n for t, n in fed.items() if n}

    # --- the handlers (`ON`) ---

    def _config(self, event: ev.Event, seq: int) -> None:
        self.config_changed = True  # queues, cohorts, flavors, namespaces: every queue may change

    def _pending(self, event: ev.WorkloadPending, seq: int) -> None:
        # The ClusterQueue's pending figures are found changed by the renderer (the state's pending versions), only
        # a LocalQueue is marked here (without `lq_marks` the table has no handler for it).
        if self.lq_marks:
            rec = self.state.workloads.get(event.workload)
            if rec is not None:
                wl = rec.workload
                if wl.queue_name is not None:
                    self.lq_dirty.add(f"{wl.namespace}/{wl.queue_name}")

    def _observed(self, event: ev.JobObserved, seq: int) -> None:
        # The LocalQueues it leaves (as folded so far) and joins (as the event says) are marked (without
        # `lq_marks` the table has no handler for it). The ClusterQueues' pending figures are found changed by the
        # renderer (the state's pending versions).
        if not self.lq_marks:
            return
        wl = event.workload
        queue = wl.queue_name
        rec = self.state.workloads.get(f"{wl.namespace}/{wl.name}")
        if rec is not None:
            old = rec.workload
            if old.queue_name is not None and (old.queue_name != queue or old.namespace != wl.namespace):
                self.lq_dirty.add(f"{old.namespace}/{old.queue_name}")
        if queue is not None:
            self.lq_dirty.add(f"{wl.namespace}/{queue}")

    def _admitted(self, event: ev.WorkloadAdmitted, seq: int) -> None:
        key = event.workload
        rec = self.state.workloads.get(key)
        if rec is not None and rec.phase is _PENDING:
            cq = event.admission.cluster_queue
            wl = rec.workload
            pc = wl.priority_class or wl.pod_priority_class or ""  # `priority_class_of`
            label = (cq, pc)
            admitted = self.admitted
            n = admitted.get(label)
            if n is None:
                self.priority_classes.setdefault(cq, set()).add(pc)
                self.counted_queues.add(cq)
                self.wait[label] = Hist(ADMISSION_WAIT_BUCKETS)
                n = 0
            admitted[label] = n + 1
            since = self._queued_at.pop(key, wl.created_at)
            waited = (event.at - since) / 1000 if event.at > since else 0.0  # no `max` call at every admission
            # `Hist.observe`, written out (at every admission). The same observation in quota_reserved_wait's
            # buckets (admitd reserves quota and admits at once) is `qr_wait_of`: its buckets are the first of these.
            h = self.wait[label]
            h.n += 1
            h.total += waited
            i = bisect_left(ADMISSION_WAIT_BUCKETS, waited)
            if i < _ADMISSION_BUCKETS:
                h.per[i] += 1
            queue = wl.queue_name
            if queue is not None:
                ns = wl.namespace
                lq3 = (ns, queue, pc)
                lq_admitted = self.lq_admitted
                m = lq_admitted.get(lq3)
                if m is None:
                    self.counted_lqs.add(f"{ns}/{queue}")
                    self.lq_wait[lq3] = Hist(WAIT_BUCKETS)
                    m = 0
                lq_admitted[lq3] = m + 1
                h = self.lq_wait[lq3]
                h.n += 1
                h.total += waited
                if i < _WAIT_BUCKETS:  # the same bucket in the first of these buckets
                    h.per[i] += 1
                if self.lq_marks:
                    self.lq_dirty.add(f"{ns}/{queue}")
            cohorts = self._cohorts.get(cq) if self._cohorts_of == self.state.config_generation else None
            if cohorts is None:
                cohorts = self._cohorts_above(cq)
            if cohorts:
                by_cohort = self.cohort_admitted
                for cohort in cohorts:
                    c2 = (cohort, pc)
                    by_cohort[c2] = by_cohort.get(c2, 0) + 1
            marks = self._admit_marks.get(cq)
            if marks is None:
                marks = self._admit_marks[cq] = ((cq, "pending"), (cq, "admitted"), (cq, "admissions"))
            self.dirty.update(marks)

    def qr_wait_of(self, label: tuple[str, str]) -> Hist:
        """The admission waits of `label` in quota_reserved_wait_time_seconds' buckets (Kueue's 14, the first of
        admission_wait's 16): the same observations, so the same counts per bucket up to the 14th (an observation
        above it is counted in the sum and the count only, in both)."""
        h = self.wait[label]
        return Hist(WAIT_BUCKETS, h.per[:_WAIT_BUCKETS], h.total, h.n)

    def _adopted(self, event: ev.WorkloadAdopted, seq: int) -> None:
        # Admitted by another replica: its quota is in use, but this process admitted nothing.
        key = event.workload
        rec = self.state.workloads.get(key)
        if rec is not None and rec.phase is _PENDING:
            self._queued_at.pop(key, None)
            self._touch_lq(key)
            self._touch(event.admission.cluster_queue, "pending", "admitted")

    def _preempted(self, event: ev.WorkloadPreempted, seq: int) -> None:
        why, by_cq = event.reason, event.preemptor_cluster_queue
        self._preempt_reason[event.workload] = why
        dirty = self.dirty
        if by_cq is not None:
            label = (by_cq, why)
            self.preempted[label] = self.preempted.get(label, 0) + 1
            self.counted_queues.add(by_cq)
            dirty.add((by_cq, "preemptions"))
        dirty.add((event.cluster_queue, "preemptions"))

    def _evicted(self, event: ev.WorkloadEvicted, seq: int) -> None:
        key = event.workload
        rec = self.state.workloads.get(key)
        if rec is None:
            return
        wl = rec.workload
        queue = wl.queue_name
        if self.lq_marks and queue is not None:  # `_touch_lq`
            self.lq_dirty.add(f"{wl.namespace}/{queue}")
        admission = rec.admission
        if rec.phase is _ADMITTED and admission is not None:
            cq = admission.cluster_queue
            reason, cause = event.reason, self._preempt_reason.pop(key, "")
            pc = wl.priority_class or wl.pod_priority_class or ""  # `priority_class_of`
            label4 = (cq, reason, cause, pc)
            evicted = self.evicted
            n = evicted.get(label4)
            if n is None:
                self.counted_queues.add(cq)
                n = 0
            evicted[label4] = n + 1
            if queue is not None:
                ns = wl.namespace
                lq5 = (ns, queue, reason, cause, pc)
                lq_evicted = self.lq_evicted
                m = lq_evicted.get(lq5)
                if m is None:
                    self.counted_lqs.add(f"{ns}/{queue}")
                    m = 0
                lq_evicted[lq5] = m + 1
            self._queued_at[key] = event.at
            marks = self._evict_marks.get(cq)
            if marks is None:
                marks = self._evict_marks[cq] = ((cq, "pending"), (cq, "admitted"), (cq, "evictions"))
            self.dirty.update(marks)

    def _gone(self, event: ev.JobFinished | ev.JobDeleted, seq: int) -> None:
        t = event.TYPE
        key = event.job
        rec = self.state.workloads.get(key)
        if rec is not None:
            wl = rec.workload
            queue = wl.queue_name
            held = rec.admission
            if held is not None:  # `_cq_of`
                cq: str | None = held.cluster_queue
            else:
                lq = self.state.local_queues.get(f"{wl.namespace}/{queue}")
                cq = lq.cluster_queue if lq is not None else None
            if self.lq_marks and queue is not None:  # `_touch_lq`
                self.lq_dirty.add(f"{wl.namespace}/{queue}")
            admitted_at = rec.admitted_at
            if held is not None and admitted_at is not None and rec.phase is _ADMITTED and t == _FINISHED:
                pc = wl.priority_class or wl.pod_priority_class or ""  # `priority_class_of`
                label = (held.cluster_queue, pc)
                finished = self.finished
                n = finished.get(label)
                if n is None:
                    self.priority_classes.setdefault(label[0], set()).add(pc)
                    self.counted_queues.add(label[0])
                    self.execution[label] = Hist(WAIT_BUCKETS)
                    n = 0
                finished[label] = n + 1
                if queue is not None:
                    lq3 = (wl.namespace, queue, pc)
                    lq_finished = self.lq_finished
                    m = lq_finished.get(lq3)
                    if m is None:
                        self.counted_lqs.add(f"{wl.namespace}/{queue}")
                        m = 0
                    lq_finished[lq3] = m + 1
                self.execution[label].observe((event.at - admitted_at) / 1000 if event.at > admitted_at else 0.0)
            if cq is not None:
                marks = self._finish_marks.get(cq)
                if marks is None:
                    marks = self._finish_marks[cq] = ((cq, "pending"), (cq, "admitted"), (cq, "finishes"))
                self.dirty.update(marks)
        self._queued_at.pop(key, None)
        self._preempt_reason.pop(key, None)

    def _actuation_failed(self, event: ev.ActuationFailed, seq: int) -> None:
        k = "true" if event.permanent else "false"
        self.actuation_failures[k] = self.actuation_failures.get(k, 0) + 1

    ON: ClassVar[Spec] = {
        ev.WorkloadPending: _pending,
        ev.JobObserved: _observed,
        ev.WorkloadAdmitted: _admitted,
        ev.WorkloadAdopted: _adopted,
        ev.WorkloadPreempted: _preempted,
        ev.WorkloadEvicted: _evicted,
        ev.JobFinished: _gone,
        ev.JobDeleted: _gone,
        ev.ActuationFailed: _actuation_failed,
        # Counted by type (`apply`, or the feeder: `count_by`), nothing else: they change no queue's figures.
        ev.JobUnsuspended: None,
        ev.JobSuspended: None,
        ev.ChainBreakAccepted: None,
        ev.WorkloadEstimated: None,
        ev.PriorityClassObserved: None,
        ev.PriorityClassDeleted: None,
        ev.JobPodsNotCreated: None,
        # Queues, cohorts, flavors, namespaces, rejections, and the rest: every queue's figures may change.
        ev.ResourceFlavorObserved: _config,
        ev.ResourceFlavorDeleted: _config,
        ev.ClusterQueueObserved: _config,
        ev.ClusterQueueDeleted: _config,
        ev.CohortObserved: _config,
        ev.CohortDeleted: _config,
        ev.LocalQueueObserved: _config,
        ev.LocalQueueDeleted: _config,
        ev.NamespaceObserved: _config,
        ev.ObjectRejected: _config,
        ev.ObjectWarned: _config,
        ev.JobReady: _config,
        ev.JobTampered: _config,
        ev.WorkloadTimedOut: _config,
        ev.WorkloadRequeued: _config,
        ev.WorkloadActiveChanged: _config,
    }
