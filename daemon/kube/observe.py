"""Raw objects from the API server to typed events, at the border; only what changes admission is passed on.

The fold is the reference: an object is news only when it differs from what the fold already holds (a Job's pod
counts ticking is not; its queue label changing while it waits is). A full list (start-up, or after a 410) is
compared as a whole, so what disappeared while nobody watched is appended as deleted. A bad object becomes one
`object.rejected` event naming the object and the field, once per distinct problem, and never stops the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from daemon.domain import events as ev
from daemon.domain import model
from daemon.domain.actuation import ADMISSION_ANNOTATION, Action, read_admission_note
from daemon.domain.management import manage_existing_job, namespace_managed
from daemon.domain.state import Phase, State, WorkloadRecord
from daemon.kube.client import Obj
from daemon.kube.jobkinds import DISTRIBUTED, distributed_status
from daemon.manifests import ManifestError, adapter_for, parse_object
from daemon.manifests.jobs import managed_owner
from daemon.obs.logging import get_logger
from daemon.stages.ports import Clock, Observed

log = get_logger("admitd.observe")

_KEEP_META = ("name", "namespace", "labels", "annotations")
DISTRIBUTED_KINDS = frozenset(k.kind for k in DISTRIBUTED)
ALL_PODS = 2**63 - 1  # `JobView.ready` of a job whose kind reports all its pods ready at once


def job_key(obj: Mapping[str, Any]) -> str:
    """A namespaced object's `namespace/name`, the key of its workload."""
    meta = _meta(obj)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def as_manifest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a user wrote: apiVersion, kind, the user-set metadata and spec; the server's own fields dropped."""
    meta = _meta(obj)
    out: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in _KEEP_META if k in meta},
    }
    annotations = out["metadata"].get("annotations")
    if isinstance(annotations, Mapping):
        # kubectl's copy of the whole object is not the user's annotation, and can exceed what we accept.
        trimmed = {k: v for k, v in annotations.items() if k != "kubectl.kubernetes.io/last-applied-configuration"}
        out["metadata"]["annotations"] = trimmed
    for key in ("spec", "value", "globalDefault"):  # a PriorityClass's value sits at the top level
        if key in obj:
            out[key] = obj[key]
    if obj.get("kind") == "Namespace":
        out.pop("spec", None)  # only the server's finalizers
    return out


def timestamp_ms(value: object) -> int | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class JobView:
    """What the observer reads of a Job's status."""

    suspended: bool
    active: int
    finished: str | None  # "Complete" | "Failed" | None
    ready: int = 0  # status.ready + status.succeeded: Kueue counts both towards PodsReady


def job_view(obj: Mapping[str, Any]) -> JobView:
    if obj.get("kind") in DISTRIBUTED_KINDS:
        d = distributed_status(obj)
        # These kinds report readiness for the job as a whole: ready counts as every pod admitted.
        return JobView(suspended=d.suspended, active=d.active, finished=d.finished, ready=ALL_PODS if d.ready else 0)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    finished = None
    for cond in status.get("conditions") or ():
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            finished = cond["type"]
    active = int(status.get("active") or 0) + int(status.get("terminating") or 0)
    ready = int(status.get("ready") or 0) + int(status.get("succeeded") or 0)
    return JobView(suspended=bool(spec.get("suspend")), active=active, finished=finished, ready=ready)


class Observer:
    """Turns watch events and lists into `Observed` batches for the ingest stage."""

    def __init__(
        self,
        state: State,
        put: Callable[[Observed], None],
        clock: Clock,
        *,
        on_started_unsuspended: Callable[[str, str, str], None] | None = None,  # (job, uid, kind)
        is_leader: Callable[[], bool] = lambda: True,
        unsuspending: Callable[[str], bool] = lambda key: False,
        pods_ready: bool = False,
        jobs: model.JobManagement | None = None,
    ) -> None:
        self.is_leader = is_leader
        # `JobActuator.unsuspending`: an unsuspension of the job is on its way, so a watched version that shows it
        # suspended and idle may predate it and is no evidence of its eviction (a preemption that overtook its own
        # admission is then evicted from the answer to its suspension, `on_suspended`).
        self.unsuspending = unsuspending
        # manageJobsWithoutQueueName / managedJobsNamespaceSelector: which jobs are managed at all
        self.jobs = jobs if jobs is not None else model.JobManagement()
        self.pods_ready = pods_ready  # waitForPodsReady: report when an admitted job's pods are all ready
        self.state = state
        self.put = put
        self.clock = clock
        self.on_started_unsuspended = on_started_unsuspended
        self._rejected: dict[tuple[str, str], tuple[str, ...]] = {}  # (kind, ns/name) -> errors last reported
        # job -> (the fold's record when these were sent, facts sent about it since): see `_first`
        self._sent: dict[str, tuple[WorkloadRecord | None, list[tuple[object, ...]]]] = {}

    # --- jobs ------------------------------------------------------------------------------------------------

    def job_event(self, type_: str, obj: Obj) -> None:
        events = self._job(obj, deleted=type_ == "DELETED")
        if events:
            self.put(Observed(tuple(events)))

    def jobs_listed_of(self, kind: str) -> Callable[[list[Obj]], None]:
        """A full list of the jobs of `kind`: the workloads of that kind missing from it were deleted."""

        def listed(items: list[Obj]) -> None:
            events: list[ev.Event] = []
            seen: set[str] = set()
            for obj in items:
                seen.add(job_key(obj))
                events.extend(self._job(obj, deleted=False))
            now = self.clock.now()
            for key, rec in list(self.state.workloads.items()):
                if key not in seen and rec.workload.kind == kind:
                    events.append(ev.JobDeleted(job=key, at=now))
            if events:
                self.put(Observed(tuple(events)))

        return listed

    def _job(self, obj: Obj, *, deleted: bool) -> list[ev.Event]:
        adapter = adapter_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if adapter is None:
            return []
        meta = _meta(obj)
        key = job_key(obj)
        if key not in self.state.workloads and (
            not self._managed(obj, adapter.is_managed(obj)) or managed_owner(obj) is not None
        ):
            return []  # a job the fold holds is followed to its end, whatever its labels say now
        rec = self.state.workloads.get(key)
        now = self.clock.now()
        if deleted or key in self.state.finished:
            self._sent.pop(key, None)
            return [ev.JobDeleted(job=key, at=now)] if deleted and rec is not None else []
        view = job_view(obj)
        if view.finished is not None:
            if rec is None or not self._first(key, ("finished",)):
                return []
            return [ev.JobFinished(job=key, at=now, succeeded=view.finished == "Complete")]
        out: list[ev.Event] = []
        if rec is None or rec.phase is Phase.PENDING:
            created = timestamp_ms(meta.get("creationTimestamp")) or now
            try:
                wl = adapter.to_workload(as_manifest(obj), created_at=created, uid=str(meta.get("uid", "")))
            except ManifestError as e:
                return self._reject(str(obj.get("kind")), key, (str(e),))
            self._rejected.pop((wl.kind, key), None)
            if (rec is None or rec.workload != wl) and self._first(key, ("observed", wl)):
                out.append(ev.JobObserved(workload=wl))
            if not view.suspended:
                annotations = meta.get("annotations") or {}
                note = annotations.get(ADMISSION_ANNOTATION) if isinstance(annotations, Mapping) else None
                adopted = read_admission_note(note, wl) if isinstance(note, str) and note else None
                order = self.state.outbox.get(key)
                if adopted is not None:
                    # Admitted and carried out by another replica (a former leader): hold its quota, act on nothing.
                    if self._first(key, ("adopted", note)):
                        out.append(ev.WorkloadAdopted(workload=key, at=now, admission=adopted))
                elif (
                    (order is None or order.action is not Action.UNSUSPEND)
                    and self.is_leader()
                    and self.on_started_unsuspended is not None
                ):
                    self.on_started_unsuspended(key, str(meta.get("uid", "")), wl.kind)
        elif self.pods_ready and not view.suspended and _pods_ready(rec, view):
            if self._first(key, ("ready",)):
                out.append(ev.JobReady(job=key, at=now))
        elif view.suspended and view.active == 0:
            if rec.evicting and not self.unsuspending(key):
                out += self._evicted(key, rec.eviction_reason or "Preempted", now)
            elif not self.is_leader() and key not in self.state.outbox:
                # a standby sees the leader stop a job it had adopted
                out += self._evicted(key, "SuspendedByAnotherReplica", now)
        return out

    def suspended_unsent(self, key: str) -> None:
        """An evicting job whose suspension needed no request (its admission never reached it: it is suspended and
        idle as created), so no watch event will say so: its eviction now."""
        rec = self.state.workloads.get(key)
        if rec is not None and rec.evicting:
            events = self._evicted(key, rec.eviction_reason or "Preempted", self.clock.now())
            if events:
                self.put(Observed(tuple(events)))

    def _evicted(self, key: str, reason: str, now: int) -> list[ev.Event]:
        if not self._first(key, ("evicted",)):
            return []
        return [ev.WorkloadEvicted(workload=key, at=now, reason=reason)]

    def _managed(self, obj: Obj, labelled: bool) -> bool:
        """Kueue's rule for a job seen after its creation: in a namespace managedJobsNamespaceSelector selects, one
        with a queue name, or any with manageJobsWithoutQueueName (held: it names no LocalQueue)."""
        namespace = str(_meta(obj).get("namespace", ""))
        selected = namespace_managed(self.jobs, namespace, self.state.namespaces.get(namespace))
        return manage_existing_job(self.jobs, "labelled" if labelled else None, namespace_selected=selected)

    def _first(self, key: str, what: tuple[object, ...]) -> bool:
        """Whether `what` about `key` is not already on its way to the log. Watch events come faster than the fold
        absorbs them: two status updates of one Job must not append its eviction (or completion) twice. What was
        sent is remembered for as long as the fold's record of the job is the same object (the fold replaces it on
        every change), so a later change of the same kind is appended again."""
        rec = self.state.workloads.get(key)
        entry = self._sent.get(key)
        if entry is None or entry[0] is not rec:
            entry = (rec, [])
            self._sent[key] = entry
        if what in entry[1]:  # compared by value (a workload holds dicts, so no set): a few facts per job at most
            return False
        entry[1].append(what)
        return True

    # --- queue objects, namespaces, priority classes ----------------------------------------------------------

    def object_event(self, type_: str, obj: Obj) -> None:
        events = self._object(obj, deleted=type_ == "DELETED")
        if events:
            self.put(Observed(tuple(events)))

    def objects_listed(self, kind: str) -> Callable[[list[Obj]], None]:
        def listed(items: list[Obj]) -> None:
            events: list[ev.Event] = []
            seen: set[str] = set()
            for obj in items:
                meta = _meta(obj)
                seen.add(f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/"))
                events.extend(self._object(obj, deleted=False))
            events.extend(self._gone(kind, seen))
            if events:
                self.put(Observed(tuple(events)))

        return listed

    def _gone(self, kind: str, seen: set[str]) -> list[ev.Event]:
        return [_deleted(kind, key) for key in _held(self.state, kind) if key not in seen]

    def _object(self, obj: Obj, *, deleted: bool) -> list[ev.Event]:
        kind = str(obj.get("kind", ""))
        meta = _meta(obj)
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
        s = self.state
        subject = f"{namespace}/{name}" if namespace else name
        if deleted:
            return [_deleted(kind, subject)] if subject in _held(s, kind) else []
        parsed = parse_object(as_manifest(obj))
        if not parsed.ok or parsed.obj is None:
            return self._reject(kind, subject, tuple(str(e) for e in parsed.errors))
        self._rejected.pop((kind, subject), None)
        event = _observed(parsed.obj)
        return [event] if event is not None and _is_news(s, event) else []

    def _reject(self, kind: str, subject: str, errors: tuple[str, ...]) -> list[ev.Event]:
        if self._rejected.get((kind, subject)) == errors:
            return []
        self._rejected[(kind, subject)] = errors
        namespace, _, name = subject.rpartition("/")
        log.warning("object rejected", kind=kind, object=subject, errors=list(errors))
        return [ev.ObjectRejected(kind=kind, name=name, namespace=namespace or None, errors=errors)]


def _pods_ready(rec: WorkloadRecord, view: JobView) -> bool:
    """Kueue's PodsReady for a Job: ready plus succeeded pods reach what was admitted (the pod sets' counts)."""
    if rec.ready or rec.evicting or rec.admission is None:
        return False
    return view.ready >= sum(ps.count for ps in rec.admission.pod_sets)


def _held(s: State, kind: str) -> Mapping[str, object]:
    """The fold's objects of `kind` by name (namespace/name for LocalQueues); none for kinds that are never
    deleted from the fold (priority classes, namespaces: existing workloads keep what they got)."""
    match kind:
        case "ResourceFlavor":
            return s.flavors
        case "ClusterQueue":
            return s.cluster_queues
        case "Cohort":
            return s.cohorts
        case "LocalQueue":
            return s.local_queues
    return {}


def _deleted(kind: str, key: str) -> ev.Event:
    match kind:
        case "ResourceFlavor":
            return ev.ResourceFlavorDeleted(name=key)
        case "ClusterQueue":
            return ev.ClusterQueueDeleted(name=key)
        case "Cohort":
            return ev.CohortDeleted(name=key)
        case "LocalQueue":
            namespace, _, name = key.partition("/")
            return ev.LocalQueueDeleted(namespace=namespace, name=name)
    raise ValueError(f"{kind} has no deletion event")


def _observed(obj: object) -> ev.Event | None:
    match obj:
        case model.ResourceFlavor():
            return ev.ResourceFlavorObserved(flavor=obj)
        case model.ClusterQueue():
            return ev.ClusterQueueObserved(cluster_queue=obj)
        case model.Cohort():
            return ev.CohortObserved(cohort=obj)
        case model.LocalQueue():
            return ev.LocalQueueObserved(local_queue=obj)
        case model.PriorityClass():
            return ev.PriorityClassObserved(priority_class=obj)
        case model.Namespace():
            return ev.NamespaceObserved(namespace=obj)
    return None


def _is_news(s: State, event: ev.Event) -> bool:
    match event:
        case ev.ResourceFlavorObserved(flavor=f):
            return s.flavors.get(f.name) != f
        case ev.ClusterQueueObserved(cluster_queue=cq):
            return s.cluster_queues.get(cq.name) != cq
        case ev.CohortObserved(cohort=c):
            return s.cohorts.get(c.name) != c
        case ev.LocalQueueObserved(local_queue=lq):
            return s.local_queues.get(lq.key) != lq
        case ev.PriorityClassObserved(priority_class=pc):
            return s.priority_classes.get((pc.kind, pc.name)) != pc
        case ev.NamespaceObserved(namespace=ns):
            return s.namespaces.get(ns.name) != ns
    return True
