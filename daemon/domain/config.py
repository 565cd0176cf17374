"""The admission engine's settings (Kueue's Configuration, the part the cycle reads), apart from the cycle itself so
that the borders that read a configuration file need not load the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.domain.fairpreemption import DEFAULT_STRATEGIES
from daemon.domain.model import JobManagement
from daemon.domain.podsready import WaitForPodsReady


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    fair_sharing: bool = False
    fair_sharing_strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    """Kueue's `fairSharing.preemptionStrategies`, tried in this order (see `daemon.domain.fairpreemption`)."""
    reserve_without_candidates: bool = True
    """Kueue's resourcesToReserve: a workload that needs preemption but has no candidates holds quota against other
    queues for the rest of the cycle. It makes a cycle's outcome depend on the order of its passes, so a second
    cycle over the first one's output may admit what the hold kept back; turn it off to get a strict fixpoint."""
    wait_for_pods_ready: WaitForPodsReady | None = None
    """Kueue's `waitForPodsReady` (None: off). The cycle honours blockAdmission; the timeouts and requeues are
    decided by `daemon.domain.podsready.decide`, which the admit stage runs before each cycle."""
    partial_admission: bool = True
    """Kueue's PartialAdmission feature gate (on by default): a workload with a pod set's `min_count` that fits
    neither whole nor by preempting at its full count is admitted with the largest counts that fit
    (`daemon.domain.flavors.search_counts`)."""
    jobs: JobManagement = field(default_factory=JobManagement)
    """Which jobs are managed at all (manageJobsWithoutQueueName, managedJobsNamespaceSelector): read by the
    borders that observe jobs (`daemon.domain.management`), not by the cycle."""
    visibility_on_demand: bool = False
    """Kueue's VisibilityOnDemand feature gate: `admitd run` serves Kueue's visibility API (as `--visibility`).
    Off by default here (Kueue's default is on): an aggregated API needs an APIService. Read by `admitd run` only."""
    web_ui: bool = False
    """admitd's own `webUI.enable` (not a Kueue setting): `admitd run` serves the read-only web view at /ui/ (as
    `--ui`). Off by default. Read by `admitd run` only."""

    @property
    def blocks_after_admission(self) -> bool:
        """Whether an admission blocks the ones after it (blockAdmission: its pods are not ready yet)."""
        return self.wait_for_pods_ready is not None and self.wait_for_pods_ready.block_admission


DEFAULT_CONFIG = EngineConfig()
"""Kueue's defaults."""
