"""Fluent builders for admission tests (Kueue's `Make*().Obj()` style) and a tiny fold to drive cycles.

`cq("a").cohort("c").flavor("h100", gpu=8, borrow=4)`, `job("a").queue("q").gpus(4).priority(100)`; a `World`
holds objects, folds decision events back in (`apply`), and `view()` assembles the ClusterView the engine reads.
Quantities in builders are whole units; the model's milli-units are derived (x1000).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from daemon.domain.admission import AdmissionEngine, EngineConfig, decide
from daemon.domain.events import Event, WorkloadAdmitted, WorkloadPending, WorkloadPreempted
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
    PendingReason,
    PodSet,
    PodSetAssignment,
    Preemption,
    PreemptionPolicy,
    QueueingStrategy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    Taint,
    Toleration,
    Workload,
)
from daemon.domain.view import AdmittedWorkload, ClusterView, PendingIndex, PendingWorkload

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


# --- a tiny fold over the decision events (the real one is daemon.domain.state) --------------------------------


@dataclass
class _Pending:
    workload: Workload
    priority: int
    queue_order_at: int
    last_reason: PendingReason | None = None


class World:
    """Mutable test state. Only tests mutate it; the engine only ever sees `view()`."""

    def __init__(self) -> None:
        self.flavors: dict[str, ResourceFlavor] = {}
        self.cluster_queues: dict[str, ClusterQueue] = {}
        self.cohorts: dict[str, Cohort] = {}
        self.local_queues: dict[str, LocalQueue] = {}
        self.namespaces: dict[str, Namespace] = {}
        self.pending: dict[str, _Pending] = {}
        self.admitted: dict[str, AdmittedWorkload] = {}
        self.generation: dict[str, int] = {}
        self.pending_version: dict[str, int] = {}
        self.counter = 0
        self.config_gen = 0
        self.indexed = True  # view() carries a PendingIndex per ClusterQueue, as the real fold's view does

    # setup ----------------------------------------------------------------------------------------------------------

    def add(self, *items: Any) -> World:
        for raw in items:
            item = raw.obj() if isinstance(raw, CQBuilder | CohortBuilder) else raw
            if isinstance(item, ResourceFlavor):
                self.flavors[item.name] = item
            elif isinstance(item, ClusterQueue):
                self.cluster_queues[item.name] = item
            elif isinstance(item, Cohort):
                self.cohorts[item.name] = item
            elif isinstance(item, LocalQueue):
                self.local_queues[item.key] = item
            elif isinstance(item, Namespace):
                self.namespaces[item.name] = item
            elif isinstance(item, JobBuilder):
                self.submit(item)
            elif isinstance(item, Running):
                self.run(item)
            else:
                raise TypeError(item)
            if not isinstance(item, JobBuilder | Running):
                self._config()
        return self

    def submit(self, jb: JobBuilder) -> None:
        wl = jb.obj()
        self.pending[wl.key] = _Pending(wl, jb.prio, jb.created)
        self._touch_pending(wl)

    def run(self, r: Running) -> None:
        wl = r.job.obj()
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
        aw = AdmittedWorkload(
            workload=wl,
            priority=r.job.prio,
            admission=Admission(cluster_queue=r.cluster_queue, pod_sets=pod_sets),
            admitted_at=r.admitted_at,
            queue_order_at=r.job.created,
            evicting=r.evicting,
        )
        self.admitted[wl.key] = aw
        self._bump(r.cluster_queue)

    # the fold ------------------------------------------------------------------------------------------------------

    def apply(self, events: Iterable[Event]) -> None:
        for ev in events:
            if isinstance(ev, WorkloadAdmitted):
                p = self.pending.pop(ev.workload)
                self._touch_pending(p.workload)
                self.admitted[ev.workload] = AdmittedWorkload(
                    workload=p.workload,
                    priority=p.priority,
                    admission=ev.admission,
                    admitted_at=ev.at,
                    queue_order_at=p.queue_order_at,
                )
                self._bump(ev.admission.cluster_queue)
            elif isinstance(ev, WorkloadPreempted):
                aw = self.admitted[ev.workload]
                if not aw.evicting:
                    self.admitted[ev.workload] = replace(aw, evicting=True)
                    self._bump(aw.admission.cluster_queue)
            elif isinstance(ev, WorkloadPending):
                p = self.pending[ev.workload]
                p.last_reason = ev.reason
                self._touch_pending(p.workload)

    def evict(self, key: str, at: int) -> None:
        """The victim's pods are gone: it releases quota and queues again, ordered by its eviction time."""
        aw = self.admitted.pop(key)
        self._bump(aw.admission.cluster_queue)
        self.pending[key] = _Pending(aw.workload, aw.priority, at)
        self._touch_pending(aw.workload)

    def finish(self, key: str) -> None:
        if key in self.admitted:
            aw = self.admitted.pop(key)
            self._bump(aw.admission.cluster_queue)
        elif key in self.pending:
            p = self.pending.pop(key)
            self._touch_pending(p.workload)

    # views ----------------------------------------------------------------------------------------------------------

    def tree_of(self, cq_name: str) -> str:
        c = self.cluster_queues.get(cq_name)
        if c is None or c.cohort is None:
            return f"cq:{cq_name}"
        name = c.cohort
        seen = {name}
        while True:
            parent = self.cohorts.get(name)
            if parent is None or parent.parent is None or parent.parent in seen:
                return name
            name = parent.parent
            seen.add(name)

    def route(self, wl: Workload) -> str | None:
        if wl.queue_name is None:
            return None
        q = self.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        if q is None or q.cluster_queue not in self.cluster_queues:
            return None
        return q.cluster_queue

    def view(self, indexed: bool | None = None) -> ClusterView:
        """The engine's input. `indexed=False` leaves out the pending index, so the engine visits every pending
        workload one by one (the reference walk the indexed one must match)."""
        by_cq: dict[str, list[PendingWorkload]] = {}
        unrouted: dict[str, PendingWorkload] = {}
        for key, p in self.pending.items():
            wl = p.workload
            pw = PendingWorkload(
                workload=wl,
                priority=p.priority,
                local_queue=f"{wl.namespace}/{wl.queue_name}" if wl.queue_name else "",
                queue_order_at=p.queue_order_at,
                last_reason=p.last_reason,
            )
            target = self.route(wl)
            if target is None:
                unrouted[key] = pw
            else:
                by_cq.setdefault(target, []).append(pw)
        for lst in by_cq.values():
            lst.sort(key=lambda pw: (-pw.priority, pw.queue_order_at, pw.key))
        admitted_by_cq: dict[str, dict[str, AdmittedWorkload]] = {}
        for key, aw in self.admitted.items():
            admitted_by_cq.setdefault(aw.admission.cluster_queue, {})[key] = aw
        trees = {self.tree_of(name) for name in self.cluster_queues} | set(self.generation)
        return ClusterView(
            flavors=dict(self.flavors),
            cluster_queues=dict(self.cluster_queues),
            cohorts=dict(self.cohorts),
            local_queues=dict(self.local_queues),
            namespaces=dict(self.namespaces),
            admitted=dict(self.admitted),
            admitted_by_cq=admitted_by_cq,
            pending_by_cq=by_cq,
            pending_index={cq: PendingIndex.build(lst) for cq, lst in by_cq.items()}
            if (self.indexed if indexed is None else indexed)
            else None,
            pending_unrouted=unrouted,
            generation={t: max(self.generation.get(t, 0), self.config_gen) for t in trees},
            pending_version=dict(self.pending_version),
        )

    def _bump(self, cq_name: str) -> None:
        self.counter += 1
        self.generation[self.tree_of(cq_name)] = self.counter

    def _config(self) -> None:
        self.counter += 1
        self.config_gen = self.counter

    def _touch_pending(self, wl: Workload) -> None:
        self.counter += 1
        self.pending_version[self.route(wl) or ""] = self.counter


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
