"""Differential property: the engine decides as the reference model of Kueue's cycle does.

Real: `AdmissionEngine` with its caches, the fold (`tests.unit.builders.World`), and the model
(`tests.reference.kueue_model`), which shares only the engine's quota arithmetic, flavor assigner and victim
selection. Faked: the clock and the cluster, as the simulator fakes them (a preempted job stops at once). Drawn by
hypothesis: the whole classic space (Cohorts up to three levels deep, every classic preemption policy, several
flavors, StrictFIFO and BestEffortFIFO, same-instant arrivals), and the part without Cohorts (`CI_SPACE`) also with
fair sharing on (without Cohorts, Kueue's fair sharing decides as its classic cycle does). Longer runs per part:
`python -m bench.bench_model_diff` (bench/RESULTS.md).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from daemon.domain.admission import EngineConfig
from tests.reference.differential import (
    CI_SPACE,
    SPACES,
    Scenario,
    first_difference,
    run_engine,
    run_model,
    scenarios,
    trees,
)
from tests.unit.builders import JobBuilder, cohort, cq, flavor, job, lq, namespace


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sc=scenarios(CI_SPACE))
def test_the_engine_admits_and_evicts_what_the_model_does_in_the_same_order_on_the_same_flavors(sc: Scenario) -> None:
    difference = first_difference(run_engine(sc), run_model(sc), trees(sc))
    assert difference is None, f"{sc.describe()}\n{difference}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sc=scenarios(CI_SPACE))
def test_with_fair_sharing_the_engine_still_decides_as_the_model_where_there_are_no_cohorts(sc: Scenario) -> None:
    difference = first_difference(run_engine(sc, EngineConfig(fair_sharing=True)), run_model(sc), trees(sc))
    assert difference is None, f"{sc.describe()}\n{difference}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sc=scenarios(SPACES["full"]))
def test_with_cohorts_three_levels_deep_the_engine_decides_as_the_model(sc: Scenario) -> None:
    """The whole classic space: Cohorts up to three levels deep with borrowing and lending limits, every classic
    preemption policy, 1-3 flavors, StrictFIFO and BestEffortFIFO (bench/RESULTS.md: 1,000 of 1,000 equal)."""
    difference = first_difference(run_engine(sc), run_model(sc), trees(sc))
    assert difference is None, f"{sc.describe()}\n{difference}"


def _two_queue_tree(
    *, strict_cq0: bool, cq0_gpus: int, cq2_flavors: tuple[tuple[str, int], ...], reclaim: str
) -> list[object]:
    """The tree both regressions below were found in: Cohort co00 with a child co10 that lends 4 GPUs of f1, and
    ClusterQueues cq0 and cq2 under co00 (cq1 alone, empty)."""
    c0 = cq("cq0").cohort("co00").preempt("Never", "Never", "Never").flavor("f0", gpu=cq0_gpus)
    if strict_cq0:
        c0 = c0.strict_fifo()
    c2 = cq("cq2").cohort("co00").preempt("Never", reclaim, "Never")
    for f, gpus in cq2_flavors:
        c2 = c2.flavor(f, gpu=gpus)
    return [
        flavor("f0"),
        flavor("f1"),
        namespace("default"),
        cohort("co00"),
        cohort("co10").parent("co00").flavor("f0", gpu=0).flavor("f1", gpu=4),
        c0,
        lq("default", "q0", "cq0"),
        cq("cq1").flavor("f0", gpu=0),
        lq("default", "q1", "cq1"),
        c2,
        lq("default", "q2", "cq2"),
    ]


def _jobs(*specs: tuple[str, int, int]) -> list[tuple[int, JobBuilder, int | None]]:
    return [(0, job(f"j{i}").queue(q).priority(p).at(0).gpus(g), None) for i, (q, p, g) in enumerate(specs)]


def test_a_workload_held_back_at_its_eviction_instant_is_held_again_by_each_call_of_that_instant() -> None:
    """Found by the three-level test: j1 and j9 (cq0) are preempted at 0 ms by two calls in turn; the engine's next
    call holds each again where its walk meets it (one pass each), so cq0's j3 comes a pass after cq2's j8. The
    model kept a workload it held out of its heap for the rest of the instant, and admitted j3 first. A call walks
    every queue from its head (`Switches.inadmissible_back_at_each_call`): the model now does the same with them."""
    items = _two_queue_tree(strict_cq0=False, cq0_gpus=2, cq2_flavors=(("f1", 2), ("f0", 6)), reclaim="Any")
    specs = [("q2", 0, 2), ("q0", 0, 3), ("q2", 1, 3), ("q0", 0, 1), ("q0", 0, 1)]
    specs += [("q2", 0, 3), ("q2", 1, 3), ("q2", 0, 1), ("q2", 0, 1), ("q0", 1, 3)]
    sc = Scenario(items, _jobs(*specs))
    assert first_difference(run_engine(sc), run_model(sc), trees(sc)) is None


def test_a_strict_fifo_head_held_back_at_its_eviction_instant_is_assessed_again_in_the_next_pass() -> None:
    """Found by the three-level test: cq0 (StrictFIFO) has its head j1 preempted at 0 ms. In the next call the engine
    held j1 back and closed cq0 for the call; Kueue requeues a StrictFIFO head at once, so the model assessed it again
    in the next cycle, where j6's admission left it without candidates and its hold kept cq2's j7 out. The engine now
    offers such a head again in each pass, as it does a StrictFIFO head that holds."""
    items = _two_queue_tree(strict_cq0=True, cq0_gpus=5, cq2_flavors=(("f1", 0), ("f0", 6)), reclaim="LowerPriority")
    items.insert(5, cohort("co11").parent("co00"))
    specs = [("q2", 0, 1), ("q0", 0, 3), ("q2", 1, 3), ("q0", 0, 1), ("q0", 0, 1)]
    specs += [("q2", 1, 2), ("q2", 1, 4), ("q2", 0, 1), ("q0", 0, 1), ("q0", 1, 3)]
    sc = Scenario(items, _jobs(*specs))
    assert first_difference(run_engine(sc), run_model(sc), trees(sc)) is None


def test_a_borrower_meets_the_queue_taking_back_its_quota_in_the_cycle_kueue_v018_would() -> None:
    """Found by `bench_model_diff` (best-effort part) once borrowers waited for their tree's own queues: at 2 s, cq1's
    j6 is alike to j0 (2 GPUs, priority 2), found NoFit earlier in the call with nothing admitted in the tree since,
    so the engine's walk steps it aside and cq1's next workloads come one pass earlier than in Kueue v0.17's cycle:
    j7 (1 GPU, within cq1's quota) meets cq0's borrower j9 in one pass, and j9 waits. The model popped j6 in a
    cycle of its own, admitted j9 and preempted it for j7 a cycle later. With
    `Switches.unfit_classes_step_aside_together` (per call; Kueue v0.18's equivalence hashing) it does as the engine;
    this test fails with the switch off."""
    items: list[object] = [
        flavor("f0"),
        namespace("default"),
        cohort("co00").flavor("f0", gpu=0, borrow=3),
        cohort("co20").parent("co00"),
        cq("cq0")
        .cohort("co20")
        .flavor("f0", gpu=1, borrow=2, lend=3)
        .preempt("LowerOrNewerEqualPriority", "LowerPriority"),
        lq("default", "q0", "cq0"),
        cq("cq1")
        .cohort("co20")
        .flavor("f0", gpu=1)
        .preempt("LowerPriority", "Any")
        .fungibility("MayStopSearch", "MayStopSearch"),
        lq("default", "q1", "cq1"),
        cq("cq2")
        .flavor("f0", gpu=5, borrow=1)
        .preempt("LowerPriority", "LowerPriority")
        .fungibility("MayStopSearch", "MayStopSearch", "PreemptionOverBorrowing"),
        lq("default", "q2", "cq2"),
    ]
    jobs: list[tuple[int, JobBuilder, int | None]] = [
        (2000, job("j0").queue("q1").priority(2).at(2000).gpus(2), None),
        (0, job("j1").queue("q1").priority(1).at(0).gpus(2), 4000),
        (2000, job("j2").queue("q2").priority(0).at(2000).gpus(4), None),
        (0, job("j3").queue("q2").priority(1).at(0).gpus(1), None),
        (2000, job("j4").queue("q1").priority(2).at(2000).gpus(3), 3000),
        (2000, job("j5").queue("q0").priority(2).at(2000).gpus(2), None),
        (2000, job("j6").queue("q1").priority(2).at(2000).gpus(2), None),
        (2000, job("j7").queue("q1").priority(1).at(2000).gpus(1), None),
        (0, job("j8").queue("q0").priority(0).at(0).gpus(2), None),
        (2000, job("j9").queue("q0").priority(0).at(2000).gpus(1), None),
        (2000, job("j10").queue("q0").priority(0).at(2000).gpus(2), 3000),
        (0, job("j11").queue("q0").priority(1).at(0).gpus(1), None),
    ]
    sc = Scenario(items, jobs)
    assert first_difference(run_engine(sc), run_model(sc), trees(sc)) is None


def test_a_class_without_candidates_and_nothing_to_hold_steps_aside_as_a_nofit_class_does() -> None:
    """Found by `bench_model_diff 8000 best-effort`: at 4 s (j8 ends) cq1's head j5 needs preemption, finds no
    candidates and holds nothing (its reservation would be zero). Its queue's j7 is alike, so the engine steps it
    aside as it does a NoFit class, and j12 (1 GPU, borrowing) takes the room before cq2's j2 in the next pass, where
    the model popped j7 in a cycle of its own, admitted j2 and preempted it again at 6 s. The model's
    `unfit_classes_step_aside_together` counts such a class as the engine does."""
    items: list[object] = [
        flavor("f0"),
        flavor("f1"),
        namespace("default"),
        cohort("co00").flavor("f1", gpu=2),
        cohort("co20").parent("co00").flavor("f0", gpu=4, borrow=1),
        cq("cq0")
        .flavor("f1", gpu=2, borrow=0)
        .preempt("LowerOrNewerEqualPriority", "Any")
        .fungibility("MayStopSearch", "TryNextFlavor", "PreemptionOverBorrowing"),
        lq("default", "q0", "cq0"),
        cq("cq1")
        .cohort("co20")
        .flavor("f0", gpu=5, borrow=2, lend=2)
        .flavor("f1", gpu=2, borrow=4)
        .preempt("Never", "LowerPriority")
        .fungibility("TryNextFlavor", "MayStopSearch", "PreemptionOverBorrowing"),
        lq("default", "q1", "cq1"),
        cq("cq2")
        .cohort("co00")
        .flavor("f1", gpu=5, lend=2)
        .preempt("LowerOrNewerEqualPriority", "LowerPriority")
        .fungibility("TryNextFlavor", "TryNextFlavor", "PreemptionOverBorrowing"),
        lq("default", "q2", "cq2"),
    ]
    specs = [("q1", 1, 2, None), ("q2", 1, 3, 3000), ("q2", 0, 3, None), ("q1", 2, 2, 4000), ("q0", 2, 2, None)]
    specs += [("q1", 1, 4, None), ("q1", 0, 4, 4000), ("q1", 1, 4, None), ("q2", 1, 3, 1000), ("q1", 1, 3, None)]
    specs += [("q2", 1, 4, 4000), ("q1", 1, 2, None), ("q1", 0, 1, 3000), ("q2", 2, 1, None)]
    jobs = [
        (3000, job(f"j{i}").queue(q).priority(p).at(3000).gpus(g), runtime)
        for i, (q, p, g, runtime) in enumerate(specs)
    ]
    sc = Scenario(items, jobs)
    assert first_difference(run_engine(sc), run_model(sc), trees(sc)) is None


def test_a_strict_fifo_head_without_candidates_and_nothing_to_hold_holds_in_a_later_pass() -> None:
    """Found by `bench_model_diff` (one-flavor part): cq1 (StrictFIFO) has j2, which needs preemption and finds no
    candidates; in its first pass it has nothing to hold (its Cohort's borrowingLimit keeps it out). The engine took
    that for the whole call and closed cq1; Kueue requeues a StrictFIFO head at once, and once cq0's j3 was admitted
    j2 held its room in the next cycle, keeping cq0's j5 out. The engine now offers it again in the next pass."""
    items: list[object] = [
        flavor("f0"),
        namespace("default"),
        cohort("co00").flavor("f0", gpu=1),
        cohort("co10").parent("co00").flavor("f0", gpu=3),
        cohort("co11").parent("co00"),
        cohort("co20").parent("co11").flavor("f0", gpu=4, borrow=0),
        cq("cq0").cohort("co00").flavor("f0", gpu=1, lend=1).preempt("LowerPriority", "LowerPriority"),
        lq("default", "q0", "cq0"),
        cq("cq1")
        .cohort("co20")
        .strict_fifo()
        .flavor("f0", gpu=3, lend=0)
        .preempt("LowerPriority", "LowerPriority", "LowerPriority"),
        lq("default", "q1", "cq1"),
    ]
    specs = [("q1", 2, 4, None), ("q0", 1, 1, 4000), ("q1", 0, 4, 1000), ("q0", 0, 2, 2000)]
    specs += [("q0", 1, 3, 2000), ("q0", 0, 1, 4000), ("q1", 0, 4, None)]
    jobs = [
        (2000, job(f"j{i}").queue(q).priority(p).at(2000).gpus(g), runtime)
        for i, (q, p, g, runtime) in enumerate(specs)
    ]
    sc = Scenario(items, jobs)
    assert first_difference(run_engine(sc), run_model(sc), trees(sc)) is None
