"""The metrics of a running daemon's own fold (`admitd run`): Kueue's counters fed by the recorder, the queue
figures of the `Queues` the status writer renders, no fold of their own (`LogMetrics` is for a log file).

The counters count from the log's first event, so they are first folded from the log by `views.follow.CatchingUp`
(in a worker thread, while the daemon runs; a scrape is "not ready" until then) and then fed live. The text is
rendered where the state is folded, on the event loop's thread (`refresh`, as events come, and `parts` at a
scrape, both only the queues an event touched); the reader's figures and the join of the kept text, the costly
part of a scrape, are done in a worker thread (`finish`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from prometheus_client import generate_latest

from daemon.domain.events import Event
from daemon.domain.state import State
from daemon.eventlog import LogReader
from daemon.metrics.folded import FoldedMetrics
from daemon.metrics.follower import MetricsNotReady, log_file_figures
from daemon.metrics.heap import keep_on_heap
from daemon.metrics.live import LIVE
from daemon.metrics.renderer import Renderer
from daemon.views.dispatch import Table
from daemon.views.kueue_counters import KueueCounters
from daemon.views.queues import Queues


class FedMetrics:
    """A `FoldedMetrics` on `state` and `queues` (a `CatchingUp`'s until its hand-over, then the daemon's) whose
    counters are a `views.follow.Timed` part of the feed; a renderer of it; the log file's own figures."""

    def __init__(
        self,
        db: Path,
        state: State,
        queues: Queues,
        replica_role: Callable[[], str],
        *,
        local_queue_metrics: bool = False,
        fair_sharing: bool = False,
    ) -> None:
        self.db = db
        self.fm = FoldedMetrics(state, queues, lq_marks=local_queue_metrics)
        self._role = replica_role
        self.renderer = Renderer(replica_role(), local_queue_metrics=local_queue_metrics, fair_sharing=fair_sharing)
        self.ready = False
        self._reader: LogReader | None = None
        self._reader_lock = threading.Lock()

    @property
    def counters(self) -> KueueCounters:
        return self.fm.counters

    # --- a part of the feed (`views.follow.Timed`) ---

    def tick(self, recorded_at: int) -> None:
        self.fm.last_recorded_at = recorded_at

    def ticks(self) -> list[Callable[[int], None]]:
        return [self.tick]

    def counted(self, by_type: Mapping[type[Event], int]) -> None:
        """The counters' `events_by_type` is the feed's count (their handlers in `tables` count nothing)."""
        self.fm.counters.count_by(by_type)

    def tables(self) -> list[Table]:
        """The counters' handlers and the ledger's (`views.dispatch`), in `apply`'s order."""
        return [self.fm.counters.handlers(), self.fm.ledger.handlers()]

    def clocks(self) -> list[Callable[[int], None]]:
        """None: it keeps the recorded_at (`tick`), not the events' own times."""
        return []

    def attach(self, state: State, queues: Queues) -> None:
        fm = self.fm
        fm.state = state
        fm.counters.attach(state)
        fm.ledger.attach(state)
        fm.queues = queues
        fm.projections = (queues, fm.counters, fm.ledger)  # nothing may keep the catch-up's own state alive
        self.renderer.reading(fm)
        self.ready = True

    # --- rendering, on the thread that feeds it ---

    def refresh(self) -> None:
        """Render what events changed since the last call (the first call renders everything)."""
        self.renderer.set_role(self._role())
        self.renderer.refresh(self.fm)

    def parts(self) -> list[bytes]:
        """The kept text of every family, brought up to date; MetricsNotReady before the hand-over."""
        if not self.ready:
            raise MetricsNotReady(
                f"not ready: folding {self.db} for the metrics' counters (at seq {self.fm.state.seq}); scrape again"
            )
        self.renderer.set_role(self._role())
        return self.renderer.parts(self.fm)

    # --- the rest of a scrape, on any thread ---

    def finish(self, parts: list[bytes]) -> bytes:
        """`parts` with the log file's figures and the live instruments, joined: the whole exposition."""
        with self._reader_lock:
            if self._reader is None:
                self._reader = LogReader(self.db)
            reader = self._reader
            parts.append("".join(log_file_figures(reader, self.fm)).encode())
        parts.append(generate_latest(LIVE))
        body = b"".join(parts)
        keep_on_heap(len(body))
        return body

    def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
