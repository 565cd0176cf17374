"""The start-time estimate (daemon/domain/eta.py, daemon/views/runtimes.py) on hand-built histories with known answers.

Real: the fold, the admission engine, the runtimes projection. Faked: nothing (events are built by hand).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.eta import estimate, estimates, remaining
from daemon.domain.model import Admission, PodSetAssignment
from daemon.views.runtimes import Runtimes
from tests.unit.builders import World, cq, flavor, job, lq

MIN = 60_000
GPU = "nvidia.com/gpu"
REPO = Path(__file__).resolve().parents[2]


class _Fed(World):
    def __init__(self) -> None:
        super().__init__()
        self.runtimes = Runtimes(self.state)
        self.seq = 0

    def _feed(self, event: ev.Event) -> None:
        self.seq += 1
        self.runtimes.apply(event, self.seq)
        self.state.apply(event, self.seq)


def _admit(w: _Fed, key: str, at: int, gpus: int) -> None:
    ps = PodSetAssignment(name="main", count=1, flavors={GPU: "h100"}, usage={GPU: gpus * 1000})
    w._feed(ev.WorkloadAdmitted(workload=key, at=at, admission=Admission(cluster_queue="a", pod_sets=(ps,))))


def _world(run_minutes: tuple[int, ...], x_deadline: int | None = None) -> _Fed:
    """ClusterQueue a with 8 GPUs; runs of the 8-GPU class that took `run_minutes`, one after the other from 0;
    then x (8 GPUs) admitted at the last run's end and running 5 minutes by `now`; pending y, z (8 GPUs) and w (4)."""
    w = _Fed()
    w.add(flavor("h100"), cq("a").flavor("h100", **{GPU: 8}), lq("ns", "q", "a"))
    t = 0
    for i, minutes in enumerate(run_minutes):
        jb = job(f"r{i}").ns("ns").queue("q").podset("main", 1, **{GPU: 8}).at(t)
        w.submit(jb)
        _admit(w, jb.key, t, 8)
        t += minutes * MIN
        w._feed(ev.JobFinished(job=jb.key, at=t))
    x = job("x").ns("ns").queue("q").podset("main", 1, **{GPU: 8}).at(t)
    w._feed(ev.JobObserved(workload=replace(x.obj(), active_deadline_ms=x_deadline)))
    _admit(w, x.key, t, 8)
    for name, gpus, at in (("y", 8, t + 1), ("z", 8, t + 2), ("w", 4, t + 3)):
        w.submit(job(name).ns("ns").queue("q").podset("main", 1, **{GPU: gpus}).at(at))
    return w


def test_one_recorded_runtime_gives_each_pending_workload_its_turn() -> None:
    w = _world((10,))
    now = 15 * MIN  # x started at 10 min and has run 5 of its class's 10
    starts = estimate(w.state, now, w.runtimes.durations, 0.5)
    assert starts == {"ns/y": 20 * MIN, "ns/z": 30 * MIN, "ns/w": 40 * MIN}
    # The state it was given is untouched.
    assert w.state.workloads["ns/y"].admission is None


def test_p90_uses_the_slower_runs_and_a_run_past_every_record_has_no_known_end() -> None:
    w = _world((10, 20))  # x started at 30 min
    now = 35 * MIN
    found = estimates(w.state, now, w.runtimes.durations)
    assert found[0.5]["ns/y"] == now + 5 * MIN  # of the runs longer than 5 min (10, 20), the median 10: 5 more
    assert found[0.9]["ns/y"] == now + 15 * MIN  # the 90th percentile 20: 15 more
    assert found[0.5]["ns/z"] == now + 5 * MIN + 10 * MIN
    assert found[0.9]["ns/z"] == now + 15 * MIN + 20 * MIN
    late = estimate(w.state, 30 * MIN + 25 * MIN, w.runtimes.durations, 0.5)  # x has run 25 min: longer than any run
    assert late == {"ns/y": None, "ns/z": None, "ns/w": None}


def test_no_recorded_run_means_no_estimate() -> None:
    w = _world(())
    assert estimate(w.state, 5 * MIN, w.runtimes.durations, 0.5) == {"ns/y": None, "ns/z": None, "ns/w": None}


def test_a_jobs_active_deadline_bounds_its_drawn_runtime() -> None:
    """y may run 3 minutes at most (activeDeadlineSeconds 180): of its class's 10 it runs 3, so z starts at 23m,
    not 30m; and x, of whose class nothing is recorded, ends at its own deadline (7m after its start)."""
    w = _world((10,))
    y = w.state.workloads["ns/y"].workload
    w._feed(ev.JobObserved(workload=replace(y, active_deadline_ms=3 * MIN)))
    starts = estimate(w.state, 15 * MIN, w.runtimes.durations, 0.5)
    assert starts == {"ns/y": 20 * MIN, "ns/z": 23 * MIN, "ns/w": 33 * MIN}
    bare = _world((), x_deadline=7 * MIN)  # x admitted at 0
    found = estimate(bare.state, 5 * MIN, bare.runtimes.durations, 0.5)
    assert found == {"ns/y": 7 * MIN, "ns/z": None, "ns/w": None}


def test_remaining_is_the_nearest_rank_quantile_of_the_longer_runs() -> None:
    runs = [1, 2, 3, 4, 10]
    assert remaining(runs, 0, 0.5) == 3
    assert remaining(runs, 2, 0.5) == 2  # of 3, 4, 10: the median 4, 2 more
    assert remaining(runs, 2, 0.9) == 8
    assert remaining(runs, 10, 0.5) is None


def test_admitd_eta_on_a_sample_cut_short(tmp_path: Path) -> None:
    """cohort-borrow-reclaim cut at 40 minutes: team-a's preempted borrower is still pending at the log's last event
    (+20m), and one run (of team-b's) is recorded: it gets an estimate, p50 <= p90, both ahead of now."""
    db = tmp_path / "cut.db"
    admitd = [sys.executable, "-m", "daemon.cli"]
    sample = REPO / "config" / "samples" / "cohort-borrow-reclaim.yaml"
    subprocess.run(
        [*admitd, "simulate", str(sample), "--db", str(db), "--until", "40m"], check=True, capture_output=True
    )
    out = subprocess.run([*admitd, "eta", "--db", str(db), "--json"], check=True, capture_output=True, text=True)
    body = json.loads(out.stdout)
    [row] = body["estimates"]
    assert row["job"] == "team-a/a-borrower" and row["cluster_queue"] == "team-a"
    assert 0 < row["p50_in_seconds"] <= row["p90_in_seconds"]
    bad = subprocess.run(
        [*admitd, "eta", "--db", str(db), "--queue", "nope"], check=False, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "nope" in bad.stderr
