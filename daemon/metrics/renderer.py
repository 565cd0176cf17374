"""The exposition text of a `FoldedMetrics`, kept per family and per queue and rendered again only where an event
touched a queue (see `Renderer`). It renders the projections of daemon/views and keeps no fold of its own: the
figures are `views.queues` (usage, pending, admitted, activity) and `views.kueue_counters` (Kueue's counters).

Exposition is rendered here rather than by `prometheus_client.generate_latest`: that took 1.4 s for 52,000 samples
on the development machine (1,000 ClusterQueues x 3 priority classes of histograms), against a 50 ms target. The
text of each (metric, ClusterQueue) and (metric, LocalQueue) is kept and rendered again only when an event touched
that queue, and that rendering is done as events come (`admitd run`: on its event loop, `metrics.fed`; a log file's
reader: in a thread, `LogMetrics(follow_every=...)`), so that a scrape joins kept text (5 ms for 1,000
ClusterQueues, bench/RESULTS.md). One `Renderer` per `FoldedMetrics`: a render consumes the fold's dirty marks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from daemon.domain.fairsharing import dominant_resource_share
from daemon.domain.model import ClusterQueue, FlavorResource, ResourceQuota
from daemon.domain.quota import Node, QuotaTree
from daemon.domain.reasons import NO_RESERVATION
from daemon.domain.state import State
from daemon.metrics.answers import answers_text
from daemon.metrics.families import (
    COHORT_FAMILIES,
    FAIR_SHARING_FAMILIES,
    GROUPS,
    LOCAL_QUEUE,
    PER_QUEUE,
)
from daemon.metrics.folded import FoldedMetrics
from daemon.metrics.live import REPLAY_DURATION, STARTUP_REPLAY
from daemon.metrics.text import amount, esc, num, rename
from daemon.views.kueue_counters import Hist


def weighted_share(node: Node) -> float:
    """Kueue's PreciseWeightedShare of a ClusterQueue or Cohort node with usage loaded: the dominant resource share
    (thousandths) over the weight; NaN for a weight of 0 that borrows (Kueue: +Inf, reported as NaN)."""
    drs = dominant_resource_share(node)
    infinite, ratio = drs.key
    return math.nan if infinite else float(ratio)


_LES: dict[tuple[float, ...], list[str]] = {}  # buckets -> their `le` label values


def _les(buckets: tuple[float, ...]) -> list[str]:
    les = _LES.get(buckets)
    if les is None:
        les = _LES[buckets] = [num(b) for b in buckets] + ["+Inf"]
    return les


class _Context:
    """What one render's fragments share, computed at most once per render."""

    def __init__(self, fm: FoldedMetrics, role: str) -> None:
        self.fm = fm
        self.role = role
        self.view = fm.state.view()
        self._evicted: dict[str, list[tuple[tuple[str, str, str, str], int]]] | None = None
        self._preempted: dict[str, list[tuple[tuple[str, str], int]]] | None = None

    def pcs(self, cq: str) -> list[str]:
        """The queue's priority_class labels: those of its admissions and finishes (wait and execution histograms
        have the same labels as those counters), kept by the fold as they appear."""
        return sorted(self.fm.counters.priority_classes.get(cq, ()))

    def evicted(self, cq: str) -> list[tuple[tuple[str, str, str, str], int]]:
        if self._evicted is None:
            self._evicted = {}
            for k, v in self.fm.counters.evicted.items():
                self._evicted.setdefault(k[0], []).append((k, v))
        return self._evicted.get(cq, [])

    def preempted(self, cq: str) -> list[tuple[tuple[str, str], int]]:
        if self._preempted is None:
            self._preempted = {}
            for k, v in self.fm.counters.preempted.items():
                self._preempted.setdefault(k[0], []).append((k, v))
        return self._preempted.get(cq, [])


_LQ_WAIT = b"kueue_local_queue_admission_wait_time_seconds"
_LQ_QR_WAIT = b"kueue_local_queue_quota_reserved_wait_time_seconds"
_USAGE = b"kueue_cluster_queue_resource_usage"
_RESERVATION = b"kueue_cluster_queue_resource_reservation"


class Renderer:
    """The exposition text of a `FoldedMetrics`. Each family is kept as a list of byte strings, one per
    ClusterQueue (or LocalQueue) in name order after the family's header; an event marks (queue, group) dirty
    (`FoldedMetrics.dirty`, `lq_dirty`) and a render replaces only those queues' entries, so a scrape costs the
    changed queues' text plus one join. A configuration change, or a queue appearing or going, renders all again.
    Rendering everything from scratch gives the same bytes (tests compare the two after random events)."""

    def __init__(
        self, replica_role: str = "leader", *, local_queue_metrics: bool = False, fair_sharing: bool = False
    ) -> None:
        self.role = esc(replica_role)
        self.local_queue_metrics = local_queue_metrics
        self.fair_sharing = fair_sharing  # Kueue's *_weighted_share families (set before the first render)
        self._names: set[str] = set()
        self._pos: dict[str, int] = {}  # cluster queue -> its index in every family's list (0 is the header)
        self._pieces: dict[str, list[bytes]] = {}  # family -> [header, text of queue 1, text of queue 2, ...]
        self._lq_names: set[str] = set()
        self._lq_pos: dict[str, int] = {}
        self._lq_pieces: dict[str, list[bytes]] = {}
        self._labels: dict[tuple[str, str], str] = {}  # (cluster queue, priority class) -> label set ("" for none)
        self._tree: QuotaTree | None = None
        self._in_cycles: set[str] = set()
        self._cq_objects: Mapping[str, ClusterQueue] = {}
        self._cohorts = b""
        # The pending figures of each queue as last rendered, by the state's version of its pending workloads
        # (`ClusterView.pending_version`, bumped whenever they change): the counters need not mark a queue at each
        # pending reason and observed job (60% of a busy log's events) for `refresh` to find it.
        self._pending_seen: dict[str, int | None] = {}
        self._versions_of: object = None  # the versions' mapping those are of (another state's: all afresh)
        self._hist_templates: dict[tuple[str, str], bytes] = {}  # (family, labels) -> its lines with %-slots
        self._hist_text: dict[tuple[str, str], tuple[int, bytes]] = {}  # (family, labels) -> (observations, text)
        self._twin_text: dict[tuple[str, str], tuple[bytes, bytes]] = {}  # (family, labels) -> (text, its twin's)
        self._resource_labels: dict[str, tuple[ClusterQueue, list[tuple[FlavorResource, str, ResourceQuota]]]] = {}

    def render(
        self, fm: FoldedMetrics, reader_info: Callable[[], Iterable[str]] | None = None, *, extra: bytes = b""
    ) -> bytes:
        """The whole exposition: what `refresh` leaves, joined, with the global figures, `reader_info`'s and
        `extra` (the live instruments) at the end."""
        out = self.parts(fm)
        if reader_info is not None:
            out.append("".join(reader_info()).encode())
        out.append(extra)
        return b"".join(out)

    def parts(self, fm: FoldedMetrics) -> list[bytes]:
        """`render`'s text before the reader's figures and the live instruments, as the kept pieces (not joined):
        what must be read where `fm` is folded (`metrics.fed`: on the event loop; the join can be elsewhere)."""
        self.refresh(fm)
        out: list[bytes] = []
        for group_families in GROUPS.values():
            for fam_name in group_families:
                out += self._pieces[fam_name]
        out.append(self._cohorts)
        out.append(self._global(fm).encode())
        out.append(answers_text(fm.state, fm.ledger, fm.queues.usage).encode())  # issue 26: ledger totals, stuck
        if self.local_queue_metrics:
            for f in LOCAL_QUEUE:
                out += self._lq_pieces[f.name]
        return out

    def reading(self, fm: FoldedMetrics) -> None:
        """`fm` reads another state from now on, equal to the one it read (`views.follow.CatchingUp.hand_over`): the
        queue objects kept for the labels are that state's."""
        self._cq_objects = fm.state.cluster_queues

    def set_role(self, replica_role: str) -> None:
        """Kueue's `replica_role` label from the next render on (leader, follower, standalone): every label set
        changes, so every fragment is rendered again."""
        role = esc(replica_role)
        if role == self.role:
            return
        self.role = role
        self._labels.clear()
        self._hist_text.clear()
        self._twin_text.clear()
        self._hist_templates.clear()
        self._resource_labels.clear()
        self._tree = None  # a render from scratch (as after a configuration change)

    def refresh(self, fm: FoldedMetrics) -> None:
        """Render again what changed since the last call (the queues `fm` marked dirty, all after a configuration
        change): the work of a render minus the join, so that a process can do it as events arrive rather than
        when it is scraped (`FedMetrics.refresh`, `LogMetrics(follow_every=...)`)."""
        state = fm.state
        config = fm.config_changed or self._tree is None  # another renderer may have seen the change first
        if config:
            self._tree = fm.queues.config_tree()
            roots = {r.name for r in self._tree.roots}
            self._in_cycles = {n for n, c in self._tree.cohorts.items() if c.parent is None and n not in roots}
            self._cq_objects = state.cluster_queues
            fm.config_changed = False
        names = fm.counters.counted_queues.union(state.cluster_queues)
        ctx = _Context(fm, self.role)
        usage_changed = config
        if config or names != self._names:
            if self._names - names:  # rare (a queue deleted): start the label and text caches afresh
                self._labels.clear()
                self._hist_text.clear()
                self._twin_text.clear()
                self._hist_templates.clear()
                self._resource_labels.clear()
            self._names = names
            order = sorted(names)
            self._pos = {n: i for i, n in enumerate(order, 1)}
            self._pieces = {f.name: [f.head(), *(b"" for _ in order)] for f in PER_QUEUE}
            todo: Iterable[tuple[str, str]] = [(n, g) for n in order for g in GROUPS]
        else:
            todo = [(n, g) for n, g in fm.dirty if n in names]
        todo = self._pending_changed(state, names, todo)
        fm.dirty.clear()
        pieces, pos = self._pieces, self._pos
        for name, group in todo:
            at = pos[name]
            texts = self._group(ctx, name, group)
            for fam_name in GROUPS[group]:
                pieces[fam_name][at] = texts.get(fam_name, b"")
            usage_changed = usage_changed or group == "admitted"
        if usage_changed:
            self._cohorts = self._cohort_text(ctx)
        if self.local_queue_metrics:
            self._local_queues(ctx, config)
        else:
            fm.counters.lq_dirty.clear()

    def _pending_changed(
        self, state: State, names: set[str], todo: Iterable[tuple[str, str]]
    ) -> Iterable[tuple[str, str]]:
        """`todo` with the pending group of every queue whose pending workloads changed since the last refresh."""
        versions = state.view().pending_version or {}
        seen = self._pending_seen
        if versions is not self._versions_of:
            self._versions_of = versions
            seen.clear()
            todo = [*todo, *((n, "pending") for n in names)]
        else:
            todo = list(todo)
        for n in names:
            v = versions.get(n)
            if seen.get(n, -1) != v:
                seen[n] = v
                todo.append((n, "pending"))
        return dict.fromkeys(todo)  # each once, in order

    def _label(self, cq: str, pc: str | None) -> str:
        """`replica_role,cluster_queue[,priority_class]` of a queue, escaped once and kept."""
        key = (cq, "\0" if pc is None else pc)
        text = self._labels.get(key)
        if text is None:
            text = f'replica_role="{self.role}",cluster_queue="{esc(cq)}"'
            if pc is not None:
                text += f',priority_class="{esc(pc)}"'
            self._labels[key] = text
        return text

    def _hist(self, name: str, labels: str, h: Hist) -> bytes:
        """A histogram's lines; rendered again only when it has new observations (a queue's fragment is dirty
        when any of its figures changed, most of its histograms usually did not)."""
        key = (name, labels)
        cached = self._hist_text.get(key)
        if cached is not None and cached[0] == h.n:
            return cached[1]
        template = self._hist_templates.get(key)
        if template is None:
            lab = labels.replace("%", "%%")
            text = "".join(f'{name}_bucket{{{lab},le="{le}"}} %d\n' for le in _les(h.buckets))
            text += f"{name}_sum{{{lab}}} %s\n{name}_count{{{lab}}} %d\n"
            template = self._hist_templates[key] = text.encode()
        out = template % (*h.counts, h.n, num(h.total).encode(), h.n)
        self._hist_text[key] = (h.n, out)
        return out

    def _hist_twins(self, name: str, twin: bytes, labels: str, h: Hist) -> tuple[bytes, bytes]:
        """`_hist`'s text and the same lines under the family `twin` (same observations), both kept until the
        histogram has new observations."""
        text = self._hist(name, labels, h)
        cached = self._twin_text.get((name, labels))
        if cached is not None and cached[0] is text:
            return text, cached[1]
        renamed = rename(text, name.encode(), twin)
        self._twin_text[(name, labels)] = (text, renamed)
        return text, renamed

    def _group(self, ctx: _Context, name: str, group: str) -> dict[str, bytes]:
        """The texts of `group`'s families for one ClusterQueue (`GROUP_TEXT`)."""
        return GROUP_TEXT[group](self, ctx, name, ctx.fm.state.cluster_queues.get(name))

    def _pending(self, ctx: _Context, name: str, cq: ClusterQueue | None) -> dict[str, bytes]:
        if cq is None:
            return {}
        base = self._label(name, None)
        counts = ctx.fm.queues.pending_counts(name)
        return {
            "kueue_pending_workloads": (
                f'kueue_pending_workloads{{{base},status="active"}} {counts.active}\n'
                f'kueue_pending_workloads{{{base},status="inadmissible"}} {counts.inadmissible}\n'
            ).encode(),
            "kueue_unadmitted_workloads": "".join(
                f'kueue_unadmitted_workloads{{{base},reason="{NO_RESERVATION}",underlying_cause="{cause}"}} {n}\n'
                for cause, n in ctx.fm.queues.unadmitted(name)
            ).encode(),
        }

    def _admitted(self, ctx: _Context, name: str, cq: ClusterQueue | None) -> dict[str, bytes]:
        if cq is None:
            return {}
        base = self._label(name, None)
        admitted = ctx.fm.queues.admitted(name)
        usage = ctx.fm.queues.usage.get(name, {})
        lines = "".join(
            f"kueue_cluster_queue_resource_usage{{{lab}}} {num(usage.get(fr, 0) / 1000)}\n"
            for fr, lab, _ in self._resources(cq)
        ).encode()
        return {
            "kueue_admitted_active_workloads": f"kueue_admitted_active_workloads{{{base}}} {admitted}\n".encode(),
            "kueue_reserving_active_workloads": f"kueue_reserving_active_workloads{{{base}}} {admitted}\n".encode(),
            "kueue_cluster_queue_resource_usage": lines,
            "kueue_cluster_queue_resource_reservation": rename(lines, _USAGE, _RESERVATION),
        }

    def _config(self, ctx: _Context, name: str, cq: ClusterQueue | None) -> dict[str, bytes]:
        if cq is None:
            return {}
        base = self._label(name, None)
        status = ctx.fm.queues.activity(name).kueue_status
        parent, root = self._parent_and_root(name, is_cq=True)
        nominal, borrowing, lending = [], [], []
        for _, lab, rq in self._resources(cq):
            nominal.append(f"kueue_cluster_queue_nominal_quota{{{lab}}} {num(amount(rq.nominal))}\n")
            bl = math.inf if rq.borrowing_limit is None else amount(rq.borrowing_limit)
            ll = math.inf if rq.lending_limit is None else amount(rq.lending_limit)
            borrowing.append(f"kueue_cluster_queue_borrowing_limit{{{lab}}} {num(bl)}\n")
            lending.append(f"kueue_cluster_queue_lending_limit{{{lab}}} {num(ll)}\n")
        return {
            "kueue_cluster_queue_status": "".join(
                f'kueue_cluster_queue_status{{{base},status="{s}"}} {1 if s == status else 0}\n'
                for s in ("pending", "active", "terminated")
            ).encode(),
            "kueue_cluster_queue_info": (
                f'kueue_cluster_queue_info{{{base},parent_cohort="{esc(parent)}",root_cohort="{esc(root)}"}} 1\n'
            ).encode(),
            "kueue_cluster_queue_nominal_quota": "".join(nominal).encode(),
            "kueue_cluster_queue_borrowing_limit": "".join(borrowing).encode(),
            "kueue_cluster_queue_lending_limit": "".join(lending).encode(),
        }

    def _admissions(self, ctx: _Context, name: str, cq: ClusterQueue | None) -> dict[str, bytes]:
        counters = ctx.fm.counters
        adm, qr, wait, qrw = [], [], [], []
        for pc in ctx.pcs(name):
            label = (name, pc)
            lab = self._label(name, pc)
            n = counters.admitted.get(label)
            if n is not None:
                adm.append(f"kueue_admitted_workloads_total{{{lab}}} {n}\n")
                qr.append(f"kueue_quota_reserved_workloads_total{{{lab}}} {n}\n")
            h = counters.wait.get(label)
            if h is not None:  # the same observations in Kueue's two sets of buckets (16 and 14)
                wait.append(self._hist("kueue_admission_wait_time_seconds", lab, h))
                qrw.append(self._hist("kueue_quota_reserved_wait_time_seconds", lab, counters.qr_wait_of(label)))
        return {
            "kueue_admitted_workloads_total": "".join(adm).encode(),
            "kueue_quota_reserved_workloads_total": "".join(qr).encode(),
            "kueue_admission_wait_time_seconds": b"".join(wait),
            "kueue_quota_reserved_wait_time_seconds": b"".join(qrw),
        }

    def _finishes(self, ctx: _Context, name: str, cq: ClusterQueue | None) -> dict[str, bytes]:
        counters = ctx.fm.counters
        fin: list[str] = []
        exe: list[bytes] = []
        for pc in ctx.pcs(name):
            label = (name, pc)
            lab = self._label(name, pc)
            n = counters.finished.get(label)
            if n is not None:
                fin.append(f"kueue_finished_workloads_total{{{lab}}} {n}\n")
            h = counters.execution.get(label)
            if h is not None:
                exe.append(self._hist("kueue_execution_time_seconds", lab, h))
        return {"kueue_finished_workloads_total": "".join(fin).encode(), "kueue_execution_time_seconds": b"".join(exe)}

    def _evictions(self, ctx: _Context, name: str, cq: ClusterQueue | None) -> dict[str, bytes]:
        base = self._label(name, None)
        return {
            "kueue_evicted_workloads_total": "".join(
                f'kueue_evicted_workloads_total{{{base},reason="{esc(k[1])}",underlying_cause="{esc(k[2])}",'
                f'priority_class="{esc(k[3])}"}} {v}\n'
                for k, v in sorted(ctx.evicted(name))
            ).encode()
        }

    def _preemptions(self, ctx: _Context, name: str, cq: ClusterQueue | None) -> dict[str, bytes]:
        return {
            "kueue_preempted_workloads_total": "".join(
                f'kueue_preempted_workloads_total{{replica_role="{self.role}",preempting_cluster_queue="{esc(name)}",'
                f'reason="{esc(k[1])}"}} {v}\n'
                for k, v in sorted(ctx.preempted(name))
            ).encode()
        }

    def _parent_and_root(self, name: str, *, is_cq: bool) -> tuple[str, str]:
        """Kueue's parent_cohort and root_cohort labels: "" where there is none; a cohort in or under a cycle of
        cohorts has no root, a ClusterQueue in such a cohort has its configured cohort as parent and no root."""
        tree = self._tree
        node = None if tree is None else (tree.cqs if is_cq else tree.cohorts).get(name)
        if node is None:
            return "", ""
        if node.parent is not None:
            return node.parent.name, node.root().name
        if is_cq:
            cq = self._cq_objects.get(name)
            return (cq.cohort or "" if cq is not None else ""), ""
        return "", ("" if name in self._in_cycles else name)

    def _cohort_text(self, ctx: _Context) -> bytes:
        """Kueue's kueue_cohort_* for every cohort (named by a Cohort object, a ClusterQueue or a parent), from the
        quota tree of the configuration with the fold's usage (`QuotaTree.load_usage`, as the cycle sees it)."""
        fm, tree, role = ctx.fm, self._tree, self.role
        assert tree is not None  # built by the first render (config_changed starts True)
        tree.load_usage(fm.queues.usage)
        active: dict[str, int] = {}
        for cq_name, wls in ctx.view.admitted_by_cq.items():
            node = tree.cqs.get(cq_name)
            if node is not None and wls:
                for up in node.path_to_root():
                    active[up.name] = active.get(up.name, 0) + len(wls)
        info, quota, reserved, counts = [], [], [], []
        for name in sorted(tree.cohorts):
            node = tree.cohorts[name]
            lab = f'replica_role="{role}",cohort="{esc(name)}"'
            parent, root = self._parent_and_root(name, is_cq=False)
            info.append(f'kueue_cohort_info{{{lab},parent_cohort="{esc(parent)}",root_cohort="{esc(root)}"}} 1\n')
            for fr in sorted(node.subtree.keys() | node.usage.keys()):
                frl = f'{lab},flavor="{esc(fr[0])}",resource="{esc(fr[1])}"'
                quota.append(f"kueue_cohort_subtree_quota{{{frl}}} {num(amount(node.subtree.get(fr, 0)))}\n")
                reserved.append(
                    f"kueue_cohort_subtree_resource_reservations{{{frl}}} {num(node.usage.get(fr, 0) / 1000)}\n"
                )
            counts.append(f"kueue_cohort_subtree_admitted_active_workloads{{{lab}}} {active.get(name, 0)}\n")
        totals = [
            f'kueue_cohort_subtree_admitted_workloads_total{{replica_role="{role}",cohort="{esc(co)}",'
            f'priority_class="{esc(pc)}"}} {n}\n'
            for (co, pc), n in sorted(fm.counters.cohort_admitted.items())
        ]
        out = []
        for fam, lines in zip(COHORT_FAMILIES, (info, quota, reserved, counts, totals), strict=True):
            out.append(fam.head())
            out.append("".join(lines).encode())
        if self.fair_sharing:  # a share moves with any usage in its tree: rendered with the cohorts, as often
            cq_shares = []
            for cq_name in sorted(tree.cqs):
                cq = self._cq_objects.get(cq_name)
                cohort = esc(cq.cohort or "") if cq is not None else ""
                lab = f'replica_role="{role}",cluster_queue="{esc(cq_name)}",cohort="{cohort}"'
                cq_shares.append(
                    f"kueue_cluster_queue_weighted_share{{{lab}}} {num(weighted_share(tree.cqs[cq_name]))}\n"
                )
            cohort_shares = [
                f'kueue_cohort_weighted_share{{replica_role="{role}",cohort="{esc(name)}"}} '
                f"{num(weighted_share(tree.cohorts[name]))}\n"
                for name in sorted(tree.cohorts)
            ]
            for fam, lines in zip(FAIR_SHARING_FAMILIES, (cq_shares, cohort_shares), strict=True):
                out.append(fam.head())
                out.append("".join(lines).encode())
        return b"".join(out)

    def _resources(self, cq: ClusterQueue) -> list[tuple[FlavorResource, str, ResourceQuota]]:
        """Each (flavor, resource) of the queue with its label set, built again only when the queue's object
        changed (the fold replaces a ClusterQueue's value when its spec changes)."""
        cached = self._resource_labels.get(cq.name)
        if cached is not None and cached[0] is cq:
            return cached[1]
        role, cohort, cqn = self.role, esc(cq.cohort or ""), esc(cq.name)
        found = [
            (
                (fq.name, rq.name),
                f'replica_role="{role}",cohort="{cohort}",cluster_queue="{cqn}",flavor="{esc(fq.name)}",'
                f'resource="{esc(rq.name)}"',
                rq,
            )
            for g in cq.resource_groups
            for fq in g.flavors
            for rq in fq.resources
        ]
        self._resource_labels[cq.name] = (cq, found)
        return found

    def _local_queues(self, ctx: _Context, config: bool) -> None:
        """Kueue's kueue_local_queue_* that the fold can answer (off by default, as in Kueue), kept like the
        ClusterQueue families: one entry per LocalQueue, rendered again when the fold marked it (`lq_dirty`)."""
        fm = ctx.fm
        state = fm.state
        names = fm.counters.counted_lqs.union(state.local_queues)
        if config or names != self._lq_names:
            self._lq_names = names
            order = sorted(names)
            self._lq_pos = {n: i for i, n in enumerate(order, 1)}
            self._lq_pieces = {f.name: [f.head(), *(b"" for _ in order)] for f in LOCAL_QUEUE}
            dirty: set[str] = names
        else:
            dirty = fm.counters.lq_dirty & names
        fm.counters.lq_dirty.clear()
        if not dirty:
            return
        counts = fm.queues.local_queues(dirty & state.local_queues.keys())
        by_lq: dict[str, list[tuple[str, tuple[Any, ...], object]]] = {}
        for table_name, table in (
            ("admitted", fm.counters.lq_admitted),
            ("finished", fm.counters.lq_finished),
            ("evicted", fm.counters.lq_evicted),
            ("wait", fm.counters.lq_wait),
        ):
            for key, v in table.items():
                lq = f"{key[0]}/{key[1]}"
                if lq in dirty:
                    by_lq.setdefault(lq, []).append((table_name, key[2:], v))
        role, pieces, pos = self.role, self._lq_pieces, self._lq_pos
        for lq in dirty:
            lab = self._labels.get(("\0lq", lq))
            if lab is None:
                ns, _, name = lq.partition("/")
                lab = self._labels[("\0lq", lq)] = f'replica_role="{role}",name="{esc(name)}",namespace="{esc(ns)}"'
            at = pos[lq]
            if lq in state.local_queues:
                c = counts[lq]
                active, inadmissible, held = c.active, c.inadmissible, c.admitted
                pieces["kueue_local_queue_pending_workloads"][at] = (
                    f'kueue_local_queue_pending_workloads{{{lab},status="active"}} {active}\n'
                    f'kueue_local_queue_pending_workloads{{{lab},status="inadmissible"}} {inadmissible}\n'
                ).encode()
                pieces["kueue_local_queue_admitted_active_workloads"][at] = (
                    f"kueue_local_queue_admitted_active_workloads{{{lab}}} {held}\n".encode()
                )
                pieces["kueue_local_queue_reserving_active_workloads"][at] = (
                    f"kueue_local_queue_reserving_active_workloads{{{lab}}} {held}\n".encode()
                )
            else:
                for fam in LOCAL_QUEUE[:3]:
                    pieces[fam.name][at] = b""
            admitted: list[tuple[str, object]] = []
            finished: list[str] = []
            evicted: list[str] = []
            wait: list[bytes] = []
            qr_wait: list[bytes] = []
            for table_name, rest, val in sorted(by_lq.get(lq, ()), key=lambda t: (t[0], t[1])):
                if table_name == "admitted":
                    admitted.append((f'{lab},priority_class="{esc(rest[0])}"', val))
                elif table_name == "finished":
                    finished.append(
                        f'kueue_local_queue_finished_workloads_total{{{lab},priority_class="{esc(rest[0])}"}} {val}\n'
                    )
                elif table_name == "evicted":
                    evicted.append(
                        f'kueue_local_queue_evicted_workloads_total{{{lab},reason="{esc(rest[0])}",'
                        f'underlying_cause="{esc(rest[1])}",priority_class="{esc(rest[2])}"}} {val}\n'
                    )
                else:
                    assert isinstance(val, Hist)
                    text, twin = self._hist_twins(
                        _LQ_WAIT.decode(), _LQ_QR_WAIT, f'{lab},priority_class="{esc(rest[0])}"', val
                    )
                    wait.append(text)
                    qr_wait.append(twin)
            pieces["kueue_local_queue_admitted_workloads_total"][at] = "".join(
                f"kueue_local_queue_admitted_workloads_total{{{x}}} {v}\n" for x, v in admitted
            ).encode()
            pieces["kueue_local_queue_quota_reserved_workloads_total"][at] = "".join(
                f"kueue_local_queue_quota_reserved_workloads_total{{{x}}} {v}\n" for x, v in admitted
            ).encode()
            pieces["kueue_local_queue_finished_workloads_total"][at] = "".join(finished).encode()
            pieces["kueue_local_queue_evicted_workloads_total"][at] = "".join(evicted).encode()
            pieces["kueue_local_queue_admission_wait_time_seconds"][at] = b"".join(wait)
            pieces["kueue_local_queue_quota_reserved_wait_time_seconds"][at] = b"".join(qr_wait)

    def _global(self, fm: FoldedMetrics) -> str:
        out = [
            "# HELP admitd_events_appended_total Events in the log, by type (folded from the log)\n"
            "# TYPE admitd_events_appended_total counter\n"
        ]
        out += [
            f'admitd_events_appended_total{{type="{esc(t)}"}} {n}.0\n'
            for t, n in sorted(fm.counters.events_by_type.items())
        ]
        out.append("# HELP admitd_log_last_seq The seq of the newest event folded\n# TYPE admitd_log_last_seq gauge\n")
        out.append(f"admitd_log_last_seq {fm.state.seq}.0\n")
        out.append(
            "# HELP admitd_log_last_event_timestamp_seconds recorded_at of the newest event (virtual seconds in a "
            "simulation)\n# TYPE admitd_log_last_event_timestamp_seconds gauge\n"
        )
        out.append(f"admitd_log_last_event_timestamp_seconds {num((fm.last_recorded_at or 0) / 1000)}\n")
        out.append(
            "# HELP admitd_actuation_failures_total Failed actuations recorded in the log, by permanence\n"
            "# TYPE admitd_actuation_failures_total counter\n"
        )
        out += [
            f'admitd_actuation_failures_total{{permanent="{k}"}} {fm.counters.actuation_failures.get(k, 0)}.0\n'
            for k in ("false", "true")
        ]
        unrouted: dict[str, int] = {}
        for p in fm.state.view().pending_unrouted.values():
            r = p.last_reason.kind.value if p.last_reason is not None else ""
            unrouted[r] = unrouted.get(r, 0) + 1
        out.append(
            "# HELP admitd_unrouted_pending_workloads Pending workloads whose LocalQueue or ClusterQueue is missing\n"
            "# TYPE admitd_unrouted_pending_workloads gauge\n"
        )
        out += [f'admitd_unrouted_pending_workloads{{reason="{esc(r)}"}} {n}.0\n' for r, n in sorted(unrouted.items())]
        if fm.replay_seconds is not None and not STARTUP_REPLAY.is_set():
            REPLAY_DURATION.set(fm.replay_seconds)
        return "".join(out)


GroupText = Callable[[Renderer, _Context, str, ClusterQueue | None], dict[str, bytes]]
GROUP_TEXT: dict[str, GroupText] = {
    "config": Renderer._config,
    "pending": Renderer._pending,
    "admitted": Renderer._admitted,
    "admissions": Renderer._admissions,
    "finishes": Renderer._finishes,
    "evictions": Renderer._evictions,
    "preemptions": Renderer._preemptions,
}
"""One function per group of families (`families.GROUPS`), each rendering one ClusterQueue's text of them."""
if GROUP_TEXT.keys() != GROUPS.keys():  # pragma: no cover - a guard for editors
    raise TypeError("GROUP_TEXT and families.GROUPS name different groups")
