"""Workload.spec.active: the evictions its turning false decides. Pure.

The fold records the user's edit (`workload.active_changed`) as a fact and keeps the admitted workloads it makes
stop in `State.deactivating`; these are the decisions that stop them, as Kueue's workload controller evicts an
inactive workload (reason Deactivated). The admit stage appends them before its cycle; `reproduce` checks them.
"""

from __future__ import annotations

from daemon.domain.events import WorkloadPreempted
from daemon.domain.model import Millis
from daemon.domain.state import DEACTIVATED, State

POLICY = "spec.active=false"


def deactivations(state: State, now: Millis) -> list[WorkloadPreempted]:
    """One eviction per admitted workload whose Workload is inactive and that is not stopping yet, in key order."""
    out = []
    for key in sorted(state.deactivating):
        admission = state.workloads[key].admission
        assert admission is not None, f"{key} is in State.deactivating without an admission"
        out.append(
            WorkloadPreempted(
                workload=key,
                at=now,
                cluster_queue=admission.cluster_queue,
                preemptor=None,
                preemptor_cluster_queue=None,
                reason=DEACTIVATED,
                policy=POLICY,
            )
        )
    return out
