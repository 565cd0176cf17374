"""The fault spec of `admitd simulate --faults` and the quota check of the faulty simulation's invariants.

Real: the parser (daemon.sim.faults) and the quota arithmetic (daemon.sim.invariants). Nothing is faked; pure.
"""

from __future__ import annotations

import pytest

from daemon.domain.model import (
    Admission,
    ClusterQueue,
    FlavorQuotas,
    PodSetAssignment,
    ResourceGroup,
    ResourceQuota,
)
from daemon.sim.faults import ALL, Faults, FaultSpecError, parse_faults
from daemon.sim.invariants import QuotaLimits, quota_problems


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param("", Faults(), id="empty-is-no-fault"),
        pytest.param("evict-latency=30s", Faults(evict_latency=30_000), id="a-duration"),
        pytest.param("unsuspend-latency=2s, api-error=0.05", Faults(unsuspend_latency=2000, api_error=0.05), id="two"),
        pytest.param("all", ALL, id="all"),
        pytest.param("all,crash=0", ALL.without("crash"), id="all-but-crashes"),
        pytest.param("watch-delay=500ms,watch-drop=1", Faults(watch_delay=500, watch_drop=1.0), id="rate-one"),
    ],
)
def test_a_spec_reads_as_the_faults_it_names(spec: str, expected: Faults) -> None:
    assert parse_faults(spec) == expected


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        pytest.param("evict-latncy=30s", "unknown fault 'evict-latncy'; the faults are", id="misspelt-name"),
        pytest.param("crash", "expected name=value", id="no-value"),
        pytest.param("crash=2", "crash is a rate and must be from 0 to 1 (got 2)", id="rate-above-one"),
        pytest.param("crash=-0.1", "must be from 0 to 1", id="negative-rate"),
        pytest.param("crash=nan", "must be from 0 to 1", id="nan-rate"),
        pytest.param("crash=often", "crash takes a rate, a number from 0 to 1 (got 'often')", id="word-rate"),
        pytest.param("evict-latency=30", "evict-latency takes a duration such as 2s or 500ms", id="no-unit"),
        pytest.param("crash=0.1,crash=0.2", "crash is given twice", id="twice"),
        pytest.param("call-timeout=0s", "call-timeout must be more than 0", id="zero-timeout"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_pair_and_the_problem(spec: str, says: str) -> None:
    with pytest.raises(FaultSpecError, match=None) as e:
        parse_faults(spec)
    assert says in str(e.value)


def test_describe_gives_back_a_spec_of_the_same_faults() -> None:
    for faults in (Faults(), ALL, Faults(evict_latency=1500, crash=0.25), ALL.without("evict_latency")):
        assert parse_faults(faults.describe()) == faults


def test_active_names_the_faults_that_are_on_but_not_their_settings() -> None:
    assert Faults(restart_delay=5000, call_timeout=1).active() == ()
    assert Faults(evict_latency=1, crash=0.5).active() == ("evict_latency", "crash")


def _cq(name: str, cohort: str | None, nominal: int, borrowing: int | None = None, lending: int | None = None):
    quota = ResourceQuota(name="cpu", nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)
    groups = (ResourceGroup(covered_resources=("cpu",), flavors=(FlavorQuotas(name="rf", resources=(quota,)),)),)
    return ClusterQueue(name=name, cohort=cohort, resource_groups=groups)


def _running(cq: str, cpu: int, flavor: str = "rf") -> Admission:
    ps = PodSetAssignment(name="main", count=1, flavors={"cpu": flavor}, usage={"cpu": cpu})
    return Admission(cluster_queue=cq, pod_sets=(ps,))


@pytest.mark.parametrize(
    ("queues", "running", "problem"),
    [
        pytest.param([_cq("a", None, 10)], [_running("a", 10)], None, id="at-nominal-alone"),
        pytest.param([_cq("a", None, 10)], [_running("a", 6), _running("a", 5)], "uses 11", id="over-nominal-alone"),
        pytest.param(
            [_cq("a", "co", 10, borrowing=5), _cq("b", "co", 10)],
            [_running("a", 15)],
            None,
            id="borrowing-within-its-limit",
        ),
        pytest.param(
            [_cq("a", "co", 10, borrowing=5), _cq("b", "co", 10)],
            [_running("a", 16)],
            "more than its 15",
            id="borrowing-beyond-its-limit",
        ),
        pytest.param(
            [_cq("a", "co", 10), _cq("b", "co", 10, lending=2)],
            [_running("a", 13)],
            "more than the 12 the tree lends",
            id="beyond-what-a-lending-limit-lends",
        ),
        pytest.param(
            [_cq("a", "co", 10), _cq("b", "co", 10, lending=2)],
            [_running("a", 12), _running("b", 8)],
            None,
            id="a-lender-using-what-it-keeps",
        ),
        pytest.param([_cq("a", None, 10)], [_running("a", 1, flavor="gpu")], "no quota for", id="unknown-flavor"),
    ],
)
def test_quota_is_checked_as_the_running_pods_hold_it(
    queues: list[ClusterQueue], running: list[Admission], problem: str | None
) -> None:
    problems = quota_problems(running, QuotaLimits.of({q.name: q for q in queues}, {}))
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems
