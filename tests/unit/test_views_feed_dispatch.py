"""The feed's dispatch (`views.follow.CatchingUp.apply`): an event goes to the handlers its type has and to no
other, and an event of a type no part handles reaches no Python function at all (the feed's own `apply` aside),
while the feed still counts it by type (`CatchingUp.by_type`, which the metrics' counters read as their
`events_by_type`).

Real: the feed, the state, the event classes; the metrics' counters, the plots' series and the answers' windows
in the second and third tests. Faked: the part of the first test (it records what it is given).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from daemon.answers.windows import Windows
from daemon.domain import events as ev
from daemon.domain.events import Event
from daemon.domain.model import PendingReason, PendingReasonKind
from daemon.domain.state import State
from daemon.metrics import FedMetrics
from daemon.views.dispatch import Handler
from daemon.views.follow import CatchingUp
from daemon.views.queues import Queues
from daemon.views.series import QueueSeries


class Part:
    """Takes `ev.JobFinished` only; writes down each event its handler is given."""

    def __init__(self) -> None:
        self.took: list[tuple[str, int]] = []
        self.by_type: Mapping[type[Event], int] = {}

    def _finished(self, event: Event, seq: int) -> None:
        self.took.append((type(event).__name__, seq))

    def ticks(self) -> Sequence[Callable[[int], None]]:
        return []

    def counted(self, by_type: Mapping[type[Event], int]) -> None:
        self.by_type = by_type

    def tables(self) -> Sequence[Mapping[type[Event], Handler | None]]:
        return [{t: self._finished if t is ev.JobFinished else None for t in ev.EVENT_TYPES}]

    def clocks(self) -> Sequence[Callable[[int], None]]:
        return []

    def attach(self, state: State, queues: Queues) -> None:
        pass


def python_calls(feed: CatchingUp, event: Event, seq: int) -> list[str]:
    """The Python functions `feed.apply(event, seq)` calls (by name, itself included), as the profiler sees them."""
    calls: list[str] = []

    def profile(frame: FrameType, what: str, arg: Any) -> None:
        if what == "call" and frame.f_code.co_filename != __file__:
            calls.append(frame.f_code.co_qualname)

    apply = feed.apply
    sys.setprofile(profile)
    try:
        apply(event, seq)
    finally:
        sys.setprofile(None)
    return calls


def live_feed(*parts: Any) -> tuple[CatchingUp, State]:
    state = State()
    feed = CatchingUp(Path("unused.db"), state, Queues(state))  # never ticked: no recorded_at
    for p in parts:
        feed.add(p)
    feed.catch_up()
    feed.hand_over()
    return feed, state


def test_a_handler_of_a_type_is_called_for_it_and_not_for_another() -> None:
    part = Part()
    feed, _ = live_feed(part)
    feed.apply(ev.JobFinished(job="ns/a", at=1), 1)
    feed.apply(ev.JobDeleted(job="ns/b", at=1), 2)
    feed.apply(ev.JobFinished(job="ns/c", at=1), 3)
    assert part.took == [("JobFinished", 1), ("JobFinished", 3)]
    assert part.by_type is feed.by_type
    assert part.by_type[ev.JobFinished] == 2 and part.by_type[ev.JobDeleted] == 1
    # no handler but the status writer's queues' (the feed feeds them, last), no tick, no clock
    queues = ["Queues._gone", "Queues._release"]
    assert python_calls(feed, ev.JobDeleted(job="ns/d", at=1), 4) == ["CatchingUp.apply", *queues]
    assert python_calls(feed, ev.JobFinished(job="ns/e", at=1), 5) == ["CatchingUp.apply", *queues]  # `_finished`
    assert part.took[-1] == ("JobFinished", 5)


def test_the_types_no_live_view_handles_call_nothing() -> None:
    """With every part `admitd run` feeds (the LocalQueue metrics off): a pending reason, a suspension, a
    priority class (at the time of the event before, so that no clock moves) reach no Python function, and are
    counted."""
    state0 = State()
    feed = CatchingUp(Path("unused.db"), state0, Queues(state0))
    assert feed.state is not None and feed.queues is not None
    fed = FedMetrics(Path("unused.db"), feed.state, feed.queues, lambda: "leader")
    feed.add(fed)
    feed.add(QueueSeries(feed.state, feed.queues))
    feed.add_late(Windows(now=lambda: 0))
    feed.catch_up()
    feed.hand_over()
    feed.apply(ev.JobFinished(job="ns/x", at=7), 1)  # the clocks at 7
    pending = ev.WorkloadPending(
        workload="ns/x",
        at=7,
        cluster_queue="cq",
        reason=PendingReason(kind=PendingReasonKind.WAITING_FOR_QUOTA, message="m"),
    )
    suspended = ev.JobSuspended(job="ns/x", at=7, decision=1)
    for seq, event in enumerate([pending, suspended, pending], 2):
        assert python_calls(feed, event, seq) == ["CatchingUp.apply"], type(event).__name__
    assert fed.counters.events_by_type == {"job.finished": 1, "workload.pending": 2, "job.suspended": 1}


def test_the_counters_count_the_same_fed_by_the_feed_or_by_apply() -> None:
    """`KueueCounters.apply` counts each event by type itself; fed by the feed, the feed's count is theirs."""
    pending = ev.WorkloadPending(
        workload="ns/x",
        at=7,
        cluster_queue="cq",
        reason=PendingReason(kind=PendingReasonKind.WAITING_FOR_QUOTA, message="m"),
    )
    events: list[Event] = [
        pending,
        ev.JobSuspended(job="ns/x", at=8, decision=1),
        pending,
        ev.JobDeleted(job="ns/x", at=9),
    ]
    state0 = State()
    feed = CatchingUp(Path("unused.db"), state0, Queues(state0))
    assert feed.state is not None and feed.queues is not None
    fed = FedMetrics(Path("unused.db"), feed.state, feed.queues, lambda: "leader")
    feed.add(fed)
    feed.catch_up()
    feed.hand_over()
    own = FedMetrics(Path("unused.db"), State(), Queues(State()), lambda: "leader").counters
    for seq, event in enumerate(events, 1):
        feed.apply(event, seq)
        state0.apply(event, seq)
        own.apply(event, seq)
        own.state.apply(event, seq)
    assert (
        fed.counters.events_by_type
        == own.events_by_type
        == {
            "workload.pending": 2,
            "job.suspended": 1,
            "job.deleted": 1,
        }
    )
    assert fed.counters.figures() == own.figures()
