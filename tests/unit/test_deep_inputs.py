"""Deep and wide inputs: a Cohort chain 1,000 deep is built and admitted against without recursion (classic and fair
sharing), and with many admitted workloads a cycle's usage bookkeeping costs O(changes), not O(admitted workloads),
while staying equal to the plain sum.

Real: the pure fold (`State`), the quota tree and the engine. Faked: nothing; no I/O. The cost test counts calls to
`Snapshot.usage_of` (the per-workload step of the old per-cycle pass) rather than timing anything.
"""

from __future__ import annotations

import pytest

from daemon.domain import events as ev
from daemon.domain import quota
from daemon.domain.admission import AdmissionEngine, EngineConfig
from daemon.domain.model import (
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from daemon.domain.quota import _usage_totals
from daemon.domain.state import State


def _groups(cpu: int) -> tuple[ResourceGroup, ...]:
    quotas = (ResourceQuota(name="cpu", nominal=cpu * 1000),)
    return (ResourceGroup(covered_resources=("cpu",), flavors=(FlavorQuotas(name="rf", resources=quotas),)),)


def _job(i: int, cpu: int = 1, at: int = 0) -> Workload:
    return Workload(
        namespace="ns",
        name=f"j-{i}",
        uid=f"u{i}",
        created_at=at,
        queue_name="lq",
        pod_sets=(PodSet(name="main", count=1, requests={"cpu": cpu * 1000}),),
    )


def _setup(state: State, *, cohort: str | None, nominal: int) -> None:
    state.apply(ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="rf")))
    cq = ClusterQueue(name="cq", cohort=cohort, namespace_selector=LabelSelector(), resource_groups=_groups(nominal))
    state.apply(ev.ClusterQueueObserved(cluster_queue=cq))
    state.apply(ev.LocalQueueObserved(local_queue=LocalQueue(namespace="ns", name="lq", cluster_queue="cq")))


@pytest.mark.parametrize("fair_sharing", [False, True])
def test_a_cohort_chain_1000_deep_admits_by_borrowing_from_the_top(fair_sharing: bool) -> None:
    depth = 1000
    state = State()
    for i in range(depth):  # c0 is the root and the only cohort with quota
        parent = f"c{i - 1}" if i else None
        state.apply(
            ev.CohortObserved(cohort=Cohort(name=f"c{i}", parent=parent, resource_groups=_groups(10 if not i else 0)))
        )
    _setup(state, cohort=f"c{depth - 1}", nominal=0)
    state.apply(ev.JobObserved(workload=_job(0, cpu=10)))
    state.apply(ev.JobObserved(workload=_job(1, cpu=1, at=1)))
    decisions = AdmissionEngine(EngineConfig(fair_sharing=fair_sharing)).decide(state.view(), 5)
    admitted = [d.workload for d in decisions if isinstance(d, ev.WorkloadAdmitted)]
    pending = [d for d in decisions if isinstance(d, ev.WorkloadPending)]
    assert admitted == ["ns/j-0"]  # 10 CPUs borrowed through 1,000 cohorts; nothing left for the second
    assert [p.workload for p in pending] == ["ns/j-1"]


def test_a_cycle_above_a_deep_chain_disables_every_cohort_below_it() -> None:
    depth = 1000
    cohorts = {f"c{i}": Cohort(name=f"c{i}", parent=f"c{i - 1}" if i else f"c{depth - 1}") for i in range(depth)}
    cohorts["tail"] = Cohort(name="tail", parent="c5")
    cohorts["free"] = Cohort(name="free")
    assert quota._cohorts_in_or_under_cycles(cohorts) == set(cohorts) - {"free"}


def test_usage_bookkeeping_follows_changes_and_equals_the_plain_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 400
    calls = 0
    usage_of = quota.Snapshot.usage_of

    def counted(self: quota.Snapshot, aw: object) -> dict[tuple[str, str], int]:
        nonlocal calls
        calls += 1
        return usage_of(self, aw)  # type: ignore[arg-type]

    monkeypatch.setattr(quota.Snapshot, "usage_of", counted)
    state, engine = State(), AdmissionEngine()
    _setup(state, cohort=None, nominal=n)
    for i in range(n):  # one job per instant, as 10,000 jobs "created together" are, 1 ms apart
        state.apply(ev.JobObserved(workload=_job(i, at=i)))
        if i % 3 == 2:  # some finish, so the journal has removals too
            state.apply(ev.JobFinished(job=f"ns/j-{i - 1}", at=i))
        view = state.view()
        plain = _usage_totals(view.admitted_by_cq, lambda aw: aw.admission.usage())
        decisions = engine.decide(view, i)
        assert engine._tree is not None
        assert {cq: u for cq, u in engine._tree.totals.by_cq.items() if u} == {cq: u for cq, u in plain.items() if u}
        for d in decisions:
            state.apply(d)
    assert len(state.view().admitted) == n - n // 3
    # The old pass called usage_of for every admitted workload in every cycle: about n * n / 3 calls here.
    assert calls <= 4 * n, calls
