"""Issue 26's families (`families.ANSWERS_FAMILIES`): the preemption ledger's per-queue totals and stuck detection,
rendered whole at each render from the fold and the ledger projection (`views.ledger.Preemptions(entries=False)`,
fed with the metrics' other projections).

- `admitd_preemption_*_total{cluster_queue, rule}`: the ledger's totals of the victims of each ClusterQueue, by
  the preemption's reason (`InClusterQueue`, `InCohortReclamation`, ...), and the pod-hours and GPU-hours their
  runs had done (`admitd preemptions` per preemption).
- `admitd_pending_unconsidered_since_timestamp_seconds{cluster_queue}`: an admission cycle writes a reason
  (`workload.pending`) or an admission for every pending workload it evaluates; one with neither since it entered
  the queue (created, or requeued after an eviction) has not been considered since then. The gauge is when the
  longest-waiting such workload entered (log time, seconds); `time() - it` is how long it has gone unconsidered.
- `admitd_pending_fitting_workloads{cluster_queue}`: pending workloads (not waiting for victims they chose) whose
  whole request, by resource, is at most what the ClusterQueue's nominal quota has unused in one of its flavors.
  Node selectors, taints and the other pod-level rules are not looked at: a count above zero for long while the
  queue admits nothing is the signal (the `AdmitdQuotaFreeNothingAdmitted` alert), not a proof.

Cost: one pass over each ClusterQueue's pending groups (one per shape and priority, not per workload).
"""

from __future__ import annotations

from daemon.domain.model import ClusterQueue, FlavorResource
from daemon.domain.state import State
from daemon.metrics.families import ANSWERS_FAMILIES
from daemon.metrics.text import esc, num
from daemon.views.ledger import Preemptions

_HEADS = {f.name: f.head().decode() for f in ANSWERS_FAMILIES}
MS_PER_HOUR = 3_600_000


def _free_by_flavor(cq: ClusterQueue, usage: dict[FlavorResource, int]) -> list[dict[str, int]]:
    return [
        {rq.name: rq.nominal - usage.get((fq.name, rq.name), 0) for rq in fq.resources}
        for g in cq.resource_groups
        for fq in g.flavors
    ]


def queue_figures(state: State, usage: dict[str, dict[FlavorResource, int]]) -> dict[str, tuple[int | None, int]]:
    """Per ClusterQueue: (when its longest-unconsidered pending workload entered, ms, or None; how many pending
    workloads fit its unused nominal quota). `usage`: each queue's quota in use (`views.queues.Queues.usage`)."""
    view = state.view()
    index_of = view.pending_index
    out: dict[str, tuple[int | None, int]] = {}
    for name, cq in state.cluster_queues.items():
        index = index_of.get(name) if index_of is not None else None
        if index is None:
            out[name] = (None, 0)
            continue
        flavors = _free_by_flavor(cq, usage.get(name, {}))
        oldest: int | None = None
        fitting = 0
        for by_reason in index.groups.values():
            first = None
            members = 0
            for coarse, run in by_reason.items():
                if not run:
                    continue
                members += len(run)
                first = first or run[0]
                if coarse is None:  # no reason since it entered: no cycle has evaluated it
                    entered = run[0].queue_order_at  # a run is in queue order: one priority, then oldest first
                    oldest = entered if oldest is None else min(oldest, entered)
            if first is None:
                continue
            need: dict[str, int] = {}
            for ps in first.workload.pod_sets:
                for resource, amount in ps.requests.items():
                    need[resource] = need.get(resource, 0) + amount * ps.count
            if need and any(all(free.get(r, -1) >= v for r, v in need.items()) for free in flavors):
                fitting += members
        out[name] = (oldest, fitting)
    return out


def answers_text(state: State, ledger: Preemptions, usage: dict[str, dict[FlavorResource, int]]) -> str:
    """The exposition text of `ANSWERS_FAMILIES`."""
    victims, pods, gpus = (
        [_HEADS["admitd_preemption_victims_total"]],
        [_HEADS["admitd_preemption_lost_pod_hours_total"]],
        [_HEADS["admitd_preemption_lost_gpu_hours_total"]],
    )
    for (cq, rule), (n, pod_ms, gpu_milli_ms) in sorted(ledger.totals.items()):
        labels = f'cluster_queue="{esc(cq)}",rule="{esc(rule)}"'
        victims.append(f"admitd_preemption_victims_total{{{labels}}} {n}.0\n")
        pods.append(f"admitd_preemption_lost_pod_hours_total{{{labels}}} {num(pod_ms / MS_PER_HOUR)}\n")
        gpus.append(f"admitd_preemption_lost_gpu_hours_total{{{labels}}} {num(gpu_milli_ms / 1000 / MS_PER_HOUR)}\n")
    unconsidered = [_HEADS["admitd_pending_unconsidered_since_timestamp_seconds"]]
    fitting = [_HEADS["admitd_pending_fitting_workloads"]]
    for cq, (oldest, fits) in sorted(queue_figures(state, usage).items()):
        label = f'cluster_queue="{esc(cq)}"'
        if oldest is not None:
            unconsidered.append(
                f"admitd_pending_unconsidered_since_timestamp_seconds{{{label}}} {num(oldest / 1000)}\n"
            )
        fitting.append(f"admitd_pending_fitting_workloads{{{label}}} {fits}.0\n")
    return "".join(victims + pods + gpus + unconsidered + fitting)
