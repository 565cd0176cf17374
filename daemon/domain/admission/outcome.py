"""What assessing one workload found (Kueue's flavorassigner.Assignment with the entry's status)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from daemon.domain.flavors import Assignment
from daemon.domain.model import PendingReason, Workload
from daemon.domain.preemption import Target
from daemon.domain.view import AdmittedWorkload, Coarse, coarse


class Kind(Enum):
    FIT = "fit"
    PREEMPT = "preempt"  # targets found
    WAIT_EVICTIONS = "wait"  # fits once already-evicting workloads are gone
    NO_TARGETS = "no-targets"  # preemption needed, nobody to preempt
    NO_FIT = "no-fit"
    DEFERRED = "deferred"  # needs preemption where this cycle admitted: assessed again next cycle (fair sharing)


UNFIT = (Kind.NO_FIT, Kind.NO_TARGETS)
"""The kinds Kueue's inadmissible set holds: the only ones remembered per class."""


@dataclass(slots=True)
class Outcome:
    kind: Kind
    assignment: Assignment | None = None
    reason: PendingReason | None = None
    targets: list[Target] = field(default_factory=list)
    waits_on: list[AdmittedWorkload] = field(default_factory=list)
    coarse_reason: Coarse | None = None  # coarse(reason), computed on first use
    workload: Workload | None = None  # partial admission: the workload at the counts `assignment` is for
    volatile: bool = False  # depends on the instant, not only on the tree: never kept in the engine's memo

    def coarse(self) -> Coarse:
        if self.coarse_reason is None:
            assert self.reason is not None
            self.coarse_reason = coarse(self.reason)
        return self.coarse_reason
