"""waitForPodsReady, Kueue's all-or-nothing guard: the time-driven decisions and the blockAdmission rule.

An admitted workload whose pods are not all ready `timeout` ms after its admission is evicted (PodsReadyTimeout) and
requeued after a backoff of base * 2^(n-1) seconds, capped at max, for its n-th timeout; past backoffLimitCount it
is deactivated instead. Kueue adds a tiny random jitter (0.01%) to each backoff; admitd leaves it out so that a
simulation replays exactly. With blockAdmission, no workload is admitted while an admitted one is not ready.
Pure: the fold keeps which admitted workloads are not ready and which evicted ones wait out a backoff
(`ClusterView.unready`, `ClusterView.backoff`); `decide` turns the deadlines that have passed into events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from daemon.domain.events import Event, WorkloadRequeued, WorkloadTimedOut
from daemon.domain.model import Millis, PendingReason, PendingReasonKind
from daemon.domain.view import AdmittedWorkload, ClusterView


class RequeueTimestamp(StrEnum):
    """Kueue's requeuingStrategy.timestamp: what orders a timed-out workload in its queue when it is back."""

    EVICTION = "Eviction"  # the time of the PodsReadyTimeout eviction: it goes behind what waited meanwhile
    CREATION = "Creation"  # its creation time: it keeps its place


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitForPodsReady:
    """Kueue's `waitForPodsReady`, with Kueue's defaults. `backoff_limit_count` None: requeued without end."""

    timeout: Millis = 300_000
    block_admission: bool = True
    requeue_timestamp: RequeueTimestamp = RequeueTimestamp.EVICTION
    backoff_limit_count: int | None = None
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 3600

    def backoff(self, timeouts: int) -> Millis:
        """The wait before the `timeouts`-th requeue: base * 2^(n-1) s, at most max s (Kueue's, without jitter)."""
        if timeouts < 1:
            raise ValueError(f"timeouts must be at least 1, got {timeouts}")
        base_ms = self.backoff_base_seconds * 1000
        cap_ms = self.backoff_max_seconds * 1000
        # Compared before shifting: a long-lived workload's count must not build a huge integer.
        if timeouts - 1 >= 63 or base_ms << (timeouts - 1) >= cap_ms:
            return cap_ms
        return base_ms << (timeouts - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodsReadyState:
    """What the fold knows about one workload under waitForPodsReady (None on a record until it matters: one field,
    not four, keeps the fold's per-event record copies as cheap as before the feature)."""

    ready: bool = False  # `job.ready` seen since its current admission
    timeouts: int = 0  # PodsReadyTimeout evictions so far
    requeue_at: Millis | None = None  # while pending after one: held out of its queue until then
    deactivated: bool = False  # past backoffLimitCount: held for good

    @property
    def held(self) -> bool:
        return self.deactivated or self.requeue_at is not None


WAITING = PendingReason(
    kind=PendingReasonKind.WAITING_FOR_PODS_READY,
    message="waiting for all admitted workloads to be in PodsReady condition (waitForPodsReady.blockAdmission)",
)
"""The reason a workload that fits is not admitted while another admitted workload's pods are not ready."""


def blocking(view: ClusterView, config: WaitForPodsReady | None) -> bool:
    """Whether blockAdmission holds admissions now: some admitted workload (stopping ones too, until their quota is
    released) has pods that are not all ready."""
    return config is not None and config.block_admission and bool(view.unready)


def held_reason(timeouts: int, requeue_at: Millis | None) -> PendingReason:
    """Why a workload evicted for PodsReadyTimeout is not in its queue: its backoff, or its deactivation."""
    if requeue_at is None:
        return PendingReason(
            kind=PendingReasonKind.DEACTIVATED,
            message=f"deactivated after {timeouts} PodsReadyTimeout evictions (RequeuingLimitExceeded: more than "
            "waitForPodsReady.requeuingStrategy.backoffLimitCount); it stays suspended",
        )
    return PendingReason(
        kind=PendingReasonKind.REQUEUE_BACKOFF,
        message=f"evicted for PodsReadyTimeout ({_nth(timeouts)} time); back in its queue at {requeue_at} ms",
    )


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _timing_out(
    unready: Mapping[str, tuple[Millis, int]], admitted: Mapping[str, AdmittedWorkload]
) -> list[tuple[Millis, str, int]]:
    out = []
    for key, (admitted_at, timeouts) in unready.items():
        aw = admitted.get(key)
        if aw is not None and not aw.evicting:
            out.append((admitted_at, key, timeouts))
    return out


def next_due(view: ClusterView, config: WaitForPodsReady | None) -> Millis | None:
    """The earliest moment at which `decide` will have something to say, if nothing else happens before."""
    if config is None:
        return None
    due: Millis | None = None
    if view.unready:
        for admitted_at, _, _ in _timing_out(view.unready, view.admitted):
            at = admitted_at + config.timeout
            due = at if due is None else min(due, at)
    if view.backoff:
        first = min(view.backoff.values())
        due = first if due is None else min(due, first)
    return due


def decide(view: ClusterView, now: Millis, config: WaitForPodsReady | None) -> list[Event]:
    """The PodsReady timeouts and the ends of backoff due at `now`, in key order. Pure."""
    if config is None:
        return []
    events: list[Event] = []
    if view.unready:
        for admitted_at, key, timeouts in sorted(_timing_out(view.unready, view.admitted), key=lambda t: t[1]):
            if admitted_at + config.timeout > now:
                continue
            aw = view.admitted[key]
            n = timeouts + 1
            deactivated = config.backoff_limit_count is not None and n > config.backoff_limit_count
            events.append(
                WorkloadTimedOut(
                    workload=key,
                    at=now,
                    cluster_queue=aw.admission.cluster_queue,
                    timeout=config.timeout,
                    timeouts=n,
                    requeue_at=None if deactivated else now + config.backoff(n),
                    queue_order_at=now if config.requeue_timestamp is RequeueTimestamp.EVICTION else aw.queue_order_at,
                    deactivated=deactivated,
                )
            )
    if view.backoff:
        for key in sorted(k for k, at in view.backoff.items() if at <= now):
            events.append(WorkloadRequeued(workload=key, at=now))
    return events
