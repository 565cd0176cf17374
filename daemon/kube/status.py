"""The status writer: Workload objects, ClusterQueue/LocalQueue status and Job Events, batched and rate-limited.

A Recorder listener marks what an appended event makes stale (a Workload, a queue, an Event to send); that is all
it does, so the append path stays cheap. The writer's workers take marked keys after a short linger, build the
object from the fold as it is *then* (so ten changes to one queue in the meantime cost one write), compare it with
what was last written (read back once at start-up with one list per kind) and write only differences, each write
taking a token from one bucket so that a deep queue never hammers the API server. Writes are merge patches on the
/status subresource; a Workload is created once with a POST. Nothing here is a source of truth: it is all rebuilt
from the log and the cluster after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from daemon.domain import events as ev
from daemon.domain.state import Phase, State
from daemon.kube import status_objects as so
from daemon.kube.client import MERGE_PATCH, KubeClient, Obj
from daemon.kube.errors import Conflict, KubeError, NotFound, Permanent, Temporary
from daemon.obs.logging import get_logger
from daemon.stages.ports import Clock
from daemon.views.queues import Queues

log = get_logger("admitd.status")

Key = tuple[str, str]  # ("wl", ns/job) | ("cq", name) | ("lq", ns/name) | ("ev", id)

_BASE = f"/apis/{so.GROUP}/{so.VERSION}"
_KINDS = {"wl": "workload", "ev": "event", "cq": "clusterqueue", "lq": "localqueue"}
_RETRY_S = (0.5, 1.0, 2.0, 5.0, 10.0)
ROUTINE_SLACK_S = 10.0  # how much older a pending-reason update may be than an admission written before it
QUEUE_SLACK_S = 5.0  # the same for a queue's status
_PENDING_WL = "pending-wl:"  # the event id of a Workload's unsent pending Warning: this prefix and the job's key
# Unsent Events kept at most (Kubernetes Events are lossy; this bounds memory while the API server is behind). When
# full, the oldest unsent Pending goes first (a waiting Job's reason, on the Job or its Workload: the Workload's
# status and `admitd explain` keep it), then a new Pending is not queued, and only then the oldest of the others
# (Admitted, Preempted, Evicted, a rejection): the Events users act on outlive the routine ones. Each drop is counted
# (`dropped`, admitd_status_events_dropped_total{reason}) and logged, at most once a DROP_LOG_EVERY_S.
MAX_QUEUED_EVENTS = 10_000
DROP_LOG_EVERY_S = 60.0
_DELETIONS = (ev.ClusterQueueDeleted, ev.LocalQueueDeleted, ev.CohortDeleted, ev.ResourceFlavorDeleted)


def _identity(e: ev.Event) -> tuple[str, str]:
    """(kind, name or ns/name) of a queue object's deletion, as `_warned` keys it."""
    match e:
        case ev.LocalQueueDeleted(namespace=ns, name=name):
            return ("LocalQueue", f"{ns}/{name}")
        case ev.ClusterQueueDeleted(name=name) | ev.CohortDeleted(name=name) | ev.ResourceFlavorDeleted(name=name):
            return (type(e).__name__.removesuffix("Deleted"), name)
    return ("", "")


@dataclass(slots=True)
class _Job:
    """What the writer keeps of a live job that the fold forgets when it finishes."""

    uid: str
    kind: str
    local_queue: str  # ns/name, "" without a queue
    cluster_queue: str | None = None  # while it holds quota there
    preemption: so.Preemption | None = None
    finished: bool | None = None
    name: str = ""  # its Workload's name, once created
    spec: Obj | None = None  # the Workload spec last written
    status: Obj | None = None  # the Workload status last written (or read back)
    started: bool = False  # its current admission was carried out (the Job unsuspended)
    pending_kind: str | None = None  # the reason kind of the last Pending Event sent since it last ran
    # Events of a decision not yet carried out on the Job, sent once it is: (reason, message, at, seq)
    held: list[tuple[str, str, int, int]] = field(default_factory=list)
    estimate: str | None = None  # the ESTIMATE_ANNOTATION value its last recorded estimate asks for
    estimate_written: str | None = None  # ... and the one its Workload has (written or read back)


@dataclass(slots=True)
class WriterStats:
    writes: dict[str, int] = field(default_factory=dict)  # per kind of write
    skipped: int = 0  # keys drained whose object was already as desired
    failed: int = 0

    def count(self, kind: str) -> None:
        self.writes[kind] = self.writes.get(kind, 0) + 1


class StatusWriter:
    """Mark with `listener` (a Recorder listener); `run` writes. `workload_objects=False` keeps Workloads out."""

    def __init__(
        self,
        client: KubeClient,
        state: State,
        clock: Clock,
        *,
        workload_objects: bool = True,
        qps: float = 50.0,
        burst: int = 100,
        linger_s: float = 1.0,
        queue_linger_s: float = 1.0,
        parallelism: int = 4,
        monotonic: Callable[[], float] = time.monotonic,
        synced: Callable[[str, str, float], None] | None = None,
        dropped: Callable[[str], None] | None = None,
        queues: Queues | None = None,
    ) -> None:
        self.client = client
        self.state = state
        # The queue figures the ClusterQueue and LocalQueue status render (daemon/views, the same as /metrics and
        # `admitd queues`): a projection the caller feeds before the state folds each event (admitd run: the
        # Recorder's `projections`).
        self.queues = Queues.of(state) if queues is None else queues
        self.clock = clock
        self.workload_objects = workload_objects
        self.linger_s = linger_s
        self.queue_linger_s = queue_linger_s
        self.parallelism = parallelism
        self.monotonic = monotonic
        self.bucket = so.TokenBucket(qps, burst, monotonic())
        self.stats = WriterStats()
        # (kind, lane, seconds from a change being marked to the cluster showing it), per key drained
        self.synced = synced
        self.dropped = dropped  # the reason of an unsent Event dropped because MAX_QUEUED_EVENTS were waiting
        self.instance = socket.gethostname()
        # key -> monotonic time first marked; insertion order is drain order. Three lanes. `_urgent`: what users act
        # on (a new Job's Workload, an admission, a preemption or eviction, a finish; the Admitted and Preempted
        # Events); `_routine`: a waiting workload's pending reason (its Workload status and its Pending Event);
        # `_queues`: ClusterQueue and LocalQueue status (which every admission and finish in the queue changes). A key
        # is due `linger_s` after its first mark (`queue_linger_s` for queues): a second of lingering folds what a
        # job goes through within it into one write (pending then admitted, admitted then preempted: about a quarter
        # of the Workload writes of Kueue's baseline shape end to end) and a busy queue's counts into one write, not
        # one per change. While the API server keeps up, everything is written when due. When it does not, a key's
        # deadline is its due time plus its lane's slack (0 / ROUTINE_SLACK_S / QUEUE_SLACK_S) and the earliest
        # deadline goes first: an admission overtakes pending-reason updates up to 10 s older than it, and nothing
        # waits forever behind a stream of admissions.
        self._urgent: dict[Key, float] = {}
        self._routine: dict[Key, float] = {}
        self._queues: dict[Key, float] = {}
        self._inflight: set[Key] = set()
        self._wake = asyncio.Event()
        self._jobs: dict[str, _Job] = {}
        self._cq_status: dict[str, Obj] = {}
        self._lq_status: dict[str, Obj] = {}
        self._rejected: dict[tuple[str, str], tuple[str, ...]] = {}  # (kind, name or ns/name) -> why, while so
        self._warned: dict[tuple[str, str], tuple[str, ...]] = {}  # the same -> the fields it ignores, while so
        self._events: dict[str, so.JobEvent] = {}  # event id -> event, unsent
        self._pending_event: dict[str, str] = {}  # job -> id of its unsent Pending event
        self._droppable: dict[str, None] = {}  # ids of the unsent Pending Events (Job's and Workload's), oldest first
        self._drops: dict[str, int] = {}  # Event reason -> dropped since the last log line
        self._drops_total = 0
        self._drop_logged_at: float | None = None
        self._event_ids = 0
        self._attempts: dict[Key, int] = {}
        self._round: dict[str, so.QueueCounts] | None = None  # LocalQueue counts, per drain round
        self._round_at = -1.0

    # --- marking (the Recorder listener: cheap) ---------------------------------------------------------------

    def _mark(self, key: Key, since: float | None = None, *, urgent: bool = True) -> None:
        """Mark `key` to be written. `urgent=False`: a change of a waiting workload's pending reason, which may
        wait behind what users act on. `since`: when the change was first marked, for a key marked again to retry a
        failed write."""
        at = self.monotonic() if since is None else since
        if key[0] in ("cq", "lq"):
            lane = self._queues
        elif urgent:
            lane = self._urgent
            routine = self._routine.pop(key, None)  # moves ahead, keeping its first mark
            if routine is not None and key not in lane:
                at = min(at, routine)
        elif key in self._urgent:
            return
        else:
            lane = self._routine
        if key not in lane:
            lane[key] = at
            self._wake.set()

    def _unmark(self, key: Key) -> None:
        self._urgent.pop(key, None)
        self._routine.pop(key, None)

    def _mark_job_queues(self, key: str) -> None:
        job = self._jobs.get(key)
        if job is None:
            return
        if job.local_queue:
            self._mark(("lq", job.local_queue))
            lq = self.state.local_queues.get(job.local_queue)
            if lq is not None:
                self._mark(("cq", lq.cluster_queue))
        if job.cluster_queue:
            self._mark(("cq", job.cluster_queue))

    def listener(self, event: ev.Event, seq: int) -> None:
        match event:
            case ev.JobObserved(workload=wl):
                job = self._jobs.get(wl.key)
                lq = f"{wl.namespace}/{wl.queue_name}" if wl.queue_name else ""
                if job is None:
                    job = self._jobs[wl.key] = _Job(uid=wl.uid, kind=wl.kind, local_queue=lq)
                else:
                    if job.local_queue != lq:
                        self._mark_job_queues(wl.key)  # the old queues lose a pending workload
                    job.uid, job.local_queue = wl.uid, lq
                self._mark(("wl", wl.key), urgent=not job.name)  # a Job without its Workload yet: urgent
                self._mark_job_queues(wl.key)
            case ev.WorkloadPending(workload=key, reason=reason, at=at):
                job = self._jobs.get(key)
                if job is not None:
                    self._mark(("wl", key), urgent=False)  # its status shows every reason, figures included
                    if key in self._pending_event or job.pending_kind != reason.kind:
                        # An Event for a new kind of reason (or one replacing the unsent Pending): a shortage that
                        # only changes its figures is not news on the Job, as client-go's correlator aggregates
                        # events of one reason (the figures stay in the Workload, `admitd explain` and the log).
                        self._event(key, job, "Pending", so.pending_message(reason), "Normal", at, seq)
                        job.pending_kind = reason.kind
                        if self.workload_objects:  # and a Warning on its Workload, as Kueue's scheduler sends
                            eid = _PENDING_WL + key  # one per job: a newer one replaces the unsent one
                            pending = so.workload_pending_event(key, job.uid, job.kind, reason, at, seq)
                            self._queue_event(eid, pending, urgent=False)
            case ev.WorkloadEstimated(workload=key):
                job = self._jobs.get(key)
                if job is not None and self.workload_objects:
                    # At most one per workload per estimating round, and only when it moved (daemon.stages.estimate):
                    # the writes are bounded by that, and by the token bucket like every other write.
                    job.estimate = so.estimate_annotation(event)
                    self._mark(("wl", key), urgent=False)
            case ev.WorkloadAdmitted(workload=key, admission=admission, at=at):
                job = self._jobs.get(key)
                if job is not None:
                    job.cluster_queue = admission.cluster_queue
                    self._mark(("wl", key))
                    self._mark_job_queues(key)
                    rec = self.state.workloads.get(key)
                    waited = None if rec is None else at - rec.queue_order_at
                    # The Job keeps the reason it was told until the admission reaches it: one undone before that
                    # (preempted first) leaves it waiting as it was, with no second Pending Event.
                    self._drop_unsent_pending(key)
                    # So does an estimate of its start not yet written: the wait it belongs to has ended (the
                    # annotation keeps the last one written; the log keeps them all). One write fewer per Job whose
                    # admission came before the writer reached its estimate.
                    job.estimate = None
                    job.started = False
                    job.held = [("Admitted", so.admitted_message(admission, waited), at, seq)]
            case ev.JobUnsuspended(job=key):
                job = self._jobs.get(key)
                if job is not None:  # the admission carried out: its Events (and a preemption's that came since)
                    job.started, job.pending_kind = True, None  # it ran: a later wait is news
                    for why, message, held_at, held_seq in job.held:
                        self._event(key, job, why, message, "Normal", held_at, held_seq)
                    job.held = []
            case ev.WorkloadPreempted(workload=key, at=at):
                job = self._jobs.get(key)
                if job is not None:
                    p = self._preemption(event)
                    job.preemption = p
                    self._mark(("wl", key))
                    self._job_event(key, job, so.eviction_reason(p), so.eviction_message(p), at, seq)
            case ev.WorkloadTimedOut(workload=key, at=at):
                job = self._jobs.get(key)
                if job is not None:  # waitForPodsReady: Evicted (PodsReadyTimeout or InactiveWorkload), not Preempted
                    p = so.Preemption(
                        preemptor=None,
                        preemptor_uid=None,
                        preemptor_cluster_queue=None,
                        reason=event.reason,
                        policy="waitForPodsReady",
                    )
                    job.preemption = p
                    self._mark(("wl", key))
                    self._job_event(key, job, f"EvictedDueTo{event.reason}", so.eviction_message(p), at, seq)
            case ev.WorkloadEvicted(workload=key):
                if key in self._jobs:
                    self._mark(("wl", key))
                    self._mark_job_queues(key)
                    job = self._jobs[key]
                    job.cluster_queue = None
                    job.started, job.held = False, []  # what was never carried out is not told
            case ev.JobFinished(job=key, succeeded=succeeded):
                job = self._jobs.get(key)
                if job is not None:
                    job.finished = succeeded
                    self._mark(("wl", key))
                    self._mark_job_queues(key)
                    job.cluster_queue = None
            case ev.JobDeleted(job=key):
                if key in self._jobs:
                    self._mark_job_queues(key)
                    self._mark(("wl", key))  # drained as gone: the garbage collector deletes the Workload
            case ev.ClusterQueueObserved(cluster_queue=cq):
                self._mark_cq_and_its_lqs(cq.name)
            case ev.ClusterQueueDeleted(name=name):
                self._mark_cq_and_its_lqs(name)
            case ev.LocalQueueObserved(local_queue=lq):
                self._mark(("lq", lq.key))
                self._mark(("cq", lq.cluster_queue))
            case ev.LocalQueueDeleted(namespace=ns, name=name):
                self._mark(("lq", f"{ns}/{name}"))
            case ev.ResourceFlavorObserved() | ev.ResourceFlavorDeleted():
                for name in self.state.cluster_queues:
                    self._mark_cq_and_its_lqs(name)
            case ev.CohortObserved() | ev.CohortDeleted():
                for name in self.state.cluster_queues:  # a cycle made or mended, or a rejected version replaced
                    self._mark_cq_and_its_lqs(name)
            case ev.ObjectRejected(kind=kind, name=name, namespace=ns, errors=errors):
                self._rejection(kind, name, ns, errors, seq)
            case ev.ObjectWarned(kind=kind, name=name, namespace=ns, warnings=warnings):
                self._warning(kind, name, ns, warnings, seq)
            case _:
                pass
        self._forget_rejection(event)
        if isinstance(event, _DELETIONS):
            self._warned.pop(_identity(event), None)

    def _rejection(self, kind: str, name: str, namespace: str | None, errors: tuple[str, ...], seq: int) -> None:
        """Tell the object's owner: a Warning Event on it, and for a ClusterQueue or LocalQueue an Active=False
        condition (through the engine's verdict where an older version is held: `views.queues.Queues.activity`)."""
        subject = f"{namespace}/{name}" if namespace else name
        self._rejected[(kind, subject)] = errors
        kept = (kind == "ClusterQueue" and name in self.state.cluster_queues) or (
            kind == "Cohort" and name in self.state.cohorts
        )
        self._event_ids += 1
        eid = str(self._event_ids)
        self._queue_event(eid, so.rejection_event(kind, namespace, name, errors, kept, self.clock.now(), seq))
        if kind == "ClusterQueue":
            self._mark_cq_and_its_lqs(name)
        elif kind == "Cohort":
            for cq in self.state.cluster_queues:
                self._mark_cq_and_its_lqs(cq)
        elif kind == "LocalQueue":
            self._mark(("lq", subject))

    def _warning(self, kind: str, name: str, namespace: str | None, warnings: tuple[str, ...], seq: int) -> None:
        """Accepted, but with fields admitd ignores: a Warning Event naming them, and on a ClusterQueue or LocalQueue
        the `admitd.io/IgnoredSpec` condition (set, or turned False by warnings=())."""
        subject = f"{namespace}/{name}" if namespace else name
        if warnings:
            self._warned[(kind, subject)] = warnings
            self._event_ids += 1
            eid = str(self._event_ids)
            self._queue_event(eid, so.ignored_spec_event(kind, namespace, name, warnings, self.clock.now(), seq))
        else:
            self._warned.pop((kind, subject), None)
        if kind == "ClusterQueue":
            self._mark(("cq", name))
        elif kind == "LocalQueue":
            self._mark(("lq", subject))

    def _forget_rejection(self, event: ev.Event) -> None:
        """A valid version observed, or the object deleted: no longer rejected."""
        match event:
            case ev.ClusterQueueObserved(cluster_queue=cq):
                self._rejected.pop(("ClusterQueue", cq.name), None)
            case ev.ClusterQueueDeleted(name=name):
                self._rejected.pop(("ClusterQueue", name), None)
            case ev.CohortObserved(cohort=co):
                self._rejected.pop(("Cohort", co.name), None)
            case ev.CohortDeleted(name=name):
                self._rejected.pop(("Cohort", name), None)
            case ev.LocalQueueObserved(local_queue=lq):
                self._rejected.pop(("LocalQueue", lq.key), None)
            case ev.LocalQueueDeleted(namespace=ns, name=name):
                self._rejected.pop(("LocalQueue", f"{ns}/{name}"), None)
            case _:
                pass

    def _mark_cq_and_its_lqs(self, name: str) -> None:
        self._mark(("cq", name))
        for key, lq in self.state.local_queues.items():
            if lq.cluster_queue == name:
                self._mark(("lq", key))

    def _preemption(self, e: ev.WorkloadPreempted) -> so.Preemption:
        uid = None
        if e.preemptor is not None:
            rec = self.state.workloads.get(e.preemptor)
            uid = rec.workload.uid if rec is not None else None
        return so.Preemption(
            preemptor=e.preemptor,
            preemptor_uid=uid,
            preemptor_cluster_queue=e.preemptor_cluster_queue,
            reason=e.reason,
            policy=e.policy,
        )

    def _job_event(self, key: str, job: _Job, reason: str, message: str, at: int, seq: int) -> None:
        """An Event about the admission in force: sent now if it was carried out, else held until it is. An
        admission undone before it reached the Job (its preemption overtook it) tells the Job nothing: the
        Workload's status and the log keep it."""
        if job.started:
            self._event(key, job, reason, message, "Normal", at, seq)
        else:
            job.held.append((reason, message, at, seq))

    def _drop_unsent_pending(self, key: str) -> None:
        if self._events.pop(_PENDING_WL + key, None) is not None:
            self._droppable.pop(_PENDING_WL + key, None)
            self._unmark(("ev", _PENDING_WL + key))
        stale = self._pending_event.pop(key, None)
        if stale is not None:  # an unsent Pending is superseded by what came after it
            self._events.pop(stale, None)
            self._droppable.pop(stale, None)
            self._unmark(("ev", stale))
            job = self._jobs.get(key)
            if job is not None:
                job.pending_kind = None  # the Job was never told that reason: the next one is news

    def _event(self, key: str, job: _Job, reason: str, message: str, type_: str, at: int, seq: int) -> None:
        namespace, _, name = key.partition("/")
        self._drop_unsent_pending(key)
        self._event_ids += 1
        eid = str(self._event_ids)
        event = so.JobEvent(
            namespace=namespace,
            name=name,
            uid=job.uid,
            kind=job.kind,
            reason=reason,
            message=message,
            type=type_,
            at=at,
            seq=seq,
        )
        if self._queue_event(eid, event, urgent=reason != "Pending") and reason == "Pending":
            self._pending_event[key] = eid

    def _queue_event(self, eid: str, event: so.JobEvent, *, urgent: bool = True) -> bool:
        """Queue `event` to be sent (`urgent=False`: a Pending, the first to go when MAX_QUEUED_EVENTS wait).
        False when it was not queued: full of Events that matter more than this Pending."""
        if eid not in self._events and len(self._events) >= MAX_QUEUED_EVENTS:
            if self._droppable:
                self._drop(next(iter(self._droppable)))
            elif not urgent:
                self._count_drop(event.reason)
                return False
            else:
                self._drop(next(iter(self._events)))
        self._events[eid] = event
        if not urgent:
            self._droppable.pop(eid, None)  # a replaced Workload Pending: now the newest
            self._droppable[eid] = None
        self._mark(("ev", eid), urgent=urgent)
        return True

    def _drop(self, eid: str) -> None:
        e = self._events.pop(eid)
        self._droppable.pop(eid, None)
        self._unmark(("ev", eid))
        job = f"{e.namespace}/{e.name}"
        if self._pending_event.get(job) == eid:
            del self._pending_event[job]  # its reason stays in the Workload's status; the next kind is told
        self._count_drop(e.reason)

    def _count_drop(self, reason: str) -> None:
        self._drops[reason] = self._drops.get(reason, 0) + 1
        self._drops_total += 1
        if self.dropped is not None:
            self.dropped(reason)
        now = self.monotonic()
        if self._drop_logged_at is None or now - self._drop_logged_at >= DROP_LOG_EVERY_S:
            log.warning(
                "the status writer is behind: unsent Events dropped",
                dropped=dict(sorted(self._drops.items())),
                dropped_total=self._drops_total,
                queued=len(self._events),
                limit=MAX_QUEUED_EVENTS,
                since_s=None if self._drop_logged_at is None else round(now - self._drop_logged_at, 1),
            )
            self._drops.clear()
            self._drop_logged_at = now

    # --- the writer ---------------------------------------------------------------------------------------------

    async def run(self, started: asyncio.Event | None = None) -> None:
        """Wait for `started` (the log replayed, the cluster listed), read back what admitd wrote before, then
        write forever."""
        if started is not None:
            await started.wait()
        await self._read_back()
        for key, rec in self.state.workloads.items():
            if key not in self._jobs:
                lq = f"{rec.workload.namespace}/{rec.workload.queue_name}" if rec.workload.queue_name else ""
                self._jobs[key] = _Job(uid=rec.workload.uid, kind=rec.workload.kind, local_queue=lq)
            job = self._jobs[key]
            if rec.admission is not None:
                job.cluster_queue = rec.admission.cluster_queue
            self._mark(("wl", key))
        for name in self.state.cluster_queues:
            self._mark(("cq", name))
        for lq_key in self.state.local_queues:
            self._mark(("lq", lq_key))
        async with asyncio.TaskGroup() as group:
            for i in range(self.parallelism):
                group.create_task(self._worker(), name=f"status-{i}")

    async def _list(self, path: str, **params: str) -> list[Obj]:
        items: list[Obj] = []
        query = {"limit": "500", **params}
        while True:
            await self._token()
            page = await self.client.request("GET", path, params=query)
            items.extend(page.get("items") or ())
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            query = {**query, "continue": token}

    async def _read_back(self) -> None:
        """One list per kind: what admitd wrote before a restart, so that only differences are written again.
        A temporary failure (the API server busy, or its CRD storage re-initialising) is retried for a while."""
        for delay in (*_RETRY_S, 10.0, 10.0, 10.0):
            try:
                await self._read_back_once()
                return
            except Temporary as e:
                log.info("reading back the status written before failed; retrying", error=str(e), retry_in_s=delay)
                await asyncio.sleep(delay)
            except KubeError as e:
                log.warning("could not read back the status written before; writing it all again", error=str(e))
                return
        log.warning("could not read back the status written before; writing it all again")

    async def _read_back_once(self) -> None:
        for obj in await self._list(f"{_BASE}/clusterqueues"):
            self._cq_status[obj["metadata"]["name"]] = so.queue_status_view(obj.get("status"))
        for obj in await self._list(f"{_BASE}/localqueues"):
            meta = obj["metadata"]
            self._lq_status[f"{meta['namespace']}/{meta['name']}"] = so.queue_status_view(obj.get("status"))
        if not self.workload_objects:
            return
        selector = f"{so.MANAGED_BY[0]}={so.MANAGED_BY[1]}"
        for obj in await self._list(f"{_BASE}/workloads", labelSelector=selector):
            meta = obj["metadata"]
            owners = [o for o in meta.get("ownerReferences") or () if o.get("controller")]
            if not owners:
                continue
            key = f"{meta['namespace']}/{owners[0]['name']}"
            rec = self.state.workloads.get(key)
            if rec is None or rec.workload.uid != owners[0].get("uid"):
                continue  # finished, or an older Job of that name: nothing more to write there
            lq = f"{rec.workload.namespace}/{rec.workload.queue_name}" if rec.workload.queue_name else ""
            self._jobs[key] = _Job(
                uid=rec.workload.uid,
                kind=rec.workload.kind,
                local_queue=lq,
                name=meta["name"],
                spec=obj.get("spec"),
                status=so.workload_status_view(obj.get("status")),
                estimate_written=(meta.get("annotations") or {}).get(so.ESTIMATE_ANNOTATION),
            )

    async def _token(self) -> None:
        delay = self.bucket.reserve(self.monotonic())
        if delay > 0:
            await asyncio.sleep(delay)

    def marked(self) -> set[Key]:
        """What is waiting to be written."""
        return {*self._urgent, *self._routine, *self._queues}

    def backlog(self) -> int:
        """Keys marked and not yet written (lingering, waiting for a worker, or being retried later)."""
        return len(self._urgent) + len(self._routine) + len(self._queues)

    def _head(self, lane: dict[Key, float]) -> tuple[Key, float] | None:
        """The first key of `lane` not being written, with when it was first marked."""
        for key, marked in lane.items():
            if key not in self._inflight:
                return key, marked
        return None

    def _take(self, now: float) -> tuple[Key, float, str] | float | None:
        """Of the lanes' first keys that are due, the one with the earliest deadline (taken off its lane), with when
        it was first marked and its lane's name; else how long until the first is due; None when nothing is
        marked."""
        best: tuple[float, str, dict[Key, float], Key, float] | None = None
        wait: float | None = None
        for name, lane, linger, slack in (
            ("urgent", self._urgent, self.linger_s, 0.0),
            ("routine", self._routine, self.linger_s, ROUTINE_SLACK_S),
            ("queues", self._queues, self.queue_linger_s, QUEUE_SLACK_S),
        ):
            head = self._head(lane)
            if head is None:
                continue
            key, marked = head
            due = marked + linger
            if due > now:
                wait = due - now if wait is None else min(wait, due - now)
            elif best is None or due + slack < best[0]:
                best = (due + slack, name, lane, key, marked)
        if best is None:
            return wait
        _, name, lane, key, marked = best
        del lane[key]
        return key, marked, name

    async def _next(self) -> tuple[Key, float, str]:
        while True:
            got = self._take(self.monotonic())
            if isinstance(got, tuple):
                return got
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), got)

    async def _worker(self) -> None:
        while True:
            key, marked, lane = await self._next()
            self._inflight.add(key)
            try:
                await self._write(key)
                self._attempts.pop(key, None)
                if self.synced is not None:
                    self.synced(_KINDS[key[0]], lane, self.monotonic() - marked)
            except (Temporary, Conflict) as e:
                self.stats.failed += 1
                attempt = self._attempts.get(key, 0)
                self._attempts[key] = attempt + 1
                delay = _RETRY_S[min(attempt, len(_RETRY_S) - 1)]
                log.info("status write failed; retrying", key="/".join(key), error=str(e), retry_in_s=delay)
                retry = functools.partial(self._mark, key, marked, urgent=lane != "routine")
                asyncio.get_running_loop().call_later(delay, retry)
            except Permanent as e:
                self.stats.failed += 1
                self._attempts.pop(key, None)
                log.warning("status write refused; not retried", key="/".join(key), error=str(e))
            finally:
                self._inflight.discard(key)
                if key in self._urgent or key in self._routine or key in self._queues:  # marked again meanwhile
                    self._wake.set()

    async def _write(self, key: Key) -> None:
        kind, name = key
        if kind == "ev":
            await self._write_event(name)
        elif kind == "wl":
            await self._write_workload(name)
        elif kind == "cq":
            await self._write_cluster_queue(name)
        else:
            await self._write_local_queue(name)

    def _now(self) -> str:
        return so.rfc3339(self.clock.now())

    # --- Events -------------------------------------------------------------------------------------------------

    async def _write_event(self, eid: str) -> None:
        e = self._events.get(eid)
        if e is None:
            return
        await self._token()
        try:
            await self.client.request(
                "POST", f"/api/v1/namespaces/{e.namespace}/events", body=so.event_object(e, instance=self.instance)
            )
        except Conflict:
            pass  # written by an earlier attempt whose answer was lost
        except NotFound:
            pass  # the namespace is gone
        queued = self._events.get(eid)
        if queued is not None and queued is not e:  # replaced while it was sent (a Workload's Pending): send that too
            self._mark(("ev", eid), urgent=False)
            return
        self._events.pop(eid, None)
        self._droppable.pop(eid, None)
        if self._pending_event.get(f"{e.namespace}/{e.name}") == eid:
            del self._pending_event[f"{e.namespace}/{e.name}"]
        self.stats.count("event")

    # --- Workloads ----------------------------------------------------------------------------------------------

    def _facts(self, key: str, job: _Job) -> so.WorkloadFacts | None:
        if job.finished is not None:
            return so.WorkloadFacts(finished=job.finished)
        rec = self.state.workloads.get(key)
        if rec is None:
            return None
        if rec.phase is Phase.ADMITTED:
            return so.WorkloadFacts(admission=rec.admission, evicting=rec.evicting, preemption=job.preemption)
        return so.WorkloadFacts(pending=rec.last_reason, preemption=job.preemption)

    def _priority_ref(self, key: str) -> tuple[int, so.PriorityRef | None]:
        rec = self.state.workloads[key]
        wl = rec.workload
        classes = self.state.priority_classes
        if wl.priority_class is not None:
            if ("WorkloadPriorityClass", wl.priority_class) in classes:
                return rec.priority, so.PriorityRef(
                    group=so.GROUP, kind="WorkloadPriorityClass", name=wl.priority_class
                )
            if ("PriorityClass", wl.priority_class) in classes:
                return rec.priority, so.PriorityRef(
                    group="scheduling.k8s.io", kind="PriorityClass", name=wl.priority_class
                )
        if wl.pod_priority_class is not None and ("PriorityClass", wl.pod_priority_class) in classes:
            return rec.priority, so.PriorityRef(
                group="scheduling.k8s.io", kind="PriorityClass", name=wl.pod_priority_class
            )
        return rec.priority, None

    async def _write_workload(self, key: str) -> None:
        job = self._jobs.get(key)
        if job is None or not self.workload_objects:
            if job is not None and (job.finished is not None or key not in self.state.workloads):
                del self._jobs[key]
            return
        facts = self._facts(key, job)
        if facts is None:  # deleted: the garbage collector deletes its Workload with it
            del self._jobs[key]
            return
        namespace = key.partition("/")[0]
        path = f"{_BASE}/namespaces/{namespace}/workloads"
        if job.finished is None:
            priority, ref = self._priority_ref(key)
            rec = self.state.workloads[key]
            obj = so.workload_object(rec.workload, priority, ref, active=not rec.inactive)
            if not job.name:
                await self._token()
                try:
                    await self.client.request("POST", path, body=obj)
                    self.stats.count("workload-create")
                    job.status = None
                except Conflict:
                    # Already there (an answer lost, or made before a restart whose read-back failed): its name
                    # carries the Job's uid, so it is this Job's; write its whole status over whatever it has.
                    job.status = None
                job.name, job.spec = obj["metadata"]["name"], obj["spec"]
            elif (
                _spec_patch(job.spec or {}) != _spec_patch(obj["spec"])
                and facts.admission is None
                and not _reserved(job.status)
            ):
                await self._token()
                await self.client.request(
                    "PATCH", f"{path}/{job.name}", body={"spec": _spec_patch(obj["spec"])}, content_type=MERGE_PATCH
                )
                self.stats.count("workload-spec")
                job.spec = obj["spec"]
        elif not job.name:
            del self._jobs[key]  # finished before its Workload was ever written: nothing to show
            return
        if job.finished is None and job.estimate is not None and job.estimate != job.estimate_written:
            await self._token()
            try:
                await self.client.request(
                    "PATCH",
                    f"{path}/{job.name}",
                    body={"metadata": {"annotations": {so.ESTIMATE_ANNOTATION: job.estimate}}},
                    content_type=MERGE_PATCH,
                )
            except NotFound:
                job.name, job.spec, job.status = "", None, None
                if key in self.state.workloads:
                    self._mark(("wl", key))
                return
            self.stats.count("workload-estimate")
            job.estimate_written = job.estimate
        desired = so.workload_status(facts, job.status, self._now())
        if desired == (job.status or {}):
            self.stats.skipped += 1
        else:
            await self._token()
            try:
                await self.client.request(
                    "PATCH",
                    f"{path}/{job.name}/status",
                    body=so.status_patch(desired, job.status, unknown_clears=("admission",)),
                    content_type=MERGE_PATCH,
                )
            except NotFound:
                # Deleted under us (by a user, or with its Job): recreate it if the Job still waits or runs.
                job.name, job.spec, job.status = "", None, None
                if job.finished is None and key in self.state.workloads:
                    self._mark(("wl", key))
                return
            self.stats.count("workload-status")
            job.status = desired
        if job.finished is not None:
            del self._jobs[key]

    # --- queues -------------------------------------------------------------------------------------------------

    def _cq_counts(self, name: str) -> so.QueueCounts:
        q = self.queues
        return so.QueueCounts(pending=q.pending(name), reserving=q.admitted(name), usage=q.usage.get(name, {}))

    def _lq_counts(self) -> dict[str, so.QueueCounts]:
        """Every LocalQueue's counts (`Queues.local_queues`), shared by the drain round."""
        now = self.monotonic()
        if self._round is not None and now - self._round_at < self.queue_linger_s:
            return self._round
        self._round = {
            lq: so.QueueCounts(pending=c.pending, reserving=c.admitted, usage=c.usage)
            for lq, c in self.queues.local_queues().items()
        }
        self._round_at = now
        return self._round

    async def _write_cluster_queue(self, name: str) -> None:
        cq = self.state.cluster_queues.get(name)
        previous = self._cq_status.get(name)
        if cq is None:
            errors = self._rejected.get(("ClusterQueue", name))
            if errors is None:
                self._cq_status.pop(name, None)
                return
            desired = so.rejected_status("ClusterQueue", errors, previous, self._now())
        else:
            a = self.queues.activity(name)
            active = (a.active, a.reason, a.condition)
            desired = so.cluster_queue_status(
                cq,
                self._cq_counts(name),
                active,
                previous,
                self._now(),
                warnings=self._warned.get(("ClusterQueue", name), ()),
            )
        await self._patch_status(f"{_BASE}/clusterqueues/{name}/status", desired, previous, "clusterqueue")
        self._cq_status[name] = desired

    async def _write_local_queue(self, key: str) -> None:
        lq = self.state.local_queues.get(key)
        previous = self._lq_status.get(key)
        namespace, _, name = key.partition("/")
        path = f"{_BASE}/namespaces/{namespace}/localqueues/{name}/status"
        if lq is None:
            errors = self._rejected.get(("LocalQueue", key))
            if errors is None:
                self._lq_status.pop(key, None)
                return
            desired = so.rejected_status("LocalQueue", errors, previous, self._now())
            await self._patch_status(path, desired, previous, "localqueue")
            self._lq_status[key] = desired
            return
        cq = self.state.cluster_queues.get(lq.cluster_queue)
        active = cq is not None and self.queues.activity(lq.cluster_queue).active
        counts = self._lq_counts().get(key, so.QueueCounts(pending=0, reserving=0, usage={}))
        desired = so.local_queue_status(
            lq, cq, active, counts, previous, self._now(), warnings=self._warned.get(("LocalQueue", key), ())
        )
        await self._patch_status(path, desired, previous, "localqueue")
        self._lq_status[key] = desired

    async def _patch_status(self, path: str, desired: Obj, previous: Obj | None, kind: str) -> None:
        if desired == (previous or {}):
            self.stats.skipped += 1
            return
        await self._token()
        try:
            await self.client.request("PATCH", path, body=so.status_patch(desired, previous), content_type=MERGE_PATCH)
        except NotFound:
            return  # deleted meanwhile; its deletion event comes through the watch
        self.stats.count(f"{kind}-status")


def _reserved(status: Obj | None) -> bool:
    return so.is_true((status or {}).get("conditions") or (), "QuotaReserved")


def _spec_patch(spec: Obj) -> Obj:
    """The spec fields admitd sets that may change while a workload waits (its queue, its priority)."""
    return {k: spec.get(k) for k in ("queueName", "priority", "priorityClassRef")}


__all__ = ["StatusWriter", "WriterStats"]
