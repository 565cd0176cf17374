"""The engine's optimisations (`daemon.domain.admission.Optimisations`) change what a call costs, never what it decides.

On random scenarios (the differential harness's: Cohorts three levels deep, every preemption policy, several
flavors, StrictFIFO and BestEffortFIFO, same-instant arrivals; classic and fair sharing), the engine with every
optimisation on and with all of them off makes the same admissions and evictions in the same order within each
quota tree, and after each instant every pending workload has the same last reason. A deep variant draws many
alike workloads into few queues, where the walk by runs, the memo and the lone holds do their work.
"""

from __future__ import annotations

from collections.abc import Mapping
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings

from daemon.domain.admission import ALL_OPTIMISATIONS, NO_OPTIMISATIONS, AdmissionEngine, EngineConfig, Optimisations
from daemon.domain.admission.cycle import Cycle
from daemon.domain.model import PendingReason
from tests.reference.differential import SPACES, Scenario, Space, run_engine, scenarios, trees
from tests.reference.kueue_model import Decision
from tests.unit.builders import cohort, cq, flavor, job, lq, namespace, running, world

DEEP = Space(flavors=2, max_queues=3, max_jobs=40)


def _per_tree(decisions: list[Decision], tree_of: Mapping[str, str]) -> dict[str, list[Decision]]:
    """Each quota tree's decisions in order. Trees are independent: `lone_holds` lets a tree finish in fewer
    passes, so within one call its events may come earlier among other trees' events, never in another order
    among its own."""
    out: dict[str, list[Decision]] = {}
    for d in decisions:
        out.setdefault(tree_of[d.cluster_queue], []).append(d)
    return out


def _same(sc: Scenario, config: EngineConfig, off: Optimisations) -> None:
    on_reasons: list[tuple[int, dict[str, PendingReason | None]]] = []
    off_reasons: list[tuple[int, dict[str, PendingReason | None]]] = []
    on = run_engine(sc, config, ALL_OPTIMISATIONS, on_reasons)
    plain = run_engine(sc, config, off, off_reasons)
    tree_of = trees(sc)
    assert _per_tree(on, tree_of) == _per_tree(plain, tree_of), sc.describe()
    for (at, with_them), (_, without) in zip(on_reasons, off_reasons, strict=True):
        differ = {k: (with_them.get(k), without.get(k)) for k in with_them.keys() | without.keys()}
        differ = {k: v for k, v in differ.items() if v[0] != v[1]}
        assert not differ, f"{sc.describe()}\nreasons at {at} ms, with / without the optimisations: {differ}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sc=scenarios(SPACES["full"]))
def test_the_engine_decides_the_same_with_its_optimisations_off(sc: Scenario) -> None:
    _same(sc, EngineConfig(), NO_OPTIMISATIONS)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sc=scenarios(DEEP))
def test_the_engine_decides_the_same_with_its_optimisations_off_in_deep_queues(sc: Scenario) -> None:
    _same(sc, EngineConfig(), NO_OPTIMISATIONS)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sc=scenarios(DEEP))
def test_lone_holds_alone_off_decide_the_same(sc: Scenario) -> None:
    _same(sc, EngineConfig(), Optimisations(lone_holds=False))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sc=scenarios(SPACES["full"]))
def test_the_engine_decides_the_same_with_its_optimisations_off_with_fair_sharing(sc: Scenario) -> None:
    _same(sc, EngineConfig(fair_sharing=True), NO_OPTIMISATIONS)


def test_a_deep_queue_whose_head_has_no_candidates_is_walked_in_a_few_passes() -> None:
    """Kueue issue 9715's pattern: a full ClusterQueue (no preemption) with 300 alike waiters, each of which would
    hold its room (resourcesToReserve) one pass at a time. With `lone_holds` the class steps aside after the first
    head; without it every waiter takes a pass of its own (the same decisions, checked above)."""
    w = world(
        flavor("f"),
        namespace("default"),
        cohort("root"),
        cq("full").cohort("root").flavor("f", gpu=2),
        cq("other").cohort("root").flavor("f", gpu=2, lend=0),
        lq("default", "q", "full"),
        lq("default", "o", "other"),
    )
    w.run(running(job("running").queue("q").gpus(2), "full", "f"))
    for i in range(300):
        w.submit(job(f"w{i}").queue("q").gpus(1).at(1 + i))
    original = Cycle.end_pass
    passes: list[bool] = []

    def counted(self: Cycle) -> None:
        passes.append(self.nominator.opt.lone_holds)
        original(self)

    events: dict[bool, list[object]] = {}
    with patch.object(Cycle, "end_pass", counted):
        for lone in (True, False):
            events[lone] = list(AdmissionEngine(EngineConfig(), Optimisations(lone_holds=lone)).decide(w.view(), 1_000))
    assert events[True] == events[False]
    assert len(events[True]) == 300  # every waiter's reason written once
    assert passes.count(True) <= 3
    assert passes.count(False) >= 300
