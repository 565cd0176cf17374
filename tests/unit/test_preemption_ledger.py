"""The preemption ledger (daemon/views/ledger.py) on hand-built histories with known costs, and `admitd preemptions`
on a simulated sample.

Real: the fold, the ledger projection, the simulator, the CLI. Faked: nothing (events are built by hand).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.model import Admission, PodSetAssignment
from daemon.views.ledger import Preemptions
from tests.unit.builders import World, cohort, cq, flavor, job, lq

HOUR = 3_600_000
GPU = "nvidia.com/gpu"
REPO = Path(__file__).resolve().parents[2]


class _Fed(World):
    """A World whose events also go to a ledger, before the fold takes them (as the feeders do)."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Preemptions(self.state)
        self.seq = 0

    def _feed(self, event: ev.Event) -> None:
        self.seq += 1
        self.ledger.apply(event, self.seq)
        self.state.apply(event, self.seq)


def _tree() -> _Fed:
    """org > research > a, org > prod > b, prod > c (three levels), each with 8 GPUs of one flavor."""
    w = _Fed()
    w.add(flavor("h100"))
    w.add(cohort("org"), cohort("research").parent("org"), cohort("prod").parent("org"))
    for name, parent in (("a", "research"), ("b", "prod"), ("c", "prod")):
        w.add(cq(name).cohort(parent).flavor("h100", **{GPU: 8}), lq(name, "q", name))
    return w


def _admit(w: _Fed, key: str, cluster_queue: str, at: int, pods: int, gpus_per_pod: int) -> None:
    w._feed(
        ev.WorkloadAdmitted(
            workload=key,
            at=at,
            admission=Admission(
                cluster_queue=cluster_queue,
                pod_sets=(
                    PodSetAssignment(
                        name="main", count=pods, flavors={GPU: "h100"}, usage={GPU: pods * gpus_per_pod * 1000}
                    ),
                ),
            ),
        )
    )


def _preempt(w: _Fed, key: str, victim_cq: str, by: str, by_cq: str, at: int, reason: str) -> None:
    w._feed(
        ev.WorkloadPreempted(
            workload=key,
            at=at,
            cluster_queue=victim_cq,
            preemptor=by,
            preemptor_cluster_queue=by_cq,
            reason=reason,
            policy="reclaimWithinCohort=Any" if reason != "InClusterQueue" else "withinClusterQueue=LowerPriority",
        )
    )


def _submit(w: _Fed, name: str, queue: str, pods: int, gpus_per_pod: int, at: int) -> str:
    jb = job(name).ns(queue).queue("q").podset("main", pods, **{GPU: gpus_per_pod}).at(at)
    w.submit(jb)
    return jb.key


def test_a_reclaim_across_the_tree_costs_the_victims_run_since_its_pods_started_and_reruns_later() -> None:
    w = _tree()
    x = _submit(w, "x", "a", pods=2, gpus_per_pod=4, at=0)
    _admit(w, x, "a", at=0, pods=2, gpus_per_pod=4)
    w._feed(ev.JobUnsuspended(job=x, at=1_000, decision=1))
    y = _submit(w, "y", "b", pods=1, gpus_per_pod=8, at=HOUR)
    _preempt(w, x, "a", y, "b", at=HOUR + 1_000, reason="InCohortReclamation")
    w._feed(ev.JobSuspended(job=x, at=HOUR + 2_000, decision=2))
    w._feed(ev.WorkloadEvicted(workload=x, at=HOUR + 100_000, reason="Preempted"))
    _admit(w, x, "a", at=HOUR + 400_000, pods=2, gpus_per_pod=4)

    [p] = w.ledger.entries
    assert (p.victim, p.preemptor, p.rule, p.victim_cluster_queue, p.preemptor_cluster_queue) == (
        x,
        y,
        "InCohortReclamation",
        "a",
        "b",
    )
    assert (p.cohort, p.level) == ("org", 2)  # a > research > org < prod < b
    assert p.ran_from == 1_000 and p.pods == 2
    assert p.lost_pod_ms == 2 * HOUR  # two pods for one hour
    assert p.lost == {GPU: 8 * 1000 * HOUR}  # eight GPUs for one hour (milli-units x ms)
    assert p.rerun_after == 399_000
    # The per-queue totals the metrics show: one victim of a, by rule, and what it lost.
    assert w.ledger.totals == {("a", "InCohortReclamation"): [1, 2 * HOUR, 8 * 1000 * HOUR]}


def test_levels_within_a_queue_and_under_one_parent_and_a_victim_that_never_started() -> None:
    w = _tree()
    b1 = _submit(w, "b1", "b", pods=1, gpus_per_pod=8, at=0)
    _admit(w, b1, "b", at=0, pods=1, gpus_per_pod=8)  # admitted, its pods never started
    c1 = _submit(w, "c1", "c", pods=1, gpus_per_pod=8, at=10)
    _preempt(w, b1, "b", c1, "c", at=5_000, reason="InCohortReclamation")
    b2 = _submit(w, "b2", "b", pods=1, gpus_per_pod=1, at=20)
    _admit(w, b2, "b", at=6_000, pods=1, gpus_per_pod=1)
    w._feed(ev.JobUnsuspended(job=b2, at=6_000, decision=3))
    b3 = _submit(w, "b3", "b", pods=1, gpus_per_pod=1, at=30)
    _preempt(w, b2, "b", b3, "b", at=9_000, reason="InClusterQueue")
    w._feed(ev.JobFinished(job=b2, at=9_500))

    first, second = w.ledger.entries
    assert (first.cohort, first.level) == ("prod", 1)
    assert first.ran_from is None and first.lost_pod_ms == 0 and first.lost == {}
    assert first.rerun_after is None
    assert (second.cohort, second.level) == (None, 0)
    assert second.lost_pod_ms == 3_000 and second.lost == {GPU: 1000 * 3_000}
    assert second.rerun_after is None  # it finished instead of running again


def test_admitd_preemptions_on_the_reclaim_sample(tmp_path: Path) -> None:
    """config/samples/cohort-borrow-reclaim.yaml: team-b reclaims its lent GPUs from team-a's borrower at +5m, then
    team-b's urgent job preempts its own routine one at +10m (the sample's README story)."""
    db = tmp_path / "sample.db"
    admitd = [sys.executable, "-m", "daemon.cli"]
    sample = REPO / "config" / "samples" / "cohort-borrow-reclaim.yaml"
    subprocess.run([*admitd, "simulate", str(sample), "--db", str(db)], check=True, capture_output=True, cwd=REPO)
    out = subprocess.run(
        [*admitd, "preemptions", "--db", str(db), "--json"], check=True, capture_output=True, text=True, cwd=REPO
    )
    body = json.loads(out.stdout)
    rows = [(r["victim"], r["preemptor"], r["rule"], r["cohort"], r["level"]) for r in body["preemptions"]]
    assert rows == [
        ("team-a/a-borrower", "team-b/b-routine", "InCohortReclamation", "all-teams", 1),
        ("team-b/b-routine", "team-b/b-urgent", "InClusterQueue", None, 0),
    ]
    assert body["clusterQueues"]["team-b"]["preempting"] == 2
    assert body["clusterQueues"]["team-a"]["preempted"] == 1
    assert all(r["lostPodHours"] > 0 for r in body["preemptions"])
    only_a = subprocess.run(
        [*admitd, "preemptions", "--db", str(db), "--json", "--queue", "team-a"],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert [r["victim"] for r in json.loads(only_a.stdout)["preemptions"]] == ["team-a/a-borrower"]
    late = subprocess.run(
        [*admitd, "preemptions", "--db", str(db), "--json", "--since", "+6m"],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert [r["victim"] for r in json.loads(late.stdout)["preemptions"]] == ["team-b/b-routine"]
