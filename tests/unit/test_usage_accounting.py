"""Usage accounting (daemon/views/usage.py, `admitd usage`) on a hand-built history with known figures.

Real: the fold, the usage projection, the CLI on a simulated log. Faked: nothing (events are built by hand).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.model import Admission, PodSetAssignment
from daemon.views.usage import Usage
from tests.unit.builders import World, cohort, cq, flavor, job, lq

HOUR = 3_600_000
GPU = "nvidia.com/gpu"
MILLI_HOUR = 1000 * HOUR  # one unit for one hour, in milli-units x ms
REPO = Path(__file__).resolve().parents[2]


class _Fed(World):
    def __init__(self, start: int = 0) -> None:
        super().__init__()
        self.usage = Usage(self.state, start)
        self.seq = 0

    def _feed(self, event: ev.Event) -> None:
        self.seq += 1
        self.usage.apply(event, self.seq)
        self.state.apply(event, self.seq)


def _admit(w: _Fed, key: str, cluster_queue: str, at: int, pods: int, gpus_per_pod: int) -> None:
    ps = PodSetAssignment(name="main", count=pods, flavors={GPU: "h100"}, usage={GPU: pods * gpus_per_pod * 1000})
    w._feed(ev.WorkloadAdmitted(workload=key, at=at, admission=Admission(cluster_queue=cluster_queue, pod_sets=(ps,))))


def _history(start: int = 0, *, y_finishes: bool = True, fed: Callable[[int], _Fed] = _Fed) -> _Fed:
    """a and b in Cohort org, 8 GPUs each. x (namespace a, LocalQueue q, 3 pods x 4 GPUs) holds 12 GPUs from 0 to
    2h (its eviction), borrowing 4 of b's unused 8; y (namespace b, LocalQueue other, 1 pod x 8 GPUs) holds 8 from
    2h to 3h, its own nominal."""
    w = fed(start)
    w.add(flavor("h100"), cohort("org"))
    for name in ("a", "b"):
        w.add(cq(name).cohort("org").flavor("h100", **{GPU: 8}), lq(name, "q", name), lq(name, "other", name))
    x = job("x").ns("a").queue("q").podset("main", 3, **{GPU: 4})
    y = job("y").ns("b").queue("other").podset("main", 1, **{GPU: 8})
    w.submit(x)
    w.submit(y)
    _admit(w, x.key, "a", 0, pods=3, gpus_per_pod=4)
    w._feed(
        ev.WorkloadPreempted(
            workload=x.key,
            at=2 * HOUR - 1000,
            cluster_queue="a",
            preemptor=y.key,
            preemptor_cluster_queue="b",
            reason="InCohortReclamation",
            policy="",
        )
    )
    w._feed(ev.WorkloadEvicted(workload=x.key, at=2 * HOUR, reason="Preempted"))  # its quota held until then
    _admit(w, y.key, "b", 2 * HOUR, pods=1, gpus_per_pod=8)
    if y_finishes:
        w._feed(ev.JobFinished(job=y.key, at=3 * HOUR))
    return w


def test_used_borrowed_and_lent_over_the_whole_history() -> None:
    t = _history().usage.totals(3 * HOUR)
    assert t["used"]["clusterqueue"] == {"a": {GPU: 24 * MILLI_HOUR}, "b": {GPU: 8 * MILLI_HOUR}}  # type: ignore[index]
    assert t["pod_ms"]["clusterqueue"] == {"a": 6 * HOUR, "b": 1 * HOUR}  # type: ignore[index]
    assert t["used"]["localqueue"] == {"a/q": {GPU: 24 * MILLI_HOUR}, "b/other": {GPU: 8 * MILLI_HOUR}}  # type: ignore[index]
    assert t["used"]["namespace"] == {"a": {GPU: 24 * MILLI_HOUR}, "b": {GPU: 8 * MILLI_HOUR}}  # type: ignore[index]
    assert t["borrowed"] == {"a": {GPU: 8 * MILLI_HOUR}}  # 4 GPUs above nominal for 2 h
    assert t["lent"] == {"b": {GPU: 8 * MILLI_HOUR}}  # all of it from b, the only one with unused quota


def test_a_window_counts_only_what_was_held_inside_it() -> None:
    w = _history(start=HOUR)  # the projection integrates from 1h on
    t = w.usage.totals(3 * HOUR)
    assert t["used"]["clusterqueue"] == {"a": {GPU: 12 * MILLI_HOUR}, "b": {GPU: 8 * MILLI_HOUR}}  # type: ignore[index]
    assert t["borrowed"] == {"a": {GPU: 4 * MILLI_HOUR}}
    assert t["lent"] == {"b": {GPU: 4 * MILLI_HOUR}}
    # While y still runs, reading at 2.5 h counts its run so far; reading does not move the projection.
    running = _history(start=HOUR, y_finishes=False).usage
    half = running.totals(2 * HOUR + HOUR // 2)
    assert half["used"]["clusterqueue"]["b"] == {GPU: 4 * MILLI_HOUR}  # type: ignore[index]
    assert running.totals(3 * HOUR) == t


def test_lending_is_shared_by_what_each_member_has_unused() -> None:
    """Three members of 8 GPUs: a borrows 6 while b uses 2 and c nothing: b has 6 unused, c 8, so b lent 6 x 6/14
    and c 6 x 8/14 of the borrowed 6 GPUs per hour."""
    w = _Fed()
    w.add(flavor("h100"), cohort("org"))
    for name in ("a", "b", "c"):
        w.add(cq(name).cohort("org").flavor("h100", **{GPU: 8}), lq(name, "q", name))
    jobs = {
        name: job(f"{name}1").ns(name).queue("q").podset("main", 1, **{GPU: n}) for name, n in (("a", 14), ("b", 2))
    }
    for jb in jobs.values():
        w.submit(jb)
    _admit(w, jobs["a"].key, "a", 0, pods=1, gpus_per_pod=14)
    _admit(w, jobs["b"].key, "b", 0, pods=1, gpus_per_pod=2)
    t = w.usage.totals(HOUR)
    assert t["borrowed"] == {"a": {GPU: 6 * MILLI_HOUR}}
    lent = t["lent"]
    assert lent["b"][GPU] == 6 * 6 * MILLI_HOUR // 14  # type: ignore[index]
    assert lent["c"][GPU] == 6 * 8 * MILLI_HOUR // 14  # type: ignore[index]


def test_admitd_usage_on_the_reclaim_sample(tmp_path: Path) -> None:
    db = tmp_path / "sample.db"
    admitd = [sys.executable, "-m", "daemon.cli"]
    sample = REPO / "config" / "samples" / "cohort-borrow-reclaim.yaml"
    subprocess.run([*admitd, "simulate", str(sample), "--db", str(db)], check=True, capture_output=True, cwd=REPO)
    out = subprocess.run([*admitd, "usage", "--db", str(db), "--json"], check=True, capture_output=True, text=True)
    body = json.loads(out.stdout)["usage"]
    assert set(body) == {"team-a", "team-b"}
    assert body["team-a"]["borrowedGpuHours"] > 0 and body["team-b"]["lentGpuHours"] > 0
    assert abs(body["team-a"]["borrowedGpuHours"] - body["team-b"]["lentGpuHours"]) < 0.001  # one lender
    by_ns = subprocess.run(
        [*admitd, "usage", "--db", str(db), "--json", "--by", "namespace"], check=True, capture_output=True, text=True
    )
    ns = json.loads(by_ns.stdout)["usage"]
    assert {k: v["gpuHours"] for k, v in ns.items()} == {k: v["gpuHours"] for k, v in body.items()}
    bad = subprocess.run(
        [*admitd, "usage", "--db", str(db), "--since", "yesterday"], check=False, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "yesterday" in bad.stderr
