"""Fair sharing within one cycle: victims are chosen where every workload holding quota is a candidate.

Real: `daemon.domain.admission.decide` with fair sharing (tournament, fair-sharing preemption with Kueue's
FairSharingPreemptWithinNominal), the quota tree and the fold (`tests.unit.builders.World`). Faked: the cluster, as
the simulator fakes it: a preempted workload is evicted at once and queues again, and cycles repeat at one instant
until one admits and preempts nothing.

The situation is the one where the Kueue baseline shape with fair sharing churned (issue 9): cq2 runs a large,
high-priority workload within its nominal quota; the other queues of the cohort are empty and each has five medium
workloads waiting. The first cycle admits the mediums of all three queues, cq2's beyond its nominal quota (it
borrows). cq0's fourth medium then needs its nominal quota back. In Kueue the victims are chosen at the start of a
cycle, when the mediums cq2 borrowed with are admitted workloads, and the lowest-priority, newest of them is taken.
The engine used to choose them in the same cycle, where the mediums just admitted held quota without being
candidates yet, so it preempted the large workload (20 CPU, priority 200, to free 5 CPU); that one then preempted
its way back in (its own queue's mediums and one medium of each other queue), and the exchange came back at every
completion.
"""

from __future__ import annotations

import asyncio

import pytest

from daemon.domain.admission import AdmissionEngine, EngineConfig, decide
from daemon.domain.events import Event, WorkloadAdmitted, WorkloadPending, WorkloadPreempted
from daemon.domain.model import PendingReasonKind, PodSet
from daemon.stages.admit import Admit
from tests.unit.builders import JobBuilder, World, cq, flavor, job, lq, namespace, running, world

FAIR = EngineConfig(fair_sharing=True)


def wl(name: str, queue: str, cpu: int, priority: int, at: int) -> JobBuilder:
    jb = job(name).queue(queue).priority(priority).at(at)
    jb.pod_sets.append(PodSet(name="main", count=1, requests={"cpu": cpu * 1000}))
    return jb


def baseline_moment() -> World:
    """Three ClusterQueues of the Kueue baseline shape (nominal 20 CPU, borrowingLimit 100, reclaimWithinCohort Any,
    withinClusterQueue LowerPriority) at the instant where cq2's large workload runs and five mediums wait in each."""
    w = world(flavor("rf"), namespace("default"))
    for i in range(3):
        w.add(
            cq(f"cq{i}").cohort("co").flavor("rf", cpu=20, borrow=100).preempt("LowerPriority", "Any"),
            lq("default", f"q{i}", f"cq{i}"),
        )
    w.add(running(wl("large", "q2", 20, 200, 0), "cq2", "rf"))
    for m in range(5):
        for i in range(3):
            w.submit(wl(f"cq{i}-medium-{m}", f"q{i}", 5, 100, 10 + m))
    return w


def settle(w: World, now: int) -> list[Event]:
    """Cycles at one instant until one admits and preempts nothing; every event of the instant, in order."""
    out: list[Event] = []
    for _ in range(20):
        events = decide(w.view(), now, FAIR)
        w.apply(events)
        out.extend(events)
        for e in events:
            if isinstance(e, WorkloadPreempted):
                w.evict(e.workload, now)
        if not any(isinstance(e, WorkloadAdmitted | WorkloadPreempted) for e in events):
            return out
    raise AssertionError(f"no fixed point at {now} ms")


def usage_by_cq(w: World) -> dict[str, int]:
    out: dict[str, int] = {}
    for aw in w.admitted.values():
        cq_name = aw.admission.cluster_queue
        out[cq_name] = out.get(cq_name, 0) + sum(v for ps in aw.admission.pod_sets for v in ps.usage.values())
    return out


def test_a_preemptor_waits_for_the_next_cycle_where_this_one_admitted() -> None:
    w = baseline_moment()
    events = decide(w.view(), 100, FAIR)
    # What fits is admitted (cq2's first two mediums borrow); cq0's and cq1's fourth mediums need room back, and
    # their victims are not chosen in this cycle.
    assert sorted(e.workload for e in events if isinstance(e, WorkloadAdmitted)) == [
        f"default/cq{i}-medium-{m}" for i in range(3) for m in range(3) if (i, m) != (2, 2)
    ]
    assert [e for e in events if isinstance(e, WorkloadPreempted)] == []
    # Nothing is written for the workloads left for the next cycle (no reason that the next cycle changes again).
    assert not [e for e in events if isinstance(e, WorkloadPending) and e.workload.startswith("default/cq0-")]


def test_victims_are_the_borrowed_mediums_not_the_large_workload_within_nominal() -> None:
    w = baseline_moment()
    events = settle(w, 100)
    preempted = [e for e in events if isinstance(e, WorkloadPreempted)]
    assert sorted((e.workload, e.reason) for e in preempted) == [
        ("default/cq2-medium-0", "InCohortReclamation"),
        ("default/cq2-medium-1", "InCohortReclamation"),
    ]
    assert "default/large" in w.admitted
    # Each queue ends at its nominal 20 CPU: nobody borrows, nothing is left to reclaim.
    assert usage_by_cq(w) == {"cq0": 20_000, "cq1": 20_000, "cq2": 20_000}
    assert [e for e in settle(w, 100) if isinstance(e, WorkloadAdmitted | WorkloadPreempted)] == []


def test_no_workload_is_preempted_and_admitted_again_at_the_instant() -> None:
    w = baseline_moment()
    events = settle(w, 100)
    readmitted = []
    preempted: set[str] = set()
    for e in events:
        if isinstance(e, WorkloadPreempted):
            preempted.add(e.workload)
        elif isinstance(e, WorkloadAdmitted) and e.workload in preempted:
            readmitted.append(e.workload)
    assert readmitted == []


def test_the_engine_asks_for_the_next_cycle_and_the_admit_stage_runs_it() -> None:
    """Real: `AdmissionEngine` and `daemon.stages.admit.Admit` over the real fold. Faked: the recorder (it folds the
    decisions into the state and numbers them) and the clock. Nothing is observed between the two cycles: without the
    engine's request the preemptor would wait for whatever happens next in the cluster."""
    w = baseline_moment()

    class Folding:
        state = w.state
        seq = 0

        async def append(self, items: list[tuple[Event, int | None]]) -> list[int]:
            out = []
            for event, _ in items:
                self.state.apply(event)
                self.seq += 1
                out.append(self.seq)
            return out

    class Clock:
        def now(self) -> int:
            return 100

    engine = AdmissionEngine(FAIR)
    stage = Admit(Folding(), engine, Clock(), lambda order: None)  # type: ignore[arg-type]
    stage.notify(None)
    asyncio.run(stage.step())
    assert engine.deferred
    assert stage.has_work()
    asyncio.run(stage.step())
    assert stage.cycles == 2
    while stage.has_work():  # a cycle that preempts ends there and asks for the next one
        assert stage.cycles < 10
        asyncio.run(stage.step())
    victims = sorted(key for key, aw in w.admitted.items() if aw.evicting)
    assert victims == ["default/cq2-medium-0", "default/cq2-medium-1"]


def gpu_job(name: str, ns: str, queue: str, count: int, gpu: int, priority: int, at: int) -> JobBuilder:
    jb = job(name).ns(ns).queue(queue).priority(priority).at(at)
    jb.podset("main", count, gpu=gpu)
    return jb


@pytest.mark.timeout(20)
def test_a_strict_fifo_head_assessed_in_every_pass_writes_its_reason_once_and_the_call_ends() -> None:
    """Found by the deep-queue property test (a call that never returned). cq0 is StrictFIFO: once j12 and j13
    are admitted, its head j5 (6 GPUs, 5 left in the cohort) is a holder, offered again in every pass of the call,
    while the other queues keep the passes going. Its reason differed from the log's last one, so each pass wrote
    the same new WorkloadPending again; the call ends when a pass changes nothing, and every pass changed the
    number of events."""
    w = world(flavor("h100"), flavor("a100"), namespace("default"), namespace("other", team="x"))
    queues = [
        cq("cq0").cohort("co").strict_fifo().preempt("LowerPriority", "Any").flavor("a100", gpu=3),
        cq("cq1")
        .cohort("co")
        .preempt("LowerPriority", "LowerPriority")
        .flavor("h100", gpu=2)
        .flavor("a100", gpu=1, borrow=1),
        cq("cq2").cohort("co").preempt("LowerPriority", "Any").flavor("a100", gpu=5),
    ]
    for i, b in enumerate(queues):
        w.add(b, lq("default", f"q{i}", f"cq{i}"), lq("other", f"q{i}", f"cq{i}"))
    for jb in (
        gpu_job("j4", "other", "q2", 1, 1, 0, 4),
        gpu_job("j5", "default", "q0", 2, 3, 0, 5),
        gpu_job("j6", "default", "q2", 1, 2, 1, 6),
        gpu_job("j7", "default", "q2", 1, 1, 1, 7),
        gpu_job("j10", "default", "q0", 2, 3, 1, 10),
        gpu_job("j11", "default", "q2", 1, 2, 0, 11),
        gpu_job("j12", "other", "q0", 1, 2, 1, 12),
    ):
        w.submit(jb)
    config = EngineConfig(fair_sharing=True, reserve_without_candidates=True)

    def settle_at(now: int) -> list[Event]:
        out: list[Event] = []
        for _ in range(50):
            events = decide(w.view(), now, config)
            pending = [(e.workload, e.reason) for e in events if isinstance(e, WorkloadPending)]
            assert len(pending) == len(set(pending)), f"a reason written twice in one call: {pending}"
            w.apply(events)
            out.extend(events)
            if not any(isinstance(e, WorkloadAdmitted | WorkloadPreempted) for e in events):
                return out
        raise AssertionError("no fixpoint")

    settle_at(110)
    w.submit(gpu_job("j13", "default", "q0", 1, 1, 1, 13))
    for key in sorted(k for k, aw in w.admitted.items() if not aw.evicting)[:2]:
        w.finish(key)
    events = settle_at(120)
    assert [e.workload for e in events if isinstance(e, WorkloadAdmitted)] == ["other/j12", "default/j13"]
    reasons = [e.reason for e in events if isinstance(e, WorkloadPending) and e.workload == "default/j5"]
    assert [r.kind for r in reasons] == [PendingReasonKind.WAITING_FOR_QUOTA]
    assert reasons[0].shortages[0].requested == 6000
