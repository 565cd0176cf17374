"""Projections dispatched by event type: each projection the recorder feeds says, for every event type, which of its
methods takes that event, or that it takes no part in it (None), and a feeder looks the event's type up once.

The recorder feeds every live projection every event it appends; with a `match` in each projection's `apply`, each
one tried its cases in turn for every event, most of which it ignores (bench/bench_fold.py: a fifth of the
recorder's CPU per event). A table per projection, joined into one per feeder (`Dispatch`), calls only the
handlers an event can affect. A table must name every type in `events.EVENT_TYPES`: a new event type that a
projection does not list fails at its construction and in tests/unit/test_views_dispatch.py, rather than being
ignored where it should have counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MethodType
from typing import Any

from daemon.domain import events as ev
from daemon.domain.events import EVENT_TYPES, Event

Handler = Callable[[Event, int], None]
"""A projection's bound method for one event type: `(event, seq)`, called before the state folds the event."""

Spec = Mapping[type[Event], Callable[..., None] | None]
"""A class's table: event type -> the (unbound) method that takes it, or None for none."""

Table = dict[type[Event], Handler | None]

QUEUE_OBJECTS = ev.QUEUE_OBJECT_TYPES
"""For the tables of the projections of jobs, which take no part in the queue objects' events. A new event type of
that kind goes in `events.QUEUE_OBJECT_TYPES`; any other must still be named in every table."""


def missing(spec: Mapping[type[Event], object]) -> list[str]:
    """The event types `spec` does not name, and the names in it that are no event type of the log."""
    known = set(EVENT_TYPES)
    return sorted(
        [f"{t.__name__} (no entry)" for t in EVENT_TYPES if t not in spec]
        + [f"{getattr(t, '__name__', t)} (not an event type)" for t in spec if t not in known]
    )


def bind(owner: object, spec: Spec) -> Table:
    """`spec`'s methods bound to `owner`; TypeError naming the class and the types when `spec` is not total."""
    wrong = missing(spec)
    if wrong:
        raise TypeError(f"{type(owner).__name__}: its table of handlers by event type is wrong: {', '.join(wrong)}")
    return {t: None if f is None else MethodType(f, owner) for t, f in spec.items()}


def join(tables: Iterable[Mapping[type[Event], Handler | None]]) -> dict[type[Event], tuple[Handler, ...]]:
    """One table of several, in their order: for each event type, the handlers that take part in it."""
    tables = list(tables)
    return {t: tuple(h for table in tables if (h := table[t]) is not None) for t in EVENT_TYPES}


def apply_by(table: Mapping[type[Event], Handler | None], event: Event, seq: int) -> None:
    """One projection's `apply` through its table."""
    h = table[type(event)]
    if h is not None:
        h(event, seq)


def events_with_at() -> frozenset[type[Event]]:
    """The event types that carry `at` (the log's time of the fact, milliseconds)."""
    return frozenset(t for t in EVENT_TYPES if "at" in _fields(t))


def _fields(t: type[Any]) -> set[str]:
    return set(getattr(t, "__dataclass_fields__", {}))
