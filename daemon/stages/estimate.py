"""The leader's start-time estimates, recorded: every round, each pending workload's p10/p50/p90 start from the
forward run (`daemon.domain.eta`), as `workload.estimated` events, so that what admitd said is in the log and
`admitd eta-report` scores it against what happened.

The rate is bounded twice: one round per `every_ms` at most (never per cycle: a forward run costs seconds on a deep
backlog), and within a round an event only for a workload whose estimate is new or moved (`moved`). The forward run
runs in a worker thread on a copy of the fold taken on the event loop (the inputs' seq is that copy's), so the
cycle is not held up; a workload admitted or gone while it ran gets no event. The thread still takes the
interpreter from the loop while it runs, so the next round waits at least `PAUSE_PER_ROUND` times as long as the
last one took (a round of 50 s on a deep backlog with varied runtimes: the next one 4 minutes later), which keeps
the estimates to a fifth of the process's time at most.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from daemon.domain import events as ev
from daemon.domain.config import EngineConfig
from daemon.domain.eta import Durations, estimates
from daemon.domain.model import Millis
from daemon.domain.state import Phase, State
from daemon.obs.logging import get_logger
from daemon.stages.ports import Clock
from daemon.stages.recorder import Recorder

log = get_logger("admitd.estimate")

QUANTILES = (0.1, 0.5, 0.9)
ESTIMATE_EVERY_MS = 60_000
PAUSE_PER_ROUND = 4  # the pause after a round, at least, in multiples of how long it took


def moved(last: ev.WorkloadEstimated | None, p10: Millis | None, p50: Millis | None, p90: Millis | None) -> bool:
    """Whether an estimate is worth a new event: none recorded yet, one of its figures known or unknown where the
    last was not, or one moved by more than a tenth of the time from the last estimate to it (and at least 1 s)."""
    if last is None:
        return True
    for old, new in ((last.p10, p10), (last.p50, p50), (last.p90, p90)):
        if (old is None) != (new is None):
            return True
        if old is not None and new is not None and abs(new - old) > max(1_000, (old - last.at) // 10):
            return True
    return False


def round_events(
    state: State,
    found: dict[float, dict[str, Millis | None]],
    now: Millis,
    inputs: int,
    last: dict[str, ev.WorkloadEstimated],
) -> list[ev.WorkloadEstimated]:
    """The events of one round: for each workload still pending in `state` whose estimate (`found`, per quantile)
    moved since `last` (which it updates, and rids of workloads no longer pending)."""
    out: list[ev.WorkloadEstimated] = []
    for key in list(last):
        rec = state.workloads.get(key)
        if rec is None or rec.phase is not Phase.PENDING:
            del last[key]
    p10s, p50s, p90s = (found[q] for q in QUANTILES)
    for key in sorted(p50s):
        rec = state.workloads.get(key)
        if rec is None or rec.phase is not Phase.PENDING:
            continue
        p10, p50, p90 = p10s.get(key), p50s.get(key), p90s.get(key)
        if moved(last.get(key), p10, p50, p90):
            e = ev.WorkloadEstimated(workload=key, at=now, inputs=inputs, p10=p10, p50=p50, p90=p90)
            last[key] = e
            out.append(e)
    return out


class Estimator:
    """One round per `every_ms` while `gate()` (the leader) and the recorded runtimes are there (`durations()` is
    None until the daemon's runtimes projection is built)."""

    def __init__(
        self,
        recorder: Recorder,
        clock: Clock,
        durations: Callable[[], Durations | None],
        *,
        every_ms: int = ESTIMATE_EVERY_MS,
        config: EngineConfig | None = None,
    ) -> None:
        self.recorder = recorder
        self.state = recorder.state
        self.clock = clock
        self.durations = durations
        self.every_ms = every_ms
        self.config = config
        self.gate: Callable[[], bool] = lambda: True
        self.last: dict[str, ev.WorkloadEstimated] = {}
        self.rounds = 0
        self.round_s = 0.0  # how long the last round took (wall)

    def pause_s(self) -> float:
        """How long to wait before the next round."""
        return max(self.every_ms / 1000, PAUSE_PER_ROUND * self.round_s)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.pause_s())
            if self.gate():
                t0 = time.monotonic()
                await self.round()
                self.round_s = time.monotonic() - t0

    async def round(self) -> int:
        """One round; the number of events it recorded."""
        durations = self.durations()
        if durations is None:
            return 0
        copy = State.from_snapshot(self.state.to_snapshot())
        now, inputs = self.clock.now(), copy.seq
        found = await asyncio.to_thread(estimates, copy, now, durations, QUANTILES, config=self.config)
        if not self.gate():
            return 0  # no longer the leader: what a standby would record is not its to say
        events = round_events(self.state, dict(found), now, inputs, self.last)
        await self.recorder.append([(e, None) for e in events])
        self.rounds += 1
        log.info("estimates recorded", inputs=inputs, recorded=len(events), pending=len(found[0.5]))
        return len(events)
