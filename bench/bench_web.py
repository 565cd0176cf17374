"""The web view (`daemon.web`, issue 27): each page's time on a 1,000,000-event log, served as `admitd ui` serves
it (target: under 200 ms a page, at the present and at a past moment).

Usage: python -m bench.bench_web [--runs 5] [--db bench/out/web-1m.db] [--scale 2.6] [--until 0.5]
The log (built and cached, git-ignored, when missing): bench_query's deep backlog (`BIG`) scaled by `--scale` and
simulated until `--until` of its arrivals' span, so that it ends with its backlog waiting (x2.6 until 0.5: about
1,000,000 events; bench_answers' x2 gives 780,809). The application is `daemon.web.cli.application` on loopback in
this process, as `admitd ui --db` runs it; the series' first fold (the whole log, once, in a worker thread, its
timeline kept on the way) is timed apart, with what the timeline took (its `observe` calls' time, its start and
estimated bytes) and the process's resident memory then. The pages at past moments (a quarter, the middle and nine
tenths of the log's span) are timed first, once the preemptions (the ClusterQueue page's table) are
ready; then the whole-log estimates are let finish, as in the background of a running view, and the present's pages
timed. Each figure is the median of `--runs` requests of a page (the first of each is not counted), the whole HTTP
round trip from a client on the same event loop. `--no-timeline`: the series keeps none (pages at past moments
from the file; for the memory and the fold time it costs). Prints one JSON object.

`--daemon` (the pages at past moments only): served as `admitd run --ui` serves them instead, by a `WebView` on a
series and a timeline fed by the daemon's one fold (`views.follow.CatchingUp`, wired as daemon.kube.run wires it):
a live state from the log at `--live-from` of its events (a restarted daemon's, from the file's snapshot and tail),
the catch-up folding the log up to there in a worker thread (the timeline fed on the way), the hand-over, then the
rest of the log fed event by event as its recorder feeds it (the feed, the queues, the state, then the feed's
`folded`), timed apart. `--past-memory MIB`: the timeline's budget (default the daemon's, 128 MiB); with
`--no-timeline` the daemon's view keeps none (its past pages the file's answers, as before issue 27's last step).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from bench.bench_answers import build, scaled
from bench.bench_query import BIG
from daemon.eventlog import LogReader
from daemon.obs.logging import configure as configure_logging
from daemon.query import moment as moment_mod
from daemon.query.moment import clock_of
from daemon.web.cli import VIEW, application

ROOT = Path(__file__).resolve().parent.parent
PAST = (0.25, 0.5, 0.9)  # the past moments: these parts of the log's span


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return -1.0


async def _time(session: aiohttp.ClientSession, url: str, runs: int) -> dict[str, Any]:
    times, size, status = [], 0, 0
    for i in range(runs + 1):
        started = time.perf_counter()
        async with session.get(url) as r:
            body = await r.read()
            status = r.status
        if i:
            times.append(time.perf_counter() - started)
        size = len(body)
    return {
        "median_ms": round(statistics.median(times) * 1000, 1),
        "max_ms": round(max(times) * 1000, 1),
        "bytes": size,
        "status": status,
    }


def admitted_at(reader: LogReader, seq: int, cq: str) -> str:
    """A job admitted in `cq` at `seq` (the first in key order), from the whole state there."""
    from daemon.query.moment import state_at  # noqa: PLC0415

    admitted = state_at(reader, seq).view().admitted_by_cq.get(cq, {})
    return min(admitted) if admitted else "none/none"


async def measure(db: Path, runs: int, timeline: bool, present: bool = True) -> dict[str, Any]:
    observed = [0.0, 0]
    observe = moment_mod.Timeline.observe

    def timed_observe(self: moment_mod.Timeline, event: Any, seq: int, state: Any) -> None:
        t = time.perf_counter()
        try:
            observe(self, event, seq, state)
        finally:
            observed[0] += time.perf_counter() - t
            observed[1] += 1

    moment_mod.Timeline.observe = timed_observe  # type: ignore[method-assign]
    if not timeline:
        moment_mod.Timeline.observe = lambda *_: None  # type: ignore[method-assign]
    app = application(db)
    view = app[VIEW]
    runner = web.AppRunner(app, access_log=None)
    rss_before = _rss_mib()
    t0 = time.perf_counter()
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await view.series_ready.wait()
    fold_s = time.perf_counter() - t0
    rss_after = _rss_mib()
    tl = view.series.timeline
    base = f"http://127.0.0.1:{port}/ui"
    state = view.series.state
    pending = state.view().pending_by_cq
    deepest = max(pending, key=lambda c: len(pending[c]))
    bucket = pending[deepest]
    job = bucket[len(bucket) // 2].key
    admitted = next(iter(state.view().admitted))
    with LogReader(db) as reader:
        clock = clock_of(reader)
    out: dict[str, Any] = {}
    past: dict[str, Any] = {}
    try:
        async with aiohttp.ClientSession() as session:
            t1 = time.perf_counter()
            first = quote(clock.show(clock.first_ms) or "", safe="")
            async with session.get(base + f"/clusterqueue/{deepest}?at={first}") as r:  # starts the preemptions
                await r.read()
            await view._preemptions.wait()
            preemptions_s = time.perf_counter() - t1
            for part in PAST:
                ms = clock.first_ms + int((clock.last_ms - clock.first_ms) * part)
                at = quote(clock.show(ms) or "", safe="")
                with LogReader(db) as reader:
                    then = admitted_at(reader, reader.seq_at(ms), deepest)
                for name, path in {
                    "overview": f"/?at={at}",
                    "ClusterQueue, the deepest now": f"/clusterqueue/{deepest}?at={at}",
                    "job pending in the middle of the deepest queue now": f"/job/{job}?at={at}",
                    "job admitted then": f"/job/{then}?at={at}",
                }.items():
                    key = f"{name} (at {part:g} of the span)"
                    past[key] = {**await _time(session, base + path, runs), "path": path}
                    print(json.dumps({key: past[key]}), file=sys.stderr, flush=True)
            if not present:
                return _result(locals())
            # The whole-log answers a ClusterQueue page shows at the present (estimates): let them finish once.
            t2 = time.perf_counter()
            async with session.get(base + f"/clusterqueue/{deepest}") as r:
                await r.read()
            await view._eta.wait()
            estimates_s = time.perf_counter() - t2
            for name, path in {
                "overview (present)": "/",
                "ClusterQueue, the deepest (present)": f"/clusterqueue/{deepest}",
                "job pending in the middle of the deepest queue (present)": f"/job/{job}",
                "job, admitted (present)": f"/job/{admitted}",
                "event": f"/event/{clock.last_seq // 2}",
                "head (the pages' poll)": "/api/head",
            }.items():
                out[name] = {**await _time(session, base + path, runs), "path": path}
    finally:
        await runner.cleanup()
    return _result(locals())


def _result(v: dict[str, Any]) -> dict[str, Any]:
    tl, state, pending, clock, view = v["tl"], v["state"], v["pending"], v["clock"], v["view"]
    return {
        "log": str(v["db"]),
        "events": clock.last_seq,
        "series_first_fold_s": round(v["fold_s"], 1),
        "timeline": {
            "start": tl.start,
            "estimated_mib": round(tl.nbytes / 2**20, 1),
            "observed": v["observed"][1],
            "observe_s": round(v["observed"][0], 1),
        },
        "rss_mib": {"before_fold": v["rss_before"], "after_fold": v["rss_after"]},
        "preemptions_s": round(v["preemptions_s"], 1),
        "estimates_s": round(v["estimates_s"], 1) if "estimates_s" in v else None,
        "deepest_pending": len(v["bucket"]),
        "pending_total": sum(len(b) for b in pending.values()),
        "admitted_total": len(state.view().admitted),
        "plot_points_kept_per_queue": max(len(p) for p in view.series.points.values()),
        "pages_past": v["past"],
        "pages_present": v["out"],
    }


async def measure_daemon(db: Path, runs: int, timeline: bool, budget_bytes: int, live_from: float) -> dict[str, Any]:
    """The pages at past moments as `admitd run --ui` serves them (see the module's docstring)."""
    from daemon.answers.answer import Answers  # noqa: PLC0415
    from daemon.domain.state import State  # noqa: PLC0415
    from daemon.eventlog import codec  # noqa: PLC0415
    from daemon.query.moment import Timeline, state_at  # noqa: PLC0415
    from daemon.views.follow import CatchingUp  # noqa: PLC0415
    from daemon.views.queues import Queues  # noqa: PLC0415
    from daemon.views.series import QueueSeries  # noqa: PLC0415
    from daemon.web.server import WebView  # noqa: PLC0415

    observed = [0.0, 0]

    def timed(observe: Any) -> Any:
        def inner(event: Any, seq: int, state: State) -> None:
            t = time.perf_counter()
            observe(event, seq, state)
            observed[0] += time.perf_counter() - t
            observed[1] += 1

        return inner

    with LogReader(db) as reader:
        clock = clock_of(reader)
        start = max(1, int(clock.last_seq * live_from))
        t0 = time.perf_counter()
        live = state_at(reader, start)  # a restarted daemon's state: the snapshot, then the tail
        live_state_s = time.perf_counter() - t0
        rest = [
            (seq, at, codec.decode(t, v, p if isinstance(p, bytes) else p.encode(), seq=seq))
            for seq, at, t, v, p in reader.iter_timed_payloads(start)
        ]
    now = [clock.first_ms]
    queues = Queues.of(live)
    feed = CatchingUp(db, live, queues, lambda: now[0])
    assert feed.state is not None and feed.queues is not None
    series = QueueSeries(feed.state, feed.queues)
    feed.add(series)
    tl = Timeline(budget_bytes=budget_bytes) if timeline else None
    if tl is not None:
        feed.add_folded(timed(tl.observe))
    rss_before = _rss_mib()
    t1 = time.perf_counter()
    await asyncio.to_thread(feed.catch_up)
    feed.hand_over()
    catch_up_s = time.perf_counter() - t1
    observed_catch_up = list(observed)
    t2 = time.perf_counter()
    for seq, at, event in rest:  # the recorder's order (daemon.stages.recorder.Recorder.append)
        now[0] = at
        feed.apply(event, seq)
        queues.apply(event, seq)
        live.apply(event, seq)
        feed.folded(event, seq)
    live_s = time.perf_counter() - t2
    rss_after = _rss_mib()
    view = WebView(db, Answers(db), series=series, series_lock=feed.lock, timeline=tl)
    view.series_ready.set()
    app = web.Application()
    view.add_routes(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}/ui"
    pending = live.view().pending_by_cq
    deepest = max(pending, key=lambda c: len(pending[c]))
    bucket = pending[deepest]
    job = bucket[len(bucket) // 2].key
    past: dict[str, Any] = {}
    try:
        async with aiohttp.ClientSession() as session:
            first = quote(clock.show(clock.first_ms) or "", safe="")
            async with session.get(base + f"/clusterqueue/{deepest}?at={first}") as r:  # starts the preemptions
                await r.read()
            await view._preemptions.wait()
            for part in PAST:
                ms = clock.first_ms + int((clock.last_ms - clock.first_ms) * part)
                at = quote(clock.show(ms) or "", safe="")
                with LogReader(db) as reader:
                    seq = reader.seq_at(ms)
                    then = admitted_at(reader, seq, deepest)
                for name, path in {
                    "overview": f"/?at={at}",
                    "ClusterQueue, the deepest now": f"/clusterqueue/{deepest}?at={at}",
                    "job pending in the middle of the deepest queue now": f"/job/{job}?at={at}",
                    "job admitted then": f"/job/{then}?at={at}",
                }.items():
                    key = f"{name} (at {part:g} of the span)"
                    got = await _time(session, base + path, runs)
                    past[key] = {**got, "path": path, "from": "memory" if view._timeline_for(seq) else "file"}
                    print(json.dumps({key: past[key]}), file=sys.stderr, flush=True)
    finally:
        await runner.cleanup()
    return {
        "log": str(db),
        "events": clock.last_seq,
        "mode": "daemon",
        "live_from_seq": start,
        "live_state_s": round(live_state_s, 1),
        "catch_up_s": round(catch_up_s, 1),
        "live_feed": {"events": len(rest), "s": round(live_s, 2)},
        "timeline": None
        if tl is None
        else {
            "budget_mib": round(budget_bytes / 2**20),
            "start": tl.start,
            "seq": tl.seq,
            "paused": tl.paused,
            "spans": [(sp.start, sp.seq) for sp in tl._spans],
            "estimated_mib": round(tl.nbytes / 2**20, 1),
            "observed_in_catch_up": observed_catch_up[1],
            "observe_in_catch_up_s": round(observed_catch_up[0], 1),
            "observed_live": observed[1] - observed_catch_up[1],
            "observe_live_s": round(observed[0] - observed_catch_up[0], 2),
        },
        "rss_mib": {"before_catch_up": rss_before, "after_live_feed": rss_after},
        "deepest_pending": len(bucket),
        "pages_past": past,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--db", type=Path, default=ROOT / "bench" / "out" / "web-1m.db")
    parser.add_argument("--scale", type=float, default=2.6, help="a --db that does not exist: BIG scaled by this")
    parser.add_argument("--until", type=float, default=0.5, help="... and simulated until this part of its arrivals")
    parser.add_argument("--no-timeline", action="store_true", help="the series keeps no timeline")
    parser.add_argument("--past-only", action="store_true", help="time the pages at past moments only")
    parser.add_argument("--daemon", action="store_true", help="as `admitd run --ui` serves them (past pages)")
    parser.add_argument("--past-memory", type=int, default=None, metavar="MIB", help="--daemon: the timeline's budget")
    parser.add_argument("--live-from", type=float, default=0.9, help="--daemon: where its live state begins")
    args = parser.parse_args()
    configure_logging(level="warning")
    out: dict[str, Any] = {}
    if not args.db.exists():
        args.db.parent.mkdir(parents=True, exist_ok=True)
        out["build"] = build(args.db, scaled(BIG, args.scale), args.until)
    if args.daemon:
        from daemon.web.server import DAEMON_PAST_BUDGET_BYTES  # noqa: PLC0415

        budget = DAEMON_PAST_BUDGET_BYTES if args.past_memory is None else args.past_memory * 2**20
        out.update(asyncio.run(measure_daemon(args.db, args.runs, not args.no_timeline, budget, args.live_from)))
    else:
        out.update(asyncio.run(measure(args.db, args.runs, not args.no_timeline, not args.past_only)))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
