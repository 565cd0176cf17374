"""Quota figures of one moment's state: Kueue's quota tree (`daemon.domain.quota`) with that moment's usage.

`queues` gives one row per ClusterQueue (`admitd queues`); `flavor_analysis` says, per flavor a pending job could
use, what is free, what could be borrowed and what stops it (`admitd explain`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from daemon.domain.flavors import incompatibility
from daemon.domain.model import FlavorResource, Milli, Workload
from daemon.domain.quota import (
    UNLIMITED,
    Node,
    QuotaTree,
    available,
    cq_available,
    potential_available,
)
from daemon.domain.state import State
from daemon.views import queues as views
from daemon.views.queues import FRRow

__all__ = [
    "FRRow",
    "FlavorFit",
    "QueueRow",
    "ResourceFit",
    "flavor_analysis",
    "flavor_resources",
    "in_tree",
    "loaded_tree",
    "queues",
    "requests_of",
]


def loaded_tree(state: State) -> QuotaTree:
    """The quota tree with every admitted workload's usage (evicting ones included: they hold quota until gone)."""
    return views.Queues.of(state).tree()


def in_tree(tree: QuotaTree, node: Node) -> list[str]:
    """Names of the ClusterQueues in `node`'s root tree (itself alone without a cohort)."""
    root = node.root()
    return [name for name, n in tree.cqs.items() if n.root() is root]


def flavor_resources(state: State, cq_name: str) -> list[FlavorResource]:
    """The ClusterQueue's (flavor, resource) pairs in its own order: resource groups, flavors, resources."""
    return views.flavor_resources(state.cluster_queues[cq_name])


@dataclass(slots=True)
class QueueRow:
    name: str
    cohort: str | None
    status: str  # active | inactive | stopped
    status_message: str | None
    pending: int
    admitted: int
    resources: list[FRRow] = field(default_factory=list)


def _cap(v: Milli | None) -> Milli | None:
    return None if v is None or v >= UNLIMITED else v


def queues(
    state: State, names: Iterable[str] | None = None, pending_counts: Mapping[str, int] | None = None
) -> list[QueueRow]:
    """One row per ClusterQueue (`names`, default all), rendering `views.queues` (the figures /metrics and the
    ClusterQueue status show). `pending_counts`: each queue's pending count, for a state that does not hold every
    pending workload (`daemon.query.moment.PartialState`); default: counted in `state`."""
    q = views.Queues.of(state)
    tree = q.tree()
    lent = views.lent_by(tree)
    rows: list[QueueRow] = []
    for name in sorted(state.cluster_queues) if names is None else names:
        activity = q.activity(name)
        rows.append(
            QueueRow(
                name=name,
                cohort=state.cluster_queues[name].cohort,
                status=activity.status,
                status_message=activity.message,
                pending=q.pending(name) if pending_counts is None else pending_counts.get(name, 0),
                admitted=q.admitted(name),
                resources=q.resources(name, tree, lent),
            )
        )
    return rows


@dataclass(slots=True)
class ResourceFit:
    resource: str
    requested: Milli
    nominal: Milli
    borrowing_limit: Milli | None
    used: Milli
    free_own: Milli  # unused nominal quota of the ClusterQueue
    available: Milli  # what it can use now, borrowing included, within its borrowing limit
    max_possible: Milli  # the most it could ever hold (no usage anywhere)
    cohort_free: Milli | None  # what the rest of the cohort has unused for it to borrow (None: no cohort)
    borrow_left: Milli | None  # how much more the borrowing limit allows (None: unlimited or no cohort)
    verdict: str  # fits | short | never


@dataclass(slots=True)
class FlavorFit:
    flavor: str
    unsuitable: str | None
    resources: list[ResourceFit]


def requests_of(wl: Workload) -> dict[str, Milli]:
    """Total requests per resource over the workload's pod sets (count x per-pod request)."""
    out: dict[str, Milli] = {}
    for ps in wl.pod_sets:
        for res, amount in ps.requests.items():
            if amount:
                out[res] = out.get(res, 0) + amount * ps.count
    return out


def flavor_analysis(state: State, tree: QuotaTree, cq_name: str, wl: Workload) -> list[FlavorFit]:
    """For every flavor of the ClusterQueue that covers some of the workload's requests: the figures."""
    cq = state.cluster_queues[cq_name]
    node = tree.cqs[cq_name]
    requests = requests_of(wl)
    out: list[FlavorFit] = []
    for group in cq.resource_groups:
        wanted = [r for r in group.covered_resources if requests.get(r)]
        if not wanted:
            continue
        for fq in group.flavors:
            rf = state.flavors.get(fq.name)
            if rf is None:
                unsuitable: str | None = f"ResourceFlavor {fq.name} does not exist"
            else:
                unsuitable = next(
                    (f"pod set {ps.name}: {why}" for ps in wl.pod_sets if (why := incompatibility(rf, ps))), None
                )
            fits: list[ResourceFit] = []
            for res in wanted:
                fr = (fq.name, res)
                lim = node.quotas.get(fr)
                if lim is None:
                    continue
                used = node.usage.get(fr, 0)
                need = requests[res]
                avail = cq_available(node, fr)
                most = potential_available(node, fr)
                bl = _cap(lim.borrowing_limit)
                if node.parent is None:
                    cohort_free, borrow_left = None, None
                else:
                    # What the rest of the cohort could lend: the parent's available capacity counts this
                    # queue's own unused nominal quota too, which is not borrowing.
                    cohort_free = max(0, available(node.parent, fr) - max(0, lim.nominal - used))
                    borrow_left = None if bl is None else max(0, bl - max(0, used - lim.nominal))
                verdict = "never" if need > most else ("fits" if need <= avail else "short")
                fits.append(
                    ResourceFit(
                        resource=res,
                        requested=need,
                        nominal=lim.nominal,
                        borrowing_limit=bl,
                        used=used,
                        free_own=max(0, lim.nominal - used),
                        available=avail,
                        max_possible=most,
                        cohort_free=cohort_free,
                        borrow_left=borrow_left,
                        verdict=verdict,
                    )
                )
            out.append(FlavorFit(flavor=fq.name, unsuitable=unsuitable, resources=fits))
    return out
