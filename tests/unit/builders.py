"""Fluent builders for admission tests (Kueue's `Make*().Obj()` style) and a World to drive cycles on the real fold.

`cq("a").cohort("c").flavor("h100", gpu=8, borrow=4)`, `job("a").queue("q").gpus(4).priority(100)`; a `World`
turns them into observation events for the real fold (`daemon.domain.state`), folds decision events back in
(`apply`), and `view()` is the fold's own ClusterView, the one the engine reads in the simulator and the daemon.
Quantities in builders are whole units; the model's milli-units are derived (x1000).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from daemon.domain.admission import AdmissionEngine, EngineConfig, decide
from daemon.domain.events import (
    ClusterQueueObserved,
    CohortObserved,
    Event,
    JobFinished,
    JobObserved,
    LocalQueueObserved,
    NamespaceObserved,
    PriorityClassObserved,
    ResourceFlavorObserved,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadPreempted,
)
from daemon.domain.model import (
    Admission,
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LabelRequirement,
    LabelSelector,
    LocalQueue,
    Namespace,
    PodSet,
    PodSetAssignment,
    Preemption,
    PreemptionPolicy,
    PriorityClass,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    Taint,
    Toleration,
    Workload,
)
from daemon.domain.state import Phase, State, WorkloadRecord
from daemon.domain.view import AdmittedWorkload, ClusterView

M = 1000  # milli-units per unit


def _limit(value: int | dict[str, int] | None, resource: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, dict):
        v = value.get(resource)
        return None if v is None else v * M
    return value * M


class _Quotas:
    """Shared by ClusterQueue and Cohort builders: resource groups built flavor by flavor."""

    def __init__(self) -> None:
        self._groups: list[tuple[tuple[str, ...], list[FlavorQuotas]]] = []

    def flavor(
        self,
        name: str,
        *,
        borrow: int | dict[str, int] | None = None,
        lend: int | dict[str, int] | None = None,
        **resources: int,
    ) -> Any:
        """Add a flavor with nominal quotas; a flavor covering the same resources as an earlier one joins its group."""
        covered = tuple(sorted(resources))
        fq = FlavorQuotas(
            name=name,
            resources=tuple(
                ResourceQuota(
                    name=r, nominal=resources[r] * M, borrowing_limit=_limit(borrow, r), lending_limit=_limit(lend, r)
                )
                for r in covered
            ),
        )
        for cov, flavors in self._groups:
            if cov == covered:
                flavors.append(fq)
                return self
        self._groups.append((covered, [fq]))
        return self

    def _resource_groups(self) -> tuple[ResourceGroup, ...]:
        return tuple(ResourceGroup(covered_resources=cov, flavors=tuple(fl)) for cov, fl in self._groups)


class CQBuilder(_Quotas):
    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name
        self._cohort: str | None = None
        self._selector: LabelSelector | None = LabelSelector()
        self._strategy = QueueingStrategy.BEST_EFFORT_FIFO
        self._preemption = Preemption()
        self._fungibility = FlavorFungibility()
        self._stop = StopPolicy.NONE
        self._weight = 1000

    def cohort(self, name: str) -> CQBuilder:
        self._cohort = name
        return self

    def strict_fifo(self) -> CQBuilder:
        self._strategy = QueueingStrategy.STRICT_FIFO
        return self

    def namespaces(self, selector: LabelSelector | None = None, **labels: str) -> CQBuilder:
        """Select namespaces by labels; `namespaces(None)` selects none (the API's null)."""
        self._selector = selector if selector is not None or not labels else LabelSelector(match_labels=labels)
        if selector is None and not labels:
            self._selector = None
        return self

    def namespaces_in(self, key: str, *values: str) -> CQBuilder:
        self._selector = LabelSelector(match_expressions=(LabelRequirement(key=key, operator="In", values=values),))
        return self

    def preempt(
        self,
        within: str = "Never",
        reclaim: str = "Never",
        borrow_within: str = "Never",
        threshold: int | None = None,
    ) -> CQBuilder:
        self._preemption = Preemption(
            within_cluster_queue=PreemptionPolicy(within),
            reclaim_within_cohort=PreemptionPolicy(reclaim),
            borrow_within_cohort=PreemptionPolicy(borrow_within),
            borrow_max_priority_threshold=threshold,
        )
        return self

    def fungibility(
        self,
        when_can_borrow: str = "MayStopSearch",
        when_can_preempt: str = "TryNextFlavor",
        preference: str | None = None,
    ) -> CQBuilder:
        self._fungibility = FlavorFungibility(
            when_can_borrow=FungibilityPolicy(when_can_borrow),
            when_can_preempt=FungibilityPolicy(when_can_preempt),
            preference=FungibilityPreference(preference or "BorrowingOverPreemption"),
        )
        return self

    def stop(self, policy: str = "Hold") -> CQBuilder:
        self._stop = StopPolicy(policy)
        return self

    def weight(self, w: int) -> CQBuilder:
        self._weight = w
        return self

    def obj(self) -> ClusterQueue:
        return ClusterQueue(
            name=self._name,
            cohort=self._cohort,
            namespace_selector=self._selector,
            queueing_strategy=self._strategy,
            resource_groups=self._resource_groups(),
            preemption=self._preemption,
            flavor_fungibility=self._fungibility,
            stop_policy=self._stop,
            fair_sharing_weight=self._weight,
        )


class CohortBuilder(_Quotas):
    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name
        self._parent: str | None = None
        self._weight = 1000

    def parent(self, name: str) -> CohortBuilder:
        self._parent = name
        return self

    def weight(self, w: int) -> CohortBuilder:
        self._weight = w
        return self

    def obj(self) -> Cohort:
        return Cohort(
            name=self._name,
            parent=self._parent,
            resource_groups=self._resource_groups(),
            fair_sharing_weight=self._weight,
        )


@dataclass
class JobBuilder:
    name: str
    namespace: str = "default"
    queue_name: str | None = "q"
    prio: int = 0
    created: int = 0
    pod_sets: list[PodSet] = field(default_factory=list)

    def ns(self, namespace: str) -> JobBuilder:
        self.namespace = namespace
        return self

    def queue(self, name: str | None) -> JobBuilder:
        self.queue_name = name
        return self

    def priority(self, p: int) -> JobBuilder:
        self.prio = p
        return self

    def at(self, t: int) -> JobBuilder:
        self.created = t
        return self

    def podset(
        self,
        name: str = "main",
        count: int = 1,
        *,
        selector: dict[str, str] | None = None,
        tolerations: Iterable[Toleration] = (),
        **requests: int,
    ) -> JobBuilder:
        self.pod_sets.append(
            PodSet(
                name=name,
                count=count,
                requests={r: q * M for r, q in requests.items()},
                node_selector=dict(selector or {}),
                tolerations=tuple(tolerations),
            )
        )
        return self

    def gpus(self, n: int, pods: int = 1) -> JobBuilder:
        return self.podset("main", pods, gpu=n)

    def cpus(self, n: int, pods: int = 1) -> JobBuilder:
        return self.podset("main", pods, cpu=n)

    def selector(self, **labels: str) -> JobBuilder:
        last = self.pod_sets[-1]
        self.pod_sets[-1] = replace(last, node_selector={**last.node_selector, **labels})
        return self

    def min(self, count: int) -> JobBuilder:
        """Partial admission: the last pod set may run with as few as `count` pods."""
        self.pod_sets[-1] = replace(self.pod_sets[-1], min_count=count)
        return self

    def tolerate(self, key: str = "", value: str = "", effect: str = "", operator: str = "Equal") -> JobBuilder:
        last = self.pod_sets[-1]
        tol = Toleration(key=key, operator=operator, value=value, effect=effect)
        self.pod_sets[-1] = replace(last, tolerations=(*last.tolerations, tol))
        return self

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def obj(self) -> Workload:
        return Workload(
            namespace=self.namespace,
            name=self.name,
            uid=f"uid-{self.namespace}-{self.name}",
            created_at=self.created,
            queue_name=self.queue_name,
            pod_sets=tuple(self.pod_sets) or (PodSet(name="main", count=1, requests={}),),
        )


def cq(name: str) -> CQBuilder:
    return CQBuilder(name)


def cohort(name: str) -> CohortBuilder:
    return CohortBuilder(name)


def job(name: str) -> JobBuilder:
    return JobBuilder(name)


def flavor(
    name: str, taints: Iterable[Taint] = (), tolerations: Iterable[Toleration] = (), **labels: str
) -> ResourceFlavor:
    return ResourceFlavor(name=name, node_labels=labels, node_taints=tuple(taints), tolerations=tuple(tolerations))


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Taint:
    return Taint(key=key, value=value, effect=effect)


def lq(namespace: str, name: str, cluster_queue: str, stop: str = "None") -> LocalQueue:
    return LocalQueue(namespace=namespace, name=name, cluster_queue=cluster_queue, stop_policy=StopPolicy(stop))


def namespace(name: str, **labels: str) -> Namespace:
    return Namespace(name=name, labels=labels)


# --- the real fold, fed by the builders -------------------------------------------------------------------------


class World:
    """Test state: the real fold (`daemon.domain.state.State`), fed observation events built from the builders and
    the engine's own decision events. Only tests feed it; the engine only ever sees `view()`."""

    def __init__(self, state: State | None = None) -> None:
        self.state = state if state is not None else State()
        self._clock = 0  # `at` of the events the builders make up (finishes); the fold does not read it

    # setup ----------------------------------------------------------------------------------------------------------

    def add(self, *items: Any) -> World:
        for raw in items:
            item = raw.obj() if isinstance(raw, CQBuilder | CohortBuilder) else raw
            if isinstance(item, ResourceFlavor):
                self._feed(ResourceFlavorObserved(flavor=item))
            elif isinstance(item, ClusterQueue):
                self._feed(ClusterQueueObserved(cluster_queue=item))
            elif isinstance(item, Cohort):
                self._feed(CohortObserved(cohort=item))
            elif isinstance(item, LocalQueue):
                self._feed(LocalQueueObserved(local_queue=item))
            elif isinstance(item, Namespace):
                self._feed(NamespaceObserved(namespace=item))
            elif isinstance(item, JobBuilder):
                self.submit(item)
            elif isinstance(item, Running):
                self.run(item)
            else:
                raise TypeError(item)
        return self

    def copy(self) -> World:
        """An independent World with the same state (through a snapshot, as the daemon restarts)."""
        return World(State.from_snapshot(self.state.to_snapshot()))

    def _workload(self, jb: JobBuilder) -> Workload:
        """The builder's workload, with a WorkloadPriorityClass of its priority (observed first) when not 0."""
        wl = jb.obj()
        if jb.prio == 0:
            return wl
        name = f"prio{jb.prio}".replace("-", "m")
        if ("WorkloadPriorityClass", name) not in self.state.priority_classes:
            self._feed(PriorityClassObserved(priority_class=PriorityClass(name=name, value=jb.prio)))
        return replace(wl, priority_class=name)

    def submit(self, jb: JobBuilder) -> None:
        self._feed(JobObserved(workload=self._workload(jb)))

    def run(self, r: Running) -> None:
        """An already-admitted workload (observed, then admitted; preempted too when `evicting`)."""
        wl = self._workload(r.job)
        flavors = r.flavors
        pod_sets = tuple(
            PodSetAssignment(
                name=ps.name,
                count=ps.count,
                flavors={res: flavors[res] if isinstance(flavors, dict) else flavors for res in ps.requests},
                usage={res: q * ps.count for res, q in ps.requests.items()},
            )
            for ps in wl.pod_sets
        )
        admission = Admission(cluster_queue=r.cluster_queue, pod_sets=pod_sets)
        self._feed(JobObserved(workload=wl))
        self._feed(WorkloadAdmitted(workload=wl.key, at=r.admitted_at, admission=admission))
        if r.evicting:
            self._feed(
                WorkloadPreempted(
                    workload=wl.key,
                    at=r.admitted_at,
                    cluster_queue=r.cluster_queue,
                    preemptor=None,
                    preemptor_cluster_queue=None,
                    reason="Preempted",
                    policy="",
                )
            )

    # the fold ------------------------------------------------------------------------------------------------------

    def _feed(self, event: Event) -> None:
        self.state.apply(event)

    def apply(self, events: Iterable[Event]) -> None:
        for ev in events:
            self._feed(ev)

    def evict(self, key: str, at: int) -> None:
        """The victim's pods are gone: it releases quota and queues again."""
        self._feed(WorkloadEvicted(workload=key, at=at, reason="Preempted"))

    def finish(self, key: str) -> None:
        self._clock += 1
        self._feed(JobFinished(job=key, at=self._clock))

    # reading --------------------------------------------------------------------------------------------------------

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]:
        return self.state.flavors

    @property
    def cluster_queues(self) -> Mapping[str, ClusterQueue]:
        return self.state.cluster_queues

    @property
    def cohorts(self) -> Mapping[str, Cohort]:
        return self.state.cohorts

    @property
    def admitted(self) -> Mapping[str, AdmittedWorkload]:
        return self.state.view().admitted

    @property
    def pending(self) -> Mapping[str, WorkloadRecord]:
        return {k: r for k, r in self.state.workloads.items() if r.phase is Phase.PENDING}

    def view(self, indexed: bool | None = None) -> ClusterView:
        """The engine's input, read from the fold. `indexed=False` leaves out the pending index, so the engine visits
        every pending workload one by one (the reference walk the indexed one must match)."""
        v = self.state.view()
        return v if indexed is None or indexed else replace(v, pending_index=None)


@dataclass
class Running:
    job: JobBuilder
    cluster_queue: str
    flavors: str | dict[str, str]
    admitted_at: int = 0
    evicting: bool = False


def running(
    jb: JobBuilder, cluster_queue: str, flavors: str | dict[str, str], at: int = 0, evicting: bool = False
) -> Running:
    """An already-admitted workload holding `jb`'s requests in `flavors` (one flavor, or per resource)."""
    return Running(jb, cluster_queue, flavors, at, evicting)


def world(*items: Any) -> World:
    return World().add(*items)


def view(*items: Any) -> ClusterView:
    """A ClusterView from builders: flavors, queues, cohorts, namespaces, jobs (pending) and `running(...)`."""
    return world(*items).view()


def settle(
    w: World,
    now: int = 1000,
    engine: AdmissionEngine | None = None,
    config: EngineConfig | None = None,
    max_cycles: int = 200,
) -> list[Event]:
    """Drive cycles as the simulator does: apply each cycle's events, evict preempted workloads at once, and stop
    after a cycle that admits and preempts nothing."""
    out: list[Event] = []
    for _ in range(max_cycles):
        events = engine.decide(w.view(), now) if engine is not None else decide(w.view(), now, config or EngineConfig())
        out.extend(events)
        w.apply(events)
        preempted = [e.workload for e in events if isinstance(e, WorkloadPreempted)]
        for key in preempted:
            w.evict(key, now)
        if not any(isinstance(e, WorkloadAdmitted | WorkloadPreempted) for e in events):
            return out
    raise AssertionError("cycles did not settle")
