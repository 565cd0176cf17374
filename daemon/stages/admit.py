"""replay -> admit: run an admission cycle on the folded state when it changed; append the decisions.

A cycle runs when something outside it changed the fold (an observation, an eviction), and again after a cycle
that admitted or preempted, until one admits and preempts nothing: Kueue's cycles follow each other at once, each on
a fresh snapshot. The engine's call already runs passes until nothing more fits, but a fresh call is not always a
continuation of the last one: it offers every queue from its head again (`Switches.inadmissible_back_at_each_call`),
so a workload Kueue would keep in its inadmissible set takes its queue's first pass, and the entries after it meet
each other in a different pass (dst seed 3295: a preemptor held off pass after pass by another queue's waiter met
it no more, and preempted). The follow-up call is cheap where nothing changed (the engine's memo), and it makes
"a cycle on the stage's output decides nothing" true by construction. With fair sharing a preemptor in a tree
where the cycle admitted workloads it could preempt is left for the next cycle the same way
(`AdmissionEngine.deferred`). Decisions reach the actuate stage only after `Recorder.append` returned, which in
the daemon means they are durable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from daemon.domain import activity, podsready
from daemon.domain import events as ev
from daemon.domain.actuation import Order
from daemon.domain.admission import AdmissionEngine
from daemon.domain.model import Millis
from daemon.domain.podsready import WaitForPodsReady
from daemon.domain.state import State
from daemon.obs.logging import get_logger
from daemon.stages.ports import Clock
from daemon.stages.recorder import Recorder

log = get_logger("admitd.admit")


class PreemptionLoop(RuntimeError):
    """A cycle would preempt a workload already preempted at this instant, with nothing else changed: the engine
    is going round in circles. The run stops before the decision is recorded, naming the jobs."""

    def __init__(self, at: int, repeats: list[tuple[str, str | None, str | None]]) -> None:
        named = "; ".join(
            f"{victim} (preempted by {first or 'its queue'}, now again by {again or 'its queue'})"
            for victim, first, again in repeats
        )
        super().__init__(f"preemption loop at {at} ms: {named}")
        self.at = at
        self.jobs = tuple(sorted({v for v, _, _ in repeats}))


class Admit:
    name = "admit"

    def __init__(
        self,
        recorder: Recorder,
        engine: AdmissionEngine,
        clock: Clock,
        to_actuate: Callable[[Order], None],
        *,
        pods_ready: WaitForPodsReady | None = None,
    ) -> None:
        self.recorder = recorder
        self.state: State = recorder.state
        self.engine = engine
        self.clock = clock
        self.to_actuate = to_actuate
        self.wake = asyncio.Event()
        self.gate: Callable[[], bool] = lambda: True  # False on a standby replica: it decides nothing
        self.cause: int | None = None
        self._dirty = False
        self.cycles = 0
        self.decisions = 0
        self.engine_seconds = 0.0
        self.engine_cpu_seconds = 0.0  # the same calls' CPU time, of this thread only (benchmarks on a busy machine)
        self._instant: int | None = None
        self._preempted_at_instant: dict[str, str | None] = {}  # victim -> preemptor, at `_instant`
        # waitForPodsReady: the next timeout or end of backoff, cached per fold seq (has_work asks often).
        self.pods_ready = pods_ready
        self._due: tuple[int, Millis | None] = (-1, None)
        # False while the fold may not yet hold what the cluster says about readiness (the daemon: until the Jobs
        # are listed and every observation received is ingested), so that no timeout is decided on a stale fold.
        self.deadlines_gate: Callable[[], bool] = lambda: True

    def notify(self, cause: int | None) -> None:
        """The fold changed at `cause`: run a cycle soon."""
        self.cause = cause
        self._dirty = True
        self.wake.set()

    def has_work(self) -> bool:
        if not self.gate():
            return False
        if self._dirty:
            return True
        due = self.next_due()
        return due is not None and due <= self.clock.now()

    def next_due(self) -> Millis | None:
        """When the stage must run a cycle even though nothing was observed, if nothing else happens first: the
        instant after one where the engine held back a workload stopped at it (`AdmissionEngine.retry_at`), or
        when a PodsReady timeout or a backoff ends next (waitForPodsReady)."""
        if not self.gate():
            return None  # a standby decides nothing, and it must not wake (becoming leader notifies it)
        retry = self.engine.retry_at
        pods = self._pods_ready_due()
        if retry is None or (pods is not None and pods < retry):
            return pods
        return retry

    def _pods_ready_due(self) -> Millis | None:
        if self.pods_ready is None or not self.deadlines_gate():
            return None  # while the deadlines are held, the observations that open them notify the stage
        if self._due[0] != self.state.seq:
            self._due = (self.state.seq, podsready.next_due(self.state.view(), self.pods_ready))
        return self._due[1]

    def _guard_loops(self, now: int, decisions: list[ev.Event]) -> None:
        """No workload may be preempted twice at one instant: it would have been preempted, readmitted and
        preempted again without anything else having changed (the engine's own guard, `readmitted_at`, rules this
        out; this is the last line). In the simulator an instant is one virtual time; in the daemon one ms."""
        if now != self._instant:
            self._instant = now
            self._preempted_at_instant = {}
        seen = self._preempted_at_instant
        repeats = [
            (d.workload, seen[d.workload], d.preemptor)
            for d in decisions
            if isinstance(d, ev.WorkloadPreempted) and d.workload in seen
        ]
        if repeats:
            raise PreemptionLoop(now, repeats)
        for d in decisions:
            if isinstance(d, ev.WorkloadPreempted):
                seen[d.workload] = d.preemptor

    async def step(self) -> None:
        self._dirty = False
        now = self.clock.now()
        if self.pods_ready is not None and self.deadlines_gate():
            await self._pods_ready_step(now)
        if self.state.deactivating:
            await self._deactivation_step(now)
        t0, c0 = time.perf_counter(), time.thread_time()
        decisions = self.engine.decide(self.state.view(), now)
        engine_s = time.perf_counter() - t0
        self.engine_seconds += engine_s
        self.engine_cpu_seconds += time.thread_time() - c0
        self.cycles += 1
        if not decisions:
            return
        if self.engine.follow_up:
            self._dirty = True  # a cycle follows on a fold that holds these decisions (see the module's docstring)
        self._guard_loops(now, decisions)
        self.decisions += len(decisions)
        seqs = await self.recorder.append([(d, self.cause) for d in decisions])
        admitted = preempted = 0
        outbox = self.state.outbox
        for decision, seq in zip(decisions, seqs, strict=True):
            if isinstance(decision, ev.WorkloadAdmitted):
                admitted += 1
            elif isinstance(decision, ev.WorkloadPreempted):
                preempted += 1
            else:
                continue
            order = outbox.get(decision.workload)
            if order is not None and order.decision == seq:
                self.to_actuate(order)
        log.debug(
            "admission cycle",
            seq=seqs[0],
            last_seq=seqs[-1],
            cause=self.cause,
            at=now,
            admitted=admitted,
            preempted=preempted,
            pending=len(decisions) - admitted - preempted,
            engine_ms=round(engine_s * 1000, 3),
        )

    async def _deactivation_step(self, now: int) -> None:
        """Admitted workloads whose Workload's spec.active turned false are evicted, as Kueue's workload controller
        evicts them (reason Deactivated): decided here, before the cycle, so the cycle sees their quota stopping.
        The observation is their cause."""
        decisions = activity.deactivations(self.state, now)
        self.decisions += len(decisions)
        seqs = await self.recorder.append([(d, self.cause) for d in decisions])
        outbox = self.state.outbox
        for decision, seq in zip(decisions, seqs, strict=True):
            order = outbox.get(decision.workload)
            if order is not None and order.decision == seq:
                self.to_actuate(order)
        log.debug("deactivated", at=now, evicted=[d.workload for d in decisions])

    async def _pods_ready_step(self, now: int) -> None:
        """waitForPodsReady's decisions due at `now` (timeouts, ends of backoff), recorded before the cycle so that
        the cycle sees their effect: a timed-out workload stopping, a requeued one back in its queue. Their cause
        is the clock, so they name none."""
        assert self.pods_ready is not None
        decisions = podsready.decide(self.state.view(), now, self.pods_ready)
        if not decisions:
            return
        self.decisions += len(decisions)
        seqs = await self.recorder.append([(d, None) for d in decisions])
        outbox = self.state.outbox
        for decision, seq in zip(decisions, seqs, strict=True):
            if isinstance(decision, ev.WorkloadTimedOut):
                order = outbox.get(decision.workload)
                if order is not None and order.decision == seq:
                    self.to_actuate(order)
        log.debug(
            "waitForPodsReady",
            at=now,
            timed_out=[d.workload for d in decisions if isinstance(d, ev.WorkloadTimedOut)],
            requeued=[d.workload for d in decisions if isinstance(d, ev.WorkloadRequeued)],
        )
