"""Which jobs admitd manages, and in which LocalQueue a new job without a queue name lands (Kueue's Configuration
`manageJobsWithoutQueueName` and `managedJobsNamespaceSelector`, and its LocalQueue defaulting).

Kueue's rules for a batch/v1 Job, as its job webhook (on create) and reconciler apply them:

- a job in a namespace that `managedJobsNamespaceSelector` does not select is never managed, labelled or not;
- a job created without the `kueue.x-k8s.io/queue-name` label in a namespace that has a LocalQueue named `default`
  gets the label `default` (LocalQueueDefaulting, GA), whatever `manageJobsWithoutQueueName` says;
- a job with the label is managed; one still without it is managed only with `manageJobsWithoutQueueName: true`,
  and then it is suspended and waits (it has no LocalQueue) until someone gives it the label.

The defaulting happens once, when the job is created: a `default` LocalQueue created later does not pick up jobs
that exist already, as in Kueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from daemon.domain.model import NAMESPACE_NAME_LABEL, JobManagement, LocalQueue, Namespace, selects

DEFAULT_LOCAL_QUEUE = "default"


@dataclass(frozen=True, slots=True)
class Managed:
    """A managed job's queue: `queue_name` None means none (held until it gets one); `defaulted` when it is the
    namespace's `default` LocalQueue, given because the job had no queue name."""

    queue_name: str | None
    defaulted: bool = False


def namespace_labels(name: str, namespace: Namespace | None) -> dict[str, str]:
    """A namespace's labels as a selector sees them: the API server always sets `kubernetes.io/metadata.name`, so a
    namespace not observed (yet) still has that one."""
    labels = dict(namespace.labels) if namespace is not None else {}
    labels.setdefault(NAMESPACE_NAME_LABEL, name)
    return labels


def namespace_managed(jobs: JobManagement, name: str, namespace: Namespace | None) -> bool:
    return selects(jobs.namespace_selector, namespace_labels(name, namespace))


def default_queue_exists(local_queues: Mapping[str, LocalQueue], namespace: str) -> bool:
    return f"{namespace}/{DEFAULT_LOCAL_QUEUE}" in local_queues


def manage_new_job(
    jobs: JobManagement, queue_name: str | None, *, namespace_selected: bool, default_queue: bool
) -> Managed | None:
    """How a job is treated when it is created: None when admitd leaves it alone, else its queue."""
    if not namespace_selected:
        return None
    if queue_name:
        return Managed(queue_name)
    if default_queue:
        return Managed(DEFAULT_LOCAL_QUEUE, defaulted=True)
    if jobs.without_queue_name:
        return Managed(None)
    return None


def manage_existing_job(jobs: JobManagement, queue_name: str | None, *, namespace_selected: bool) -> bool:
    """Whether a job seen after its creation is managed: no defaulting then (Kueue defaults only in its webhook)."""
    if not namespace_selected:
        return False
    return bool(queue_name) or jobs.without_queue_name
