"""Sample events of every stored type, shared by the golden fixtures and the fold's property tests."""

from __future__ import annotations

from dataclasses import replace

from daemon.domain import events as ev
from daemon.domain.actuation import Placement
from daemon.domain.model import (
    Admission,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    Namespace,
    PendingReason,
    PendingReasonKind,
    PodSet,
    PodSetAssignment,
    PriorityClass,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Shortage,
    Taint,
    Toleration,
    Workload,
)


def workload(
    name: str = "train-a",
    *,
    ns: str = "research",
    queue: str | None = "research-queue",
    gpus: int = 4,
    created_at: int = 1_000,
    priority_class: str | None = None,
) -> Workload:
    return Workload(
        namespace=ns,
        name=name,
        uid=f"uid-{ns}-{name}",
        created_at=created_at,
        queue_name=queue,
        priority_class=priority_class,
        pod_sets=(PodSet(name="main", count=2, requests={"nvidia.com/gpu": gpus * 1000 // 2, "cpu": 4000}),),
    )


def with_min_count(wl: Workload, min_count: int) -> Workload:
    """`wl` admissible with as few as `min_count` pods per pod set (partial admission)."""
    return replace(wl, pod_sets=tuple(replace(ps, min_count=min_count) for ps in wl.pod_sets))


def admission(cq: str = "team-research", flavor: str = "h100-flavor", gpus: int = 4) -> Admission:
    return Admission(
        cluster_queue=cq,
        pod_sets=(
            PodSetAssignment(
                name="main",
                count=2,
                flavors={"nvidia.com/gpu": flavor, "cpu": flavor},
                usage={"nvidia.com/gpu": gpus * 1000, "cpu": 8000},
            ),
        ),
    )


GROUP = ResourceGroup(
    covered_resources=("nvidia.com/gpu", "cpu"),
    flavors=(
        FlavorQuotas(
            name="h100-flavor",
            resources=(
                ResourceQuota(name="nvidia.com/gpu", nominal=8000, borrowing_limit=4000),
                ResourceQuota(name="cpu", nominal=64000, lending_limit=32000),
            ),
        ),
    ),
)


def one_of_each() -> list[ev.Event]:
    """One event of every current type, with every optional field filled, in an order the fold accepts."""
    reason = PendingReason(
        kind=PendingReasonKind.WAITING_FOR_QUOTA,
        message="insufficient unused quota for nvidia.com/gpu in flavor h100-flavor, 4 more needed",
        shortages=(Shortage(flavor="h100-flavor", resource="nvidia.com/gpu", requested=4000, available=0),),
    )
    return [
        ev.ResourceFlavorObserved(
            flavor=ResourceFlavor(
                name="h100-flavor",
                node_labels={"gpu-type": "h100"},
                node_taints=(Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),),
                tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
            )
        ),
        ev.CohortObserved(cohort=Cohort(name="all-teams", resource_groups=(GROUP,))),
        ev.ClusterQueueObserved(
            cluster_queue=ClusterQueue(
                name="team-research", cohort="all-teams", namespace_selector=LabelSelector(), resource_groups=(GROUP,)
            )
        ),
        ev.LocalQueueObserved(
            local_queue=LocalQueue(namespace="research", name="research-queue", cluster_queue="team-research")
        ),
        ev.PriorityClassObserved(priority_class=PriorityClass(name="high", value=1000)),
        ev.NamespaceObserved(namespace=Namespace(name="research", labels={"team": "research"})),
        ev.ObjectRejected(kind="ClusterQueue", name="broken", errors=("spec.resourceGroups[0]: bad",)),
        ev.ObjectWarned(
            kind="ClusterQueue",
            name="team-research",
            warnings=("ClusterQueue team-research: spec.admissionChecks is not implemented by admitd and is ignored",),
        ),
        # Seqs no sample log reaches, so that a log of these samples accepts no break of its own.
        ev.ChainBreakAccepted(
            seq=999_999, problem="stored hash does not match the row's contents", by="admitd-0", at=1_000
        ),
        ev.JobObserved(
            workload=replace(with_min_count(workload(priority_class="high"), 1), active_deadline_ms=3_600_000)
        ),
        ev.WorkloadPending(workload="research/train-a", at=1_001, cluster_queue="team-research", reason=reason),
        ev.WorkloadAdmitted(
            workload="research/train-a",
            at=1_002,
            admission=admission(),
            borrowed=(ev.Borrowed(flavor="h100-flavor", resource="nvidia.com/gpu", amount=0, cohort="all-teams"),),
        ),
        ev.JobUnsuspended(
            job="research/train-a",
            at=1_003,
            decision=17,
            placements=(
                Placement(
                    pod_set="main",
                    node_selector=(("gpu-type", "h100"),),
                    tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
                ),
            ),
        ),
        ev.ActuationFailed(job="research/train-a", at=1_004, decision=17, error="409 Conflict", permanent=False),
        ev.WorkloadPreempted(
            workload="research/train-a",
            at=1_005,
            cluster_queue="team-research",
            preemptor="research/train-b",
            preemptor_cluster_queue="team-research",
            reason="InClusterQueue",
            policy="withinClusterQueue=LowerPriority",
            freed=(ev.Freed(flavor="h100-flavor", resource="nvidia.com/gpu", amount=4000),),
        ),
        ev.JobSuspended(job="research/train-a", at=1_006, decision=19, placements=(Placement(pod_set="main"),)),
        ev.WorkloadEvicted(workload="research/train-a", at=1_007, reason="Preempted"),
        ev.WorkloadAdopted(workload="research/train-a", at=1_007, admission=admission(), stopping=True),
        ev.JobReady(job="research/train-a", at=1_007),
        ev.JobPodsNotCreated(
            job="research/train-a",
            at=1_007,
            message='Error creating: pods "train-a-x7k2p" is forbidden: no PriorityClass with name high was found',
        ),
        ev.JobTampered(
            job="research/train-a",
            namespace="research",
            uid="uid-train-a",
            generation=3,
            at=1_007,
            what="ForgedAdmission",
            detail="admitd.io/admission is not admitd's: its admitd.io/admission-signature annotation is missing",
            manager="kubectl-patch",
            claimed_cluster_queue="team-research",
        ),
        ev.WorkloadTimedOut(
            workload="research/train-a",
            at=1_007,
            cluster_queue="team-research",
            timeout=300_000,
            timeouts=1,
            requeue_at=61_007,
            queue_order_at=1_007,
            deactivated=False,
        ),
        ev.WorkloadRequeued(workload="research/train-a", at=1_007),
        ev.WorkloadActiveChanged(workload="research/train-a", active=True, at=1_007),
        ev.WorkloadEstimated(workload="research/train-a", at=1_007, inputs=42, p10=61_000, p50=91_000, p90=None),
        ev.JobFinished(job="research/train-a", at=1_008, succeeded=True),
        ev.JobDeleted(job="research/train-a", at=1_009),
        ev.PriorityClassDeleted(kind="PriorityClass", name="high"),
        ev.LocalQueueDeleted(namespace="research", name="research-queue"),
        ev.ClusterQueueDeleted(name="team-research"),
        ev.CohortDeleted(name="all-teams"),
        ev.ResourceFlavorDeleted(name="h100-flavor"),
    ]
