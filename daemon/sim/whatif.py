"""What-if on a recorded log: the arrivals, requests and runtimes a log recorded, run again through the engine with
changed or added queue objects, and how waiting times and makespans would have differed, per queue and per job.

Pure: `recording()` maps the recorded events to a `Recording`, `what_if_scenario()` maps that and the changes to a
simulator `Scenario`, and `compare()` sets the recorded outcomes beside the simulated ones. Reading the log and the
CHANGES file, and running the simulation, are the CLI's (`daemon.sim.whatif_cli`).

Rules where a log leaves a choice (README, "What-if on a recorded log"):
- arrival: the first `job.observed` of the job; its workload is the one last observed before its first admission;
- runtime: its last run, from its last admission to its `job.finished` (or to a `job.deleted` while it ran), as a
  preempted Job's pods start again from scratch (the simulator restarts a readmitted job's runtime from zero too);
- a job whose run never ended in the log has an unknown runtime: it is still scheduled and, once admitted, runs
  until the end (as a simulator job without a runtime annotation does); the log records no annotations;
- a job deleted before it was ever admitted is left out (it is counted); a name observed again after its job
  finished or was deleted keeps its first life only (the fold ignores a finished job seen again);
- times are milliseconds from an origin: 0 for a simulated log (virtual times are kept as recorded), else the
  earliest of the first recorded event and the jobs' creation times.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from daemon.domain import events as ev
from daemon.domain.model import Millis, Workload
from daemon.sim.run import SimResult
from daemon.sim.scenario import Scenario, SimJob
from daemon.views.jobs import JobOutcome

VIRTUAL_BEFORE_MS = 946_684_800_000  # as daemon.query.moment: a log starting before 2000-01-01 has virtual times

Identity = tuple[str, str]
"""What makes two queue objects the same object: the kind and the name (`namespace/name` for a LocalQueue)."""

# The queue objects a what-if replaces; a warning about one is no object of its own.
_CONFIG_TYPES = tuple(t for t in ev.QUEUE_OBJECT_TYPES if t is not ev.ObjectWarned)


class WhatIfError(ValueError):
    """The recorded log or the changes cannot make a what-if run; the message names what is wrong."""


def identity(event: ev.Event) -> Identity | None:
    """The queue object an observation, deletion or rejection is about; None for any other event."""
    match event:
        case ev.ResourceFlavorObserved(flavor=rf):
            return ("ResourceFlavor", rf.name)
        case ev.ResourceFlavorDeleted(name=name):
            return ("ResourceFlavor", name)
        case ev.ClusterQueueObserved(cluster_queue=cq):
            return ("ClusterQueue", cq.name)
        case ev.ClusterQueueDeleted(name=name):
            return ("ClusterQueue", name)
        case ev.CohortObserved(cohort=co):
            return ("Cohort", co.name)
        case ev.CohortDeleted(name=name):
            return ("Cohort", name)
        case ev.LocalQueueObserved(local_queue=lq):
            return ("LocalQueue", lq.key)
        case ev.LocalQueueDeleted(namespace=ns, name=name):
            return ("LocalQueue", f"{ns}/{name}")
        case ev.PriorityClassObserved(priority_class=pc):
            return (pc.kind, pc.name)
        case ev.PriorityClassDeleted(kind=kind, name=name):
            return (kind, name)
        case ev.NamespaceObserved(namespace=ns):
            return ("Namespace", ns.name)
        case ev.ObjectRejected(kind=kind, name=name, namespace=ns):
            return (kind, f"{ns}/{name}" if ns and kind == "LocalQueue" else name)
        case _:
            return None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedJob:
    workload: Workload  # as last observed before its first admission; created_at from the origin
    arrival: Millis  # its first job.observed
    runtime: Millis | None  # its last run; None: its run never ended in the log (unknown)
    cluster_queue: str | None  # the one it was admitted to, else its LocalQueue's when it was observed
    admitted_at: tuple[Millis, ...]
    evicted_at: tuple[Millis, ...]
    finished_at: Millis | None  # job.finished, or job.deleted while it ran


@dataclass(frozen=True, slots=True, kw_only=True)
class Recording:
    source: str
    origin: int  # the recorded time (ms) of the what-if's 0; 0 for a simulated log
    virtual: bool
    end: Millis  # the last recorded event's time
    setup: tuple[ev.Event, ...]  # queue-object events before the first job was observed, in log order
    timed: tuple[tuple[Millis, ev.Event], ...]  # queue-object events after that, with their times
    jobs: tuple[RecordedJob, ...]  # in arrival order
    left_out: tuple[str, ...] = ()  # jobs deleted before they were ever admitted


@dataclass(slots=True)
class _Trail:
    workload: Workload
    first_seq: int
    arrival: int
    cluster_queue: str | None
    admitted_at: list[int] = field(default_factory=list)
    evicted_at: list[int] = field(default_factory=list)
    running_since: int | None = None
    runtime: int | None = None
    ended_at: int | None = None
    deleted_pending: bool = False


def recording(events: Iterable[tuple[int, ev.Event]], *, source: str) -> Recording:
    """The jobs and queue objects of a log, from its events `(recorded_at, event)` in seq order."""
    setup: list[ev.Event] = []
    timed_raw: list[tuple[int, ev.Event]] = []
    trails: dict[str, _Trail] = {}
    local_queues: dict[str, str] = {}  # LocalQueue key -> its ClusterQueue, as last observed
    first_at: int | None = None
    last_at = 0
    for seq, (at, event) in enumerate(events):
        first_at = at if first_at is None else first_at
        last_at = at
        if isinstance(event, _CONFIG_TYPES):
            if isinstance(event, ev.LocalQueueObserved):
                local_queues[event.local_queue.key] = event.local_queue.cluster_queue
            if trails:
                timed_raw.append((at, event))
            else:
                setup.append(event)
            continue
        match event:
            case ev.JobObserved(workload=wl):
                trail = trails.get(wl.key)
                if trail is None:
                    lq = local_queues.get(f"{wl.namespace}/{wl.queue_name}")
                    trails[wl.key] = _Trail(workload=wl, first_seq=seq, arrival=at, cluster_queue=lq)
                elif not trail.admitted_at and trail.ended_at is None and not trail.deleted_pending:
                    trail.workload = wl  # changed while pending: the engine admits the latest
            case (
                ev.WorkloadAdmitted(workload=key, at=t, admission=adm)
                | ev.WorkloadAdopted(workload=key, at=t, admission=adm)
            ):
                if (trail := trails.get(key)) is not None and trail.ended_at is None:
                    trail.admitted_at.append(t)
                    trail.running_since = t
                    trail.cluster_queue = adm.cluster_queue
            case ev.WorkloadEvicted(workload=key, at=t):
                if (trail := trails.get(key)) is not None and trail.running_since is not None:
                    trail.evicted_at.append(t)
                    trail.running_since = None
            case ev.JobFinished(job=key, at=t) | ev.JobDeleted(job=key, at=t):
                trail = trails.get(key)
                if trail is None or trail.ended_at is not None or trail.deleted_pending:
                    continue
                if trail.running_since is not None:
                    trail.runtime = t - trail.running_since
                    trail.ended_at = t
                    trail.running_since = None
                elif isinstance(event, ev.JobDeleted) and not trail.admitted_at:
                    trail.deleted_pending = True
                else:
                    trail.ended_at = t  # finished while not running (e.g. failed while suspended): runtime unknown
            case _:
                pass
    if first_at is None:
        raise WhatIfError(f"{source}: the log has no events")
    if not trails:
        raise WhatIfError(f"{source}: the log records no jobs (no job.observed event); there is nothing to replay")
    virtual = first_at < VIRTUAL_BEFORE_MS
    origin = 0 if virtual else min(first_at, *(t.workload.created_at for t in trails.values()))
    jobs: list[RecordedJob] = []
    left_out: list[str] = []
    for trail in sorted(trails.values(), key=lambda t: (t.arrival, t.first_seq)):
        if trail.deleted_pending:
            left_out.append(trail.workload.key)
            continue
        wl = trail.workload
        finished = trail.ended_at if trail.runtime is not None else None
        jobs.append(
            RecordedJob(
                workload=replace(wl, created_at=wl.created_at - origin),
                arrival=trail.arrival - origin,
                runtime=trail.runtime,
                cluster_queue=trail.cluster_queue,
                admitted_at=tuple(t - origin for t in trail.admitted_at),
                evicted_at=tuple(t - origin for t in trail.evicted_at),
                finished_at=None if finished is None else finished - origin,
            )
        )
    if not jobs:
        raise WhatIfError(f"{source}: every job the log records was deleted before it was admitted; nothing to replay")
    return Recording(
        source=source,
        origin=origin,
        virtual=virtual,
        end=last_at - origin,
        setup=tuple(setup),
        timed=tuple((at - origin, e) for at, e in timed_raw),
        jobs=tuple(jobs),
        left_out=tuple(left_out),
    )


def what_if_scenario(rec: Recording, changes: Sequence[ev.Event]) -> Scenario:
    """The recorded jobs with the recorded queue objects, each changed object replacing every recorded event about
    the object of its kind and name from the start (in the place of its first recorded appearance; an added one
    after the recorded setup)."""
    by_identity: dict[Identity, ev.Event] = {}
    for change in changes:
        ident = identity(change)
        if ident is None or isinstance(change, ev.ObjectRejected):
            raise WhatIfError(f"not a queue object observation: {change!r}")
        if ident in by_identity:
            raise WhatIfError(f"{ident[0]} {ident[1]} is changed twice")
        by_identity[ident] = change
    placed: set[Identity] = set()
    config: list[ev.Event] = []
    for event in rec.setup:
        ident = identity(event)
        if ident is None or ident not in by_identity:
            config.append(event)
        elif ident not in placed:
            placed.add(ident)
            config.append(by_identity[ident])
    for event in (e for _, e in rec.timed):  # changed objects first seen later still apply from the start
        ident = identity(event)
        if ident is not None and ident in by_identity and ident not in placed:
            placed.add(ident)
            config.append(by_identity[ident])
    config.extend(change for ident, change in by_identity.items() if ident not in placed)
    timed = tuple((at, e) for at, e in rec.timed if identity(e) not in by_identity)
    jobs = tuple(SimJob(workload=j.workload, submit_at=j.arrival, runtime=j.runtime) for j in rec.jobs)
    return Scenario(source=rec.source, config=tuple(config), jobs=jobs, timed_config=timed)


# --- the comparison -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Side:
    """One job in one run (the recorded one or the what-if)."""

    cluster_queue: str | None
    admitted_at: tuple[Millis, ...]
    finished_at: Millis | None
    wait: Millis | None  # first admission minus arrival; None: never admitted in this run


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDiff:
    key: str
    arrival: Millis
    runtime: Millis | None
    recorded: Side
    what_if: Side

    @property
    def wait_delta(self) -> Millis | None:
        if self.recorded.wait is None or self.what_if.wait is None:
            return None
        return self.what_if.wait - self.recorded.wait

    @property
    def finish_delta(self) -> Millis | None:
        if self.recorded.finished_at is None or self.what_if.finished_at is None:
            return None
        return self.what_if.finished_at - self.recorded.finished_at


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """A group of jobs in one run.

    Waits are over the jobs admitted in at least one of the two runs (one never admitted in either tells nothing);
    a job admitted in only the other run counts with its wait until this run's end (`censored`: the mean and max
    are then lower bounds). `makespan`: from the group's first arrival to the finish of its last job of known
    runtime; None if one of those did not finish in this run, or the group has none."""

    admitted: int  # jobs of the group admitted in this run
    mean_wait: Millis | None  # rounded down to whole ms; None: no job of the group was admitted in either run
    max_wait: Millis | None
    censored: int
    makespan: Millis | None


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDiff:
    name: str  # a ClusterQueue, "-" for jobs with none, "*" for all jobs
    jobs: int
    recorded: Figures
    what_if: Figures

    @property
    def mean_wait_delta(self) -> Millis | None:
        if self.recorded.mean_wait is None or self.what_if.mean_wait is None:
            return None
        return self.what_if.mean_wait - self.recorded.mean_wait

    @property
    def max_wait_delta(self) -> Millis | None:
        if self.recorded.max_wait is None or self.what_if.max_wait is None:
            return None
        return self.what_if.max_wait - self.recorded.max_wait

    @property
    def makespan_delta(self) -> Millis | None:
        if self.recorded.makespan is None or self.what_if.makespan is None:
            return None
        return self.what_if.makespan - self.recorded.makespan


@dataclass(frozen=True, slots=True, kw_only=True)
class WhatIf:
    recording: Recording
    changed: tuple[Identity, ...]  # what the changes replaced or added, in their order
    what_if_end: Millis
    jobs: tuple[JobDiff, ...]  # in arrival order
    queues: tuple[GroupDiff, ...]  # by name
    total: GroupDiff


def _figures(jobs: Sequence[JobDiff], side: str, end: Millis) -> Figures:
    waits: list[int] = []
    censored = 0
    for j in jobs:
        s: Side = getattr(j, side)
        if s.wait is not None:
            waits.append(s.wait)
        elif j.recorded.wait is not None or j.what_if.wait is not None:
            censored += 1
            waits.append(max(0, end - j.arrival))
    known = [getattr(j, side).finished_at for j in jobs if j.runtime is not None]
    makespan = None
    if known and all(f is not None for f in known):
        makespan = max(f for f in known if f is not None) - min(j.arrival for j in jobs)
    return Figures(
        admitted=sum(1 for j in jobs if getattr(j, side).wait is not None),
        mean_wait=sum(waits) // len(waits) if waits else None,
        max_wait=max(waits) if waits else None,
        censored=censored,
        makespan=makespan,
    )


def _group(name: str, jobs: Sequence[JobDiff], rec_end: Millis, what_if_end: Millis) -> GroupDiff:
    return GroupDiff(
        name=name,
        jobs=len(jobs),
        recorded=_figures(jobs, "recorded", rec_end),
        what_if=_figures(jobs, "what_if", what_if_end),
    )


def _side(cluster_queue: str | None, admitted_at: Sequence[Millis], finished_at: Millis | None, arrival: int) -> Side:
    return Side(
        cluster_queue=cluster_queue,
        admitted_at=tuple(admitted_at),
        finished_at=finished_at,
        wait=admitted_at[0] - arrival if admitted_at else None,
    )


def compare(rec: Recording, changed: Sequence[Identity], result: SimResult) -> WhatIf:
    """Each recorded job beside its what-if outcome; per ClusterQueue (the recorded one, else the what-if's) and
    for all jobs, the waiting times and makespans of both runs."""
    diffs: list[JobDiff] = []
    for job in rec.jobs:
        out = result.jobs.get(job.workload.key) or JobOutcome(key=job.workload.key)
        diffs.append(
            JobDiff(
                key=job.workload.key,
                arrival=job.arrival,
                runtime=job.runtime,
                recorded=_side(job.cluster_queue, job.admitted_at, job.finished_at, job.arrival),
                what_if=_side(out.cluster_queue, out.admitted_at, out.finished_at, job.arrival),
            )
        )
    groups: dict[str, list[JobDiff]] = {}
    for d in diffs:
        groups.setdefault(d.recorded.cluster_queue or d.what_if.cluster_queue or "-", []).append(d)
    return WhatIf(
        recording=rec,
        changed=tuple(changed),
        what_if_end=result.end,
        jobs=tuple(diffs),
        queues=tuple(_group(n, g, rec.end, result.end) for n, g in sorted(groups.items())),
        total=_group("*", diffs, rec.end, result.end),
    )
