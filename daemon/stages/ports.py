"""The two interfaces the stages need from the world: a Cluster (observations in, actuations out) and a Clock."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from daemon.domain.actuation import Order
from daemon.domain.events import Event
from daemon.domain.model import Millis


class Clock(Protocol):
    def now(self) -> Millis:
        """Milliseconds since the epoch (wall time), or since the scenario's start (virtual time)."""
        ...


class WallClock:
    """The daemon's clock: wall-clock milliseconds since the epoch."""

    def now(self) -> Millis:
        return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Observed:
    """What the cluster said, already turned into typed events at the border; `cause` is the seq it answers, if any."""

    events: tuple[Event, ...]
    cause: int | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """The order was carried out (or had already been: actuation is idempotent)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The order could not be carried out. A temporary failure is retried with backoff; a permanent one is not.
    `retry_in_ms`: not before then (the cluster knows when the attempt can succeed), whatever the backoff says."""

    error: str
    permanent: bool
    retry_in_ms: int | None = None


Outcome = Done | Failed


class Cluster(Protocol):
    """Where jobs run. Observations reach the ingest stage through the `Inbox` the cluster is connected to."""

    def connect(self, inbox: Inbox) -> None:
        """Deliver every later observation to `inbox`."""
        ...

    async def carry_out(self, order: Order) -> Outcome:
        """Unsuspend or suspend the order's job as the order says. Repeating an order must be harmless."""
        ...


class Inbox(Protocol):
    def put(self, observed: Observed) -> None: ...
