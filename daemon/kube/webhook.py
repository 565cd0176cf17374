"""Suspend on create: the mutating admission webhook and its registration.

Every managed job (Job, PyTorchJob, RayJob, JobSet) is created suspended (`spec.suspend: true`; a PyTorchJob's
`spec.runPolicy.suspend`), so none of its pods starts before admitd admits it. Managed, as in Kueue
(`daemon.domain.management`): in a namespace that managedJobsNamespaceSelector selects, a job with the
`kueue.x-k8s.io/queue-name` label; one without it when the namespace has a LocalQueue named `default` (the webhook
then adds the label `default`); any other one only with manageJobsWithoutQueueName. `admitd run` registers the
webhook for every job created in the selected namespaces (namespaceSelector), so the API server never calls admitd
about kube-system's. Its failurePolicy is Fail by default, as Kueue's: while admitd is down, jobs cannot be created
there (the client gets an error and retries), and no job ever runs unqueued. With `--webhook-failure-policy
Ignore`, they are created unsuspended while admitd is down, and admitd suspends them at once when it sees them
(logged), which may let some pods start in between.

The configurations (and the CRDs) come from config/; admitd patches, by name, their caBundle (the serving
certificate, `daemon.kube.certs`) and where they call (a URL outside the cluster, the Service inside): "Registration"
below.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from daemon.domain.actuation import ADMISSION_ANNOTATION
from daemon.domain.management import (
    DEFAULT_LOCAL_QUEUE,
    Managed,
    default_queue_exists,
    manage_new_job,
    namespace_managed,
)
from daemon.domain.model import JobManagement, LabelSelector
from daemon.domain.state import State
from daemon.kube.client import JSON_PATCH, KubeClient, pointer_token
from daemon.kube.errors import Conflict, NotFound, Permanent
from daemon.kube.jobkinds import KINDS
from daemon.manifests import QUEUE_NAME_LABEL, adapter_for
from daemon.manifests.distributed import DistributedAdapter
from daemon.manifests.fields import Reader
from daemon.manifests.jobs import managed_owner
from daemon.obs.logging import get_logger

log = get_logger("admitd.webhook")

CONFIGURATION_NAME = "admitd"
MUTATE_JOBS_PATH = "/mutate-batch-v1-job"

NewJobPolicy = Callable[[str, str | None], Managed | None]
"""(namespace, queue name or None) -> how a job created there is managed, or None when admitd leaves it alone."""


def new_job_policy(jobs: JobManagement, state: State) -> NewJobPolicy:
    """Kueue's webhook rules (`daemon.domain.management`) against what the fold knows now: the namespace's labels
    and whether it has a LocalQueue named `default`."""

    def decide(namespace: str, queue_name: str | None) -> Managed | None:
        return manage_new_job(
            jobs,
            queue_name,
            namespace_selected=namespace_managed(jobs, namespace, state.namespaces.get(namespace)),
            default_queue=default_queue_exists(state.local_queues, namespace),
        )

    return decide


def suspend_patch(
    job: Mapping[str, Any], policy: NewJobPolicy | None = None, namespace: str = ""
) -> list[dict[str, Any]] | None:
    """The JSON patch that makes a managed job start suspended, with an empty `admitd.io/admission` annotation
    (so that the admission's patch can set it by path), and, for a job without a queue name in a namespace with a
    LocalQueue `default`, the label naming it; None when nothing needs to change. Without `policy`, a job is
    managed when it has the queue-name label."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    queue_name = labels.get(QUEUE_NAME_LABEL) or None
    ops: list[dict[str, Any]] = []
    if policy is not None and managed_owner(job) is not None:
        return None  # a part of a job admitd admits (a JobSet's Job): its owner is suspended and admitted
    if policy is None:
        if not queue_name:
            return None
    else:
        managed = policy(str(meta.get("namespace") or namespace), queue_name if isinstance(queue_name, str) else None)
        if managed is None:
            return None
        if managed.defaulted:
            if isinstance(meta.get("labels"), Mapping):
                ops.append(
                    {
                        "op": "add",
                        "path": "/metadata/labels/" + pointer_token(QUEUE_NAME_LABEL),
                        "value": DEFAULT_LOCAL_QUEUE,
                    }
                )
            else:
                ops.append({"op": "add", "path": "/metadata/labels", "value": {QUEUE_NAME_LABEL: DEFAULT_LOCAL_QUEUE}})
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {ADMISSION_ANNOTATION: ""}})
    elif ADMISSION_ANNOTATION not in annotations:
        ops.append({"op": "add", "path": "/metadata/annotations/" + pointer_token(ADMISSION_ANNOTATION), "value": ""})
    spec = job.get("spec") or {}
    if job.get("kind") == "PyTorchJob":  # suspended through its run policy, which may be absent
        run_policy = spec.get("runPolicy")
        if not isinstance(run_policy, Mapping):
            ops.append({"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}})
        elif run_policy.get("suspend") is not True:
            ops.append({"op": "add", "path": "/spec/runPolicy/suspend", "value": True})
    elif spec.get("suspend") is not True:
        ops.append({"op": "add", "path": "/spec/suspend", "value": True})
    return ops or None


def rejection(job: Mapping[str, Any]) -> str | None:
    """Why a queued PyTorchJob, RayJob or JobSet cannot be created, as Kueue's validating webhooks refuse it (a
    RayJob on an existing cluster or keeping its cluster, a replica spec without containers...): every problem the
    adapter finds, each naming its field; None when it is fine or not one of those kinds. Jobs are not refused."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    adapter = adapter_for(str(job.get("apiVersion", "")), str(job.get("kind", "")))
    if not isinstance(adapter, DistributedAdapter) or not labels.get(QUEUE_NAME_LABEL):
        return None
    r = Reader(kind=adapter.kind)
    adapter.read(r, job, created_at=0, uid="")
    return "; ".join(str(e) for e in r.errors) or None


def admission_response(review: Mapping[str, Any], policy: NewJobPolicy | None = None) -> dict[str, Any]:
    """An AdmissionReview (admission.k8s.io/v1) answered: allowed with the suspend patch when needed, or refused
    (422, the fields named) for a queued distributed job admitd could never admit (`rejection`)."""
    request = review.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    why = rejection(request.get("object") or {})
    if why is not None:
        response["allowed"] = False
        response["status"] = {"code": 422, "reason": "Invalid", "message": why}
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    patch = suspend_patch(request.get("object") or {}, policy, str(request.get("namespace") or ""))
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


# Registration. The webhook configurations and the CRDs are shipped by config/; admitd never creates them in a
# cluster (RBAC cannot limit `create` by name, and a configuration admitd could create could intercept any object).
# It patches, by name, what only it knows: the caBundle of its serving certificate and where the API server calls
# (clientConfig: a `url` outside the cluster, the `service` inside), with the failure policy and the namespaces
# its settings give. clientConfig is replaced whole by a JSON patch, so a switch between `url` and `service` never
# leaves both (a merge would: "exactly one of url or service is required"). Only for development outside the
# cluster, `--create-webhook-configurations` creates the two configurations when they are missing.

VALIDATE_JOBS_PATH = "/validate-jobs"


class RegistrationError(Exception):
    """A webhook configuration or CRD admitd must patch is missing or not the one config/ ships."""


@dataclass(frozen=True, slots=True)
class Hook:
    """One of admitd's two webhook configurations and the webhook in it."""

    resource: str
    kind: str
    webhook: str
    path: str
    operations: tuple[str, ...]

    @property
    def collection(self) -> str:
        return f"/apis/admissionregistration.k8s.io/v1/{self.resource}"


MUTATING = Hook(
    "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", "mjob.admitd.io", MUTATE_JOBS_PATH, ("CREATE",)
)
VALIDATING = Hook(
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    "vjob.admitd.io",
    VALIDATE_JOBS_PATH,
    ("CREATE", "UPDATE"),
)


def not_admitd(usernames: Iterable[str]) -> list[dict[str, str]]:
    """The validating webhook's matchConditions: the API server does not call it for admitd's own requests (its
    user names), which the handler would allow anyway, so that no admission or preemption patch waits for a round
    trip to the guard. None given: called for every request."""
    names = ", ".join("'" + n.replace("\\", "\\\\").replace("'", "\\'") + "'" for n in sorted(usernames))
    return [{"name": "not-admitd", "expression": f"!(request.userInfo.username in [{names}])"}] if names else []


def client_config(
    ca_bundle: bytes, path: str, *, url: str | None, service: tuple[str, str, int] | None
) -> dict[str, Any]:
    """Where the API server calls `path`: by URL when one is given, else through the Service."""
    out: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode()}
    if url is not None:
        out["url"] = url.rstrip("/") + path
    elif service is not None:
        namespace, name, port = service
        out["service"] = {"namespace": namespace, "name": name, "port": port, "path": path}
    else:
        raise ValueError("a webhook needs a URL or a Service")
    return out


def _selectors(namespaces: LabelSelector | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(namespaceSelector, objectSelector): with managedJobsNamespaceSelector, every job created in those
    namespaces (the default LocalQueue, manageJobsWithoutQueueName); without, only jobs with the queue-name label."""
    if namespaces is not None:
        return selector_object(namespaces), {}
    return {}, {"matchExpressions": [{"key": QUEUE_NAME_LABEL, "operator": "Exists"}]}


def webhook_configuration(
    ca_bundle: bytes,
    *,
    url: str | None,
    service: tuple[str, str, int] | None,
    failure_policy: str,
    namespaces: LabelSelector | None = None,
    hook: Hook = MUTATING,
    match_conditions: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A whole configuration, as `--create-webhook-configurations` creates it outside the cluster (config/ ships
    the same one for the cluster)."""
    namespace_selector, object_selector = _selectors(namespaces)
    webhook: dict[str, Any] = {
        "name": hook.webhook,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "timeoutSeconds": 10,
        "clientConfig": client_config(ca_bundle, hook.path, url=url, service=service),
        "rules": [
            {
                "apiGroups": [k.group],
                "apiVersions": [k.version],
                "operations": list(hook.operations),
                "resources": [k.plural],
                "scope": "Namespaced",
            }
            for k in KINDS.values()
        ],
    }
    if namespace_selector:
        webhook["namespaceSelector"] = namespace_selector
    if object_selector:
        webhook["objectSelector"] = object_selector
    if match_conditions:
        webhook["matchConditions"] = [dict(c) for c in match_conditions]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": hook.kind,
        "metadata": {"name": CONFIGURATION_NAME, "labels": {"app.kubernetes.io/name": "admitd"}},
        "webhooks": [webhook],
    }


def registration_patch(
    current: Mapping[str, Any],
    hook: Hook,
    ca_bundle: bytes,
    *,
    url: str | None,
    service: tuple[str, str, int] | None,
    failure_policy: str,
    namespaces: LabelSelector | None,
    match_conditions: Sequence[Mapping[str, str]] = (),
) -> list[dict[str, Any]]:
    """The JSON patch that points the configuration's webhook at this daemon: clientConfig replaced whole, the
    failure policy and the selectors set where they differ. `test` guards the webhook's index."""
    webhooks = current.get("webhooks") or []
    index = next((i for i, w in enumerate(webhooks) if w.get("name") == hook.webhook), None)
    if index is None:
        raise RegistrationError(
            f"{hook.kind} {CONFIGURATION_NAME} has no webhook named {hook.webhook}: re-apply config/ "
            "(kubectl apply --server-side -k config/)"
        )
    live = webhooks[index]
    at = f"/webhooks/{index}"
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"{at}/name", "value": hook.webhook},
        {
            "op": "replace",
            "path": f"{at}/clientConfig",
            "value": client_config(ca_bundle, hook.path, url=url, service=service),
        },
    ]
    if live.get("failurePolicy") != failure_policy:
        ops.append({"op": "add", "path": f"{at}/failurePolicy", "value": failure_policy})
    namespace_selector, object_selector = _selectors(namespaces)
    for key, wanted in (("namespaceSelector", namespace_selector), ("objectSelector", object_selector)):
        if (live.get(key) or {}) != wanted:
            ops.append({"op": "add", "path": f"{at}/{key}", "value": wanted})
    conditions = [dict(c) for c in match_conditions]
    if (live.get("matchConditions") or []) != conditions:
        if conditions:
            ops.append({"op": "add", "path": f"{at}/matchConditions", "value": conditions})
        else:
            ops.append({"op": "remove", "path": f"{at}/matchConditions"})
    return ops


FIELD_MANAGER = "admitd"
# The field sets (managedFields, fieldsV1) of each form of clientConfig.
_FORM_FIELDS: dict[str, dict[str, Any]] = {
    "f:url": {},
    "f:service": {"f:name": {}, "f:namespace": {}, "f:path": {}, "f:port": {}},
}


def hand_over(
    managed_fields: Sequence[Mapping[str, Any]], client_config_at: Sequence[str], *, to_url: bool
) -> list[dict[str, Any]] | None:
    """The object's managedFields with the clientConfig form admitd just set (`url` or `service`) owned by whoever
    server-side applied the object's part that holds clientConfig (the CRD's conversion webhook, the webhook in the
    configuration), and no longer by admitd; None when no applier owns that part or it owns the form already.

    Why: server-side apply keeps fields that another manager owns. After admitd (a plain update) replaced `service`
    with `url` (which dropped the applier's ownership of `service` with the field), re-applying config/ would put
    `service` back beside admitd's `url` ("exactly one of url or service is required"). With the `url` owned by the
    applier instead, the re-apply removes it (the applier no longer applies it, and nobody else owns it) and sets
    the `service` in its place; admitd's own entry keeps the caBundle. `client_config_at` is the path to
    clientConfig in the fieldsV1 form (f:spec, k:{"name":...}, ...)."""
    new, old = ("f:url", "f:service") if to_url else ("f:service", "f:url")
    *parent_at, leaf = client_config_at
    out: list[dict[str, Any]] = []
    moved = False
    for given in managed_fields:
        entry: dict[str, Any] = json.loads(json.dumps(given))  # a deep copy, plain JSON
        fields = entry.get("fieldsV1")
        if entry.get("operation") == "Apply":
            node: Any = fields
            for key in parent_at:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict):
                client_config = node.setdefault(leaf, {})
                if new not in client_config:
                    client_config.pop(old, None)
                    client_config[new] = json.loads(json.dumps(_FORM_FIELDS[new]))
                    moved = True
        elif entry.get("operation") == "Update" and entry.get("manager") == FIELD_MANAGER:
            node = fields
            for key in client_config_at:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(new, None)
        out.append(entry)
    return out if moved else None


async def _hand_over(client: KubeClient, path: str, client_config_at: Sequence[str], *, to_url: bool) -> None:
    """`hand_over` written back (a JSON patch of managedFields alone, tested on the resourceVersion)."""
    current = await client.request("GET", path)
    meta = current.get("metadata") or {}
    fields = hand_over(meta.get("managedFields") or [], client_config_at, to_url=to_url)
    if fields is None:
        return
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        {"op": "replace", "path": "/metadata/managedFields", "value": fields},
    ]
    try:
        await client.request("PATCH", path, body=ops, content_type=JSON_PATCH, params={"fieldManager": FIELD_MANAGER})
    except (Permanent, Conflict) as e:  # changed meanwhile: the next registration (a renewal, a new leader) retries
        log.warning("clientConfig not handed to its applier (retried at the next registration)", error=str(e))
        return
    log.info("clientConfig handed to its applier", path=path, form="url" if to_url else "service")


async def register(
    client: KubeClient,
    hook: Hook,
    ca_bundle: bytes,
    *,
    url: str | None,
    service: tuple[str, str, int] | None,
    failure_policy: str,
    namespaces: LabelSelector | None = None,
    create: bool = False,
    match_conditions: Sequence[Mapping[str, str]] = (),
) -> None:
    """Patch the configuration `admitd` of `hook`'s kind by name. Missing: a RegistrationError, or with `create`
    (development outside the cluster) created."""
    path = f"{hook.collection}/{CONFIGURATION_NAME}"
    try:
        current = await client.request("GET", path)
    except NotFound:
        if not create:
            raise RegistrationError(
                f"{hook.kind} {CONFIGURATION_NAME} is not installed: apply config/ (kubectl apply --server-side -k "
                "config/); outside the cluster, admitd run --create-webhook-configurations creates it (it needs "
                f"create on {hook.resource})"
            ) from None
        body = webhook_configuration(
            ca_bundle,
            url=url,
            service=service,
            failure_policy=failure_policy,
            namespaces=namespaces,
            hook=hook,
            match_conditions=match_conditions,
        )
        await client.request("POST", hook.collection, body=body)
        log.info("webhook configuration created", kind=hook.kind, name=CONFIGURATION_NAME)
        return
    ops = registration_patch(
        current,
        hook,
        ca_bundle,
        url=url,
        service=service,
        failure_policy=failure_policy,
        namespaces=namespaces,
        match_conditions=match_conditions,
    )
    await client.request("PATCH", path, body=ops, content_type=JSON_PATCH, params={"fieldManager": FIELD_MANAGER})
    at = ["f:webhooks", 'k:{"name":"' + hook.webhook + '"}', "f:clientConfig"]
    await _hand_over(client, path, at, to_url=url is not None)
    log.info("webhook configuration patched", kind=hook.kind, name=CONFIGURATION_NAME, by="url" if url else "service")


CRD_NAMES = tuple(
    f"{plural}.kueue.x-k8s.io"
    for plural in ("resourceflavors", "clusterqueues", "localqueues", "cohorts", "workloadpriorityclasses", "workloads")
)
CONVERT_PATH = "/convert"


def conversion_patch(
    crd: Mapping[str, Any], ca_bundle: bytes, *, url: str | None, service: tuple[str, str, int] | None
) -> list[dict[str, Any]] | None:
    """The JSON patch that points a CRD's conversion webhook at this daemon (clientConfig replaced whole, so the
    form not used is gone); None for a CRD whose versions share one schema (strategy None)."""
    if ((crd.get("spec") or {}).get("conversion") or {}).get("strategy") != "Webhook":
        return None
    return [
        {"op": "test", "path": "/spec/conversion/strategy", "value": "Webhook"},
        {
            "op": "replace",
            "path": "/spec/conversion/webhook/clientConfig",
            "value": client_config(ca_bundle, CONVERT_PATH, url=url, service=service),
        },
    ]


async def point_conversion(
    client: KubeClient, ca_bundle: bytes, *, url: str | None, service: tuple[str, str, int] | None
) -> None:
    """Point each CRD's conversion webhook at this daemon, with its current certificate (as Kueue's cert controller
    does), so v1beta1 and v1beta2 objects convert through `daemon.manifests.conversion`."""
    pointed = 0
    for name in CRD_NAMES:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        try:
            ops = conversion_patch(await client.request("GET", path), ca_bundle, url=url, service=service)
            if ops is None:
                continue
            await client.request(
                "PATCH", path, body=ops, content_type=JSON_PATCH, params={"fieldManager": FIELD_MANAGER}
            )
            at = ["f:spec", "f:conversion", "f:webhook", "f:clientConfig"]
            await _hand_over(client, path, at, to_url=url is not None)
            pointed += 1
        except NotFound:
            log.warning("CRD not installed; its conversion is not served", crd=name)
    log.info("CRD conversion webhooks point at this daemon", crds=pointed, by="url" if url else "service")


def selector_object(selector: LabelSelector) -> dict[str, Any]:
    """A metav1.LabelSelector as the API takes it."""
    out: dict[str, Any] = {}
    if selector.match_labels:
        out["matchLabels"] = dict(selector.match_labels)
    if selector.match_expressions:
        out["matchExpressions"] = [
            {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
            for e in selector.match_expressions
        ]
    return out


def routes(
    extra: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
    policy: NewJobPolicy | None = None,
    validate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    requested: Callable[[str, int, float], None] | None = None,
) -> web.Application:
    """The webhook server's application: /mutate-batch-v1-job, /validate-jobs (`validate`, an AdmissionReview
    answered by `daemon.kube.guard.validation_response`) and any extra JSON-in/JSON-out handlers. `requested(path,
    HTTP status, seconds)` is told of every request answered (`daemon.metrics.live.webhook_requested`)."""

    def json_handler(path: str, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., Any]:
        async def respond(request: web.Request) -> web.Response:
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                return web.json_response({"error": "the body is not JSON"}, status=400)
            return web.json_response(answer(body))

        async def handle(request: web.Request) -> web.Response:
            started, status = time.perf_counter(), 500  # an exception is aiohttp's 500
            try:
                response = await respond(request)
                status = response.status
                return response
            finally:
                if requested is not None:
                    requested(path, status, time.perf_counter() - started)

        return handle

    app = web.Application()
    app.router.add_post(MUTATE_JOBS_PATH, json_handler(MUTATE_JOBS_PATH, lambda r: admission_response(r, policy)))
    if validate is not None:
        app.router.add_post(VALIDATE_JOBS_PATH, json_handler(VALIDATE_JOBS_PATH, validate))
    for path, answer in (extra or {}).items():
        app.router.add_post(path, json_handler(path, answer))
    return app
