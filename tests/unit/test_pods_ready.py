"""waitForPodsReady: the Configuration section, the backoff, the time-driven decisions, the fold and blockAdmission.

Real: daemon.manifests.config, daemon.domain.podsready, the fold (daemon.domain.state) and the engine's cycle
(daemon.domain.admission.decide), the observer's reading of a Job's status (daemon.kube.observe). Faked: nothing; the
world is fed with builder-made events and the engine's own decisions, and time is passed as numbers.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from daemon.domain import events as ev
from daemon.domain import podsready
from daemon.domain.admission import EngineConfig, decide
from daemon.domain.model import PendingReasonKind as K
from daemon.domain.podsready import RequeueTimestamp, WaitForPodsReady
from daemon.domain.state import State
from daemon.kube import status_objects as so
from daemon.kube.client import KubeClient
from daemon.kube.observe import Observer
from daemon.kube.status import StatusWriter
from daemon.manifests import ManifestError
from daemon.manifests.config import parse_config
from daemon.stages.admit import Admit
from daemon.stages.ports import Observed
from tests.unit.builders import World, cq, flavor, job, lq, namespace, world

V1B1 = "config.kueue.x-k8s.io/v1beta1"
V1B2 = "config.kueue.x-k8s.io/v1beta2"
MIN = 60_000


def doc(section: object, api: str = V1B1) -> dict[str, object]:
    return {"apiVersion": api, "kind": "Configuration", "waitForPodsReady": section}


# --- the Configuration section --------------------------------------------------------------------------------------


def test_kueue_defaults_apply_when_only_enabled() -> None:
    config, warnings = parse_config(doc({"enable": True}))
    assert config.wait_for_pods_ready == WaitForPodsReady(
        timeout=5 * MIN,
        block_admission=True,
        requeue_timestamp=RequeueTimestamp.EVICTION,
        backoff_limit_count=None,
        backoff_base_seconds=60,
        backoff_max_seconds=3600,
    )
    assert warnings == ()


def test_every_field_is_read() -> None:
    config, _ = parse_config(
        doc(
            {
                "enable": True,
                "timeout": "90s",
                "blockAdmission": False,
                "requeuingStrategy": {
                    "timestamp": "Creation",
                    "backoffLimitCount": 3,
                    "backoffBaseSeconds": 10,
                    "backoffMaxSeconds": 100,
                },
            }
        )
    )
    assert config.wait_for_pods_ready == WaitForPodsReady(
        timeout=90_000,
        block_admission=False,
        requeue_timestamp=RequeueTimestamp.CREATION,
        backoff_limit_count=3,
        backoff_base_seconds=10,
        backoff_max_seconds=100,
    )


@pytest.mark.parametrize(
    ("section", "api", "on"),
    [
        (None, V1B1, False),
        ({"timeout": "1m"}, V1B1, False),
        ({"enable": False}, V1B1, False),
        ({"timeout": "1m"}, V1B2, True),
        ({"enable": False}, V1B2, False),
    ],
    ids=[
        "absent-is-off",
        "v1beta1-needs-enable-true",
        "v1beta1-enable-false-is-off",
        "v1beta2-a-section-switches-it-on",
        "v1beta2-enable-false-still-wins",
    ],
)
def test_switched_on_as_kueue_switches_it(section: object, api: str, on: bool) -> None:
    config, _ = parse_config(doc(section, api))
    assert (config.wait_for_pods_ready is not None) is on


@pytest.mark.parametrize(
    ("section", "field", "needle"),
    [
        ("yes", "waitForPodsReady", "must be a mapping"),
        ({"enable": "yes"}, "waitForPodsReady.enable", "true or false"),
        ({"enable": True, "timeout": 300}, "waitForPodsReady.timeout", "duration"),
        ({"enable": True, "timeout": "5 minutes"}, "waitForPodsReady.timeout", "not a Go duration"),
        ({"enable": True, "timeout": "0s"}, "waitForPodsReady.timeout", "longer than 0"),
        ({"enable": True, "blockAdmission": "no"}, "waitForPodsReady.blockAdmission", "true or false"),
        ({"enable": True, "requeuingStrategy": []}, "waitForPodsReady.requeuingStrategy", "mapping"),
        (
            {"enable": True, "requeuingStrategy": {"timestamp": "Admission"}},
            "waitForPodsReady.requeuingStrategy.timestamp",
            "Eviction, Creation",
        ),
        (
            {"enable": True, "requeuingStrategy": {"backoffLimitCount": -1}},
            "waitForPodsReady.requeuingStrategy.backoffLimitCount",
            "whole number",
        ),
        (
            {"enable": True, "requeuingStrategy": {"backoffBaseSeconds": 1.5}},
            "waitForPodsReady.requeuingStrategy.backoffBaseSeconds",
            "whole number",
        ),
    ],
    ids=[
        "not-a-mapping",
        "enable-not-a-bool",
        "timeout-not-a-string",
        "timeout-not-a-duration",
        "timeout-zero",
        "blockAdmission-not-a-bool",
        "requeuingStrategy-not-a-mapping",
        "unknown-timestamp",
        "negative-limit",
        "fractional-base",
    ],
)
def test_a_bad_field_is_named(section: object, field: str, needle: str) -> None:
    with pytest.raises(ManifestError) as e:
        parse_config(doc(section), "kueue.yaml")
    assert e.value.field == field
    assert needle in str(e.value)
    assert "kueue.yaml" in str(e.value)


def test_what_admitd_does_not_implement_is_named() -> None:
    _, warnings = parse_config(doc({"enable": True, "recoveryTimeout": "3m", "requeuingStrategy": {"x": 1}}), "k.yaml")
    assert any("waitForPodsReady.recoveryTimeout is not implemented" in w for w in warnings)
    assert any("waitForPodsReady.requeuingStrategy.x is not implemented" in w for w in warnings)


# --- the backoff ----------------------------------------------------------------------------------------------------


def test_backoff_doubles_from_the_base_up_to_the_cap_without_jitter() -> None:
    default = WaitForPodsReady()
    assert [default.backoff(n) for n in range(1, 9)] == [
        60_000,
        120_000,
        240_000,
        480_000,
        960_000,
        1_920_000,
        3_600_000,
        3_600_000,
    ]
    small = WaitForPodsReady(backoff_base_seconds=10, backoff_max_seconds=25)
    assert [small.backoff(n) for n in (1, 2, 3, 1000)] == [10_000, 20_000, 25_000, 25_000]


# --- the fold, the decisions and the cycle ---------------------------------------------------------------------------

CFG = WaitForPodsReady(timeout=5 * MIN, backoff_limit_count=2)


def team(*items: Any) -> World:
    return world(
        flavor("gpu"), namespace("default"), cq("team").flavor("gpu", gpu=8), lq("default", "q", "team"), *items
    )


def step(w: World, now: int, cfg: WaitForPodsReady = CFG) -> list[ev.Event]:
    """What the admit stage does at `now`: the due timeouts and requeues, then a cycle; the simulated cluster stops
    a timed-out workload at once."""
    out = podsready.decide(w.view(), now, cfg)
    w.apply(out)
    for e in out:
        if isinstance(e, ev.WorkloadTimedOut):
            w.apply([ev.WorkloadEvicted(workload=e.workload, at=now, reason=e.reason)])
    cycle = decide(w.view(), now, EngineConfig(wait_for_pods_ready=cfg))
    w.apply(cycle)
    return out + cycle


def kinds(events: list[ev.Event], key: str) -> list[str]:
    return [type(e).__name__ for e in events if getattr(e, "workload", None) == key]


def test_a_workload_not_ready_in_time_is_evicted_requeued_after_backoff_and_deactivated_past_the_limit() -> None:
    w = team(job("stuck").gpus(4))
    key = "default/stuck"
    assert kinds(step(w, 0), key) == ["WorkloadAdmitted"]
    assert podsready.next_due(w.view(), CFG) == 5 * MIN
    assert step(w, 5 * MIN - 1) == []  # not yet
    out = step(w, 5 * MIN)
    timed_out = next(e for e in out if isinstance(e, ev.WorkloadTimedOut))
    assert (timed_out.reason, timed_out.timeouts, timed_out.requeue_at) == ("PodsReadyTimeout", 1, 6 * MIN)
    # Held out of its queue during the backoff, with the reason written once.
    reason = w.state.workloads[key].last_reason
    assert reason is not None and reason.kind is K.REQUEUE_BACKOFF
    assert podsready.next_due(w.view(), CFG) == 6 * MIN
    assert step(w, 6 * MIN - 1) == []
    assert kinds(step(w, 6 * MIN), key) == ["WorkloadRequeued", "WorkloadAdmitted"]
    # Second timeout: the backoff doubles.
    out = step(w, 11 * MIN)
    timed_out = next(e for e in out if isinstance(e, ev.WorkloadTimedOut))
    assert (timed_out.timeouts, timed_out.requeue_at) == (2, 13 * MIN)
    assert kinds(step(w, 13 * MIN), key) == ["WorkloadRequeued", "WorkloadAdmitted"]
    # Third: past backoffLimitCount=2, deactivated and never requeued.
    out = step(w, 18 * MIN)
    timed_out = next(e for e in out if isinstance(e, ev.WorkloadTimedOut))
    assert (timed_out.reason, timed_out.deactivated, timed_out.requeue_at) == ("InactiveWorkload", True, None)
    reason = w.state.workloads[key].last_reason
    assert reason is not None and reason.kind is K.DEACTIVATED
    assert podsready.next_due(w.view(), CFG) is None
    assert step(w, 1000 * MIN) == []


def test_a_workload_ready_in_time_is_never_evicted() -> None:
    w = team(job("fine").gpus(4))
    step(w, 0)
    w.apply([ev.JobReady(job="default/fine", at=2 * MIN)])
    assert podsready.next_due(w.view(), CFG) is None
    assert step(w, 5 * MIN) == []
    assert "default/fine" in w.admitted and not w.admitted["default/fine"].evicting


def test_block_admission_holds_others_until_the_admitted_one_is_ready() -> None:
    w = team(job("a").gpus(2).at(1), job("b").gpus(2).at(2), job("c").gpus(2).at(3))
    out = step(w, 0)
    assert sorted(e.workload for e in out if isinstance(e, ev.WorkloadAdmitted)) == ["default/a"]
    waiting = {e.workload: e.reason.kind for e in out if isinstance(e, ev.WorkloadPending)}
    assert waiting == {"default/b": K.WAITING_FOR_PODS_READY}
    assert step(w, 1) == []  # nothing changed: nothing more
    w.apply([ev.JobReady(job="default/a", at=2)])
    assert [e.workload for e in step(w, 2) if isinstance(e, ev.WorkloadAdmitted)] == ["default/b"]
    w.apply([ev.JobReady(job="default/b", at=3)])
    assert [e.workload for e in step(w, 3) if isinstance(e, ev.WorkloadAdmitted)] == ["default/c"]


def test_without_block_admission_everything_that_fits_is_admitted_at_once() -> None:
    w = team(job("a").gpus(2).at(1), job("b").gpus(2).at(2), job("c").gpus(2).at(3))
    out = step(w, 0, WaitForPodsReady(block_admission=False))
    assert sorted(e.workload for e in out if isinstance(e, ev.WorkloadAdmitted)) == [
        "default/a",
        "default/b",
        "default/c",
    ]


def test_a_timed_out_workload_holds_admissions_until_its_quota_is_released() -> None:
    w = team(job("stuck").gpus(4).at(1), job("next").gpus(4).at(2))
    step(w, 0)
    timed = podsready.decide(w.view(), 5 * MIN, CFG)
    w.apply(timed)  # stopping, not yet evicted: still not ready, still blocking
    cycle = decide(w.view(), 5 * MIN, EngineConfig(wait_for_pods_ready=CFG))
    assert not [e for e in cycle if isinstance(e, ev.WorkloadAdmitted)]
    w.apply([*cycle, ev.WorkloadEvicted(workload="default/stuck", at=5 * MIN, reason="PodsReadyTimeout")])
    cycle = decide(w.view(), 5 * MIN, EngineConfig(wait_for_pods_ready=CFG))
    assert [e.workload for e in cycle if isinstance(e, ev.WorkloadAdmitted)] == ["default/next"]


def test_eviction_timestamp_puts_a_requeued_workload_behind_creation_keeps_its_place() -> None:
    for stamp, first in ((RequeueTimestamp.EVICTION, "default/other"), (RequeueTimestamp.CREATION, "default/stuck")):
        cfg = WaitForPodsReady(timeout=MIN, backoff_base_seconds=1, requeue_timestamp=stamp, block_admission=False)
        w = team(job("stuck").gpus(4).at(1), job("filler").gpus(4).at(2), job("taker").gpus(4).at(5))
        w.add(job("other").gpus(8).at(10))
        step(w, 0, cfg)
        w.apply([ev.JobReady(job="default/filler", at=0)])
        step(w, MIN, cfg)  # stuck times out; taker takes its place
        w.apply([ev.JobReady(job="default/taker", at=MIN)])
        step(w, MIN + 1000, cfg)  # stuck is back in its queue; no room
        w.apply(
            [ev.JobFinished(job="default/filler", at=MIN + 2000), ev.JobFinished(job="default/taker", at=MIN + 2000)]
        )
        out = step(w, MIN + 2000, cfg)
        assert [e.workload for e in out if isinstance(e, ev.WorkloadAdmitted)] == [first], stamp


def test_the_backoff_state_survives_a_snapshot() -> None:
    w = team(job("stuck").gpus(4))
    step(w, 0)
    step(w, 5 * MIN)
    again = State.from_snapshot(w.state.to_snapshot())
    assert dict(again.view().backoff or {}) == dict(w.view().backoff or {}) == {"default/stuck": 6 * MIN}
    assert again.to_snapshot() == w.state.to_snapshot()


# --- the observer: a Job's status.ready -----------------------------------------------------------------------------


def raw_job(ready: int, succeeded: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "default",
            "uid": "u1",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
            "creationTimestamp": "2026-12-01T00:00:00Z",
        },
        "spec": {
            "suspend": False,
            "parallelism": 3,
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}},
        },
        "status": {"active": 3, "ready": ready, "succeeded": succeeded},
    }


@pytest.mark.parametrize(("ready", "succeeded", "reported"), [(2, 0, False), (3, 0, True), (1, 2, True)])
def test_the_observer_reports_ready_when_ready_and_succeeded_pods_reach_the_admitted_count(
    ready: int, succeeded: int, reported: bool
) -> None:
    w = team(job("train").gpus(1, pods=3))
    step(w, 0)
    sent: list[Observed] = []
    observer = Observer(w.state, sent.append, _Clock(), pods_ready=True)
    observer.job_event("MODIFIED", raw_job(ready, succeeded))
    got = [e for o in sent for e in o.events if isinstance(e, ev.JobReady)]
    assert got == ([ev.JobReady(job="default/train", at=7)] if reported else [])
    observer.job_event("MODIFIED", raw_job(ready, succeeded))  # the same status again: not a second fact
    assert len([e for o in sent for e in o.events if isinstance(e, ev.JobReady)]) == len(got)


def test_the_observer_says_nothing_about_readiness_without_wait_for_pods_ready() -> None:
    w = team(job("train").gpus(1, pods=3))
    step(w, 0)
    sent: list[Observed] = []
    Observer(w.state, sent.append, _Clock()).job_event("MODIFIED", raw_job(3))
    assert not [e for o in sent for e in o.events if isinstance(e, ev.JobReady)]


class _Clock:
    def now(self) -> int:
        return 7


# --- the admit stage: waking at the deadlines -----------------------------------------------------------------------


class _Recorder:
    """Appends to the real fold, as the real recorder does once the rows are written."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.seq = 0

    async def append(self, items: list[tuple[ev.Event, int | None]]) -> list[int]:
        seqs = []
        for event, _ in items:
            self.seq += 1
            self.state.apply(event, self.seq)
            seqs.append(self.seq)
        return seqs


class _Engine:
    retry_at = None

    def decide(self, view: Any, now: int) -> list[ev.Event]:
        return []


class _At:
    def __init__(self, at: int) -> None:
        self.at = at

    def now(self) -> int:
        return self.at


def test_the_admit_stage_has_work_at_a_timeout_and_records_it_without_any_observation() -> None:
    w = team(job("stuck").gpus(4))
    step(w, 0)
    clock = _At(5 * MIN - 1)
    orders: list[object] = []
    stage = Admit(_Recorder(w.state), _Engine(), clock, orders.append, pods_ready=CFG)  # type: ignore[arg-type]
    assert stage.next_due() == 5 * MIN
    assert not stage.has_work()
    clock.at = 5 * MIN
    assert stage.has_work()
    asyncio.run(stage.step())
    assert w.state.workloads["default/stuck"].evicting
    assert [getattr(o, "reason", None) for o in orders] == ["PodsReadyTimeout"]  # handed to actuate
    assert not stage.has_work()  # the timeout is recorded: nothing due until the end of the backoff
    assert stage.next_due() is None  # stopping, not yet evicted: no deadline


def test_a_standby_replica_does_not_wake_for_deadlines() -> None:
    w = team(job("stuck").gpus(4))
    step(w, 0)
    stage = Admit(_Recorder(w.state), _Engine(), _At(10 * MIN), lambda order: None, pods_ready=CFG)  # type: ignore[arg-type]
    stage.gate = lambda: False
    assert stage.next_due() is None
    assert not stage.has_work()


# --- what users see on the Workload object and in Events ------------------------------------------------------------


def test_a_timed_out_workload_shows_evicted_pods_ready_timeout_not_preempted() -> None:
    w = team(job("stuck").gpus(4))
    status = StatusWriter(cast(KubeClient, None), w.state, clock=cast(Any, None), monotonic=lambda: 0.0)
    status.listener(ev.JobObserved(workload=job("stuck").gpus(4).obj()), 1)
    admitted = step(w, 0)
    timed = podsready.decide(w.view(), 5 * MIN, CFG)
    w.apply(timed)
    started = ev.JobUnsuspended(job="default/stuck", at=1, decision=10, placements=())
    for seq, event in enumerate([*admitted, started, *timed], start=10):
        status.listener(event, seq)
    assert [e.reason for e in status._events.values()] == ["Admitted", "EvictedDueToPodsReadyTimeout"]
    facts = status._facts("default/stuck", status._jobs["default/stuck"])
    assert facts is not None
    conds = {c["type"]: c for c in so.workload_status(facts, None, "2026-12-01T00:00:00Z")["conditions"]}
    assert (conds["Evicted"]["status"], conds["Evicted"]["reason"]) == ("True", "PodsReadyTimeout")
    assert conds["Evicted"]["message"] == "Exceeded the PodsReady timeout (waitForPodsReady)"
    assert "Preempted" not in conds


def test_no_deadline_is_followed_while_the_fold_may_lag_behind_the_cluster() -> None:
    w = team(job("stuck").gpus(4))
    step(w, 0)
    open_ = False
    stage = Admit(_Recorder(w.state), _Engine(), _At(10 * MIN), lambda order: None, pods_ready=CFG)  # type: ignore[arg-type]
    stage.deadlines_gate = lambda: open_
    assert stage.next_due() is None and not stage.has_work()
    stage.notify(None)  # an observation arrives: a cycle runs, but no timeout is decided
    asyncio.run(stage.step())
    assert not w.state.workloads["default/stuck"].evicting
    open_ = True
    assert stage.next_due() == 5 * MIN and stage.has_work()
    asyncio.run(stage.step())
    assert w.state.workloads["default/stuck"].evicting
