"""How long runs took, by class: what the start-time estimate (`daemon.sim.eta`) draws runtimes from.

A run is a workload's admission to its job's finish (`job.finished`); a run ended by a preemption, a stop or a
deletion is no runtime (it did not run to its end). The class of a run is its ClusterQueue, its pod sets' shapes
(name, count, requests per pod) and its priority: jobs of one class are usually the same program at the same size.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from daemon.domain import events as ev
from daemon.domain.eta import Class, shape_of
from daemon.domain.model import Millis
from daemon.domain.state import State


class Runtimes:
    """Every finished run's duration, kept sorted per class and per ClusterQueue."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.seq = state.seq
        self.by_class: dict[Class, list[Millis]] = {}
        self.by_queue: dict[str, list[Millis]] = {}
        self._running: dict[str, tuple[Class, Millis]] = {}  # workload -> its class and admission time
        for key, rec in state.workloads.items():
            if rec.admission is not None and rec.admitted_at is not None and not rec.evicting:
                self._running[key] = (
                    (rec.admission.cluster_queue, shape_of(rec.workload), rec.priority),
                    rec.admitted_at,
                )

    def apply(self, event: ev.Event, seq: int) -> None:
        self.seq = seq
        match event:
            case ev.WorkloadAdmitted(workload=key, at=at, admission=admission):
                rec = self.state.workloads.get(key)
                if rec is not None:
                    self._running[key] = ((admission.cluster_queue, shape_of(rec.workload), rec.priority), at)
            case ev.JobFinished(job=key, at=at):
                run = self._running.pop(key, None)
                if run is not None:
                    cls, since = run
                    bisect.insort(self.by_class.setdefault(cls, []), at - since)
                    bisect.insort(self.by_queue.setdefault(cls[0], []), at - since)
            case ev.WorkloadPreempted(workload=key) | ev.WorkloadEvicted(workload=key) | ev.JobDeleted(job=key):
                self._running.pop(key, None)
            case _:
                pass

    def durations(self, cls: Class) -> Sequence[Millis]:
        """The recorded runs of `cls`; of its ClusterQueue when the class has none; empty when neither has any."""
        return self.by_class.get(cls) or self.by_queue.get(cls[0]) or ()

    def figures(self) -> object:
        return (
            sorted((k, tuple(v)) for k, v in self.by_class.items()),
            sorted(self._running.items()),
        )
