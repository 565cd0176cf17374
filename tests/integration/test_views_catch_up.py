"""The daemon's one fold (`views.follow.CatchingUp`): what counts from the log's first event (the metrics'
counters, the web view's series) folded from the log up to where a live state began, then through the events the
live feeder appended meanwhile, then handed over to the live state and fed with it, gives exactly what a process
following the same log file gives: the same /metrics text as `LogMetrics` (the follower, `admitd ui --db` and the
simulator's), the same series as the web view's own fold.

Real: `admitd simulate`'s driver writing SQLite logs of random scenarios, the fold, the projections, the renderer.
Faked: the recorder (this test feeds the live state, its queue figures and the feed in the recorder's order, with
the events of the log after the live state's start, as a restarted daemon's recorder would append them).
"""

from __future__ import annotations

import gc
import random
import weakref
from pathlib import Path

import pytest

from daemon.domain.events import Event
from daemon.domain.state import State
from daemon.eventlog import LogReader, codec
from daemon.metrics import FedMetrics, LogMetrics, MetricsNotReady, failed
from daemon.views.follow import CatchingUp
from daemon.views.queues import Queues
from daemon.views.series import QueueSeries
from daemon.web.series import Series
from tests.integration.test_metrics_fast_path import SEEDS, logs  # noqa: F401  (the module's fixture of logs)

WALL = ("admitd_snapshot_age_seconds", "admitd_replay_duration_seconds", "process_")  # they move with the clock


def timed_events(db: Path) -> list[tuple[int, int, Event]]:
    with LogReader(db) as reader:
        return [
            (seq, at, codec.decode(t, v, p if isinstance(p, bytes) else p.encode(), seq=seq))
            for seq, at, t, v, p in reader.iter_timed_payloads(0)
        ]


def lines(body: bytes) -> list[str]:
    return [x for x in body.decode().splitlines() if not x.startswith(WALL)]


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_feed_caught_up_and_handed_over_equals_following_the_log(
    logs: list[Path],  # noqa: F811
    where: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("daemon.views.follow.CHUNK", 13)  # many chunks, the lock let go between them
    monkeypatch.setattr(CatchingUp, "BUFFER_LEFT", 5)  # several rounds through the kept events
    for seed, db in zip(SEEDS, logs, strict=True):
        check_one(db, random.Random(seed), where)


class Recorder:
    """The recorder's order for each event: the feed, the status writer's queues, then the state."""

    def __init__(self, events: list[tuple[int, int, Event]], live: State, queues: Queues) -> None:
        self.events, self.live, self.queues = events, live, queues
        self.now = 0
        self.feed: CatchingUp | None = None

    def append(self, upto: int, refresh: FedMetrics | None = None, rng: random.Random | None = None) -> None:
        assert self.feed is not None
        for seq, at, event in self.events[self.live.seq : upto]:
            self.now = at
            self.feed.tick(at)  # each event a batch of its own
            self.feed.apply(event, seq)  # and the status writer's queues: the feed feeds them
            self.live.apply(event, seq)
            if refresh is not None and rng is not None and rng.random() < 0.2:
                refresh.refresh()  # the daemon's periodic render, between events


def check_one(db: Path, rng: random.Random, where: str) -> None:
    events = timed_events(db)
    last = events[-1][0]
    start = {"start": 0, "middle": last // 2, "end": last}[where]  # where the live state began (a snapshot)
    live = State()
    for seq, _, event in events[:start]:
        live.apply(event, seq)
    recorder = Recorder(events, live, Queues.of(live))
    feed = recorder.feed = CatchingUp(db, live, recorder.queues)
    assert feed.state is not None and feed.queues is not None
    fed = FedMetrics(db, feed.state, feed.queues, lambda: "leader", local_queue_metrics=True)
    series = QueueSeries(feed.state, feed.queues)
    feed.add(fed)
    feed.add(series)
    status, body, _ = failed(_not_ready(fed))
    assert status == 503 and b"not ready" in body

    scratch = weakref.ref(feed.state)
    rest = last - start
    recorder.append(start + rest // 3)  # kept while the catch-up has not begun
    # The status writer's queues are fed by the feed alone, as the events come (before the hand-over too).
    assert recorder.queues.figures() == Queues.of(live).figures()
    feed.catch_up()
    fed.refresh()  # the first render, on the catch-up's own state (as `admitd run` does it in the thread)
    recorder.append(start + 2 * rest // 3)  # kept after the catch-up returned: folded by the hand-over
    feed.hand_over()
    assert feed.live and feed.state is None and feed.queues is None
    gc.collect()
    assert scratch() is None  # the second fold is gone: nothing keeps the catch-up's state alive
    assert fed.fm.state is live and fed.fm.queues is recorder.queues and series.state is live
    recorder.append(last, fed, rng)
    assert live.seq == last
    assert recorder.queues.figures() == Queues.of(live).figures()  # and after it, through the feed's one table

    follower = LogMetrics(db, local_queue_metrics=True)
    own = Series()
    try:
        assert lines(fed.finish(fed.parts())) == lines(follower.render()), (db.name, where)
        assert fed.counters.figures() == follower.fm.counters.figures()
        with LogReader(db) as reader:
            assert own.follow(reader) == last
        assert series.figures() == own.figures()
        assert series.plot("cq-0", recorder.now) == own.plot("cq-0", recorder.now)
    finally:
        follower.close()
        fed.close()


def _not_ready(fed: FedMetrics) -> Exception:
    try:
        fed.parts()
    except MetricsNotReady as e:
        return e
    raise AssertionError("a feed not handed over rendered metrics")


def test_a_live_state_ahead_of_the_log_is_an_error(logs: list[Path]) -> None:  # noqa: F811
    db = logs[0]
    live = State()
    for seq, _, event in timed_events(db):
        live.apply(event, seq)
    live.seq += 5  # the live state claims events the log does not have
    feed = CatchingUp(db, live, Queues.of(live))
    with pytest.raises(RuntimeError, match=r"the log ends at seq \d+, the live state was at \d+"):
        feed.catch_up()
