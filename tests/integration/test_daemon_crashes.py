"""SIGKILL of `admitd run` at random moments while 200 Jobs flow through two cohorts (marker `cluster`).

Real: the daemon process, its SQLite log, the local control plane with the Job controller and kwok's fake GPU
nodes. Nothing is faked; the kills come from a seeded random generator, so a failing run can be repeated. After
every restart the log must verify; at the end every Job has completed or waits with a recorded reason, no Job was
ever admitted twice without an eviction between, and replaying the log never shows a ClusterQueue or a cohort over
its quota. The counts are printed (run with -s to see them).
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest

from daemon.domain import events as ev
from daemon.domain.state import Phase, State
from daemon.eventlog import LogReader
from daemon.eventlog.codec import decode
from daemon.kube.client import KubeClient, load_configuration
from daemon.kube.errors import KubeError
from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import Daemon, apply, install_crds, job, kubectl

V = "kueue.x-k8s.io/v1beta2"
JOBS = 200
KILLS = 22
SEED = 20261201


def queues(ns: str) -> list[dict[str, Any]]:
    rf = f"h100-{ns}"
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": V,
            "kind": "ResourceFlavor",
            "metadata": {"name": rf},
            "spec": {"nodeLabels": {"gpu-type": "h100"}},
        }
    ]
    for cohort in ("left", "right"):
        for team in ("a", "b"):
            cq = f"{cohort}-{team}-{ns}"
            docs.append(
                {
                    "apiVersion": V,
                    "kind": "ClusterQueue",
                    "metadata": {"name": cq},
                    "spec": {
                        "cohortName": f"{cohort}-{ns}",
                        "namespaceSelector": {},
                        "preemption": {"reclaimWithinCohort": "Any"},
                        "resourceGroups": [
                            {
                                "coveredResources": ["nvidia.com/gpu"],
                                "flavors": [{"name": rf, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}],
                            }
                        ],
                    },
                }
            )
            docs.append(
                {
                    "apiVersion": V,
                    "kind": "LocalQueue",
                    "metadata": {"name": f"{cohort}-{team}", "namespace": ns},
                    "spec": {"clusterQueue": cq},
                }
            )
    return docs


async def _create_jobs(client: KubeClient, ns: str, rng: random.Random) -> int:
    """Create every Job, retrying while the webhook is down (failurePolicy Fail refuses them meanwhile)."""
    refused = 0
    for i in range(JOBS):
        body = job(
            ns,
            f"j{i:03d}",
            queue=rng.choice(["left-a", "left-b", "right-a", "right-b"]),
            gpus=rng.choice([1, 2, 4]),
            runtime=f"{rng.choice([1, 2, 3])}s",
        )
        while True:
            try:
                await client.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=body)
                break
            except KubeError:
                refused += 1
                await asyncio.sleep(0.3)
        await asyncio.sleep(rng.uniform(0.0, 0.15))
    return refused


def _check_log(db: Path, ns: str, quotas: dict[str, int]) -> dict[str, int]:
    """Replay the whole log, checking after every event that no queue holds more than its cohort can give."""
    state = State()
    admitted_now: set[str] = set()
    counts = {"admitted": 0, "evicted": 0, "finished": 0, "finished_after_eviction": 0, "double_admissions": 0}
    with LogReader(db) as reader:
        for row in reader.iter_events():
            event = decode(row.type, row.version, row.payload, seq=row.seq)
            state.apply(event, row.seq)
            match event:
                case ev.WorkloadAdmitted(workload=key) if key.startswith(f"{ns}/"):
                    counts["admitted"] += 1
                    if key in admitted_now:
                        counts["double_admissions"] += 1
                    admitted_now.add(key)
                case ev.WorkloadEvicted(workload=key) if key.startswith(f"{ns}/"):
                    counts["evicted"] += key in admitted_now
                    admitted_now.discard(key)
                case ev.JobFinished(job=key) | ev.JobDeleted(job=key) if key.startswith(f"{ns}/"):
                    counts["finished"] += isinstance(event, ev.JobFinished)
                    # A Job whose pods completed just as it was preempted finishes without being admitted again.
                    counts["finished_after_eviction"] += key not in admitted_now
                    admitted_now.discard(key)
                case _:
                    pass
            usage: dict[str, int] = {}
            for rec in state.workloads.values():
                if rec.phase is Phase.ADMITTED and rec.admission is not None and rec.admission.cluster_queue in quotas:
                    gpus = sum(ps.usage.get("nvidia.com/gpu", 0) for ps in rec.admission.pod_sets)
                    cohort = rec.admission.cluster_queue.split("-")[0]
                    usage[cohort] = usage.get(cohort, 0) + gpus
            for cohort, used in usage.items():
                assert used <= 16_000, f"seq {row.seq}: cohort {cohort} holds {used / 1000} GPUs of 16"
    return counts


@pytest.mark.timeout(900)
async def test_sigkill_at_random_moments_loses_and_repeats_no_decision(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    install_crds(kube_cluster)
    ns = namespace
    rng = random.Random(SEED)
    apply(kube_cluster, *queues(ns))
    quotas = {f"{c}-{t}-{ns}": 8000 for c in ("left", "right") for t in ("a", "b")}
    daemon = Daemon(kube_cluster, tmp_path)
    await asyncio.to_thread(daemon.start)
    cfg = await load_configuration(kube_cluster.kubeconfig)
    kills = 0
    try:
        async with KubeClient(cfg) as client:
            creator = asyncio.create_task(_create_jobs(client, ns, rng))
            while kills < KILLS:
                await asyncio.sleep(rng.uniform(0.5, 2.5))
                await asyncio.to_thread(daemon.kill)
                kills += 1
                await asyncio.to_thread(daemon.verify)
                await asyncio.to_thread(daemon.start)
            refused = await creator

            async def unfinished() -> list[str]:
                jobs = (await client.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs"))["items"]
                done = [
                    j
                    for j in jobs
                    if any(
                        c["type"] == "Complete" and c["status"] == "True"
                        for c in j.get("status", {}).get("conditions") or []
                    )
                ]
                return sorted({j["metadata"]["name"] for j in jobs} - {j["metadata"]["name"] for j in done})

            deadline = time.monotonic() + 300
            left = await unfinished()
            while left and time.monotonic() < deadline:
                await asyncio.sleep(2)
                left = await unfinished()
        assert daemon.stop() == 0
    finally:
        if daemon.proc is not None:
            daemon.kill()
        kubectl(
            kube_cluster,
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "admitd",
            "--ignore-not-found",
        )
    daemon.verify()
    counts = _check_log(daemon.db, ns, quotas)
    print(f"\nSIGKILL test: {kills} kills, {refused} job creations refused while down, {counts}")
    assert left == [], f"jobs neither completed nor explained: {left}"
    assert counts["double_admissions"] == 0
    assert counts["finished"] == JOBS
    assert counts["admitted"] == JOBS + counts["evicted"] - counts["finished_after_eviction"]
