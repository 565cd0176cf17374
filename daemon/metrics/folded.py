"""What the metrics render: the fold's `State` with the two projections of daemon/views it needs (`Queues`,
`KueueCounters`), fed together from the log (`views.follow.Following`) or, event by event, with `apply`; plus what
only the reading process knows (the newest event's recorded_at, how long the first fold took)."""

from __future__ import annotations

import time

from daemon.domain.state import State
from daemon.eventlog import LogReader
from daemon.views.follow import Following
from daemon.views.kueue_counters import KueueCounters
from daemon.views.ledger import Preemptions
from daemon.views.queues import Queues


class FoldedMetrics(Following):
    """A state and its metric projections. Building one from a log means following it from its first event, so
    that the counters cover the whole log."""

    def __init__(self, state: State | None = None, queues: Queues | None = None, *, lq_marks: bool = True) -> None:
        """`queues`: a `Queues` of `state` fed by someone else (`admitd run`: the one the status writer renders).
        `lq_marks`: the counters mark the LocalQueues they change (`KueueCounters`; only LocalQueue metrics read
        them)."""
        state = State(pending_indexes=False) if state is None else state  # the metrics never walk the cycle's runs
        self.queues = Queues(state) if queues is None else queues
        self.counters = KueueCounters(state, lq_marks=lq_marks)
        self.ledger = Preemptions(state, entries=False)  # issue 26: the ledger's per-queue totals (metrics/answers.py)
        super().__init__(state, (self.queues, self.counters, self.ledger))
        self.last_recorded_at: int | None = None
        self._stopped_at_limit = False  # the last `follow` folded exactly its limit (see there)
        self.replay_seconds: float | None = None

    @property
    def usage(self) -> dict[str, dict[tuple[str, str], int]]:
        return self.queues.usage

    @property
    def dirty(self) -> set[tuple[str, str]]:
        return self.counters.dirty

    @property
    def config_changed(self) -> bool:
        return self.counters.config_changed

    @config_changed.setter
    def config_changed(self, value: bool) -> None:
        self.counters.config_changed = value

    def follow(self, reader: LogReader, limit: int | None = None) -> int:
        """Fold the events after the last one folded, at most `limit` of them; return how many. At the end of the
        log, note its newest event's recorded_at; after a first fold, how long it took."""
        t0 = time.perf_counter()
        first = self.state.seq == 0
        n = super().follow(reader, limit)
        if n != limit and (n or self._stopped_at_limit):
            # At the end of the log: its newest event is the one folded last. Also when this call folded nothing
            # after one that stopped at its limit, which may have been exactly the log's end.
            b = reader.bounds()
            if b is not None:
                self.last_recorded_at = b[3]
        self._stopped_at_limit = n == limit
        if first and n:
            self.replay_seconds = time.perf_counter() - t0
        return n
