"""The read-only view of replayed state that one admission cycle reads.

The fold (`daemon.domain.state`) keeps these collections up to date event by event; the cycle
(`daemon.domain.admission`) only reads them. Nothing here is copied per cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from daemon.domain.model import (
    Admission,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Millis,
    Namespace,
    PendingReason,
    ResourceFlavor,
    Workload,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingWorkload:
    workload: Workload
    priority: int  # resolved once, when the job was first observed (as Kueue does)
    local_queue: str  # namespace/name
    queue_order_at: Millis  # creation time; the eviction time after an eviction
    last_reason: PendingReason | None  # the reason last written to the log, to write only changes

    @property
    def key(self) -> str:
        return self.workload.key


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmittedWorkload:
    workload: Workload
    priority: int
    admission: Admission
    admitted_at: Millis
    queue_order_at: Millis
    evicting: bool = False  # preempted or drained, still holding quota until its pods are gone

    @property
    def key(self) -> str:
        return self.workload.key


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterView:
    flavors: Mapping[str, ResourceFlavor]
    cluster_queues: Mapping[str, ClusterQueue]
    cohorts: Mapping[str, Cohort]  # explicit Cohort objects only; a cohort named by a CQ alone has no entry
    local_queues: Mapping[str, LocalQueue]  # by namespace/name
    namespaces: Mapping[str, Namespace]  # a namespace referenced but never observed has no labels
    admitted: Mapping[str, AdmittedWorkload]  # by workload key, every ClusterQueue
    admitted_by_cq: Mapping[str, Mapping[str, AdmittedWorkload]]
    pending_by_cq: Mapping[str, Sequence[PendingWorkload]]  # in queue order: priority desc, then FIFO, then key
    pending_unrouted: Mapping[str, PendingWorkload]  # LocalQueue or ClusterQueue missing
    generation: Mapping[str, int]
    """Per quota tree (the root cohort's name, or ``cq:<name>`` for a ClusterQueue without a cohort): a counter
    bumped by every event that may let a waiting workload fit (usage released, quota or config changed,
    admission). Equal generation means a workload found not fitting still does not fit."""
    pending_version: Mapping[str, int] | None = None
    """Optional, per ClusterQueue: a counter bumped whenever its pending sequence changes (a workload added, removed
    or replaced). With it, `AdmissionEngine` skips an unchanged queue of unfitting workloads in O(1); without it
    (None) the engine still skips each memoised workload, in O(pending) dictionary lookups."""
