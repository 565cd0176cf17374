"""The actuate stage's lanes: one job the API server keeps refusing never delays another job's patch.

Real: the SQLite log, the fold, the engine, the admit and actuate stages. Faked: the Cluster (a script that refuses
or holds one job's patch) and, where the test says so, the clock (virtual milliseconds, moved by the test), so that
30 seconds of refusals take no real time. Also: the outbox is carried out once at start-up, however often it is
handed to the stage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.actuation import Order
from daemon.domain.admission import AdmissionEngine
from daemon.domain.model import (
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    Namespace,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)
from daemon.domain.state import State
from daemon.eventlog import EventStore, LogReader, replay
from daemon.eventlog.codec import decode
from daemon.stages.actuate import Actuate
from daemon.stages.admit import Admit
from daemon.stages.ports import Done, Failed, Inbox, Outcome, WallClock
from daemon.stages.recorder import Recorder
from daemon.stages.runner import run_concurrently
from tests.samples import workload

SLOW = "research/slow"
REFUSAL = "PATCH /apis/batch/v1/namespaces/research/jobs/slow: 422 spec.template: field is immutable"

BIG = ResourceGroup(
    covered_resources=("nvidia.com/gpu", "cpu"),
    flavors=(
        FlavorQuotas(
            name="plain",
            resources=(
                ResourceQuota(name="nvidia.com/gpu", nominal=10_000_000),
                ResourceQuota(name="cpu", nominal=10_000_000),
            ),
        ),
    ),
)
CONFIG: list[ev.Event] = [
    ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="plain")),
    ev.ClusterQueueObserved(
        cluster_queue=ClusterQueue(name="team-research", namespace_selector=LabelSelector(), resource_groups=(BIG,))
    ),
    ev.LocalQueueObserved(
        local_queue=LocalQueue(namespace="research", name="research-queue", cluster_queue="team-research")
    ),
    ev.NamespaceObserved(namespace=Namespace(name="research", labels={})),
]


class VirtualClock:
    """Virtual milliseconds, moved only by the test; a call may wait for a virtual instant (`until`)."""

    def __init__(self) -> None:
        self.t = 1_000_000
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []

    def now(self) -> int:
        return self.t

    async def until(self, t: int) -> None:
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((t, future))
        await future

    def advance(self, ms: int) -> None:
        self.t += ms
        for t, future in self._waiting:
            if t <= self.t and not future.done():
                future.set_result(None)
        self._waiting = [(t, f) for t, f in self._waiting if not f.done()]


class RefusingCluster:
    """Refuses the slow job's patch until `refuse_until` (virtual ms), each refusal after 5 s of retries inside the
    call (as the Job actuator retries a template change the Job controller does not yet allow); every other patch
    is carried out at once. Records when (virtual ms) each job's patch went through."""

    def __init__(self, clock: VirtualClock, refuse_until: int) -> None:
        self.clock = clock
        self.refuse_until = refuse_until
        self.done_at: dict[str, int] = {}
        self.refusals = 0

    def connect(self, inbox: Inbox) -> None:
        pass

    async def carry_out(self, order: Order) -> Outcome:
        if order.job == SLOW and self.clock.now() < self.refuse_until:
            await self.clock.until(self.clock.now() + 5_000)
            self.refusals += 1
            return Failed(REFUSAL, permanent=False)
        await asyncio.sleep(0)  # an API call: other lanes run meanwhile
        self.done_at.setdefault(order.job, self.clock.now())
        return Done()


class HoldingCluster:
    """The slow job's call does not return until the test releases it (a patch retried inside the call, as the
    Job actuator retries a template change); every other call returns at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.done: list[str] = []
        self.calls: list[str] = []

    def connect(self, inbox: Inbox) -> None:
        pass

    async def carry_out(self, order: Order) -> Outcome:
        self.calls.append(order.job)
        if order.job == SLOW:
            await self.release.wait()
        else:
            await asyncio.sleep(0)
        self.done.append(order.job)
        return Done()


async def _until(done: Callable[[], bool], within_s: float) -> None:
    """Poll `done` (real time) until it holds; TimeoutError after `within_s`."""
    async with asyncio.timeout(within_s):
        while not done():  # noqa: ASYNC110 (what is awaited is a plain condition, not an event)
            await asyncio.sleep(0.001)


async def _decide(recorder: Recorder, admit: Admit, names: list[str]) -> None:
    """The jobs observed and one admission cycle run: one decision per job, handed to the actuate stage."""
    await recorder.append([(e, None) for e in (*CONFIG, *(ev.JobObserved(workload=workload(n)) for n in names))])
    admit.notify(None)
    await admit.step()


async def test_a_job_refused_for_30_seconds_delays_none_of_the_100_others(tmp_path: Path) -> None:
    """Concurrently as in the daemon, on virtual time: the slow job's retries span 30 s while one other job is
    admitted every 300 ms; each other job's patch goes through at the instant it was decided."""
    clock = VirtualClock()
    cluster = RefusingCluster(clock, refuse_until=clock.t + 30_000)
    async with await EventStore.open(tmp_path / "log.db") as store:
        recorder = Recorder(store, State(), clock, wait_durable=True)
        actuate = Actuate(recorder, cluster, clock, parallelism=8, seed=1)
        admit = Admit(recorder, AdmissionEngine(), clock, actuate.submit)
        task = asyncio.create_task(run_concurrently([actuate], clock, due={"actuate": actuate.next_due}))
        try:
            await _decide(recorder, admit, ["slow"])  # first: its refusals start before anyone else's patch
            admitted_at: dict[str, int] = {SLOW: clock.t}
            for i in range(100):
                clock.advance(300)
                actuate.wake.set()  # the stage sees the new time (a retry may be due)
                job = f"research/other-{i:03}"
                await _decide(recorder, admit, [job.partition("/")[2]])
                admitted_at[job] = clock.t
                try:  # real seconds; virtual time stands still meanwhile
                    await _until(lambda job=job: job in cluster.done_at, 5)  # type: ignore[misc]
                except TimeoutError:
                    raise AssertionError(f"{job}'s patch waits behind the refused job's") from None
            while SLOW not in cluster.done_at and clock.t < admitted_at[SLOW] + 90_000:
                clock.advance(250)
                actuate.wake.set()
                await asyncio.sleep(0.001)
            await _until(lambda: not recorder.state.outbox, 5)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await recorder.catch_up()
    late = {job: cluster.done_at[job] - admitted_at[job] for job in admitted_at if job != SLOW}
    assert set(late.values()) == {0}, f"patches delayed behind the refused job: {late}"
    assert cluster.refusals >= 5, "the slow job was refused again and again while the others went through"
    assert cluster.done_at[SLOW] >= admitted_at[SLOW] + 30_000
    with LogReader(tmp_path / "log.db") as reader:
        events = [decode(e.type, e.version, e.payload, seq=e.seq) for e in reader.iter_events()]
    refused = [e for e in events if isinstance(e, ev.ActuationFailed)]
    assert {e.job for e in refused} == {SLOW} and len(refused) == cluster.refusals
    assert all(not e.permanent and e.error == REFUSAL for e in refused)
    assert len([e for e in events if isinstance(e, ev.JobUnsuspended)]) == 101


async def test_a_call_that_hangs_holds_back_no_other_job(tmp_path: Path) -> None:
    """Real time, concurrently as in the daemon: a call that has not returned after the others are all done."""

    cluster = HoldingCluster()
    clock = WallClock()
    async with await EventStore.open(tmp_path / "log.db") as store:
        recorder = Recorder(store, State(), clock, wait_durable=True)
        actuate = Actuate(recorder, cluster, clock, parallelism=4, seed=1)
        admit = Admit(recorder, AdmissionEngine(), clock, actuate.submit)
        await _decide(recorder, admit, ["slow"])
        task = asyncio.create_task(run_concurrently([actuate], clock, due={"actuate": actuate.next_due}))
        await asyncio.sleep(0.05)
        assert cluster.calls == [SLOW]
        await _decide(recorder, admit, [f"other-{i:03}" for i in range(100)])
        try:
            await _until(lambda: len(cluster.done) == 100, 10)
            assert SLOW not in cluster.done, "the slow call is still held"
            assert sorted(cluster.done) == [f"research/other-{i:03}" for i in range(100)]
            await _until(lambda: len(recorder.state.outbox) == 1, 10)
            assert list(recorder.state.outbox) == [SLOW], "the others' results are recorded, the slow one's not yet"
            cluster.release.set()
            await _until(lambda: not recorder.state.outbox, 10)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await recorder.catch_up()
    assert cluster.done[-1] == SLOW


async def test_the_outbox_is_carried_out_once_at_start_up(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    clock = VirtualClock()
    async with await EventStore.open(db) as store:  # a first run decides, then dies before carrying anything out
        recorder = Recorder(store, State(), clock, wait_durable=True)
        admit = Admit(recorder, AdmissionEngine(), clock, lambda order: None)
        await _decide(recorder, admit, ["a", "b", "c"])
    with LogReader(db) as reader:
        state = replay(reader)
    assert sorted(state.outbox) == ["research/a", "research/b", "research/c"]
    cluster = HoldingCluster()
    cluster.release.set()
    async with await EventStore.open(db) as store:
        recorder = Recorder(store, state, clock, wait_durable=True)
        actuate = Actuate(recorder, cluster, clock, parallelism=2, seed=1)
        admit = Admit(recorder, AdmissionEngine(), clock, actuate.submit)
        # Start-up hands the outbox over; a second hand-over (another start-up path, a new leadership) and the
        # first cycle, which decides nothing new, must not queue any order again.
        assert actuate.resume() == 3
        assert actuate.resume() == 0
        admit.notify(None)
        await admit.step()
        while actuate.has_work():
            await actuate.step()
        await recorder.catch_up()
    assert sorted(cluster.calls) == ["research/a", "research/b", "research/c"]
    assert recorder.state.outbox == {}
