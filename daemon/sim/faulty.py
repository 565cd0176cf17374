"""The daemon's real stages against a faulty simulated cluster, deterministic from a seed (issue 24).

The world (`FaultyCluster`) keeps the truth of every job (suspended or not, pods running or stopping, finished,
deleted) and a timeline on the virtual clock. An actuation is a patch that lands after a latency, may be refused
(409, 429, 500) or time out; a suspension stops the pods only after an eviction latency, and only then is the
quota free (as on a real cluster, the daemon learns it from the watch: suspended with no active pods). Observations
reach the daemon through watch streams that delay them (in order within a kind), duplicate them, or drop and list
the kind again. A job being preempted may be deleted or complete before its pods stop.

The daemon side is a process (`_Process`): its own fold, recorder, stages and an observer that turns the streams'
job versions into events by the rules of the real one (`daemon.kube.observe`). It may crash before any stage step,
or while a patch is in flight in the middle of a batch; it is then restarted after a delay from its log alone
(verified, replayed), lists everything again and carries out its outbox, as the real daemon does.

Determinism: one task runs at a time. A stage step runs until it finishes or parks on a patch in flight (the only
point where virtual time passes inside a step); the world moves on only when no stage that is not parked has work.
The same seed gives the same run, event for event.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from daemon.domain import events as ev
from daemon.domain.actuation import Action, Order, inherited_unsuspensions, read_admission_note
from daemon.domain.admission import AdmissionEngine, EngineConfig
from daemon.domain.model import Admission, ClusterQueue, Millis, ResourceGroup
from daemon.domain.state import Phase, State, WorkloadRecord
from daemon.domain.trust import note_time
from daemon.eventlog import EventStore, LogReader, replay, save_snapshot
from daemon.eventlog.errors import EventLogError
from daemon.sim.faults import Faults
from daemon.sim.invariants import Checker, QuotaLimits, Violation
from daemon.sim.scenario import Scenario, SimJob
from daemon.stages.actuate import Actuate, renounce
from daemon.stages.admit import Admit, PreemptionLoop
from daemon.stages.ingest import Ingest
from daemon.stages.ports import Done, Failed, Inbox, Observed, Outcome
from daemon.stages.recorder import Recorder

SNAPSHOT_EVERY = 400  # small, so that restarts replay from snapshots plus a tail, as a long-lived daemon does
ACTUATION_PARALLELISM = 16  # patches in flight at once: the daemon's default (`admitd run --actuation-parallelism`)
FLUSH_EVERY = 500  # held events written together between two world instants
MAX_STEPS_PER_JOB = 2_000  # world events and stage steps; a run beyond this has not ended (`run-ends`)


@dataclass(frozen=True, slots=True)
class JobVersion:
    """A job as the API server shows it at one moment: what a watch event or a list carries."""

    key: str
    uid: str
    sim: SimJob
    suspended: bool
    active: int
    finished: bool
    succeeded: bool
    deleted: bool
    note: str
    stopping_note: str = ""  # `admitd.io/stopping`: written by a preemption, what the stopping pods run under


@dataclass(slots=True)
class JobTruth:
    sim: SimJob
    exists: bool = False
    suspended: bool = True
    active: int = 0  # pods running or stopping: they hold the quota
    stopping: bool = False
    finished: bool = False
    succeeded: bool = True
    deleted: bool = False
    note: str = ""
    stopping_note: str = ""
    decision: int = 0  # the decision whose unsuspension is on the job now (0: none)
    by: int = 0  # the replica whose log holds that decision (decisions are numbered per log)
    admission: Admission | None = None  # what its pods run under, from the admission note
    epoch: int = 0  # bumped at every start and stop: a timer of an earlier epoch no longer applies

    def version(self) -> JobVersion:
        wl = self.sim.workload
        return JobVersion(
            wl.key,
            wl.uid,
            self.sim,
            self.suspended,
            self.active,
            self.finished,
            self.succeeded,
            self.deleted,
            self.note,
            self.stopping_note,
        )


@dataclass(slots=True)
class Trail:
    """What happened, in order: world events and appended events, for the report of a failing seed."""

    entries: list[tuple[Millis, str, tuple[str, ...]]] = field(default_factory=list)

    def add(self, at: Millis, text: str, *jobs: str) -> None:
        self.entries.append((at, text, jobs))

    def about(self, jobs: tuple[str, ...], limit: int = 40) -> list[str]:
        """The entries that name one of `jobs` or none (crashes, restarts), the last `limit` of them."""
        wanted = set(jobs)
        picked = [(at, text) for at, text, js in self.entries if not js or not wanted or wanted.intersection(js)]
        return [f"{at:>9} ms  {text}" for at, text in picked[-limit:]]


@dataclass(slots=True, kw_only=True)
class FaultyResult:
    seed: int
    faults: Faults
    end: Millis
    violations: list[Violation]
    churn: int
    churn_by_reason: dict[str, int]
    preemptions: int
    admissions: int
    crashes: int
    api_errors: int
    timeouts: int
    relists: int
    lease_losses: int
    finished: int
    deleted: int
    jobs: int
    events: int
    trail: Trail

    @property
    def ok(self) -> bool:
        return not self.violations


class SimObserver:
    """Job versions into events, by the rules of `daemon.kube.observe.Observer` (which the simulator may not import:
    the worlds do not know each other). A queued job found running unsuspended is suspended at once."""

    def __init__(
        self,
        state: State,
        put: Callable[[Observed], None],
        clock: Any,
        suspend: Callable[[Order], None],
        unsuspending: Callable[[str], bool],
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.state = state
        self.is_leader = is_leader
        self.put = put
        self.clock = clock
        self.suspend = suspend
        # Whether this process sent the job an unsuspension and has not suspended it since (the real actuator's
        # `JobActuator.unsuspending`): the watched version may be older than that patch, so "suspended, no pods"
        # is no evidence of an eviction then. The suspension's answer is observed once it is carried out.
        self.unsuspending = unsuspending
        self._sent: dict[str, tuple[WorkloadRecord | None, list[tuple[object, ...]]]] = {}

    def job(self, v: JobVersion) -> None:
        events = self._job(v)
        if events:
            self.put(Observed(tuple(events)))

    def listed(self, versions: list[JobVersion]) -> None:
        events: list[ev.Event] = []
        seen = set()
        for v in versions:
            seen.add(v.key)
            events.extend(self._job(v))
        now = self.clock.now()
        events.extend(ev.JobDeleted(job=key, at=now) for key in list(self.state.workloads) if key not in seen)
        if events:
            self.put(Observed(tuple(events)))

    def config(self, objects: list[ev.Event]) -> None:
        news = [e for e in objects if self.state.is_news(e)]
        if news:
            self.put(Observed(tuple(news)))

    def _job(self, v: JobVersion) -> list[ev.Event]:
        s = self.state
        key = v.key
        rec = s.workloads.get(key)
        now = self.clock.now()
        if v.deleted or key in s.finished:
            self._sent.pop(key, None)
            return [ev.JobDeleted(job=key, at=now)] if v.deleted and rec is not None else []
        if v.finished:
            if rec is None or not self._first(key, ("finished",)):
                return []
            return [ev.JobFinished(job=key, at=now, succeeded=v.succeeded)]
        out: list[ev.Event] = []
        wl = v.sim.workload
        if rec is None or rec.phase is Phase.PENDING:
            if (rec is None or rec.workload != wl) and self._first(key, ("observed", wl)):
                out.append(ev.JobObserved(workload=wl))
            if not v.suspended:
                adopted = read_admission_note(v.note, wl) if v.note else None
                order = s.outbox.get(key)
                if adopted is not None:
                    if self._first(key, ("adopted", v.note)):
                        out.append(ev.WorkloadAdopted(workload=key, at=now, admission=adopted))
                elif (order is None or order.action is not Action.UNSUSPEND) and self.is_leader():
                    self.suspend(
                        Order(
                            job=key,
                            kind=wl.kind,
                            uid=v.uid,
                            decision=0,
                            action=Action.SUSPEND,
                            cluster_queue="",
                            placements=(),
                        )
                    )
            elif v.active and v.stopping_note and self._first(key, ("stopping", v.stopping_note)):
                # Another replica preempted it and its pods still stop (daemon.kube.observe, `_stopping`).
                at = note_time(v.stopping_note)
                stopping = read_admission_note(v.stopping_note, wl)
                if (
                    stopping is not None
                    and at is not None
                    and (rec is None or rec.evicted_at is None or at > rec.evicted_at)
                ):
                    out.append(ev.WorkloadAdopted(workload=key, at=now, admission=stopping, stopping=True))
        elif v.suspended and v.active == 0:
            if rec.evicting and not self.unsuspending(key):
                if self._first(key, ("evicted",)):
                    out.append(ev.WorkloadEvicted(workload=key, at=now, reason=rec.eviction_reason or "Preempted"))
            elif (
                key not in s.outbox
                and (not self.is_leader() or (not rec.evicting and not self.unsuspending(key)))
                and self._first(key, ("evicted",))
            ):
                # A standby sees the leader stop a job it had adopted; a leader, a job it did not start itself (one
                # it adopted) stopped by the replica that led before it, its suspension landing after the take-over.
                out.append(ev.WorkloadEvicted(workload=key, at=now, reason="SuspendedByAnotherReplica"))
        return out

    def _first(self, key: str, what: tuple[object, ...]) -> bool:
        rec = self.state.workloads.get(key)
        entry = self._sent.get(key)
        if entry is None or entry[0] is not rec:
            entry = (rec, [])
            self._sent[key] = entry
        if what in entry[1]:
            return False
        entry[1].append(what)
        return True


_GOES_ON = {"cycle-fixed-point"}
"""Violations after which the run goes on: the engine's, so that a seed still checks the stages to its end."""

_NO_CHANGE = (ev.JobUnsuspended, ev.JobSuspended, ev.ActuationFailed)
"""Events that settle an order and change nothing a cycle reads (the fold only removes the order from its outbox)."""


class _Stream:
    """One watch stream: deliveries in order, each up to `delay` late; dropped and listed again on a fault."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.generation = 0
        self.broken = False
        self.last_due: Millis = 0


class _HeldStore(EventStore):
    """The log of a simulated daemon: appends are held in memory and written in bulk (`flush`) between world
    instants and before a crash, not one transaction per append (a thread hand-off each: most of a seed's time).

    The daemon acts on a decision only once it is durable, and the simulation crashes only between steps or while
    a patch is in flight, never inside an append; so writing everything held just before the process dies gives
    the log the real daemon would leave. Seqs are known at submission, as for the simulator's own store."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._held: list[tuple[list[tuple[ev.Event, int | None]], int | None]] = []
        self._held_count = 0

    def submit(
        self, items: Sequence[tuple[ev.Event, int | None]], *, recorded_at: int | None = None
    ) -> asyncio.Future[list[int]]:
        first = self.expected_seq
        self._held.append((list(items), recorded_at))
        self._held_count += len(items)
        done: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        done.set_result(list(range(first, first + len(items))))
        return done

    @property
    def expected_seq(self) -> int:
        return super().expected_seq + self._held_count

    @property
    def held(self) -> int:
        return self._held_count

    def drop_held(self) -> None:
        """Forget what is held (appended by a process after the instant it crashed)."""
        self._held, self._held_count = [], 0

    async def flush(self) -> None:
        """Write everything held, in order; raise if the log gives other seqs than were handed out."""
        held, self._held, self._held_count = self._held, [], 0
        first = super().expected_seq
        futures = [super(_HeldStore, self).submit(items, recorded_at=at) for items, at in held]
        written = [seq for seqs in await asyncio.gather(*futures) for seq in seqs]
        if written != list(range(first, first + len(written))):
            raise RuntimeError(f"{self.path}: the log wrote seqs {written[:3]}..., expected {first}..")


_TEMPLATES: dict[int, Path] = {}


async def _new_log(path: Path) -> None:
    """A new, migrated, empty log at `path`: a copy of one made once per process (migrating costs ~30 ms a log)."""
    template = _TEMPLATES.get(os.getpid())
    if template is None or not template.exists():
        template = Path(tempfile.mkdtemp(prefix="admitd-dst-template-")) / "empty.db"
        store = await EventStore.open(template, durable=False)
        await store.close()
        _TEMPLATES[os.getpid()] = template
    shutil.copyfile(template, path)


class _Process:
    """One run of the daemon: its fold, recorder and stages, connected to the world until it crashes."""

    def __init__(
        self, world: FaultyCluster, store: _HeldStore, state: State, incarnation: int, replica: int, leading: bool
    ) -> None:
        self.world = world
        self.store = store
        self.state = state
        self.incarnation = incarnation
        self.replica = replica  # which replica's log this process keeps (0, or 1 for the standby of `lease_loss`)
        self.leading = leading  # the Lease's holder: it decides and acts; a standby only records what it observes
        self.streams = {"jobs": _Stream("jobs"), "config": _Stream("config")}  # its own watches
        self.delivered_running: set[str] = set()  # jobs a watch showed it running (unsuspended)
        clock = world.clock
        # The recorder never snapshots by itself (its store holds appends); the runner does, after a flush.
        self.recorder = Recorder(store, state, clock, wait_durable=False, snapshot_every=2**62)
        self.actuate = Actuate(
            self.recorder, world, clock, parallelism=world.parallelism, seed=world.seed * 1000 + incarnation
        )
        self.admit = Admit(self.recorder, AdmissionEngine(world.config), clock, self.actuate.submit)
        self.admit.gate = self.actuate.gate = self.is_leader
        self.ingest = Ingest(self.recorder, self.admit.notify)
        self.unsuspending: set[str] = set()  # as `JobActuator._unsuspending`: sent an unsuspension, not suspended since
        # as `JobActuator._inherited`: jobs a process that died may have sent an unsuspension -> until when it may land
        self.inherited: dict[str, Millis] = {}
        self.observer = SimObserver(
            state,
            self.ingest.put,
            clock,
            self.actuate.submit,
            unsuspending=self.unsuspending.__contains__,
            is_leader=self.is_leader,
        )
        self.stages = (self.ingest, self.actuate, self.admit)
        self.parked: dict[str, asyncio.Task[None]] = {}

    def is_leader(self) -> bool:
        return self.leading

    def job(self, version: JobVersion) -> None:
        """A watch delivers a version of a job to this process."""
        if not version.suspended and not version.finished and not version.deleted:
            self.delivered_running.add(version.key)
        self.observer.job(version)

    def listed(self, versions: list[JobVersion]) -> None:
        self.delivered_running.update(v.key for v in versions if not v.suspended and not v.finished and not v.deleted)
        self.observer.listed(versions)


class FaultyCluster:
    """The simulated cluster with faults, and the runner that drives a daemon process against it."""

    def __init__(
        self,
        scenario: Scenario,
        faults: Faults,
        seed: int,
        db_path: Path,
        *,
        config: EngineConfig | None = None,
        checker: Checker | None = None,
        parallelism: int = ACTUATION_PARALLELISM,
        expect_all_end: bool = False,
        idle_check: bool = True,
    ) -> None:
        from daemon.sim.run import VirtualClock  # noqa: PLC0415  (run imports nothing of this module; no cycle)

        self.scenario = scenario
        self.parallelism = parallelism
        self.expect_all_end = expect_all_end  # every job can end (the harness's scenarios): one that does not fails
        self.idle_check = idle_check  # `not-reconsidered`: a second engine cycle at every idle moment
        self.faults = faults
        self.seed = seed
        # One stream of draws per job and one for the process (crashes, restarts): a job's faults do not move when
        # another job is left out or a fault is turned off (every draw is made whether or not its fault is on), so
        # that shrinking keeps a failure. str seeds are hashed with SHA-512: the same in every process.
        self._streams: dict[str, random.Random] = {}
        self.rng = self._stream("process")
        self.db_path = db_path
        self.config = config or EngineConfig()
        self.clock = VirtualClock()
        self.checker = checker or Checker()
        self.trail = Trail()
        self.jobs: dict[str, JobTruth] = {j.workload.key: JobTruth(j) for j in scenario.jobs}
        self.cluster_queues: dict[str, ClusterQueue] = {}
        self.cohorts: dict[str, Any] = {}
        self._config_events: list[ev.Event] = list(scenario.config)
        for e in scenario.config:
            if isinstance(e, ev.ClusterQueueObserved):
                self.cluster_queues[e.cluster_queue.name] = e.cluster_queue
            elif isinstance(e, ev.CohortObserved):
                self.cohorts[e.cohort.name] = e.cohort
        self.running: dict[str, Admission] = {}  # jobs with pods on the cluster -> what they run under
        self._timeline: list[tuple[Millis, int, Callable[[], None]]] = []
        self._order = 0
        self.process: _Process | None = None  # the leader (the only process without `lease_loss`), while one is up
        self.standbys: list[_Process] = []  # with `lease_loss`: the replicas up and not leading, longest up first
        # Each replica's log and its writer, opened at its first start, closed at the end.
        self._paths = {0: db_path, 1: db_path.with_name(f"{db_path.stem}.replica-1{db_path.suffix}")}
        self._stores: dict[int, _HeldStore] = {}
        self._incarnations = 0
        self._answered = False  # a reply was given to the process's parked step: it runs on
        self._waiting = 0  # patches of the live process waiting for their reply
        self._inbox: Inbox | None = None
        self._before_crash: dict[int, Any] = {}  # replica -> the state its process held when it stopped
        self.steps = 0
        self.max_steps = MAX_STEPS_PER_JOB * (len(self.jobs) + 10)
        self._restart_due: list[tuple[int, bool]] = []  # (replica, whether it comes back leading)
        self._lease_free = False  # the Lease was free at a take-over with no standby up: the next to start takes it
        self._idle_seq = -1
        # The idle check's own engine, never the daemon's: its caches (the quota tree, the inadmissible memo) see only
        # the idle moments, so a change the daemon's engine or stages missed is still assessed afresh; a new engine
        # at every check costs a quarter of a seed's time, mostly rebuilding the quota tree.
        self._idle_engine = AdmissionEngine(self.config)
        self._leader_replica = 0  # whose fold the idle check's engine has seen
        self._changed_since_cycle = True  # since the admit stage's last step, an event that may change a decision
        self._cycle_seq = 0
        self._snapshot_seq: dict[int, int] = {0: 0, 1: 0}
        self._running_changed = True
        self._checked_seq = -1
        self._limits: QuotaLimits | None = None  # of the quotas now; None after a change
        self.crashes = self.api_errors = self.timeouts = self.relists = self.lease_losses = 0
        self.standby_used = faults.lease_loss > 0  # a second replica runs beside the leader

    def _stream(self, name: str) -> random.Random:
        r = self._streams.get(name)
        if r is None:
            r = self._streams[name] = random.Random(f"{self.seed}/{name}")
        return r

    # --- the Cluster port ----------------------------------------------------------------------------------------

    def connect(self, inbox: Inbox) -> None:
        self._inbox = inbox

    async def carry_out(self, order: Order) -> Outcome:
        """A patch: lands after a latency, unless refused; the reply comes when it lands (or when it times out)."""
        proc = self.process
        assert proc is not None, "a stage of a dead process called the cluster"
        f = self.faults
        now = self.clock.now()
        truth = self.jobs.get(order.job)
        bound = f.unsuspend_latency if order.action is Action.UNSUSPEND else f.suspend_latency
        r = self._stream(order.job)
        latency, roll, pick, coin = _upto(r, bound), r.random(), r.random(), r.random()
        chaos, chaos_stop, chaos_at = r.random(), _upto(r, f.evict_latency), r.random()
        reply_at = now + latency
        outcome: Outcome = Done()
        land = True
        if truth is None or not truth.exists or truth.deleted or (order.uid and order.uid != truth.sim.workload.uid):
            outcome, land = Failed(f"Job {order.job} no longer exists (404)", permanent=True), False
        elif roll < f.api_error:
            code = (409, 429, 500)[int(pick * 3)]
            outcome, land = Failed(f"the API server answered {code}", permanent=False), False
            self.api_errors += 1
        elif roll < f.api_error + f.timeout:
            land = coin < 0.5
            outcome = Failed(f"no reply within {f.call_timeout} ms (timeout)", permanent=False)
            reply_at = now + max(latency, f.call_timeout)
            self.timeouts += 1
        if land:
            self._at(now + latency, lambda: self._land(order, proc.replica))
        if order.action is Action.SUSPEND and order.decision and truth is not None and truth.exists:
            # While it is being preempted (the patch on its way, then its pods stopping), the job may go.
            within = latency + chaos_stop
            if chaos < f.delete:
                self._at(now + int(chaos_at * (within + 1)), lambda: self._delete(order.job))
            elif chaos < f.delete + f.complete:
                self._at(now + int(chaos_at * (within + 1)), lambda: self._complete(order.job))
        reply: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

        def answer() -> None:
            if not reply.done() and self.process is proc:
                reply.set_result(outcome)
                self._answered = True

        self._at(reply_at, answer)
        self.trail.add(now, f"call {order.action.value} {order.job} (decision {order.decision})", order.job)
        if order.action is Action.UNSUSPEND:
            proc.unsuspending.add(order.job)
        self._waiting += 1
        try:
            result = await reply
        finally:
            self._waiting -= 1
        if isinstance(result, Done) and order.action is Action.SUSPEND and order.decision:
            until = proc.inherited.get(order.job, 0)
            if until > self.clock.now():
                result = Failed(
                    f"Job {order.job} suspended, but an unsuspension sent before this process started may still "
                    f"land until {until} ms: suspending it again then",
                    permanent=False,
                    retry_in_ms=until - self.clock.now(),
                )  # not Done: the answer below is not observed, so no eviction is taken from it yet
            else:
                proc.inherited.pop(order.job, None)
                proc.unsuspending.discard(order.job)
        self.trail.add(self.clock.now(), f"reply {order.action.value} {order.job}: {result}", order.job)
        if isinstance(result, Done) and order.action is Action.SUSPEND and truth is not None:
            proc.observer.job(truth.version())  # the patch's answer is observed, as the real actuator does
        return result

    # --- the world -------------------------------------------------------------------------------------------

    def _at(self, at: Millis, action: Callable[[], None]) -> None:
        self._order += 1
        heapq.heappush(self._timeline, (at, self._order, action))

    def _live(self) -> list[_Process]:
        return [self.process, *self.standbys] if self.process is not None else list(self.standbys)

    def _emit(self, truth: JobTruth) -> None:
        """A change of a job: a watch event, delivered to each process that is up (if its stream lives). Replica 0's
        watch draws from the job's own stream, the standby's from one of its own."""
        f = self.faults
        key = truth.sim.workload.key
        for proc in self._live():
            stream = proc.streams["jobs"]
            if stream.broken:
                continue  # the list that ends the outage will show it
            r = self._stream(key if proc.replica == 0 else f"{key}/replica-{proc.replica}")
            drop, relist_in, delay, dup = r.random(), _upto(r, f.watch_delay), _upto(r, f.watch_delay), r.random()
            if drop < f.watch_drop:
                stream.broken = True
                stream.generation += 1
                self.relists += 1
                self.trail.add(self.clock.now(), f"job watch of replica {proc.replica} dropped")
                self._at(self.clock.now() + 1 + relist_in, functools.partial(self._relist, proc))
                continue
            due = max(stream.last_due, self.clock.now() + delay)
            stream.last_due = due
            version, generation = truth.version(), stream.generation
            copies = 2 if dup < f.watch_dup else 1
            for _ in range(copies):
                self._at(due, functools.partial(self._deliver, proc, generation, version))

    def _deliver(self, proc: _Process, generation: int, version: JobVersion) -> None:
        if proc not in self._live() or generation != proc.streams["jobs"].generation:
            return
        proc.job(version)

    def _relist(self, proc: _Process) -> None:
        if proc not in self._live():
            return
        stream = proc.streams["jobs"]
        stream.broken = False
        stream.last_due = self.clock.now()
        self.trail.add(self.clock.now(), f"jobs listed again by replica {proc.replica}")
        proc.listed([t.version() for t in self.jobs.values() if t.exists and not t.deleted])

    def _create(self, key: str) -> None:
        truth = self.jobs[key]
        truth.exists = True
        self.trail.add(self.clock.now(), f"created {key}", key)
        self._emit(truth)
        r = self._stream(key)
        roll, which, delay = r.random(), r.random(), _upto(r, self.faults.watch_delay)
        if self.cluster_queues and roll < self.faults.quota_change:
            self._change_quota(which, delay)

    def _change_quota(self, which: float, delay: Millis) -> None:
        """A ClusterQueue's quota raised, observed through the queue-object watch (its own delays: out of order
        with the jobs' observations)."""
        names = sorted(self.cluster_queues)
        name = names[int(which * len(names))]
        cq = _raised_quota(self.cluster_queues[name])
        self.cluster_queues[name] = cq
        self._limits, self._running_changed = None, True
        event = ev.ClusterQueueObserved(cluster_queue=cq)
        self._config_events = [
            event if isinstance(e, ev.ClusterQueueObserved) and e.cluster_queue.name == name else e
            for e in self._config_events
        ]
        now = self.clock.now()
        self.checker.quota_changed(now)
        self.trail.add(now, f"quota of ClusterQueue {name} raised")
        for proc in self._live():
            stream = proc.streams["config"]
            due = max(stream.last_due, now + delay)
            stream.last_due = due

            def deliver(proc: _Process = proc, generation: int = stream.generation) -> None:
                if proc in self._live() and generation == proc.streams["config"].generation:
                    proc.observer.config([event])

            self._at(due, deliver)

    def _land(self, order: Order, replica: int) -> None:
        truth = self.jobs[order.job]
        now = self.clock.now()
        if not truth.exists or truth.deleted or truth.finished:
            return
        self.trail.add(now, f"landed {order.action.value} {order.job} (decision {order.decision})", order.job)
        if order.action is Action.UNSUSPEND:
            if not truth.suspended:
                if (truth.by, truth.decision) != (replica, order.decision):
                    self.checker.fail(
                        "unsuspended-twice",
                        now,
                        f"{order.job}: an unsuspension for decision {order.decision} of replica {replica} landed "
                        f"while it ran unsuspended for decision {truth.decision} of replica {truth.by}",
                        [order.job],
                    )
                return
            truth.suspended, truth.note, truth.decision, truth.by = False, order.note, order.decision, replica
            admission = read_admission_note(order.note, truth.sim.workload)
            truth.admission = admission
            truth.epoch += 1
            truth.stopping = False
            truth.active = sum(ps.count for ps in admission.pod_sets) if admission else 1
            if admission is not None:
                self.running[order.job] = admission
                self._running_changed = True
            runtime, epoch = truth.sim.runtime, truth.epoch
            if runtime is not None:
                self._at(now + runtime, lambda: self._finish(order.job, epoch))
        else:
            if order.decision:
                truth.note, truth.stopping_note = "", order.note
            if truth.suspended:
                return  # nothing changes, so no watch event: the patch's answer shows it (carry_out)
            truth.suspended, truth.decision = True, 0
            truth.epoch += 1
            if truth.active:
                truth.stopping = True
                f, epoch, key = self.faults, truth.epoch, order.job
                stop = _upto(self._stream(key), f.evict_latency)
                self._at(now + stop, lambda: self._gone(key, epoch))
        self._emit(truth)

    def _stop_pods(self, truth: JobTruth) -> None:
        truth.active, truth.stopping, truth.admission = 0, False, None
        if self.running.pop(truth.sim.workload.key, None) is not None:
            self._running_changed = True

    def _gone(self, key: str, epoch: int) -> None:
        truth = self.jobs[key]
        if truth.epoch != epoch or not truth.stopping:
            return
        self._stop_pods(truth)
        self.trail.add(self.clock.now(), f"pods of {key} gone", key)
        self._emit(truth)

    def _finish(self, key: str, epoch: int) -> None:
        truth = self.jobs[key]
        if truth.epoch != epoch or truth.suspended or truth.deleted or truth.finished:
            return
        self._stop_pods(truth)
        truth.finished = True
        self.trail.add(self.clock.now(), f"{key} completed", key)
        self._emit(truth)

    def _delete(self, key: str) -> None:
        truth = self.jobs[key]
        if truth.deleted:
            return
        self._stop_pods(truth)
        truth.deleted = True
        self.trail.add(self.clock.now(), f"{key} deleted while being preempted", key)
        self._emit(truth)

    def _complete(self, key: str) -> None:
        truth = self.jobs[key]
        if truth.deleted or truth.finished or not truth.active:
            return  # only pods that run can complete
        self._stop_pods(truth)
        truth.finished = True
        self.trail.add(self.clock.now(), f"{key} completed while being preempted", key)
        self._emit(truth)

    # --- the daemon process ------------------------------------------------------------------------------------

    async def _start(self, state: State, replica: int = 0, *, leading: bool = True) -> None:
        self._incarnations += 1
        store = self._stores.get(replica)
        if store is None:
            path = self._paths[replica]
            await _new_log(path)
            opened = await _HeldStore.open(path, clock=self.clock.now, max_batch=5000, durable=False)
            assert isinstance(opened, _HeldStore)  # EventStore.open builds the class it is called on
            store = self._stores[replica] = opened
        if not leading and self._lease_free:
            leading, self._lease_free = True, False  # nobody holds the Lease: the first replica up takes it
        proc = _Process(self, store, state, self._incarnations, replica, leading)
        if self.standby_used:
            # With leader election every process starts as a standby (`admitd run --leader-elect`), even one that
            # takes a free Lease at once: what its log left undone is given up (`renounce`).
            await proc.recorder.append(renounce(state.outbox, self.clock.now()))
        # An admission whose unsuspension has no result in the log may have been sent by the process that died,
        # and may land yet: until it is suspended, such a job counts as one with an unsuspension on its way.
        # Its patch lands at most `unsuspend_latency` after it was sent, before the crash: a suspension made before
        # then is made again then (`JobActuator.assume_unsuspending`).
        inherited = inherited_unsuspensions(state.outbox)
        proc.unsuspending.update(inherited)
        proc.inherited = dict.fromkeys(inherited, self.clock.now() + self.faults.unsuspend_latency + 1)
        # The invariants follow every replica's log (a standby's holds only what it observed: a suspension by the
        # leader it saw is one); the trail and the idle check follow the leader's.
        proc.recorder.listeners.append(functools.partial(self.checker.listen, replica))
        proc.recorder.listeners.append(lambda e, seq: self._logged(e, seq) if proc.leading else None)
        if leading:
            self._lead(proc)
        else:
            self.standbys.append(proc)
            self.trail.add(self.clock.now(), f"replica {replica} up as the standby")
        # As the daemon starts: queue objects listed, then jobs, then (if it leads) a cycle, and the outbox resumed.
        proc.observer.config(self._config_events)
        proc.listed([t.version() for t in self.jobs.values() if t.exists and not t.deleted])
        if leading:
            proc.admit.notify(None)
            proc.actuate.resume()

    def _lead(self, proc: _Process) -> None:
        proc.leading = True
        if self.process is not proc and self._leader_replica != proc.replica:
            # Another replica's fold: the idle check's engine keeps caches of the fold it saw (quota trees, memos
            # keyed by that fold's own counters), which say nothing of this one.
            self._idle_engine = AdmissionEngine(self.config)
            self._idle_seq = -1
        self._leader_replica = proc.replica
        self.process = proc
        self.checker.state = proc.state
        self.connect(proc.ingest)

    def _take_over(self) -> None:
        """The Lease the leader could not renew expires: the standby, if one is up, takes it; else the next replica
        to start does."""
        if not self.standbys:
            self._lease_free = True
            self.trail.add(self.clock.now(), "the Lease expired with no standby up")
            return
        proc = self.standbys.pop(0)
        self._lead(proc)
        self.trail.add(self.clock.now(), f"replica {proc.replica} took the Lease over (log seq {proc.state.seq})")
        # Its watches may lag or be down: it lists the jobs again before it decides (`Daemon._lead`), so that a job
        # the old leader started before the take-over is adopted, not admitted a second time.
        proc.streams["jobs"].generation += 1  # what the list shows supersedes what the watch still carries
        self._relist(proc)
        self._changed_since_cycle = True
        proc.admit.notify(None)
        proc.actuate.resume()

    def _logged(self, event: ev.Event, seq: int) -> None:
        if not isinstance(event, _NO_CHANGE):
            self._changed_since_cycle = True
        if isinstance(event, ev.JobObserved):
            subject: object = event.workload.key
        else:
            subject = getattr(event, "workload", None) or getattr(event, "job", None)
        if isinstance(subject, str):
            self.trail.add(self.clock.now(), f"log {seq} {event.TYPE}", subject)

    async def _crash(self, where: str) -> None:
        self.crashes += 1
        self.trail.add(self.clock.now(), f"daemon crashed ({where})")
        if self.standby_used:
            # With leader election a restarted process is a new holder: the standby takes the Lease once it can,
            # and the crashed replica comes back as a standby.
            await self._hand_over(self.rng)
            return
        replica = await self._stop_leader()
        self._at(self._back_at(self.rng), lambda: self._want_restart(replica, leading=True))

    async def _lose_lease(self) -> None:
        """The leader cannot renew its Lease: it stops acting and exits (`LeadershipLost`), to come back as a
        standby from its own log; the standby takes over once the Lease can be taken. Patches in flight go on."""
        self.lease_losses += 1
        self.trail.add(self.clock.now(), "the leader lost its Lease")
        await self._hand_over(self._stream("lease"))

    async def _hand_over(self, r: random.Random) -> None:
        """The leader's process ends; the standby takes the Lease over after `takeover_delay`, and the replica
        comes back as a standby after a restart delay drawn from `r`."""
        replica = await self._stop_leader()
        self._at(self.clock.now() + self.faults.takeover_delay, self._take_over)
        self._at(self._back_at(r), lambda: self._want_restart(replica, leading=False))

    def _back_at(self, r: random.Random) -> Millis:
        """When a stopped process is up again: after half of `restart_delay` to all of it, drawn from `r`."""
        lo = self.faults.restart_delay // 2
        return self.clock.now() + lo + _upto(r, max(0, self.faults.restart_delay - lo))

    async def _stop_leader(self) -> int:
        """The leader's process ends at this instant; returns its replica."""
        proc = self.process
        assert proc is not None
        # Everything appended before this instant is durable: the daemon acts only on durable decisions, and the
        # simulation crashes only between steps or while a patch is in flight, never inside an append.
        # Writing yields to the event loop, and a stage step whose reply had arrived may run meanwhile and append
        # (an actuation lane recording its result): that append is before the crash too, so write until nothing
        # is held, and take the state the process dies with at that same instant.
        await self._flush(proc)
        while proc.store.held:
            await self._flush(proc)
        self._before_crash[proc.replica] = proc.state.to_snapshot()
        lanes = proc.actuate.abandon()  # lanes whose step has ended: no step awaits them, so cancel them here
        for task in proc.parked.values():
            task.cancel()
        for waited in [*proc.parked.values(), *lanes]:
            with contextlib.suppress(asyncio.CancelledError):
                await waited
        proc.parked.clear()
        # What the cancelled steps appended while unwinding was never written by a process that is gone.
        proc.store.drop_held()
        # The log's writer connection outlives the process: opening one is a dozen hand-offs to SQLite's thread,
        # which on a loaded machine were most of a seed's wall time. Nothing is held (all was written above), so a
        # new process appends to the same chain through it exactly as through a new connection; what it starts
        # from is only what `_restart` reads back from the file.
        proc.leading = False
        self.process = None
        self.checker.state = None
        return proc.replica

    def _want_restart(self, replica: int, *, leading: bool) -> None:
        self._restart_due.append((replica, leading))

    async def _restart(self, replica: int, *, leading: bool) -> None:
        now = self.clock.now()
        try:
            with LogReader(self._paths[replica]) as reader:
                reader.check()
                state = replay(reader)
        except EventLogError as e:
            self.checker.fail("log-verify", now, f"the log of replica {replica} does not verify after a restart: {e}")
            raise _Stop from e
        before = self._before_crash.get(replica)
        if state.to_snapshot() != before:
            lost = sorted(set(before.outbox) - set(state.to_snapshot().outbox)) if before is not None else []
            self.checker.fail(
                "decision-lost",
                now,
                f"the state replica {replica} replayed after it stopped differs from the one its process held"
                + (f"; outbox orders lost: {lost}" if lost else ""),
            )
        self.trail.add(now, f"replica {replica} restarted from its log (seq {state.seq})")
        await self._start(state, replica, leading=leading)

    # --- the runner -------------------------------------------------------------------------------------------

    async def _flush(self, proc: _Process) -> None:
        """Write what the process holds; a snapshot when SNAPSHOT_EVERY events were written since the last one."""
        await proc.recorder.catch_up()
        if not proc.store.held:
            return
        await proc.store.flush()
        if proc.store.held:
            # Appended while the flush was being written (a patch's reply, recorded by its lane): the fold is ahead
            # of the log, and a snapshot must name a written event. The next flush takes it.
            return
        if proc.state.seq - self._snapshot_seq[proc.replica] >= SNAPSHOT_EVERY:
            await save_snapshot(proc.store, proc.state)
            self._snapshot_seq[proc.replica] = proc.state.seq

    async def _run_until_parked(self, proc: _Process, name: str, task: asyncio.Task[None]) -> None:
        """Let `task` (a stage's step of `proc`) run until it ends or parks: waits for patch replies and nothing else
        can run. The stages' steps wait for nothing but replies (the held store answers appends at once), so once
        the event loop has nothing ready while a reply is awaited, only the world can move the step on."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(0)
            if task.done():
                proc.parked.pop(name, None)
                task.result()  # a stage's exception ends the run (`stage-raised` names it)
                return
            if _nothing_ready(loop):
                if self._waiting and proc is self.process:
                    break
                await asyncio.sleep(0.001)  # waiting for a thread (the log's writer): not the simulation's business
        proc.parked[name] = task
        if self.rng.random() < self.faults.crash:
            await self._crash("mid-batch, patches in flight")

    async def _drain(self) -> None:
        """Stage steps until no stage of a process that is up and not parked has work (or the leader stopped).
        The leader's steps come first; only they draw crashes and lost leases."""
        while live := self._live():
            self.steps += 1
            if self.steps > self.max_steps:
                return
            picked = next(
                (
                    (proc, stage)
                    for proc in live
                    for stage in proc.stages
                    if stage.name not in proc.parked and stage.has_work()
                ),
                None,
            )
            if picked is None:
                return
            proc, stage = picked
            if proc.leading:
                if self.rng.random() < self.faults.crash:
                    await self._crash(f"before a step of {stage.name}")
                    continue
                if self.standby_used and self._stream("lease").random() < self.faults.lease_loss:
                    await self._lose_lease()
                    continue
            task = asyncio.ensure_future(stage.step())
            await self._run_until_parked(proc, stage.name, task)
            if proc.leading and stage.name == "admit":
                self._changed_since_cycle, self._cycle_seq = False, proc.state.seq
            self._check_cluster()

    def _check_cluster(self) -> None:
        changed = self._running_changed
        seq = self.process.state.seq if self.process is not None else -1
        if not changed and seq == self._checked_seq:
            return
        self._checked_seq = seq
        self._running_changed = False
        if changed and self._limits is None:
            self._limits = QuotaLimits.of(self.cluster_queues, self.cohorts)
        leader = self.process
        # A job started by another replica's decision is the leader's to adopt once a watch shows it running.
        unseen = (
            {
                k
                for k in self.running
                if self.jobs[k].by != leader.replica and (k not in leader.delivered_running or leader.ingest.has_work())
            }
            if leader is not None and self.standby_used
            else set()
        )
        self.checker.cluster(self.clock.now(), self.running, self._limits if changed else None, unseen=unseen)

    def _idle_check(self) -> None:
        """Nothing has work and nothing is in flight: a fresh cycle must find nothing to admit or preempt."""
        proc = self.process
        if not self.idle_check or proc is None or proc.parked or proc.actuate.ready:
            return
        due = proc.admit.next_due()
        if due is not None:
            return
        if proc.state.seq == self._idle_seq:
            return  # checked at this fold already
        self._idle_seq = proc.state.seq
        now = self.clock.now()
        decisions = self._idle_engine.decide(proc.state.view(), now)
        missed = [d for d in decisions if isinstance(d, ev.WorkloadAdmitted | ev.WorkloadPreempted)]
        if missed:
            jobs = [d.workload for d in missed]
            what = f"{type(missed[0]).__name__} {jobs[0]}" + (f" and {len(jobs) - 1} more" if len(jobs) > 1 else "")
            if self._changed_since_cycle:
                self.checker.fail(
                    "not-reconsidered",
                    now,
                    f"the fold changed since the last cycle and no cycle followed; a cycle now would {what}",
                    jobs[:5],
                )
            elif not any(v.invariant == "cycle-fixed-point" for v in self.checker.violations):
                # Nothing that could change a decision happened since the last cycle: the engine's own output is
                # not a fixed point (a cycle applied to its output must decide nothing new). Recorded once; the
                # run goes on, so that the stages are still checked to the end.
                self.checker.fail(
                    "cycle-fixed-point",
                    now,
                    f"nothing changed since the last cycle (seq {self._cycle_seq}), yet a cycle now would {what}",
                    jobs[:5],
                )

    async def run(self) -> None:
        for job in self.scenario.jobs:
            key = job.workload.key
            self._at(job.submit_at, lambda key=key: self._create(key))  # type: ignore[misc]
        await self._start(State())
        if self.standby_used:
            await self._start(State(), 1, leading=False)
        try:
            while True:
                await self._drain()
                if self.steps > self.max_steps:
                    self.checker.fail("run-ends", self.clock.now(), f"no end after {self.steps} steps")
                    return
                if self._restart_due:
                    replica, leading = self._restart_due.pop(0)
                    await self._restart(replica, leading=leading)
                    continue
                if any(v.invariant not in _GOES_ON for v in self.checker.violations):
                    return
                self._idle_check()
                for up in self._live():
                    if up.store.held >= FLUSH_EVERY and not up.parked:
                        await self._flush(up)
                proc = self.process
                candidates = [self._timeline[0][0]] if self._timeline else []
                if proc is not None:
                    for stage, due in (("actuate", proc.actuate.next_due()), ("admit", proc.admit.next_due())):
                        if due is not None and stage not in proc.parked:  # a parked step takes its retries on return
                            candidates.append(due)
                if not candidates:
                    break
                self.clock.at = max(self.clock.at, min(candidates))
                now = self.clock.at
                while self._timeline and self._timeline[0][0] <= now:
                    _, _, action = heapq.heappop(self._timeline)
                    action()
                    self.steps += 1
                    self._check_cluster()
                    if self._answered and self.process is not None and "actuate" in self.process.parked:
                        self._answered = False
                        await self._run_until_parked(self.process, "actuate", self.process.parked["actuate"])
                        self._check_cluster()
                    self._answered = False
                    if self._restart_due:
                        break
        except _Stop:
            return
        except PreemptionLoop as e:
            self.checker.fail("preemption-loop", self.clock.now(), str(e), e.jobs)
            return
        self._end()

    def _end(self) -> None:
        now = self.clock.now()
        proc = self.process
        if proc is not None and proc.state.outbox:
            keys = sorted(proc.state.outbox)
            self.checker.fail(
                "not-carried-out",
                now,
                f"{len(keys)} decisions were never carried out nor recorded as failed, e.g. {keys[0]}",
                keys[:5],
            )
        stuck = sorted(k for k, rec in proc.state.workloads.items() if rec.evicting) if proc is not None else []
        if stuck:
            self.checker.fail(
                "run-ends",
                now,
                f"nothing is left to happen but {len(stuck)} workloads are still being evicted, e.g. {stuck[0]}",
                stuck[:5],
            )
        left = [k for k, t in self.jobs.items() if not (t.finished or t.deleted)]
        if left and self.expect_all_end:
            self.checker.fail(
                "run-ends",
                now,
                f"nothing is left to happen but {len(left)} jobs never ended, e.g. {left[0]}",
                left[:5],
            )

    async def close(self) -> None:
        for proc in self._live():
            for task in proc.parked.values():
                task.cancel()
            for task in proc.parked.values():
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._flush(proc)
        self.process, self.standbys = None, []
        for store in self._stores.values():
            await store.close()
        self._stores.clear()


def _upto(r: random.Random, bound: Millis) -> Millis:
    """A whole number drawn uniformly from [0, bound], one draw whatever the bound (0 included)."""
    return int(r.random() * (bound + 1))


def _nothing_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether no callback is ready to run on `loop` (CPython's event loops keep them in `_ready`)."""
    ready = getattr(loop, "_ready", None)
    if ready is None:
        raise RuntimeError("the simulation needs CPython's asyncio event loop (it looks at its ready queue)")
    return not ready


class _Stop(Exception):
    pass


def _raised_quota(cq: ClusterQueue) -> ClusterQueue:
    """`cq` with every nominal quota half as large again (a quota change: only ever up, so that no admission
    already made stops fitting)."""
    groups = tuple(
        ResourceGroup(
            covered_resources=g.covered_resources,
            flavors=tuple(
                replace(fq, resources=tuple(replace(rq, nominal=rq.nominal * 3 // 2) for rq in fq.resources))
                for fq in g.flavors
            ),
        )
        for g in cq.resource_groups
    )
    return replace(cq, resource_groups=groups)


async def run_faulty(
    scenario: Scenario,
    faults: Faults,
    seed: int,
    *,
    config: EngineConfig | None = None,
    churn_window: Millis = 10_000,
    db_path: Path | None = None,
    expect_all_end: bool = False,
    idle_check: bool = True,
) -> FaultyResult:
    """Run `scenario` against the faulty cluster from `seed`; the log is kept at `db_path` if given (new file).
    `expect_all_end`: every job of the scenario can end, so one that has not when nothing is left to happen fails
    `run-ends` (without it, only a workload left being evicted does: a job that never fits is no fault).
    `idle_check=False` leaves out `not-reconsidered` (a second engine cycle at every idle moment: for large runs)."""
    checker = Checker(churn_window=churn_window)
    with contextlib.ExitStack() as stack:
        if db_path is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="admitd-dst-"))
            db_path = Path(tmp) / "dst.db"
        world = FaultyCluster(
            scenario,
            faults,
            seed,
            db_path,
            config=config,
            checker=checker,
            expect_all_end=expect_all_end,
            idle_check=idle_check,
        )
        try:
            await world.run()
        except Exception as e:  # a stage raised: the daemon would crash on it; name it as the run's failure
            checker.fail("stage-raised", world.clock.now(), f"{type(e).__name__}: {e}")
        finally:
            await world.close()
        events = 0
        with contextlib.suppress(EventLogError), LogReader(db_path) as reader:
            events = reader.last_seq()
    by_reason = dict(checker.churn.by_reason)
    return FaultyResult(
        seed=seed,
        faults=faults,
        end=world.clock.now(),
        violations=checker.violations,
        churn=checker.churn.count,
        churn_by_reason=by_reason,
        preemptions=checker.churn.preemptions,
        admissions=checker.admissions,
        crashes=world.crashes,
        api_errors=world.api_errors,
        timeouts=world.timeouts,
        relists=world.relists,
        lease_losses=world.lease_losses,
        finished=sum(1 for t in world.jobs.values() if t.finished),
        deleted=sum(1 for t in world.jobs.values() if t.deleted),
        jobs=len(world.jobs),
        events=events,
        trail=world.trail,
    )


def report_text(result: FaultyResult) -> str:
    """The run for people: what happened, the faults injected, the churn, and the invariants (with the trail of
    the first one that failed)."""
    from daemon.domain.durations import format_seconds  # noqa: PLC0415  (only the report needs it)

    r = result
    churn = ", ".join(f"{reason} {n}" for reason, n in sorted(r.churn_by_reason.items()))
    lines = [
        f"faulty simulation: seed {r.seed}, faults {r.faults.describe() or 'none'}",
        f"  {r.jobs} jobs: {r.finished} finished, {r.deleted} deleted; ended at {format_seconds(r.end)} virtual; "
        f"{r.events} events in the log",
        f"  {r.admissions} admissions, {r.preemptions} preemptions; churn {r.churn}" + (f" ({churn})" if churn else ""),
        f"  faults injected: {r.crashes} crashes (each restarted from the log), {r.api_errors} API errors, "
        f"{r.timeouts} timeouts, {r.relists} watch drops (listed again), {r.lease_losses} leases lost (the standby "
        "took over)",
    ]
    if r.ok:
        lines.append("  invariants: all held")
    else:
        for v in r.violations:
            lines.append(f"  VIOLATED {v}")
        lines.append("  trail (the jobs it names, crashes and restarts):")
        lines += [f"    {line}" for line in r.trail.about(r.violations[0].jobs)]
    return "\n".join(lines)


def report_json(result: FaultyResult) -> dict[str, object]:
    r = result
    return {
        "seed": r.seed,
        "faults": r.faults.describe(),
        "ok": r.ok,
        "violations": [
            {"invariant": v.invariant, "at_ms": v.at, "message": v.message, "jobs": list(v.jobs)} for v in r.violations
        ],
        "end_ms": r.end,
        "jobs": r.jobs,
        "finished": r.finished,
        "deleted": r.deleted,
        "events": r.events,
        "admissions": r.admissions,
        "preemptions": r.preemptions,
        "churn": r.churn,
        "churn_by_reason": r.churn_by_reason,
        "crashes": r.crashes,
        "api_errors": r.api_errors,
        "timeouts": r.timeouts,
        "watch_drops": r.relists,
        "lease_losses": r.lease_losses,
    }
