"""The typed objects the admission engine reasons about: queues, flavors, workloads and decisions.

Pure values only. Raw Kubernetes dicts are turned into these at the border (`daemon.manifests`); the fold keeps
them in state; the cycle reads them. Quantities are exact integers of milli-units, times are integer milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

Milli = int
"""A resource quantity in milli-units (``1`` CPU is ``1000``, ``64Gi`` is ``64 * 2**30 * 1000``)."""

Millis = int
"""A point in time or a duration, in integer milliseconds."""

FlavorResource = tuple[str, str]
"""``(flavor, resource)``: the unit of quota accounting."""


class QueueingStrategy(StrEnum):
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"


class PreemptionPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
    ANY = "Any"


class StopPolicy(StrEnum):
    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class FungibilityPolicy(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(StrEnum):
    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    key: str = ""  # empty with operator Exists tolerates everything
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches every effect


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelSelector:
    """A Kubernetes label selector. The empty selector matches everything."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()


def selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes label selector semantics; None selects nothing, the empty selector everything."""
    if selector is None:
        return False
    for k, v in selector.match_labels.items():
        if labels.get(k) != v:
            return False
    for req in selector.match_expressions:
        value = labels.get(req.key)
        if req.operator == "In":
            ok = value is not None and value in req.values
        elif req.operator == "NotIn":
            ok = value is None or value not in req.values
        elif req.operator == "Exists":
            ok = value is not None
        elif req.operator == "DoesNotExist":
            ok = value is None
        else:
            ok = False
        if not ok:
            return False
    return True


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by the API server on every namespace, to its name."""

DEFAULT_MANAGED_NAMESPACES = LabelSelector(
    match_expressions=(
        LabelRequirement(key=NAMESPACE_NAME_LABEL, operator="NotIn", values=("kube-system", "kueue-system")),
    )
)
"""Kueue's default managedJobsNamespaceSelector: every namespace but kube-system and Kueue's own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobManagement:
    """Which jobs are managed (Kueue Configuration's `manageJobsWithoutQueueName` and `managedJobsNamespaceSelector`):
    see `daemon.domain.management`."""

    without_queue_name: bool = False
    namespace_selector: LabelSelector = DEFAULT_MANAGED_NAMESPACES


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceFlavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceQuota:
    name: str
    nominal: Milli
    borrowing_limit: Milli | None = None  # None: unlimited
    lending_limit: Milli | None = None  # None: everything above nominal usage may be lent


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorQuotas:
    name: str
    resources: tuple[ResourceQuota, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceGroup:
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]  # in the order the ClusterQueue tries them


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    within_cluster_queue: PreemptionPolicy = PreemptionPolicy.NEVER
    reclaim_within_cohort: PreemptionPolicy = PreemptionPolicy.NEVER
    borrow_within_cohort: PreemptionPolicy = PreemptionPolicy.NEVER  # Never | LowerPriority
    borrow_max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorFungibility:
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference = FungibilityPreference.BORROWING_OVER_PREEMPTION


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterQueue:
    name: str
    cohort: str | None = None
    namespace_selector: LabelSelector | None = None  # None selects no namespace; LabelSelector() selects all
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    resource_groups: tuple[ResourceGroup, ...] = ()
    preemption: Preemption = field(default_factory=Preemption)
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_sharing_weight: Milli = 1000  # Kueue's default weight 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Cohort:
    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_sharing_weight: Milli = 1000  # Kueue's default weight 1


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: StopPolicy = StopPolicy.NONE

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorityClass:
    """A kueue.x-k8s.io WorkloadPriorityClass or a scheduling.k8s.io PriorityClass."""

    name: str
    value: int
    kind: str = "WorkloadPriorityClass"  # WorkloadPriorityClass | PriorityClass
    global_default: bool = False  # scheduling.k8s.io globalDefault


@dataclass(frozen=True, slots=True, kw_only=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSet:
    """A group of identical pods admitted together. `requests` is per pod, already including overhead."""

    name: str
    count: int
    requests: Mapping[str, Milli]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    min_count: int | None = None
    """Partial admission (Kueue's PodSet.minCount; for a Job the annotation kueue.x-k8s.io/job-min-parallelism):
    when `count` pods do not fit, as few as `min_count` may be admitted. None: all `count` or nothing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """What the engine admits: one job (of any kind) as its pod sets. Admitted whole or not at all, unless a pod set
    has a `min_count` (partial admission)."""

    namespace: str
    name: str
    kind: str = "Job"  # Job | PyTorchJob | RayJob | JobSet ...
    uid: str
    created_at: Millis
    queue_name: str | None
    priority_class: str | None = None  # from the label kueue.x-k8s.io/priority-class
    pod_priority_class: str | None = None  # from spec.template.spec.priorityClassName
    pod_sets: tuple[PodSet, ...]
    active_deadline_ms: Millis | None = None  # a Job's spec.activeDeadlineSeconds: it is failed after running that long

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSetAssignment:
    name: str
    count: int
    flavors: Mapping[str, str]  # resource -> flavor
    usage: Mapping[str, Milli]  # resource -> total over the pod set (count * per-pod request)


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    cluster_queue: str
    pod_sets: tuple[PodSetAssignment, ...]

    def usage(self) -> dict[FlavorResource, Milli]:
        """Total quota this admission holds, per (flavor, resource)."""
        total: dict[FlavorResource, Milli] = {}
        for ps in self.pod_sets:
            for resource, amount in ps.usage.items():
                fr = (ps.flavors[resource], resource)
                total[fr] = total.get(fr, 0) + amount
        return total


class PendingReasonKind(StrEnum):
    """Why a workload is not admitted. The values are stable: they are stored in the log and shown to users."""

    LOCAL_QUEUE_NOT_FOUND = "LocalQueueNotFound"
    CLUSTER_QUEUE_NOT_FOUND = "ClusterQueueNotFound"
    NAMESPACE_NOT_SELECTED = "NamespaceNotSelected"
    QUEUE_STOPPED = "QueueStopped"
    CLUSTER_QUEUE_INACTIVE = "ClusterQueueInactive"  # unknown flavor or a cohort cycle: the queue cannot admit
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"  # taints, node selectors or uncovered resources rule out every flavor
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"  # larger than the queue could ever hold
    WAITING_FOR_QUOTA = "WaitingForQuota"
    WAITING_FOR_PREEMPTED_WORKLOADS = "WaitingForPreemptedWorkloads"
    BLOCKED_BY_HEAD = "BlockedByHead"  # StrictFIFO: an earlier workload that does not fit blocks the queue
    # Kueue creates no Workload for a job whose priority class does not exist (event reason
    # WorkloadPriorityClassNotFound); the job waits until the class appears.
    WORKLOAD_PRIORITY_CLASS_NOT_FOUND = "WorkloadPriorityClassNotFound"  # label kueue.x-k8s.io/priority-class
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"  # spec.template.spec.priorityClassName
    # waitForPodsReady: blockAdmission holds admissions while an admitted workload's pods are not all ready; a
    # workload evicted for PodsReadyTimeout waits out its backoff, and is deactivated past backoffLimitCount.
    WAITING_FOR_PODS_READY = "WaitingForPodsReady"
    REQUEUE_BACKOFF = "RequeueBackoff"
    DEACTIVATED = "Deactivated"


@dataclass(frozen=True, slots=True, kw_only=True)
class Shortage:
    """In `flavor`, `resource` is short: the workload needs `requested`, only `available` is free now."""

    flavor: str
    resource: str
    requested: Milli
    available: Milli


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingReason:
    kind: PendingReasonKind
    message: str
    shortages: tuple[Shortage, ...] = ()
    blocked_by: str | None = None  # workload key, for BlockedByHead / WaitingForPreemptedWorkloads
    victims: tuple[str, ...] = ()
    """WaitingForPreemptedWorkloads: the workloads this one claimed (sorted keys). Remembered by the fold so that the
    next cycle keeps the same victims for it instead of choosing again."""
