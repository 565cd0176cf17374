"""API requests per Job of what users see (Workloads, queue status, Events), with and without Workload objects,
and the cost of one status write as a merge patch vs a server-side apply; against the local control plane.

Needs a running local cluster (`scripts/local-cluster up [--state-dir DIR]`; LOCAL_CLUSTER_STATE_DIR names it).
Each scenario runs `admitd run` as a process (as the integration tests do) and reads the request counts it logs
when it stops (`api_requests`: watches, lists, Job patches, webhook registration; `status_requests`: the status
writer's own client). Scenarios:
  flow:  N Jobs of 4 GPUs into a ClusterQueue of 16 (4 run at once, 1 s each through kwok): pending, admitted,
         finished, one after the other; per Job: everything admitd sent, minus an idle daemon's count.
  deep:  N Jobs submitted at once into a queue that runs 4 and holds the rest (a deep queue): how many status
         writes and how long the rate-limited writer takes to drain them.
  write: one Workload's status written M times, alternating two messages: merge patch vs server-side apply
         (application/apply-patch+yaml, fieldManager=admitd, force): wall time per request and kube-apiserver CPU.

Usage: python -m bench.bench_status [--jobs N] [--deep N] [--writes M]   Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from daemon.kube.client import MERGE_PATCH, KubeClient, load_configuration
from tests.integration.conftest import STATE_DIR, KubeCluster
from tests.integration.daemon_harness import Daemon, apply, install_crds, job, kubectl, wait_for

V = "kueue.x-k8s.io/v1beta2"
APPLY_PATCH = "application/apply-patch+yaml"


def cluster() -> KubeCluster:
    state = json.loads((STATE_DIR / "state.json").read_text())
    return KubeCluster(
        kubeconfig=Path(state["kubeconfig"]),
        state_dir=STATE_DIR,
        apiserver_url=state["apiserver_url"],
        etcd_url=state["etcd_url"],
        started_here=False,
    )


def apiserver_cpu_s() -> float:
    state = json.loads((STATE_DIR / "state.json").read_text())
    pid = next(p["pid"] for p in state["processes"] if p["name"] == "kube-apiserver")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def queues(c: KubeCluster, ns: str, gpus: int) -> None:
    rf, cq = f"rf-{ns}", f"cq-{ns}"
    apply(
        c,
        {
            "apiVersion": V,
            "kind": "ResourceFlavor",
            "metadata": {"name": rf},
            "spec": {"nodeLabels": {"gpu-type": "h100"}},
        },
        {
            "apiVersion": V,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": rf, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}],
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
    )


def new_namespace(c: KubeCluster) -> str:
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    kubectl(c, "create", "namespace", ns)
    wait_for("the default ServiceAccount", lambda: bool(kubectl(c, "get", "sa", "default", "-n", ns, check=False)))
    return ns


def cleanup(c: KubeCluster, ns: str) -> None:
    # Waited for, so that the next daemon does not see (and count requests for) this one's Jobs.
    kubectl(c, "delete", "namespace", ns, "--timeout=120s", check=False)
    kubectl(c, "delete", "clusterqueue", f"cq-{ns}", "--ignore-not-found", "--wait=false", check=False)
    kubectl(c, "delete", "resourceflavor", f"rf-{ns}", "--ignore-not-found", "--wait=false", check=False)


def stopped_counts(d: Daemon) -> dict[str, int]:
    for line in reversed(d.stderr.read_text().splitlines()):
        if '"stopped"' in line:
            rec = json.loads(line)
            return {"api": int(rec["api_requests"]), "status": int(rec["status_requests"])}
    raise RuntimeError("the daemon logged no 'stopped' line")


def completed(c: KubeCluster, ns: str) -> int:
    out = kubectl(c, "get", "jobs", "-n", ns, "-o", "json")
    items = json.loads(out)["items"]
    done = 0
    for j in items:
        for cond in (j.get("status") or {}).get("conditions") or ():
            if cond["type"] == "Complete" and cond["status"] == "True":
                done += 1
    return done


def run_daemon(c: KubeCluster, extra: tuple[str, ...], body: Any) -> tuple[dict[str, int], Any]:
    with tempfile.TemporaryDirectory() as tmp:
        d = Daemon(c, Path(tmp), extra=extra).start()
        try:
            result = body(d)
            time.sleep(3.0)  # let the status writer drain what it still has
        finally:
            code = d.stop()
            kubectl(c, "delete", "mutatingwebhookconfiguration", "admitd", "--ignore-not-found")
        if code != 0:
            raise RuntimeError(f"admitd exited {code}")
        return stopped_counts(d), result


def idle(c: KubeCluster, extra: tuple[str, ...]) -> dict[str, int]:
    ns = new_namespace(c)
    try:
        counts, _ = run_daemon(c, extra, lambda d: queues(c, ns, 16))
        return counts
    finally:
        cleanup(c, ns)


def flow(c: KubeCluster, n: int, extra: tuple[str, ...]) -> dict[str, Any]:
    ns = new_namespace(c)

    def body(d: Daemon) -> float:
        queues(c, ns, 16)
        t0 = time.monotonic()
        apply(c, *(job(ns, f"j{i}", queue="q", gpus=4, runtime="1s") for i in range(n)))
        wait_for(f"{n} jobs to complete", lambda: completed(c, ns) == n, timeout=60 + 3 * n, every=1.0)
        return time.monotonic() - t0

    try:
        counts, seconds = run_daemon(c, extra, body)
    finally:
        cleanup(c, ns)
    return {"jobs": n, "seconds": round(seconds, 1), **counts}


def deep(c: KubeCluster, n: int, extra: tuple[str, ...], qps: float) -> dict[str, Any]:
    ns = new_namespace(c)
    wl_expected = "--no-workload-objects" not in extra

    def settled() -> bool:
        s = json.loads(kubectl(c, "get", "clusterqueue", f"cq-{ns}", "-o", "json")).get("status") or {}
        if (s.get("pendingWorkloads"), s.get("admittedWorkloads")) != (n - 4, 4):
            return False
        if not wl_expected:
            return True
        items = json.loads(kubectl(c, "get", "workloads", "-n", ns, "-o", "json"))["items"]
        with_status = [w for w in items if (w.get("status") or {}).get("conditions")]
        return len(with_status) == n

    def body(d: Daemon) -> float:
        queues(c, ns, 16)
        t0 = time.monotonic()
        apply(c, *(job(ns, f"j{i}", queue="q", gpus=4, runtime="1h") for i in range(n)))
        wait_for("every Workload and the queue status written", settled, timeout=120 + 4 * n / qps, every=0.5)
        return time.monotonic() - t0

    try:
        counts, seconds = run_daemon(c, (*extra, "--status-qps", str(qps), "--status-burst", str(int(qps))), body)
    finally:
        cleanup(c, ns)
    return {"jobs": n, "qps": qps, "seconds_until_written": round(seconds, 1), **counts}


async def writes(c: KubeCluster, m: int) -> dict[str, Any]:
    """One Workload (no owner, deleted after), its status written m times per method."""
    ns = new_namespace(c)
    cfg = await load_configuration(c.kubeconfig)
    base = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads"
    body = {
        "apiVersion": V,
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": ns},
        "spec": {
            "queueName": "q",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}],
        },
    }

    def status(i: int) -> dict[str, Any]:
        cond = {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": f"insufficient unused quota for nvidia.com/gpu in flavor h100, {i % 2 + 1} more needed",
            "lastTransitionTime": "2026-12-01T03:00:00Z",
        }
        return {"status": {"conditions": [cond]}}

    out: dict[str, Any] = {"writes": m}
    try:
        async with KubeClient(cfg) as client:
            await client.request("POST", base, body=body)
            for method in ("merge-patch", "server-side-apply"):
                cpu0, t0 = apiserver_cpu_s(), time.perf_counter()
                for i in range(m):
                    if method == "merge-patch":
                        await client.request("PATCH", f"{base}/w/status", body=status(i), content_type=MERGE_PATCH)
                    else:
                        doc = {"apiVersion": V, "kind": "Workload", "metadata": {"name": "w", "namespace": ns}}
                        await client.request(
                            "PATCH",
                            f"{base}/w/status",
                            params={"fieldManager": "admitd", "force": "true"},
                            body={**doc, **status(i)},
                            content_type=APPLY_PATCH,
                        )
                wall, cpu = time.perf_counter() - t0, apiserver_cpu_s() - cpu0
                out[method] = {
                    "ms_per_write": round(1000 * wall / m, 2),
                    "apiserver_cpu_ms_per_write": round(1000 * cpu / m, 2),
                }
            got = await client.request("GET", f"{base}/w")
            out["managed_fields_bytes"] = len(json.dumps(got["metadata"].get("managedFields", [])))
    finally:
        cleanup(c, ns)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40, help="Jobs in the flow scenario (default 40)")
    parser.add_argument("--deep", type=int, default=200, help="Jobs in the deep-queue scenario (default 200)")
    parser.add_argument("--writes", type=int, default=300, help="status writes per method (default 300)")
    parser.add_argument("--qps", type=float, default=50.0, help="--status-qps in the deep scenario (default 50)")
    args = parser.parse_args()
    c = cluster()
    install_crds(c)
    result: dict[str, Any] = {"write": asyncio.run(writes(c, args.writes))}
    for label, extra in (("workload-objects", ()), ("no-workload-objects", ("--no-workload-objects",))):
        base = idle(c, extra)
        f = flow(c, args.jobs, extra)
        per_job = {
            "all": round((f["api"] + f["status"] - base["api"] - base["status"]) / f["jobs"], 2),
            "status": round((f["status"] - base["status"]) / f["jobs"], 2),
            "other": round((f["api"] - base["api"]) / f["jobs"], 2),
        }
        d = deep(c, args.deep, extra, args.qps)
        d["status_per_job"] = round((d["status"] - base["status"]) / d["jobs"], 2)
        result[label] = {"idle": base, "flow": f, "flow_per_job": per_job, "deep": d}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
