"""`admitd run --ui`'s pages at a past moment from memory: the daemon's timeline (`daemon.query.moment.Timeline`),
fed by its one fold (`views.follow.CatchingUp.add_folded`: the catch-up's state, then, handed over, the live state
after the recorder folded each event), gives the pages' answers at a past moment exactly as the file gives them,
without reading the file's snapshots; a moment it does not cover is the file's answer; and a page read while the
fold goes on in another thread never sees part of an event.

Real: `admitd simulate`'s driver writing SQLite logs of random scenarios (the metrics' fast-path logs), the
catch-up, the hand-over, the timeline, the web view's answers (`WebView._ask`, `_past`), the file's answers
(`answer_from_file`). Faked: the recorder (this test feeds the feed, the status writer's queues, the live state and
the recorder's listener in the recorder's order, with the events of the log after the live state's start, as a
restarted daemon's recorder appends them), the cluster (the simulator's virtual clock).
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from daemon.answers.answer import Answers, BadRequest, answer_from_file, parse
from daemon.domain.events import Event
from daemon.domain.state import State
from daemon.eventlog import LogReader
from daemon.query.moment import Moment, Timeline, clock_of, resolve
from daemon.views.follow import CatchingUp
from daemon.views.queues import Queues
from daemon.views.series import QueueSeries
from daemon.web import render
from daemon.web.server import WebView
from tests.integration.test_metrics_fast_path import SEEDS, logs  # noqa: F401  (the module's fixture of logs)
from tests.integration.test_views_catch_up import timed_events


class Recorder:
    """The recorder's order for each event: the feed (a projection, which feeds the status writer's queues too; told
    of each batch's recorded_at first, here each run of one), the state, then its listeners (the feed's
    `folded`)."""

    def __init__(self, events: list[tuple[int, int, Event]], live: State, queues: Queues) -> None:
        self.events, self.live, self.queues = events, live, queues
        self.now = 0
        self.feed: CatchingUp | None = None

    def append(self, upto: int) -> None:
        assert self.feed is not None
        for seq, at, event in self.events[self.live.seq : upto]:
            if at != self.now or seq == 1:
                self.now = at
                self.feed.tick(at)
            self.feed.apply(event, seq)
            self.live.apply(event, seq)
            self.feed.folded(event, seq)


class Daemon:
    """What `admitd run --ui` wires (daemon.kube.run): the live state from a snapshot at `start`, the feed with the
    plots' series and the timeline, the web view on the daemon's answers."""

    def __init__(self, db: Path, start: int, budget_bytes: int = 10**9) -> None:
        self.events = timed_events(db)
        live = State()
        for seq, _, event in self.events[:start]:
            live.apply(event, seq)
        self.recorder = Recorder(self.events, live, Queues.of(live))
        feed = self.recorder.feed = CatchingUp(db, live, self.recorder.queues)
        assert feed.state is not None and feed.queues is not None
        self.feed = feed
        self.series = QueueSeries(feed.state, feed.queues)
        feed.add(self.series)
        self.timeline = Timeline(budget_bytes=budget_bytes, check_every=1)
        feed.add_folded(self.timeline.observe)
        self.view = WebView(
            db, Answers(db), series=self.series, series_lock=feed.lock, timeline=self.timeline, live=True
        )
        self.last = self.events[-1][0]
        self.start = start

    def run(self) -> None:
        """Kept before the catch-up, folded by it, kept after it, handed over, then fed live to the log's end."""
        rest = self.last - self.start
        self.recorder.append(self.start + rest // 3)
        self.feed.catch_up()
        self.recorder.append(self.start + 2 * rest // 3)
        self.feed.hand_over()
        assert self.feed.live
        self.recorder.append(self.last)
        assert self.recorder.live.seq == self.last


class Snapshots:
    """Counts what asks the file for a snapshot (`LogReader.snapshot_at_or_before`: where an answer from the file
    starts), in any thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        inner = LogReader.snapshot_at_or_before

        def counted(reader: LogReader, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return inner(reader, *args, **kwargs)

        monkeypatch.setattr(LogReader, "snapshot_at_or_before", counted)


def _questions(db: Path) -> Iterator[tuple[str, str | None, dict[str, str]]]:
    with LogReader(db) as reader:
        state = State()
        for s, _, e in timed_events(db):
            state.apply(e, s)
        jobs = sorted({*state.workloads, *state.finished})
        del reader
    yield "queues", None, {}
    yield "pending", None, {}
    for cq in sorted(state.cluster_queues)[:3]:
        yield "pending", None, {"queue": cq}
    rng = random.Random(len(jobs))
    for job in rng.sample(jobs, min(4, len(jobs))):
        yield "explain", job, {}


def from_file(db: Path, command: str, at: str, job: str | None, params: dict[str, str]) -> dict[str, Any]:
    """What the page asks, answered from the file alone (as `admitd queues --at` and the daemon's answers do)."""
    given = {"at": [at], **{k: [v] for k, v in params.items()}}
    try:
        body: dict[str, Any] = json.loads(answer_from_file(db, parse(command, given, job), 0, live=True).body)
    except BadRequest as err:
        return {"error": [err.status, err.message]}
    if command == "pending":
        body = {"cluster_queues": {k: v[: render.MAX_ROWS] for k, v in body["cluster_queues"].items()}}
        if "queue" in params:  # with the queues' answer from the same state (the page asks both)
            body["queues"] = from_file(db, "queues", at, None, {})
    return body


async def asked(view: WebView, command: str, at: str, job: str | None, params: dict[str, str]) -> dict[str, Any]:
    """What a page at `at` gets (`WebView._ask`, as the pages call it)."""
    moment = view._moment(at).past
    assert moment is not None
    try:
        return await view._ask(command, at, job, moment=moment, **params)
    except BadRequest as err:
        return {"error": [err.status, err.message]}


def _moments(db: Path, rng: random.Random, n: int) -> list[str]:
    """`n` random moments of the log, as the time control gives them (the times of random events)."""
    with LogReader(db) as reader:
        clock = clock_of(reader)
        seqs = [clock.first_seq, clock.last_seq, *rng.sample(range(clock.first_seq, clock.last_seq + 1), n)]
        return [str(clock.show(next(iter(reader.iter_events(s - 1, chunk=1))).recorded_at)) for s in seqs]


@pytest.mark.parametrize("where", ["start", "middle", "end"])
async def test_a_daemons_past_pages_from_its_timeline_equal_the_files_and_read_no_snapshot(
    logs: list[Path],  # noqa: F811
    where: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("daemon.views.follow.CHUNK", 13)  # many chunks of the catch-up
    monkeypatch.setattr(CatchingUp, "BUFFER_LEFT", 5)
    snapshots = Snapshots(monkeypatch)
    outcomes: set[str] = set()
    for seed, db in zip(SEEDS, logs, strict=True):
        rng = random.Random(seed)
        last = timed_events(db)[-1][0]
        daemon = Daemon(db, {"start": 0, "middle": last // 2, "end": last}[where])
        daemon.run()
        assert daemon.timeline.start == 1 and daemon.timeline.seq == last  # all of the log, one span
        questions = list(_questions(db))
        for at in _moments(db, rng, 8):
            seq = daemon.view._moment(at).moment.seq
            assert daemon.view._timeline_for(seq) is daemon.timeline
            for command, job, params in questions:
                snapshots.calls = 0
                mine = await asked(daemon.view, command, at, job, params)
                assert snapshots.calls == 0, (db.name, at, command, job, params)  # from memory
                theirs = from_file(db, command, at, job, params)
                assert snapshots.calls > 0 or "error" in theirs  # (the file's answer starts at a snapshot)
                assert json.dumps(mine) == json.dumps(theirs), (db.name, where, at, command, job, params)
                outcomes.add(str(mine.get("status", "error" if "error" in mine else command)))
        daemon.view.close()
    assert {"queues", "pending"} <= outcomes and outcomes & {"pending", "admitted", "finished"}, outcomes


async def test_moments_the_daemons_timeline_does_not_cover_are_the_files_answers(
    logs: list[Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A budget too small for the whole log: the older moments forgotten (or never kept while it paused) are asked
    of the file, the others of the timeline; each page the file's answer either way."""
    snapshots = Snapshots(monkeypatch)
    taken = {"memory": 0, "file": 0}
    for seed, db in zip(SEEDS, logs, strict=True):
        rng = random.Random(seed)
        last = timed_events(db)[-1][0]
        daemon = Daemon(db, last // 2, budget_bytes=30_000)
        daemon.run()
        for at in _moments(db, rng, 12):
            seq = daemon.view._moment(at).moment.seq
            covered = daemon.view._timeline_for(seq) is not None
            assert covered == daemon.timeline.covers(seq)
            for command, job, params in [("queues", None, {}), ("pending", None, {})]:
                snapshots.calls = 0
                mine = await asked(daemon.view, command, at, job, params)
                assert (snapshots.calls == 0) == covered, (db.name, at, command)
                taken["memory" if covered else "file"] += 1
                if command == "pending":  # what the page reads of it (the file's answer has more around it)
                    mine = {"cluster_queues": {k: v[: render.MAX_ROWS] for k, v in mine["cluster_queues"].items()}}
                assert json.dumps(mine) == json.dumps(from_file(db, command, at, job, params)), (db.name, at, command)
        daemon.view.close()
    assert taken["memory"] > 0 and taken["file"] > 0, taken


def test_a_page_read_while_the_daemon_folds_in_another_thread_sees_whole_events(
    logs: list[Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The catch-up folds in a worker thread and the recorder feeds on the event loop's, while pages read the
    timeline in worker threads without a lock: each page at a moment the timeline covers when it is asked (its
    newest one above all, the event just kept) is the file's answer there, never an event half kept. The
    interpreter switches threads every microsecond here."""
    monkeypatch.setattr("daemon.views.follow.CHUNK", 3)
    monkeypatch.setattr(CatchingUp, "BUFFER_LEFT", 2)
    db = max(logs, key=lambda p: timed_events(p)[-1][0])
    daemon = Daemon(db, 0, budget_bytes=60_000)  # spans rotate while pages read
    view, timeline = daemon.view, daemon.timeline
    wanted: dict[int, tuple[Moment, dict[str, Any], dict[str, Any]]] = {}
    with LogReader(db) as reader:
        clock = clock_of(reader)
        for seq in range(clock.first_seq, clock.last_seq + 1):
            m = resolve(reader, clock, at=None, seq=seq, now_ms=0)
            got = [
                json.loads(answer_from_file(db, replace(parse(c, {}), seq=seq), 0, live=True).body)
                for c in ("queues", "pending")
            ]
            wanted[seq] = (m, got[0], {"cluster_queues": got[1]["cluster_queues"]})
    done = threading.Event()
    failures: list[str] = []
    during = [0]
    rng = random.Random(0)

    def feed() -> None:
        try:
            daemon.recorder.append(daemon.last // 3)  # kept: folded by the catch-up
            daemon.feed.catch_up()
            daemon.feed.hand_over()
            for upto in range(daemon.last // 3 + 1, daemon.last + 1):
                daemon.recorder.append(upto)  # live, one event at a time
                time.sleep(0)
        finally:
            done.set()

    def read() -> None:
        while True:
            last_round = done.is_set()
            newest = timeline.seq
            for seq in (newest, rng.randint(clock.first_seq, max(clock.first_seq, newest))):
                if not timeline.covers(seq):
                    continue
                moment, *theirs = wanted[seq]
                for command, their in zip(("queues", "pending"), theirs, strict=True):
                    mine = view._past(parse(command, {}), moment, timeline)
                    if json.dumps(mine) != json.dumps(their):
                        failures.append(f"seq {seq} {command}")
                during[0] += not last_round
            if last_round:
                return

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=read), threading.Thread(target=feed)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(100)
    finally:
        sys.setswitchinterval(before)
    view.close()
    assert done.is_set() and not failures, failures[:5]
    assert during[0] > 0  # pages were read while it was fed
    assert timeline.seq == daemon.last
