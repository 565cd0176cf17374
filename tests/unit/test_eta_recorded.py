"""Recorded estimates (issue 26): the daemon's estimating rounds (`daemon.stages.estimate`) write
`workload.estimated` at a bounded rate, and `admitd eta-report` scores what was recorded against the actual starts.

Real: the log (EventStore, LogReader), the Recorder, the fold, the runtimes projection, the forward run and its
engine, the CLI. Faked: the clock (virtual milliseconds moved by the test). The history is built by hand: a
ClusterQueue of 8 GPUs whose one recorded run took 10 minutes, x running since 10m, y and z (8 GPUs) waiting.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from daemon.domain import events as ev
from daemon.domain.model import Admission, PodSetAssignment
from daemon.domain.state import State
from daemon.eventlog import EventStore, LogReader
from daemon.stages.estimate import Estimator, moved
from daemon.stages.recorder import Recorder
from daemon.views.runtimes import Runtimes
from tests.unit.builders import cq, flavor, job, lq

MIN = 60_000
GPU = "nvidia.com/gpu"
ADMITD = [sys.executable, "-m", "daemon.cli"]


class Clock:
    def __init__(self) -> None:
        self.t = 0

    def now(self) -> int:
        return self.t


def _admitted(key: str, at: int) -> ev.WorkloadAdmitted:
    ps = PodSetAssignment(name="main", count=1, flavors={GPU: "h100"}, usage={GPU: 8000})
    return ev.WorkloadAdmitted(workload=key, at=at, admission=Admission(cluster_queue="lab", pod_sets=(ps,)))


def _job(name: str, at: int) -> ev.JobObserved:
    return ev.JobObserved(workload=job(name).ns("ns").queue("q").podset("main", 1, **{GPU: 8}).at(at).obj())


async def _history(db: Path) -> list[ev.WorkloadEstimated]:
    """The log, with the rounds the daemon would run at 15m, 16m and 17m (x finished at 17m, before its 20m)."""
    clock = Clock()
    recorded: list[ev.WorkloadEstimated] = []
    async with await EventStore.open(db, clock=clock.now) as store:
        state = State()
        recorder = Recorder(store, state, clock, wait_durable=True)
        runtimes = Runtimes(state)
        recorder.projections.append(runtimes.apply)
        estimator = Estimator(recorder, clock, lambda: runtimes.durations)
        config = [
            ev.ResourceFlavorObserved(flavor=flavor("h100")),
            ev.ClusterQueueObserved(cluster_queue=cq("lab").flavor("h100", **{GPU: 8}).obj()),
            ev.LocalQueueObserved(local_queue=lq("ns", "q", "lab")),
        ]
        await recorder.append([(e, None) for e in config])
        await recorder.append([(e, None) for e in (_job("r0", 0), _admitted("ns/r0", 0))])
        clock.t = 10 * MIN
        await recorder.append([(e, None) for e in (ev.JobFinished(job="ns/r0", at=clock.t), _job("x", clock.t))])
        await recorder.append(
            [(_admitted("ns/x", clock.t), None), (_job("y", clock.t + 1), None), (_job("z", clock.t + 2), None)]
        )
        for minute, expected in ((15, 2), (16, 0)):
            clock.t = minute * MIN
            assert await estimator.round() == expected, minute
        clock.t = 17 * MIN
        await recorder.append([(ev.JobFinished(job="ns/x", at=clock.t), None)])
        assert await estimator.round() == 2  # both moved: y now, z ten minutes after
        await recorder.append([(_admitted("ns/y", clock.t), None)])
        assert await estimator.round() == 0  # y is admitted (no event), z's estimate did not move
        clock.t = 27 * MIN
        await recorder.append([(ev.JobFinished(job="ns/y", at=clock.t), None), (_admitted("ns/z", clock.t), None)])
        await recorder.catch_up()
    with LogReader(db) as reader:
        for row in reader.iter_events():
            if row.type == ev.WorkloadEstimated.TYPE:
                recorded.append(json.loads(row.payload))  # type: ignore[arg-type]
    return recorded


async def test_rounds_record_new_and_moved_estimates_only(tmp_path: Path) -> None:
    recorded = await _history(tmp_path / "log.db")
    got = [(e["workload"], e["at"] // MIN, e["p10"] // MIN, e["p50"] // MIN, e["p90"] // MIN) for e in recorded]  # type: ignore[index]
    assert got == [
        ("ns/y", 15, 20, 20, 20),  # x has run 5 of the class's 10 minutes
        ("ns/z", 15, 30, 30, 30),
        ("ns/y", 17, 17, 17, 17),  # x ended early: y starts at once
        ("ns/z", 17, 24, 24, 27),  # the runs now 7 (x's) and 10 minutes: p10 and p50 7 more, p90 10
    ]
    assert all(isinstance(e["inputs"], int) and e["inputs"] > 0 for e in recorded)  # type: ignore[index]


def test_a_long_round_spaces_the_next_ones() -> None:
    estimator = Estimator(cast(Recorder, SimpleNamespace(state=State())), Clock(), lambda: None, every_ms=60_000)
    assert estimator.pause_s() == 60.0
    estimator.round_s = 50.0  # a deep backlog with varied runtimes
    assert estimator.pause_s() == 200.0


def test_moved_is_a_tenth_of_the_time_ahead_and_at_least_a_second() -> None:
    last = ev.WorkloadEstimated(workload="a/b", at=0, inputs=1, p10=None, p50=100_000, p90=200_000)
    assert not moved(last, None, 109_000, 200_000)  # 9 s against a tenth of 100 s
    assert moved(last, None, 111_000, 200_000)
    assert moved(last, 1, 100_000, 200_000)  # p10 known now
    assert moved(None, None, None, None)
    tight = ev.WorkloadEstimated(workload="a/b", at=0, inputs=1, p10=None, p50=5_000, p90=None)
    assert not moved(tight, None, 5_900, None) and moved(tight, None, 6_100, None)


def test_eta_report_scores_the_recorded_estimates(tmp_path: Path) -> None:
    """y said 20m at 15m and started at 17m (3 minutes off, outside p10-p90 20m-20m); z said 30m and started at 27m
    (3 off, outside); at 17m y was said exactly (0 off, inside) and z 24m-27m, p50 24m (3 off, inside). The median
    of 0, 180, 180, 180 s is 180 s, half inside."""
    db = tmp_path / "log.db"
    asyncio.run(_history(db))
    out = subprocess.run(
        [*ADMITD, "eta-report", "--db", str(db), "--recorded-only", "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    body = json.loads(out.stdout)
    rec = body["recorded"]
    assert (rec["estimates_made"], rec["unknown"], rec["not_started_by_the_end"]) == (4, 0, 0)
    assert rec["scores"]["lab"] == {"estimates": 4, "median_abs_error_seconds": 180.0, "inside_p10_p90": 0.5}
    assert body["estimates_made"] == 0  # nothing re-computed
    text = subprocess.run(
        [*ADMITD, "eta-report", "--db", str(db), "--recorded-only"], check=True, capture_output=True, text=True
    ).stdout
    assert "recorded estimates (workload.estimated): 4 made" in text and "180s" in text and "50.0%" in text


def _cli(*args: str) -> str:
    return subprocess.run([*ADMITD, *args], check=True, capture_output=True, text=True).stdout


def test_explain_pending_and_history_show_the_last_recorded_estimate(tmp_path: Path) -> None:
    """At 20m z waits; its last estimate (made at 17m) is p50 24m, p90 27m. At 16m y's was the one of 15m (20m);
    once admitted it has none."""
    db = tmp_path / "log.db"
    asyncio.run(_history(db))
    body = json.loads(_cli("pending", "--db", str(db), "--at", "+20m", "--json"))
    [row] = body["cluster_queues"]["lab"]
    assert row["job"] == "ns/z"
    assert {k: row["estimate"][k] for k in ("made_at", "p10", "p50", "p90")} == {
        "made_at": "+17m",
        "p10": "+24m",
        "p50": "+24m",
        "p90": "+27m",
    }
    assert "+24m (p90 +27m)" in _cli("pending", "--db", str(db), "--at", "+20m")
    early = json.loads(_cli("pending", "--db", str(db), "--at", "+16m", "--json"))
    assert [(r["job"], r["estimate"]["p50"]) for r in early["cluster_queues"]["lab"]] == [
        ("ns/y", "+20m"),
        ("ns/z", "+30m"),
    ]
    x = json.loads(_cli("explain", "ns/z", "--db", str(db), "--at", "+20m", "--json"))
    assert x["estimate"]["p50"] == "+24m" and x["estimate"]["inputs_seq"] > 0
    assert any("estimated start (recorded at +17m" in s["text"] for s in x["statements"])
    running = json.loads(_cli("explain", "ns/y", "--db", str(db), "--at", "+20m", "--json"))
    assert running.get("estimate") is None
    assert "estimated start: p50 +30m, p90 +30m" in _cli("history", "ns/z", "--db", str(db))
