"""Suspend on create: the mutating admission webhook, its self-managed serving certificate and its registration.

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

admitd makes its own serving certificate (self-signed, 1 year), renews it when less than 30 days remain, and
patches the certificate into the configuration's caBundle. Outside the cluster (the local control plane), the
configuration points at a URL instead of a Service.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

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
from daemon.kube.client import MERGE_PATCH, KubeClient, pointer_token
from daemon.kube.errors import NotFound
from daemon.kube.jobkinds import KINDS
from daemon.manifests import QUEUE_NAME_LABEL, adapter_for
from daemon.manifests.distributed import DistributedAdapter
from daemon.manifests.fields import Reader
from daemon.manifests.jobs import managed_owner
from daemon.obs.logging import get_logger

log = get_logger("admitd.webhook")

CONFIGURATION_NAME = "admitd"
MUTATE_JOBS_PATH = "/mutate-batch-v1-job"
CERT_VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)


@dataclass(frozen=True, slots=True)
class ServingCert:
    cert_pem: bytes
    key_pem: bytes
    not_after: dt.datetime

    def due(self, now: dt.datetime) -> bool:
        return self.not_after - now < RENEW_BEFORE


def make_serving_cert(names: Sequence[str], now: dt.datetime | None = None) -> ServingCert:
    """A self-signed certificate for `names` (DNS names or IP addresses); it is its own CA for the caBundle."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    not_after = now + CERT_VALIDITY
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return ServingCert(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        not_after=not_after,
    )


def load_or_make_cert(directory: Path, names: Sequence[str]) -> ServingCert:
    """The certificate kept in `directory` while it is valid for long enough and for these names, else a new one."""
    cert_path, key_path = directory / "webhook.crt", directory / "webhook.key"
    now = dt.datetime.now(dt.UTC)
    if cert_path.is_file() and key_path.is_file():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            have = {str(v) for v in san.get_values_for_type(x509.DNSName)} | {
                str(v) for v in san.get_values_for_type(x509.IPAddress)
            }
        except x509.ExtensionNotFound:
            have = set()
        kept = ServingCert(cert_path.read_bytes(), key_path.read_bytes(), cert.not_valid_after_utc)
        if not kept.due(now) and set(names) <= have:
            return kept
    fresh = make_serving_cert(names, now)
    directory.mkdir(parents=True, exist_ok=True)
    key_path.touch(mode=0o600)
    key_path.write_bytes(fresh.key_pem)
    cert_path.write_bytes(fresh.cert_pem)
    log.info("webhook serving certificate written", path=str(cert_path), not_after=fresh.not_after.isoformat())
    return fresh


def ssl_context(cert: ServingCert, directory: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # Python's default today; said here so that it stays so
    ctx.load_cert_chain(directory / "webhook.crt", directory / "webhook.key")
    return ctx


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


def webhook_configuration(
    ca_bundle: bytes,
    *,
    url: str | None,
    service: tuple[str, str, int] | None,
    failure_policy: str,
    namespaces: LabelSelector | None = None,
) -> dict[str, Any]:
    """With `namespaces` (managedJobsNamespaceSelector), every job created in those namespaces reaches admitd, for
    the default LocalQueue and manageJobsWithoutQueueName; without, only jobs with the queue-name label do."""
    client_config: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode()}
    if url is not None:
        client_config["url"] = url.rstrip("/") + MUTATE_JOBS_PATH
    elif service is not None:
        namespace, name, port = service
        client_config["service"] = {"namespace": namespace, "name": name, "port": port, "path": MUTATE_JOBS_PATH}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME, "labels": {"app.kubernetes.io/managed-by": "admitd"}},
        "webhooks": [
            {
                "name": "mjob.admitd.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": failure_policy,
                "timeoutSeconds": 10,
                "clientConfig": client_config,
                **(
                    {"namespaceSelector": selector_object(namespaces)}
                    if namespaces is not None
                    else {"objectSelector": {"matchExpressions": [{"key": QUEUE_NAME_LABEL, "operator": "Exists"}]}}
                ),
                "rules": [
                    {
                        "apiGroups": [k.group],
                        "apiVersions": [k.version],
                        "operations": ["CREATE"],
                        "resources": [k.plural],
                        "scope": "Namespaced",
                    }
                    for k in KINDS.values()
                ],
            }
        ],
    }


async def register(client: KubeClient, body: dict[str, Any]) -> None:
    """Create or replace the MutatingWebhookConfiguration (a new caBundle after a renewal included)."""
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    try:
        current = await client.request("GET", f"{path}/{CONFIGURATION_NAME}")
    except NotFound:
        await client.request("POST", path, body=body)
        log.info("webhook registered", name=CONFIGURATION_NAME)
        return
    body = {**body, "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
    await client.request("PUT", f"{path}/{CONFIGURATION_NAME}", body=body)
    log.info("webhook registration updated", name=CONFIGURATION_NAME)


CRD_NAMES = tuple(
    f"{plural}.kueue.x-k8s.io"
    for plural in ("resourceflavors", "clusterqueues", "localqueues", "cohorts", "workloadpriorityclasses", "workloads")
)
CONVERT_PATH = "/convert"


async def point_conversion(
    client: KubeClient, ca_bundle: bytes, *, url: str | None, service: tuple[str, str, int] | None
) -> None:
    """Point each CRD's conversion webhook at this daemon, with its current certificate (as Kueue's cert controller
    does), so v1beta1 and v1beta2 objects convert through `daemon.manifests.conversion`."""
    # A merge patch: the form not used is set to null, or a CRD installed with a Service would end up with both.
    client_config: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode(), "url": None, "service": None}
    if url is not None:
        client_config["url"] = url.rstrip("/") + CONVERT_PATH
    elif service is not None:
        namespace, name, port = service
        client_config["service"] = {"namespace": namespace, "name": name, "port": port, "path": CONVERT_PATH}
    conversion = {
        "strategy": "Webhook",
        "webhook": {"clientConfig": client_config, "conversionReviewVersions": ["v1"]},
    }
    pointed = 0
    for name in CRD_NAMES:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        try:
            crd = await client.request("GET", path)
            if (crd.get("spec", {}).get("conversion") or {}).get("strategy") != "Webhook":
                continue  # a kind whose versions are the same schema (ResourceFlavor, WorkloadPriorityClass)
            await client.request("PATCH", path, body={"spec": {"conversion": conversion}}, content_type=MERGE_PATCH)
            pointed += 1
        except NotFound:
            log.warning("CRD not installed; its conversion is not served", crd=name)
    log.info("CRD conversion webhooks point at this daemon", crds=pointed)


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
) -> web.Application:
    """The webhook server's application: /mutate-batch-v1-job, and any extra JSON-in/JSON-out handlers."""

    def json_handler(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., Any]:
        async def handle(request: web.Request) -> web.Response:
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                return web.json_response({"error": "the body is not JSON"}, status=400)
            return web.json_response(answer(body))

        return handle

    app = web.Application()
    app.router.add_post(MUTATE_JOBS_PATH, json_handler(lambda review: admission_response(review, policy)))
    for path, answer in (extra or {}).items():
        app.router.add_post(path, json_handler(answer))
    return app
