"""A workload that needs preemption but has no candidates is parked: it reserves only in the cycle that finds it so.

Real: `decide`, the quota tree and the fold (`daemon.domain.state`, through the builders' `World`). Faked:
observations come from builders; cycles are driven by `settle` as the simulator drives them, evictions at once.
"""

from __future__ import annotations

from daemon.domain.admission import decide
from daemon.domain.events import WorkloadAdmitted, WorkloadPending
from daemon.domain.model import PendingReasonKind
from tests.unit.builders import World, cohort, cq, flavor, job, lq, namespace, running, settle, world


def blocked_by_a_cohort_borrowing_limit() -> World:
    """`a` (in team, nominal 0, may preempt while borrowing) wants 4 GPUs; team may borrow only 2 from org, and
    b's 2 are within b's nominal, so nothing a may preempt would let it in: Preempt mode with no candidates, a limit
    higher in the tree in the way. c's 8 GPUs are idle; d (nominal 0) wants to borrow 6 of them."""
    return world(
        flavor("h100"),
        namespace("default"),
        cohort("org"),
        cohort("team").parent("org").flavor("h100", gpu=0, borrow=2),
        cq("a").cohort("team").preempt("LowerPriority", "LowerPriority", "LowerPriority").flavor("h100", gpu=0),
        cq("b").cohort("team").flavor("h100", gpu=2),
        cq("c").cohort("org").flavor("h100", gpu=8),
        cq("d").cohort("org").flavor("h100", gpu=0),
        *(lq("default", f"q{n}", n) for n in "abcd"),
        running(job("b1").queue("qb").gpus(2), "b", "h100"),
        job("a-big").queue("qa").gpus(4).priority(10),
        job("d-borrow").queue("qd").gpus(6),
    )


def test_it_holds_no_room_that_it_could_never_use() -> None:
    """Kueue's resourcesToReserve would hold what a could borrow (all 4 GPUs, above team's limit) for the cycle that
    finds it without candidates; the simulator's instant would end with them idle. Parked, a holds nothing: d gets
    them in the same cycle, and a is told why it waits."""
    events = decide(blocked_by_a_cohort_borrowing_limit().view(), 1)
    assert [e.workload for e in events if isinstance(e, WorkloadAdmitted)] == ["default/d-borrow"]
    reasons = {e.workload: e.reason.kind for e in events if isinstance(e, WorkloadPending)}
    assert reasons["default/a-big"] is PendingReasonKind.WAITING_FOR_QUOTA


def test_other_queues_of_the_tree_borrow_idle_capacity_while_it_is_parked() -> None:
    """Later cycles find a parked (the same reason, nothing that could let it in changed): it holds nothing, and d
    borrows the idle GPUs. Holding them every cycle would keep them idle for as long as b1 runs."""
    w = blocked_by_a_cohort_borrowing_limit()
    events = settle(w)
    assert [e.workload for e in events if isinstance(e, WorkloadAdmitted)] == ["default/d-borrow"]
    assert "default/a-big" in w.pending


def test_a_change_that_lets_it_in_unparks_it() -> None:
    """b's workload finishes: team's own quota is free, and a is admitted (parking never hides a fit)."""
    w = blocked_by_a_cohort_borrowing_limit()
    settle(w)
    w.finish("default/b1")
    assert [e.workload for e in settle(w) if isinstance(e, WorkloadAdmitted)] == ["default/a-big"]
