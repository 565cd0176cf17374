"""The catalogue: every metric family admitd exposes, Kueue's names, types and labels (kueue-notes.md section
3), in one place."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.metrics.live import LIVE


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: str  # gauge | counter | histogram
    help: str

    def head(self) -> bytes:
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.type}\n".encode()


PER_QUEUE: tuple[Family, ...] = (
    Family("kueue_pending_workloads", "gauge", "Pending workloads per ClusterQueue, by status (active/inadmissible)"),
    Family(
        "kueue_unadmitted_workloads",
        "gauge",
        "Pending workloads per ClusterQueue, by the Admitted condition's reason (NoReservation) and, as the "
        "underlying cause, the QuotaReserved condition's (WaitingForQuota, ExceedsMaxQuota, NoMatchingFlavor, "
        "Misconfigured, Suspended, PendingEvaluation, ...; in Kueue since v0.19, not in v0.17)",
    ),
    Family("kueue_admitted_active_workloads", "gauge", "Admitted workloads that hold quota now"),
    Family("kueue_reserving_active_workloads", "gauge", "Workloads reserving quota now (admitd: the admitted ones)"),
    Family("kueue_cluster_queue_status", "gauge", "1 for the ClusterQueue's status (pending/active/terminated)"),
    Family(
        "kueue_cluster_queue_info",
        "gauge",
        "1 per ClusterQueue, with its parent and root cohort (in Kueue since v0.18, not in v0.17)",
    ),
    Family("kueue_cluster_queue_resource_usage", "gauge", "Quota in use, per flavor and resource"),
    Family("kueue_cluster_queue_resource_reservation", "gauge", "Quota reserved, per flavor and resource"),
    Family("kueue_cluster_queue_nominal_quota", "gauge", "Nominal quota, per flavor and resource"),
    Family("kueue_cluster_queue_borrowing_limit", "gauge", "Borrowing limit (+Inf when unset)"),
    Family("kueue_cluster_queue_lending_limit", "gauge", "Lending limit (+Inf when unset)"),
    Family("kueue_admitted_workloads_total", "counter", "Workloads admitted, re-admissions included"),
    Family("kueue_quota_reserved_workloads_total", "counter", "Workloads that reserved quota (admitd: admitted)"),
    Family("kueue_finished_workloads_total", "counter", "Admitted workloads that finished"),
    Family("kueue_evicted_workloads_total", "counter", "Workloads evicted, by reason and underlying cause"),
    Family("kueue_preempted_workloads_total", "counter", "Workloads preempted, by the preempting ClusterQueue"),
    Family(
        "kueue_admission_wait_time_seconds",
        "histogram",
        "From creation or requeue to admission (Kueue v0.17's 16 buckets)",
    ),
    Family("kueue_quota_reserved_wait_time_seconds", "histogram", "From creation or requeue to quota reservation"),
    Family(
        "kueue_execution_time_seconds",
        "histogram",
        "From admission to finish (admitd's own: no Kueue version has it)",
    ),
)

COHORT_FAMILIES: tuple[Family, ...] = (
    Family(
        "kueue_cohort_info",
        "gauge",
        "1 per Cohort, with its parent and root cohort (in Kueue since v0.18, not in v0.17)",
    ),
    Family(
        "kueue_cohort_subtree_quota",
        "gauge",
        "Nominal quota of the Cohort's subtree (what it holds for its "
        "members, lending limits applied), per flavor and resource",
    ),
    Family(
        "kueue_cohort_subtree_resource_reservations",
        "gauge",
        "Quota reserved in the Cohort's subtree beyond what its members hold locally, per flavor and resource",
    ),
    Family("kueue_cohort_subtree_admitted_active_workloads", "gauge", "Admitted workloads in the Cohort's subtree"),
    Family("kueue_cohort_subtree_admitted_workloads_total", "counter", "Workloads admitted in the Cohort's subtree"),
)
"""Kueue's cohort metrics that the fold can answer (the weighted shares are in FAIR_SHARING_FAMILIES)."""

FAIR_SHARING_FAMILIES: tuple[Family, ...] = (
    Family(
        "kueue_cluster_queue_weighted_share",
        "gauge",
        "The largest ratio, over the resources the ClusterQueue provides, of its usage above nominal quota to what the "
        "cohort can lend, in thousandths, divided by its weight; 0 below nominal quota, NaN when a queue of weight 0 "
        "borrows",
    ),
    Family(
        "kueue_cohort_weighted_share",
        "gauge",
        "The same ratio for a Cohort within its parent; 0 for a root cohort or below nominal quota, NaN when a cohort "
        "of weight 0 borrows",
    ),
)
"""Kueue's fair-sharing shares, rendered when fair sharing is on (Kueue reports them only then)."""


LOCAL_QUEUE: tuple[Family, ...] = (
    Family("kueue_local_queue_pending_workloads", "gauge", "Pending workloads per LocalQueue, by status"),
    Family(
        "kueue_local_queue_admitted_active_workloads", "gauge", "Admitted workloads that hold quota now, per LocalQueue"
    ),
    Family("kueue_local_queue_reserving_active_workloads", "gauge", "Workloads reserving quota now, per LocalQueue"),
    Family("kueue_local_queue_admitted_workloads_total", "counter", "Workloads admitted, per LocalQueue"),
    Family("kueue_local_queue_quota_reserved_workloads_total", "counter", "Workloads that reserved quota"),
    Family("kueue_local_queue_finished_workloads_total", "counter", "Admitted workloads that finished"),
    Family("kueue_local_queue_evicted_workloads_total", "counter", "Workloads evicted, per LocalQueue"),
    Family(
        "kueue_local_queue_admission_wait_time_seconds",
        "histogram",
        "From creation or requeue to admission, per LocalQueue",
    ),
    Family(
        "kueue_local_queue_quota_reserved_wait_time_seconds",
        "histogram",
        "From creation or requeue to quota reservation",
    ),
)


# --- issue 26: the preemption ledger's totals and stuck detection (daemon/metrics/answers.py renders them) ---------

ANSWERS_FAMILIES: tuple[Family, ...] = (
    Family(
        "admitd_preemption_victims_total",
        "counter",
        "Workloads of the ClusterQueue preempted, by the rule (the preemption's reason); the preemption ledger's",
    ),
    Family(
        "admitd_preemption_lost_pod_hours_total",
        "counter",
        "Pod-hours the ClusterQueue's preempted workloads had run since their pods started, by rule",
    ),
    Family(
        "admitd_preemption_lost_gpu_hours_total",
        "counter",
        "GPU-hours (nvidia.com/gpu, amd.com/gpu) the ClusterQueue's preempted workloads had run, by rule",
    ),
    Family(
        "admitd_pending_unconsidered_since_timestamp_seconds",
        "gauge",
        "When the longest-waiting of the ClusterQueue's pending workloads that no admission cycle has evaluated since "
        "they entered it (created or requeued) entered it; absent when every one has been",
    ),
    Family(
        "admitd_pending_fitting_workloads",
        "gauge",
        "Pending workloads of the ClusterQueue whose requests fit its unused nominal quota in one of its flavors now",
    ),
)


GROUPS: dict[str, tuple[str, ...]] = {
    "config": (
        "kueue_cluster_queue_status",
        "kueue_cluster_queue_info",
        "kueue_cluster_queue_nominal_quota",
        "kueue_cluster_queue_borrowing_limit",
        "kueue_cluster_queue_lending_limit",
    ),
    "pending": ("kueue_pending_workloads", "kueue_unadmitted_workloads"),
    "admitted": (
        "kueue_admitted_active_workloads",
        "kueue_reserving_active_workloads",
        "kueue_cluster_queue_resource_usage",
        "kueue_cluster_queue_resource_reservation",
    ),
    "admissions": (
        "kueue_admitted_workloads_total",
        "kueue_quota_reserved_workloads_total",
        "kueue_admission_wait_time_seconds",
        "kueue_quota_reserved_wait_time_seconds",
    ),
    "finishes": ("kueue_finished_workloads_total", "kueue_execution_time_seconds"),
    "evictions": ("kueue_evicted_workloads_total",),
    "preemptions": ("kueue_preempted_workloads_total",),
}
"""Which families each group renders. An event marks (queue, group) dirty; only those fragments are rendered again."""


LOCAL_QUEUE_FAMILIES = tuple(f.name for f in LOCAL_QUEUE)
"""What `Renderer(local_queue_metrics=True)` adds (`admitd run --local-queue-metrics`)."""


def metric_names() -> set[str]:
    """Every metric family name admitd can expose (for checking dashboards and alert rules against)."""
    names = {f.name for f in (*PER_QUEUE, *COHORT_FAMILIES, *FAIR_SHARING_FAMILIES)} | set(LOCAL_QUEUE_FAMILIES)
    names |= {f.name for f in ANSWERS_FAMILIES}
    names |= {
        "admitd_events_appended_total",
        "admitd_log_last_seq",
        "admitd_log_last_event_timestamp_seconds",
        "admitd_actuation_failures_total",
        "admitd_unrouted_pending_workloads",
        "admitd_log_size_bytes",
        "admitd_snapshot_age_events",
        "admitd_snapshot_age_seconds",
    }
    for metric in LIVE.collect():
        names.add(metric.name + ("_total" if metric.type == "counter" else ""))
    return names
