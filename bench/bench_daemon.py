"""`admitd run` against the local control plane: latency to unsuspend on an idle queue, and sustained admissions.

Needs a running local cluster (`scripts/local-cluster up`) with admitd's CRDs installed; the benchmark installs them
and starts its own daemon. Prints one JSON object.

- latency: Jobs created one at a time (each after the previous one was unsuspended) into an idle ClusterQueue; the
  time from the create call's answer to the watch event that shows `suspend: false` (median, p99);
- throughput: N Jobs created while their ClusterQueue has no quota, then the quota raised at once: admissions per
  second from the raise to the last unsuspend, with admitd's and kube-apiserver's CPU seconds over that window.

Usage: python -m bench.bench_daemon [--latency-jobs 200] [--queued-jobs 2000] [--no-workload-objects]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.bench_status import cluster
from bench.e2e.procs import cpu_seconds, peak_rss_mib
from daemon.kube.client import KubeClient, load_configuration
from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import Daemon, apply, install_crds, kubectl

V = "kueue.x-k8s.io/v1beta2"


def apiserver_pid(c: KubeCluster) -> int:
    state = json.loads((c.state_dir / "state.json").read_text())
    return int(next(p["pid"] for p in state["processes"] if p["name"] == "kube-apiserver"))


def queue_objects(ns: str, cpu: int) -> list[dict[str, Any]]:
    rf, cq = f"rf-{ns}", f"cq-{ns}"
    return [
        {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": rf}},
        {
            "apiVersion": V,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": rf, "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": V,
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": ns},
            "spec": {"clusterQueue": cq},
        },
    ]


def job_body(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "1s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}],
                },
            },
        },
    }


class Unsuspends:
    """Watches the namespace's Jobs and records when each was first seen unsuspended."""

    def __init__(self, client: KubeClient, ns: str) -> None:
        self.client, self.ns = client, ns
        self.at: dict[str, float] = {}
        self.changed = asyncio.Event()

    async def run(self) -> None:
        path = f"/apis/batch/v1/namespaces/{self.ns}/jobs"
        listed = await self.client.request("GET", path)
        rv = listed["metadata"]["resourceVersion"]
        while True:
            async for _, obj in self.client.stream(path, {"resourceVersion": rv}, server_timeout_s=300):
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                name = obj.get("metadata", {}).get("name")
                if name and obj.get("spec", {}).get("suspend") is False and name not in self.at:
                    self.at[name] = time.monotonic()
                    self.changed.set()


async def latency(client: KubeClient, c: KubeCluster, jobs: int) -> dict[str, object]:
    ns = f"lat-{uuid.uuid4().hex[:6]}"
    kubectl(c, "create", "namespace", ns)
    apply(c, *queue_objects(ns, 100_000))
    watcher = Unsuspends(client, ns)
    task = asyncio.create_task(watcher.run())
    await asyncio.sleep(1)
    samples: list[float] = []
    for i in range(jobs):
        name = f"j{i:04d}"
        await client.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job_body(ns, name))
        created = time.monotonic()
        while name not in watcher.at:
            watcher.changed.clear()
            await asyncio.wait_for(watcher.changed.wait(), 30)
        samples.append((watcher.at[name] - created) * 1000)
    task.cancel()
    kubectl(c, "delete", "namespace", ns, "--wait=false")
    samples.sort()
    return {
        "jobs": jobs,
        "median_ms": round(statistics.median(samples), 1),
        "p99_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 1),
        "max_ms": round(samples[-1], 1),
    }


async def throughput(client: KubeClient, c: KubeCluster, jobs: int, daemon_pid: int) -> dict[str, object]:
    ns = f"tp-{uuid.uuid4().hex[:6]}"
    kubectl(c, "create", "namespace", ns)
    apply(c, *queue_objects(ns, 0))
    watcher = Unsuspends(client, ns)
    task = asyncio.create_task(watcher.run())
    sem = asyncio.Semaphore(16)

    async def create(i: int) -> None:
        async with sem:
            await client.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job_body(ns, f"j{i:05d}"))

    await asyncio.gather(*(create(i) for i in range(jobs)))
    await asyncio.sleep(3)  # every Job observed and pending
    api_pid = apiserver_pid(c)
    cpu0, api0 = cpu_seconds(daemon_pid), cpu_seconds(api_pid)
    cq = queue_objects(ns, jobs * 10)[1]
    t0 = time.monotonic()
    apply(c, cq)
    while len(watcher.at) < jobs and time.monotonic() - t0 < 600:
        watcher.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watcher.changed.wait(), 5)
    last = max(watcher.at.values()) if watcher.at else t0
    window = last - t0
    cpu1, api1 = cpu_seconds(daemon_pid), cpu_seconds(api_pid)
    task.cancel()
    kubectl(c, "delete", "namespace", ns, "--wait=false")
    return {
        "jobs": jobs,
        "unsuspended": len(watcher.at),
        "seconds_from_quota_to_last_unsuspend": round(window, 2),
        "admissions_per_s": round(len(watcher.at) / window, 1) if window > 0 else None,
        "admitd_cpu_s": round(cpu1 - cpu0, 2),
        "admitd_cpu_share_of_window": round((cpu1 - cpu0) / window, 2) if window > 0 else None,
        "apiserver_cpu_s": round(api1 - api0, 2),
        "apiserver_cpu_share_of_window": round((api1 - api0) / window, 2) if window > 0 else None,
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    c = cluster()
    install_crds(c)
    work = Path(tempfile.mkdtemp(prefix="admitd-bench-"))
    extra = ("--no-workload-objects",) if args.no_workload_objects else ()
    daemon = await asyncio.to_thread(Daemon(c, work, extra=extra).start)
    assert daemon.proc is not None
    pid = daemon.proc.pid
    cfg = await load_configuration(c.kubeconfig)
    try:
        async with KubeClient(cfg) as client:
            cpu_start = cpu_seconds(pid)
            lat = await latency(client, c, args.latency_jobs) if args.latency_jobs else None
            tp = await throughput(client, c, args.queued_jobs, pid) if args.queued_jobs else None
            cpu_total = cpu_seconds(pid) - cpu_start
            rss = peak_rss_mib(pid)
    finally:
        code = daemon.stop()
        kubectl(c, "delete", "mutatingwebhookconfiguration", "admitd", "--ignore-not-found")
    return {
        "benchmark": "daemon",
        "workload_objects": not args.no_workload_objects,
        "latency": lat,
        "throughput": tp,
        "admitd_cpu_s_total": round(cpu_total, 2),
        "admitd_peak_rss_mib": round(rss, 1),
        "daemon_exit": code,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--queued-jobs", type=int, default=2000)
    parser.add_argument("--no-workload-objects", action="store_true")
    result = asyncio.run(main(parser.parse_args()))
    json.dump(result, sys.stdout, indent=2)
    print()
