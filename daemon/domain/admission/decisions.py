"""What a cycle writes, in the order it decides it: pending reasons (only when they differ from the last one
written), preemptions, admissions. The cycle's only output; Kueue writes the same through its API client."""

from __future__ import annotations

from collections.abc import Mapping

from daemon.domain.events import Borrowed, Event, Freed, WorkloadAdmitted, WorkloadPending, WorkloadPreempted
from daemon.domain.model import Admission, FlavorResource, Millis, PendingReason
from daemon.domain.view import AdmittedWorkload, PendingWorkload


class Decisions:
    __slots__ = ("events", "now")

    def __init__(self, now: Millis) -> None:
        self.now = now
        self.events: list[Event] = []

    def pending(self, pw: PendingWorkload, cq: str | None, reason: PendingReason) -> bool:
        """Write `reason` unless it is the workload's last one; whether it was written."""
        if pw.last_reason == reason:
            return False
        self.events.append(WorkloadPending(workload=pw.key, at=self.now, cluster_queue=cq, reason=reason))
        return True

    def preempted(
        self,
        aw: AdmittedWorkload,
        usage: Mapping[FlavorResource, int],
        by: str | None,
        by_cq: str | None,
        reason: str,
        policy: str,
    ) -> None:
        freed = tuple(Freed(flavor=f, resource=r, amount=usage[(f, r)]) for f, r in sorted(usage))
        self.events.append(
            WorkloadPreempted(
                workload=aw.key,
                at=self.now,
                cluster_queue=aw.admission.cluster_queue,
                preemptor=by,
                preemptor_cluster_queue=by_cq,
                reason=reason,
                policy=policy,
                freed=freed,
            )
        )

    def admitted(self, pw: PendingWorkload, admission: Admission, borrowed: tuple[Borrowed, ...]) -> None:
        self.events.append(WorkloadAdmitted(workload=pw.key, at=self.now, admission=admission, borrowed=borrowed))
