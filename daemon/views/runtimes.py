"""How long runs took, by class: what the start-time estimate (`daemon.sim.eta`) draws runtimes from.

A run is a workload's admission to its job's finish (`job.finished`); a run ended by a preemption, a stop or a
deletion is no runtime (it did not run to its end). The class of a run is its ClusterQueue, its pod sets' shapes
(name, count, requests per pod) and its priority: jobs of one class are usually the same program at the same size.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import ClassVar

from daemon.domain import events as ev
from daemon.domain.eta import Class, shape_of
from daemon.domain.model import Millis, Workload
from daemon.domain.state import State
from daemon.views.dispatch import QUEUE_OBJECTS, Spec, Table, bind


class Runtimes:
    """Every finished run's duration, kept sorted per class and per ClusterQueue."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.by_class: dict[Class, list[Millis]] = {}
        self.by_queue: dict[str, list[Millis]] = {}
        # workload -> (its ClusterQueue, the workload as admitted, its priority, its admission time): the class is
        # made (`shape_of`) when the run finishes, not at each admission (most end otherwise, or not yet).
        self._running: dict[str, tuple[str, Workload, int, Millis]] = {}
        for key, rec in state.workloads.items():
            if rec.admission is not None and rec.admitted_at is not None and not rec.evicting:
                self._running[key] = (rec.admission.cluster_queue, rec.workload, rec.priority, rec.admitted_at)
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

    def _admitted(self, event: ev.WorkloadAdmitted, seq: int) -> None:
        rec = self.state.workloads.get(event.workload)
        if rec is not None:
            self._running[event.workload] = (event.admission.cluster_queue, rec.workload, rec.priority, event.at)

    def _finished(self, event: ev.JobFinished, seq: int) -> None:
        run = self._running.pop(event.job, None)
        if run is not None:
            cq, wl, priority, since = run
            cls = (cq, shape_of(wl), priority)
            bisect.insort(self.by_class.setdefault(cls, []), event.at - since)
            bisect.insort(self.by_queue.setdefault(cls[0], []), event.at - since)

    def _stopped(self, event: ev.WorkloadPreempted | ev.WorkloadEvicted, seq: int) -> None:
        self._running.pop(event.workload, None)

    def _deleted(self, event: ev.JobDeleted, seq: int) -> None:
        self._running.pop(event.job, None)

    def durations(self, cls: Class) -> Sequence[Millis]:
        """The recorded runs of `cls`; of its ClusterQueue when the class has none; empty when neither has any."""
        return self.by_class.get(cls) or self.by_queue.get(cls[0]) or ()

    def figures(self) -> object:
        return (
            sorted((k, tuple(v)) for k, v in self.by_class.items()),
            sorted(
                (k, ((cq, shape_of(wl), priority), since)) for k, (cq, wl, priority, since) in self._running.items()
            ),
        )

    ON: ClassVar[Spec] = {
        ev.WorkloadAdmitted: _admitted,
        ev.JobFinished: _finished,
        ev.WorkloadPreempted: _stopped,
        ev.WorkloadEvicted: _stopped,
        ev.JobDeleted: _deleted,
        **dict.fromkeys(
            (
                *QUEUE_OBJECTS,
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
