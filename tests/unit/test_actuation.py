"""Actuation orders and the fold's outbox: pure functions and the real fold (daemon/domain/state.py), nothing faked.

An admission must become exactly the placement the flavor asks for; a preemption must restore what the job was
created with; the outbox must hold every decision without an actuation, survive a snapshot, and let go of a
decision only when its own actuation (or a permanent failure) is recorded.
"""

from __future__ import annotations

from dataclasses import replace

from daemon.domain import events as ev
from daemon.domain.actuation import Action, Placement, suspend_order, unsuspend_order
from daemon.domain.model import PodSet, ResourceFlavor, Toleration
from daemon.domain.state import State
from tests.samples import admission, one_of_each, workload

H100 = ResourceFlavor(
    name="h100-flavor",
    node_labels={"gpu-type": "h100", "zone": "a"},
    tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
)
USER_TOLERATION = Toleration(key="team", operator="Equal", value="research", effect="NoSchedule")


def _job(selector: dict[str, str] | None = None) -> ev.JobObserved:
    wl = workload()
    ps = replace(wl.pod_sets[0], node_selector=selector or {"disk": "ssd"}, tolerations=(USER_TOLERATION,))
    return ev.JobObserved(workload=replace(wl, pod_sets=(ps,)))


def test_an_admission_merges_the_flavors_node_labels_and_appends_its_tolerations() -> None:
    job = _job()
    order = unsuspend_order(job.workload, admission(), {"h100-flavor": H100}, decision=7)
    assert order.action is Action.UNSUSPEND and order.decision == 7 and order.conflict is None
    assert order.placements == (
        Placement(
            pod_set="main",
            node_selector=(("disk", "ssd"), ("gpu-type", "h100"), ("zone", "a")),
            tolerations=(USER_TOLERATION, H100.tolerations[0]),
        ),
    )


def test_a_selector_that_pins_a_flavor_label_to_another_value_is_a_conflict_not_an_overwrite() -> None:
    job = _job({"gpu-type": "a100"})
    order = unsuspend_order(job.workload, admission(), {"h100-flavor": H100}, decision=7)
    assert order.conflict is not None
    assert "nodeSelector gpu-type=a100 conflicts with flavor h100-flavor's nodeLabel gpu-type=h100" in order.conflict
    assert order.placements[0].node_selector == (("gpu-type", "a100"),)  # the user's value is kept


def test_a_preemption_restores_what_the_job_was_created_with() -> None:
    job = _job()
    order = suspend_order(job.workload, "team-research", 9, reason="Preempted", preemptor="research/b")
    assert order.action is Action.SUSPEND and order.preemptor == "research/b"
    assert order.placements == (
        Placement(pod_set="main", node_selector=(("disk", "ssd"),), tolerations=(USER_TOLERATION,)),
    )


def _admitted_state() -> State:
    state = State()
    config = [e for e in one_of_each() if isinstance(e, ev.ResourceFlavorObserved | ev.ClusterQueueObserved)]
    config += [e for e in one_of_each() if isinstance(e, ev.CohortObserved | ev.LocalQueueObserved)]
    config += [e for e in one_of_each() if isinstance(e, ev.NamespaceObserved)]
    for seq, event in enumerate((*config, _job()), start=1):
        state.apply(event, seq)
    state.apply(ev.WorkloadAdmitted(workload="research/train-a", at=5, admission=admission()), 100)
    return state


def test_the_outbox_holds_a_decision_until_its_own_actuation_is_recorded() -> None:
    state = _admitted_state()
    order = state.outbox["research/train-a"]
    assert order.action is Action.UNSUSPEND and order.decision == 100
    state.apply(ev.JobUnsuspended(job="research/train-a", at=6, decision=99), 101)  # another decision's actuation
    assert "research/train-a" in state.outbox
    state.apply(ev.ActuationFailed(job="research/train-a", at=6, decision=100, error="503", permanent=False), 102)
    assert "research/train-a" in state.outbox, "a temporary failure is retried"
    state.apply(ev.JobUnsuspended(job="research/train-a", at=7, decision=100, placements=order.placements), 103)
    assert state.outbox == {}


def test_a_preemption_replaces_the_admissions_order_and_a_permanent_failure_settles_it() -> None:
    state = _admitted_state()
    state.apply(
        ev.WorkloadPreempted(
            workload="research/train-a",
            at=8,
            cluster_queue="team-research",
            preemptor="research/b",
            preemptor_cluster_queue="team-research",
            reason="InClusterQueue",
            policy="withinClusterQueue=LowerPriority",
        ),
        110,
    )
    order = state.outbox["research/train-a"]
    assert (order.action, order.decision, order.reason, order.cluster_queue) == (
        Action.SUSPEND,
        110,
        "Preempted",
        "team-research",
    )
    state.apply(ev.ActuationFailed(job="research/train-a", at=9, decision=110, error="403", permanent=True), 111)
    assert state.outbox == {}


def test_the_outbox_survives_a_snapshot_and_a_finished_job_leaves_it() -> None:
    state = _admitted_state()
    again = State.from_snapshot(state.to_snapshot())
    assert again.outbox == state.outbox != {}
    again.apply(ev.JobFinished(job="research/train-a", at=20), 200)
    assert again.outbox == {}


def test_an_order_names_every_pod_set_of_the_job() -> None:
    wl = workload()
    two = replace(wl, pod_sets=(wl.pod_sets[0], PodSet(name="worker", count=1, requests={"cpu": 1000})))
    order = unsuspend_order(two, admission(), {"h100-flavor": H100}, decision=3)
    assert [p.pod_set for p in order.placements] == ["main", "worker"]
    assert order.placements[1].node_selector == ()  # not admitted in any flavor: left as created
