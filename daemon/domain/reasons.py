"""Kueue's reason vocabulary for a workload that holds no quota, in one place.

Kueue v0.19 (feature gate UnadmittedWorkloadsObservability, on by default since kubernetes-sigs/kueue#13063)
writes granular reasons on a Workload's `QuotaReserved=False` condition instead of the one `Pending`, names its
Warning Event after the same reason (pkg/scheduler `requeueAndUpdate`), and counts unadmitted workloads by the
`Admitted` condition's reason and, as `underlying_cause`, the `QuotaReserved` one
(`kueue_unadmitted_workloads{cluster_queue,reason,underlying_cause}`, pkg/cache/queue/unadmitted_workloads.go).

admitd's own pending reasons (`PendingReasonKind`, stored in the log) are finer and stay as they are; this module
says which of Kueue's reasons each one is, so that the Workload status, its Events, `explain`, `pending` and the
metrics all name the same reason. Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

from daemon.domain.model import PendingReason, PendingReasonKind

# apis/kueue/v1beta2/workload_types.go: WorkloadQuotaReservedReason*
NO_MATCHING_FLAVOR: Final = "NoMatchingFlavor"
WAITING_FOR_QUOTA: Final = "WaitingForQuota"
EXCEEDS_MAX_QUOTA: Final = "ExceedsMaxQuota"
TOPOLOGY_PLACEMENT_FAILED: Final = "TopologyPlacementFailed"  # Kueue's topology-aware scheduling; never from admitd
WAITING_FOR_PREEMPTED_WORKLOADS: Final = "WaitingForPreemptedWorkloads"
MISCONFIGURED: Final = "Misconfigured"
SUSPENDED: Final = "Suspended"
PENDING_EVALUATION: Final = "PendingEvaluation"
WAITING_FOR_PODS_READY: Final = "WaitingForPodsReady"
# apis/kueue/v1beta2/workload_types.go: WorkloadDeactivated (spec.active false, or deactivated by waitForPodsReady)
DEACTIVATED: Final = "Deactivated"

QUOTA_RESERVED_REASONS: Final = (
    NO_MATCHING_FLAVOR,
    WAITING_FOR_QUOTA,
    EXCEEDS_MAX_QUOTA,
    TOPOLOGY_PLACEMENT_FAILED,
    WAITING_FOR_PREEMPTED_WORKLOADS,
    MISCONFIGURED,
    SUSPENDED,
    PENDING_EVALUATION,
    WAITING_FOR_PODS_READY,
    DEACTIVATED,
)
"""Every reason a `QuotaReserved=False` condition written by admitd can carry (the `underlying_cause` label)."""

# The Admitted condition's reason while no quota is reserved (WorkloadAdmittedReasonNoReservation): the `reason`
# label of kueue_unadmitted_workloads. admitd has no admission checks, so UnsatisfiedAdmissionChecks never occurs.
NO_RESERVATION: Final = "NoReservation"

# Kueue's fixed messages (pkg/controller/core/workload_controller.go).
PENDING_EVALUATION_MESSAGE: Final = "Workload is pending evaluation in the scheduling queue"
DEACTIVATED_MESSAGE: Final = "The workload is deactivated"

_OF_KIND: Final[dict[PendingReasonKind, str]] = {
    # Kueue's getQueueBlocker: a LocalQueue or ClusterQueue that does not exist is Misconfigured, one that is
    # stopped or inactive is Suspended; ValidateAdmissibility (the namespace selector) is Misconfigured.
    PendingReasonKind.LOCAL_QUEUE_NOT_FOUND: MISCONFIGURED,
    PendingReasonKind.CLUSTER_QUEUE_NOT_FOUND: MISCONFIGURED,
    PendingReasonKind.NAMESPACE_NOT_SELECTED: MISCONFIGURED,
    # Kueue creates no Workload for a job whose priority class is missing; admitd's is misconfigured until it is.
    PendingReasonKind.WORKLOAD_PRIORITY_CLASS_NOT_FOUND: MISCONFIGURED,
    PendingReasonKind.PRIORITY_CLASS_NOT_FOUND: MISCONFIGURED,
    PendingReasonKind.QUEUE_STOPPED: SUSPENDED,
    PendingReasonKind.CLUSTER_QUEUE_INACTIVE: SUSPENDED,
    PendingReasonKind.NO_MATCHING_FLAVOR: NO_MATCHING_FLAVOR,
    PendingReasonKind.EXCEEDS_MAX_QUOTA: EXCEEDS_MAX_QUOTA,
    PendingReasonKind.WAITING_FOR_QUOTA: WAITING_FOR_QUOTA,
    PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS: WAITING_FOR_PREEMPTED_WORKLOADS,
    # StrictFIFO: Kueue never pops a workload behind an inadmissible head, so it is still pending evaluation.
    PendingReasonKind.BLOCKED_BY_HEAD: PENDING_EVALUATION,
    PendingReasonKind.WAITING_FOR_PODS_READY: WAITING_FOR_PODS_READY,
    # waitForPodsReady's backoff: Kueue keeps the workload out with Requeued=False; once requeued it is evaluated.
    PendingReasonKind.REQUEUE_BACKOFF: PENDING_EVALUATION,
    PendingReasonKind.DEACTIVATED: DEACTIVATED,
}


def quota_reserved_reason(kind: PendingReasonKind | None) -> str:
    """Kueue's QuotaReserved reason for admitd's pending reason `kind` (None: no cycle has evaluated it yet)."""
    if kind is None:
        return PENDING_EVALUATION
    return _OF_KIND[kind]


def quota_reserved(reason: PendingReason | None) -> tuple[str, str]:
    """(reason, message) of the Workload's `QuotaReserved=False` condition and of its Warning Event: Kueue's
    reason, and admitd's message (already Kueue's wording where Kueue has one, with more detail), or Kueue's own
    message where admitd has none to add."""
    if reason is None:
        return PENDING_EVALUATION, PENDING_EVALUATION_MESSAGE
    return _OF_KIND[reason.kind], reason.message
