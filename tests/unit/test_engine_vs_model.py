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
