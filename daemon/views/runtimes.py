"""How long runs took, by class: what the start-time estimate (`daemon.sim.eta`) draws runtimes from.

A run is a workload's admission to its job's finish (`job.finished`); a run ended by a preemption, a stop or a
deletion is no runtime (it did not run to its end), nor one that was being evicted (preempted, timed out, stopped)
when its job finished. The class of a run is its ClusterQueue, its pod sets' shapes
(name, count, requests per pod) and its priority: jobs of one class are usually the same program at the same size.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import ClassVar

from daemon.domain import events as ev
from daemon.domain.eta import Class, shape_of
from daemon.domain.model import Millis
from daemon.domain.state import Phase, State
from daemon.views.dispatch import QUEUE_OBJECTS, Spec, Table, bind

_ADMITTED = Phase.ADMITTED


class Runtimes:
    """Every finished run's duration, kept sorted per class and per ClusterQueue.

    A run is read from the fold's record when its job finishes (the feeder applies this before the state folds the
    finish): its admission, since when (`admitted_at`, an adoption's too), the workload and its priority. A run
    ended otherwise left no admission to find there (an eviction clears it), or left it `evicting` (a preemption,
    a timeout, a stop under way). Nothing is kept per running workload."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.by_class: dict[Class, list[Millis]] = {}
        self.by_queue: dict[str, list[Millis]] = {}
        self._table = bind(self, self.ON)

    @property
    def seq(self) -> int:
        """The last event applied: the state's, folded after each (`views.dispatch`)."""
        return self.state.seq

    def apply(self, event: ev.Event, seq: int) -> None:
        h = self._table[type(event)]
        if h is not None:
            h(event, seq)

    def handlers(self) -> Table:
        return dict(self._table)

    def _finished(self, event: ev.JobFinished, seq: int) -> None:
        rec = self.state.workloads.get(event.job)
        if rec is None or rec.phase is not _ADMITTED or rec.evicting:
            return
        admission, since = rec.admission, rec.admitted_at
        if admission is None or since is None:
            return
        cq = admission.cluster_queue
        took = event.at - since
        bisect.insort(self.by_class.setdefault((cq, shape_of(rec.workload), rec.priority), []), took)
        bisect.insort(self.by_queue.setdefault(cq, []), took)

    def durations(self, cls: Class) -> Sequence[Millis]:
        """The recorded runs of `cls`; of its ClusterQueue when the class has none; empty when neither has any."""
        return self.by_class.get(cls) or self.by_queue.get(cls[0]) or ()

    def figures(self) -> object:
        return sorted((k, tuple(v)) for k, v in self.by_class.items())

    ON: ClassVar[Spec] = {
        ev.JobFinished: _finished,
        **dict.fromkeys(
            (
                *QUEUE_OBJECTS,
                ev.WorkloadAdmitted,
                ev.WorkloadPreempted,
                ev.WorkloadEvicted,
                ev.JobDeleted,
                ev.JobObserved,
                ev.JobReady,
                ev.JobPodsNotCreated,
                ev.JobTampered,
                ev.WorkloadPending,
                ev.WorkloadAdopted,
                ev.WorkloadTimedOut,
                ev.WorkloadRequeued,
                ev.WorkloadActiveChanged,
                ev.JobUnsuspended,
                ev.JobSuspended,
                ev.ActuationFailed,
                ev.ChainBreakAccepted,
                ev.WorkloadEstimated,
            )
        ),
    }
