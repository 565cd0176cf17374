"""Each ClusterQueue's figures over time, for the web view's plots: pending depth, admitted workloads and usage per
(flavor, resource), down-sampled as they are recorded.

A `Series` folds the log once (its own `State` and `views.queues.Queues`, fed like `views.follow.Following`) and
keeps, per ClusterQueue, one point per time bucket: the figures as of the last event before the bucket ends. When a
queue has more than `limit` points the bucket width doubles and neighbours merge (the later one wins), so memory and
the points a page sends stay bounded however long the log is, and a page never folds the log itself. It also keeps
`Checkpoints` of its state, from which a page at a past moment is built (`daemon.query.moment.partial_state_at`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from daemon.answers.answer import LiveSeqs
from daemon.domain import events as ev
from daemon.domain.events import Event
from daemon.domain.model import FlavorResource
from daemon.domain.state import State
from daemon.eventlog import LogReader, codec
from daemon.query.moment import Checkpoints
from daemon.views.queues import Queues

CHUNK = 20_000
ADMISSIONS_KEPT = 200  # the latest admissions kept per ClusterQueue (a page shows those up to its moment)


@dataclass(slots=True)
class Points:
    """One ClusterQueue's points, in time order: `t` (ms), and the figures as of the end of each bucket."""

    t: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)
    used: list[dict[FlavorResource, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.t)

    def add(self, t: int, pending: int, admitted: int, used: dict[FlavorResource, int], width: int) -> None:
        if self.t and self.t[-1] // width == t // width:
            self.t[-1], self.pending[-1], self.admitted[-1], self.used[-1] = t, pending, admitted, used
            return
        self.t.append(t)
        self.pending.append(pending)
        self.admitted.append(admitted)
        self.used.append(used)

    def merged(self, width: int) -> Points:
        out = Points()
        for i in range(len(self.t)):
            out.add(self.t[i], self.pending[i], self.admitted[i], self.used[i], width)
        return out


class Series:
    """The figures of every ClusterQueue over the log, kept as the log grows (`follow`)."""

    def __init__(self, *, width_ms: int = 1, limit: int = 1024, checkpoint_budget_bytes: int | None = None) -> None:
        """`checkpoint_budget_bytes`: what its `Checkpoints` may take (default theirs, `CHECKPOINT_BUDGET_BYTES`)."""
        self.state = State()
        self.queues = Queues(self.state)
        self.width = width_ms
        self.limit = limit
        self.points: dict[str, Points] = {}
        self.last_ms: int | None = None
        self.first_ms: int | None = None
        self.admissions: dict[str, deque[tuple[int, int, str]]] = {}  # cq -> (seq, recorded_at, job), oldest first
        self.seqs = LiveSeqs()  # each pending row's seqs, kept as the daemon's answers keep them
        self.checkpoints = (  # the state every few thousand events: the pages at a past moment
            Checkpoints() if checkpoint_budget_bytes is None else Checkpoints(budget_bytes=checkpoint_budget_bytes)
        )

    @property
    def seq(self) -> int:
        return self.state.seq

    def _record(self, t: int) -> None:
        view = self.state.view()
        usage = self.queues.usage
        grow = False
        for cq in self.state.cluster_queues:
            pts = self.points.get(cq)
            if pts is None:
                pts = self.points[cq] = Points()
            pts.add(
                t,
                len(view.pending_by_cq.get(cq, ())),
                len(view.admitted_by_cq.get(cq, {})),
                dict(usage.get(cq, {})),
                self.width,
            )
            grow = grow or len(pts) > self.limit
        while grow:
            self.width *= 2
            self.points = {cq: p.merged(self.width) for cq, p in self.points.items()}
            grow = any(len(p) > self.limit for p in self.points.values())

    def apply(self, event: Event, seq: int, recorded_at: int) -> None:
        """Fold one event recorded at `recorded_at`; a point is taken for each queue when a new bucket starts."""
        last = self.last_ms
        if last is not None and recorded_at // self.width != last // self.width:
            self._record(last)
        if self.first_ms is None:
            self.first_ms = recorded_at
        if isinstance(event, ev.WorkloadAdmitted):
            kept = self.admissions.get(event.admission.cluster_queue)
            if kept is None:
                kept = self.admissions[event.admission.cluster_queue] = deque(maxlen=ADMISSIONS_KEPT)
            kept.append((seq, recorded_at, event.workload))
        self.queues.apply(event, seq)
        self.state.apply(event, seq)
        self.checkpoints.observe(event, seq, self.state)
        self.seqs.apply(event, seq)
        self.last_ms = recorded_at

    def follow(self, reader: LogReader, limit: int | None = None) -> int:
        """Fold the events of `reader` after the last one folded (at most `limit`); how many."""
        n = 0
        decode = codec.decode
        apply = self.apply
        for seq, at, type_, version, payload in reader.iter_timed_payloads(self.state.seq, chunk=CHUNK):
            apply(decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=seq), seq, at)
            n += 1
            if n == limit:
                break
        return n

    def plot(self, cq: str, at_ms: int, points: int = 300) -> dict[str, object]:
        """What a ClusterQueue's plots draw: at most `points` points (every n-th, and the last), times in seconds,
        quantities in whole units (milli / 1000), each (flavor, resource)'s nominal quota, and the page's moment."""
        pts = self.of(cq)
        step = max(1, -(-len(pts) // points))
        idx = list(range(0, len(pts), step))
        if idx and idx[-1] != len(pts) - 1:
            idx.append(len(pts) - 1)
        queue = self.state.cluster_queues.get(cq)
        nominal: dict[FlavorResource, int] = {}
        if queue is not None:
            for g in queue.resource_groups:
                for fq in g.flavors:
                    for rq in fq.resources:
                        nominal[(fq.name, rq.name)] = rq.nominal
        frs = sorted({fr for i in idx for fr in pts.used[i]} | set(nominal))
        return {
            "t": [pts.t[i] / 1000 for i in idx],
            "pending": [pts.pending[i] for i in idx],
            "admitted": [pts.admitted[i] for i in idx],
            "usage": {f"{f}/{r}": [pts.used[i].get((f, r), 0) / 1000 for i in idx] for f, r in frs},
            "nominal": {f"{f}/{r}": nominal[(f, r)] / 1000 for f, r in frs if (f, r) in nominal},
            "at": at_ms / 1000,
        }

    def of(self, cq: str) -> Points:
        """`cq`'s points, the last one the present (the figures after the last event folded)."""
        pts = self.points.get(cq, Points())
        out = Points(list(pts.t), list(pts.pending), list(pts.admitted), list(pts.used))
        if cq in self.state.cluster_queues and self.last_ms is not None:
            view = self.state.view()
            out.add(
                self.last_ms,
                len(view.pending_by_cq.get(cq, ())),
                len(view.admitted_by_cq.get(cq, {})),
                dict(self.queues.usage.get(cq, {})),
                1 if not out.t or out.t[-1] != self.last_ms else self.width,
            )
        return out
