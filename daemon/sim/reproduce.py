"""Feed a recorded log back through the engine and check that it makes the recorded decisions again.

Walking the log in order, at each recorded decision the state folded so far is given to a fresh `decide()` at the
decision's time; the next events of the log must be exactly what it returns. waitForPodsReady's decisions (timeouts,
ends of backoff) are checked the same way against `daemon.domain.podsready.decide`.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.domain import activity, podsready
from daemon.domain.admission import EngineConfig, decide
from daemon.domain.events import DECISION_TYPES, Event, WorkloadPreempted, WorkloadRequeued, WorkloadTimedOut
from daemon.domain.state import State
from daemon.eventlog import LogReader
from daemon.eventlog.codec import decode


@dataclass(frozen=True, slots=True, kw_only=True)
class Reproduction:
    cycles_checked: int
    decisions_checked: int
    first_mismatch: str | None  # None: every recorded decision was reproduced


def reproduce(reader: LogReader, config: EngineConfig | None = None) -> Reproduction:
    config = config or EngineConfig()
    events: list[tuple[int, Event]] = [(s, decode(t, v, p, seq=s)) for s, t, v, p in reader.iter_payloads()]
    state = State()
    i = cycles = checked = 0
    while i < len(events):
        seq, event = events[i]
        timed = isinstance(event, WorkloadTimedOut | WorkloadRequeued)
        if not timed and not isinstance(event, DECISION_TYPES):
            state.apply(event, seq)
            i += 1
            continue
        at = event.at  # type: ignore[union-attr]
        deactivating = isinstance(event, WorkloadPreempted) and event.policy == activity.POLICY
        expected: list[Event] = (
            list(activity.deactivations(state, at))
            if deactivating
            else podsready.decide(state.view(), at, config.wait_for_pods_ready)
            if timed
            else decide(state.view(), at, config)
        )
        recorded = [e for _, e in events[i : i + len(expected)]]
        if not expected or recorded != expected:
            got = expected[0] if expected else "no decision"
            return Reproduction(
                cycles_checked=cycles,
                decisions_checked=checked,
                first_mismatch=f"seq {seq}: recorded {event!r}, the engine decides {got!r}",
            )
        for offset, e in enumerate(expected):
            state.apply(e, seq + offset)
        i += len(expected)
        cycles += 1
        checked += len(expected)
    return Reproduction(cycles_checked=cycles, decisions_checked=checked, first_mismatch=None)
