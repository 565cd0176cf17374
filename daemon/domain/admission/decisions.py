"""What a cycle writes, in the order it decides it: pending reasons (only when they differ from the last one
written, in the log or earlier in the call), preemptions, admissions. The cycle's only output; Kueue writes the
same through its API client."""

from __future__ import annotations

from collections.abc import Mapping

from daemon.domain.events import Borrowed, Event, Freed, WorkloadAdmitted, WorkloadPending, WorkloadPreempted
from daemon.domain.model import Admission, FlavorResource, Millis, PendingReason
from daemon.domain.view import AdmittedWorkload, PendingWorkload


class Decisions:
    __slots__ = ("_written", "events", "now")

    def __init__(self, now: Millis) -> None:
        self.now = now
        self.events: list[Event] = []
        self._written: dict[str, PendingReason] = {}  # workload -> the reason last written in this call

    def last_reason(self, pw: PendingWorkload) -> PendingReason | None:
        """The workload's reason as the fold will have it: the last one this call wrote, else the log's."""
        return self._written.get(pw.key, pw.last_reason)

    def pending(self, pw: PendingWorkload, cq: str | None, reason: PendingReason) -> bool:
        """Write `reason` unless it is the workload's last one; whether it was written. A head assessed again in
        each pass of a call (a StrictFIFO holder's) writes its reason once: a repeat would be no news, and the
        pass loop, which ends when a pass changes nothing, would never end."""
        if self.last_reason(pw) == reason:
            return False
        self._written[pw.key] = reason
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
