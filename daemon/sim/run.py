"""The simulator's virtual cluster: the real fold, engine and event log, driven by a virtual clock.

At each instant every creation and completion that is due is observed, then admission cycles run until one makes
no admission or preemption. A preempted job stops at once (`workload.evicted` at the same instant) and goes back
to its queue; when it is admitted again its runtime starts from zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import heapq
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.admission import AdmissionEngine, EngineConfig
from daemon.domain.model import Millis, PendingReason
from daemon.domain.state import State
from daemon.eventlog import EventStore, save_snapshot
from daemon.obs.logging import get_logger
from daemon.sim.scenario import Scenario, SimJob

_CREATE, _FINISH = 0, 1
_FLUSH_EVERY = 256  # submitted appends before the simulator waits for the log to catch up
SNAPSHOT_EVERY = 20_000  # events between state snapshots in the simulation's log, as the daemon writes them

log = get_logger("admitd.sim")


@dataclass(slots=True)
class JobOutcome:
    key: str
    cluster_queue: str | None = None
    admitted_at: list[Millis] = field(default_factory=list)
    evicted_at: list[Millis] = field(default_factory=list)
    finished_at: Millis | None = None
    flavors: dict[str, dict[str, str]] | None = None
    pending_reason: PendingReason | None = None
    running: bool = False
    created_at: Millis = 0


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
    wall_seconds: float = 0.0
    state: State | None = None


class _Driver:
    def __init__(self, store: EventStore, engine: AdmissionEngine, total_jobs: int) -> None:
        self.store = store
        self.engine = engine
        self.state = State()
        self.jobs: dict[str, JobOutcome] = {}
        self.epoch: dict[str, int] = {}
        self.by_key: dict[str, SimJob] = {}
        self.timeline: list[tuple[Millis, int, int, str, int]] = []
        self.order = 0
        self.now: Millis = 0
        self.total_jobs = total_jobs
        self.admitted = 0
        self.finished = 0
        self.cycles = 0
        self.decisions = 0
        self.events = 0
        self.engine_seconds = 0.0
        self._pending: list[tuple[asyncio.Future[list[int]], int, int]] = []
        self._last_snapshot_seq = 0

    def _push(self, at: Millis, kind: int, key: str, epoch: int = 0) -> None:
        self.order += 1
        heapq.heappush(self.timeline, (at, self.order, kind, key, epoch))

    async def emit(self, events: Sequence[ev.Event], cause: int | None) -> int | None:
        """Log and fold `events`; return the seq of the last one (`cause` when there are none). The log write is
        awaited in batches."""
        if not events:
            return cause
        first = self.store.expected_seq
        future = self.store.submit([(e, cause) for e in events], recorded_at=self.now)
        self._pending.append((future, first, len(events)))
        for offset, event in enumerate(events):
            self.state.apply(event, first + offset)
            self._record(event)
        self.events += len(events)
        if len(self._pending) >= _FLUSH_EVERY:
            await self.flush()
        return first + len(events) - 1

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        for future, first, count in pending:
            seqs = await future
            if seqs != list(range(first, first + count)):
                raise RuntimeError(
                    f"event log seqs {seqs[:3]}... differ from the expected {first}..: "
                    "another process wrote to the simulation's log"
                )
        if self.state.seq - self._last_snapshot_seq >= SNAPSHOT_EVERY:
            await save_snapshot(self.store, self.state)
            self._last_snapshot_seq = self.state.seq
            log.debug("snapshot written", seq=self.state.seq)

    def _record(self, event: ev.Event) -> None:
        match event:
            case ev.JobObserved(workload=wl):
                out = self.jobs.setdefault(wl.key, JobOutcome(key=wl.key, created_at=wl.created_at))
                lq = self.state.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
                if lq is not None and lq.cluster_queue in self.state.cluster_queues:
                    out.cluster_queue = lq.cluster_queue
            case ev.WorkloadAdmitted(workload=key, at=at, admission=adm):
                out = self.jobs[key]
                out.admitted_at.append(at)
                out.cluster_queue = adm.cluster_queue
                out.flavors = {ps.name: dict(ps.flavors) for ps in adm.pod_sets}
                out.running, out.pending_reason = True, None
                self.admitted += 1
                self.epoch[key] = self.epoch.get(key, 0) + 1
                runtime = self.by_key[key].runtime
                if runtime is not None:
                    self._push(at + runtime, _FINISH, key, self.epoch[key])
            case ev.WorkloadEvicted(workload=key, at=at):
                out = self.jobs[key]
                out.evicted_at.append(at)
                out.running = False
                self.epoch[key] = self.epoch.get(key, 0) + 1  # its pending completion no longer applies
            case ev.WorkloadPending(workload=key, reason=reason):
                self.jobs[key].pending_reason = reason
            case ev.JobFinished(job=key, at=at):
                out = self.jobs[key]
                out.finished_at, out.running = at, False
                self.finished += 1
            case _:
                pass

    async def run(
        self, scenario: Scenario, until: Millis | None, progress: Callable[[SimProgress, bool], None] | None
    ) -> Millis:
        await self.emit(scenario.config, None)
        self.by_key = {job.workload.key: job for job in scenario.jobs}
        for job in scenario.jobs:
            self._push(job.submit_at, _CREATE, job.workload.key)
        created = 0
        last_report = time.monotonic()
        cut_by_until = False
        while self.timeline:
            at = self.timeline[0][0]
            if until is not None and at > until:
                cut_by_until = True
                break
            self.now = at
            observed: list[ev.Event] = []
            while self.timeline and self.timeline[0][0] == at:
                _, _, kind, key, epoch = heapq.heappop(self.timeline)
                if kind == _CREATE:
                    observed.append(ev.JobObserved(workload=self.by_key[key].workload))
                    created += 1
                elif self.epoch.get(key) == epoch and self.jobs[key].running:
                    observed.append(ev.JobFinished(job=key, at=at))
            cause = await self.emit(observed, None)
            await self._cycles(cause)
            if progress is not None and time.monotonic() - last_report > 0.5:
                last_report = time.monotonic()
                progress(self._progress(created), False)
        await self.flush()
        log.info(
            "simulation finished",
            seq=self.state.seq,
            virtual_ms=self.now,
            jobs=len(self.jobs),
            admitted=self.admitted,
            finished=self.finished,
            cycles=self.cycles,
        )
        if progress is not None:
            progress(self._progress(created), True)
        if cut_by_until and until is not None:
            return until
        return self.now

    def _progress(self, created: int) -> SimProgress:
        return SimProgress(
            now=self.now, created=created, total_jobs=self.total_jobs, admitted=self.admitted, finished=self.finished
        )

    async def _cycles(self, cause: int | None) -> None:
        while True:
            t0 = time.perf_counter()
            decisions = self.engine.decide(self.state.view(), self.now)
            self.engine_seconds += time.perf_counter() - t0
            self.cycles += 1
            if not decisions:
                return
            self.decisions += len(decisions)
            first = self.store.expected_seq
            last = await self.emit(decisions, cause)
            admitted = sum(isinstance(d, ev.WorkloadAdmitted) for d in decisions)
            evictions = [
                ev.WorkloadEvicted(workload=d.workload, at=self.now, reason="Preempted" if d.preemptor else d.reason)
                for d in decisions
                if isinstance(d, ev.WorkloadPreempted)
            ]
            log.debug(
                "admission cycle",
                seq=first,
                last_seq=last,
                cause=cause,
                virtual_ms=self.now,
                admitted=admitted,
                preempted=len(evictions),
                pending=len(decisions) - admitted - len(evictions),
                engine_ms=round((time.perf_counter() - t0) * 1000, 3),
            )
            await self.emit(evictions, last)
            if not admitted and not evictions:
                return


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
) -> SimResult:
    """Run `scenario`; keep the event log at `db_path` if given (it must not exist yet), else in a temp file."""
    wall0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_fewer_full_collections())
        if db_path is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="admitd-sim-"))
            db_path = Path(tmp) / "simulation.db"
        store = await EventStore.open(db_path, max_batch=5000, durable=False)
        try:
            driver = _Driver(store, AdmissionEngine(config or EngineConfig()), len(scenario.jobs))
            end = await driver.run(scenario, until, progress)
        finally:
            await store.close()
        return SimResult(
            end=end,
            jobs=driver.jobs,
            cycles=driver.cycles,
            decisions=driver.decisions,
            events=driver.events,
            engine_seconds=driver.engine_seconds,
            wall_seconds=time.perf_counter() - wall0,
            state=driver.state,
        )
