"""The what-if's pure mapping (daemon.sim.whatif): recorded events -> jobs with arrivals and runtimes -> a scenario
with the changes applied, and the comparison's figures.

Real: `recording`, `what_if_scenario`, `compare` on hand-written event sequences. Faked: the simulation's result
(a `SimResult` written by hand); nothing is run, no log is read.
"""

from __future__ import annotations

import pytest

from daemon.domain import events as ev
from daemon.domain.model import Admission, PodSetAssignment
from daemon.sim.run import JobOutcome, SimResult
from daemon.sim.whatif import WhatIfError, compare, recording, what_if_scenario
from tests.unit.builders import cq, flavor, job, lq

WALL = 1_764_560_000_000  # a wall-clock time (2025-12-01): a log written by `admitd run`

RF = ev.ResourceFlavorObserved(flavor=flavor("gpu"))
CQ = ev.ClusterQueueObserved(cluster_queue=cq("team-a").flavor("gpu", gpu=2).obj())
LQ = ev.LocalQueueObserved(local_queue=lq("default", "q", "team-a"))


def observed(name: str, created: int = 0, gpus: int = 1) -> ev.JobObserved:
    return ev.JobObserved(workload=job(name).gpus(gpus).at(created).obj())


def admitted(name: str, at: int, queue: str = "team-a") -> ev.WorkloadAdmitted:
    ps = PodSetAssignment(name="main", count=1, flavors={"gpu": "gpu"}, usage={"gpu": 1000})
    return ev.WorkloadAdmitted(
        workload=f"default/{name}", at=at, admission=Admission(cluster_queue=queue, pod_sets=(ps,))
    )


def test_the_runtime_is_the_last_run_as_a_preempted_job_starts_again_from_scratch() -> None:
    rec = recording(
        [
            (0, RF),
            (0, CQ),
            (0, LQ),
            (5, observed("a", created=5)),
            (5, admitted("a", 5)),
            (20, ev.WorkloadEvicted(workload="default/a", at=20, reason="Preempted")),
            (50, admitted("a", 50)),
            (80, ev.JobFinished(job="default/a", at=80)),
        ],
        source="log",
    )
    (a,) = rec.jobs
    assert (a.arrival, a.runtime, a.admitted_at, a.evicted_at, a.finished_at) == (5, 30, (5, 50), (20,), 80)
    assert a.cluster_queue == "team-a"
    assert rec.virtual and rec.origin == 0 and rec.end == 80


def test_a_run_that_never_ended_has_an_unknown_runtime_and_is_still_scheduled() -> None:
    rec = recording(
        [
            (0, RF),
            (0, CQ),
            (0, LQ),
            (1, observed("running", 1)),
            (1, admitted("running", 1)),
            (2, observed("waits", 2)),
        ],
        source="log",
    )
    running, waits = rec.jobs
    assert (running.runtime, running.finished_at, waits.runtime, waits.admitted_at) == (None, None, None, ())
    assert waits.cluster_queue == "team-a"  # its LocalQueue's, as it was never admitted
    scenario = what_if_scenario(rec, [])
    assert [(j.workload.key, j.submit_at, j.runtime) for j in scenario.jobs] == [
        ("default/running", 1, None),
        ("default/waits", 2, None),
    ]


def test_deletions_a_job_deleted_while_running_ends_there_one_deleted_while_pending_is_left_out() -> None:
    rec = recording(
        [
            (0, RF),
            (0, CQ),
            (0, LQ),
            (1, observed("ran")),
            (1, admitted("ran", 1)),
            (2, observed("gone")),
            (9, ev.JobDeleted(job="default/ran", at=9)),
            (9, ev.JobDeleted(job="default/gone", at=9)),
            (10, observed("gone")),  # the same name again after its deletion: its first life only
        ],
        source="log",
    )
    assert [(j.workload.key, j.runtime, j.finished_at) for j in rec.jobs] == [("default/ran", 8, 9)]
    assert rec.left_out == ("default/gone",)


def test_a_wall_clock_log_starts_at_its_earliest_time_and_keeps_the_workload_seen_before_admission() -> None:
    rec = recording(
        [
            (WALL, RF),
            (WALL, CQ),
            (WALL, LQ),
            (WALL + 100, observed("old", created=WALL - 5000)),  # created before the daemon started
            (WALL + 200, ev.JobObserved(workload=job("old").gpus(2).at(WALL - 5000).obj())),  # changed while pending
            (WALL + 300, admitted("old", WALL + 300)),
            (WALL + 400, ev.JobObserved(workload=job("old").gpus(9).at(WALL - 5000).obj())),  # after: ignored
            (WALL + 1300, ev.JobFinished(job="default/old", at=WALL + 1300)),
        ],
        source="log",
    )
    assert not rec.virtual and rec.origin == WALL - 5000
    (old,) = rec.jobs
    assert (old.workload.created_at, old.arrival, old.admitted_at, old.runtime) == (0, 5100, (5300,), 1000)
    assert old.workload.pod_sets[0].requests == {"gpu": 2000}
    assert rec.end == 6300


def test_a_change_replaces_every_recorded_event_of_its_object_from_the_start_and_an_added_one_comes_last() -> None:
    later = ev.ClusterQueueObserved(cluster_queue=cq("team-a").flavor("gpu", gpu=4).obj())
    other = ev.ClusterQueueObserved(cluster_queue=cq("team-b").flavor("gpu", gpu=1).obj())
    rec = recording(
        [(0, RF), (0, CQ), (0, LQ), (1, observed("a")), (60, later), (70, other)],
        source="log",
    )
    assert rec.setup == (RF, CQ, LQ)
    assert rec.timed == ((60, later), (70, other))
    unchanged = what_if_scenario(rec, [])
    assert unchanged.config == (RF, CQ, LQ) and unchanged.timed_config == rec.timed
    bigger = ev.ClusterQueueObserved(cluster_queue=cq("team-a").flavor("gpu", gpu=8).obj())
    added = ev.LocalQueueObserved(local_queue=lq("other", "q", "team-b"))
    changed = what_if_scenario(rec, [added, bigger])
    assert changed.config == (RF, bigger, LQ, added)
    assert changed.timed_config == ((70, other),)
    with pytest.raises(WhatIfError, match="changed twice"):
        what_if_scenario(rec, [bigger, bigger])


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([], "no events"),
        ([(0, RF), (0, CQ)], "records no jobs"),
        ([(0, observed("x")), (1, ev.JobDeleted(job="default/x", at=1))], "deleted before"),
    ],
    ids=["empty", "no-jobs", "only-deleted-jobs"],
)
def test_a_log_without_jobs_to_replay_is_refused(events: list[tuple[int, ev.Event]], message: str) -> None:
    with pytest.raises(WhatIfError, match=message):
        recording(events, source="the.db")


def test_figures_count_a_job_admitted_in_one_run_until_the_other_ends_and_leave_out_one_admitted_in_neither() -> None:
    rec = recording(
        [
            (0, RF),
            (0, CQ),
            (0, LQ),
            (0, observed("a")),
            (0, admitted("a", 0)),
            (10, observed("b", 10)),
            (40, admitted("b", 40)),
            (50, ev.JobFinished(job="default/a", at=50)),
            (70, ev.JobFinished(job="default/b", at=70)),
            (80, observed("c", 80)),
            (90, observed("d", 90)),
            (100, ev.JobFinished(job="default/zzz", at=100)),  # an unknown job: ignored
        ],
        source="log",
    )
    # The what-if: a and b start on arrival, c 10 after it; d is never admitted in either run.
    result = SimResult(
        end=120,
        jobs={
            "default/a": JobOutcome(key="default/a", cluster_queue="team-a", admitted_at=[0], finished_at=50),
            "default/b": JobOutcome(key="default/b", cluster_queue="team-a", admitted_at=[10], finished_at=40),
            "default/c": JobOutcome(key="default/c", cluster_queue="team-a", admitted_at=[90]),
            "default/d": JobOutcome(key="default/d", cluster_queue="team-a"),
        },
    )
    w = compare(rec, [], result)
    (group,) = w.queues
    assert group.name == "team-a" and group.jobs == 4
    # Recorded: waits 0, 30, and c's 20 until the log's end (100) -> mean 50 // 3 = 16, max 30; makespan 0 -> 70.
    assert (group.recorded.admitted, group.recorded.censored) == (2, 1)
    assert (group.recorded.mean_wait, group.recorded.max_wait, group.recorded.makespan) == (16, 30, 70)
    # What-if: waits 0, 0, 10 -> mean 3, max 10; makespan 0 -> 50 (c's runtime is unknown).
    assert (group.what_if.admitted, group.what_if.censored) == (3, 0)
    assert (group.what_if.mean_wait, group.what_if.max_wait, group.what_if.makespan) == (3, 10, 50)
    assert (group.mean_wait_delta, group.max_wait_delta, group.makespan_delta) == (-13, -20, -20)
    b = next(j for j in w.jobs if j.key == "default/b")
    assert (b.wait_delta, b.finish_delta) == (-30, -30)
    c = next(j for j in w.jobs if j.key == "default/c")
    assert (c.runtime, c.recorded.wait, c.what_if.wait, c.wait_delta) == (None, None, 10, None)


def test_a_group_admitted_in_neither_run_has_no_waits() -> None:
    rec = recording([(0, RF), (0, observed("lost"))], source="log")
    w = compare(rec, [], SimResult(end=60, jobs={}))
    (group,) = w.queues
    assert group.name == "-"
    assert (group.recorded.mean_wait, group.what_if.max_wait, group.mean_wait_delta) == (None, None, None)


def test_a_job_of_known_runtime_that_does_not_finish_in_the_what_if_leaves_its_makespan_open() -> None:
    rec = recording(
        [
            (0, RF),
            (0, CQ),
            (0, LQ),
            (0, observed("a")),
            (0, admitted("a", 0)),
            (5, ev.JobFinished(job="default/a", at=5)),
        ],
        source="log",
    )
    w = compare(rec, [], SimResult(end=0, jobs={"default/a": JobOutcome(key="default/a")}))
    assert (w.total.recorded.makespan, w.total.what_if.makespan, w.total.makespan_delta) == (5, None, None)
