"""One end-to-end run: a fresh cluster, one scheduler, the baseline shape's Jobs, the figures; and the comparison."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from bench.e2e import procs
from bench.e2e.recorder import JobWatcher, queue_figures, summarize
from bench.e2e.shape import SHAPES, Plan, creator_plan, deep_config, job_object, plan, queue_objects
from bench.e2e.systems import CREATOR_BIN, SETTINGS, LocalCluster, RunFailed, Setting
from daemon.kube.client import KubeClient, load_configuration
from tests.integration.conftest import KubeCluster
from tests.integration.daemon_harness import apply, kubectl

CREATE_PARALLELISM = 64
CREATORS = ("python", "go")
GO_CREATOR_LEAD_S = 1.5  # the Go creator starts this long before the plan's offset 0 (its start-up, its client)


class System(Protocol):
    name: str

    def prepare(self) -> None: ...
    def version(self) -> str: ...
    def start(self, c: KubeCluster, workdir: Path, setting: Setting) -> int: ...
    def stop(self) -> int | None: ...
    def log_path(self) -> Path | None: ...


def log(message: str) -> None:
    print(f"[e2e] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def wait_queues_active(c: KubeCluster, names: set[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    inactive: set[str] = set(names)
    while time.monotonic() < deadline:
        import json  # noqa: PLC0415

        listed = json.loads(kubectl(c, "get", "clusterqueues.kueue.x-k8s.io", "-o", "json"))
        inactive = set(names)
        for cq in listed["items"]:
            for cond in (cq.get("status") or {}).get("conditions") or ():
                if cond.get("type") == "Active" and cond.get("status") == "True":
                    inactive.discard(cq["metadata"]["name"])
        if not inactive:
            return
        time.sleep(1)
    raise RunFailed(f"{len(inactive)} ClusterQueues not Active after {timeout:.0f} s, e.g. {sorted(inactive)[:3]}")


async def create_with_python(cclient: KubeClient, p: Plan, *, managed: bool) -> tuple[float, list[float]]:
    """Each Job at its offset from t0, from one asyncio loop (CREATE_PARALLELISM creates in flight, JSON); t0
    (monotonic) and each create's lag behind its target."""
    sem = asyncio.Semaphore(CREATE_PARALLELISM)
    lags: list[float] = []

    async def create(body: dict[str, Any], target: float) -> None:
        async with sem:
            lags.append(time.monotonic() - target)
            ns = body["metadata"]["namespace"]
            await cclient.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=body)

    t0 = time.monotonic() + 0.5
    creations: list[asyncio.Task[None]] = []
    for j in p.jobs:
        target = t0 + j.create_at_s
        delay = target - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        creations.append(
            asyncio.create_task(create(job_object(j, managed=managed, ttl_s=p.ttl_after_finished_s), target))
        )
    await asyncio.gather(*creations)
    return t0, lags


async def create_with_go(
    c: KubeCluster, p: Plan, *, managed: bool, workdir: Path
) -> tuple[float, list[float], dict[str, Any]]:
    """The same Jobs through tests/cluster/creator (client-go, protobuf, one goroutine per workload set, qps 1000
    / burst 2000 as Kueue's runner); t0 (monotonic), the lags it reports (max only) and its report."""
    workdir.mkdir(parents=True, exist_ok=True)
    plan_path = workdir / "creator-plan.json"
    plan_path.write_text(json.dumps(creator_plan(p, managed=managed)))
    lead = GO_CREATOR_LEAD_S
    start_unix, t0 = time.time() + lead, time.monotonic() + lead
    proc = await asyncio.create_subprocess_exec(
        str(CREATOR_BIN),
        "-kubeconfig", str(c.kubeconfig), "-plan", str(plan_path), "-start", f"{start_unix:.6f}",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise RunFailed(f"{CREATOR_BIN} exited with {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
    try:
        report: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RunFailed(f"{CREATOR_BIN} printed no report: {out.decode(errors='replace')[-500:]!r}") from None
    if report.get("created") != len(p.jobs):
        raise RunFailed(f"{CREATOR_BIN} created {report.get('created')} of {len(p.jobs)} Jobs: {report}")
    return t0, [float(report["lag_max_s"])], report


async def drive(
    c: KubeCluster,
    p: Plan,
    pids: dict[str, int],
    timeout_s: float,
    *,
    managed: bool = True,
    creator: str = "python",
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Creates the Jobs on the plan's schedule (with `creator`) and waits for every one to complete; the figures."""
    if creator not in CREATORS:
        raise RunFailed(f"creator {creator!r}: expected one of {', '.join(CREATORS)}")
    cfg = await load_configuration(c.kubeconfig)
    pki = c.state_dir / "pki"
    async with KubeClient(cfg, user_agent="e2e-watch") as wclient, KubeClient(cfg, user_agent="e2e-create") as cclient:
        watcher = JobWatcher(wclient)
        await watcher.start_point()
        watch_task = asyncio.create_task(watcher.run())
        requests0 = await asyncio.to_thread(procs.scrape_requests, c.apiserver_url, pki)
        latency0 = await asyncio.to_thread(procs.scrape_write_latency, c.apiserver_url, pki)
        cpu0 = {name: procs.cpu_seconds(pid) for name, pid in pids.items()}
        load0 = os.getloadavg()
        creator_report: dict[str, Any] = {}
        if creator == "go":
            t0, lags, creator_report = await create_with_go(c, p, managed=managed, workdir=workdir)
        else:
            t0, lags = await create_with_python(cclient, p, managed=managed)
        created_all = time.monotonic() - t0
        deadline = time.monotonic() + timeout_s
        while watcher.timeline.completed() < len(p.jobs):
            if watch_task.done():
                watch_task.result()  # raises what broke the watch
                raise RunFailed("the Job watch ended")
            if time.monotonic() > deadline:
                raise RunFailed(
                    f"only {watcher.timeline.completed()} of {len(p.jobs)} Jobs completed in {timeout_s:.0f} s"
                )
            watcher.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher.changed.wait(), 5)
        completed_at = time.monotonic()
        requests1 = await settle(c.apiserver_url, pki)
        settle_s = time.monotonic() - completed_at
        latency1 = await asyncio.to_thread(procs.scrape_write_latency, c.apiserver_url, pki)
        cpu1 = {name: procs.cpu_seconds(pid) for name, pid in pids.items()}
        load1 = os.getloadavg()
        # After the counts: this listing is not the scheduler's. Which Events reached the API server, by whom.
        events = await event_tally(wclient)
        watch_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watch_task
    figures = summarize(watcher.timeline)
    no_borrowing = {q.name: q.nominal_milli for q in p.queues if q.borrowing_limit_milli == 0}
    if no_borrowing:  # the deep shape: its queues' throughput and waits can be read from the watch alone
        figures["queues"] = queue_figures(watcher.timeline, no_borrowing)
    delta = requests1 - requests0  # Counter subtraction keeps positive counts only
    total = sum(delta.values())
    figures.update(
        {
            "creation_s": round(created_all, 2),
            "settle_s": round(settle_s, 1),
            "creation_lag_max_s": round(max(lags), 3) if lags else 0.0,
            "creator": creator,
            # The API server's mean time per write over the run (leases aside): what a latency-bound scheduler waits.
            "apiserver_write_latency_ms": round((latency1[0] - latency0[0]) / (latency1[1] - latency0[1]) * 1000, 2)
            if latency1[1] > latency0[1]
            else None,
            **({"creator_report": creator_report} if creator_report else {}),
            "cpu_s": {name: round(cpu1[name] - cpu0[name], 2) for name in pids},
            "peak_rss_mib": {name: round(procs.peak_rss_mib(pid), 1) for name, pid in pids.items()},
            "api_requests": total,
            "api_requests_per_job": round(total / len(p.jobs), 2),
            "api_requests_by_kind": dict(Counter(delta).most_common()),
            "events_by_source": events,
            "loadavg_1m_start_end": [round(load0[0], 2), round(load1[0], 2)],
        }
    )
    return figures


def tally_events(items: list[dict[str, Any]]) -> dict[str, int]:
    """Events by "component: involved kind reason", each counted as often as it happened (its `count` or
    `series.count`; client-go's recorder folds repeats into one object), highest first."""
    tally: Counter[str] = Counter()
    for e in items:
        involved = e.get("involvedObject") or e.get("regarding") or {}
        who = e.get("reportingComponent") or (e.get("source") or {}).get("component") or "?"
        times = max(int(e.get("count") or 0), int((e.get("series") or {}).get("count") or 0), 1)
        tally[f"{who}: {involved.get('kind', '?')} {e.get('reason', '?')}"] += times
    return dict(tally.most_common())


async def event_tally(client: KubeClient) -> dict[str, int]:
    """Every namespace's Events, tallied (`tally_events`)."""
    items: list[dict[str, Any]] = []
    params = {"limit": "500"}
    while True:
        page = await client.request("GET", "/api/v1/events", params=params)
        items += page.get("items") or []
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return tally_events(items)
        params = {"limit": "500", "continue": cont}


SETTLE_QUIET_S = 3.0  # no write for this long after the last Job completed: the scheduler is done
SETTLE_TIMEOUT_S = 300.0


def writes(counts: Counter[str]) -> int:
    """Requests that change something, leases aside (every component renews its own, with or without work)."""
    return sum(
        n
        for kind, n in counts.items()
        if kind.split(" ", 1)[0] in {"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}
        and "coordination.k8s.io/leases" not in kind
    )


async def settle(apiserver_url: str, pki: Path) -> Counter[str]:
    """The request counts once nothing has been written for SETTLE_QUIET_S: a scheduler that writes status behind
    the cluster (admitd's status writer under load) finishes what it owes, and the run counts it; a scheduler with
    nothing left to write settles in SETTLE_QUIET_S."""
    counts = await asyncio.to_thread(procs.scrape_requests, apiserver_url, pki)
    quiet_since = time.monotonic()
    deadline = quiet_since + SETTLE_TIMEOUT_S
    while time.monotonic() - quiet_since < SETTLE_QUIET_S:
        if time.monotonic() > deadline:
            raise RunFailed(f"still written to {SETTLE_TIMEOUT_S:.0f} s after the last Job completed")
        await asyncio.sleep(0.5)
        later = await asyncio.to_thread(procs.scrape_requests, apiserver_url, pki)
        if writes(later) != writes(counts):
            quiet_since = time.monotonic()
        counts = later
    return counts


def run_once(
    system: System,
    setting: Setting,
    p: Plan,
    work: Path,
    *,
    timeout_s: float,
    keep: bool = False,
    creator: str = "python",
) -> dict[str, Any]:
    """One system on a fresh cluster; everything started here is stopped before this returns or raises."""
    shutil.rmtree(work, ignore_errors=True)  # a kept folder of an earlier run (its event log) must not be reused
    state_dir = work / "cluster"
    lc = LocalCluster(state_dir, setting)
    started = time.monotonic()
    try:
        log(f"{system.name} / {setting.name}: cluster up")
        c = lc.up()
        log(f"{system.name} / {setting.name}: starting the scheduler")
        sched_pid = system.start(c, work / system.name, setting)
        if getattr(system, "manages_jobs", True):
            apply(c, *queue_objects(p))
            wait_queues_active(c, {q.name for q in p.queues})
        else:  # no scheduler, no queue CRDs: the namespaces only
            apply(c, *(d for d in queue_objects(p) if d["kind"] == "Namespace"))
        pids = {**({"scheduler": sched_pid} if sched_pid else {}), **lc.pids()}
        log(f"{system.name} / {setting.name}: {len(p.jobs)} Jobs")
        figures = asyncio.run(
            drive(
                c,
                p,
                pids,
                timeout_s,
                managed=getattr(system, "manages_jobs", True),
                creator=creator,
                workdir=work / "creator",
            )
        )
        report = getattr(system, "report", None)
        if report is not None:
            try:
                figures.update(report())
            except (OSError, ValueError) as e:
                log(f"{system.name} / {setting.name}: no report from the scheduler: {e}")
        code = system.stop()
        figures["scheduler_exit"] = code
        log(
            f"{system.name} / {setting.name}: makespan {figures['makespan_s']} s, "
            f"{figures['api_requests_per_job']} requests/Job, scheduler cpu {figures['cpu_s'].get('scheduler', 0)} s"
        )
    except BaseException:
        path = system.log_path()
        if path is not None and path.exists():
            log(f"{system.name} log tail ({path}):\n{path.read_text(errors='replace')[-2000:]}")
        raise
    finally:
        with contextlib.suppress(Exception):
            system.stop()
        lc.down()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    figures["wall_s"] = round(time.monotonic() - started, 1)
    return {"system": system.name, "setting": setting.name, **figures}


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def median_of_present(values: list[float | None], digits: int = 3) -> float | None:
    """The median of the values a run recorded; None if none did (a run saved before the figure existed)."""
    present = [v for v in values if v is not None]
    return round(statistics.median(present), digits) if present else None


LOST_FIGURES = ("lost_pod_s", "lost_cpu_core_s", "lost_gpu_s", "lost_share")


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of one system at one setting."""
    classes = sorted(runs[0]["time_to_admission_s"])
    return {
        "runs": len(runs),
        "makespan_s": median([r["makespan_s"] for r in runs]),
        "makespan_s_all": [r["makespan_s"] for r in runs],
        "settle_s_all": [r.get("settle_s") for r in runs],  # None: a run from before the settle phase
        "admissions_per_s": median([r["admissions_per_s"] for r in runs]),
        "evictions": median([r["evictions"] for r in runs]),
        "mean_tta_s": {k: median([r["time_to_admission_s"][k]["mean"] for r in runs]) for k in classes},
        "p90_tta_s": {k: median([r["time_to_admission_s"][k]["p90"] for r in runs]) for k in classes},
        "scheduler_cpu_s": median([r["cpu_s"].get("scheduler", 0.0) for r in runs]),
        "scheduler_cpu_ms_per_job": median([r["cpu_s"].get("scheduler", 0.0) * 1000 / r["jobs"] for r in runs]),
        "scheduler_rss_mib": median([r["peak_rss_mib"].get("scheduler", 0.0) for r in runs]),
        "apiserver_cpu_s": median([r["cpu_s"]["kube-apiserver"] for r in runs]),
        "api_requests_per_job": median([r["api_requests_per_job"] for r in runs]),
        "api_requests_per_job_by_kind": {
            kind: median([r["api_requests_by_kind"].get(kind, 0) / r["jobs"] for r in runs])
            for kind in sorted({k for r in runs for k in r["api_requests_by_kind"]})
        },
        "loadavg_1m": [r["loadavg_1m_start_end"] for r in runs],
        **{
            f: median_of_present([(r.get("lost_work") or {}).get(f) for r in runs], 5 if f == "lost_share" else 3)
            for f in LOST_FIGURES
        },
        "apiserver_write_latency_ms": median_of_present([r.get("apiserver_write_latency_ms") for r in runs]),
        "lost_pod_s_all": [(r.get("lost_work") or {}).get("lost_pod_s") for r in runs],
        "creators": sorted({r.get("creator", "python") for r in runs}),
        **({"queue_groups": queue_groups(runs)} if any("queues" in r for r in runs) else {}),
    }


def queue_groups(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """The deep shape's per-queue figures by group of queues (the class its name begins with: `deep`, `shallow`),
    medians over the runs of: admissions per minute (summed over the group's queues), the longest wait while fitting
    (the group's maximum) and the 99th percentile of those waits (the group's maximum)."""
    per_run: dict[str, list[dict[str, float]]] = {}
    for r in runs:
        groups: dict[str, dict[str, float]] = {}
        for name, q in (r.get("queues") or {}).items():
            g = groups.setdefault(
                name.split("-", 1)[0], {"admissions_per_min": 0.0, "fit_wait_max_s": 0.0, "fit_wait_p99_s": 0.0}
            )
            g["admissions_per_min"] += q.get("admissions_per_min") or 0.0
            g["fit_wait_max_s"] = max(g["fit_wait_max_s"], q["fit_wait_max_s"])
            g["fit_wait_p99_s"] = max(g["fit_wait_p99_s"], q["fit_wait_p99_s"])
        for name, g in groups.items():
            per_run.setdefault(name, []).append(g)
    return {
        name: {f: median([g[f] for g in gs]) for f in ("admissions_per_min", "fit_wait_max_s", "fit_wait_p99_s")}
        for name, gs in sorted(per_run.items())
    }


def caused(a: dict[str, Any], none: dict[str, Any]) -> dict[str, Any]:
    """What a scheduler causes: its API requests per Job minus those of the no-scheduler baseline (medians), in
    total and per kind of request (kinds that differ by at least 0.05 per Job)."""
    by_kind = {
        kind: round(
            a["api_requests_per_job_by_kind"].get(kind, 0) - none["api_requests_per_job_by_kind"].get(kind, 0), 2
        )
        for kind in set(a["api_requests_per_job_by_kind"]) | set(none["api_requests_per_job_by_kind"])
    }
    return {
        "caused_requests_per_job": round(a["api_requests_per_job"] - none["api_requests_per_job"], 2),
        "caused_requests_per_job_by_kind": dict(
            sorted(((k, v) for k, v in by_kind.items() if abs(v) >= 0.05), key=lambda kv: -abs(kv[1]))
        ),
    }


def ratios(a: dict[str, Any], k: dict[str, Any]) -> dict[str, Any]:
    """admitd / Kueue (either configuration) of each aggregated figure."""

    def r(x: float, y: float) -> float | None:
        return round(x / y, 3) if y else None

    return {
        "makespan_s": r(a["makespan_s"], k["makespan_s"]),
        "admissions_per_s": r(a["admissions_per_s"], k["admissions_per_s"]),
        "evictions": r(a["evictions"], k["evictions"]),
        "lost_pod_s": r(a["lost_pod_s"], k["lost_pod_s"])
        if a.get("lost_pod_s") is not None and k.get("lost_pod_s")
        else None,
        "mean_tta_s": {c: r(a["mean_tta_s"][c], k["mean_tta_s"][c]) for c in a["mean_tta_s"]},
        "p90_tta_s": {c: r(a["p90_tta_s"][c], k["p90_tta_s"][c]) for c in a["p90_tta_s"]},
        "scheduler_cpu_s": r(a["scheduler_cpu_s"], k["scheduler_cpu_s"]),
        "scheduler_cpu_ms_per_job": r(a["scheduler_cpu_ms_per_job"], k["scheduler_cpu_ms_per_job"])
        if "scheduler_cpu_ms_per_job" in a and "scheduler_cpu_ms_per_job" in k
        else None,
        "scheduler_rss_mib": r(a["scheduler_rss_mib"], k["scheduler_rss_mib"]),
        "api_requests_per_job": r(a["api_requests_per_job"], k["api_requests_per_job"]),
        **(
            {"caused_requests_per_job": r(a["caused_requests_per_job"], k["caused_requests_per_job"])}
            if "caused_requests_per_job" in a and "caused_requests_per_job" in k
            else {}
        ),
    }


def settings_named(names: str) -> list[Setting]:
    out = []
    for name in names.split(","):
        if name not in SETTINGS:
            raise SystemExit(f"unknown setting {name!r}; known: {', '.join(SETTINGS)}")
        out.append(SETTINGS[name])
    return out


def make_plan(kueue_config: dict[str, Any], scale: float, ttl_after_finished_s: int | None = None) -> Plan:
    p = plan(kueue_config, scale_pct=scale)
    return p if ttl_after_finished_s is None else dataclasses.replace(p, ttl_after_finished_s=ttl_after_finished_s)


def shape_config(shape: str, kueue_baseline: dict[str, Any]) -> dict[str, Any]:
    """The generator configuration of `shape`: Kueue's baseline (read from its module) or the deep queue."""
    if shape == "baseline":
        return kueue_baseline
    if shape == "deep":
        return deep_config()
    raise SystemExit(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
