"""Priority classes deleted, and Jobs whose pods cannot be created, at the border (daemon/kube/observe.py).

Real: the Observer and the fold. Faked: the raw objects the watches deliver (a WorkloadPriorityClass, a
PriorityClass, a Job controller's `FailedCreate` Event), written as the API server sends them.
"""

from __future__ import annotations

from typing import Any

from daemon.domain import events as ev
from daemon.domain.model import PriorityClass
from daemon.domain.state import State
from daemon.kube.observe import Observer
from daemon.stages.ports import Observed
from tests.samples import one_of_each

KEY = "research/train-a"


class Clock:
    def now(self) -> int:
        return 1_700_000_000_000


def _observer(state: State) -> tuple[Observer, list[Observed]]:
    put: list[Observed] = []
    return Observer(state, put.append, Clock()), put


def _wpc(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}} | {
        "value": value
    }


def _pc(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def events(put: list[Observed]) -> list[ev.Event]:
    return [e for o in put for e in o.events]


def test_a_deleted_workload_priority_class_or_priority_class_is_appended_as_deleted() -> None:
    state = State()
    state.apply(ev.PriorityClassObserved(priority_class=PriorityClass(name="urgent", value=9)), 1)
    state.apply(ev.PriorityClassObserved(priority_class=PriorityClass(name="high", value=5, kind="PriorityClass")), 2)
    observer, put = _observer(state)
    observer.object_event("DELETED", _wpc("urgent", 9))
    observer.object_event("DELETED", _pc("high", 5))
    observer.object_event("DELETED", _pc("never-seen", 1))
    assert events(put) == [
        ev.PriorityClassDeleted(kind="WorkloadPriorityClass", name="urgent"),
        ev.PriorityClassDeleted(kind="PriorityClass", name="high"),
    ]


def test_a_priority_class_missing_from_a_list_was_deleted_while_nobody_watched() -> None:
    state = State()
    state.apply(ev.PriorityClassObserved(priority_class=PriorityClass(name="urgent", value=9)), 1)
    state.apply(ev.PriorityClassObserved(priority_class=PriorityClass(name="low", value=1)), 2)
    observer, put = _observer(state)
    observer.objects_listed("WorkloadPriorityClass")([_wpc("low", 1)])
    assert events(put) == [ev.PriorityClassDeleted(kind="WorkloadPriorityClass", name="urgent")]


def _admitted() -> State:
    """train-a admitted and unsuspended (one_of_each up to its JobUnsuspended), at 1,002 ms."""
    state = State()
    for seq, event in enumerate(one_of_each(), start=1):
        state.apply(event, seq)
        if isinstance(event, ev.JobUnsuspended):
            break
    return state


def failed_create(*, uid: str = "uid-research-train-a", at: str = "2026-12-01T00:00:05Z") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "train-a.1", "namespace": "research", "creationTimestamp": at},
        "involvedObject": {"kind": "Job", "namespace": "research", "name": "train-a", "uid": uid},
        "reason": "FailedCreate",
        "type": "Warning",
        "message": 'Error creating: pods "train-a-" is forbidden: no PriorityClass with name high was found',
        "lastTimestamp": at,
    }


def test_the_job_controllers_failed_create_is_recorded_once_for_an_admitted_job() -> None:
    observer, put = _observer(_admitted())
    observer.pod_event("ADDED", failed_create(at="1970-01-01T00:00:01Z"))
    observer.pod_event("MODIFIED", failed_create(at="1970-01-01T00:00:02Z"))  # the Event's count ticking
    (recorded,) = events(put)
    assert isinstance(recorded, ev.JobPodsNotCreated) and recorded.job == KEY
    assert "no PriorityClass with name high was found" in recorded.message


def test_a_failed_create_of_another_job_of_the_same_name_or_an_older_admission_is_not_news() -> None:
    observer, put = _observer(_admitted())
    observer.pod_event("ADDED", failed_create(uid="uid-of-a-predecessor", at="1970-01-01T00:00:01Z"))
    assert events(put) == []
    state = State()
    for seq, event in enumerate(one_of_each(), start=1):
        state.apply(event, seq)
        if isinstance(event, ev.JobObserved):
            break
    observer, put = _observer(state)  # pending, never admitted: nothing holds quota
    observer.pod_event("ADDED", failed_create(at="1970-01-01T00:00:01Z"))
    assert events(put) == []
