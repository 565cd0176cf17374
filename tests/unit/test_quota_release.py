"""A preempted Job's quota is released only when its pods are gone, as the Job controller reports it.

Real: the Observer (daemon/kube/observe.py) and the fold. Faked: the Job versions the watch delivers, written as the
Job controller of Kubernetes 1.36 writes them (pkg/controller/job: `Suspended` condition, `active`, `terminating`),
and the timer of the grace for a Job the controller never reported resumed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.domain import events as ev
from daemon.domain.state import State
from daemon.kube.observe import Observer
from daemon.stages.ports import Observed
from tests.samples import one_of_each
from tests.unit.test_kube_border import raw_job

KEY = "research/train-a"


def _evicting() -> State:
    """train-a admitted, unsuspended, then preempted: evicting, its quota still held."""
    state = State()
    for seq, event in enumerate(one_of_each(), start=1):
        state.apply(event, seq)
        if isinstance(event, ev.WorkloadPreempted):
            break
    assert state.workloads[KEY].evicting
    return state


class Timers:
    def __init__(self) -> None:
        self.pending: list[tuple[float, Callable[[], None]]] = []

    def call_later(self, delay: float, fn: Callable[[], None]) -> object:
        self.pending.append((delay, fn))
        return None

    def fire(self) -> None:
        pending, self.pending = self.pending, []
        for _, fn in pending:
            fn()


def _observer() -> tuple[Observer, list[Observed], Timers]:
    put: list[Observed] = []
    observer = Observer(_evicting(), put.append, clock=type("C", (), {"now": lambda self: 5_000})())
    timers = Timers()
    observer.call_later = timers.call_later
    return observer, put, timers


def version(*, suspended: str | None, active: int = 0, terminating: int = 0, ready: int = 0) -> dict[str, Any]:
    """The Job suspended (by admitd), with the status the Job controller last wrote."""
    job = raw_job(suspend=True, annotations={"admitd.io/admission": ""}, active=active)
    job["status"].update({"terminating": terminating, "ready": ready})
    if suspended is not None:
        reason = "JobSuspended" if suspended == "True" else "JobResumed"
        job["status"]["conditions"] = [{"type": "Suspended", "status": suspended, "reason": reason}]
    return job


def evicted(put: list[Observed]) -> bool:
    return any(isinstance(e, ev.WorkloadEvicted) for o in put for e in o.events)


def test_a_job_suspended_before_its_status_counted_its_pods_keeps_its_quota_until_they_are_gone() -> None:
    """The issue's case: just unsuspended, the controller created pods but its status still says Suspended=True
    and no pods (its write is late); the suspension's answer shows that stale status."""
    observer, put, _ = _observer()
    observer.suspending(KEY, "Job")
    observer.job_event("MODIFIED", version(suspended="True"))  # the answer to the suspension: stale
    assert not evicted(put), "released on the stale status (pods ran on while the quota was given away)"
    restored = version(suspended="True")
    restored["spec"]["template"]["spec"]["nodeSelector"] = {}  # admitd's own second patch: the status as it was
    observer.job_event("MODIFIED", restored)
    assert not evicted(put), "the same status as the answer: nothing written since"
    observer.job_event("MODIFIED", version(suspended="True", terminating=2))  # the controller deletes them
    assert not evicted(put)
    gone = version(suspended="True", terminating=0)
    gone["status"]["failed"] = 2  # the deleted pods counted once gone
    observer.job_event("MODIFIED", gone)
    assert evicted(put)


def test_a_running_job_is_released_when_the_controller_reports_its_pods_deleted_and_gone() -> None:
    observer, put, timers = _observer()
    observer.suspending(KEY, "Job")
    observer.job_event("MODIFIED", version(suspended="False", active=2, ready=2))  # the answer
    observer.job_event("MODIFIED", version(suspended="False", active=0, ready=0))  # a write before it saw it
    assert not evicted(put), "Suspended=False: the controller has not seen the suspension yet"
    observer.job_event("MODIFIED", version(suspended="True", active=0, terminating=2))
    assert not evicted(put)
    assert timers.pending == [], "a Job the controller reported running is never released on a timer"
    observer.job_event("MODIFIED", version(suspended="True", active=0, terminating=0))
    assert evicted(put)


def test_a_job_that_never_started_is_released_after_the_grace_without_a_status_write() -> None:
    """Unsuspended and suspended again before the controller synced it: no pod, and no status write will come."""
    observer, put, timers = _observer()
    observer.suspending(KEY, "Job")
    observer.job_event("MODIFIED", version(suspended="True"))
    assert not evicted(put)
    assert [delay for delay, _ in timers.pending] == [observer.suspension_grace_s]
    timers.fire()
    assert evicted(put)


def test_the_grace_does_not_release_a_job_whose_pods_the_controller_is_deleting() -> None:
    observer, put, timers = _observer()
    observer.suspending(KEY, "Job")
    observer.job_event("MODIFIED", version(suspended="True"))
    observer.job_event("MODIFIED", version(suspended="True", terminating=1, active=1))
    timers.fire()
    assert not evicted(put), "pods are still active or terminating"
    observer.job_event("MODIFIED", version(suspended="True", terminating=0))
    assert evicted(put)


def test_after_a_restart_a_job_admitd_did_not_see_suspended_is_released_once_the_controller_says_suspended() -> None:
    observer, put, _ = _observer()  # no `suspending`: the suspension was sent by an earlier process
    observer.job_event("MODIFIED", version(suspended="False"))
    assert not evicted(put)
    observer.job_event("MODIFIED", version(suspended="True"))
    assert evicted(put)
