"""The stages (daemon/stages) run concurrently as in the daemon, on a real SQLite log and the real fold and engine.

Faked: the Cluster, a scripted one that records what it was asked to do and answers as each test says. Checked:
decisions are carried out only once durable, each result points at its decision, temporary failures are retried
with backoff, permanent ones are recorded once, an unexpected crash ends the run loudly, and a restart carries out
exactly the decisions that had no actuation.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon.domain import events as ev
from daemon.domain.actuation import Action, Order
from daemon.domain.admission import AdmissionEngine
from daemon.domain.model import PriorityClass
from daemon.domain.state import State
from daemon.eventlog import EventStore, LogReader, replay
from daemon.eventlog.codec import decode
from daemon.stages.actuate import Actuate
from daemon.stages.admit import Admit
from daemon.stages.ingest import Ingest
from daemon.stages.ports import Done, Failed, Inbox, Observed, Outcome, WallClock
from daemon.stages.recorder import Recorder
from daemon.stages.runner import StageCrashed, run_concurrently
from tests.samples import one_of_each, workload

CONFIG = [
    e
    for e in one_of_each()
    if isinstance(
        e,
        ev.ResourceFlavorObserved
        | ev.CohortObserved
        | ev.ClusterQueueObserved
        | ev.LocalQueueObserved
        | ev.NamespaceObserved,
    )
]


class ScriptedCluster:
    """Answers each order with the next scripted outcome (Done when the script is empty)."""

    def __init__(self, db: Path, script: list[Outcome | Exception] | None = None) -> None:
        self.db = db
        self.script = list(script or [])
        self.calls: list[Order] = []
        self.durable_when_called: list[bool] = []
        self.done = asyncio.Event()
        self.inbox: Inbox | None = None

    def connect(self, inbox: Inbox) -> None:
        self.inbox = inbox

    async def carry_out(self, order: Order) -> Outcome:
        self.calls.append(order)
        with LogReader(self.db) as reader:  # is the decision already committed when we are asked to act on it?
            self.durable_when_called.append(reader.last_seq() >= order.decision)
        outcome = self.script.pop(0) if self.script else Done()
        if isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, Done):
            self.done.set()
        return outcome


async def _run(db: Path, cluster: ScriptedCluster, until: Callable[[State], bool], *observed: Observed) -> State:
    clock = WallClock()
    store = await EventStore.open(db)
    try:
        state = replay(LogReader(db)) if db.stat().st_size and LogReader(db).last_seq() else State()
        recorder = Recorder(store, state, clock, wait_durable=True)
        actuate = Actuate(recorder, cluster, clock, parallelism=4, seed=1)
        admit = Admit(recorder, AdmissionEngine(), clock, actuate.submit)
        ingest = Ingest(recorder, admit.notify)
        cluster.connect(ingest)
        actuate.resume()
        for item in observed:
            ingest.put(item)

        done = asyncio.Event()
        recorder.listeners.append(lambda _event, _seq: done.set() if until(state) else None)
        if until(state):
            done.set()
        task = asyncio.create_task(run_concurrently((ingest, actuate, admit), clock, due={"actuate": actuate.next_due}))
        await asyncio.wait_for(done.wait(), 20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await recorder.catch_up()
        return state
    finally:
        await store.close()


def _events(db: Path) -> list[tuple[int, int | None, ev.Event]]:
    with LogReader(db) as reader:
        return [(e.seq, e.cause, decode(e.type, e.version, e.payload, seq=e.seq)) for e in reader.iter_events()]


def _admitted_and_actuated(state: State) -> bool:
    return "research/train-a" in state.workloads and not state.outbox and state.seq > len(CONFIG) + 2


async def test_a_decision_is_carried_out_after_it_is_durable_and_its_result_points_at_it(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    cluster = ScriptedCluster(db)
    await _run(
        db, cluster, _admitted_and_actuated, Observed(tuple(CONFIG)), Observed((ev.JobObserved(workload=workload()),))
    )
    assert [o.action for o in cluster.calls] == [Action.UNSUSPEND]
    assert cluster.durable_when_called == [True]
    events = _events(db)
    admitted = [seq for seq, _, e in events if isinstance(e, ev.WorkloadAdmitted)]
    unsuspended = [(cause, e) for _, cause, e in events if isinstance(e, ev.JobUnsuspended)]
    assert len(admitted) == 1 and len(unsuspended) == 1
    cause, event = unsuspended[0]
    assert cause == event.decision == admitted[0]
    assert event.placements[0].node_selector == (("gpu-type", "h100"),)


async def test_a_temporary_failure_is_retried_with_backoff_and_each_attempt_is_recorded(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    cluster = ScriptedCluster(db, [Failed("503 Service Unavailable", permanent=False)])
    await _run(
        db, cluster, _admitted_and_actuated, Observed(tuple(CONFIG)), Observed((ev.JobObserved(workload=workload()),))
    )
    assert len(cluster.calls) == 2 and cluster.calls[0] == cluster.calls[1]
    results = [e for _, _, e in _events(db) if isinstance(e, ev.ActuationFailed | ev.JobUnsuspended)]
    assert isinstance(results[0], ev.ActuationFailed) and not results[0].permanent
    assert results[0].error == "503 Service Unavailable"
    assert isinstance(results[1], ev.JobUnsuspended)
    assert results[1].at - results[0].at >= 400  # the first backoff is 0.5 s ± 20%


async def test_a_permanent_failure_is_recorded_once_and_not_retried(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    cluster = ScriptedCluster(db, [Failed("403 Forbidden: jobs.batch is forbidden", permanent=True)])
    await _run(
        db, cluster, _admitted_and_actuated, Observed(tuple(CONFIG)), Observed((ev.JobObserved(workload=workload()),))
    )
    await asyncio.sleep(0.8)  # longer than the first backoff: nothing may come back
    assert len(cluster.calls) == 1
    failures = [e for _, _, e in _events(db) if isinstance(e, ev.ActuationFailed)]
    assert [(f.permanent, f.error) for f in failures] == [(True, "403 Forbidden: jobs.batch is forbidden")]


async def test_an_unexpected_crash_ends_the_run_with_the_stage_named(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    cluster = ScriptedCluster(db, [ZeroDivisionError("a bug")])
    clock = WallClock()
    async with await EventStore.open(db) as store:
        recorder = Recorder(store, State(), clock, wait_durable=True)
        actuate = Actuate(recorder, cluster, clock)
        admit = Admit(recorder, AdmissionEngine(), clock, actuate.submit)
        ingest = Ingest(recorder, admit.notify)
        ingest.put(Observed(tuple(CONFIG)))
        ingest.put(Observed((ev.JobObserved(workload=workload()),)))
        with pytest.raises(StageCrashed, match=r"actuate crashed: ZeroDivisionError: a bug"):
            await asyncio.wait_for(run_concurrently((ingest, actuate, admit), clock), 20)


async def test_a_restart_carries_out_exactly_the_decisions_without_an_actuation(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    # First run: the decision is recorded, then the process dies before carrying it out.
    clock = WallClock()
    async with await EventStore.open(db) as store:
        recorder = Recorder(store, State(), clock, wait_durable=True)
        admit = Admit(recorder, AdmissionEngine(), clock, lambda order: None)
        await recorder.append([(e, None) for e in (*CONFIG, ev.JobObserved(workload=workload()))])
        admit.notify(None)
        await admit.step()
        assert list(recorder.state.outbox) == ["research/train-a"]
    # Second run: replay, and the outbox is carried out once; a third run has nothing left to do.
    cluster = ScriptedCluster(db)
    state = await _run(db, cluster, lambda s: not s.outbox)
    assert [o.job for o in cluster.calls] == ["research/train-a"]
    assert state.outbox == {}
    cluster = ScriptedCluster(db)
    await _run(db, cluster, lambda s: True)
    assert cluster.calls == []
    admitted = [e for _, _, e in _events(db) if isinstance(e, ev.WorkloadAdmitted)]
    assert len(admitted) == 1, "a restart must not decide again what was decided"


async def test_snapshots_are_taken_while_stages_append_without_pause(tmp_path: Path) -> None:
    """Two stages appending one after the other never leave a moment with nothing in flight; a due snapshot must
    still be taken (the next appends wait for it), or a busy daemon's log grows without snapshots."""
    db = tmp_path / "log.db"
    store = await EventStore.open(db)
    try:
        recorder = Recorder(store, State(), WallClock(), wait_durable=True, snapshot_every=50)

        async def stage(name: str) -> None:
            for i in range(200):
                pc = PriorityClass(name=f"{name}-{i}", value=i)
                await recorder.append([(ev.PriorityClassObserved(priority_class=pc), None)])

        await asyncio.gather(stage("a"), stage("b"))
        await recorder.catch_up()
    finally:
        await store.close()
    with sqlite3.connect(db) as con:
        seqs = [row[0] for row in con.execute("SELECT seq FROM snapshots ORDER BY seq")]
    assert len(seqs) >= 6, f"snapshots at {seqs} for 400 events, one due every 50"
