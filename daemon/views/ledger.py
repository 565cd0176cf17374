"""The preemption ledger: who preempted whom, under which rule, where in the cohort tree, and what it cost.

One `Preemption` per `workload.preempted`, built from the event and the fold's record of the victim as it was just
before (its admission and since when it held it):

- `rule`: the event's reason (Kueue's: `InClusterQueue`, `InCohortReclamation`, `InCohortReclaimWhileBorrowing`,
  `InCohortFairSharing`; `ClusterQueueStopped` / `LocalQueueStopped` when a queue drains its own) and the policy
  that allowed it (`reclaimWithinCohort=Any`, ...).
- `cohort` and `level`: where the preemptor's ClusterQueue and the victim's meet: the nearest Cohort both are under
  and how many steps up from the victim's ClusterQueue it is (1: their shared parent Cohort); level 0 and no
  Cohort within one ClusterQueue, or when a queue drains its own.
- `lost`: the work the victim's run had done when it was preempted, in pod-milliseconds and per resource in
  milli-units x milliseconds, counted from the moment its pods were started (`job.unsuspended` after the
  admission); a victim preempted before its pods were started lost nothing.
- `rerun_after`: milliseconds from the preemption to the victim's next admission; None while it has not been
  admitted again (or never was: it finished pending or was deleted).

Times are the log's (`at`, milliseconds); the exporters turn them into hours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from daemon.domain import events as ev
from daemon.domain.model import Millis
from daemon.domain.state import State
from daemon.views.dispatch import QUEUE_OBJECTS, Spec, Table, bind

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")  # summed as "GPU-hours"


@dataclass(slots=True, kw_only=True)
class Preemption:
    seq: int
    at: Millis
    victim: str
    victim_cluster_queue: str
    preemptor: str | None
    preemptor_cluster_queue: str | None
    rule: str
    policy: str
    cohort: str | None
    level: int
    admitted_at: Millis | None  # the victim's admission that was undone
    ran_from: Millis | None  # when its pods were started under that admission; None: never started
    pods: int
    lost_pod_ms: int
    lost: dict[str, int] = field(default_factory=dict)  # resource -> milli-units x ms of the run
    rerun_after: Millis | None = None

    def figures(self) -> tuple[object, ...]:
        return (
            self.seq,
            self.at,
            self.victim,
            self.victim_cluster_queue,
            self.preemptor,
            self.preemptor_cluster_queue,
            self.rule,
            self.policy,
            self.cohort,
            self.level,
            self.admitted_at,
            self.ran_from,
            self.pods,
            self.lost_pod_ms,
            tuple(sorted(self.lost.items())),
            self.rerun_after,
        )


def _ancestors(state: State, cluster_queue: str | None) -> list[str]:
    """The Cohorts above a ClusterQueue, nearest first (a cycle in the Cohorts stops the walk)."""
    cq = state.cluster_queues.get(cluster_queue) if cluster_queue is not None else None
    out: list[str] = []
    name = cq.cohort if cq is not None else None
    while name is not None and name not in out:
        out.append(name)
        cohort = state.cohorts.get(name)
        name = cohort.parent if cohort is not None else None
    return out


def meeting_point(state: State, victim_cq: str, preemptor_cq: str | None) -> tuple[str | None, int]:
    """The nearest Cohort above both ClusterQueues and its level above the victim's (1: their parent); (None, 0)
    within one ClusterQueue, or when there is no preemptor's queue or no Cohort they share."""
    if preemptor_cq is None or preemptor_cq == victim_cq:
        return None, 0
    theirs = set(_ancestors(state, preemptor_cq))
    for level, name in enumerate(_ancestors(state, victim_cq), start=1):
        if name in theirs:
            return name, level
    return None, 0


class Preemptions:
    """The ledger: every preemption in log order, each with its cost and, once known, the time until it reran."""

    def __init__(self, state: State, *, entries: bool = True, totals: bool = True) -> None:
        """`entries=False`: only the per-queue `totals` (the metrics), no entry kept; `totals=False`: the entries
        only (the answers' windows, which read no totals: they stay empty)."""
        if not (entries or totals):
            raise ValueError("Preemptions: a ledger keeps its entries, its totals or both")
        self.state = state
        self.keep = entries
        self.count = totals
        self.entries: list[Preemption] = []
        self._ran_from: dict[str, Millis] = {}  # workload -> when its pods were started under its admission
        self._open: dict[str, Preemption] = {}  # victim -> its last preemption not followed by an admission
        # Per (victim's ClusterQueue, rule), over everything applied and never pruned (the per-queue metrics):
        # [victims, pod-milliseconds lost, GPU milli-units x milliseconds lost].
        self.totals: dict[tuple[str, str], list[int]] = {}
        self._meetings: dict[tuple[str, str | None], tuple[str | None, int]] = {}
        self._meetings_of = -1  # the configuration generation `_meetings` are of
        self._table = bind(self, self.ON)

    def attach(self, state: State) -> None:
        """Read `state` from now on (equal to the one read so far; its configuration generations are its own)."""
        self.state = state
        self._meetings.clear()
        self._meetings_of = -1

    def started(self, key: str, at: Millis) -> None:
        """`key`'s pods run since `at` (for a ledger begun at a state, not at the log's start)."""
        self._ran_from[key] = at

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
        key = event.workload
        self._ran_from.pop(key, None)
        p = self._open.pop(key, None)
        if p is not None:
            p.rerun_after = event.at - p.at

    def _unsuspended(self, event: ev.JobUnsuspended, seq: int) -> None:
        key = event.job
        rec = self.state.workloads.get(key)
        if rec is not None and rec.admission is not None and not rec.evicting:
            self._ran_from.setdefault(key, event.at)

    def _gone(self, event: ev.JobFinished | ev.JobDeleted, seq: int) -> None:
        self._ran_from.pop(event.job, None)
        self._open.pop(event.job, None)

    def _preempted(self, event: ev.WorkloadPreempted, seq: int) -> None:
        key, at = event.workload, event.at
        rec = self.state.workloads.get(key)
        admission = rec.admission if rec is not None else None
        ran_from = self._ran_from.pop(key, None)
        ran = at - ran_from if ran_from is not None and at > ran_from else 0
        keep, count = self.keep, self.count
        pods = gpu = 0
        lost: dict[str, int] = {}
        if admission is not None:
            for ps in admission.pod_sets:
                pods += ps.count
                if ran:
                    for resource, amount in ps.usage.items():
                        if keep:
                            lost[resource] = lost.get(resource, 0) + amount * ran
                        if count and resource in GPU_RESOURCES:
                            gpu += amount * ran
        if count:
            label = (event.cluster_queue, event.reason)
            t = self.totals.get(label)
            if t is None:
                t = self.totals[label] = [0, 0, 0]
            t[0] += 1
            t[1] += pods * ran
            t[2] += gpu
        if not keep:
            return  # the totals only (the metrics): no entry, so no meeting point either
        cohort, level = self._meeting_point(event.cluster_queue, event.preemptor_cluster_queue)
        p = Preemption(
            seq=seq,
            at=event.at,
            victim=event.workload,
            victim_cluster_queue=event.cluster_queue,
            preemptor=event.preemptor,
            preemptor_cluster_queue=event.preemptor_cluster_queue,
            rule=event.reason,
            policy=event.policy,
            cohort=cohort,
            level=level,
            admitted_at=rec.admitted_at if rec is not None else None,
            ran_from=ran_from,
            pods=pods,
            lost_pod_ms=pods * ran,
            lost=lost,
        )
        self._open[event.workload] = p
        self.entries.append(p)

    def _meeting_point(self, victim_cq: str, preemptor_cq: str | None) -> tuple[str | None, int]:
        """`meeting_point`, kept per pair of queues until the configuration changes (a preemption cycle names the
        same pairs over and over)."""
        generation = self.state.config_generation
        if generation != self._meetings_of:
            self._meetings.clear()
            self._meetings_of = generation
        key = (victim_cq, preemptor_cq)
        got = self._meetings.get(key)
        if got is None:
            got = self._meetings[key] = meeting_point(self.state, victim_cq, preemptor_cq)
        return got

    def prune(self, before: Millis) -> None:
        """Forget the preemptions before `before` (their victims' reruns too); `totals` keep counting them."""
        entries = self.entries
        n = 0
        while n < len(entries) and entries[n].at < before:
            n += 1
        if n:
            gone = {id(p) for p in entries[:n]}
            del entries[:n]
            for key in [k for k, p in self._open.items() if id(p) in gone]:
                del self._open[key]

    def figures(self) -> object:
        return (
            tuple(e.figures() for e in self.entries),
            tuple(sorted(self._ran_from.items())),
            tuple(sorted((k, tuple(v)) for k, v in self.totals.items())),
        )

    ON: ClassVar[Spec] = {
        ev.WorkloadAdmitted: _admitted,
        ev.JobUnsuspended: _unsuspended,
        ev.WorkloadPreempted: _preempted,
        ev.JobFinished: _gone,
        ev.JobDeleted: _gone,
        **dict.fromkeys(
            (
                *QUEUE_OBJECTS,
                ev.JobObserved,
                ev.JobReady,
                ev.JobPodsNotCreated,
                ev.JobTampered,
                ev.WorkloadPending,
                ev.WorkloadEvicted,
                ev.WorkloadAdopted,
                ev.WorkloadTimedOut,
                ev.WorkloadRequeued,
                ev.WorkloadActiveChanged,
                ev.JobSuspended,
                ev.ActuationFailed,
                ev.ChainBreakAccepted,
                ev.WorkloadEstimated,
            )
        ),
    }
