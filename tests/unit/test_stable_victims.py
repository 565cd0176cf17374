"""A waiting preemptor keeps the victims it claimed: the fold remembers them and the next cycle does not choose again.

Real: `decide`, the quota tree and the fold (`daemon.domain.state`, through the builders' `World`), the codec's
upcaster for `workload.pending` v1. Faked: observations come from builders; evictions happen when the test says.
The scenario is the one hypothesis found (`test_a_cycle_applied_to_its_own_output_admits_nothing_more`, seed 85).
"""

from __future__ import annotations

from daemon.domain.admission import EngineConfig, decide
from daemon.domain.events import WorkloadAdmitted, WorkloadPending, WorkloadPreempted
from daemon.domain.model import PendingReason, PendingReasonKind
from daemon.eventlog import codec
from tests.unit.builders import World, cohort, cq, flavor, job, lq, namespace, running, world

CONFIG = EngineConfig(reserve_without_candidates=False)
NOW = 140


def waiting(key: str, cq_name: str, *victims: str) -> WorkloadPending:
    keys = sorted(victims)
    return WorkloadPending(
        workload=key,
        at=NOW,
        cluster_queue=cq_name,
        reason=PendingReason(
            kind=PendingReasonKind.WAITING_FOR_PREEMPTED_WORKLOADS,
            message=f"waiting for {len(keys)} preempted workloads: {', '.join(keys)}",
            blocked_by=keys[0],
            victims=tuple(keys),
        ),
    )


def seed_85() -> World:
    """12 GPUs in all. j4 (4, cq0) leaves for j7 (10, cq1, priority 1); j3 (2, cq1) leaves for j9 (1, cq0); j2
    (1, cq0) was evicted earlier and queues again."""
    w = world(
        flavor("h100"),
        namespace("default"),
        cohort("root").flavor("h100", gpu=4),
        cohort("co").parent("root"),
        cq("cq0").cohort("co").preempt("Never", "Any").flavor("h100", gpu=3),
        cq("cq1").cohort("root").preempt("Never", "LowerPriority", "LowerPriority").flavor("h100", gpu=5),
        lq("default", "q0", "cq0"),
        lq("default", "q1", "cq1"),
        running(job("j3").queue("q1").gpus(2), "cq1", "h100", at=110, evicting=True),
        running(job("j4").queue("q0").gpus(4), "cq0", "h100", at=110, evicting=True),
        job("j7").queue("q1").priority(1).podset("main", 2, gpu=5),
        job("j9").queue("q0").gpus(1),
        job("j2").queue("q0").gpus(1).at(5),
    )
    w.apply([waiting("default/j7", "cq1", "default/j4"), waiting("default/j9", "cq0", "default/j3")])
    return w


def test_a_second_cycle_on_the_first_ones_output_admits_nothing_more() -> None:
    """The first cycle admits j2 into the last free unit, counting on j7 waiting for j4 and j9 for j3. A cycle on
    that output used to choose again: j7 took both j3 and j4, so j9 fitted at once and was admitted, behind the
    back of the first cycle. With the claims remembered, each keeps its own victim and nothing changes."""
    w = seed_85()
    first = decide(w.view(), NOW, CONFIG)
    assert [e.workload for e in first if isinstance(e, WorkloadAdmitted)] == ["default/j2"]
    w.apply(first)
    second = decide(w.view(), NOW, CONFIG)
    assert [e for e in second if isinstance(e, WorkloadAdmitted | WorkloadPreempted)] == []
    reasons = {k: r.last_reason for k, r in w.pending.items()}
    assert reasons["default/j7"] is not None and reasons["default/j7"].victims == ("default/j4",)
    assert reasons["default/j9"] is not None and reasons["default/j9"].victims == ("default/j3",)


def test_claims_outlive_a_restart_from_a_snapshot() -> None:
    w = seed_85()
    w.apply(decide(w.view(), NOW, CONFIG))
    assert decide(w.copy().view(), NOW, CONFIG) == decide(w.view(), NOW, CONFIG)


def test_a_version_1_reason_gives_back_its_victims() -> None:
    """Version 1 named the victims only in the message; the upcaster reads them back."""
    payload = (
        b'{"at":5,"cluster_queue":"cq1","reason":{"blocked_by":"default/a","kind":"WaitingForPreemptedWorkloads",'
        b'"message":"waiting for 2 preempted workloads: default/a, default/b","shortages":[]},"workload":"default/p"}'
    )
    event = codec.decode("workload.pending", 1, payload, seq=1)
    assert isinstance(event, WorkloadPending)
    assert event.reason.victims == ("default/a", "default/b")
    other = payload.replace(b"WaitingForPreemptedWorkloads", b"WaitingForQuota")
    decoded = codec.decode("workload.pending", 1, other, seq=2)
    assert isinstance(decoded, WorkloadPending)
    assert decoded.reason.victims == ()
