"""`preemptions` and `usage` served from the daemon's live projections (daemon/answers/windows.py): fed live by the
simulator's Recorder they equal the same rebuilt from its log; built from a file up to a seq, then fed the rest
as the daemon's recorder would, their answers over HTTP are the CLI's `--json` on the same file (whole log, a
window from a kept moment, a window reaching before what they hold, which the file answers); `admitd preemptions
|usage|eta --server URL` prints what `--db` prints.

Real: the simulator's stages, Recorder and log, the fold, the projections, aiohttp on loopback, the CLI as a
subprocess. Faked: the cluster (the simulator's virtual clock).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.answers.answer import Answers
from daemon.answers.windows import Windows
from daemon.domain.state import State
from daemon.eventlog import LogReader, codec, replay
from daemon.metrics import FedMetrics
from daemon.query.moment import clock_of
from daemon.sim.run import run_simulation
from daemon.sim.scenario import load_scenario
from daemon.views.follow import CatchingUp, Following
from daemon.views.projection import Projection
from daemon.views.queues import Queues
from tests.integration.test_metrics_fast_path import random_scenario
from tests.integration.test_served_answers import ROOT, _serve, cli, simulate
from tests.integration.test_views_catch_up import timed_events

SMALL = {"bucket_ms": 10_000, "recent_ms": 60_000, "coarse_ms": 30_000, "retention_ms": 200_000}
"""Windows of 10 s, kept for a minute, then every 30 s, 200 s in all: a few minutes of simulation prune them."""


def _direct(w: Windows) -> Projection:
    from daemon.answers.windows import _Direct  # noqa: PLC0415

    return _Direct(w)


@pytest.mark.parametrize("seed", range(3))
def test_windows_fed_live_equal_the_same_rebuilt_from_the_log(tmp_path: Path, seed: int) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(random_scenario(seed))
    live = Windows(hold=False, **SMALL)

    def attach(state: State) -> list[Projection]:
        live.begin(state, 0, whole=True)
        return [_direct(live)]

    db = tmp_path / "sim.db"
    result = asyncio.run(run_simulation(load_scenario(scenario), db_path=db, views=attach))
    assert result.state is not None
    rebuilt = Windows(hold=False, **SMALL)
    state = State(pending_indexes=False)
    rebuilt.begin(state, 0, whole=True)
    with LogReader(db) as reader:
        Following(state, [_direct(rebuilt)]).follow(reader)
    assert rebuilt.seq == live.seq == result.state.seq
    assert live.figures() == rebuilt.figures()
    assert live.usage is not None and live.usage.oldest > 0  # pruned: the run is longer than the retention
    assert not live.whole


async def _cli_async(*args: str) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemon.cli",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    return out


def _windows_of(db: Path, upto_share: float, **options: int) -> Windows:
    """Built from the file up to a share of its events (as the daemon's start builds them up to its state), then the
    rest fed as its recorder would while they were built, then handed a state folded to the end."""
    w = Windows(**options)
    with LogReader(db) as reader:
        last = reader.bounds()[2]  # type: ignore[index]
        upto = int(last * upto_share)
        following = w.build(reader, upto, now_ms=0)
        for row in reader.iter_events():
            if row.seq > upto:
                w.apply(codec.decode(row.type, row.version, row.payload, seq=row.seq), row.seq)
        state = replay(reader)
    w.take_over(following, state)
    assert w.ready and w.seq == last
    return w


@pytest.fixture(scope="module")
def reclaim_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reclaim sample cut at 40 minutes: two preemptions (at 5m and 25m), a borrower pending."""
    path = tmp_path_factory.mktemp("windows") / "reclaim.db"
    return simulate(ROOT / "config" / "samples" / "cohort-borrow-reclaim.yaml", path, "--until", "40m")


async def test_answers_from_the_live_windows_are_the_clis(reclaim_db: Path) -> None:
    db = reclaim_db
    windows = _windows_of(db, 0.5)
    assert windows.whole  # the default retention covers this log from its start
    async for served in _serve(Answers(db, windows=windows)):
        asked: list[tuple[str, dict[str, str], list[str]]] = [
            ("preemptions", {}, []),
            ("preemptions", {"queue": "team-b"}, ["--queue", "team-b"]),
            ("preemptions", {"since": "+6m"}, ["--since", "+6m"]),
            ("usage", {}, []),
            ("usage", {"by": "namespace"}, ["--by", "namespace"]),
            ("usage", {"by": "localqueue", "since": "+10m"}, ["--by", "localqueue", "--since", "+10m"]),
        ]
        for command, params, options in asked:
            status, body = await served.get(f"/answers/v1/{command}", **params)
            assert status == 200, body
            assert body == cli(command, "--db", str(db), *options), (command, params)
        assert served.answers.live_answers == len(asked)
        whole = (await served.get("/answers/v1/preemptions"))[1]
        assert [r["victim"] for r in whole["preemptions"]] == ["team-a/a-borrower", "team-b/b-routine"]
        usage = (await served.get("/answers/v1/usage"))[1]
        assert usage["usage"]["team-a"]["gpuHours"] > 0
        # A start between kept moments (each minute): the minute before it, which `since` shows.
        status, body = await served.get("/answers/v1/usage", since="+10m30s")
        assert status == 200 and body == cli("usage", "--db", str(db), "--since", "+10m")
        # The CLI asks the daemon: the same bytes as from the file.
        for command, options in (("preemptions", ["--since", "+6m"]), ("usage", ["--by", "namespace"]), ("eta", [])):
            served_out = await _cli_async(command, "--server", served.base, "--json", *options)
            assert json.loads(served_out) == cli(command, "--db", str(db), *options), command
        text = await _cli_async("usage", "--server", served.base)
        assert text.decode().startswith("usage by clusterqueue from")


async def test_a_window_before_what_the_projections_hold_is_answered_from_the_file(reclaim_db: Path) -> None:
    db = reclaim_db
    windows = _windows_of(db, 0.75, retention_ms=12 * 60_000)  # from 12 minutes before the log's end (20m)
    assert not windows.whole and windows.usage is not None
    oldest = windows.usage.oldest
    async for served in _serve(Answers(db, windows=windows)):
        status, body = await served.get("/answers/v1/usage", since="+10m")  # after `oldest`: live
        assert status == 200 and body == cli("usage", "--db", str(db), "--since", "+10m")
        assert body["usage"]["team-a"]["gpuHours"] > 0
        assert served.answers.live_answers == 1
        for command in ("usage", "preemptions"):  # before it: from the file, the CLI's answer all the same
            status, body = await served.get(f"/answers/v1/{command}", since="+5m")
            assert status == 200 and body == cli(command, "--db", str(db), "--since", "+5m")
        assert served.answers.live_answers == 1
    assert oldest == 8 * 60_000


def _daemon_feed(db: Path, state: State, recorder: Any, windows: Windows) -> CatchingUp:
    """The feed as `admitd run` makes it: the metrics' counters from the log's start, the windows from where their
    retention begins, one catch-up fold for both, the recorder's one projection (it feeds the status writer's queues
    after its parts), told of each batch's recorded_at."""
    queues = Queues.of(state)
    feed = CatchingUp(db, state, queues)
    assert feed.state is not None and feed.queues is not None
    feed.add(FedMetrics(db, feed.state, feed.queues, lambda: "leader"))
    feed.add_late(windows)
    recorder.projections.insert(0, feed.apply)
    recorder.batches.append(feed.tick)
    return feed


async def test_caught_up_as_the_daemon_does_it_while_its_recorder_appends(reclaim_db: Path, tmp_path: Path) -> None:
    """The windows as `admitd run` builds them: a part of the one catch-up fold (`CatchingUp.add_late`), folded in a
    thread while the recorder appends (those events kept, then folded on top), handed over and fed live; at the end
    the same figures as projections built from the whole file on their own (`Windows.build`), and the log was read
    once: every row up to the daemon's state decoded once, for the counters and the windows together."""
    import shutil  # noqa: PLC0415

    from daemon.domain import events as ev  # noqa: PLC0415
    from daemon.domain.state import Phase  # noqa: PLC0415
    from daemon.eventlog import EventStore  # noqa: PLC0415
    from daemon.sim.run import VirtualClock  # noqa: PLC0415
    from daemon.stages.recorder import Recorder  # noqa: PLC0415

    db = tmp_path / "copy.db"
    shutil.copy(reclaim_db, db)
    with LogReader(db) as reader:
        state = replay(reader)
        last_ms = reader.bounds()[3]  # type: ignore[index]
    running = sorted(k for k, r in state.workloads.items() if r.phase is Phase.ADMITTED)
    assert len(running) >= 2
    upto = state.seq
    clock = VirtualClock()
    clock.at = last_ms + 90_000
    async with await EventStore.open(db) as store:
        recorder = Recorder(store, state, clock, wait_durable=True)
        windows = Windows(now=clock.now)
        feed = _daemon_feed(db, state, recorder, windows)
        # Appended before the catch-up has even begun: kept, folded on top of it.
        await recorder.append([(ev.JobFinished(job=running[0], at=last_ms + 90_000), None)])
        assert not windows.ready
        await asyncio.to_thread(feed.catch_up)
        assert not windows.ready  # folded, not yet handed over: the answers come from the file
        feed.hand_over()
        assert windows.ready
        clock.at = last_ms + 200_000
        await recorder.append([(ev.JobFinished(job=running[1], at=last_ms + 200_000), None)])  # live
    assert feed.rows_read == upto  # one fold: each row of the log read once, the windows' included
    rebuilt = Windows()
    with LogReader(db) as reader:
        following = rebuilt.build(reader, reader.bounds()[2], now_ms=0)  # type: ignore[index]
    rebuilt.take_over(following, following.state)
    assert windows.seq == rebuilt.seq == state.seq
    assert windows.figures() == rebuilt.figures()
    assert windows.ledger is not None and windows.ledger.state is state  # fed on the daemon's own state
    async for served in _serve(Answers(db, windows=windows)):
        status, body = await served.get("/answers/v1/usage", by="namespace")
        assert status == 200 and body == cli("usage", "--db", str(db), "--by", "namespace")
        assert served.answers.live_answers == 1


@pytest.mark.parametrize("share", [0.75, 0.9, 1.0])
def test_windows_begun_mid_fold_equal_the_same_built_on_their_own(reclaim_db: Path, share: float) -> None:
    """A retention that begins inside the log (12 minutes before the end of a 40-minute log): the catch-up fold
    begins the windows on its own state where their retention begins (`plan`), and they hold what the old start-up
    build held, from a state rebuilt at that point and a second pass over the rest of the file. The daemon's state
    began at a share of the log (a snapshot's seq); the rest comes as the recorder's events."""
    options = {"retention_ms": 12 * 60_000}
    events = timed_events(reclaim_db)
    last = events[-1][0]
    upto = int(last * share)
    live = State()
    for seq, _, event in events[:upto]:
        live.apply(event, seq)
    queues = Queues.of(live)
    feed = CatchingUp(reclaim_db, live, queues)
    windows = Windows(**options)  # type: ignore[arg-type]
    feed.add_late(windows)
    with LogReader(reclaim_db) as reader:
        seq = windows.plan(reader, upto)
    assert 0 < seq <= upto  # it begins inside the fold, not at the log's start
    for seq, at, event in events[upto:]:
        feed.tick(at)  # a batch of one event
        feed.apply(event, seq)  # kept until the hand-over (the feed feeds `queues` too)
        live.apply(event, seq)
    windows._plan = None  # planned again by the catch-up, as the daemon's does it
    feed.catch_up()
    feed.hand_over()
    assert feed.rows_read == upto
    alone = _windows_of(reclaim_db, share, **options)
    assert not windows.whole and windows.seq == alone.seq == last
    assert windows.figures() == alone.figures()


TRY = """apiVersion: batch/v1
kind: Job
metadata:
  name: try-{name}
  namespace: team-{team}
  labels: {{kueue.x-k8s.io/queue-name: main}}
spec:
  parallelism: {gpus}
  template:
    spec:
      restartPolicy: Never
      containers:
      - {{name: w, image: w, resources: {{requests: {{nvidia.com/gpu: 1}}}}}}
"""


async def test_a_dry_run_asked_of_the_daemon_is_the_one_on_its_file(reclaim_db: Path, tmp_path: Path) -> None:
    """`admitd simulate --server URL -f JOB.yaml` (POST /answers/v1/simulate) on the daemon's live state prints what
    `--against LOG` prints on its file: a job that would wait with its estimate, one that never fits, as JSON and
    as text; nothing is written; a GET or an empty body is a clear 4xx."""
    db = reclaim_db
    job = tmp_path / "try.yaml"
    job.write_text(TRY.format(name="one", team="a", gpus=4) + "---\n" + TRY.format(name="huge", team="b", gpus=64))
    with LogReader(db) as reader:
        state = replay(reader)
    before = db.stat().st_size, db.stat().st_mtime_ns
    async for served in _serve(Answers(db, state=state, windows=_windows_of(db, 0.5))):
        from_server = json.loads(await _cli_async("simulate", "--server", served.base, "-f", str(job), "--json"))
        from_file = cli("simulate", "--against", str(db), "-f", str(job))
        assert from_server == from_file
        rows = {r["job"]: r for r in from_server["jobs"]}
        assert rows["team-b/try-huge"]["never"] and rows["team-b/try-huge"]["reason"]["kind"] == "ExceedsMaxQuota"
        assert not rows["team-a/try-one"]["never"]
        text = await _cli_async("simulate", "--server", served.base, "-f", str(job))
        assert text.decode().startswith("team-a/try-one: would")
        assert served.answers.live_answers == 2
        status, err = await served.get("/answers/v1/simulate")
        assert status == 405 and "POST" in err["error"]["message"]
        async with served.session.post(served.base + "/answers/v1/simulate", data=b"") as r:
            assert r.status == 400 and (await r.json())["error"]["parameter"] == "body"
        async with served.session.post(served.base + "/answers/v1/simulate", data=b"kind: ConfigMap\n") as r:
            assert r.status == 400 and "no Job admitd would manage" in (await r.json())["error"]["message"]
    assert (db.stat().st_size, db.stat().st_mtime_ns) == before


async def test_a_new_log_goes_live_at_once_and_counts_from_its_first_event(reclaim_db: Path, tmp_path: Path) -> None:
    """A daemon on a new log (nothing to fold): the windows begin at once with the catch-up, live on its first
    events, and they equal the same rebuilt from the file once the events are in it."""
    from daemon.eventlog import EventStore  # noqa: PLC0415
    from daemon.sim.run import VirtualClock  # noqa: PLC0415
    from daemon.stages.recorder import Recorder  # noqa: PLC0415

    with LogReader(reclaim_db) as reader:
        events = [codec.decode(r.type, r.version, r.payload, seq=r.seq) for r in reader.iter_events()]
    db = tmp_path / "new.db"
    clock = VirtualClock()
    state = State()
    async with await EventStore.open(db) as store:
        recorder = Recorder(store, state, clock, wait_durable=True)
        windows = Windows(now=clock.now)
        feed = _daemon_feed(db, state, recorder, windows)
        assert feed.catch_up() == 0 and feed.rows_read == 0
        feed.hand_over()
        assert windows.ready and windows.whole
        for event in events:
            clock.at = max(clock.at, getattr(event, "at", clock.at) or clock.at)
            await recorder.append([(event, None)])
    assert windows.ledger is not None and [p.victim for p in windows.ledger.entries] == [
        "team-a/a-borrower",
        "team-b/b-routine",
    ]
    async for served in _serve(Answers(db, windows=windows)):
        for command in ("preemptions", "usage"):
            status, body = await served.get(f"/answers/v1/{command}")
            assert status == 200 and body == cli(command, "--db", str(db)), command
        assert served.answers.live_answers == 2


def test_a_rows_kept_json_changes_when_its_victim_reruns(reclaim_db: Path) -> None:
    """The encoded rows are kept between answers; a row asked for before its victim ran again is made again after."""
    live = Windows(hold=False)
    state = State(pending_indexes=False)
    live.begin(state, 0, whole=True)
    following = Following(state, [_direct(live)])
    with LogReader(reclaim_db) as reader:
        clock = clock_of(reader)
        rows = list(reader.iter_events())
        second = next(r.seq for r in rows if r.type == "workload.preempted" and r.seq > 14)
        following.follow(reader, limit=second)  # both preemptions in, the second's victim not yet admitted again
        early = json.loads(live.preemptions_json(clock, 0, None) or b"")
        assert [r["rerunAfterSeconds"] for r in early["preemptions"]][1] is None
        following.follow(reader)
    late = json.loads(live.preemptions_json(clock, 0, None) or b"")
    assert late == cli("preemptions", "--db", str(reclaim_db))
    assert late["preemptions"][1]["rerunAfterSeconds"] is not None
