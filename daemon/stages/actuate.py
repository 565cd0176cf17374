"""admit -> actuate: carry each decision out through the Cluster, exactly as recorded, and append the result.

The orders come from the fold's outbox (`State.outbox`), so at start-up the decisions that have no recorded
actuation are carried out again; repeating one is harmless (the Cluster's actuations are idempotent). Each result
is appended pointing at its decision (`cause` and the event's `decision`): `job.unsuspended`, `job.suspended` or
`actuation.failed`. A temporary failure is retried with jittered exponential backoff; a permanent one is recorded,
logged and never retried. An order that a later decision superseded is dropped.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections import deque
from collections.abc import Callable

from daemon.domain import events as ev
from daemon.domain.actuation import Action, Order
from daemon.domain.model import Millis
from daemon.obs.logging import get_logger
from daemon.stages.ports import Clock, Cluster, Done, Failed, Outcome
from daemon.stages.recorder import Recorder

BACKOFF_FIRST_MS = 500
BACKOFF_MAX_MS = 60_000
_BATCH = 1000  # orders whose results share one append

log = get_logger("admitd.actuate")


def jittered_backoff(attempt: int, rng: random.Random, *, first: float, cap: float, jitter: float) -> float:
    """`first` doubling with each attempt up to `cap`, times a random factor in [1 - jitter, 1 + jitter], so that
    many retries do not arrive together. The one backoff of the daemon (actuations, watches, registrations)."""
    return float(min(cap, first * 2 ** min(attempt, 30)) * rng.uniform(1 - jitter, 1 + jitter))


def backoff_ms(attempt: int, rng: random.Random) -> Millis:
    """An actuation's retry: from 0.5 s, capped at 60 s, ±20%."""
    return int(jittered_backoff(attempt, rng, first=BACKOFF_FIRST_MS, cap=BACKOFF_MAX_MS, jitter=0.2))


def _chunks(orders: list[Order], size: int) -> list[list[Order]]:
    """Consecutive groups of at most `size` orders, a job at most once per group: two orders about one job are
    carried out one after the other, in the order they were given."""
    chunks: list[list[Order]] = []
    current: list[Order] = []
    jobs: set[str] = set()
    for order in orders:
        if len(current) == size or order.job in jobs:
            chunks.append(current)
            current, jobs = [], set()
        current.append(order)
        jobs.add(order.job)
    if current:
        chunks.append(current)
    return chunks


class Actuate:
    name = "actuate"

    def __init__(
        self, recorder: Recorder, cluster: Cluster, clock: Clock, *, parallelism: int = 1, seed: int | None = None
    ) -> None:
        self.recorder = recorder
        self.parallelism = parallelism  # orders carried out at once (API calls in flight)
        self.cluster = cluster
        self.clock = clock
        self.wake = asyncio.Event()
        self.gate: Callable[[], bool] = lambda: True  # False on a standby replica: it carries nothing out
        self.ready: deque[Order] = deque()
        self._later: list[tuple[Millis, int, Order]] = []  # (due, decision, order): retries waiting for backoff
        self._attempts: dict[int, int] = {}  # decision seq -> failed attempts so far
        self._rng = random.Random(seed)
        self.carried_out = 0
        self.failures = 0

    def submit(self, order: Order) -> None:
        self.ready.append(order)
        self.wake.set()

    def resume(self) -> int:
        """Queue every order of the fold's outbox (start-up after replay), oldest decision first."""
        orders = sorted(self.recorder.state.outbox.values(), key=lambda o: o.decision)
        for order in orders:
            self.submit(order)
        return len(orders)

    def next_due(self) -> Millis | None:
        return self._later[0][0] if self._later else None

    def has_work(self) -> bool:
        if not self.gate():
            return False
        return bool(self.ready) or (bool(self._later) and self._later[0][0] <= self.clock.now())

    async def step(self) -> None:
        now = self.clock.now()
        while self._later and self._later[0][0] <= now:
            self.ready.append(heapq.heappop(self._later)[2])
        while self.ready:
            batch = [self.ready.popleft() for _ in range(min(len(self.ready), _BATCH))]
            results: list[ev.Event | None] = []
            for i, chunk in enumerate(chunks := _chunks(batch, self.parallelism)):
                if not self.gate():  # leadership lapsed mid-batch: hand the rest back, act on nothing more
                    rest = [order for later in chunks[i:] for order in later]
                    self.ready.extendleft(reversed(rest))
                    batch = batch[: len(batch) - len(rest)]
                    break
                if len(chunk) == 1:
                    results.append(await self._carry_out(chunk[0]))
                else:
                    results.extend(await asyncio.gather(*(self._carry_out(order) for order in chunk)))
            # One append for the batch: each result points at its own decision.
            await self.recorder.append(
                [
                    (result, order.decision or None)
                    for order, result in zip(batch, results, strict=True)
                    if result is not None
                ]
            )

    async def _carry_out(self, order: Order) -> ev.Event | None:
        current = self.recorder.state.outbox.get(order.job)
        # decision 0: an order without a decision (a queued job found running unsuspended is suspended at once).
        if order.decision and (current is None or current.decision != order.decision):
            return None  # already carried out, or superseded by a later decision about the same job
        if order.conflict is not None:
            outcome: Outcome = Failed(order.conflict, permanent=True)
        else:
            outcome = await self.cluster.carry_out(order)
        at = self.clock.now()
        result: ev.Event
        match outcome:
            case Done():
                self._attempts.pop(order.decision, None)
                self.carried_out += 1
                if order.action is Action.UNSUSPEND:
                    result = ev.JobUnsuspended(
                        job=order.job, at=at, decision=order.decision, placements=order.placements
                    )
                else:
                    result = ev.JobSuspended(job=order.job, at=at, decision=order.decision, placements=order.placements)
            case Failed(error=error, permanent=permanent):
                self.failures += 1
                result = ev.ActuationFailed(
                    job=order.job, at=at, decision=order.decision, error=error, permanent=permanent
                )
                attempt = self._attempts.get(order.decision, 0)
                if permanent:
                    self._attempts.pop(order.decision, None)
                    log.error("actuation failed for good", job=order.job, decision=order.decision, error=error)
                else:
                    self._attempts[order.decision] = attempt + 1
                    delay = backoff_ms(attempt, self._rng)
                    heapq.heappush(self._later, (at + delay, order.decision, order))
                    log.warning(
                        "actuation failed, will retry",
                        job=order.job,
                        decision=order.decision,
                        attempt=attempt + 1,
                        retry_in_ms=delay,
                        error=error,
                    )
        return result
