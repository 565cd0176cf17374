"""Orders carried out on real jobs (Job, PyTorchJob, RayJob, JobSet): idempotent patches, each guarded by the uid.

An admission is one JSON patch: `suspend: false`, and each pod template's nodeSelector and tolerations set to the
order's placement (the user's own values merged with the flavor's, computed when the decision was folded). A
preemption suspends the Job and empties admitd's annotations in one patch, then restores the pod templates as they
were created, in a second patch sent only where the admission changed them; Kubernetes lets a Job's template change
only while it is suspended and not started, so a template change waits until the Job controller has cleared
`status.startTime`. Each patch first tests the uid, so a Job deleted and recreated under the same name is
never touched by an order meant for its predecessor.

A preemption that overtakes its own admission (decided before the admission's patch was sent) costs no request:
the actuator follows the Job watch (keeping only uids), and a Job that this process never unsuspended and whose last
watched version is suspended, idle and without admitd's admission note has nothing to undo; the observer is told to
record its eviction.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from daemon.domain.actuation import ADMISSION_ANNOTATION, Action, Order, Placement, Resize
from daemon.domain.trust import SIGNATURE_ANNOTATION, STOPPING_ANNOTATION, STOPPING_SIGNATURE_ANNOTATION
from daemon.kube.client import JSON_PATCH, KubeClient, Obj, pointer_token, resolve_pointer
from daemon.kube.errors import Conflict, NotFound, Permanent, Temporary
from daemon.kube.jobkinds import KINDS
from daemon.kube.observe import job_key, job_view
from daemon.kube.status_objects import toleration_object
from daemon.manifests.jobs import FULL_PARALLELISM_ANNOTATION
from daemon.obs.logging import get_logger
from daemon.stages.ports import Done, Failed, Outcome

log = get_logger("admitd.actuate")

STALE_PATCH_S = 60.0
"""How long a patch sent by a process that has died may still land: the API server's own request timeout (its
--request-timeout, 1 minute by default) bounds a request it had received; one it had not is lost with the
connection."""
TEMPLATE_TRIES = 20  # x 0.25 s: how long a template change waits for the Job controller before it is retried later
_NOTE_PATH = "/metadata/annotations/" + pointer_token(ADMISSION_ANNOTATION)
_FULL_PATH = "/metadata/annotations/" + pointer_token(FULL_PARALLELISM_ANNOTATION)
_SIGNATURE_PATH = "/metadata/annotations/" + pointer_token(SIGNATURE_ANNOTATION)
_STOPPING_PATH = "/metadata/annotations/" + pointer_token(STOPPING_ANNOTATION)
_STOPPING_SIGNATURE_PATH = "/metadata/annotations/" + pointer_token(STOPPING_SIGNATURE_ANNOTATION)


def resize_patch(resize: Sequence[Resize]) -> list[dict[str, Any]]:
    """Partial admission of a batch/v1 Job: its parallelism set to the admitted count (or back to the full one),
    as Kueue's RunWithPodSetsInfo and RestorePodSetsInfo do. Parallelism may change while the Job runs."""
    return [{"op": "add", "path": "/spec/parallelism", "value": r.count} for r in resize]


def full_count_note(resize: Sequence[Resize], *, running: bool) -> list[dict[str, Any]]:
    """The `admitd.io/full-parallelism` annotation: the count the Job asked for while it runs with fewer pods,
    else empty (the adapter then reads the Job's own parallelism)."""
    if not resize:
        return []
    short = running and resize[0].count < resize[0].full
    return [{"op": "add", "path": _FULL_PATH, "value": str(resize[0].full) if short else ""}]


def job_path(kind: str, key: str) -> str:
    return KINDS[kind].object_path(key)


def placement_patch(kind: str, placements: Sequence[Placement]) -> list[dict[str, Any]]:
    """JSON patch operations that set each pod set's nodeSelector and tolerations to exactly the placement, in
    the pod template of the replica (PyTorchJob), group (RayJob) or replicated job (JobSet) it was read from. The
    placements come in the workload's pod-set order, which is what locates a RayJob's worker groups and a JobSet's
    replicated jobs by index."""
    pod_spec_paths = KINDS[kind].pod_spec_pointers([p.pod_set for p in placements])
    ops: list[dict[str, Any]] = []
    for p in placements:
        base = pod_spec_paths[p.pod_set]
        if base is None:  # a RayJob's submitter: KubeRay makes its pod up; nothing in the object to place
            continue
        ops.append({"op": "add", "path": f"{base}/nodeSelector", "value": dict(p.node_selector)})
        ops.append({"op": "add", "path": f"{base}/tolerations", "value": [toleration_object(t) for t in p.tolerations]})
    return ops


def placed_as(obj: Obj, kind: str, placements: Sequence[Placement]) -> bool:
    """Whether every pod template of `obj` (a job as the API server answered) already has exactly the placements'
    nodeSelector and tolerations (absent and empty alike)."""
    pointers = KINDS[kind].pod_spec_pointers([p.pod_set for p in placements])
    for p in placements:
        base = pointers[p.pod_set]
        if base is None:
            continue
        spec = resolve_pointer(obj, base)
        if not isinstance(spec, Mapping):
            return False
        if (spec.get("nodeSelector") or {}) != dict(p.node_selector):
            return False
        if (spec.get("tolerations") or []) != [toleration_object(t) for t in p.tolerations]:
            return False
    return True


class Signer(Protocol):
    """`daemon.domain.trust.sign` under admitd's key: (uid, note) -> the note's signature."""

    def __call__(self, uid: str, note: str, *, stopping: bool = False) -> str: ...


class JobActuator:
    def __init__(self, client: KubeClient, sign: Signer | None = None, *, requests_in_flight: int = 16) -> None:
        self.client = client
        # (uid, note) -> the note's signature (`daemon.domain.trust.sign` under admitd's key), written beside it
        self.sign = sign
        # The bound on this actuator's API calls at once. The actuate stage runs many jobs' lanes side by side; a
        # lane that waits (a template change waiting for the Job controller) holds no call, so it delays no other.
        self._calls = asyncio.Semaphore(requests_in_flight)
        self.skipped = 0  # suspensions that needed no request (the Job was never unsuspended)
        # job -> its uid, while its last watched version is suspended, has no active pods and carries no admission
        # note (nothing of an admission is on it)
        self._idle: dict[str, str] = {}
        # jobs this process has sent an unsuspend patch for and not suspended since: the watch may lag behind
        # that patch, so for these the watched version is not evidence of anything
        self._unsuspending: set[str] = set()
        # jobs whose unsuspension a process that died may have sent (`assume_unsuspending`) -> until when (monotonic
        # seconds) that patch may still land: a suspension before then is made again then
        self._inherited: dict[str, float] = {}
        self.on_suspended: Callable[[Obj], None] | None = None
        """Given the job as the API server answered the last patch of a suspension (the observer's entry for
        watch events). A job preempted before it was ever unsuspended is already suspended with no pods: the patch
        may change nothing, so no watch event would follow and the eviction would never be observed; the answer
        shows it at once."""
        self.on_suspending: Callable[[str, str], None] | None = None
        """Given the job and its kind before a suspension's first patch is sent (the observer then waits for the
        Job controller to report the suspension before the quota is released)."""
        self.on_suspended_unsent: Callable[[str], None] | None = None
        """Given the job whose suspension needed no request (see `_never_unsuspended`): its eviction is observed."""

    def seen(self, type_: str, obj: Obj) -> None:
        """A watch event (or an item of a list) of a job of any kind admitd acts on."""
        meta = obj.get("metadata") or {}
        key = job_key(obj)
        view = job_view(obj)
        note = (meta.get("annotations") or {}).get(ADMISSION_ANNOTATION)
        if type_ != "DELETED" and view.suspended and view.active == 0 and not note:
            self._idle[key] = str(meta.get("uid", ""))
        else:
            self._idle.pop(key, None)
            if type_ == "DELETED":
                self._unsuspending.discard(key)
                self._inherited.pop(key, None)

    def listed(self, items: list[Obj]) -> None:
        for obj in items:
            self.seen("ADDED", obj)

    def assume_unsuspending(self, keys: Iterable[str], *, for_s: float = STALE_PATCH_S) -> None:
        """At start-up: the jobs whose admission has no recorded unsuspension (the outbox: an unsuspension, or a
        suspension that `supersedes` one). The process that died may have sent it, and it may land yet, up to `for_s`
        from now: until they are suspended after that, they count as `unsuspending`."""
        until = time.monotonic() + for_s
        for key in keys:
            self._unsuspending.add(key)
            self._inherited[key] = until

    def _inherited_left(self, key: str) -> float:
        """Seconds until an unsuspension sent before this process started can no longer land on `key` (0: none)."""
        until = self._inherited.get(key)
        if until is None:
            return 0.0
        left = until - time.monotonic()
        if left <= 0:
            del self._inherited[key]
            return 0.0
        return left

    def unsuspending(self, key: str) -> bool:
        """Whether this process sent `key` an unsuspension and has not suspended it since: the Job as watched may
        be older than that patch, so "suspended, no active pods" says nothing about its eviction (the observer)."""
        return key in self._unsuspending

    def _never_unsuspended(self, order: Order) -> bool:
        """Whether nothing of an admission was ever carried out on the order's job, as the watch shows it."""
        if not order.decision or order.job in self._unsuspending:
            return False
        uid = self._idle.get(order.job)
        return uid is not None and (not order.uid or uid == order.uid)

    async def carry_out(self, order: Order) -> Outcome:
        if order.kind not in KINDS:
            return Failed(f"admitd cannot actuate a {order.kind} yet", permanent=True)
        if order.resize and (order.kind != "Job" or [r.pod_set for r in order.resize] != ["main"]):
            return Failed(f"admitd cannot change the pod count of a {order.kind} (partial admission)", permanent=True)
        path = job_path(order.kind, order.job)
        suspend = KINDS[order.kind].suspend_pointer
        guard = [{"op": "test", "path": "/metadata/uid", "value": order.uid}] if order.uid else []
        try:
            if order.action is Action.UNSUSPEND:
                ops = [*guard, *placement_patch(order.kind, order.placements)]
                ops.append({"op": "add", "path": _NOTE_PATH, "value": order.note})
                signature = self.sign(order.uid, order.note) if self.sign is not None else ""
                ops.append({"op": "add", "path": _SIGNATURE_PATH, "value": signature})
                ops += [*full_count_note(order.resize, running=True), *resize_patch(order.resize)]
                ops.append({"op": "replace", "path": suspend, "value": False})
                self._unsuspending.add(order.job)
                await self._patch_template(path, ops)
            elif self._never_unsuspended(order):
                self.skipped += 1
                if self.on_suspended_unsent is not None:
                    self.on_suspended_unsent(order.job)
            else:
                # An order without a decision only suspends; one with a decision also empties the admission note
                # and the full-count note (metadata: allowed in the same patch), writes the stopping note (what the
                # pods run under until they are gone, for a replica that never saw them run: `daemon.domain.trust`),
                # then restores the templates.
                notes: list[dict[str, Any]] = []
                if order.decision:
                    notes = [
                        *full_count_note(order.resize, running=False),
                        {"op": "add", "path": _NOTE_PATH, "value": ""},
                        {"op": "add", "path": _SIGNATURE_PATH, "value": ""},
                        *self._stopping_note(order),
                    ]
                if order.decision and self.on_suspending is not None:
                    self.on_suspending(order.job, order.kind)
                body: list[dict[str, Any]] = [
                    *guard,
                    {"op": "add", "path": suspend, "value": True},
                    *resize_patch(order.resize),
                    *notes,
                ]
                try:
                    last = await self._patch_template(path, body) if notes else await self._patch(path, body)
                except Permanent as e:
                    # A PyTorchJob created while the webhook was bypassed may have no runPolicy to hold `suspend`
                    # (a JSON patch adds a member only to an existing object): add the whole runPolicy then. Had
                    # the uid test failed instead, it fails again here and is reported below.
                    if order.kind != "PyTorchJob" or e.status != 422:
                        raise
                    body = [*guard, {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}, *notes]
                    last = await self._patch(path, body)
                if order.decision and not placed_as(last, order.kind, order.placements):
                    # The admission changed the templates (a flavor with node labels or tolerations): restore them.
                    # A template left as created (a flavor without either) needs no second request.
                    last = await self._patch_template(path, [*guard, *placement_patch(order.kind, order.placements)])
                if order.decision and (left := self._inherited_left(order.job)):
                    # Suspended, but a patch of the process before this one may unsuspend it yet: the quota stays
                    # held (no eviction is taken from the watch) and the suspension is made again once it cannot.
                    return Failed(
                        f"{order.kind} {order.job} suspended, but an unsuspension sent before this process started "
                        f"may still land for {left:.0f}s: suspending it again then",
                        permanent=False,
                        retry_in_ms=int(left * 1000) + 1,
                    )
                if order.decision:
                    self._unsuspending.discard(order.job)
                if self.on_suspended is not None:
                    self.on_suspended(last)
        except NotFound:
            return Failed(f"{order.kind} {order.job} no longer exists", permanent=True)
        except (Temporary, Conflict) as e:
            return Failed(str(e), permanent=False)
        except Permanent as e:
            if _template_frozen(e):  # the Job controller has not yet seen the suspension: try again later
                return Failed(str(e), permanent=False)
            if order.uid and e.status == 422 and await self._recreated(path, order.uid):
                return Failed(f"{order.kind} {order.job} was recreated (its uid is no longer {order.uid})", True)
            return Failed(str(e), permanent=True)
        return Done()

    def _stopping_note(self, order: Order) -> list[dict[str, Any]]:
        if not order.note:
            return []
        signature = self.sign(order.uid, order.note, stopping=True) if self.sign is not None else ""
        return [
            {"op": "add", "path": _STOPPING_PATH, "value": order.note},
            {"op": "add", "path": _STOPPING_SIGNATURE_PATH, "value": signature},
        ]

    async def _recreated(self, path: str, uid: str) -> bool:
        """Whether a 422 came from the uid test: the object at `path` now has another uid."""
        try:
            current = await self._request("GET", path)
        except (NotFound, Temporary, Permanent, Conflict):
            return False
        return bool((current.get("metadata") or {}).get("uid") != uid)

    async def _request(self, method: str, path: str, body: Any = None, content_type: str = JSON_PATCH) -> Obj:
        async with self._calls:
            return await self.client.request(method, path, body=body, content_type=content_type)

    async def _patch(self, path: str, ops: list[dict[str, Any]]) -> Obj:
        return await self._request("PATCH", path, ops, JSON_PATCH)

    async def _patch_template(self, path: str, ops: list[dict[str, Any]]) -> Obj:
        try:
            return await self._patch_frozen(path, ops)
        except Permanent as e:
            # A Job created without any annotation (the webhook adds the map): create it, then patch again.
            if e.status != 422 or not any(op["path"] == _NOTE_PATH for op in ops):
                raise
            note = {"metadata": {"annotations": {ADMISSION_ANNOTATION: ""}}}  # an empty map would change nothing
            await self._request("PATCH", path, note, "application/merge-patch+json")
            return await self._patch_frozen(path, ops)

    async def _patch_frozen(self, path: str, ops: list[dict[str, Any]]) -> Obj:
        """A patch that changes a pod template. Kubernetes allows that only while the Job is suspended and not
        started; right after a suspension the Job controller has not yet cleared `status.startTime`, so a refusal
        for that reason is retried for a few seconds before it is reported (as a temporary failure)."""
        for attempt in range(TEMPLATE_TRIES):
            try:
                return await self._patch(path, ops)
            except Permanent as e:
                if not _template_frozen(e) or attempt == TEMPLATE_TRIES - 1:
                    raise
                await asyncio.sleep(0.25)
        raise AssertionError("unreachable: the last try returns or raises")


def _template_frozen(e: Permanent) -> bool:
    return e.status == 422 and "spec.template" in e.message and "immutable" in e.message
