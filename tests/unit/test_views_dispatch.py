"""The projections' tables of handlers by event type (daemon/views/dispatch.py): each names every event type of the
log, a table missing one is refused at construction (naming the class and the type), every event with a time moves
the usage clock, and a feed's joined table calls each projection's handler in its order.

Real: the projections, their tables, the event classes. Faked: nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from daemon.answers.windows import Windows
from daemon.domain import events as ev
from daemon.domain.state import State
from daemon.views import dispatch
from daemon.views.kueue_counters import KueueCounters
from daemon.views.ledger import Preemptions
from daemon.views.queues import Queues
from daemon.views.runtimes import Runtimes
from daemon.views.series import QueueSeries
from daemon.views.usage import Usage

TABLES: dict[str, tuple[type[Any], Callable[[State], object]]] = {
    "KueueCounters": (KueueCounters, KueueCounters),
    "Preemptions": (Preemptions, Preemptions),
    "Runtimes": (Runtimes, Runtimes),
    "Usage": (Usage, lambda s: Usage(s, 0)),
    "QueueSeries": (QueueSeries, lambda s: QueueSeries(s, Queues(s))),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_table_names_every_event_type(name: str) -> None:
    cls, _ = TABLES[name]
    assert dispatch.missing(cls.ON) == []
    assert set(cls.ON) == set(ev.EVENT_TYPES)


@pytest.mark.parametrize("name", sorted(TABLES))
@pytest.mark.parametrize("left_out", [ev.WorkloadPending, ev.ChainBreakAccepted, ev.ClusterQueueObserved])
def test_a_table_missing_an_event_type_is_refused(name: str, left_out: type[ev.Event], monkeypatch: Any) -> None:
    cls, make = TABLES[name]
    monkeypatch.setattr(cls, "ON", {t: f for t, f in cls.ON.items() if t is not left_out})
    with pytest.raises(TypeError, match=rf"{cls.__name__}: .*{left_out.__name__} \(no entry\)"):
        make(State())


def test_a_name_that_is_no_event_type_is_refused(monkeypatch: Any) -> None:
    class NotAnEvent:
        pass

    monkeypatch.setattr(Preemptions, "ON", {**Preemptions.ON, NotAnEvent: None})
    with pytest.raises(TypeError, match=r"Preemptions: .*NotAnEvent \(not an event type\)"):
        Preemptions(State())


def test_every_event_with_a_time_moves_the_usage_clock() -> None:
    """`Usage` settles the trees to its clock at a change of quotas: an event with a time it does not list as
    `timed` (nor handles otherwise) would leave the clock behind."""
    specials = {ev.WorkloadAdmitted, ev.WorkloadEvicted, ev.JobFinished, ev.JobDeleted}
    timed = {t for t, f in Usage.ON.items() if f is Usage.timed}
    assert timed == dispatch.events_with_at() - specials
    assert specials <= dispatch.events_with_at()


def test_the_windows_take_every_timed_event_through_their_clock() -> None:
    w = Windows(hold=False)
    w.begin(State(pending_indexes=False), 0, whole=True)
    parts = w.tables()  # a feeder joins them, and gives each new time of the events to `clocks` first
    assert len(parts) == 3  # the ledger, the usage, the runtimes
    assert w.clocks() == [w.move_clocks]
    with_at = dispatch.events_with_at()
    for table in parts:
        assert set(table) == set(ev.EVENT_TYPES)
    assert all(h != w.usage.usage.timed for table in parts for h in table.values())  # moved by `move_clocks`, once
    for t, h in w._table.items():  # fed on its own (`_Direct`): the same, through one handler per type
        if t in with_at:
            assert h in (w._timed, w._move_clocks), t.__name__
        else:
            assert h is None or getattr(h, "__self__", None) is w.usage.usage, t.__name__  # type: ignore[union-attr]


def test_the_windows_clocks_do_nothing_given_the_same_time_again() -> None:
    """A feeder calls `move_clocks` once per time of the events, not per event: a second call with the time it was
    last given must leave everything as the first left it (the checkpoints, the clock, the pruning)."""
    w = Windows(hold=False, bucket_ms=1_000, recent_ms=10_000, coarse_ms=5_000, retention_ms=40_000)
    w.begin(State(pending_indexes=False), 0, whole=True)
    assert w.usage is not None
    for at in (0, 999, 1_000, 3_500, 3_500, 61_000, 61_000, 62_500):
        w.move_clocks(at)
        once = (w.figures(), w.usage.due, w.usage.usage.now, w._prune_at, w.ledger_from)
        w.move_clocks(at)
        assert (w.figures(), w.usage.due, w.usage.usage.now, w._prune_at, w.ledger_from) == once, at
    assert w.usage.usage.now == 62_500 and w.usage.due == 63_000


def test_a_joined_table_calls_each_projection_in_its_order() -> None:
    calls: list[str] = []

    def table(name: str, takes: set[type[ev.Event]]) -> dispatch.Table:
        return {t: (lambda e, s, n=name: calls.append(n)) if t in takes else None for t in ev.EVENT_TYPES}

    joined = dispatch.join([table("a", {ev.JobFinished}), table("b", {ev.JobFinished, ev.JobDeleted})])
    assert set(joined) == set(ev.EVENT_TYPES)
    for h in joined[ev.JobFinished]:
        h(ev.JobFinished(job="ns/j", at=1), 1)
    assert calls == ["a", "b"]
    assert len(joined[ev.JobDeleted]) == 1 and joined[ev.WorkloadPending] == ()
    assert dispatch.join([]) == {t: () for t in ev.EVENT_TYPES}
