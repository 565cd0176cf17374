"""What must hold at every step of a faulty simulation, checked over the event log and the simulated cluster's truth.

- `quota`: at every moment, the quota the cluster's running pods hold (pods that are stopping still hold it) is
  within each ClusterQueue's nominal + borrowingLimit, and each cohort tree's members borrow no more than the tree
  lends (lendingLimit, else nominal); as the cluster sees it, not as the log says.
- `running-unadmitted`: every job with pods on the cluster is admitted in the log (while the daemon is up).
- `unsuspended-twice`: no job is unsuspended twice without a suspension (or its end) between, neither in the log
  nor on the cluster.
- `decision-lost`: the state replayed after a crash is the state the process held when it died.
- `log-verify`: the log's hash chain and snapshots check after every restart.
- `not-reconsidered`: whenever the daemon is idle, a fresh admission cycle on its state admits or preempts
  nothing (a pending workload that could be admitted would otherwise wait for an unrelated change); when it would,
  and the fold changed since the last cycle, the stages missed the change.
- `cycle-fixed-point`: the same, when nothing that could change a decision happened since the last cycle: the
  engine's cycle is not a fixed point of its own output (an engine fault, not the stages').
- `not-carried-out`: at the end, every decision was carried out or recorded as failed (the outbox is empty).
- `run-ends`: the run ends, with no workload left being evicted (and, for scenarios where every job can end, with
  every job finished or deleted).

Churn is counted, not a failure: a workload preempted within `churn_window` of its admission, with no arrival of
higher priority in its cohort tree and no quota change since, to explain it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from daemon.domain import events as ev
from daemon.domain.model import Admission, ClusterQueue, Cohort, Millis
from daemon.domain.state import Phase, State


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    invariant: str
    at: Millis
    message: str
    jobs: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.invariant} at {self.at} ms: {self.message}"


@dataclass(slots=True)
class Churn:
    """Admissions undone soon after, with nothing to explain them: the number the engine must drive down."""

    window: Millis
    count: int = 0
    by_reason: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    preemptions: int = 0  # every preemption, explained or not


def _root(cohort: str | None, cohorts: Mapping[str, Cohort]) -> str | None:
    seen: set[str] = set()
    while cohort is not None and cohort in cohorts and cohorts[cohort].parent is not None and cohort not in seen:
        seen.add(cohort)
        cohort = cohorts[cohort].parent
    return cohort


@dataclass(frozen=True, slots=True)
class _Limit:
    cluster_queue: str
    flavor: str
    resource: str
    limit: int | None  # nominal + borrowingLimit (nominal outside a cohort); None: unlimited
    tree: str | None
    keeps: int  # what the queue keeps for itself (nominal - lendingLimit)


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """The limits of a configuration, worked out once per configuration (the check runs at every step)."""

    limits: tuple[_Limit, ...]
    lendable: Mapping[tuple[str, str, str], int]  # (tree, flavor, resource) -> what the tree lends
    known: frozenset[tuple[str, str, str]]  # (cluster queue, flavor, resource) with quota
    by_key: Mapping[tuple[str, str, str], _Limit]

    @classmethod
    def of(cls, cluster_queues: Mapping[str, ClusterQueue], cohorts: Mapping[str, Cohort]) -> QuotaLimits:
        limits: list[_Limit] = []
        lendable: dict[tuple[str, str, str], int] = defaultdict(int)
        for name, cq in cluster_queues.items():
            root = _root(cq.cohort, cohorts)
            for group in cq.resource_groups:
                for fq in group.flavors:
                    for rq in fq.resources:
                        if root is None:
                            limit: int | None = rq.nominal
                        else:
                            limit = None if rq.borrowing_limit is None else rq.nominal + rq.borrowing_limit
                        lends = rq.nominal if rq.lending_limit is None else min(rq.nominal, rq.lending_limit)
                        if root is not None:
                            lendable[(root, fq.name, rq.name)] += lends
                        limits.append(_Limit(name, fq.name, rq.name, limit, root, rq.nominal - lends))
        for co in cohorts.values():
            root = _root(co.name, cohorts)
            for group in co.resource_groups:
                for fq in group.flavors:
                    for rq in fq.resources:
                        if root is not None:
                            lendable[(root, fq.name, rq.name)] += rq.nominal
        by_key = {(lim.cluster_queue, lim.flavor, lim.resource): lim for lim in limits}
        return cls(tuple(limits), dict(lendable), frozenset(by_key), by_key)


def quota_problems(running: Iterable[Admission], limits: QuotaLimits) -> list[str]:
    """What the admissions of the running pods exceed, one line each (empty: nothing).

    Per ClusterQueue: its usage within nominal + borrowingLimit. Per cohort tree (the whole tree, from its root):
    what its ClusterQueues use beyond what they keep for themselves within what the tree lends. Usage where no
    quota is defined is reported too."""
    usage: dict[tuple[str, str, str], int] = defaultdict(int)
    for adm in running:
        for ps in adm.pod_sets:
            for res, amount in ps.usage.items():
                usage[(adm.cluster_queue, ps.flavors.get(res, ""), res)] += amount
    problems: list[str] = []
    borrowed: dict[tuple[str, str, str], int] = defaultdict(int)
    by_key = limits.by_key
    for key, u in usage.items():
        lim = by_key.get(key)
        if lim is None or not u:
            continue
        if lim.limit is not None and u > lim.limit:
            problems.append(
                f"ClusterQueue {lim.cluster_queue} uses {u} of {lim.flavor}/{lim.resource}, more than its {lim.limit}"
            )
        if lim.tree is not None and u > lim.keeps:
            borrowed[(lim.tree, lim.flavor, lim.resource)] += u - lim.keeps
    for key, amount in sorted(borrowed.items()):
        if amount > limits.lendable.get(key, 0):
            tree, flavor, res = key
            problems.append(
                f"cohort tree {tree}: its ClusterQueues use {amount} of {flavor}/{res} beyond what they keep, "
                f"more than the {limits.lendable.get(key, 0)} the tree lends"
            )
    for (cq, flavor, res), u in usage.items():
        if u and (cq, flavor, res) not in limits.known:
            problems.append(f"ClusterQueue {cq} uses {u} of {flavor}/{res}, which it has no quota for")
    return problems


class Checker:
    """The invariants. `listener` follows the log (attach it to every recorder); the runner calls the rest."""

    def __init__(self, churn_window: Millis = 10_000) -> None:
        self.violations: list[Violation] = []
        self.churn = Churn(window=churn_window)
        # (replica, job) -> decision of the last unsuspension in that replica's log not undone since in it (a
        # replica may not see another's suspension at all: its watch was down; the cluster's side is `_land`'s)
        self._unsuspended: dict[tuple[int, str], int] = {}
        self._admitted_at: dict[str, Millis] = {}  # workload -> when it was last admitted
        self._arrivals: dict[str | None, list[tuple[Millis, int]]] = defaultdict(list)  # tree -> (at, priority)
        self._quota_changed_at: Millis | None = None
        self.state: State | None = None  # the leader's fold, while one is up
        self.admissions = 0

    def fail(self, invariant: str, at: Millis, message: str, jobs: Iterable[str] = ()) -> None:
        self.violations.append(Violation(invariant=invariant, at=at, message=message, jobs=tuple(sorted(set(jobs)))))

    def quota_changed(self, at: Millis) -> None:
        self._quota_changed_at = at

    def _tree(self, key: str) -> str | None:
        s = self.state
        if s is None:
            return None
        rec = s.workloads.get(key)
        if rec is None:
            return None
        lq = s.local_queues.get(f"{rec.workload.namespace}/{rec.workload.queue_name}")
        cq = s.cluster_queues.get(lq.cluster_queue) if lq is not None else None
        if cq is None:
            return None
        return _root(cq.cohort, s.cohorts) or cq.name

    def listener(self, event: ev.Event, seq: int) -> None:
        """An event of the (only) daemon's log."""
        self.listen(0, event, seq)

    def listen(self, replica: int, event: ev.Event, seq: int) -> None:
        """An event of replica `replica`'s log (each follows its own; decisions are numbered per log)."""
        match event:
            case ev.JobUnsuspended(job=job, decision=decision, at=at):
                before = self._unsuspended.get((replica, job))
                if before is not None and before != decision:
                    self.fail(
                        "unsuspended-twice",
                        at,
                        f"{job} unsuspended for decision {decision} (seq {seq} of replica {replica}'s log) while "
                        f"still unsuspended for decision {before}, with no suspension between",
                        [job],
                    )
                self._unsuspended[(replica, job)] = decision
            case ev.JobSuspended(job=job) | ev.JobFinished(job=job) | ev.JobDeleted(job=job):
                self._unsuspended.pop((replica, job), None)
                self._admitted_at.pop(job, None)
            case ev.WorkloadEvicted(workload=job):
                self._unsuspended.pop((replica, job), None)
            case ev.JobObserved(workload=wl):
                s = self.state
                rec = s.workloads.get(wl.key) if s is not None else None
                if rec is not None and rec.workload is wl:
                    self._arrivals[self._tree(wl.key)].append((wl.created_at, rec.priority))
            case ev.WorkloadAdmitted(workload=key, at=at):
                self._admitted_at[key] = at
                self.admissions += 1
            case ev.WorkloadPreempted(workload=key, at=at, reason=reason):
                self.churn.preemptions += 1
                admitted = self._admitted_at.get(key)
                s = self.state
                rec = s.workloads.get(key) if s is not None else None
                if admitted is None or rec is None or at - admitted > self.churn.window:
                    return
                if self._quota_changed_at is not None and self._quota_changed_at >= admitted:
                    return
                arrivals = self._arrivals.get(self._tree(key), [])
                if any(admitted <= t <= at and p > rec.priority for t, p in arrivals):
                    return
                self.churn.count += 1
                self.churn.by_reason[reason] += 1
            case _:
                pass

    def cluster(
        self,
        at: Millis,
        running: Mapping[str, Admission],
        limits: QuotaLimits | None,
        *,
        unseen: Iterable[str] = (),
    ) -> None:
        """The cluster's truth at `at`: the admissions its jobs with pods run under (`limits`: None when neither they
        nor the quotas changed since the last call, so that only the log side is checked again). `unseen`: jobs
        another replica started that no watch has shown the leader yet (it cannot have adopted them)."""
        if limits is not None:
            for problem in quota_problems(running.values(), limits):
                self.fail("quota", at, problem, running)
                return
        s = self.state
        if s is None:
            return
        skip = set(unseen)
        for key in running:
            if key in skip:
                continue
            rec = s.workloads.get(key)
            if rec is None or rec.phase is not Phase.ADMITTED:
                self.fail(
                    "running-unadmitted",
                    at,
                    f"{key} has pods on the cluster but the log holds it "
                    + ("nowhere" if rec is None else f"as {rec.phase.value}"),
                    [key],
                )
                return
