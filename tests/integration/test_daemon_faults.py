"""Faults around `admitd run` on the real local control plane (marker `cluster`); nothing is faked.

- the API server stopped and started while Jobs wait: actuations that fail meanwhile are recorded and retried;
- a watch whose resourceVersion etcd compacted away: the Reflector relists and reports the whole list again
  (PodTemplates: the API server runs without a watch cache for them, so etcd's compaction reaches the watch);
- the webhook down: with failurePolicy Fail a labelled Job is refused; with Ignore it is created unsuspended and
  suspended by admitd as soon as it sees it, then admitted as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemon.kube.client import KubeClient, Obj, load_configuration
from daemon.kube.watch import Reflector, Resource
from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import (
    Daemon,
    apply,
    get_job,
    install_crds,
    job,
    kubectl,
    start_component,
    stop_component,
    wait_for,
)
from tests.integration.test_daemon import cluster_queue, flavor, local_queue, mine, of_type, running


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> KubeCluster:
    install_crds(kube_cluster)
    return kube_cluster


@pytest.fixture
def cleanup_webhook(crds: KubeCluster) -> Iterator[None]:
    yield
    kubectl(
        crds, "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "admitd", "--ignore-not-found"
    )


def _queues(cluster: KubeCluster, ns: str, gpus: int = 8) -> None:
    rf, cq = f"h100-{ns}", f"cq-{ns}"
    apply(cluster, flavor(rf, **{"gpu-type": "h100"}), cluster_queue(cq, rf, gpus), local_queue(ns, "q", cq))


@pytest.mark.timeout(240)
def test_the_api_server_stopped_and_started_while_jobs_wait(
    crds: KubeCluster, namespace: str, tmp_path: Path, cleanup_webhook: None
) -> None:
    ns = namespace
    _queues(crds, ns, gpus=4)
    daemon = Daemon(crds, tmp_path).start()
    apiserver: dict[str, Any] | None = None
    try:
        apply(crds, job(ns, "first", queue="q", runtime="4s"), job(ns, "second", queue="q"))
        wait_for("the first job to run", lambda: running(crds, ns, "first"))
        stopped = stop_component(crds, "kube-apiserver")  # "first" completes while nobody can see it
        apiserver = stopped
        time.sleep(6)
        apiserver = None
        start_component(crds, stopped)
        wait_for("the API server", lambda: kubectl(crds, "get", "--raw", "/readyz", check=False) == "ok", timeout=60)
        wait_for("the second job to run after the outage", lambda: running(crds, ns, "second"), timeout=120)
        assert daemon.stop() == 0
    finally:
        if apiserver is not None:
            start_component(crds, apiserver)
        if daemon.proc is not None:
            daemon.kill()
    events = mine(daemon, ns)
    assert [e["payload"]["job"] for e in of_type(events, "job.finished")] == [f"{ns}/first"]
    assert "watch failed; retrying" in daemon.stderr.read_text(), "every watch restart is logged"
    daemon.verify()


async def test_a_watch_whose_version_was_compacted_away_lists_again(kube_cluster: KubeCluster, namespace: str) -> None:
    cfg = await load_configuration(kube_cluster.kubeconfig)
    lists: list[list[str]] = []
    seen: list[tuple[str, str]] = []

    def listed(items: list[Obj]) -> None:
        lists.append(sorted(i["metadata"]["name"] for i in items))

    def changed(type_: str, obj: Obj) -> None:
        seen.append((type_, obj["metadata"]["name"]))

    def template(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        }

    async with KubeClient(cfg) as client:
        path = f"/api/v1/namespaces/{namespace}/podtemplates"
        await client.request("POST", path, body=template("before"))
        reflector = Reflector(client, Resource("podtemplates", path), on_event=changed, on_listed=listed, seed=1)
        task = asyncio.create_task(reflector.run())
        await asyncio.wait_for(reflector.synced.wait(), 30)
        task.cancel()  # the stream drops; the Reflector keeps its resourceVersion
        with contextlib.suppress(asyncio.CancelledError):
            await task
        stale = reflector.resource_version
        await client.request("POST", path, body=template("during"))
        await client.request("DELETE", f"{path}/before")
        # etcd keeps the compaction revision itself: two changes make the one after `stale` history for good.
        assert kube_cluster.compact_etcd() > int(stale or 0) + 1
        task = asyncio.create_task(reflector.run())
        try:
            for _ in range(100):
                if len(lists) == 2:
                    break
                await asyncio.sleep(0.1)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert lists == [["before"], ["during"]], f"resumed from {stale}: {seen}"
    assert reflector.restarts >= 1


def test_with_the_webhook_down_a_labelled_job_is_refused_or_suspended_at_once(
    crds: KubeCluster, namespace: str, tmp_path: Path, cleanup_webhook: None
) -> None:
    ns = namespace
    _queues(crds, ns)
    daemon = Daemon(crds, tmp_path, extra=("--webhook-failure-policy", "Fail")).start()
    daemon.kill()  # its webhook configuration stays, pointing at nobody
    refused = kubectl(crds, "apply", "-f", "-", stdin=_yaml(job(ns, "refused", queue="q")), check=False)
    assert "refused" not in kubectl(crds, "get", "jobs", "-n", ns, "-o", "name")
    assert refused == ""
    ignoring = Daemon(crds, tmp_path / "ignore", extra=("--webhook-failure-policy", "Ignore")).start()
    ignoring.kill()
    apply(crds, job(ns, "slipped", queue="q"))  # the API server calls nobody and lets it through, unsuspended
    assert get_job(crds, ns, "slipped")["spec"].get("suspend") is not True
    again = Daemon(crds, tmp_path / "ignore", extra=("--webhook-failure-policy", "Ignore")).start()
    try:
        wait_for("admitd to admit the slipped job", lambda: running(crds, ns, "slipped"))
        events = mine(again, ns)
        assert of_type(events, "workload.admitted", f"{ns}/slipped")
        assert "a queued job started unsuspended; suspending it" in again.stderr.read_text()
        housekeeping = [e for e in of_type(events, "job.suspended", f"{ns}/slipped") if e["cause"] is None]
        assert housekeeping and housekeeping[0]["payload"]["decision"] == 0, "the suspension is in the log"
    finally:
        assert again.stop() == 0


def _yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc)


def test_two_daemons_with_leader_election_the_standby_takes_over_and_nothing_is_actuated_twice(
    crds: KubeCluster, namespace: str, tmp_path: Path, cleanup_webhook: None
) -> None:
    ns = namespace
    _queues(crds, ns)
    # The replicas share one admission key (in a cluster: one Secret mounted in each), or no note would verify.
    key = ("--admission-key-file", str(tmp_path / "admission.key"))
    lease = ("--leader-elect", "--leader-election-lease", f"default/admitd-{ns}", *key)
    leader = Daemon(crds, tmp_path / "a", extra=(*lease, "--identity", "a")).start()
    standby = Daemon(crds, tmp_path / "b", extra=(*lease, "--identity", "b")).start()
    try:
        wait_for("a to lead", lambda: "became the leader" in leader.stderr.read_text())
        apply(crds, *(job(ns, f"j{i}", queue="q", gpus=2) for i in range(4)))
        wait_for("four jobs to run", lambda: all(running(crds, ns, f"j{i}") for i in range(4)))

        def adopted() -> list[str]:
            return sorted(e["payload"]["workload"] for e in of_type(mine(standby, ns), "workload.adopted"))

        wait_for("the standby to adopt the four running jobs", lambda: len(set(adopted())) == 4)
        assert adopted() == [f"{ns}/j{i}" for i in range(4)], "each job adopted once"
        assert "became the leader" not in standby.stderr.read_text()
        leader.kill()
        wait_for("b to take over", lambda: "became the leader" in standby.stderr.read_text(), timeout=45)
        apply(crds, job(ns, "late", queue="q", gpus=2))
        kubectl(crds, "delete", "job", "-n", ns, "j0", "--wait=false")
        wait_for("the new leader to admit a job in j0's place", lambda: running(crds, ns, "late"), timeout=60)
        assert all(running(crds, ns, f"j{i}") for i in range(1, 4)), "adopted jobs keep running"
        assert standby.stop() == 0
    finally:
        for d in (leader, standby):
            if d.proc is not None:
                d.kill()
    by_a = [e["payload"]["job"] for e in of_type(mine(leader, ns), "job.unsuspended")]
    by_b = [e["payload"]["job"] for e in of_type(mine(standby, ns), "job.unsuspended")]
    assert sorted(by_a) == [f"{ns}/j{i}" for i in range(4)]
    assert by_b == [f"{ns}/late"], "the new leader carried out only its own decision"
    assert not of_type(mine(standby, ns), "job.suspended"), "nothing the old leader admitted was suspended"
    leader.verify()
    standby.verify()
