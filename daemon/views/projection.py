"""What a read model is: a projection of the log, `apply(event, seq)`, pure.

A projection keeps figures that follow from the events (no I/O, no clock, no prometheus-client). It may read the
fold's record (`State`) as of the event: its feeder calls `apply` with the event *before* the state folds it (the
Recorder live, `views.follow.Following` from the log), so that a finish still finds the job's admission. `seq` is
the last event applied. `figures()` is the projection's whole content as plain, comparable values: one fed live
and one rebuilt from the log compare equal (tests/unit/test_views.py).
"""

from __future__ import annotations

from typing import Protocol

from daemon.domain.events import Event


class Projection(Protocol):
    @property
    def seq(self) -> int:
        """The last event applied."""
        ...

    def apply(self, event: Event, seq: int) -> None:
        """Take `event` (at `seq`) in, reading the fold's record as it was before the event."""
        ...

    def figures(self) -> object:
        """Everything the projection holds, as plain values (dicts, tuples, numbers), for comparing two."""
        ...
