"""Phase 1 of the cycle: who takes part (Kueue's queue manager and the prechecks of `nominate`).

Unrouted workloads get `LocalQueueNotFound` / `ClusterQueueNotFound`. Queues with `stopPolicy: HoldAndDrain`
(ClusterQueue or LocalQueue) preempt their admitted workloads (`preemptor=None`). Pending workloads of stopped
queues get `QueueStopped`; of inactive ClusterQueues (unknown flavor, cohort cycle) `ClusterQueueInactive`. Every
other ClusterQueue becomes a `walk.Queue`; a workload whose LocalQueue is stopped or whose namespace the
ClusterQueue does not select is no candidate at all (`Router.precheck`).
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.domain.admission import reasons
from daemon.domain.admission.decisions import Decisions
from daemon.domain.admission.ledger import Ledger
from daemon.domain.admission.memo import InadmissibleMemo
from daemon.domain.admission.optimisations import Optimisations
from daemon.domain.admission.walk import Queue, Runs, sticky_first
from daemon.domain.config import EngineConfig
from daemon.domain.flavors import FlavorAssigner
from daemon.domain.model import (
    ClusterQueue,
    PendingReason,
    PreemptionPolicy,
    QueueingStrategy,
    StopPolicy,
    selects,
)
from daemon.domain.quota import Node, QuotaTree
from daemon.domain.view import AdmittedWorkload, ClusterView, PendingIndex, PendingWorkload


class Router:
    __slots__ = ("config", "ledger", "memo", "ns_match", "opt", "out", "tree", "view")

    def __init__(
        self,
        view: ClusterView,
        config: EngineConfig,
        opt: Optimisations,
        ledger: Ledger,
        out: Decisions,
        memo: InadmissibleMemo | None,
    ) -> None:
        self.view = view
        self.config = config
        self.opt = opt
        self.ledger = ledger
        self.tree: QuotaTree = ledger.tree
        self.out = out
        self.memo = memo
        self.ns_match: dict[tuple[str, str], bool] = {}  # (ClusterQueue, namespace) -> selected

    def unrouted(self) -> None:
        view = self.view
        for key in sorted(view.pending_unrouted):
            pw = view.pending_unrouted[key]
            lq = view.local_queues.get(pw.local_queue) if pw.local_queue else None
            self.out.pending(pw, None, reasons.unrouted(pw, lq))

    def drain(self) -> None:
        """HoldAndDrain: the stopped queues' admitted workloads are preempted, by nobody."""
        view = self.view
        drains: list[tuple[AdmittedWorkload, str]] = []
        for name in sorted(view.cluster_queues):
            cq = view.cluster_queues[name]
            admitted = view.admitted_by_cq.get(name, {})
            if cq.stop_policy is StopPolicy.HOLD_AND_DRAIN:
                drains.extend((admitted[k], "ClusterQueueStopped") for k in sorted(admitted))
        for lq_key in sorted(view.local_queues):
            lq = view.local_queues[lq_key]
            if lq.stop_policy is not StopPolicy.HOLD_AND_DRAIN:
                continue
            admitted = view.admitted_by_cq.get(lq.cluster_queue, {})
            for k in sorted(admitted):
                wl = admitted[k].workload
                if wl.namespace == lq.namespace and wl.queue_name == lq.name:
                    drains.append((admitted[k], "LocalQueueStopped"))
        snap = self.ledger.snap
        for aw, reason in drains:
            if aw.evicting or aw.key in snap.removed:
                continue
            self.ledger.claim(aw)
            self.out.preempted(aw, snap.usage_of(aw), None, None, reason, "stopPolicy=HoldAndDrain")

    def queues(self) -> list[Queue]:
        """Every ClusterQueue's walk, by name; stopped and inactive ones get their reasons here and take no part."""
        view = self.view
        queues: list[Queue] = []
        for name in sorted(view.cluster_queues):
            cq = view.cluster_queues[name]
            seq = view.pending_by_cq.get(name, ())
            node = self.tree.cqs[name]
            inactive = self.tree.inactive.get(name)
            if inactive is not None or cq.stop_policy is not StopPolicy.NONE:
                if inactive is not None:
                    reason = reasons.cluster_queue_inactive(name, inactive)
                else:
                    reason = reasons.cluster_queue_stopped(name, cq)
                if self.queue_unchanged(name, node, cq):
                    continue
                emitted = False
                for pw in seq:
                    emitted |= self.out.pending(pw, name, reason)
                if not emitted:
                    self.record_queue(name, node, cq)
                continue
            group_of = {r: i for i, g in enumerate(cq.resource_groups) for r in g.covered_resources}
            assigner = FlavorAssigner(
                cq=cq,
                node=node,
                flavors=view.flavors,
                group_of=group_of,
                fair_sharing=self.config.fair_sharing,
                oracle=None,
            )
            strict = cq.queueing_strategy is QueueingStrategy.STRICT_FIFO
            index = view.pending_index.get(name) if view.pending_index is not None else None
            unchanged = self.queue_unchanged(name, node, cq)
            q = Queue(name=name, cq=cq, node=node, seq=seq, assigner=assigner, strict=strict, index=index)
            if not strict and not unchanged:
                if self.opt.runs and index is not None and len(index) == len(seq) and self._walk_by_runs(q, index):
                    q.seq = list(index.sticky)
                    q.runs = Runs(index)
                else:
                    q.seq = sticky_first(seq)
            if not seq or unchanged:
                q.done = True
            queues.append(q)
        return queues

    def _walk_by_runs(self, q: Queue, index: PendingIndex) -> bool:
        """Can this queue's walk step over runs? Not when some member steps aside for its LocalQueue or namespace
        (`precheck`), nor when the outcome depends on each workload's age (LowerOrNewerEqualPriority)."""
        if q.cq.preemption.within_cluster_queue is PreemptionPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY:
            return False
        return all(self._precheck_lq(q, lq, lq.partition("/")[0]) is None for lq in index.local_queues)

    def precheck(self, q: Queue, pw: PendingWorkload) -> PendingReason | None:
        """A reason that makes the workload no candidate at all (it steps aside, even in StrictFIFO)."""
        return self._precheck_lq(q, pw.local_queue, pw.workload.namespace)

    def _precheck_lq(self, q: Queue, lq_key: str, ns: str) -> PendingReason | None:
        lq = self.view.local_queues.get(lq_key)
        if lq is not None and lq.stop_policy is not StopPolicy.NONE:
            return reasons.local_queue_stopped(lq)
        key = (q.name, ns)
        ok = self.ns_match.get(key)
        if ok is None:
            namespace = self.view.namespaces.get(ns)
            ok = selects(q.cq.namespace_selector, namespace.labels if namespace is not None else {})
            self.ns_match[key] = ok
        if not ok:
            return reasons.namespace_not_selected(ns, q.name)
        return None

    # --- the unchanged-queue memo (`Optimisations.memo`) ------------------------------------------------------------

    def queue_unchanged(self, name: str, node: Node, cq: ClusterQueue) -> bool:
        """Engine only: this queue offered nothing and wrote nothing last time, and nothing it depends on changed."""
        pending_version = self.view.pending_version
        if self.memo is None or pending_version is None or self.ledger.snap.version(node.tree) != 0:
            return False
        generation = self.view.generation.get(node.tree, 0)
        return self.memo.queue_unchanged(name, cq, generation, pending_version.get(name, -1))

    def record_queue(self, name: str, node: Node, cq: ClusterQueue) -> None:
        pending_version = self.view.pending_version
        if self.memo is None or pending_version is None:
            return
        self.memo.record_queue(name, cq, self.view.generation.get(node.tree, 0), pending_version.get(name, -1))

    def remember(self, queues: Sequence[Queue]) -> None:
        """After the call: a queue that offered and wrote nothing in an untouched tree is skipped next time."""
        if self.memo is None:
            return
        snap = self.ledger.snap
        for q in queues:
            quiet = q.done and not q.acted and not q.emitted
            if quiet and not q.volatile and snap.version(q.node.tree) == 0:
                self.record_queue(q.name, q.node, q.cq)
            elif q.volatile or not quiet:
                self.memo.forget_queue(q.name)
