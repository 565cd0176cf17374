"""The second feeder: projections fed from the log, with a `State` of their own.

The first is live: `daemon.stages.recorder.Recorder.projections`, applied as events are appended, with the
recorder's own state. Both apply every projection to an event before the state folds it (`views.projection`). This
is the one place outside `daemon.eventlog.replay` that decodes rows of the log.
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.domain.events import Event
from daemon.domain.state import State
from daemon.eventlog import LogReader, codec
from daemon.views.projection import Projection

CHUNK = 20_000  # rows read from SQLite at a time


class Following:
    """`state` and `projections` fed together: each event goes to every projection, then to the state."""

    def __init__(self, state: State, projections: Sequence[Projection]) -> None:
        self.state = state
        self.projections = tuple(projections)

    @property
    def seq(self) -> int:
        return self.state.seq

    def apply(self, event: Event, seq: int) -> None:
        for p in self.projections:
            p.apply(event, seq)
        self.state.apply(event, seq)

    def follow(self, reader: LogReader, limit: int | None = None) -> int:
        """Apply the events of `reader` after the last one applied, at most `limit` of them; return how many."""
        n = 0
        decode = codec.decode
        apply = self.apply
        rows = reader.iter_payloads(self.state.seq, chunk=min(limit, CHUNK) if limit else CHUNK)
        for seq, type_, version, payload in rows:
            apply(decode(type_, version, payload if isinstance(payload, bytes) else payload.encode(), seq=seq), seq)
            n += 1
            if n == limit:
                break
        return n
