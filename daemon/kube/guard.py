"""The validating admission webhook for managed jobs: only admitd's own identity writes their admission state.

For every kind admitd manages (`daemon.kube.jobkinds.KINDS`), on CREATE and UPDATE, a request from anyone but admitd
is refused when it would set or change an `admitd.io/*` annotation (an empty value and an absent one are the same),
create a queued job unsuspended, or unsuspend one (suspended before, not after), as Kueue's webhooks guard the
fields its controllers own. A job is queued (managed) by the same rules the mutating webhook applies
(`daemon.domain.management`), judged on the old and the new object alike, or when the fold already holds it. A
job whose `kueue.x-k8s.io/queue-name` is not a valid queue name (a DNS-1123 subdomain, as Kueue's job webhook
requires) is refused when it is created or its label changes, whoever sends it. Pure, but for `own_username`, which
asks the API server who admitd is (a SelfSubjectReview), and `may` (a SelfSubjectAccessReview).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from daemon.domain.trust import ANNOTATION_PREFIX
from daemon.kube.client import KubeClient, resolve_pointer
from daemon.manifests import QUEUE_NAME_LABEL, adapter_for
from daemon.manifests.distributed import suspend_pointer
from daemon.manifests.jobs import managed_owner

Policy = Callable[[str, str | None], object | None]
"""(namespace, queue name or None) -> not None when a job created there is managed (`webhook.NewJobPolicy`)."""

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
DNS1123_SUBDOMAIN_MAX = 253


def queue_name_problem(value: object) -> str | None:
    """Why `value` is not a valid queue name (Kubernetes' IsDNS1123Subdomain, which Kueue applies), None if it is."""
    if not isinstance(value, str):
        return "must be a string"
    problems = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        problems.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        problems.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
            f"'{_DNS1123_SUBDOMAIN.pattern}')"
        )
    return "; ".join(problems) or None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def admitd_annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    """The job's `admitd.io/*` annotations with a value (an empty one counts as absent)."""
    annotations = _meta(obj).get("annotations")
    if not isinstance(annotations, Mapping):
        return {}
    return {str(k): str(v) for k, v in annotations.items() if str(k).startswith(ANNOTATION_PREFIX) and v}


def suspended(obj: Mapping[str, Any]) -> bool:
    return resolve_pointer(obj, suspend_pointer(str(obj.get("kind", "")))) is True


def _managed(obj: Mapping[str, Any], namespace: str, policy: Policy | None, held: Callable[[str], bool]) -> bool:
    if not obj or managed_owner(obj) is not None:
        return False  # none (an old object on CREATE), or a part of a job admitd admits: its owner is guarded
    queue = _labels(obj).get(QUEUE_NAME_LABEL) or None
    if held(f"{namespace}/{_meta(obj).get('name', '')}"):
        return True
    if policy is None:
        return bool(queue)
    return policy(namespace, queue if isinstance(queue, str) else None) is not None


def refusal(
    request: Mapping[str, Any],
    *,
    admitd: frozenset[str],
    policy: Policy | None = None,
    held: Callable[[str], bool] = lambda _key: False,
) -> tuple[int, str] | None:
    """Why the API server must refuse `request` (an AdmissionReview's request), as (HTTP code, message); None when
    it may go ahead. `admitd` holds the user names of admitd's own identity; `held(namespace/name)` says whether
    the fold holds the job."""
    obj = request.get("object") or {}
    old = request.get("oldObject") or {}
    if not isinstance(obj, Mapping) or adapter_for(str(obj.get("apiVersion", "")), str(obj.get("kind", ""))) is None:
        return None
    old = old if isinstance(old, Mapping) else {}
    operation = str(request.get("operation", ""))
    kind = str(obj.get("kind"))
    namespace = str(request.get("namespace") or _meta(obj).get("namespace") or "")
    what = f"{kind} {namespace}/{_meta(obj).get('name') or request.get('name') or ''}"
    queue = _labels(obj).get(QUEUE_NAME_LABEL)
    if queue is not None and (operation == "CREATE" or queue != _labels(old).get(QUEUE_NAME_LABEL)):
        problem = queue_name_problem(queue)
        if problem is not None:
            return 422, f'{what}: metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "{queue}": {problem}'
    user = str((request.get("userInfo") or {}).get("username") or "")
    if user in admitd or not (_managed(obj, namespace, policy, held) or _managed(old, namespace, policy, held)):
        return None
    by = f"{user or 'an anonymous user'} is not admitd ({', '.join(sorted(admitd)) or 'unknown'})"
    pointer = suspend_pointer(kind).strip("/").replace("/", ".")
    if operation == "CREATE":
        claimed = admitd_annotations(obj)
        if claimed:
            names = ", ".join(sorted(claimed))
            return 403, (
                f"{what}: metadata.annotations[{names}]: admitd.io/ annotations record admitd's own admission "
                f"state and only admitd writes them; {by}"
            )
        if not suspended(obj):
            return 403, (
                f"{what}: {pointer}: a queued job is created suspended and only admitd unsuspends it, when its "
                f"ClusterQueue admits it; {by}"
            )
        return None
    if operation == "UPDATE":
        before, after = admitd_annotations(old), admitd_annotations(obj)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        if changed:
            return 403, (
                f"{what}: metadata.annotations[{', '.join(changed)}]: admitd.io/ annotations record admitd's own "
                f"admission state and only admitd changes them; {by}"
            )
        if suspended(old) and not suspended(obj):
            return 403, (
                f"{what}: {pointer}: only admitd unsuspends a queued job, when its ClusterQueue admits it; {by}. "
                "Wait for the admission (kubectl get workloads, or admitd explain)"
            )
    return None


def validation_response(
    review: Mapping[str, Any],
    *,
    admitd: frozenset[str],
    policy: Policy | None = None,
    held: Callable[[str], bool] = lambda _key: False,
) -> dict[str, Any]:
    """An AdmissionReview (admission.k8s.io/v1) answered: allowed, or refused with the code and the reason."""
    request = review.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    refused = refusal(request, admitd=admitd, policy=policy, held=held)
    if refused is not None:
        code, message = refused
        response["allowed"] = False
        response["status"] = {"code": code, "reason": "Invalid" if code == 422 else "Forbidden", "message": message}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


async def own_username(client: KubeClient) -> str:
    """The user name the API server knows admitd by (a SelfSubjectReview, authentication.k8s.io/v1): what the
    validating webhook compares a request's userInfo.username with."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer = await client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=body)
    return str(((answer.get("status") or {}).get("userInfo") or {}).get("username") or "")


async def may(client: KubeClient, verb: str, group: str, resource: str, name: str = "") -> bool:
    """Whether admitd's identity may `verb` the `resource` (named `name`): a SelfSubjectAccessReview, which every
    authenticated user may send. For a call admitd makes only where its role allows it."""
    attributes = {"verb": verb, "group": group, "resource": resource, **({"name": name} if name else {})}
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    answer = await client.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body)
    return bool((answer.get("status") or {}).get("allowed"))


async def user_may(client: KubeClient, spec: Mapping[str, Any]) -> bool:
    """Whether the API server's authorizer allows another user what `spec` asks (a SubjectAccessReview's spec: the
    user, its groups, and the resource or non-resource attributes). The one SubjectAccessReview of admitd's callers'
    checks (metrics and answers, the web view, the visibility API)."""
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": dict(spec)}
    answer = await client.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body)
    return bool((answer.get("status") or {}).get("allowed"))
