"""Raw objects from the API server to typed events, at the border; only what changes admission is passed on.

The fold is the reference: an object is news only when it differs from what the fold already holds (a Job's pod
counts ticking is not; its queue label changing while it waits is). A full list (start-up, or after a 410) is
compared as a whole, so what disappeared while nobody watched is appended as deleted. A bad object becomes one
`object.rejected` event naming the object and the field, once per distinct problem, and never stops the others.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from daemon.domain import events as ev
from daemon.domain import model
from daemon.domain.actuation import ADMISSION_ANNOTATION, Action
from daemon.domain.management import manage_existing_job, namespace_managed
from daemon.domain.state import Phase, State, WorkloadRecord
from daemon.domain.trust import (
    ANNOTATION_PREFIX,
    SIGNATURE_ANNOTATION,
    STOPPING_ANNOTATION,
    STOPPING_SIGNATURE_ANNOTATION,
    judge_claim,
)
from daemon.kube.client import Obj
from daemon.kube.jobkinds import DISTRIBUTED, distributed_status
from daemon.kube.status_objects import MANAGED_BY
from daemon.manifests import ManifestError, adapter_for, parse_object
from daemon.manifests.distributed import suspend_pointer
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


SUSPENSION_GRACE_S = 10.0  # how long a suspended Job the Job controller never reported resumed may stay silent


def _suspended_condition(obj: Mapping[str, Any]) -> str | None:
    """The status ("True", "False") of a batch/v1 Job's `Suspended` condition, None where it has none."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Suspended":
            return str(cond.get("status"))
    return None


@dataclass(slots=True)
class _Suspension:
    """A suspension this process sent, and the Job's status in the first version that showed it."""

    status: object = None  # None until the first suspended version is seen
    resumed: bool = False  # whether the Job controller had reported the Job resumed (`Suspended=False`) by then
    grace_over: bool = False


class Observer:
    """Turns watch events and lists into `Observed` batches for the ingest stage.

    A preempted batch/v1 Job's quota is released (its `workload.evicted` appended) only once its pods are gone, as
    the Job controller reports it after it has seen the suspension. Its status right after the suspension says
    nothing yet: when a Job was just unsuspended, the controller may have created pods and not yet written a status
    that counts them. The controller writes a Job's status with an update on the version it synced from (an
    optimistic-concurrency write: pkg/controller/job/job_controller.go, updateJobStatus), so a status that differs
    from the one the suspension was answered with was written by a sync that saw `suspend: true`; in such a sync
    (once every pod it created is in its cache) it deletes the active pods, counts them in `status.terminating`
    and sets `Suspended=True`. So the quota is released when a status written after the suspension shows
    `Suspended=True` and `active + terminating == 0`. A Job the controller never reported resumed (`Suspended` was
    still True when it was suspended again) may have started no pod at all, and then no status is ever written
    again: it is released when `SUSPENSION_GRACE_S` pass without any. Other kinds (and a Job this process did not
    suspend, e.g. after a restart) are released when their status shows no active or terminating pods.
    """

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
        admission_key: bytes | None = None,
    ) -> None:
        self.is_leader = is_leader
        # `JobActuator.unsuspending`: an unsuspension of the job is on its way, so a watched version that shows it
        # suspended and idle may predate it and is no evidence of its eviction (a preemption that overtook its own
        # admission is then evicted from the answer to its suspension, `on_suspended`).
        self.unsuspending = unsuspending
        # what admitd signs its admission notes with (`daemon.domain.trust`); None: no note is honoured
        self.admission_key = admission_key
        # manageJobsWithoutQueueName / managedJobsNamespaceSelector: which jobs are managed at all
        self.jobs = jobs if jobs is not None else model.JobManagement()
        self.pods_ready = pods_ready  # waitForPodsReady: report when an admitted job's pods are all ready
        self.state = state
        self.put = put
        self.clock = clock
        self.on_started_unsuspended = on_started_unsuspended
        self._rejected: dict[tuple[str, str], tuple[str, ...]] = {}  # (kind, ns/name) -> errors last reported
        self._warned: dict[tuple[str, str], tuple[str, ...]] = {}  # (kind, ns/name) -> warnings last recorded
        # job -> (the fold's record when these were sent, facts sent about it since): see `_first`
        self._sent: dict[str, tuple[WorkloadRecord | None, list[tuple[object, ...]]]] = {}
        self._suspensions: dict[str, _Suspension] = {}  # batch/v1 Jobs this process is suspending
        self._last: dict[str, Obj] = {}  # their last version seen, for the end of the grace
        self.suspension_grace_s = SUSPENSION_GRACE_S
        self.call_later: Callable[[float, Callable[[], None]], object] = _call_later
        # job -> (uid, resourceVersion) of the newest version seen, from a watch, a list or an actuation's answer
        self._newest: dict[str, tuple[str, int]] = {}

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
        if deleted:
            self._newest.pop(key, None)
        else:
            uid, version = str(meta.get("uid", "")), _version(meta)
            seen = self._newest.get(key)
            if seen is None or seen[0] != uid or seen[1] < version:
                self._newest[key] = (uid, version)
        if key not in self.state.workloads and (
            not self._managed(obj, adapter.is_managed(obj)) or managed_owner(obj) is not None
        ):
            return []  # a job the fold holds is followed to its end, whatever its labels say now
        rec = self.state.workloads.get(key)
        now = self.clock.now()
        if deleted or key in self.state.finished:
            self._sent.pop(key, None)
            self._suspensions.pop(key, None)
            self._last.pop(key, None)
            return [ev.JobDeleted(job=key, at=now)] if deleted and rec is not None else []
        view = job_view(obj)
        baseline = self._follow(key, obj, view)
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
                out += self._running_unadmitted(obj, wl, rec, now)
            elif view.active:
                out += self._stopping(obj, wl, rec, now)
        elif self.pods_ready and not view.suspended and _pods_ready(rec, view):
            if self._first(key, ("ready",)):
                out.append(ev.JobReady(job=key, at=now))
        elif view.suspended and view.active == 0:
            if rec.evicting and not self.unsuspending(key) and self._pods_gone(key, obj, baseline):
                out += self._evicted(key, rec.eviction_reason or "Preempted", now)
            elif (
                key not in self.state.outbox
                and (not self.is_leader() or (not rec.evicting and not self.unsuspending(key)))
                and self._pods_gone(key, obj, baseline)
            ):
                # A standby sees the leader stop a job it had adopted; a leader, a job it did not start itself (one
                # it adopted) stopped by the replica that led before it, its suspension landing after the take-over.
                out += self._evicted(key, "SuspendedByAnotherReplica", now)
        return out

    def pod_event(self, type_: str, obj: Obj) -> None:
        """An Event the Job controller wrote about a Job (`FailedCreate`: it could not create a pod): for a Job
        admitted and not yet ready, `job.pods_not_created` with the controller's message, once per admission and
        message. An Event older than the admission (a previous run's) is not news."""
        if type_ == "DELETED" or obj.get("reason") != "FailedCreate":
            return
        involved = obj.get("involvedObject") or {}
        if involved.get("kind") != "Job":
            return
        key = f"{involved.get('namespace', '')}/{involved.get('name', '')}"
        rec = self.state.workloads.get(key)
        if rec is None or rec.phase is not Phase.ADMITTED or rec.evicting or rec.ready or rec.admitted_at is None:
            return
        if involved.get("uid") and rec.workload.uid and involved.get("uid") != rec.workload.uid:
            return
        seen = timestamp_ms(obj.get("lastTimestamp") or obj.get("eventTime") or _meta(obj).get("creationTimestamp"))
        if seen is not None and seen < rec.admitted_at - 1000:  # Event times have whole seconds
            return
        message = str(obj.get("message", ""))[:1000]
        if self._first(key, ("pods_not_created", message)):
            log.warning("the Job controller cannot create an admitted job's pods", job=key, message=message)
            self.put(Observed((ev.JobPodsNotCreated(job=key, at=self.clock.now(), message=message),)))

    def pods_events_listed(self, items: list[Obj]) -> None:
        for obj in items:
            self.pod_event("ADDED", obj)

    def suspending(self, key: str, kind: str) -> None:
        """This process is about to send a suspension of `key` (the actuator, before the patch)."""
        if kind == "Job":
            self._suspensions[key] = _Suspension()
            self._last.pop(key, None)

    def _follow(self, key: str, obj: Obj, view: JobView) -> bool:
        """A version of a Job this process is suspending; True when it is the first that shows the suspension
        (the baseline: its status says nothing about the pods yet)."""
        suspension = self._suspensions.get(key)
        if suspension is None or not view.suspended:
            return False
        self._last[key] = obj
        if suspension.status is not None:
            return False
        suspension.status = obj.get("status") or {}
        suspension.resumed = _suspended_condition(obj) == "False"
        if not suspension.resumed:
            self.call_later(self.suspension_grace_s, lambda: self._grace_over(key, suspension))
        return True

    def _pods_gone(self, key: str, obj: Obj, baseline: bool) -> bool:
        """Whether `obj` (suspended, no active or terminating pods in its status) shows the job's pods gone."""
        if obj.get("kind") != "Job":
            return True
        suspension = self._suspensions.get(key)
        if suspension is None:
            return _suspended_condition(obj) != "False"
        if baseline or suspension.status is None:
            return False
        written = (obj.get("status") or {}) != suspension.status  # by the Job controller, after the suspension
        if (written and _suspended_condition(obj) == "True") or (suspension.grace_over and not written):
            del self._suspensions[key]
            self._last.pop(key, None)
            return True
        return False

    def _grace_over(self, key: str, suspension: _Suspension) -> None:
        if self._suspensions.get(key) is not suspension:
            return
        suspension.grace_over = True
        last = self._last.get(key)
        if last is not None:
            self.job_event("MODIFIED", last)

    def _running_unadmitted(self, obj: Obj, wl: model.Workload, rec: WorkloadRecord | None, now: int) -> list[ev.Event]:
        """A managed job runs (not suspended) while the fold holds no admission for it. Another replica's admission
        written on it and signed (`daemon.domain.trust`) is adopted: it holds that quota from now on. Anything else
        is a security event (`JobTampered`, once per change of the job), and the leader suspends the job at once."""
        meta = _meta(obj)
        key, uid = job_key(obj), str(meta.get("uid", ""))
        order = self.state.outbox.get(key)
        if order is not None and order.action is Action.UNSUSPEND:
            return []  # this replica's own admission, its patch ahead of the fold
        newest = self._newest.get(key)
        if newest is not None and newest[0] == uid and _version(meta) < newest[1]:
            # An older version than one already seen (the watch behind the answer to a suspension): this replica's
            # own admission, since undone, not a tenant's doing.
            return []
        annotations = meta.get("annotations")
        annotations = annotations if isinstance(annotations, Mapping) else {}
        note = annotations.get(ADMISSION_ANNOTATION)
        out: list[ev.Event] = []
        if isinstance(note, str) and note:
            signature = annotations.get(SIGNATURE_ANNOTATION)
            claim: model.Admission | str = (
                "this replica has no admission key"
                if self.admission_key is None
                else judge_claim(
                    key=self.admission_key,
                    uid=uid,
                    note=note,
                    signature=signature if isinstance(signature, str) else None,
                    workload=wl,
                    evicted_at=rec.evicted_at if rec is not None else None,
                )
            )
            if isinstance(claim, model.Admission):
                # Admitted and carried out by another replica (a former leader): hold its quota, act on nothing.
                if self._first(key, ("adopted", note)):
                    out.append(ev.WorkloadAdopted(workload=key, at=now, admission=claim))
                return out
            what, detail, claimed = "ForgedAdmission", f"{ADMISSION_ANNOTATION} is not admitd's: {claim}", _named(note)
        else:
            what, detail, claimed = "UnsuspendedWithoutAdmission", "it runs but admitd has not admitted it", None
        generation = int(meta.get("generation") or 0)
        if self.state.tampered.get(key) != (uid, generation) and self._first(key, ("tampered", uid, generation)):
            manager = last_manager(obj, suspend_pointer(wl.kind))
            log.warning(
                "security: a job runs without an admission admitd made",
                job=key,
                what=what,
                detail=detail,
                manager=manager,
            )
            out.append(
                ev.JobTampered(
                    job=key,
                    namespace=wl.namespace,
                    uid=uid,
                    generation=generation,
                    at=now,
                    what=what,
                    detail=detail,
                    manager=manager,
                    claimed_cluster_queue=claimed,
                )
            )
        if self.is_leader() and self.on_started_unsuspended is not None:
            self.on_started_unsuspended(key, uid, wl.kind)
        return out

    def _stopping(self, obj: Obj, wl: model.Workload, rec: WorkloadRecord | None, now: int) -> list[ev.Event]:
        """A managed job is suspended and its pods still stop, while the fold holds no admission for it: another
        replica preempted it (this one never saw it run: its watch was down, or it led only since). The stopping
        note that preemption wrote, signed (`daemon.domain.trust`), says what the pods run under: adopted as
        evicting, the job holds that quota until they are gone. Without a valid note there is nothing to charge."""
        meta = _meta(obj)
        annotations = meta.get("annotations")
        annotations = annotations if isinstance(annotations, Mapping) else {}
        note, key = annotations.get(STOPPING_ANNOTATION), job_key(obj)
        if (
            not isinstance(note, str)
            or not note
            or self.admission_key is None
            or not self._first(key, ("stopping", note))
        ):
            return []
        signature = annotations.get(STOPPING_SIGNATURE_ANNOTATION)
        claim = judge_claim(
            key=self.admission_key,
            uid=str(meta.get("uid", "")),
            note=note,
            signature=signature if isinstance(signature, str) else None,
            workload=wl,
            evicted_at=rec.evicted_at if rec is not None else None,
            stopping=True,
        )
        if not isinstance(claim, model.Admission):
            log.warning("a stopping job's note is not admitd's: its pods are not charged", job=key, why=claim)
            return []
        return [ev.WorkloadAdopted(workload=key, at=now, admission=claim, stopping=True)]

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

    # --- Workloads: spec.active ------------------------------------------------------------------------------

    def workload_event(self, type_: str, obj: Obj) -> None:
        events = [] if type_ == "DELETED" else self._activity(obj)
        if events:
            self.put(Observed(tuple(events)))

    def workloads_listed(self, items: list[Obj]) -> None:
        events = [e for obj in items for e in self._activity(obj)]
        if events:
            self.put(Observed(tuple(events)))

    def _activity(self, obj: Obj) -> list[ev.Event]:
        """`workload.active_changed` when admitd's Workload of a live job says `spec.active` other than the fold
        (Kueue's `kubectl kueue stop workload` sets it false, `resume` true; absent is true)."""
        meta = _meta(obj)
        labels = meta.get("labels") or {}
        if not isinstance(labels, Mapping) or labels.get(MANAGED_BY[0]) != MANAGED_BY[1]:
            return []
        owner = next(
            (o for o in meta.get("ownerReferences") or () if isinstance(o, Mapping) and o.get("controller")), None
        )
        if owner is None:
            return []
        key = f"{meta.get('namespace', '')}/{owner.get('name', '')}"
        rec = self.state.workloads.get(key)
        if rec is None or rec.workload.uid != owner.get("uid"):
            return []  # a finished, deleted or recreated Job's Workload
        spec = obj.get("spec")
        active = not (isinstance(spec, Mapping) and spec.get("active") is False)
        if rec.inactive != active or not self._first(key, ("active", active)):
            return []
        log.info("workload activity changed", job=key, active=active)
        return [ev.WorkloadActiveChanged(workload=key, active=active, at=self.clock.now())]

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
        for key in [k for k in self._warned if k[0] == kind and k[1] not in seen]:
            del self._warned[key]
        return [_deleted(kind, key) for key in _held(self.state, kind) if key not in seen]

    def _object(self, obj: Obj, *, deleted: bool) -> list[ev.Event]:
        kind = str(obj.get("kind", ""))
        meta = _meta(obj)
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
        s = self.state
        subject = f"{namespace}/{name}" if namespace else name
        if deleted:
            self._warned.pop((kind, subject), None)
            return [_deleted(kind, subject)] if subject in _held(s, kind) else []
        parsed = parse_object(as_manifest(obj))
        if not parsed.ok or parsed.obj is None:
            return self._reject(kind, subject, tuple(str(e) for e in parsed.errors))
        self._rejected.pop((kind, subject), None)
        event = _observed(parsed.obj)
        out: list[ev.Event] = [event] if event is not None and s.is_news(event) else []
        return out + self._warn(kind, subject, tuple(parsed.warnings))

    def _warn(self, kind: str, subject: str, warnings: tuple[str, ...]) -> list[ev.Event]:
        """`object.warned` when the fields admitd ignores in an accepted object change (after its observation);
        warnings=() once a version has none. Remembered like rejections: a restart tells again, once."""
        if self._warned.get((kind, subject), ()) == warnings:
            return []
        if warnings:
            self._warned[(kind, subject)] = warnings
            log.warning("object accepted with ignored fields", kind=kind, object=subject, warnings=list(warnings))
        else:
            self._warned.pop((kind, subject), None)
        namespace, _, name = subject.rpartition("/")
        return [ev.ObjectWarned(kind=kind, name=name, namespace=namespace or None, warnings=warnings)]

    def _reject(self, kind: str, subject: str, errors: tuple[str, ...]) -> list[ev.Event]:
        if self._rejected.get((kind, subject)) == errors:
            return []
        self._rejected[(kind, subject)] = errors
        namespace, _, name = subject.rpartition("/")
        log.warning("object rejected", kind=kind, object=subject, errors=list(errors))
        return [ev.ObjectRejected(kind=kind, name=name, namespace=namespace or None, errors=errors)]


def _call_later(delay_s: float, fn: Callable[[], None]) -> object:
    import asyncio  # noqa: PLC0415 (the observer is plain code; only this timer needs the running loop)

    return asyncio.get_running_loop().call_later(delay_s, fn)


def _version(meta: Mapping[str, Any]) -> int:
    """An object's resourceVersion as a number (the API server's are etcd revisions), 0 when it has none."""
    value = meta.get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def _named(note: str) -> str | None:
    """The ClusterQueue a note names, if it is JSON with one (a forged note may be anything)."""
    try:
        raw = json.loads(note)
    except ValueError:
        return None
    cq = raw.get("clusterQueue") if isinstance(raw, Mapping) else None
    return cq if isinstance(cq, str) else None


def last_manager(obj: Mapping[str, Any], suspend_pointer: str) -> str | None:
    """Who changed a job's admission state: the managedFields manager of the newest entry that owns its suspension
    field (`suspend_pointer`, a JSON pointer) or any admitd.io annotation. Entries are ordered by their `time`
    (second resolution); of equal times the later entry wins. None when no entry owns either."""
    suspend_path = ["f:" + part for part in suspend_pointer.strip("/").split("/")]
    best: tuple[str, int, str] | None = None
    entries = _meta(obj).get("managedFields")
    for i, entry in enumerate(entries if isinstance(entries, list) else ()):
        if not isinstance(entry, Mapping):
            continue
        fields = entry.get("fieldsV1")
        if not isinstance(fields, Mapping):
            continue
        notes = _node(fields, ["f:metadata", "f:annotations"])
        touched = _node(fields, suspend_path) is not None or (
            isinstance(notes, Mapping) and any(str(k).startswith("f:" + ANNOTATION_PREFIX) for k in notes)
        )
        if not touched:
            continue
        rank = (str(entry.get("time") or ""), i, str(entry.get("manager") or ""))
        if best is None or rank[:2] > best[:2]:
            best = rank
    return best[2] if best is not None else None


def _node(fields: Mapping[str, Any], path: list[str]) -> object:
    """The managedFields (FieldsV1) node at `path`, None when the entry does not own it."""
    node: object = fields
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _pods_ready(rec: WorkloadRecord, view: JobView) -> bool:
    """Kueue's PodsReady for a Job: ready plus succeeded pods reach what was admitted (the pod sets' counts)."""
    if rec.ready or rec.evicting or rec.admission is None:
        return False
    return view.ready >= sum(ps.count for ps in rec.admission.pod_sets)


def _held(s: State, kind: str) -> Mapping[str, object]:
    """The fold's objects of `kind` by name (namespace/name for LocalQueues); none for Namespaces, which are never
    deleted from the fold. A deleted priority class is gone for new jobs; existing workloads keep their priority."""
    if kind in ("PriorityClass", "WorkloadPriorityClass"):
        return {name: pc for (k, name), pc in s.priority_classes.items() if k == kind}
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
        case "PriorityClass" | "WorkloadPriorityClass":
            return ev.PriorityClassDeleted(kind=kind, name=key)
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
