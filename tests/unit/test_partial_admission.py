"""Partial admission (Kueue's PodSet.minCount, a Job's kueue.x-k8s.io/job-min-parallelism): the engine's rule, its
binary search, and what the decision records.

Real: `daemon.domain.admission` (decide, settle) with `daemon.domain.flavors.search_counts`, on the real fold fed
by the builders' `World`. Faked: observations come from builders, not a cluster; time is a fixed integer.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.domain.admission import EngineConfig, decide
from daemon.domain.events import Event, WorkloadAdmitted, WorkloadPending, WorkloadPreempted
from daemon.domain.flavors import search_counts
from daemon.domain.model import PendingReasonKind as K
from daemon.domain.model import PodSet, Workload
from daemon.manifests import BatchJobAdapter, ManifestError
from tests.unit.builders import M, World, cohort, cq, flavor, job, lq, namespace, running, settle, world

NOW = 1000


def base(*items: Any) -> World:
    return world(flavor("h100"), namespace("default"), lq("default", "q", "a"), lq("default", "qb", "b"), *items)


def admitted(events: list[Event]) -> dict[str, WorkloadAdmitted]:
    return {e.workload: e for e in events if isinstance(e, WorkloadAdmitted)}


def pending(events: list[Event]) -> dict[str, WorkloadPending]:
    return {e.workload: e for e in events if isinstance(e, WorkloadPending)}


def preempted(events: list[Event]) -> dict[str, WorkloadPreempted]:
    return {e.workload: e for e in events if isinstance(e, WorkloadPreempted)}


def counts(e: WorkloadAdmitted) -> dict[str, int]:
    return {ps.name: ps.count for ps in e.admission.pod_sets}


CASES = [
    pytest.param(
        [cq("a").flavor("h100", gpu=8), running(job("r").gpus(1, pods=5), "a", "h100")],
        job("j").gpus(1, pods=6).min(2),
        3,
        id="what is free (3 of 6 pods) is admitted",
    ),
    pytest.param(
        [cq("a").flavor("h100", gpu=8)],
        job("j").gpus(1, pods=6).min(2),
        6,
        id="the full count when it fits",
    ),
    pytest.param(
        [cq("a").flavor("h100", gpu=8)],
        job("j").gpus(1, pods=12).min(4),
        8,
        id="a job larger than the queue could ever hold runs with what it holds",
    ),
    pytest.param(
        [cq("a").flavor("h100", gpu=8), running(job("r").gpus(1, pods=7), "a", "h100")],
        job("j").gpus(2, pods=4).min(1),
        None,
        id="not even the minimum fits (1 pod of 2 GPUs, 1 GPU free)",
    ),
    pytest.param(
        [cq("a").flavor("h100", gpu=8), running(job("r").gpus(1, pods=5), "a", "h100")],
        job("j").gpus(1, pods=6).min(4),
        None,
        id="the minimum (4) is more than is free (3)",
    ),
    pytest.param(
        [
            cq("a").cohort("c").flavor("h100", gpu=4),
            cq("b").cohort("c").flavor("h100", gpu=4),
            running(job("r").queue("qb").gpus(1, pods=2), "b", "h100"),
        ],
        job("j").gpus(1, pods=8).min(1),
        6,
        id="borrowing counts: what the cohort has free",
    ),
]


@pytest.mark.parametrize(("queues", "jb", "expected"), CASES)
def test_largest_count_that_fits(queues: list[Any], jb: Any, expected: int | None) -> None:
    events = decide(base(*queues, jb).view(), NOW)
    if expected is None:
        assert jb.key not in admitted(events)
        assert pending(events)[jb.key].reason.kind in (K.WAITING_FOR_QUOTA, K.EXCEEDS_MAX_QUOTA)
        return
    got = admitted(events)[jb.key]
    assert counts(got) == {"main": expected}
    assert got.admission.usage() == {("h100", "gpu"): expected * jb.pod_sets[0].requests["gpu"]}


def test_without_the_annotation_the_job_waits_whole() -> None:
    w = base(cq("a").flavor("h100", gpu=8), running(job("r").gpus(1, pods=5), "a", "h100"), job("j").gpus(1, pods=6))
    events = decide(w.view(), NOW)
    assert "default/j" not in admitted(events)
    assert pending(events)["default/j"].reason.kind is K.WAITING_FOR_QUOTA


def test_the_feature_gate_off_admits_nothing_partially() -> None:
    w = base(
        cq("a").flavor("h100", gpu=8),
        running(job("r").gpus(1, pods=5), "a", "h100"),
        job("j").gpus(1, pods=6).min(2),
    )
    events = decide(w.view(), NOW, EngineConfig(partial_admission=False))
    assert "default/j" not in admitted(events)


def test_preemption_at_the_full_count_comes_before_fewer_pods() -> None:
    """Kueue's rule: reduce only when the full count can be admitted neither as it is nor by preempting."""
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=8),
        running(job("low").gpus(1, pods=4), "a", "h100"),
        job("high").gpus(1, pods=8).min(2).priority(10).at(5),
    )
    events = settle(w)
    assert "default/low" in preempted(events)
    assert counts(admitted(events)["default/high"]) == {"main": 8}


def test_fewer_pods_when_preemption_at_the_full_count_finds_no_victims() -> None:
    """The running job has the same priority (no victim), so the full count waits; 4 of 8 pods fit as things are."""
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=8),
        running(job("peer").gpus(1, pods=4), "a", "h100"),
        job("j").gpus(1, pods=8).min(2).at(5),
    )
    events = decide(w.view(), NOW)
    assert not preempted(events)
    assert counts(admitted(events)["default/j"]) == {"main": 4}


def test_a_reduced_count_may_preempt() -> None:
    """8 pods would need both running jobs gone, but only `low` may be preempted: the largest count that preempting
    `low` makes room for (4) is chosen, and admitted once `low` is gone."""
    w = base(
        cq("a").preempt(within="LowerPriority").flavor("h100", gpu=8),
        running(job("low").gpus(1, pods=4), "a", "h100"),
        running(job("peer").gpus(1, pods=4).priority(10), "a", "h100"),
        job("j").gpus(1, pods=8).min(1).priority(10).at(5),
    )
    events = settle(w)
    assert set(preempted(events)) == {"default/low"}
    assert counts(admitted(events)["default/j"]) == {"main": 4}


def test_a_readmission_starts_from_the_full_count() -> None:
    """The fold keeps the job as it was created: after an eviction it is assessed at its full count again."""
    w = base(
        cq("a").flavor("h100", gpu=8), running(job("r").gpus(1, pods=5), "a", "h100"), job("j").gpus(1, pods=6).min(2)
    )
    first = admitted(settle(w))["default/j"]
    assert counts(first) == {"main": 3}
    assert w.state.workloads["default/j"].workload.pod_sets[0].count == 6
    w.apply(
        [
            WorkloadPreempted(
                workload="default/j",
                at=NOW,
                cluster_queue="a",
                preemptor=None,
                preemptor_cluster_queue=None,
                reason="ClusterQueueStopped",
                policy="",
            )
        ]
    )
    w.evict("default/j", NOW)
    w.finish("default/r")
    assert counts(admitted(settle(w, now=NOW + 1))["default/j"]) == {"main": 6}


def test_partial_admission_in_a_fair_sharing_cohort() -> None:
    w = base(
        cohort("c"),
        cq("a").cohort("c").flavor("h100", gpu=4),
        cq("b").cohort("c").flavor("h100", gpu=4),
        running(job("r").queue("qb").gpus(1, pods=4), "b", "h100"),
        job("j").gpus(1, pods=8).min(2),
    )
    events = decide(w.view(), NOW, EngineConfig(fair_sharing=True))
    assert counts(admitted(events)["default/j"]) == {"main": 4}
    assert admitted(events)["default/j"].admission.usage() == {("h100", "gpu"): 4 * M}


def _workload(*pod_sets: tuple[int, int | None]) -> Workload:
    return Workload(
        namespace="ns",
        name="w",
        uid="u",
        created_at=0,
        queue_name="q",
        pod_sets=tuple(
            PodSet(name=f"p{i}", count=c, min_count=m, requests={"cpu": 1000}) for i, (c, m) in enumerate(pod_sets)
        ),
    )


@given(st.integers(1, 64), st.integers(1, 64), st.integers(0, 70))
def test_search_finds_the_largest_count_under_a_monotone_test(count: int, minimum: int, room: int) -> None:
    minimum = min(minimum, count)
    tried: list[int] = []

    def fits(c: tuple[int, ...]) -> int | None:
        tried.append(c[0])
        return c[0] if c[0] <= room else None

    got = search_counts(_workload((count, minimum)), fits)
    if minimum == count:
        assert got is None and not tried  # nothing to reduce
    elif room >= minimum:
        assert got == min(count, room)
    else:
        assert got is None
    assert len(tried) <= (count - minimum + 1).bit_length() + 1  # a binary search, not a scan


def test_search_steps_every_pod_set_in_proportion() -> None:
    """Kueue's PodSetReducer: pod sets step down together, each by its share of the total slack."""
    seen: list[tuple[int, ...]] = []

    def fits(c: tuple[int, ...]) -> tuple[int, ...] | None:
        seen.append(c)
        return c if sum(c) <= 14 else None

    got = search_counts(_workload((8, 4), (6, None), (4, 0)), fits)
    assert got == (6, 6, 2)  # slack 4 + 0 + 4: at step 4 of 8, each has given half of its slack
    assert all(c[1] == 6 for c in seen)


# --- the Job adapter: kueue.x-k8s.io/job-min-parallelism --------------------------------------------------------------


def _job(parallelism: int = 8, completions: int | None = None, **annotations: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
    }
    if completions is not None:
        spec["completions"] = completions
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
            "annotations": {k.replace("__", "/").replace("_", "-"): v for k, v in annotations.items()},
        },
        "spec": spec,
    }


MIN = "kueue.x-k8s.io__job_min_parallelism"
FULL = "admitd.io__full_parallelism"


@pytest.mark.parametrize(
    ("obj", "count", "min_count"),
    [
        pytest.param(_job(8), 8, None, id="no annotation: all or nothing"),
        pytest.param(_job(8, **{MIN: "3"}), 8, 3, id="min-parallelism 3 of 8"),
        pytest.param(_job(8, 6, **{MIN: "5"}), 6, 5, id="the pod count is min(parallelism, completions)"),
        pytest.param(_job(8, **{MIN: "+7"}), 8, 7, id="read as Go's Atoi reads it"),
        pytest.param(_job(3, **{MIN: "2", FULL: "8"}), 8, 2, id="running with fewer pods: the full count is read back"),
        pytest.param(_job(8, **{MIN: "2", FULL: ""}), 8, 2, id="suspended again: the full count is the Job's"),
    ],
)
def test_the_adapter_reads_the_minimum(obj: dict[str, Any], count: int, min_count: int | None) -> None:
    ps = BatchJobAdapter().to_workload(obj, created_at=0, uid="u").pod_sets[0]
    assert (ps.count, ps.min_count) == (count, min_count)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param(_job(8, **{MIN: "two"}), "must be an integer", id="not a number"),
        pytest.param(_job(8, **{MIN: "0"}), "must be from 1 to 7", id="zero"),
        pytest.param(_job(8, **{MIN: "-1"}), "must be from 1 to 7", id="negative"),
        pytest.param(_job(8, **{MIN: "8"}), "must be from 1 to 7", id="the full count (Kueue rejects it too)"),
        pytest.param(_job(8, 4, **{MIN: "5"}), "must be from 1 to 3", id="more than the completions"),
        pytest.param(_job(1, **{MIN: "1"}), "at least 2 pods", id="a one-pod Job"),
        pytest.param(_job(8, **{MIN: " 3"}), "must be an integer", id="a space"),
        pytest.param(_job(8, **{FULL: "4"}), "admitd.io/full-parallelism", id="a full count below the running count"),
    ],
)
def test_a_bad_annotation_is_a_clear_error(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError) as info:
        BatchJobAdapter().to_workload(obj, created_at=0, uid="u")
    text = str(info.value)
    assert message in text
    assert "ml/train" in text or "train" in text
    if "full" not in message:
        assert "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]" in text


# --- properties ---------------------------------------------------------------------------------------------------


@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(0, 2)),
        min_size=1,
        max_size=8,
    ),
    st.integers(2, 12),
    st.booleans(),
)
def test_partial_admissions_stay_within_quota_and_bounds(
    specs: list[tuple[int, int, int, int]], quota: int, preempting: bool
) -> None:
    """Every admission's count lies between the pod set's minimum and its full count, the queue never holds more
    than its quota, and a cycle over the settled state admits nothing more."""
    queue = cq("a").flavor("h100", gpu=quota)
    if preempting:
        queue = queue.preempt(within="LowerPriority")
    jobs = []
    for i, (pods, minimum, gpus, prio) in enumerate(specs):
        jb = job(f"j{i}").gpus(gpus, pods=pods).priority(prio * 10).at(i)
        if minimum < pods:
            jb = jb.min(minimum)
        jobs.append(jb)
    w = base(queue, *jobs)
    events = settle(w)
    for e in events:
        if isinstance(e, WorkloadAdmitted):
            ps = w.state.workloads[e.workload].workload.pod_sets[0]
            (got,) = e.admission.pod_sets
            assert (ps.min_count or ps.count) <= got.count <= ps.count
    used = sum(aw.admission.usage().get(("h100", "gpu"), 0) for aw in w.view().admitted.values())
    assert used <= quota * M
    assert not [e for e in decide(w.view(), NOW) if isinstance(e, WorkloadAdmitted | WorkloadPreempted)]
