"""A queue object admitd rejects is never enforced as if it were current, and its owner is told.

Real: the fold (`daemon.domain.state`), the engine (`decide`), `QuotaTree`, the status writer's pure builders
(`daemon.kube.status_objects`) and its listener. Faked: nothing; the status writer's client is never called here.
"""

from __future__ import annotations

from daemon.domain.events import ClusterQueueObserved, CohortObserved, ObjectRejected, WorkloadAdmitted
from daemon.domain.model import PendingReasonKind as K
from daemon.domain.quota import QuotaTree
from daemon.domain.state import State
from daemon.kube import status_objects as so
from daemon.views.queues import Queues
from tests.unit.builders import World, cohort, cq, flavor, job, lq, namespace, running, world
from tests.unit.test_admission import admitted, cycle, pending

BAD = ("spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: 16 is more than nominalQuota 8",)


def rejected_edit(name: str) -> ObjectRejected:
    return ObjectRejected(kind="ClusterQueue", name=name, errors=BAD)


def setup(*items: object) -> World:
    return world(flavor("h100"), namespace("default"), lq("default", "q", "a"), *items)


def test_a_queue_edited_into_a_rejected_one_admits_nothing_new_and_keeps_what_runs() -> None:
    w = setup(cq("a").flavor("h100", gpu=8), running(job("r").gpus(4), "a", "h100"), job("j").gpus(2))
    w.apply([rejected_edit("a")])
    events = cycle(w)
    assert admitted(events) == {}
    reason = pending(events)["default/j"].reason
    assert reason.kind is K.CLUSTER_QUEUE_INACTIVE
    assert "latest version was rejected" in reason.message and "lendingLimit" in reason.message
    assert "default/r" in w.state.view().admitted  # nothing is evicted: Kueue's inactive queue keeps its workloads

    w.add(cq("a").flavor("h100", gpu=8))  # a valid version again
    assert set(admitted(cycle(w))) == {"default/j"}


def test_a_rejected_cohort_makes_its_members_inactive_until_a_valid_one() -> None:
    w = setup(cohort("c"), cq("a").cohort("c").flavor("h100", gpu=8), job("j").gpus(1))
    w.apply([ObjectRejected(kind="Cohort", name="c", errors=("spec.parentName: c is its own parent",))])
    reason = pending(cycle(w))["default/j"].reason
    assert reason.kind is K.CLUSTER_QUEUE_INACTIVE and "cohort c's latest version was rejected" in reason.message
    w.apply([CohortObserved(cohort=cohort("c").obj())])
    assert set(admitted(cycle(w))) == {"default/j"}


def test_a_rejection_of_an_object_admitd_never_held_changes_no_state() -> None:
    s = State()
    s.apply(rejected_edit("never-valid"))
    assert s.rejected == {} and s.config_generation == 0


def test_the_rejection_survives_a_snapshot_and_a_replay_gives_the_same() -> None:
    w = setup(cq("a").flavor("h100", gpu=8))
    w.apply([rejected_edit("a")])
    restored = State.from_snapshot(w.state.to_snapshot())
    assert restored.rejected == {"ClusterQueue/a": BAD}
    assert restored.to_snapshot() == w.state.to_snapshot()
    restored.apply(ClusterQueueObserved(cluster_queue=cq("a").flavor("h100", gpu=8).obj()))
    assert restored.rejected == {}


def test_the_tree_says_why_with_kueues_reason_names() -> None:
    w = setup(
        cohort("x").parent("y"),
        cohort("y").parent("x"),
        cq("a").cohort("x").flavor("h100", gpu=8),
        cq("b").flavor("h100", gpu=8),
        cq("c").flavor("b200", gpu=8),
    )
    w.apply([ObjectRejected(kind="ClusterQueue", name="b", errors=BAD)])
    s = w.state
    tree = QuotaTree.build(s.cluster_queues, s.cohorts, s.flavors, s.rejected)
    assert {n: i.reason for n, i in tree.inactive.items()} == {
        "a": "CohortCycleDetected",
        "b": "InvalidSpec",
        "c": "FlavorNotFound",
    }


def test_a_cluster_queue_status_shows_the_engines_verdict() -> None:
    """A ClusterQueue in a cohort cycle: inactive for the cycle, and so in its status (one definition,
    `views.queues.Queues.activity`)."""
    w = setup(cohort("x").parent("y"), cohort("y").parent("x"), cq("a").cohort("x").flavor("h100", gpu=8))
    counts = so.QueueCounts(pending=1, reserving=0, usage={})
    a = Queues.of(w.state).activity("a")
    queue = w.state.cluster_queues["a"]
    status = so.cluster_queue_status(queue, counts, (a.active, a.reason, a.condition), None, "2026-12-02T00:00:00Z")
    (active,) = status["conditions"]
    assert (active["status"], active["reason"]) == ("False", "CohortCycleDetected")
    assert active["message"] == "Can't admit new workloads: cohort x is in a cohort cycle"
    fine = setup(cq("a").flavor("h100", gpu=8))
    b = Queues.of(fine.state).activity("a")
    ok = so.cluster_queue_status(queue, counts, (b.active, b.reason, b.condition), None, "2026-12-02T00:00:00Z")
    assert ok["conditions"][0]["status"] == "True"


def test_a_never_valid_object_gets_an_inactive_condition_naming_the_field() -> None:
    status = so.rejected_status("ClusterQueue", BAD, None, "2026-12-02T00:00:00Z")
    (active,) = status["conditions"]
    assert (active["type"], active["status"], active["reason"]) == ("Active", "False", "InvalidSpec")
    assert "lendingLimit: 16 is more than nominalQuota 8" in active["message"]


def test_rejection_events_land_where_kubectl_finds_them() -> None:
    cluster_scoped = so.event_object(
        so.rejection_event("ClusterQueue", None, "a", BAD, True, 1_000, 7), instance="admitd-0"
    )
    assert cluster_scoped["metadata"]["namespace"] == "default"
    assert cluster_scoped["involvedObject"] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "name": "a",
    }
    assert cluster_scoped["type"] == "Warning" and cluster_scoped["reason"] == "InvalidSpec"
    assert "the version before is kept, and admits nothing new" in cluster_scoped["message"]
    namespaced = so.event_object(so.rejection_event("LocalQueue", "default", "q", BAD, False, 1_000, 8), instance="i")
    assert namespaced["metadata"]["namespace"] == "default"
    assert namespaced["involvedObject"]["namespace"] == "default"  # a LocalQueue in `default` keeps its namespace
    assert "it is not used until a valid version is applied" in namespaced["message"]


def test_an_admission_in_a_queue_later_rejected_is_still_folded() -> None:
    # The fold never drops what was decided: a workload admitted before the rejection stays admitted.
    w = setup(cq("a").flavor("h100", gpu=8), job("j").gpus(2))
    (decision,) = [e for e in cycle(w) if isinstance(e, WorkloadAdmitted)]
    w.apply([rejected_edit("a"), decision])
    assert "default/j" in w.state.view().admitted
