"""The web view (`daemon.web`, issue 27): each page's time on a ~1,000,000-event log, served as `admitd ui` serves
it (target: under 200 ms a page).

Usage: python -m bench.bench_web [--runs 7] [--db bench/out/answers-1m.db]
The log is bench_answers' (built and cached the same way when missing: bench_query's deep backlog at twice its jobs,
simulated until half of its arrivals' span, so that it ends with its backlog waiting). The application is
`daemon.web.cli.application` on loopback in this process, as `admitd ui --db` runs it; the series' first fold (the
whole log, once, in a worker thread) is timed apart, then the whole-log answers (estimates, preemptions) are let
finish once, as they do in the background of a running view. Each figure is the median of `--runs` requests of a
page (the first of each is not counted), the whole HTTP round trip from a client on the same event loop. Prints one
JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
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
from daemon.query.moment import clock_of
from daemon.web.cli import VIEW, application

ROOT = Path(__file__).resolve().parent.parent


async def measure(db: Path, runs: int) -> dict[str, Any]:
    app = application(db)
    view = app[VIEW]
    runner = web.AppRunner(app, access_log=None)
    t0 = time.perf_counter()
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await view.series_ready.wait()
    fold_s = time.perf_counter() - t0
    base = f"http://127.0.0.1:{port}/ui"
    state = view.series.state
    pending = state.view().pending_by_cq
    deepest = max(pending, key=lambda c: len(pending[c]))
    bucket = pending[deepest]
    job = bucket[len(bucket) // 2].key
    admitted = next(iter(state.view().admitted))
    with LogReader(db) as reader:
        clock = clock_of(reader)
    middle_ms = (clock.first_ms + clock.last_ms) // 2
    at = quote(clock.show(middle_ms) or "", safe="")
    paths = {
        "overview (present)": "/",
        "overview (a past moment, the log's middle)": f"/?at={at}",
        "ClusterQueue, the deepest (present)": f"/clusterqueue/{deepest}",
        "ClusterQueue, the deepest (past moment)": f"/clusterqueue/{deepest}?at={at}",
        "job pending in the middle of the deepest queue (present)": f"/job/{job}",
        "job, admitted (present)": f"/job/{admitted}",
        "job pending (past moment)": f"/job/{job}?at={at}",
        "event": f"/event/{clock.last_seq // 2}",
        "head (the pages' poll)": "/api/head",
    }
    out: dict[str, Any] = {}
    try:
        async with aiohttp.ClientSession() as session:
            # The whole-log answers a ClusterQueue page shows (estimates, preemptions): let them finish once.
            t1 = time.perf_counter()
            async with session.get(base + f"/clusterqueue/{deepest}") as r:
                await r.read()
            for bg in (view._eta, view._preemptions):
                await bg.wait()
            background_s = time.perf_counter() - t1
            for name, path in paths.items():
                times, size, status = [], 0, 0
                for i in range(runs + 1):
                    started = time.perf_counter()
                    async with session.get(base + path) as r:
                        body = await r.read()
                        status = r.status
                    if i:
                        times.append(time.perf_counter() - started)
                    size = len(body)
                out[name] = {
                    "median_ms": round(statistics.median(times) * 1000, 1),
                    "max_ms": round(max(times) * 1000, 1),
                    "bytes": size,
                    "status": status,
                    "path": path,
                }
    finally:
        await runner.cleanup()
    return {
        "log": str(db),
        "events": clock.last_seq,
        "series_first_fold_s": round(fold_s, 1),
        "background_answers_s": round(background_s, 1),
        "deepest_pending": len(bucket),
        "pending_total": sum(len(b) for b in pending.values()),
        "plot_points_kept_per_queue": max(len(p) for p in view.series.points.values()),
        "pages": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--db", type=Path, default=ROOT / "bench" / "out" / "answers-1m.db")
    parser.add_argument("--scale", type=float, default=2.0, help="a --db that does not exist: BIG scaled by this")
    parser.add_argument("--until", type=float, default=0.5, help="... and simulated until this part of its arrivals")
    args = parser.parse_args()
    configure_logging(level="warning")
    out: dict[str, Any] = {}
    if not args.db.exists():
        args.db.parent.mkdir(parents=True, exist_ok=True)
        out["build"] = build(args.db, scaled(BIG, args.scale), args.until)
    out.update(asyncio.run(measure(args.db, args.runs)))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
