"""Every pending reason the cycle writes, one constructor each (Kueue writes them in its `workload` helpers and
`pkg/scheduler`); the texts say what keeps the workload out, in Kueue's words where Kueue has them."""

from __future__ import annotations

from collections.abc import Sequence

from daemon.domain.flavors import Assignment
from daemon.domain.model import ClusterQueue, LocalQueue, PendingReason, PendingReasonKind, Shortage
from daemon.domain.quantity import format_quantity
from daemon.domain.quota import Inactive, Node, cq_available
from daemon.domain.view import PendingWorkload


def unrouted(pw: PendingWorkload, lq: LocalQueue | None) -> PendingReason:
    """A workload no ClusterQueue sees: its own hold (e.g. a missing priority class), or a missing queue."""
    if pw.held is not None:
        return pw.held
    if not pw.local_queue:
        # manageJobsWithoutQueueName: managed (suspended) though it names no LocalQueue, and the namespace had no
        # LocalQueue `default` when it was created (Kueue: "LocalQueue  doesn't exist").
        return PendingReason(
            kind=PendingReasonKind.LOCAL_QUEUE_NOT_FOUND,
            message=f"the job has no kueue.x-k8s.io/queue-name label and namespace {pw.workload.namespace} "
            "had no LocalQueue named default when it was created; it stays suspended "
            "(manageJobsWithoutQueueName) until it is given a queue-name label",
        )
    if lq is None:
        return PendingReason(
            kind=PendingReasonKind.LOCAL_QUEUE_NOT_FOUND, message=f"LocalQueue {pw.local_queue} doesn't exist"
        )
    return PendingReason(
        kind=PendingReasonKind.CLUSTER_QUEUE_NOT_FOUND, message=f"ClusterQueue {lq.cluster_queue} doesn't exist"
    )


def cluster_queue_inactive(name: str, inactive: Inactive) -> PendingReason:
    return PendingReason(
        kind=PendingReasonKind.CLUSTER_QUEUE_INACTIVE, message=f"ClusterQueue {name} is inactive: {inactive.message}"
    )


def cluster_queue_stopped(name: str, cq: ClusterQueue) -> PendingReason:
    return PendingReason(
        kind=PendingReasonKind.QUEUE_STOPPED, message=f"ClusterQueue {name} is stopped ({cq.stop_policy.value})"
    )


def local_queue_stopped(lq: LocalQueue) -> PendingReason:
    return PendingReason(
        kind=PendingReasonKind.QUEUE_STOPPED, message=f"LocalQueue {lq.key} is stopped ({lq.stop_policy.value})"
    )


def namespace_not_selected(ns: str, cq: str) -> PendingReason:
    return PendingReason(
        kind=PendingReasonKind.NAMESPACE_NOT_SELECTED, message=f"namespace {ns} is not selected by ClusterQueue {cq}"
    )


def blocked_by_head(head: PendingWorkload, cq: str) -> PendingReason:
    return PendingReason(
        kind=PendingReasonKind.BLOCKED_BY_HEAD,
        message=f"StrictFIFO: blocked by {head.key} at the head of ClusterQueue {cq}",
        blocked_by=head.key,
    )


def waiting_for_preempted(victims: Sequence[str], what: str) -> PendingReason:
    """A preemptor waits for its victims (`victims`), or a workload for room others free (`what`)."""
    keys = sorted(victims)
    message = f"waiting for {len(keys)} preempted workloads: {', '.join(keys)}" if keys else f"waiting for {what}"
    return PendingReason(
        kind=PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS,
        message=message,
        blocked_by=keys[0] if keys else None,
        victims=tuple(keys),
    )


def still_sticky(last: PendingReason | None, what: str) -> PendingReason:
    """A sticky preemptor (`is_sticky`) whose victims are gone and that now waits for `what`: it keeps the victims
    its last reason named (none is still leaving, so no call claims them for it), and with them its place first in
    its BestEffortFIFO queue."""
    assert last is not None and last.victims
    return PendingReason(
        kind=PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS,
        message=f"waiting for {what} (its own victims are gone: {', '.join(last.victims)})",
        victims=last.victims,
    )


def waiting_for_quota(node: Node, a: Assignment) -> PendingReason:
    """Preemption is needed and nobody can be preempted: what is missing, per resource."""
    shortages = tuple(
        Shortage(flavor=f, resource=r, requested=v, available=cq_available(node, (f, r)))
        for (f, r), v in sorted(a.usage.items())
        if v > cq_available(node, (f, r))
    )
    text = ", ".join(
        f"{s.resource} in flavor {s.flavor}: {format_quantity(s.requested - s.available, s.resource)} more needed"
        for s in shortages
    )
    return PendingReason(
        kind=PendingReasonKind.WAITING_FOR_QUOTA,
        message=f"insufficient unused quota and no workload to preempt: {text}",
        shortages=shortages,
    )


def no_fit(a: Assignment) -> PendingReason:
    """The flavor assigner's own reason (no flavor fits, even by preempting)."""
    assert a.reason_kind is not None
    return PendingReason(kind=a.reason_kind, message=a.message, shortages=a.shortages)
