"""Every figure of a ClusterQueue and a LocalQueue, defined once: /metrics, the Kubernetes status and
`admitd queues` render these (tests/integration/test_views_agree.py runs a random log and compares the three).

- activity: active, inactive (with the engine's own reason: a missing flavor, a cohort cycle, a latest version
  admitd rejected; `QuotaTree.inactive`, what the cycle uses) or stopped (a stopPolicy);
- usage per (flavor, resource), kept by `apply` as admissions come and go; borrowed and lent (`resources`);
- pending: how many, how many active or inadmissible, how many by reason;
- admitted: how many hold quota now (being evicted included: they hold it until gone).

`Queues` is a projection (`views.projection`): it reads the fold's record as of each event, nothing else. A
`Queues` for a state that was never fed (a past moment's, `daemon.query.moment`) is `Queues.of(state)`: the same
figures from the admitted records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from daemon.domain import events as ev
from daemon.domain import reasons
from daemon.domain.model import ClusterQueue, FlavorResource, Milli, PendingReasonKind, StopPolicy
from daemon.domain.quota import UNLIMITED, Node, QuotaTree
from daemon.domain.state import Phase, State
from daemon.views.dispatch import Spec, Table, bind

_WAITING = PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS  # a preemptor waiting: active, as in Kueue
_PENDING = Phase.PENDING
_ADMITTED = Phase.ADMITTED


@dataclass(frozen=True, slots=True)
class Activity:
    """Can the ClusterQueue admit? `status`: active | inactive | stopped. `reason`: Kueue's reason of the Active
    condition (Ready, FlavorNotFound, CohortCycleDetected, InvalidSpec, Stopped); `message`: admitd's own words
    (`admitd queues`); `condition`: Kueue's message of the Active condition."""

    status: str
    reason: str
    message: str | None
    condition: str

    @property
    def active(self) -> bool:
        return self.status == "active"

    @property
    def kueue_status(self) -> str:
        """kueue_cluster_queue_status's label: Kueue calls a queue that cannot admit `pending`."""
        return "active" if self.active else "pending"


@dataclass(frozen=True, slots=True)
class PendingCounts:
    total: int
    active: int  # no reason yet, or waiting for the workloads it preempted (Kueue's active heap)
    inadmissible: int
    by_reason: tuple[tuple[str, int], ...]  # sorted by reason


@dataclass(slots=True)
class FRRow:
    flavor: str
    resource: str
    nominal: Milli
    borrowing_limit: Milli | None
    lending_limit: Milli | None
    used: Milli
    borrowed: Milli
    lent: Milli


@dataclass(slots=True)
class LocalQueueCounts:
    pending: int
    active: int
    inadmissible: int
    admitted: int
    usage: dict[FlavorResource, Milli] = field(default_factory=dict)


def _add(acc: dict[FlavorResource, Milli], usage: Mapping[FlavorResource, Milli], sign: int) -> None:
    for fr, v in usage.items():
        left = acc.get(fr, 0) + sign * v
        if left:
            acc[fr] = left
        else:
            acc.pop(fr, None)


def _cap(v: Milli | None) -> Milli | None:
    return None if v is None or v >= UNLIMITED else v


def flavor_resources(cq: ClusterQueue) -> list[FlavorResource]:
    """The ClusterQueue's (flavor, resource) pairs in its own order: resource groups, flavors, resources."""
    return [(fq.name, rq.name) for g in cq.resource_groups for fq in g.flavors for rq in fq.resources]


class Queues:
    """The queue figures of `state` (the record the feeder folds each event into after this projection)."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.usage: dict[str, dict[FlavorResource, Milli]] = {}  # ClusterQueue -> (flavor, resource) -> milli
        self.lq_usage: dict[str, dict[FlavorResource, Milli]] = {}  # "ns/name" -> the same, of its admissions
        self.lq_admitted: dict[str, int] = {}  # "ns/name" -> admitted workloads holding quota through it
        self._lq_of: dict[str, str] = {}  # admitted workload -> the LocalQueue it was admitted through
        self._tree: tuple[int, QuotaTree] | None = None  # (config generation, the engine's tree of it)
        self._table = bind(self, self.ON)

    @classmethod
    def of(cls, state: State) -> Queues:
        """The figures of a state that was never fed (a snapshot's, a past moment's), from its admitted records."""
        q = cls(state)
        for key, aw in state.view().admitted.items():
            q._held(
                key, aw.workload.namespace, aw.workload.queue_name, aw.admission.cluster_queue, aw.admission.usage()
            )
        return q

    # --- the projection ---

    def _held(self, key: str, ns: str, queue: str | None, cq: str, usage: Mapping[FlavorResource, Milli]) -> None:
        _add(self.usage.setdefault(cq, {}), usage, 1)
        if queue is not None:
            lq = f"{ns}/{queue}"
            self._lq_of[key] = lq
            self.lq_admitted[lq] = self.lq_admitted.get(lq, 0) + 1
            _add(self.lq_usage.setdefault(lq, {}), usage, 1)

    def _unheld(self, key: str, cq: str, usage: Mapping[FlavorResource, Milli]) -> None:
        _add(self.usage.setdefault(cq, {}), usage, -1)
        lq = self._lq_of.pop(key, None)
        if lq is not None:
            left = self.lq_admitted[lq] - 1
            if left:
                self.lq_admitted[lq] = left
            else:
                del self.lq_admitted[lq]
            _add(self.lq_usage.setdefault(lq, {}), usage, -1)

    @property
    def seq(self) -> int:
        """The last event applied: the state's, folded after each (`views.dispatch`)."""
        return self.state.seq

    def apply(self, event: ev.Event, seq: int) -> None:
        h = self._table[type(event)]
        if h is not None:
            h(event, seq)

    def handlers(self) -> Table:
        """Its handler of each event type (`views.dispatch`): for a feeder that joins it with others
        (`views.follow.CatchingUp` feeds the status writer's this way, one lookup an event for all)."""
        return dict(self._table)

    def _admitted(self, event: ev.WorkloadAdmitted | ev.WorkloadAdopted, seq: int) -> None:
        key = event.workload
        rec = self.state.workloads.get(key)
        if rec is not None and rec.phase is _PENDING:
            wl, adm = rec.workload, event.admission
            self._held(key, wl.namespace, wl.queue_name, adm.cluster_queue, adm.usage())

    def _released(self, event: ev.WorkloadEvicted, seq: int) -> None:
        self._release(event.workload)

    def _gone(self, event: ev.JobFinished | ev.JobDeleted, seq: int) -> None:
        self._release(event.job)

    def _release(self, key: str) -> None:
        rec = self.state.workloads.get(key)
        if rec is not None and rec.phase is _ADMITTED and rec.admission is not None:
            self._unheld(key, rec.admission.cluster_queue, rec.admission.usage())

    ON: ClassVar[Spec] = {
        ev.WorkloadAdmitted: _admitted,
        ev.WorkloadAdopted: _admitted,
        ev.WorkloadEvicted: _released,
        ev.JobFinished: _gone,
        ev.JobDeleted: _gone,
        **dict.fromkeys(
            (
                *ev.QUEUE_OBJECT_TYPES,
                ev.JobObserved,
                ev.JobReady,
                ev.JobPodsNotCreated,
                ev.JobTampered,
                ev.WorkloadPreempted,
                ev.WorkloadPending,
                ev.WorkloadTimedOut,
                ev.WorkloadRequeued,
                ev.WorkloadActiveChanged,
                ev.JobUnsuspended,
                ev.JobSuspended,
                ev.ActuationFailed,
                ev.ChainBreakAccepted,
                ev.WorkloadEstimated,
            )
        ),
    }

    def figures(self) -> object:
        def clean(d: Mapping[str, Mapping[FlavorResource, Milli]]) -> dict[str, dict[FlavorResource, Milli]]:
            return {k: dict(v) for k, v in d.items() if v}

        return {
            "usage": clean(self.usage),
            "lq_usage": clean(self.lq_usage),
            "lq_admitted": dict(self.lq_admitted),
            "lq_of": dict(self._lq_of),
        }

    # --- reading ---

    def config_tree(self) -> QuotaTree:
        """The engine's quota tree of the current configuration, built once per configuration (the usage in its
        nodes is whatever the last `tree()` loaded)."""
        state = self.state
        generation = state.config_generation
        if self._tree is None or self._tree[0] != generation:
            view = state.view()
            self._tree = (generation, QuotaTree.build(view.cluster_queues, view.cohorts, view.flavors, view.rejected))
        return self._tree[1]

    def tree(self) -> QuotaTree:
        """`config_tree()` with the usage of now loaded."""
        tree = self.config_tree()
        tree.load_usage(self.usage)
        return tree

    def activity(self, name: str) -> Activity:
        """The ClusterQueue's activity: the engine's verdict first (what the cycle does), then its stopPolicy."""
        cq = self.state.cluster_queues[name]
        inactive = self.config_tree().inactive.get(name)
        if inactive is not None:
            if inactive.reason == "FlavorNotFound":
                missing = sorted(
                    {fq.name for g in cq.resource_groups for fq in g.flavors if fq.name not in self.state.flavors}
                )
                condition = f"Can't admit new workloads: references missing ResourceFlavor(s): {', '.join(missing)}"
            else:
                condition = f"Can't admit new workloads: {inactive.message}"
            return Activity("inactive", inactive.reason, inactive.message, condition)
        if cq.stop_policy is not StopPolicy.NONE:
            policy = cq.stop_policy.value
            return Activity("stopped", "Stopped", f"stopPolicy {policy}", f"ClusterQueue is stopped ({policy})")
        return Activity("active", "Ready", None, "Can admit new workloads")

    def admitted(self, name: str) -> int:
        """Admitted workloads holding the ClusterQueue's quota now (being evicted included)."""
        return len(self.state.view().admitted_by_cq.get(name, {}))

    def pending(self, name: str) -> int:
        return len(self.state.view().pending_by_cq.get(name, ()))

    def pending_counts(self, name: str) -> PendingCounts:
        """The ClusterQueue's pending workloads, by status and by reason (from the pending index's runs)."""
        view = self.state.view()
        index = view.pending_index.get(name) if view.pending_index is not None else None
        active = inadmissible = 0
        reasons: dict[str, int] = {}
        if index is not None:
            sticky = len(index.sticky)
            active += sticky
            if sticky:
                reasons[_WAITING.value] = sticky
            for by_reason in index.groups.values():
                for coarse, run in by_reason.items():
                    if coarse is None:
                        active += len(run)
                    else:
                        inadmissible += len(run)
                        kind = coarse[0]
                        why = kind.value if isinstance(kind, PendingReasonKind) else str(kind)
                        reasons[why] = reasons.get(why, 0) + len(run)
        return PendingCounts(active + inadmissible, active, inadmissible, tuple(sorted(reasons.items())))

    def unadmitted(self, name: str) -> tuple[tuple[str, int], ...]:
        """Kueue's `kueue_unadmitted_workloads` of the ClusterQueue (v0.19, pkg/cache/queue/unadmitted_workloads.go):
        its pending workloads by `underlying_cause`, the reason of the `QuotaReserved=False` condition Kueue (and
        admitd's status writer, `domain.reasons`) gives each one: `PendingEvaluation` before a cycle has evaluated
        it, `WaitingForPreemptedWorkloads` while its victims go, else its last reason's; sorted by cause. Every one
        has the `reason` `NoReservation` (the Admitted condition's; admitd has no admission checks)."""
        view = self.state.view()
        index = view.pending_index.get(name) if view.pending_index is not None else None
        causes: dict[str, int] = {}
        if index is None:
            return ()
        if index.sticky:
            cause = reasons.quota_reserved_reason(_WAITING)
            causes[cause] = len(index.sticky)
        for by_reason in index.groups.values():
            for coarse, run in by_reason.items():
                kind = None if coarse is None else coarse[0]
                assert kind is None or isinstance(kind, PendingReasonKind), kind
                cause = reasons.quota_reserved_reason(kind)
                causes[cause] = causes.get(cause, 0) + len(run)
        return tuple(sorted(causes.items()))

    def resources(
        self,
        name: str,
        tree: QuotaTree | None = None,
        lent: Mapping[tuple[str, FlavorResource], Milli] | None = None,
    ) -> list[FRRow]:
        """Per (flavor, resource) of the ClusterQueue: its limits, what it uses, borrows and lends. `tree` (usage
        loaded) and `lent` (`lent_by(tree)`) for a caller asking about many queues at once."""
        tree = self.tree() if tree is None else tree
        node = tree.cqs[name]
        lent = lent_by(tree) if lent is None else lent
        rows: list[FRRow] = []
        for fr in flavor_resources(self.state.cluster_queues[name]):
            limits = node.quotas[fr]
            used = node.usage.get(fr, 0)
            rows.append(
                FRRow(
                    flavor=fr[0],
                    resource=fr[1],
                    nominal=limits.nominal,
                    borrowing_limit=_cap(limits.borrowing_limit),
                    lending_limit=_cap(limits.lending_limit),
                    used=used,
                    borrowed=max(0, used - limits.nominal) if node.parent is not None else 0,
                    lent=lent.get((name, fr), 0),
                )
            )
        return rows

    def local_queues(self, names: Iterable[str] | None = None) -> dict[str, LocalQueueCounts]:
        """Counts of the LocalQueues `names` (default: every LocalQueue): pending (routed to its ClusterQueue or
        not), of those active or inadmissible, admitted through it and its usage."""
        state = self.state
        view = state.view()
        wanted = set(state.local_queues if names is None else names)
        out = {
            lq: LocalQueueCounts(0, 0, 0, self.lq_admitted.get(lq, 0), dict(self.lq_usage.get(lq, {}))) for lq in wanted
        }
        cqs = {state.local_queues[lq].cluster_queue for lq in wanted if lq in state.local_queues}
        for cq in cqs:
            for p in view.pending_by_cq.get(cq, ()):
                c = out.get(p.local_queue)
                if c is not None:
                    c.pending += 1
                    if p.last_reason is None or p.last_reason.kind is _WAITING:
                        c.active += 1
                    else:
                        c.inadmissible += 1
        for p in view.pending_unrouted.values():
            c = out.get(p.local_queue)
            if c is not None:
                c.pending += 1
                c.inadmissible += 1
        return out


def lent_by(tree: QuotaTree) -> dict[tuple[str, FlavorResource], Milli]:
    """Per ClusterQueue and (flavor, resource): its share of what others in its tree borrow.

    Kueue does not attribute borrowing to lenders. Here the tree's borrowing beyond the cohorts' own quota is split
    over the queues with unused, lendable nominal quota in proportion to that unused quota (exact when one queue
    lends). Integer milli-units, rounded down.
    """
    out: dict[tuple[str, FlavorResource], Milli] = {}
    by_root: dict[int, list[Node]] = {}
    for node in tree.cqs.values():
        if node.parent is not None:
            by_root.setdefault(id(node.root()), []).append(node)
    cohort_own: dict[int, dict[FlavorResource, Milli]] = {}
    for co in tree.cohorts.values():
        acc = cohort_own.setdefault(id(co.root()), {})
        for fr, own in co.quotas.items():
            acc[fr] = acc.get(fr, 0) + own.nominal
    for root_id, members in by_root.items():
        frs = {fr for n in members for fr in n.quotas}
        for fr in frs:
            borrowed = sum(max(0, n.usage.get(fr, 0) - n.quotas[fr].nominal) for n in members if fr in n.quotas)
            borrowed = max(0, borrowed - cohort_own.get(root_id, {}).get(fr, 0))
            if not borrowed:
                continue
            lendable: dict[str, Milli] = {}
            for n in members:
                lim = n.quotas.get(fr)
                if lim is None:
                    continue
                free = max(0, lim.nominal - n.usage.get(fr, 0))
                if lim.lending_limit is not None:
                    free = min(free, lim.lending_limit)
                if free:
                    lendable[n.name] = free
            total = sum(lendable.values())
            if not total:
                continue
            for name, free in lendable.items():
                out[(name, fr)] = min(free, borrowed * free // total)
    return out
