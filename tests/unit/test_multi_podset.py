"""Workloads of several pod sets (a PyTorchJob's master and workers, a RayJob's head and groups) in the engine.

Kueue's flavor assigner assigns pod set by pod set, counting the usage of the earlier pod sets of the same workload;
the workload is admitted whole or not at all; preemption frees room for all of its pod sets at once. Real:
`daemon.domain.admission.decide` and the fold, through the builders' `World`. Faked: the observations (builders).
"""

from __future__ import annotations

from typing import Any

from daemon.domain.admission import decide
from daemon.domain.events import Event, WorkloadAdmitted, WorkloadPending, WorkloadPreempted
from daemon.domain.model import PendingReasonKind as K
from daemon.domain.model import Shortage, Toleration
from tests.unit.builders import M, World, cq, flavor, job, lq, namespace, running, settle, taint, world

NOW = 1000


def base(*items: Any) -> World:
    return world(
        flavor("h100", gpu="h100"),
        flavor("a100", gpu="a100"),
        namespace("default"),
        lq("default", "q", "a"),
        *items,
    )


def admitted(events: list[Event]) -> dict[str, WorkloadAdmitted]:
    return {e.workload: e for e in events if isinstance(e, WorkloadAdmitted)}


def pending(events: list[Event]) -> dict[str, WorkloadPending]:
    return {e.workload: e for e in events if isinstance(e, WorkloadPending)}


def placed(e: WorkloadAdmitted) -> list[tuple[str, int, dict[str, str], dict[str, int]]]:
    return [(ps.name, ps.count, dict(ps.flavors), dict(ps.usage)) for ps in e.admission.pod_sets]


def test_the_earlier_pod_sets_usage_counts_so_the_second_lands_in_the_next_flavor() -> None:
    """master (2 GPUs) takes h100; the workers' 3 would fit h100's 4 alone, but not beside the master's 2."""
    w = base(
        cq("a").flavor("h100", gpu=4).flavor("a100", gpu=8),
        job("pt").podset("master", 1, gpu=2).podset("worker", 3, gpu=1),
    )
    events = decide(w.view(), NOW)
    assert placed(admitted(events)["default/pt"]) == [
        ("master", 1, {"gpu": "h100"}, {"gpu": 2 * M}),
        ("worker", 3, {"gpu": "a100"}, {"gpu": 3 * M}),
    ]
    w.apply(events)  # quota is held per flavor once the decision is folded
    assert w.admitted["default/pt"].admission.usage() == {("h100", "gpu"): 2 * M, ("a100", "gpu"): 3 * M}


def test_each_pod_set_follows_its_own_node_selector() -> None:
    """The head is pinned to a100 by its nodeSelector; the workers may use the first flavor, h100."""
    w = base(
        cq("a").flavor("h100", gpu=8).flavor("a100", gpu=8),
        job("ray").podset("head", 1, gpu=1, selector={"gpu": "a100"}).podset("small", 2, gpu=2),
    )
    assert placed(admitted(decide(w.view(), NOW))["default/ray"]) == [
        ("head", 1, {"gpu": "a100"}, {"gpu": 1 * M}),
        ("small", 2, {"gpu": "h100"}, {"gpu": 4 * M}),
    ]


def test_when_the_second_pod_set_does_not_fit_nothing_is_admitted() -> None:
    w = base(
        cq("a").flavor("h100", gpu=4).flavor("a100", gpu=4),
        job("pt").podset("master", 1, gpu=2).podset("worker", 3, gpu=2),
        job("small").podset("main", 1, gpu=1).at(1),
    )
    events = decide(w.view(), NOW)
    assert "default/pt" not in admitted(events)
    reason = pending(events)["default/pt"].reason
    assert reason.kind is K.EXCEEDS_MAX_QUOTA
    assert "pod set worker" in reason.message
    # The master's 2 GPUs are counted in h100 when the workers are tried there: 2 + 6 > 4.
    assert reason.shortages == (Shortage(flavor="h100", resource="gpu", requested=8 * M, available=4 * M),)
    w.apply(events)
    assert set(w.admitted) == {"default/small"}  # the master held nothing: no half admission
    assert w.admitted["default/small"].admission.usage() == {("h100", "gpu"): 1 * M}


def test_the_second_pod_set_waits_for_quota_and_the_whole_job_is_admitted_later() -> None:
    w = base(
        cq("a").flavor("h100", gpu=4),
        running(job("busy").gpus(3), "a", "h100"),
        job("pt").podset("master", 1, gpu=1).podset("worker", 2, gpu=1),
    )
    events = decide(w.view(), NOW)
    assert pending(events)["default/pt"].reason.kind is K.WAITING_FOR_QUOTA
    w.apply(events)
    w.finish("default/busy")
    events = settle(w, NOW + 1)
    assert placed(admitted(events)["default/pt"]) == [
        ("master", 1, {"gpu": "h100"}, {"gpu": 1 * M}),
        ("worker", 2, {"gpu": "h100"}, {"gpu": 2 * M}),
    ]


def test_preemption_frees_room_for_all_pod_sets_at_once() -> None:
    """8 GPUs, 6 held by two low-priority jobs of 3. The PyTorchJob needs 2 + 4 = 6: one victim would leave room
    for either pod set alone (5 free), only both victims leave room for the two together."""
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=8),
        running(job("low-1").gpus(3).priority(1), "a", "h100", at=1),
        running(job("low-2").gpus(3).priority(1), "a", "h100", at=2),
        job("pt").priority(100).podset("master", 1, gpu=2).podset("worker", 2, gpu=2),
    )
    first = decide(w.view(), NOW)
    victims = {e.workload: e for e in first if isinstance(e, WorkloadPreempted)}
    assert set(victims) == {"default/low-1", "default/low-2"}
    assert all(v.preemptor == "default/pt" for v in victims.values())
    assert "default/pt" not in admitted(first)
    w.apply(first)
    for key in victims:
        w.evict(key, NOW)
    events = settle(w, NOW + 1)
    assert placed(admitted(events)["default/pt"]) == [
        ("master", 1, {"gpu": "h100"}, {"gpu": 2 * M}),
        ("worker", 2, {"gpu": "h100"}, {"gpu": 4 * M}),
    ]


def test_preemption_takes_only_what_the_pod_sets_together_need() -> None:
    """2 + 2 = 4 GPUs are needed and 2 are free: one victim of 3 is enough, the other keeps running."""
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=8),
        running(job("low-1").gpus(3).priority(1), "a", "h100", at=1),
        running(job("low-2").gpus(3).priority(1), "a", "h100", at=2),
        job("pt").priority(100).podset("master", 1, gpu=2).podset("worker", 1, gpu=2),
    )
    victims = [e.workload for e in decide(w.view(), NOW) if isinstance(e, WorkloadPreempted)]
    assert victims == ["default/low-2"]  # the newer of equal priority goes first, as in Kueue


def test_a_whole_multi_pod_set_job_is_preempted_as_one() -> None:
    """A running PyTorchJob is one victim: its eviction releases the quota of both its pod sets."""
    pt = job("pt").priority(1).podset("master", 1, gpu=2).podset("worker", 2, gpu=3)
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=8),
        running(pt, "a", "h100"),
        job("urgent").priority(100).gpus(8),
    )
    events = settle(w, NOW)
    assert [e.workload for e in events if isinstance(e, WorkloadPreempted)] == ["default/pt"]
    assert "default/urgent" in admitted(events)
    assert set(w.admitted) == {"default/urgent"}


# --- Kueue's flavor-assigner cases with several pod sets (pkg/scheduler/flavorassigner/flavorassigner_test.go) ----

GI = 2**30


def test_kueue_multiple_specs_fit_different_flavors() -> None:
    """driver 5 CPUs, worker 3: flavor one (4) cannot hold the driver, two (10) can; the worker then fits one."""
    w = world(
        flavor("one"),
        flavor("two"),
        namespace("default"),
        lq("default", "q", "a"),
        cq("a").flavor("one", cpu=4).flavor("two", cpu=10),
        job("wl").podset("driver", 1, cpu=5).podset("worker", 1, cpu=3),
    )
    assert placed(admitted(decide(w.view(), NOW))["default/wl"]) == [
        ("driver", 1, {"cpu": "two"}, {"cpu": 5 * M}),
        ("worker", 1, {"cpu": "one"}, {"cpu": 3 * M}),
    ]


def test_kueue_multiple_specs_fit_borrowing() -> None:
    """4 + 6 CPUs and 1 + 4 Gi against a nominal 2 CPUs and 2 Gi: both pod sets borrow from the cohort, and the
    admission holds 10 CPUs and 5 Gi."""
    w = world(
        flavor("default"),
        namespace("default"),
        lq("default", "q", "a"),
        cq("a").cohort("c").flavor("default", cpu=2, memory=2 * GI, borrow={"cpu": 98}),
        cq("b").cohort("c").flavor("default", cpu=198, memory=198 * GI),
        job("wl").podset("driver", 1, cpu=4, memory=GI).podset("worker", 1, cpu=6, memory=4 * GI),
    )
    event = admitted(decide(w.view(), NOW))["default/wl"]
    assert event.admission.usage() == {("default", "cpu"): 10 * M, ("default", "memory"): 5 * GI * M}
    assert {(b.resource, b.amount) for b in event.borrowed} == {("cpu", 8 * M), ("memory", 3 * GI * M)}


def test_kueue_each_pod_set_requires_preemption_on_a_different_flavor() -> None:
    """launcher 2 CPUs preempts in flavor one (3 of 4 used); 10 workers, which tolerate the spot taint, cannot go
    to one (2 + 10 > 4) and preempt in tainted (3 of 10 used): victims in both flavors, for one workload."""
    spot = Toleration(key="instance", operator="Equal", value="spot", effect="NoSchedule")
    w = world(
        flavor("one"),
        flavor("tainted", taints=[taint("instance", "spot")]),
        namespace("default"),
        lq("default", "q", "a"),
        cq("a").preempt(within="LowerPriority").flavor("one", cpu=4).flavor("tainted", cpu=10),
        running(job("on-one").cpus(3).priority(1), "a", "one"),
        running(job("on-tainted").podset("main", 3, cpu=1, tolerations=[spot]).priority(1), "a", "tainted"),
        job("wl").priority(100).podset("launcher", 1, cpu=2).podset("workers", 10, cpu=1, tolerations=[spot]),
    )
    events = decide(w.view(), NOW)
    victims = {e.workload for e in events if isinstance(e, WorkloadPreempted)}
    assert victims == {"default/on-one", "default/on-tainted"}
    w.apply(events)
    for key in victims:
        w.evict(key, NOW)
    assert placed(admitted(settle(w, NOW + 1))["default/wl"]) == [
        ("launcher", 1, {"cpu": "one"}, {"cpu": 2 * M}),
        ("workers", 10, {"cpu": "tainted"}, {"cpu": 10 * M}),
    ]
