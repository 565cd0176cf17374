"""The answers API (`daemon.answers`, issue 25): each HTTP answer at the present moment, served from a live fold of a
~1,000,000-event log's state, as `admitd run` serves it.

Usage: python -m bench.bench_answers [--runs 7] [--db bench/out/answers-1m.db] [--scale 2] [--until 0.5]
The log is built once and cached (git-ignored): bench_query's deep backlog (`BIG`, Kueue's baseline 9 times as
long) scaled by `--scale` and simulated until `--until` of its arrivals' span, so that it ends, as a daemon's log does
at its present, with its backlog waiting (x2 until 0.5: ~1M events); smaller `--scale` for how the time grows. The fold
is the log replayed (what the daemon holds after its start-up); the server is aiohttp on loopback in this process, as
the daemon's health port; a client on the same event loop asks. Each figure is the median of `--runs` requests (the
first request of each path is not counted: it opens the loop's reader). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.bench_query import BIG
from bench.kueue_shapes import Shape, WorkloadClass, scenario
from daemon.answers import http as answers_http
from daemon.answers.answer import Answers, LiveSeqs
from daemon.eventlog import LogReader, replay
from daemon.obs.logging import configure as configure_logging

ROOT = Path(__file__).resolve().parent.parent


def scaled(shape: Shape, factor: float) -> Shape:
    return Shape(
        f"{shape.name}-x{factor:g}",
        shape.cohorts,
        shape.queues_per_cohort,
        tuple(
            WorkloadClass(c.name, max(1, int(c.count * factor)), c.cpu, c.priority, c.runtime_ms, c.every_ms)
            for c in shape.classes
        ),
    )


def build(path: Path, shape: Shape, fraction: float) -> dict[str, Any]:
    """`shape` simulated until `fraction` of its arrivals' span: a log that ends with its backlog still waiting, as a
    daemon's log is at its present."""
    from daemon.sim.run import run_simulation  # noqa: PLC0415

    until = int(max(c.count * c.every_ms for c in shape.classes) * fraction)
    t0 = time.perf_counter()
    result = asyncio.run(run_simulation(scenario(shape), db_path=path, until=until))
    return {"built_in_s": round(time.perf_counter() - t0, 1), "events": result.events, "until_ms": until}


def pick(db: Path) -> dict[str, Any]:
    """What to ask about: the deepest ClusterQueue, a job pending in it, an admitted job, the busiest job."""
    with LogReader(db) as reader:
        state = replay(reader)
        view = state.view()
        cq = max(view.pending_by_cq, key=lambda c: len(view.pending_by_cq[c]))
        bucket = view.pending_by_cq[cq]
        admitted = next(iter(view.admitted))
        some = list(view.admitted)[:200]
        busiest = max(some, key=lambda k: len(reader.events_of(f"job/{k}")))
        bounds = reader.bounds()
    assert bounds is not None
    return {
        "state": state,
        "cluster_queue": cq,
        "deepest_pending": len(bucket),
        "pending_total": sum(len(b) for b in view.pending_by_cq.values()),
        "admitted_total": len(view.admitted),
        "pending_job": bucket[len(bucket) // 2].key,
        "last_pending_job": bucket[len(bucket) - 1].key,
        "admitted_job": admitted,
        "busiest_job": busiest,
        "events": bounds[2],
        "local_queue": bucket[0].local_queue,
    }


async def measure(db: Path, runs: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    p = pick(db)
    folded_s = time.perf_counter() - t0
    answers = Answers(db, state=p["state"], live_seqs=LiveSeqs())
    app = web.Application()
    answers_http.add_routes(app, answers)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}/answers/v1"
    paths = {
        "explain a pending job (middle of the deepest queue)": f"/explain/{p['pending_job']}",
        "explain the last job of the deepest queue": f"/explain/{p['last_pending_job']}",
        "explain an admitted job": f"/explain/{p['admitted_job']}",
        "history of a busy job": f"/history/{p['busiest_job']}",
        "queues": "/queues",
        "pending, the deepest ClusterQueue": f"/pending?queue={p['cluster_queue']}",
        "pending, one LocalQueue": f"/pending?queue={p['local_queue']}",
        "pending, everything": "/pending",
        "explain as text": f"/explain/{p['pending_job']}?format=text",
    }
    out: dict[str, Any] = {}
    try:
        async with aiohttp.ClientSession() as session:
            for name, path in paths.items():
                times, size = [], 0
                for i in range(runs + 1):
                    started = time.perf_counter()
                    async with session.get(base + path) as r:
                        body = await r.read()
                        assert r.status == 200, (path, r.status, body[:300])
                    if i:
                        times.append(time.perf_counter() - started)
                    size = len(body)
                out[name] = {
                    "median_ms": round(statistics.median(times) * 1000, 1),
                    "max_ms": round(max(times) * 1000, 1),
                    "bytes": size,
                    "path": path,
                }
    finally:
        answers.close()
        await runner.cleanup()
    assert answers.live_answers >= len(paths) * runs, "every answer must come from the live fold"
    return {
        "log": str(db),
        "events": p["events"],
        "fold_s": round(folded_s, 1),
        "pending_total": p["pending_total"],
        "deepest_pending": p["deepest_pending"],
        "admitted_total": p["admitted_total"],
        "answers": out,
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
