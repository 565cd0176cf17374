"""The plots' series of a log file (`admitd ui`): `views.series.QueueSeries` with a `State`, a `views.queues.Queues`
and the pending rows' seqs of its own, folded from the log like `views.follow.Following`. `admitd run --ui` feeds a
`QueueSeries` live instead (`views.follow.CatchingUp`), with the daemon's own state. A `Series` also keeps
`Timeline` of its state (each record's versions, each queue's members over the log), from which a page at a past
moment is built (`daemon.query.moment.partial_state_at(timeline=)`).
"""

from __future__ import annotations

from daemon.answers.answer import LiveSeqs
from daemon.domain.events import Event
from daemon.domain.state import State
from daemon.eventlog import LogReader, codec
from daemon.query.moment import Timeline
from daemon.views.queues import Queues
from daemon.views.series import ADMISSIONS_KEPT, Points, QueueSeries

CHUNK = 20_000

__all__ = ["ADMISSIONS_KEPT", "CHUNK", "Points", "Series"]


class Series(QueueSeries):
    """The figures of every ClusterQueue over the log, kept as the log grows (`follow`)."""

    def __init__(self, *, width_ms: int = 1000, limit: int = 1024, past_budget_bytes: int | None = None) -> None:
        """`past_budget_bytes`: what its `Timeline` may take (default the timeline's, `TIMELINE_BUDGET_BYTES`)."""
        state = State()
        super().__init__(state, Queues(state), width_ms=width_ms, limit=limit)
        self.seqs = LiveSeqs()  # each pending row's seqs, kept as the daemon's answers keep them
        self.timeline = (  # the records and the queues' members over the log: the pages at a past moment
            Timeline() if past_budget_bytes is None else Timeline(budget_bytes=past_budget_bytes)
        )

    def apply(self, event: Event, seq: int, recorded_at: int) -> None:
        """Fold one event recorded at `recorded_at`: the points first (as of before it), then the state."""
        super().apply(event, seq, recorded_at)
        self.queues.apply(event, seq)
        self.state.apply(event, seq)
        self.timeline.observe(event, seq, self.state)
        self.seqs.apply(event, seq)

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
