"""admit -> actuate: carry each decision out through the Cluster, exactly as recorded, and append the result.

The orders come from the fold's outbox (`State.outbox`), so at start-up the decisions that have no recorded
actuation are carried out again; repeating one is harmless (the Cluster's actuations are idempotent). Each result
is appended pointing at its decision (`cause` and the event's `decision`): `job.unsuspended`, `job.suspended` or
`actuation.failed`. A temporary failure is retried with jittered exponential backoff; a permanent one is recorded,
logged and never retried. An order that a later decision superseded is dropped.

Each job has its own lane: at most one order of a job is in flight, and a job's orders are carried out in the order
they were given, but no job ever waits for another's. Up to `parallelism` lanes run at once (a bounded pool); an
order whose job is busy waits for that job only, and a retry waits for its backoff outside the pool. So one job the
API server keeps refusing (or answers slowly) delays no other job's patch. Results are appended as their calls
end, those that ended together in one append. An order already queued, in flight or waiting for its retry is not
queued again, so the outbox is carried out once at start-up however often it is handed over.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections import deque
from collections.abc import Callable, Mapping

from daemon.domain import events as ev
from daemon.domain.actuation import Action, Order
from daemon.domain.model import Millis
from daemon.obs.logging import get_logger
from daemon.stages.ports import Clock, Cluster, Done, Failed, Outcome
from daemon.stages.recorder import Recorder

BACKOFF_FIRST_MS = 500
BACKOFF_MAX_MS = 60_000
_BATCH = 1000  # results that share one append, at most

log = get_logger("admitd.actuate")


def jittered_backoff(attempt: int, rng: random.Random, *, first: float, cap: float, jitter: float) -> float:
    """`first` doubling with each attempt up to `cap`, times a random factor in [1 - jitter, 1 + jitter], so that
    many retries do not arrive together. The one backoff of the daemon (actuations, watches, registrations)."""
    return float(min(cap, first * 2 ** min(attempt, 30)) * rng.uniform(1 - jitter, 1 + jitter))


def backoff_ms(attempt: int, rng: random.Random) -> Millis:
    """An actuation's retry: from 0.5 s, capped at 60 s, ±20%."""
    return int(jittered_backoff(attempt, rng, first=BACKOFF_FIRST_MS, cap=BACKOFF_MAX_MS, jitter=0.2))


def _identity(order: Order) -> tuple[str, int, Action]:
    """What makes two handed-over orders the same: a decision is carried out once at a time (decision 0, an order
    without a decision, is told apart by its job and action)."""
    return (order.job, order.decision, order.action)


RENOUNCED = "not carried out: this process started as a standby, so whoever leads decides again from the cluster"


def renounce(outbox: Mapping[str, Order], at: Millis) -> list[tuple[ev.Event, int | None]]:
    """What a process that starts as a standby appends before it observes anything: every order its log holds
    unsettled is given up (a permanent failure), so that none is carried out after another replica has led. Made
    in an earlier term on a view since overtaken, an unsuspension would start a job the leader has since admitted
    under another decision, or beside the jobs it admitted into the same quota; a suspension would stop a job the
    leader has since admitted again, which nothing would then restart. The cluster says what became of each: a job
    that runs under the admission is held as admitted (a preemption given up leaves it running, still counted as
    leaving, until it ends); one seen suspended with no pods is evicted (`SuspendedByAnotherReplica`)."""
    return [
        (
            ev.ActuationFailed(job=order.job, at=at, decision=order.decision, error=RENOUNCED, permanent=True),
            order.decision,
        )
        for order in sorted(outbox.values(), key=lambda o: o.decision)
        if order.decision
    ]


class Actuate:
    name = "actuate"

    def __init__(
        self, recorder: Recorder, cluster: Cluster, clock: Clock, *, parallelism: int = 1, seed: int | None = None
    ) -> None:
        if parallelism < 1:
            raise ValueError(f"actuation parallelism must be at least 1, not {parallelism}")
        self.recorder = recorder
        self.parallelism = parallelism  # lanes (jobs) carried out at once
        self.cluster = cluster
        self.clock = clock
        self.wake = asyncio.Event()
        self.gate: Callable[[], bool] = lambda: True  # False on a standby replica: it carries nothing out
        self.ready: deque[Order] = deque()  # handed over, not started, in the order given
        self._later: list[tuple[Millis, int, Order]] = []  # (due, decision, order): retries waiting for backoff
        self._attempts: dict[int, int] = {}  # decision seq -> failed attempts so far
        self._known: set[tuple[str, int, Action]] = set()  # orders queued, in flight or waiting for a retry
        self._lanes: dict[str, asyncio.Task[ev.Event | None]] = {}  # job -> its order in flight
        self._order_of: dict[str, Order] = {}  # job -> the order its lane carries out
        self._rng = random.Random(seed)
        self.carried_out = 0
        self.failures = 0

    def submit(self, order: Order) -> None:
        identity = _identity(order)
        if identity in self._known:
            return  # already on its way: carried out once
        self._known.add(identity)
        self.ready.append(order)
        self.wake.set()

    def resume(self) -> int:
        """Queue every order of the fold's outbox (start-up after replay), oldest decision first; the number of
        orders newly queued (those already on their way are not queued twice)."""
        before = len(self._known)
        for order in sorted(self.recorder.state.outbox.values(), key=lambda o: o.decision):
            self.submit(order)
        return len(self._known) - before

    def abandon(self) -> list[asyncio.Task[ev.Event | None]]:
        """The process dies here (the faulty simulation's crash): every lane is cancelled, its result never
        recorded, as a killed process's would not be; the tasks, for the caller to await."""
        lanes = list(self._lanes.values())
        for task in lanes:
            task.cancel()
        self._lanes.clear()
        self._order_of.clear()
        return lanes

    def next_due(self) -> Millis | None:
        return self._later[0][0] if self._later else None

    def in_flight(self) -> int:
        return len(self._lanes)

    def has_work(self) -> bool:
        if self._lanes:
            return True  # a lane in flight: its result is to be appended (even after leadership lapsed)
        if not self.gate():
            return False
        return bool(self.ready) or (bool(self._later) and self._later[0][0] <= self.clock.now())

    def _start(self, unrecorded: set[str]) -> None:
        """Start a lane for each ready order whose job is idle, in the order given, while the pool has room. An
        order whose job is busy, or whose job's last result is not appended yet (`unrecorded`), keeps its place;
        nothing else waits for it."""
        self._start_due()
        if not self.gate():
            return
        held: list[Order] = []
        while self.ready and len(self._lanes) < self.parallelism:
            order = self.ready.popleft()
            if order.job in self._lanes or order.job in unrecorded:
                held.append(order)
                continue
            self._order_of[order.job] = order
            self._lanes[order.job] = asyncio.ensure_future(self._carry_out(order))
        self.ready.extendleft(reversed(held))

    async def _wait(self) -> None:
        """Until the first lane ends, a new order comes (it may belong to an idle job) or anything else wakes the
        stage, or a retry comes due, whichever is first: a lane that takes long never holds the others back."""
        self.wake.clear()
        woken = asyncio.ensure_future(self.wake.wait())
        due = self.next_due()
        timeout = None if due is None else max(0.0, (due - self.clock.now()) / 1000)
        try:
            await asyncio.wait([*self._lanes.values(), woken], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            for task in self._lanes.values():  # stopping: a patch cut short is sent again after the restart
                task.cancel()
            raise
        finally:
            woken.cancel()

    async def step(self) -> None:
        if self.parallelism == 1:
            await self._step_in_turn()
            return
        items: list[tuple[ev.Event, int | None]] = []
        unrecorded: set[str] = set()
        while True:
            self._start(unrecorded)
            if not self._lanes:
                break
            if not any(task.done() for task in self._lanes.values()):
                await self._wait()
            finished = [(job, task) for job, task in self._lanes.items() if task.done()]
            for job, task in finished:
                del self._lanes[job]
                order = self._order_of.pop(job)
                result = task.result()  # an unexpected exception ends the stage (the runner's guard)
                if not (isinstance(result, ev.ActuationFailed) and not result.permanent):
                    self._known.discard(_identity(order))  # else it waits for its retry, still on its way
                if result is not None:
                    items.append((result, order.decision or None))
                    unrecorded.add(job)
            # Go on without appending only while nothing is in flight (the simulator's calls, which end at once):
            # the results of many orders then share one append. A lane still in flight ends the step, so that
            # what has ended is recorded now, whatever the slow one does.
            if not finished or self._lanes or not self.ready or len(items) >= _BATCH:
                break
        # One append for the lanes that ended: each result points at its own decision. A job's next order starts
        # only after this, so it sees its predecessor's result in the fold.
        if items:
            await self.recorder.append(items)

    async def _step_in_turn(self) -> None:
        """One lane (the simulator's): the ready orders one after the other, in the step itself, results appended
        together. Awaited in place, a call that ends at once gives the event loop no turn, so a simulation runs as
        it always has."""
        self._start_due()
        batch: list[tuple[ev.Event, int | None]] = []
        done = 0
        while self.ready and done < _BATCH and self.gate():
            order = self.ready.popleft()
            done += 1
            result = await self._carry_out(order)
            if not (isinstance(result, ev.ActuationFailed) and not result.permanent):
                self._known.discard(_identity(order))
            if result is not None:
                batch.append((result, order.decision or None))
        if batch:
            await self.recorder.append(batch)

    def _start_due(self) -> None:
        now = self.clock.now()
        while self._later and self._later[0][0] <= now:
            self.ready.append(heapq.heappop(self._later)[2])

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
            case Failed(error=error, permanent=permanent, retry_in_ms=retry_in_ms):
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
                    delay = max(backoff_ms(attempt, self._rng), retry_in_ms or 0)
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
