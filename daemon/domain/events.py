"""Every fact admitd records, one frozen dataclass per stored event type.

Three families, in the order of the flow: observations (what the cluster or the simulator said), decisions (what
the admission cycle chose) and actuations (what was done about a decision). Each class has a stable dotted `TYPE`
and a `VERSION`; changing a payload's shape means a new VERSION plus an upcaster in `daemon.domain.upcasts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from daemon.domain.actuation import Placement
from daemon.domain.model import (
    Admission,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Milli,
    Millis,
    Namespace,
    PendingReason,
    PriorityClass,
    ResourceFlavor,
    Workload,
)

# --- observations -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceFlavorObserved:
    TYPE: ClassVar[str] = "resourceflavor.observed"
    VERSION: ClassVar[int] = 1
    flavor: ResourceFlavor

    @property
    def subject(self) -> str:
        return f"resourceflavor/{self.flavor.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceFlavorDeleted:
    TYPE: ClassVar[str] = "resourceflavor.deleted"
    VERSION: ClassVar[int] = 1
    name: str

    @property
    def subject(self) -> str:
        return f"resourceflavor/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterQueueObserved:
    TYPE: ClassVar[str] = "clusterqueue.observed"
    VERSION: ClassVar[int] = 1
    cluster_queue: ClusterQueue

    @property
    def subject(self) -> str:
        return f"clusterqueue/{self.cluster_queue.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterQueueDeleted:
    TYPE: ClassVar[str] = "clusterqueue.deleted"
    VERSION: ClassVar[int] = 1
    name: str

    @property
    def subject(self) -> str:
        return f"clusterqueue/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortObserved:
    TYPE: ClassVar[str] = "cohort.observed"
    VERSION: ClassVar[int] = 1
    cohort: Cohort

    @property
    def subject(self) -> str:
        return f"cohort/{self.cohort.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortDeleted:
    TYPE: ClassVar[str] = "cohort.deleted"
    VERSION: ClassVar[int] = 1
    name: str

    @property
    def subject(self) -> str:
        return f"cohort/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalQueueObserved:
    TYPE: ClassVar[str] = "localqueue.observed"
    VERSION: ClassVar[int] = 1
    local_queue: LocalQueue

    @property
    def subject(self) -> str:
        return f"localqueue/{self.local_queue.namespace}/{self.local_queue.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalQueueDeleted:
    TYPE: ClassVar[str] = "localqueue.deleted"
    VERSION: ClassVar[int] = 1
    namespace: str
    name: str

    @property
    def subject(self) -> str:
        return f"localqueue/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorityClassObserved:
    TYPE: ClassVar[str] = "priorityclass.observed"
    VERSION: ClassVar[int] = 1
    priority_class: PriorityClass

    @property
    def subject(self) -> str:
        return f"{self.priority_class.kind.lower()}/{self.priority_class.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorityClassDeleted:
    """A WorkloadPriorityClass or PriorityClass is gone: new jobs that name it wait (`...NotFound`); workloads that
    already resolved their priority from it keep it, as in Kueue."""

    TYPE: ClassVar[str] = "priorityclass.deleted"
    VERSION: ClassVar[int] = 1
    kind: str  # WorkloadPriorityClass | PriorityClass
    name: str

    @property
    def subject(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceObserved:
    TYPE: ClassVar[str] = "namespace.observed"
    VERSION: ClassVar[int] = 1
    namespace: Namespace

    @property
    def subject(self) -> str:
        return f"namespace/{self.namespace.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectRejected:
    """A manifest that was valid YAML but wrong. Recorded so the audit trail says why it had no effect."""

    TYPE: ClassVar[str] = "object.rejected"
    VERSION: ClassVar[int] = 1
    kind: str
    name: str
    namespace: str | None = None
    errors: tuple[str, ...]

    @property
    def subject(self) -> str:
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind.lower()}/{ns}{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectWarned:
    """A queue object admitd accepted but ignores part of (a field it does not implement, a borrowingLimit without a
    cohort): each warning names the field. Recorded after the object's observation, once per distinct set of
    warnings, so the status writer can tell its owner (a condition and a Warning Event); an audit fact that changes
    nothing the cycle reads. A later version without warnings is its observation alone."""

    TYPE: ClassVar[str] = "object.warned"
    VERSION: ClassVar[int] = 1
    kind: str
    name: str
    namespace: str | None = None
    warnings: tuple[str, ...]

    @property
    def subject(self) -> str:
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind.lower()}/{ns}{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobObserved:
    """A managed job was seen (created or changed while pending). Carries its workload, already typed. Version 2:
    each pod set has `min_count` (partial admission). Version 3: the workload has `active_deadline_ms` (a Job's
    activeDeadlineSeconds, which bounds its estimated runtime)."""

    TYPE: ClassVar[str] = "job.observed"
    VERSION: ClassVar[int] = 3
    workload: Workload

    @property
    def subject(self) -> str:
        return f"job/{self.workload.namespace}/{self.workload.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFinished:
    TYPE: ClassVar[str] = "job.finished"
    VERSION: ClassVar[int] = 1
    job: str  # namespace/name
    at: Millis
    succeeded: bool = True

    @property
    def subject(self) -> str:
        return f"job/{self.job}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobReady:
    """Every pod the admitted job asked for is ready (Kueue's PodsReady condition): ready plus succeeded pods reach
    the admitted counts. Recorded only when waitForPodsReady is configured; it ends the job's PodsReady timeout and
    lets blockAdmission admit the next workload."""

    TYPE: ClassVar[str] = "job.ready"
    VERSION: ClassVar[int] = 1
    job: str
    at: Millis

    @property
    def subject(self) -> str:
        return f"job/{self.job}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPodsNotCreated:
    """The Job controller could not create an admitted job's pods (its `FailedCreate` Event: a PriorityClass or a
    ServiceAccount that does not exist, a quota of the namespace). The job keeps its quota, as in Kueue: with
    waitForPodsReady its PodsReady timeout evicts it; without, it holds the quota until it is fixed or deleted,
    and this fact is what `admitd explain` and `history` show. Recorded once per admission and message."""

    TYPE: ClassVar[str] = "job.pods_not_created"
    VERSION: ClassVar[int] = 1
    job: str
    at: Millis
    message: str

    @property
    def subject(self) -> str:
        return f"job/{self.job}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDeleted:
    TYPE: ClassVar[str] = "job.deleted"
    VERSION: ClassVar[int] = 1
    job: str
    at: Millis

    @property
    def subject(self) -> str:
        return f"job/{self.job}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTampered:
    """Security: a managed job ran, or claimed an admission, that admitd did not give it (`what`:
    `ForgedAdmission`, an `admitd.io/admission` that is not admitd's, `detail` says why; `UnsuspendedWithoutAdmission`,
    `suspend: false` with no admission at all). Recorded once per change of the job (`generation`), with the
    managedFields `manager` of the last update that touched its suspension or an admitd.io annotation (None when
    the object has no managedFields). The leader suspends the job at once; the workload holds no quota."""

    TYPE: ClassVar[str] = "security.job_tampered"
    VERSION: ClassVar[int] = 1
    job: str  # namespace/name
    namespace: str
    uid: str
    generation: int
    at: Millis
    what: str  # ForgedAdmission | UnsuspendedWithoutAdmission
    detail: str
    manager: str | None = None
    claimed_cluster_queue: str | None = None  # what a forged note names, when it names one

    @property
    def subject(self) -> str:
        return f"job/{self.job}"


# --- decisions ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Borrowed:
    """`amount` of (`flavor`, `resource`) above the ClusterQueue's nominal quota, lent by `cohort`'s tree."""

    flavor: str
    resource: str
    amount: Milli
    cohort: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Freed:
    flavor: str
    resource: str
    amount: Milli


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadAdmitted:
    TYPE: ClassVar[str] = "workload.admitted"
    VERSION: ClassVar[int] = 1
    workload: str  # namespace/name
    at: Millis
    admission: Admission
    borrowed: tuple[Borrowed, ...] = ()

    @property
    def subject(self) -> str:
        return f"job/{self.workload}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadPreempted:
    """`workload` must stop (so that `preemptor` fits, or its queue drains). It holds its quota until
    `WorkloadEvicted` says its pods are gone."""

    TYPE: ClassVar[str] = "workload.preempted"
    VERSION: ClassVar[int] = 1
    workload: str
    at: Millis
    cluster_queue: str  # the victim's
    preemptor: str | None  # None when the queue itself drains it (stopPolicy HoldAndDrain)
    preemptor_cluster_queue: str | None
    reason: str  # InClusterQueue | InCohortReclamation | InCohortReclaimWhileBorrowing | InCohortFairSharing
    # | ClusterQueueStopped | LocalQueueStopped
    policy: str  # the policy value that allowed it, e.g. "withinClusterQueue=LowerPriority"
    freed: tuple[Freed, ...] = ()

    @property
    def subject(self) -> str:
        return f"job/{self.workload}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadPending:
    """The workload is not admitted, and why. Written only when the reason changes. Version 2: the reason names
    the victims a waiting preemptor claimed (`PendingReason.victims`)."""

    TYPE: ClassVar[str] = "workload.pending"
    VERSION: ClassVar[int] = 2
    workload: str
    at: Millis
    cluster_queue: str | None
    reason: PendingReason

    @property
    def subject(self) -> str:
        return f"job/{self.workload}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadAdopted:
    """Observed, not decided: the job runs with an admission that another admitd replica decided and carried out
    (its `admitd.io/admission` annotation says which). It holds that quota from now on; nothing is actuated.
    `stopping`: the job is suspended already, another replica having preempted it, and its pods are still stopping
    (its `admitd.io/stopping` annotation says under which admission): it holds the quota as evicting until they are
    gone (`WorkloadEvicted`, reason SuspendedByAnotherReplica)."""

    TYPE: ClassVar[str] = "workload.adopted"
    VERSION: ClassVar[int] = 2
    workload: str
    at: Millis
    admission: Admission
    stopping: bool = False

    @property
    def subject(self) -> str:
        return f"job/{self.workload}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadEvicted:
    """An admitted workload stopped running (preempted, or its queue drained) and released its quota."""

    TYPE: ClassVar[str] = "workload.evicted"
    VERSION: ClassVar[int] = 1
    workload: str
    at: Millis
    reason: str  # Preempted | ClusterQueueStopped | LocalQueueStopped

    @property
    def subject(self) -> str:
        return f"job/{self.workload}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadTimedOut:
    """waitForPodsReady: `workload`'s pods were not all ready `timeout` ms after its admission, so it must stop
    (reason PodsReadyTimeout). It holds its quota until `WorkloadEvicted`, then waits in its queue, held until
    `requeue_at` (`WorkloadRequeued`), ordered by `queue_order_at`. `timeouts` counts this workload's timeouts,
    this one included; past backoffLimitCount it is `deactivated` instead (Kueue's RequeuingLimitExceeded): it
    stays suspended and is never requeued."""

    TYPE: ClassVar[str] = "workload.timed_out"
    VERSION: ClassVar[int] = 1
    workload: str
    at: Millis
    cluster_queue: str
    timeout: Millis
    timeouts: int
    requeue_at: Millis | None  # None when deactivated
    queue_order_at: Millis
    deactivated: bool = False

    @property
    def reason(self) -> str:
        """The eviction reason Kueue writes: PodsReadyTimeout, or InactiveWorkload for a deactivation."""
        return "InactiveWorkload" if self.deactivated else "PodsReadyTimeout"

    @property
    def subject(self) -> str:
        return f"job/{self.workload}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadRequeued:
    """waitForPodsReady: the backoff of a workload evicted for PodsReadyTimeout is over; it is back in its queue."""

    TYPE: ClassVar[str] = "workload.requeued"
    VERSION: ClassVar[int] = 1
    workload: str
    at: Millis

    @property
    def subject(self) -> str:
        return f"job/{self.workload}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadActiveChanged:
    """The Workload's `spec.active` was set (Kueue's `kubectl kueue stop workload` / `resume workload`). False: an
    admitted workload is evicted (reason Deactivated, its Job suspended, its quota released when its pods are gone)
    and, like a pending one, held out of its queue; true again: back in its queue, ordered from its eviction."""

    TYPE: ClassVar[str] = "workload.active_changed"
    VERSION: ClassVar[int] = 1
    workload: str
    active: bool
    at: Millis

    @property
    def subject(self) -> str:
        return f"job/{self.workload}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadEstimated:
    """The start-time estimate the daemon made at `at` for a pending workload (`daemon.domain.eta`: p10, p50 and p90
    of its start, None where the forward run found none), from the fold at seq `inputs` and the runs recorded by
    then. Recorded so that `admitd eta-report` scores what was said, not what would be re-computed: once per
    estimating round at most (`admitd run --estimate-every`), and only when the estimate is new or moved (see
    `daemon.stages.estimate`). Changes nothing the cycle reads."""

    TYPE: ClassVar[str] = "workload.estimated"
    VERSION: ClassVar[int] = 1
    workload: str
    at: Millis
    inputs: int  # the seq of the fold the estimate was computed from
    p10: Millis | None
    p50: Millis | None
    p90: Millis | None

    @property
    def subject(self) -> str:
        return f"job/{self.workload}"


# --- actuations ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JobUnsuspended:
    """The decision `decision` (a seq) was carried out: the job runs with `placements` on its pod templates."""

    TYPE: ClassVar[str] = "job.unsuspended"
    VERSION: ClassVar[int] = 2
    job: str
    at: Millis
    decision: int
    placements: tuple[Placement, ...] = ()

    @property
    def subject(self) -> str:
        return f"job/{self.job}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSuspended:
    """The decision `decision` was carried out: the job is suspended with its original `placements` restored."""

    TYPE: ClassVar[str] = "job.suspended"
    VERSION: ClassVar[int] = 2
    job: str
    at: Millis
    decision: int
    placements: tuple[Placement, ...] = ()

    @property
    def subject(self) -> str:
        return f"job/{self.job}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ActuationFailed:
    """Carrying out the decision `decision` failed. A permanent failure is not retried; a temporary one is."""

    TYPE: ClassVar[str] = "actuation.failed"
    VERSION: ClassVar[int] = 2
    job: str
    at: Millis
    decision: int
    error: str
    permanent: bool

    @property
    def subject(self) -> str:
        return f"job/{self.job}"


# --- the log's own facts -------------------------------------------------------------------------------------

BREAK_SUBJECT = "log/chain"
"""The subject of every fact about the log's hash chain (one index lookup finds them all)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainBreakAccepted:
    """An operator ran admitd on a log whose hash chain is broken at `seq` (`admitd run --accept-chain-break`):
    from here on the walk takes the stored rows there as they are. Changes no queue state."""

    TYPE: ClassVar[str] = "log.break_accepted"
    VERSION: ClassVar[int] = 1
    seq: int
    problem: str
    by: str
    at: Millis

    @property
    def subject(self) -> str:
        return BREAK_SUBJECT


Event = (
    ResourceFlavorObserved
    | ResourceFlavorDeleted
    | ClusterQueueObserved
    | ClusterQueueDeleted
    | CohortObserved
    | CohortDeleted
    | LocalQueueObserved
    | LocalQueueDeleted
    | PriorityClassObserved
    | PriorityClassDeleted
    | NamespaceObserved
    | ObjectRejected
    | ObjectWarned
    | JobObserved
    | JobFinished
    | JobDeleted
    | JobReady
    | JobPodsNotCreated
    | JobTampered
    | WorkloadAdmitted
    | WorkloadPreempted
    | WorkloadPending
    | WorkloadEvicted
    | WorkloadAdopted
    | WorkloadTimedOut
    | WorkloadRequeued
    | WorkloadActiveChanged
    | WorkloadEstimated
    | JobUnsuspended
    | JobSuspended
    | ActuationFailed
    | ChainBreakAccepted
)

QUEUE_OBJECT_TYPES: tuple[type[Event], ...] = (
    ResourceFlavorObserved,
    ResourceFlavorDeleted,
    ClusterQueueObserved,
    ClusterQueueDeleted,
    CohortObserved,
    CohortDeleted,
    LocalQueueObserved,
    LocalQueueDeleted,
    PriorityClassObserved,
    PriorityClassDeleted,
    NamespaceObserved,
    ObjectRejected,
    ObjectWarned,
)
"""The events of the queue objects: flavors, ClusterQueues, Cohorts, LocalQueues, priority classes, namespaces, and
admitd's rejections of and warnings about them."""

EVENT_TYPES: tuple[type[Event], ...] = (
    *QUEUE_OBJECT_TYPES,
    JobObserved,
    JobFinished,
    JobDeleted,
    JobReady,
    JobPodsNotCreated,
    JobTampered,
    WorkloadAdmitted,
    WorkloadPreempted,
    WorkloadPending,
    WorkloadEvicted,
    WorkloadAdopted,
    WorkloadTimedOut,
    WorkloadRequeued,
    WorkloadActiveChanged,
    WorkloadEstimated,
    JobUnsuspended,
    JobSuspended,
    ActuationFailed,
    ChainBreakAccepted,
)
"""Every current event class; the codec's registry is built from this tuple."""

DECISION_TYPES: tuple[type[Event], ...] = (WorkloadAdmitted, WorkloadPreempted, WorkloadPending)
