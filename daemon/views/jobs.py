"""Each job's story, as `admitd simulate` reports it (`daemon.sim.report`): where it was admitted, when, with
which flavors and pods, evicted when, finished when, and why it waits. A projection (`views.projection`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.domain import events as ev
from daemon.domain.model import Millis, PendingReason
from daemon.domain.state import State


@dataclass(slots=True)
class JobOutcome:
    key: str
    cluster_queue: str | None = None
    admitted_at: list[Millis] = field(default_factory=list)
    evicted_at: list[Millis] = field(default_factory=list)
    finished_at: Millis | None = None
    flavors: dict[str, dict[str, str]] | None = None
    counts: dict[str, int] | None = None  # pods per pod set at the last admission (fewer with partial admission)
    asked: dict[str, int] = field(default_factory=dict)  # pods per pod set the job asked for
    pending_reason: PendingReason | None = None
    running: bool = False
    created_at: Millis = 0


class Jobs:
    """Every job's `JobOutcome`, kept from the events; `admitted` and `finished` count them (the progress line)."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.seq = state.seq
        self.jobs: dict[str, JobOutcome] = {}
        self.admitted = 0
        self.finished = 0

    def figures(self) -> object:
        return {"jobs": dict(self.jobs), "admitted": self.admitted, "finished": self.finished}

    def apply(self, event: ev.Event, seq: int) -> None:
        self.seq = seq
        match event:
            case ev.JobObserved(workload=wl):
                out = self.jobs.setdefault(wl.key, JobOutcome(key=wl.key, created_at=wl.created_at))
                out.asked = {ps.name: ps.count for ps in wl.pod_sets}
                lq = self.state.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
                if lq is not None and lq.cluster_queue in self.state.cluster_queues:
                    out.cluster_queue = lq.cluster_queue
            case ev.WorkloadAdmitted(workload=key, at=at, admission=adm):
                out = self.jobs[key]
                out.admitted_at.append(at)
                out.cluster_queue = adm.cluster_queue
                out.flavors = {ps.name: dict(ps.flavors) for ps in adm.pod_sets}
                out.counts = {ps.name: ps.count for ps in adm.pod_sets}
                out.running, out.pending_reason = True, None
                self.admitted += 1
            case ev.WorkloadEvicted(workload=key, at=at):
                out = self.jobs[key]
                out.evicted_at.append(at)
                out.running = False
            case ev.WorkloadPending(workload=key, reason=reason):
                self.jobs[key].pending_reason = reason
            case ev.JobFinished(job=key, at=at):
                out = self.jobs[key]
                out.finished_at, out.running = at, False
                self.finished += 1
            case _:
                pass
