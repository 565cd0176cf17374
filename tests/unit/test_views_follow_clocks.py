"""The feed's clocks (`views.follow.CatchingUp`): a part's `clocks` are given each new time of the events (`at`)
once, before the handlers of the first event that carries it, not once per event; an event without a time moves
none. (A part begun in the middle of the catch-up's fold is given the next time even when it is the one given
last: tests/integration/test_answers_windows.py, the windows begun mid-fold equal the same built on their own.)

Real: the feed, the state, the event classes. Faked: the parts (they record what they are given).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.events import Event
from daemon.domain.model import Namespace
from daemon.domain.state import State
from daemon.views.dispatch import Handler
from daemon.views.follow import CatchingUp
from daemon.views.queues import Queues


class Part:
    """A part of the feed that writes down each time it is given and each event its handler takes."""

    def __init__(self, name: str, log: list[tuple[str, object]]) -> None:
        self.name = name
        self.log = log

    def ticks(self) -> Sequence[Callable[[int], None]]:
        return [lambda recorded_at: self.log.append((f"{self.name}.tick", recorded_at))]

    def counted(self, by_type: Mapping[type[Event], int]) -> None:
        pass

    def tables(self) -> Sequence[Mapping[type[Event], Handler | None]]:
        def took(event: Event, seq: int) -> None:
            self.log.append((f"{self.name}.event", seq))

        return [{t: took for t in ev.EVENT_TYPES}]

    def clocks(self) -> Sequence[Callable[[int], None]]:
        return [lambda at: self.log.append((f"{self.name}.clock", at))]

    def attach(self, state: State, queues: Queues) -> None:
        pass


def finished(key: str, at: int) -> ev.JobFinished:
    return ev.JobFinished(job=key, at=at)


def test_each_new_time_of_the_events_is_given_once_before_its_first_event() -> None:
    state = State()
    log: list[tuple[str, object]] = []
    feed = CatchingUp(Path("unused.db"), state, Queues(state))
    feed.add(Part("a", log))
    feed.catch_up()
    feed.hand_over()
    untimed = ev.NamespaceObserved(namespace=Namespace(name="ns"))
    events: list[Event] = [finished("ns/x", 5), untimed, finished("ns/y", 5), finished("ns/z", 7), finished("ns/w", 5)]
    for seq, event in enumerate(events, 1):
        feed.apply(event, seq)
        state.apply(event, seq)
    assert [x for x in log if x[0] != "a.tick"] == [
        ("a.clock", 5),
        ("a.event", 1),
        ("a.event", 2),  # no time: no clock
        ("a.event", 3),  # the same time again: no clock
        ("a.clock", 7),
        ("a.event", 4),
        ("a.clock", 5),  # another time than the last one, though given before
        ("a.event", 5),
    ]


def test_each_batch_s_recorded_at_is_given_once_and_a_hand_over_after_a_tick_gives_it_to_the_parts() -> None:
    """`tick` once a batch: a part's ticks take each new recorded_at once, and none for a repeat. A hand-over between
    a batch's `tick` and its events (no event of it kept) gives the parts that batch's time, so that its events are
    not taken as of the last one's."""
    state = State()
    log: list[tuple[str, object]] = []
    feed = CatchingUp(Path("unused.db"), state, Queues(state))
    feed.add(Part("a", log))
    feed.tick(100)
    feed.apply(finished("ns/x", 5), 1)  # kept
    state.apply(finished("ns/x", 5), 1)
    feed.catch_up()
    feed.hand_over()
    feed.tick(100)  # a second batch of the same millisecond
    feed.apply(finished("ns/y", 5), 2)
    state.apply(finished("ns/y", 5), 2)
    feed.tick(200)
    feed.apply(finished("ns/z", 5), 3)
    ticks = [x for x in log if x[0] == "a.tick"]
    assert ticks == [("a.tick", 100), ("a.tick", 200)]

    state = State()
    log.clear()
    feed = CatchingUp(Path("unused.db"), state, Queues(state))
    feed.add(Part("a", log))
    feed.tick(100)
    feed.apply(finished("ns/x", 5), 1)
    state.apply(finished("ns/x", 5), 1)
    feed.catch_up()
    feed.tick(300)  # the next batch begins, then the hand-over runs before its first event
    feed.hand_over()
    feed.apply(finished("ns/y", 5), 2)
    assert [x for x in log if x[0] == "a.tick"] == [("a.tick", 100), ("a.tick", 300)]
    assert log[-1] == ("a.event", 2) and log[-2] == ("a.tick", 300)
