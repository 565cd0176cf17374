"""Invariants of the cycle over random clusters and random histories (hypothesis).

Real: `decide`, `AdmissionEngine`, the quota tree and the fold (`daemon.domain.state`, through the builders' `World`).
Faked: the observations (jobs, queues) come from builders, not a cluster; jobs finish and victims are evicted when the
test says so, not on a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.domain.admission import AdmissionEngine, EngineConfig, decide
from daemon.domain.events import Event, WorkloadAdmitted, WorkloadPreempted
from daemon.domain.quota import QuotaTree, available
from tests.unit.builders import World, cohort, cq, flavor, job, lq, namespace, world

FLAVORS = ("h100", "a100")
POLICIES = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")


@dataclass
class Scenario:
    w: World
    steps: list[tuple[list[Any], int, int]]  # (jobs to submit, how many admitted to finish, how many evictions)


@st.composite
def scenarios(draw: st.DrawFn, max_flavors: int = 2) -> Scenario:
    w = world(*(flavor(f) for f in FLAVORS), namespace("default"), namespace("other", team="x"))
    hierarchical = draw(st.booleans())
    if hierarchical:
        w.add(cohort("root").flavor("h100", gpu=draw(st.integers(0, 4))), cohort("co").parent("root"))
    n = draw(st.integers(1, 4))
    for i in range(n):
        b = cq(f"cq{i}")
        if draw(st.booleans()):
            b = b.cohort("co" if i % 2 == 0 or not hierarchical else "root")
        if draw(st.booleans()):
            b = b.strict_fifo()
        within = draw(st.sampled_from(POLICIES))
        reclaim = draw(st.sampled_from(RECLAIM))
        borrow_within = draw(st.sampled_from(("Never", "LowerPriority"))) if reclaim != "Never" else "Never"
        b = b.preempt(within, reclaim, borrow_within, draw(st.one_of(st.none(), st.integers(0, 5))))
        if draw(st.booleans()):
            b = b.fungibility(
                draw(st.sampled_from(("MayStopSearch", "TryNextFlavor"))),
                draw(st.sampled_from(("MayStopSearch", "TryNextFlavor"))),
            )
        for f in draw(st.permutations(FLAVORS))[: draw(st.integers(1, max_flavors))]:
            b = b.flavor(
                f,
                gpu=draw(st.integers(0, 8)),
                borrow=draw(st.one_of(st.none(), st.integers(0, 4))),
                lend=draw(st.one_of(st.none(), st.integers(0, 4))),
            )
        w.add(b, lq("default", f"q{i}", f"cq{i}"), lq("other", f"q{i}", f"cq{i}"))
    steps = []
    t = 0
    for _ in range(draw(st.integers(1, 5))):
        jobs = []
        for _ in range(draw(st.integers(0, 5))):
            t += 1
            jb = (
                job(f"j{t}")
                .ns(draw(st.sampled_from(("default", "default", "other"))))
                .queue(f"q{draw(st.integers(0, n - 1))}")
                .priority(draw(st.integers(0, 3)))
                .at(draw(st.integers(0, 20)))
            )
            jb.podset("main", draw(st.integers(1, 2)), gpu=draw(st.integers(0, 5)))
            if draw(st.booleans()):
                jb.podset("side", 1, gpu=draw(st.integers(1, 2)))
            jobs.append(jb)
        steps.append((jobs, draw(st.integers(0, 2)), draw(st.integers(0, 2))))
    return Scenario(w, steps)


def assert_quota_respected(w: World) -> None:
    """Every ClusterQueue and Cohort is within what its tree allows: nothing admitted (victims still count) made
    any node's available capacity negative."""
    tree = QuotaTree.build(w.cluster_queues, w.cohorts, w.flavors)
    totals: dict[str, dict[tuple[str, str], int]] = {}
    for aw in w.admitted.values():
        acc = totals.setdefault(aw.admission.cluster_queue, {})
        for fr, v in aw.admission.usage().items():
            acc[fr] = acc.get(fr, 0) + v
    tree.load_usage(totals)
    for node in [*tree.cqs.values(), *tree.cohorts.values()]:
        for fr in set(node.usage) | set(node.subtree):
            assert available(node, fr) >= 0, (node.name, fr, node.usage, node.subtree)


def drive(s: Scenario, step: Any) -> None:
    """Run the scenario: each step submits jobs, runs cycles to a fixpoint calling `step(view_events)` on each."""
    w = s.w
    now = 100
    preempted: list[str] = []
    for jobs, finishes, evictions in s.steps:
        now += 10
        for jb in jobs:
            w.submit(jb)
        for key in sorted(k for k, aw in w.admitted.items() if not aw.evicting)[:finishes]:
            w.finish(key)
        for key in preempted[:evictions]:
            if key in w.admitted:
                w.evict(key, now)
        preempted = preempted[evictions:]
        for _ in range(50):
            events = step(w, now)
            w.apply(events)
            preempted.extend(e.workload for e in events if isinstance(e, WorkloadPreempted))
            assert_quota_respected(w)
            if not any(isinstance(e, WorkloadAdmitted | WorkloadPreempted) for e in events):
                break
        else:
            raise AssertionError("no fixpoint")


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(s=scenarios())
def test_quota_is_never_exceeded_and_decide_is_deterministic(s: Scenario) -> None:
    def step(w: World, now: int) -> list[Event]:
        v = w.view()
        first = decide(v, now)
        assert decide(v, now) == first
        return first

    drive(s, step)


@SETTINGS
@given(s=scenarios(max_flavors=1))
def test_a_cycle_applied_to_its_own_output_admits_nothing_more(s: Scenario) -> None:
    """A cycle runs to a fixpoint: folding its events in and deciding again admits nothing. Two Kueue behaviours
    are outside this: a workload admitted in a cycle is no preemption candidate in that cycle (so a higher-priority
    workload that stepped aside may preempt it next cycle), and the per-cycle hold of a preemptor without candidates
    depends on pass order, so it is turned off here; and with several flavors a preemptor's reserved flavors may
    differ between the cycle that preempts and the one that waits, so queues have one flavor here. A cycle that
    preempts ends with its preemptions (Kueue's next cycle is the one that sees the victims leave), so only a cycle
    that preempted nothing is a fixpoint."""
    config = EngineConfig(reserve_without_candidates=False)

    def step(w: World, now: int) -> list[Event]:
        events = decide(w.view(), now, config)
        if any(isinstance(e, WorkloadPreempted) for e in events):
            return events
        probe = w.copy()
        probe.apply(events)
        again = decide(probe.view(), now, config)
        assert not [e for e in again if isinstance(e, WorkloadAdmitted)], again
        return events

    drive(s, step)


@SETTINGS
@given(s=scenarios())
def test_engine_with_caches_decides_exactly_as_a_fresh_decide(s: Scenario) -> None:
    engine = AdmissionEngine()

    def step(w: World, now: int) -> list[Event]:
        v = w.view()
        fresh = decide(v, now)
        assert engine.decide(v, now) == fresh
        return fresh

    drive(s, step)


@st.composite
def deep_scenarios(draw: st.DrawFn) -> Scenario:
    """Few shapes and priorities, many workloads: deep queues with long runs of alike workloads, the case the
    indexed walk steps over. Queues borrow and reclaim in one cohort; some LocalQueues may be stopped."""
    w = world(*(flavor(f) for f in FLAVORS), namespace("default"), namespace("other", team="x"))
    n = draw(st.integers(1, 3))
    for i in range(n):
        b = cq(f"cq{i}").cohort("co")
        if draw(st.integers(0, 3)) == 0:
            b = b.strict_fifo()
        b = b.preempt(draw(st.sampled_from(POLICIES)), draw(st.sampled_from(RECLAIM)))
        for f in draw(st.permutations(FLAVORS))[: draw(st.integers(1, 2))]:
            b = b.flavor(f, gpu=draw(st.integers(1, 6)), borrow=draw(st.one_of(st.none(), st.integers(0, 4))))
        stop = draw(st.sampled_from(("None", "None", "None", "Hold")))
        w.add(b, lq("default", f"q{i}", f"cq{i}"), lq("other", f"q{i}", f"cq{i}", stop))
    shapes = [(1, 1), (1, 2), (2, 3)]  # (count, gpu per pod)
    steps = []
    t = 0
    for _ in range(draw(st.integers(2, 6))):
        jobs = []
        for _ in range(draw(st.integers(0, 12))):
            t += 1
            count, gpu = draw(st.sampled_from(shapes))
            jb = (
                job(f"j{t}")
                .ns(draw(st.sampled_from(("default", "default", "default", "other"))))
                .queue(f"q{draw(st.integers(0, n - 1))}")
                .priority(draw(st.integers(0, 1)))
                .at(t)
            )
            jb.podset("main", count, gpu=gpu)
            jobs.append(jb)
        steps.append((jobs, draw(st.integers(0, 4)), draw(st.integers(0, 3))))
    return Scenario(w, steps)


def _indexed_equals_unindexed(s: Scenario, config: EngineConfig) -> None:
    engine = AdmissionEngine(config)

    def step(w: World, now: int) -> list[Event]:
        reference = decide(w.view(indexed=False), now, config)
        assert decide(w.view(indexed=True), now, config) == reference
        assert engine.decide(w.view(indexed=True), now) == reference
        return reference

    drive(s, step)


@SETTINGS
@given(s=scenarios(), fair=st.booleans(), reserve=st.booleans())
def test_walking_by_runs_decides_exactly_as_visiting_every_pending_workload(
    s: Scenario, fair: bool, reserve: bool
) -> None:
    """The pending index only lets the walk step over workloads that would be NoFit and write nothing: the events
    (reasons included, in order) are those of the walk that visits each one, with and without the engine's caches."""
    _indexed_equals_unindexed(s, EngineConfig(fair_sharing=fair, reserve_without_candidates=reserve))


@SETTINGS
@given(s=deep_scenarios(), fair=st.booleans(), reserve=st.booleans())
def test_walking_by_runs_decides_exactly_as_visiting_every_pending_workload_in_deep_queues(
    s: Scenario, fair: bool, reserve: bool
) -> None:
    _indexed_equals_unindexed(s, EngineConfig(fair_sharing=fair, reserve_without_candidates=reserve))
