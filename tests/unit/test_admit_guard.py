"""The admit stage's last line against preemption loops: a cycle that would preempt a workload already preempted at
the same instant stops the run, naming the jobs, before anything is recorded.

Real: `daemon.stages.admit.Admit.step` and its guard. Faked: the engine (a script of decisions), the recorder (it
only counts appends) and the clock (a fixed instant, then a later one).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.domain.events import Event, WorkloadAdmitted, WorkloadPreempted
from daemon.domain.state import State
from daemon.stages.admit import Admit, PreemptionLoop


def preempted(victim: str, by: str) -> WorkloadPreempted:
    return WorkloadPreempted(
        workload=victim,
        at=5,
        cluster_queue="a",
        preemptor=by,
        preemptor_cluster_queue="b",
        reason="InCohortFairSharing",
        policy="reclaimWithinCohort=Any",
    )


class Script:
    deferred = False  # no cycle of the script leaves a preemptor for the next one
    retry_at = None  # nor holds a workload back
    follow_up = False

    def __init__(self, *cycles: list[Event]) -> None:
        self.cycles = list(cycles)

    def decide(self, view: Any, now: int) -> list[Event]:
        events = self.cycles.pop(0)
        # As the engine: a cycle that admitted or preempted asks for another (`AdmissionEngine.follow_up`).
        self.follow_up = any(isinstance(e, WorkloadAdmitted | WorkloadPreempted) for e in events)
        return events


class Recorder:
    def __init__(self) -> None:
        self.state = State()
        self.appended: list[list[Any]] = []

    async def append(self, items: list[Any]) -> list[int]:
        self.appended.append(items)
        return list(range(1, len(items) + 1))


class Clock:
    def __init__(self) -> None:
        self.at = 5

    def now(self) -> int:
        return self.at


def admit(*cycles: list[Event]) -> tuple[Admit, Recorder, Clock]:
    recorder, clock = Recorder(), Clock()
    return Admit(recorder, Script(*cycles), clock, lambda order: None), recorder, clock  # type: ignore[arg-type]


def test_a_second_preemption_of_one_job_at_one_instant_stops_the_run_naming_it() -> None:
    stage, recorder, _ = admit([preempted("ns/x", "ns/p")], [preempted("ns/x", "ns/q")])
    asyncio.run(stage.step())
    with pytest.raises(PreemptionLoop) as info:
        asyncio.run(stage.step())
    assert info.value.jobs == ("ns/x",)
    assert "ns/x (preempted by ns/p, now again by ns/q)" in str(info.value)
    assert len(recorder.appended) == 1  # the looping decision was never recorded


def test_the_same_job_preempted_again_at_a_later_instant_is_no_loop() -> None:
    stage, recorder, clock = admit([preempted("ns/x", "ns/p")], [preempted("ns/x", "ns/q")])
    asyncio.run(stage.step())
    clock.at = 6
    asyncio.run(stage.step())
    assert len(recorder.appended) == 2


def test_the_stage_wakes_at_the_instant_after_one_where_the_engine_held_a_workload_back() -> None:
    """A victim stopped at an instant is held back until the next one (issue 9); without a wake-up then, in a quiet
    cluster it would wait for whatever happens next."""
    stage, _, _ = admit([])
    assert stage.next_due() is None
    stage.engine.retry_at = 1001  # type: ignore[attr-defined]
    assert stage.next_due() == 1001
    stage.gate = lambda: False  # a standby never wakes on its own
    assert stage.next_due() is None
