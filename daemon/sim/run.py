"""The simulated world: a fake Cluster on a virtual clock, driven through the daemon's own stages.

The stages (`daemon.stages`: ingest, admit, actuate) are the daemon's; only the world differs. At each instant every
creation and completion that is due is observed, then the stages run until none has work: cycles repeat until one
makes no admission or preemption, and each decision is carried out by the simulated cluster. A preempted job stops
at once (the cluster reports `workload.evicted` in the same instant) and goes back to its queue; when it is
admitted again its runtime starts from zero.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.actuation import Action, Order
from daemon.domain.admission import AdmissionEngine, EngineConfig
from daemon.domain.model import Millis
from daemon.domain.podsready import WaitForPodsReady
from daemon.domain.state import State
from daemon.eventlog import EventStore
from daemon.obs.logging import get_logger
from daemon.sim.scenario import Scenario, SimJob
from daemon.stages.actuate import Actuate
from daemon.stages.admit import Admit
from daemon.stages.estimate import Estimator
from daemon.stages.ingest import Ingest
from daemon.stages.ports import Done, Inbox, Observed, Outcome
from daemon.stages.recorder import SNAPSHOT_EVERY, Recorder
from daemon.stages.runner import run_stepped
from daemon.views.jobs import JobOutcome, Jobs
from daemon.views.projection import Projection
from daemon.views.runtimes import Runtimes

_CREATE, _FINISH, _CONFIG = 0, 1, 2

_ACTIVE, _INACTIVE = 4, 5  # a job's Workload's spec.active set to true / false (simulate.admitd.io/deactivate-at)
_READY = 3  # waitForPodsReady: a job's pods all became ready (simulate.admitd.io/ready-after)

log = get_logger("admitd.sim")


@dataclass(frozen=True, slots=True, kw_only=True)
class SimProgress:
    now: Millis
    created: int
    total_jobs: int
    admitted: int
    finished: int


@dataclass(slots=True, kw_only=True)
class SimResult:
    end: Millis
    jobs: dict[str, JobOutcome]
    cycles: int = 0
    decisions: int = 0
    events: int = 0
    engine_seconds: float = 0.0
    engine_cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    state: State | None = None


class VirtualClock:
    """Virtual milliseconds since the scenario's start; only the simulated cluster moves it."""

    def __init__(self) -> None:
        self.at: Millis = 0

    def now(self) -> Millis:
        return self.at


class SimulatedCluster:
    """A fake Cluster on a virtual clock: jobs appear at their submit time, run for their runtime once unsuspended,
    and stop at once when suspended (their quota is released in the same instant)."""

    def __init__(
        self,
        scenario: Scenario,
        clock: VirtualClock,
        until: Millis | None,
        *,
        pods_ready: WaitForPodsReady | None = None,
        due: Callable[[], Millis | None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.clock = clock
        self.until = until
        self.by_key: dict[str, SimJob] = {job.workload.key: job for job in scenario.jobs}
        self.timeline: list[tuple[Millis, int, int, str, int]] = []
        self.epoch: dict[str, int] = {}
        self.running: set[str] = set()
        self.created = 0
        self.cut_by_until = False
        self._order = 0
        self._inbox: Inbox | None = None
        self._started = False
        # waitForPodsReady: report when each started job's pods are ready, and stop at the admit stage's deadlines
        # (timeouts, ends of backoff) while some job that could still finish has not (one that is never ready in
        # time would otherwise be timed out and requeued without end). With nothing else left to happen, at most
        # `quiet_limit` deadlines in a row are followed: a job that can never be admitted must not keep it going.
        self.pods_ready = pods_ready
        self.due = due
        # The instant after one where the engine held back a workload stopped at it (`AdmissionEngine.retry_at`):
        # followed whether or not waitForPodsReady is on, or that workload would wait for whatever happens next,
        # and a quiet simulation would end with it never assessed again.
        self.retry: Callable[[], Millis | None] | None = None
        self.can_finish = {
            job.workload.key
            for job in scenario.jobs
            if pods_ready is not None
            and job.runtime is not None
            and job.ready_after is not None
            and job.ready_after <= pods_ready.timeout
        }
        self.quiet_steps = 0
        self.quiet_limit = 16 * len(scenario.jobs) + 64
        for index, (at, _) in enumerate(scenario.timed_config):
            self._push(at, _CONFIG, str(index))
        for job in scenario.jobs:
            self._push(job.submit_at, _CREATE, job.workload.key)
            if job.deactivate_at is not None:
                self._push(max(job.deactivate_at, job.submit_at), _INACTIVE, job.workload.key)
            if job.reactivate_at is not None:
                self._push(job.reactivate_at, _ACTIVE, job.workload.key)

    def connect(self, inbox: Inbox) -> None:
        self._inbox = inbox

    def _put(self, observed: Observed) -> None:
        if self._inbox is None:
            raise RuntimeError("the simulated cluster is not connected to an inbox")
        self._inbox.put(observed)

    def _push(self, at: Millis, kind: int, key: str, epoch: int = 0) -> None:
        self._order += 1
        heapq.heappush(self.timeline, (at, self._order, kind, key, epoch))

    async def advance(self) -> bool:
        """Move the clock to the next instant with something due and deliver what happens then; False when done."""
        if not self._started:
            self._started = True
            self._put(Observed(tuple(self.scenario.config)))
            return True
        while True:
            due = self.due() if self.due is not None and self.can_finish else None
            retry = self.retry() if self.retry is not None else None
            if retry is not None and (due is None or retry < due):
                due = retry
            if due is not None and (not self.timeline or due < self.timeline[0][0]):
                if self.until is not None and due > self.until:
                    self.cut_by_until = True
                    return False
                if not self.timeline:
                    self.quiet_steps += 1
                    if self.quiet_steps > self.quiet_limit:
                        log.warning("simulation stopped: only waitForPodsReady deadlines were left", at=self.clock.at)
                        return False
                self.clock.at = max(self.clock.at, due)
                return True  # the admit stage has work now: a timeout or a backoff is due
            if not self.timeline:
                return False
            at = self.timeline[0][0]
            if self.until is not None and at > self.until:
                self.cut_by_until = True
                return False
            self.clock.at = at
            observed: list[ev.Event] = []
            while self.timeline and self.timeline[0][0] == at:
                _, _, kind, key, epoch = heapq.heappop(self.timeline)
                if kind == _CREATE:
                    observed.append(ev.JobObserved(workload=self.by_key[key].workload))
                    self.created += 1
                elif kind == _CONFIG:
                    observed.append(self.scenario.timed_config[int(key)][1])
                elif kind in (_ACTIVE, _INACTIVE):
                    observed.append(ev.WorkloadActiveChanged(workload=key, active=kind == _ACTIVE, at=at))
                    if kind == _INACTIVE and self.by_key[key].reactivate_at is None:
                        self.can_finish.discard(key)  # stopped for good
                elif kind == _READY:
                    if self.epoch.get(key) == epoch and key in self.running:
                        observed.append(ev.JobReady(job=key, at=at))
                elif self.epoch.get(key) == epoch and key in self.running:
                    self.running.discard(key)
                    self.can_finish.discard(key)
                    observed.append(ev.JobFinished(job=key, at=at))
            if observed:
                self.quiet_steps = 0
                self._put(Observed(tuple(observed)))
                return True

    async def carry_out(self, order: Order) -> Outcome:
        key, now = order.job, self.clock.now()
        self.epoch[key] = self.epoch.get(key, 0) + 1  # a completion scheduled before this no longer applies
        if order.action is Action.UNSUSPEND:
            self.running.add(key)
            runtime = self.by_key[key].runtime
            ready_after = self.by_key[key].ready_after
            never_ready = self.pods_ready is not None and ready_after is None
            if runtime is not None and not never_ready:  # pods that never get ready never complete
                self._push(now + runtime, _FINISH, key, self.epoch[key])
            if self.pods_ready is not None and ready_after == 0:
                self._put(Observed((ev.JobReady(job=key, at=now),), order.decision))
            elif self.pods_ready is not None and ready_after is not None:
                self._push(now + ready_after, _READY, key, self.epoch[key])
        else:
            self.running.discard(key)
            if order.reason == "InactiveWorkload":  # deactivated (waitForPodsReady): it never runs again
                self.can_finish.discard(key)
            # A simulated job's pods stop at once: its quota is free in the same instant.
            self._put(Observed((ev.WorkloadEvicted(workload=key, at=now, reason=order.reason),), order.decision))
        return Done()


def _progress(clock: VirtualClock, cluster: SimulatedCluster, outcomes: Jobs, total: int) -> SimProgress:
    return SimProgress(
        now=clock.now(),
        created=cluster.created,
        total_jobs=total,
        admitted=outcomes.admitted,
        finished=outcomes.finished,
    )


@contextlib.contextmanager
def _fewer_full_collections() -> Iterator[None]:
    """A simulation builds a large, long-lived state; CPython's default thresholds then spend much of the run in
    full collections that find nothing (7.7 s of a 19 s large-scale run). Freeze what exists and collect less
    often for the run's duration, then restore the process's settings (bench/RESULTS.md has the figures)."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


async def run_simulation(
    scenario: Scenario,
    *,
    db_path: Path | None = None,
    until: Millis | None = None,
    config: EngineConfig | None = None,
    progress: Callable[[SimProgress, bool], None] | None = None,
    views: Callable[[State], Sequence[Projection]] | None = None,
    estimate_every: Millis | None = None,
) -> SimResult:
    """Run `scenario`; keep the event log at `db_path` if given (it must not exist yet), else in a temp file.

    `estimate_every`: record the pending workloads' estimated starts as `admitd run --estimate-every` does
    (`daemon.stages.estimate`: `workload.estimated` when new or moved, from the runs recorded so far), at the first
    settled instant once that much virtual time has passed since the last round (the first: since the start)."""
    wall0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_fewer_full_collections())
        if db_path is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="admitd-sim-"))
            db_path = Path(tmp) / "simulation.db"
        clock = VirtualClock()
        store = await EventStore.open(db_path, clock=clock.now, max_batch=5000, durable=False)
        try:
            state = State()
            recorder = Recorder(store, state, clock, wait_durable=False, snapshot_every=SNAPSHOT_EVERY)
            outcomes = Jobs(state)  # each job's story for the report (daemon/views), fed live
            recorder.projections.append(outcomes.apply)
            for projection in views(state) if views is not None else ():
                recorder.projections.append(projection.apply)  # the live feeder (daemon.views)
            config = config or EngineConfig()
            estimator: Estimator | None = None
            if estimate_every is not None:
                runtimes = Runtimes(state)
                recorder.projections.append(runtimes.apply)
                estimator = Estimator(
                    recorder, clock, lambda: runtimes.durations, every_ms=estimate_every, config=config
                )
            next_estimate = estimate_every or 0  # the first round one span in, as the daemon's
            pods_ready = config.wait_for_pods_ready
            cluster = SimulatedCluster(scenario, clock, until, pods_ready=pods_ready)
            actuate = Actuate(recorder, cluster, clock)
            admit = Admit(recorder, AdmissionEngine(config), clock, actuate.submit, pods_ready=pods_ready)
            cluster.due = admit.next_due
            cluster.retry = lambda: admit.engine.retry_at
            ingest = Ingest(recorder, admit.notify)
            cluster.connect(ingest)
            last_report = time.monotonic()

            async def advance() -> bool:
                nonlocal last_report, next_estimate
                if estimator is not None and clock.now() >= next_estimate:
                    await estimator.round()  # the stages have settled at this instant
                    next_estimate = clock.now() + estimator.every_ms
                more = await cluster.advance()
                if progress is not None and time.monotonic() - last_report > 0.5:
                    last_report = time.monotonic()
                    progress(_progress(clock, cluster, outcomes, len(scenario.jobs)), False)
                return more

            await run_stepped((ingest, actuate, admit), advance)
            await recorder.catch_up()
        finally:
            await store.close()
        end = until if cluster.cut_by_until and until is not None else clock.now()
        log.info(
            "simulation finished",
            seq=state.seq,
            virtual_ms=clock.now(),
            jobs=len(outcomes.jobs),
            admitted=outcomes.admitted,
            finished=outcomes.finished,
            cycles=admit.cycles,
        )
        if progress is not None:
            progress(_progress(clock, cluster, outcomes, len(scenario.jobs)), True)
        return SimResult(
            end=end,
            jobs=outcomes.jobs,
            cycles=admit.cycles,
            decisions=admit.decisions,
            events=recorder.appended,
            engine_seconds=admit.engine_seconds,
            engine_cpu_seconds=admit.engine_cpu_seconds,
            wall_seconds=time.perf_counter() - wall0,
            state=state,
        )
