"""`AdmissionEngine.decide` skips a cycle when nothing waits and nothing drains (`nothing_to_decide`); the skip must
never hide a decision: the engine decides exactly as a fresh `decide` in every such state, drains included."""

from __future__ import annotations

import pytest

from daemon.domain.admission import AdmissionEngine, decide
from daemon.domain.admission.engine import nothing_to_decide
from daemon.domain.events import WorkloadAdmitted, WorkloadPreempted
from tests.unit.builders import World, cq, flavor, job, lq, namespace, running, world

NOW = 1_000


def _admitted_world(*extra: object) -> World:
    return world(
        flavor("h100"),
        namespace("default"),
        cq("a").flavor("h100", gpu=8),
        lq("default", "q", "a"),
        lq("default", "other", "a"),
        running(job("r").gpus(2), "a", "h100"),
        running(job("s").queue("other").gpus(2), "a", "h100"),
        *extra,
    )


def test_nothing_waiting_and_nothing_draining_is_skipped_and_decides_nothing() -> None:
    w = _admitted_world()
    view = w.view()
    assert nothing_to_decide(view)
    assert AdmissionEngine().decide(view, NOW) == decide(view, NOW) == []


@pytest.mark.parametrize(
    ("stopped", "drained"),
    [
        (cq("a").stop("HoldAndDrain").flavor("h100", gpu=8), {"default/r", "default/s"}),
        (lq("default", "q", "a", stop="HoldAndDrain"), {"default/r"}),
    ],
)
def test_a_drain_with_nothing_waiting_is_decided(stopped: object, drained: set[str]) -> None:
    w = _admitted_world()
    engine = AdmissionEngine()
    assert engine.decide(w.view(), NOW) == []
    w.add(stopped)  # a stop policy set on a queue later: nothing waits, but its workloads must be drained
    view = w.view()
    assert not nothing_to_decide(view)
    events = engine.decide(view, NOW)
    assert events == decide(view, NOW)
    assert {e.workload for e in events if isinstance(e, WorkloadPreempted)} == drained


def test_a_waiting_workload_after_skipped_cycles_is_admitted_as_by_a_fresh_decide() -> None:
    """Skipped cycles leave the engine's usage (journal) and memo valid: completions in between are counted."""
    w = _admitted_world()
    engine = AdmissionEngine()
    w.finish("default/r")
    assert engine.decide(w.view(), NOW) == []  # skipped, with a completion in the journal since the last cycle
    w.submit(job("big").gpus(6))  # fits only because r's 2 GPUs were released
    view = w.view()
    events = engine.decide(view, NOW + 1)
    assert events == decide(view, NOW + 1)
    assert [e.workload for e in events if isinstance(e, WorkloadAdmitted)] == ["default/big"]


def test_unrouted_workloads_are_not_skipped() -> None:
    w = _admitted_world(job("lost").queue("missing").gpus(1))
    view = w.view()
    assert not nothing_to_decide(view)
    assert AdmissionEngine().decide(view, NOW) == decide(view, NOW) != []
