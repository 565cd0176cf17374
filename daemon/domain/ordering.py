"""Orders used by the cycle: entries within a pass, preemption candidates, and the preemption policy test.

Ports of Kueue's classic iterator (`scheduler.go`), `common/ordering.go` and `common/preemption_policy.go`; every
order ends in a unique key so that no result depends on dict or set order.
"""

from __future__ import annotations

from daemon.domain.model import PreemptionPolicy
from daemon.domain.view import AdmittedWorkload, PendingWorkload


def entry_order(borrowing: int, pw: PendingWorkload, cq: str) -> tuple[int, int, int, str, str]:
    """Classic iterator: non-borrowing (lower borrowing level) first, then higher priority, then FIFO."""
    return (borrowing, -pw.priority, pw.queue_order_at, pw.key, cq)


def candidate_order(victim: AdmittedWorkload, preemptor_cq: str) -> tuple[int, int, int, int, str]:
    """CandidatesOrdering: already evicting first, other ClusterQueues before the preemptor's own, lower priority,
    most recently admitted, then key."""
    return (
        0 if victim.evicting else 1,
        1 if victim.admission.cluster_queue == preemptor_cq else 0,
        victim.priority,
        -victim.admitted_at,
        victim.key,
    )


def satisfies_policy(preemptor: PendingWorkload, victim: AdmittedWorkload, policy: PreemptionPolicy) -> bool:
    lower = preemptor.priority > victim.priority
    if policy is PreemptionPolicy.LOWER_PRIORITY:
        return lower
    if policy is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
        newer_equal = preemptor.priority == victim.priority and preemptor.queue_order_at < victim.queue_order_at
        return lower or newer_equal
    return policy is PreemptionPolicy.ANY
