"""Kueue's visibility API from admitd's pending order (daemon.kube.visibility): positions, paging, names, errors,
each against a result worked out by hand from Kueue's REST storage rules."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from daemon.domain import events as ev
from daemon.domain.model import ClusterQueue, LabelSelector, LocalQueue, PriorityClass
from daemon.domain.state import State
from daemon.eventlog.codec import encode_json
from daemon.kube import visibility as vis
from daemon.kube.status_objects import rfc3339
from tests.samples import workload


def kueue_name(job: str, uid: str) -> str:
    """Kueue's GetWorkloadNameForOwnerWithGVK for a batch/v1 Job, written out here rather than imported."""
    digest = hashlib.sha1(f"Job\nbatch\n{job}\n{uid}".encode(), usedforsecurity=False).hexdigest()[:5]
    return f"job-{job}-{digest}"


def world() -> State:
    """cq-a with LocalQueues ns/q1 and ns/q2 (and ns/orphan pointing at a ClusterQueue that does not exist); five
    pending Jobs. Order (priority, then creation): c (high, q1), a (q1), b (q2), d (q2), e (q1)."""
    state = State()
    events = [
        ev.ClusterQueueObserved(cluster_queue=ClusterQueue(name="cq-a", namespace_selector=LabelSelector())),
        ev.ClusterQueueObserved(cluster_queue=ClusterQueue(name="cq-empty", namespace_selector=LabelSelector())),
        ev.PriorityClassObserved(priority_class=PriorityClass(name="high", value=100)),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="ns", name="q1", cluster_queue="cq-a")),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="ns", name="q2", cluster_queue="cq-a")),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="ns", name="orphan", cluster_queue="cq-gone")),
        ev.JobObserved(workload=workload("a", ns="ns", queue="q1", created_at=1_000)),
        ev.JobObserved(workload=workload("b", ns="ns", queue="q2", created_at=2_000)),
        ev.JobObserved(workload=workload("c", ns="ns", queue="q1", created_at=3_000, priority_class="high")),
        ev.JobObserved(workload=workload("d", ns="ns", queue="q2", created_at=4_000)),
        ev.JobObserved(workload=workload("e", ns="ns", queue="q1", created_at=5_000)),
    ]
    for seq, e in enumerate(events, start=1):
        state.apply(e, seq)
    return state


def rows(summary: dict[str, object]) -> list[tuple[str, int, str, int, int]]:
    items = summary["items"]
    assert isinstance(items, list)
    return [
        (
            i["metadata"]["ownerReferences"][0]["name"],
            i["priority"],
            i["localQueueName"],
            i["positionInClusterQueue"],
            i["positionInLocalQueue"],
        )
        for i in items
    ]


def test_a_cluster_queue_lists_its_pending_order_with_both_positions() -> None:
    got = vis.cluster_queue_pending(world().view(), "cq-a")
    assert (got["kind"], got["apiVersion"]) == ("PendingWorkloadsSummary", "visibility.kueue.x-k8s.io/v1beta1")
    assert rows(got) == [
        ("c", 100, "q1", 0, 0),
        ("a", 0, "q1", 1, 1),
        ("b", 0, "q2", 2, 0),
        ("d", 0, "q2", 3, 1),
        ("e", 0, "q1", 4, 2),
    ]


def test_an_item_names_the_workload_as_kueue_does_and_points_at_its_job() -> None:
    first = vis.cluster_queue_pending(world().view(), "cq-a")["items"][1]
    assert first["metadata"] == {
        "name": kueue_name("a", "uid-ns-a"),
        "namespace": "ns",
        "creationTimestamp": "1970-01-01T00:00:01Z",
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "a", "uid": "uid-ns-a"}],
    }


def test_paging_a_cluster_queue_keeps_the_local_queue_positions_of_the_rows_skipped() -> None:
    view = world().view()
    assert rows(vis.cluster_queue_pending(view, "cq-a", limit=2, offset=3)) == [
        ("d", 0, "q2", 3, 1),
        ("e", 0, "q1", 4, 2),
    ]
    assert rows(vis.cluster_queue_pending(view, "cq-a", limit=1, offset=0)) == [("c", 100, "q1", 0, 0)]
    assert vis.cluster_queue_pending(view, "cq-a", limit=5, offset=9)["items"] == []


def test_a_local_queue_lists_its_own_rows_with_their_cluster_queue_positions() -> None:
    view = world().view()
    assert rows(vis.local_queue_pending(view, "ns", "q1")) == [
        ("c", 100, "q1", 0, 0),
        ("a", 0, "q1", 1, 1),
        ("e", 0, "q1", 4, 2),
    ]
    assert rows(vis.local_queue_pending(view, "ns", "q1", limit=1, offset=1)) == [("a", 0, "q1", 1, 1)]
    assert rows(vis.local_queue_pending(view, "ns", "q2", offset=1)) == [("d", 0, "q2", 3, 1)]


def test_queues_with_nothing_pending_answer_an_empty_list() -> None:
    view = world().view()
    assert vis.cluster_queue_pending(view, "cq-empty")["items"] == []
    assert vis.local_queue_pending(view, "ns", "orphan")["items"] == []


def test_an_unknown_queue_is_a_not_found_status_naming_it() -> None:
    view = world().view()
    with pytest.raises(vis.VisibilityError) as cq:
        vis.cluster_queue_pending(view, "nope")
    assert cq.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'clusterqueue.visibility.kueue.x-k8s.io "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "group": "visibility.kueue.x-k8s.io", "kind": "clusterqueue"},
        "code": 404,
    }
    with pytest.raises(vis.VisibilityError) as lq:
        vis.local_queue_pending(view, "other-ns", "q1")  # q1 exists in ns, not in other-ns
    assert (lq.value.code, lq.value.message) == (404, 'localqueue.visibility.kueue.x-k8s.io "q1" not found')


def test_options_default_to_kueues_and_refuse_what_kueue_cannot_read() -> None:
    assert vis.options({}) == (1000, 0)
    assert vis.options({"limit": ["0"], "offset": ["7"]}) == (1000, 7)
    assert vis.options({"limit": ["3"]}) == (3, 0)
    for params, words in [
        ({"limit": ["x"]}, "'limit' must be a whole number, got 'x'"),
        ({"offset": ["-1"]}, "'offset' must not be negative"),
        ({"limit": ["1", "2"]}, "'limit' is given 2 times"),
        ({"watch": ["true"]}, "unknown query parameter 'watch'"),
    ]:
        with pytest.raises(vis.VisibilityError) as e:
            vis.options(params)
        assert e.value.code == 400 and e.value.reason == "BadRequest" and words in e.value.message


def test_routes_and_discovery() -> None:
    root = "/apis/visibility.kueue.x-k8s.io/v1beta1"
    assert vis.route(f"{root}/clusterqueues/cq-a/pendingworkloads") == ("clusterqueues", None, "cq-a")
    assert vis.route(f"{root}/namespaces/ns/localqueues/q1/pendingworkloads") == ("localqueues", "ns", "q1")
    assert vis.route(f"{root}/clusterqueues/cq-a") is None
    assert vis.route(f"{root}/clusterqueues//pendingworkloads") is None
    listed = vis.api_resource_list()
    assert listed["groupVersion"] == "visibility.kueue.x-k8s.io/v1beta1"
    assert {r["name"]: (r["namespaced"], r["verbs"]) for r in listed["resources"]} == {
        "clusterqueues": (False, []),
        "clusterqueues/pendingworkloads": (False, ["get"]),
        "localqueues": (True, []),
        "localqueues/pendingworkloads": (True, ["get"]),
    }
    assert vis.api_group_list()["groups"][0]["preferredVersion"]["groupVersion"] == listed["groupVersion"]
    got = vis.pending(world().view(), "localqueues", "ns", "q2", {"limit": ["1"]})
    assert rows(got) == [("b", 0, "q2", 2, 0)]


def test_the_metadata_kept_between_requests_is_the_workloads_own() -> None:
    """`remember` keeps each row's metadata (vis._REFS): a second answer is the same, and a Job recreated under
    its name (a new uid) gets its own Workload name, as Kueue's."""
    state = world()
    vis._REFS.clear()
    first = vis.cluster_queue_pending(state.view(), "cq-a")
    assert vis.cluster_queue_pending(state.view(), "cq-a") == first and len(vis._REFS) == 5
    recreated = replace(workload("a", ns="ns", queue="q1", created_at=1_000), uid="uid-new")
    state.apply(ev.JobObserved(workload=recreated), 99)
    again = {
        i["metadata"]["ownerReferences"][0]["name"]: i["metadata"]
        for i in vis.cluster_queue_pending(state.view(), "cq-a")["items"]
    }
    assert again["a"]["name"] == kueue_name("a", "uid-new") != kueue_name("a", "uid-ns-a")


def test_creation_timestamps_are_written_as_strftime_writes_them() -> None:
    """`status_objects.rfc3339` computes the time of day itself (strftime was most of a cold list's time)."""
    rng = random.Random(25)
    for ms in [
        0,
        999,
        1_000,
        -1,
        -86_400_001,
        951_782_400_000,
        *(rng.randrange(-(10**11), 4 * 10**12) for _ in range(20_000)),
    ]:
        assert rfc3339(ms) == datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), ms


def test_the_served_bytes_are_the_canonical_json_of_the_answer_made_afresh_or_from_kept_rows() -> None:
    """The server sends `pending_json` as is (each row assembled from its kept metadata's JSON): it must be what
    encoding the answer's objects gives (`codec.encode_json`, sorted keys), whether the rows were kept or not."""
    state = world()
    cases = [
        ("clusterqueues", None, "cq-a", {}),
        ("clusterqueues", None, "cq-a", {"limit": ["2"], "offset": ["1"]}),
        ("clusterqueues", None, "cq-empty", {}),
        ("localqueues", "ns", "q1", {}),
        ("localqueues", "ns", "q2", {"offset": ["1"]}),
    ]
    for resource, ns, name, params in cases:
        vis._REFS.clear()
        cold = vis.pending_json(state.view(), resource, ns, name, params)
        warm = vis.pending_json(state.view(), resource, ns, name, params)
        assert cold == warm == encode_json(json.loads(cold)), (resource, name, params)
        assert json.loads(cold)["kind"] == "PendingWorkloadsSummary"
