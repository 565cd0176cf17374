"""Each ClusterQueue's figures over time, for the web view's plots: pending depth, admitted workloads and usage per
(flavor, resource), down-sampled as they are recorded. A projection (`views.projection`) that also takes each
event's recorded_at (`apply(event, seq, recorded_at)`): fed live by the recorder in `admitd run --ui`
(`views.follow.CatchingUp`), or from the log by `daemon.web.series.Series` (`admitd ui`).

`QueueSeries` keeps, per ClusterQueue, one point per time bucket: the figures as of the last event before the bucket
ends. When a queue has more than `limit` points the bucket width doubles and neighbours merge (the later one wins),
so memory and the points a page sends stay bounded however long the log is, and a page never folds the log itself.
Buckets begin a second wide (`width_ms`): a point per queue at every batch of a new millisecond cost the recorder
a pass over every ClusterQueue until the width had doubled ten times, for a resolution no plot shows.
It reads `state` and `queues` (a `views.queues.Queues` of that state) as of each event, and folds neither.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from daemon.domain import events as ev
from daemon.domain.events import Event
from daemon.domain.model import FlavorResource
from daemon.domain.state import State
from daemon.views.dispatch import QUEUE_OBJECTS, Spec, Table, bind
from daemon.views.queues import Queues

_NONE: dict[FlavorResource, int] = {}  # read, never written
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


class QueueSeries:
    """The figures of every ClusterQueue over the events applied, reading `state` and `queues` (folded by the
    feeder after this projection)."""

    def __init__(self, state: State, queues: Queues, *, width_ms: int = 1000, limit: int = 1024) -> None:
        self.state = state
        self.queues = queues
        self.width = width_ms
        self.limit = limit
        self.points: dict[str, Points] = {}
        self.last_ms: int | None = None
        self.first_ms: int | None = None
        self.admissions: dict[str, deque[tuple[int, int, str]]] = {}  # cq -> (seq, recorded_at, job), oldest first
        self._table = bind(self, self.ON)

    def attach(self, state: State, queues: Queues) -> None:
        """Read `state` and `queues` from now on: the live ones, equal to those read so far (`CatchingUp`)."""
        self.state, self.queues = state, queues

    def _record(self, t: int) -> None:
        """A point for each ClusterQueue at `t` (`Points.add`, inlined: this runs for every queue at each new
        bucket). A queue's usage is kept as the previous point's dict when it has not changed (points are never
        changed once taken, so they may share it): no copy per queue and bucket."""
        view = self.state.view()
        usage, pending_by, admitted_by = self.queues.usage, view.pending_by_cq, view.admitted_by_cq
        width, points = self.width, self.points
        b = t // width
        grow = False
        for cq in self.state.cluster_queues:
            pts = points.get(cq)
            if pts is None:
                pts = points[cq] = Points()
            now = usage.get(cq, _NONE)
            used_ = pts.used
            pending, admitted = len(pending_by.get(cq, ())), len(admitted_by.get(cq, ()))
            if used_:
                last = used_[-1]
                used = last if last == now else dict(now)
                ts = pts.t
                if ts[-1] // width == b:
                    ts[-1], pts.pending[-1], pts.admitted[-1], used_[-1] = t, pending, admitted, used
                    continue
                ts.append(t)
            else:
                used = dict(now)
                pts.t.append(t)
            pts.pending.append(pending)
            pts.admitted.append(admitted)
            used_.append(used)
            grow = grow or len(used_) > self.limit
        while grow:
            self.width *= 2
            self.points = {cq: p.merged(self.width) for cq, p in self.points.items()}
            grow = any(len(p) > self.limit for p in self.points.values())

    @property
    def seq(self) -> int:
        """The last event applied: the state's, folded after each."""
        return self.state.seq

    def apply(self, event: Event, seq: int, recorded_at: int) -> None:
        """Take one event recorded at `recorded_at` in; a point is taken for each queue when a new bucket starts."""
        if recorded_at != self.last_ms:
            self.tick(recorded_at)
        h = self._table[type(event)]
        if h is not None:
            h(event, seq)

    def tick(self, recorded_at: int) -> None:
        """The next event was recorded at `recorded_at`, another time than the last one's (a feeder calls this once
        per time, not per event: a batch of events shares one)."""
        last = self.last_ms
        if last is not None and recorded_at // self.width != last // self.width:
            self._record(last)
        if self.first_ms is None:
            self.first_ms = recorded_at
        self.last_ms = recorded_at

    def ticks(self) -> list[Callable[[int], None]]:
        return [self.tick]

    def counted(self, by_type: Mapping[type[Event], int]) -> None:
        """It counts no events by type."""

    def tables(self) -> list[Table]:
        return [dict(self._table)]

    def clocks(self) -> list[Callable[[int], None]]:
        """None: it keeps the recorded_at (`tick`), not the events' own times."""
        return []

    def _admitted(self, event: ev.WorkloadAdmitted, seq: int) -> None:
        assert self.last_ms is not None  # `tick` came first
        cq = event.admission.cluster_queue
        kept = self.admissions.get(cq)
        if kept is None:
            kept = self.admissions[cq] = deque(maxlen=ADMISSIONS_KEPT)
        kept.append((seq, self.last_ms, event.workload))

    ON: ClassVar[Spec] = {
        ev.WorkloadAdmitted: _admitted,
        **dict.fromkeys(
            (
                *QUEUE_OBJECTS,
                ev.JobObserved,
                ev.JobFinished,
                ev.JobDeleted,
                ev.JobReady,
                ev.JobPodsNotCreated,
                ev.JobTampered,
                ev.WorkloadPreempted,
                ev.WorkloadPending,
                ev.WorkloadEvicted,
                ev.WorkloadAdopted,
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
        return {
            "points": {cq: (p.t, p.pending, p.admitted, p.used) for cq, p in self.points.items()},
            "width": self.width,
            "first_ms": self.first_ms,
            "last_ms": self.last_ms,
            "admissions": {cq: list(d) for cq, d in self.admissions.items()},
        }

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
