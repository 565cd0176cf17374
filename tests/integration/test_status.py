"""What users see in the cluster, on the real local control plane (marker `cluster`): nothing is faked.

`admitd run` runs as a process (webhook registered by URL); the Job controller and kwok run the pods. Every check
reads what a user reads with kubectl: `kubectl get workloads` and the Workload objects (conditions, status.admission,
owner), ClusterQueue and LocalQueue status, and `kubectl describe job` for the Events. The expected Workload name is
computed by the unit-tested pure builder; the expected pending message is read from the event log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.kube.status_objects import workload_name
from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import (
    Daemon,
    apply,
    get_job,
    install_crds,
    job,
    kubectl,
    running_daemon,
    wait_for,
)
from tests.integration.test_daemon import V, cluster_queue, flavor, local_queue, mine, of_type, running, suspended

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


def _daemon(crds: KubeCluster, workdir: Path, *extra: str) -> Iterator[Daemon]:
    with running_daemon(crds, workdir, *extra) as d:
        yield d


@pytest.fixture
def daemon(crds: KubeCluster, tmp_path: Path) -> Iterator[Daemon]:
    yield from _daemon(crds, tmp_path)


@pytest.fixture
def lean_daemon(crds: KubeCluster, tmp_path: Path) -> Iterator[Daemon]:
    yield from _daemon(crds, tmp_path, "--no-workload-objects")


def workloads(cluster: KubeCluster, ns: str) -> dict[str, dict[str, Any]]:
    """The namespace's Workloads by owner Job name."""
    items = json.loads(kubectl(cluster, "get", "workloads", "-n", ns, "-o", "json"))["items"]
    return {w["metadata"]["ownerReferences"][0]["name"]: w for w in items}


def cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return dict(c)
    return {}


def queue_status(cluster: KubeCluster, kind: str, name: str, ns: str | None = None) -> dict[str, Any]:
    args = ["get", kind, name, "-o", "json"] + (["-n", ns] if ns else [])
    return dict(json.loads(kubectl(cluster, *args)).get("status") or {})


def describe(cluster: KubeCluster, ns: str, name: str) -> str:
    return kubectl(cluster, "describe", "job", "-n", ns, name)


def test_workloads_show_admission_pending_message_and_finish_and_queues_count_them(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    ns, rf, cq = namespace, f"h100-{namespace}", f"status-{namespace}"
    apply(
        crds,
        flavor(rf, **{"gpu-type": "h100"}),
        cluster_queue(cq, rf, 4),
        local_queue(ns, "q", cq),
        job(ns, "first", queue="q", runtime="6s"),
    )
    wait_for("the first job to run", lambda: running(crds, ns, "first"))
    apply(crds, job(ns, "second", queue="q"))

    def second_pending() -> bool:
        return cond(workloads(crds, ns).get("second"), "QuotaReserved").get("reason") == "WaitingForQuota"

    wait_for("the second job's Workload to say it is pending", second_pending, timeout=30)
    wls = workloads(crds, ns)
    first = wls["first"]
    uid = get_job(crds, ns, "first")["metadata"]["uid"]
    assert first["metadata"]["name"] == workload_name("first", uid)
    owner = first["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", uid, True)
    assert first["spec"]["queueName"] == "q"
    assert first["spec"]["podSets"][0]["count"] == 1
    assert cond(first, "QuotaReserved")["status"] == "True"
    assert cond(first, "Admitted")["status"] == "True"
    admission = first["status"]["admission"]
    assert admission["clusterQueue"] == cq
    assert admission["podSetAssignments"][0]["flavors"] == {GPU: rf}
    assert admission["podSetAssignments"][0]["resourceUsage"] == {GPU: "4"}
    pending_events = of_type(mine(daemon, ns), "workload.pending", f"{ns}/second")
    assert pending_events, "the log says why the second job waits"
    message = pending_events[-1]["payload"]["reason"]["message"]
    second = workloads(crds, ns)["second"]
    assert cond(second, "QuotaReserved") | {"lastTransitionTime": None} == {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "WaitingForQuota",  # Kueue v0.19's granular reason (v0.17: Pending)
        "message": message,
        "lastTransitionTime": None,
    }
    assert "admission" not in second.get("status", {})

    table = kubectl(crds, "get", "workloads", "-n", ns)
    row = next(line for line in table.splitlines() if line.startswith(first["metadata"]["name"]))
    assert row.split()[1:4] == ["q", cq, "True"], table  # Queue, Reserved in, Admitted

    def counted(pending: int, admitted: int) -> bool:
        s = queue_status(crds, "clusterqueues", cq)
        return (s.get("pendingWorkloads"), s.get("admittedWorkloads")) == (pending, admitted)

    wait_for("the ClusterQueue to count 1 pending and 1 admitted", lambda: counted(1, 1), timeout=20)
    s = queue_status(crds, "clusterqueues", cq)
    assert s["reservingWorkloads"] == 1
    assert s["flavorsReservation"] == [{"name": rf, "resources": [{"name": GPU, "total": "4", "borrowed": "0"}]}]
    assert cond({"status": s}, "Active")["status"] == "True"

    def lq_counted() -> bool:  # written after the ClusterQueue's status, possibly a moment later
        lq = queue_status(crds, "localqueues", "q", ns)
        return (lq.get("pendingWorkloads"), lq.get("admittedWorkloads")) == (1, 1)

    wait_for("the LocalQueue to count 1 pending and 1 admitted", lq_counted, timeout=20)
    lq = queue_status(crds, "localqueues", "q", ns)
    assert lq["flavorsUsage"] == [{"name": rf, "resources": [{"name": GPU, "total": "4"}]}]

    described = describe(crds, ns, "first")
    assert "Admitted" in described and f"Admitted by ClusterQueue {cq}" in described, described
    described = describe(crds, ns, "second")
    assert "Pending" in described and "WaitingForQuota" in described, described
    # And on its Workload, as Kueue's scheduler: a Warning named after the QuotaReserved reason.
    wl_name = workloads(crds, ns)["second"]["metadata"]["name"]

    def warned() -> list[dict[str, Any]]:
        listed = json.loads(
            kubectl(crds, "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={wl_name}", "-o", "json")
        )
        return [e for e in listed["items"] if e["involvedObject"]["kind"] == "Workload"]

    wait_for("the Warning Event on the second job's Workload", lambda: bool(warned()), timeout=20)
    (warning,) = warned()
    assert (warning["type"], warning["reason"]) == ("Warning", "WaitingForQuota")
    told = [e["payload"]["reason"]["message"] for e in of_type(mine(daemon, ns), "workload.pending", f"{ns}/second")]
    assert warning["message"] in told, (warning, told)

    # The first job completes (kwok); its Workload stays, Finished, and the second runs.
    wait_for("the second job to run once the first finished", lambda: running(crds, ns, "second"), timeout=90)
    wait_for(
        "the first Workload to be Finished",
        lambda: cond(workloads(crds, ns).get("first"), "Finished").get("reason") == "Succeeded",
        timeout=30,
    )
    wait_for(
        "the second Workload to be admitted",
        lambda: cond(workloads(crds, ns).get("second"), "Admitted").get("status") == "True",
        timeout=30,
    )
    wait_for("the ClusterQueue to count 0 pending and 1 admitted", lambda: counted(0, 1), timeout=20)


def test_a_preempted_jobs_workload_and_events_name_the_preemptor(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    ns, rf, cq = namespace, f"h100-{namespace}", f"prio-{namespace}"
    apply(
        crds,
        {"apiVersion": V, "kind": "WorkloadPriorityClass", "metadata": {"name": f"high-{ns}"}, "value": 1000},
        flavor(rf, **{"gpu-type": "h100"}),
        cluster_queue(cq, rf, 4, preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue(ns, "q", cq),
        job(ns, "low", queue="q"),
    )
    wait_for("the low-priority job to run", lambda: running(crds, ns, "low"))
    apply(crds, job(ns, "high", queue="q", priority_class=f"high-{ns}"))
    wait_for("the victim to be suspended", lambda: suspended(crds, ns, "low"))
    wait_for("the preemptor to run", lambda: running(crds, ns, "high"))

    def shows_preempted() -> bool:
        low = workloads(crds, ns).get("low")
        return cond(low, "Evicted").get("status") == "True" and cond(low, "Preempted").get("status") == "True"

    wait_for("the victim's Workload to show Evicted and Preempted", shows_preempted, timeout=30)
    # The status writer writes each Workload on its own (after a second's linger): the preemptor's may come later.
    wait_for(
        "the preemptor's Workload to show Admitted",
        lambda: cond(workloads(crds, ns).get("high"), "Admitted").get("status") == "True",
        timeout=30,
    )
    wls = workloads(crds, ns)
    low, high = wls["low"], wls["high"]
    assert cond(low, "Evicted")["reason"] == "Preempted"
    assert cond(low, "Preempted")["reason"] == "InClusterQueue"
    assert f"{ns}/high" in cond(low, "Preempted")["message"]
    assert high["spec"]["priority"] == 1000
    assert high["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": f"high-{ns}",
    }
    assert cond(high, "Admitted")["status"] == "True"
    wait_for(
        "the victim's Workload to lose its reservation",
        lambda: cond(workloads(crds, ns).get("low"), "QuotaReserved").get("status") == "False",
        timeout=30,
    )
    assert "admission" not in workloads(crds, ns)["low"].get("status", {})
    described = describe(crds, ns, "low")
    assert "Preempted" in described and f"{ns}/high" in described, described


def test_without_workload_objects_no_workload_exists_but_queues_and_events_are_written(
    lean_daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    ns, rf, cq = namespace, f"h100-{namespace}", f"lean-{namespace}"
    apply(
        crds,
        flavor(rf, **{"gpu-type": "h100"}),
        cluster_queue(cq, rf, 4),
        local_queue(ns, "q", cq),
        job(ns, "a", queue="q"),
        job(ns, "b", queue="q"),
    )
    wait_for("one job to run", lambda: running(crds, ns, "a") or running(crds, ns, "b"))
    wait_for(
        "the ClusterQueue to count 1 pending and 1 admitted",
        lambda: (
            (
                queue_status(crds, "clusterqueues", cq).get("pendingWorkloads"),
                queue_status(crds, "clusterqueues", cq).get("admittedWorkloads"),
            )
            == (1, 1)
        ),
        timeout=20,
    )
    ran = "a" if running(crds, ns, "a") else "b"
    wait_for("the Admitted Event", lambda: f"Admitted by ClusterQueue {cq}" in describe(crds, ns, ran), timeout=20)
    assert workloads(crds, ns) == {}, "no Workload object with --no-workload-objects"


def test_a_queue_admitd_accepts_but_ignores_part_of_says_so_in_a_condition_and_a_warning_event(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    """A borrowingLimit without a cohort (admitd's CRDs let it through, Kueue's webhook would refuse it) and a
    LocalQueue's admission fair sharing: accepted and enforced, with `admitd.io/IgnoredSpec` naming each field and
    a Warning Event on each object (ClusterQueues' in namespace default); removing them turns the condition False."""
    ns, rf, cq = namespace, f"h100-{namespace}", f"warned-{namespace}"
    lq = local_queue(ns, "q", cq)
    lq["spec"]["fairSharing"] = {"weight": "2"}
    apply(crds, flavor(rf, **{"gpu-type": "h100"}), cluster_queue(cq, rf, 4, borrowing_limit=2), lq)
    apply(crds, job(ns, "runs", queue="q"))
    wait_for("the job to run in the queue that warns", lambda: running(crds, ns, "runs"))

    def warned(kind: str, name: str, where: str | None) -> dict[str, Any]:
        return cond({"status": queue_status(crds, kind, name, where)}, "admitd.io/IgnoredSpec")

    wait_for(
        "the ClusterQueue's IgnoredSpec condition", lambda: warned("clusterqueues", cq, None).get("status") == "True"
    )
    c = warned("clusterqueues", cq, None)
    assert c["reason"] == "IgnoredSpec"
    assert (
        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit has no effect until the ClusterQueue"
        in c["message"]
    )
    wait_for("the LocalQueue's IgnoredSpec condition", lambda: warned("localqueues", "q", ns).get("status") == "True")
    assert "spec.fairSharing" in warned("localqueues", "q", ns)["message"]

    def warning_events(where: str, name: str) -> list[dict[str, Any]]:
        listed = json.loads(
            kubectl(crds, "get", "events", "-n", where, "--field-selector", f"involvedObject.name={name}", "-o", "json")
        )
        return [e for e in listed["items"] if e["reason"] == "IgnoredSpec"]

    wait_for("the Warning Event on the ClusterQueue", lambda: bool(warning_events("default", cq)), timeout=20)
    (event,) = warning_events("default", cq)
    assert (event["type"], event["involvedObject"]["kind"]) == ("Warning", "ClusterQueue")
    assert "borrowingLimit" in event["message"]
    wait_for("the Warning Event on the LocalQueue", lambda: bool(warning_events(ns, "q")), timeout=20)
    warned_events = [
        e for e in daemon.events() if e["type"] == "object.warned" and e["subject"] == f"clusterqueue/{cq}"
    ]
    assert len(warned_events) == 1, warned_events

    apply(crds, cluster_queue(cq, rf, 4))  # the borrowingLimit removed
    wait_for("the condition to turn False", lambda: warned("clusterqueues", cq, None).get("status") == "False")
    assert warned("clusterqueues", cq, None)["reason"] == "Enforced"


def test_a_workload_set_inactive_stops_its_job_and_resumes_it_when_active_again(
    daemon: Daemon, crds: KubeCluster, namespace: str
) -> None:
    """`kubectl kueue stop workload` is `spec.active: false` on the Workload: admitd evicts the running Job
    (reason Deactivated: suspended, quota released), another job takes the quota, and the stopped one waits,
    QuotaReserved=False reason Deactivated, until `spec.active: true` puts it back in its queue."""
    ns, rf, cq = namespace, f"h100-{namespace}", f"active-{namespace}"
    apply(crds, flavor(rf, **{"gpu-type": "h100"}), cluster_queue(cq, rf, 4), local_queue(ns, "q", cq))
    apply(crds, job(ns, "stopped", queue="q"))
    wait_for("the job to run", lambda: running(crds, ns, "stopped"))
    apply(crds, job(ns, "waiting", queue="q"))
    wait_for("the second job's Workload", lambda: "waiting" in workloads(crds, ns), timeout=20)
    name = workloads(crds, ns)["stopped"]["metadata"]["name"]

    def set_active(active: bool) -> None:
        patch = json.dumps({"spec": {"active": active}})
        kubectl(crds, "patch", "workload", name, "-n", ns, "--type=merge", "-p", patch)

    set_active(False)
    wait_for("the deactivated job to be suspended", lambda: suspended(crds, ns, "stopped"), timeout=30)
    wait_for("the other job to take its quota", lambda: running(crds, ns, "waiting"), timeout=60)

    def reason(type_: str) -> str | None:
        return cond(workloads(crds, ns)["stopped"], type_).get("reason")

    wait_for("the Workload to say Deactivated", lambda: reason("QuotaReserved") == "Deactivated", timeout=20)
    assert reason("Evicted") == "Deactivated"
    assert workloads(crds, ns)["stopped"]["spec"]["active"] is False, "the user's edit stays"
    story = [e for e in mine(daemon, ns) if e["subject"] == f"job/{ns}/stopped"]
    changed = [e for e in story if e["type"] == "workload.active_changed"]
    assert [e["payload"]["active"] for e in changed] == [False]
    preempted = of_type(mine(daemon, ns), "workload.preempted", f"{ns}/stopped")
    assert [e["payload"]["reason"] for e in preempted] == ["Deactivated"]
    assert preempted[0]["cause"] == changed[0]["seq"], "decided from the observation"

    kubectl(crds, "delete", "job", "-n", ns, "waiting", "--wait=false")
    set_active(True)
    wait_for("the reactivated job to run again", lambda: running(crds, ns, "stopped"), timeout=30)
    admitted = of_type(mine(daemon, ns), "workload.admitted", f"{ns}/stopped")
    reactivated = of_type(mine(daemon, ns), "workload.active_changed", f"{ns}/stopped")[-1]
    assert reactivated["payload"]["active"] is True
    assert len(admitted) == 2 and admitted[1]["seq"] > reactivated["seq"], "not readmitted while inactive"
