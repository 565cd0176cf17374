"""`preemptions` and `usage` served from the daemon's live projections (`daemon.answers.windows`, issue 26): the
start-up build from the file, then each answer over 7 days (and the last minute) of a ~1,000,000-event log, over
HTTP as `admitd run` serves it.

Usage: python -m bench.bench_windows [--runs 7] [--db bench/out/answers-1m.db]
The log is bench_answers' (built by it, or here when missing: `--scale 2 --until 0.5`). The projections are built
as the daemon builds them at its start (`Windows.build` from 8 days before the log's end, here its start: the log
is 9 minutes of virtual time), in this process; aiohttp serves `daemon.answers` on loopback and a client on the same
event loop asks. Each figure is the median of `--runs` requests (the first of each path is reported apart). The
benchmark checks that every answer came from the projections, not the file. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.bench_answers import ROOT, build, scaled
from bench.bench_query import BIG
from daemon.answers import http as answers_http
from daemon.answers.answer import Answers
from daemon.answers.windows import Windows
from daemon.eventlog import LogReader
from daemon.obs.logging import configure as configure_logging
from daemon.query.moment import clock_of


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def built(db: Path) -> tuple[Windows, dict[str, Any]]:
    windows = Windows()
    with LogReader(db) as reader:
        b = reader.bounds()
        assert b is not None
        rss0 = _rss_mib()
        t0, c0 = time.perf_counter(), time.process_time()
        following = windows.build(reader, b[2], now_ms=time.time_ns() // 1_000_000)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        t1 = time.perf_counter()
        windows.warm(clock_of(reader))  # as the daemon's start does, in the same worker thread
        warm = time.perf_counter() - t1
    windows.take_over(following, following.state)  # nothing held back: the projections go live on their own state
    assert windows.ready and windows.ledger is not None and windows.usage is not None
    return windows, {
        "events": b[2],
        "build_wall_s": round(wall, 1),
        "build_cpu_s": round(cpu, 1),
        "warm_rows_s": round(warm, 2),
        "peak_rss_mib_before": round(rss0),
        "peak_rss_mib_after": round(_rss_mib()),
        "preemptions_held": len(windows.ledger.entries),
        "usage_moments_kept": len(windows.usage._old) + len(windows.usage._recent),
        "usage_figures": len(windows.usage._names),
    }


async def measure(db: Path, runs: int) -> dict[str, Any]:
    windows, out = built(db)
    answers = Answers(db, windows=windows)
    app = web.Application()
    answers_http.add_routes(app, answers)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}/answers/v1"
    paths = {
        "preemptions, 7 days": "/preemptions?since=7d",
        "preemptions, 7 days, one ClusterQueue": None,  # filled below with the busiest victim queue
        "preemptions, the last minute": "/preemptions?since=1m",
        "usage, 7 days, by clusterqueue": "/usage?since=7d",
        "usage, 7 days, by localqueue": "/usage?since=7d&by=localqueue",
        "usage, the last minute, by namespace": "/usage?since=1m&by=namespace",
        "usage, 7 days, as text": "/usage?since=7d&format=text",
    }
    assert windows.ledger is not None
    counts: dict[str, int] = {}
    for p in windows.ledger.entries:
        counts[p.victim_cluster_queue] = counts.get(p.victim_cluster_queue, 0) + 1
    paths["preemptions, 7 days, one ClusterQueue"] = f"/preemptions?since=7d&queue={max(counts, key=counts.get)}"  # type: ignore[arg-type]
    answered: dict[str, Any] = {}
    try:
        async with aiohttp.ClientSession() as session:
            for name, path in paths.items():
                assert path is not None
                times, size, rows, first = [], 0, None, 0.0
                for i in range(runs + 1):
                    started = time.perf_counter()
                    async with session.get(base + path) as r:
                        body = await r.read()
                        assert r.status == 200, (path, r.status, body[:300])
                    if i:
                        times.append(time.perf_counter() - started)
                    else:
                        first = time.perf_counter() - started
                    size = len(body)
                    if r.content_type == "application/json":
                        doc = json.loads(body)
                        rows = len(doc.get("preemptions", doc.get("usage", ())))
                answered[name] = {
                    "median_ms": round(statistics.median(times) * 1000, 1),
                    "max_ms": round(max(times) * 1000, 1),
                    "first_ms": round(first * 1000, 1),
                    "bytes": size,
                    "rows": rows,
                    "path": path,
                }
    finally:
        answers.close()
        await runner.cleanup()
    assert answers.live_answers == len(paths) * (runs + 1), "every answer must come from the projections"
    out["answers"] = answered
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--db", type=Path, default=ROOT / "bench" / "out" / "answers-1m.db")
    args = parser.parse_args()
    configure_logging(level="warning")
    out: dict[str, Any] = {}
    if not args.db.exists():
        args.db.parent.mkdir(parents=True, exist_ok=True)
        out["build"] = build(args.db, scaled(BIG, 2.0), 0.5)
    out.update(asyncio.run(measure(args.db, args.runs)))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
