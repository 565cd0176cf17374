"""Engine benchmarks on Kueue's performance-test shapes, and cycle cost against unfit pending workloads.

Usage: python -m bench.bench_engine
[baseline|fair-sharing|fair-sharing-flat|fair-sharing-deep|large-scale|unfit|borrowers|all]
(default: all: every one but the fair-sharing ones). Prints one JSON object. `fair-sharing-flat` runs the baseline
shape with fair sharing on; `fair-sharing-deep` the same queues and jobs joined into a tree three Cohort levels deep
with Cohort fair-sharing weights (`kueue_shapes.hierarchical`); `fair-sharing` runs both. `borrowers` times one cycle
in which a queue within its nominal quota has many workloads to admit while many others would borrow, which wait
for it (the cycle's borrowing order).
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import sys
import time
from collections import defaultdict

from bench.kueue_shapes import BASELINE, LARGE_SCALE, Shape, cpu_queue, hierarchical, ideal_makespan_ms, scenario
from daemon.domain import events as ev
from daemon.domain.admission import AdmissionEngine, EngineConfig
from daemon.domain.model import (
    Admission,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    ResourceFlavor,
    Workload,
)
from daemon.domain.state import State
from daemon.obs.logging import configure as configure_logging
from daemon.sim.run import run_simulation


def shape_run(shape: Shape, *, fair: bool = False, deep: bool = False) -> dict[str, object]:
    scen = scenario(shape)
    if deep:
        scen = hierarchical(scen, shape.cohorts, weights=True)
    t0 = time.perf_counter()
    result = asyncio.run(run_simulation(scen, config=EngineConfig(fair_sharing=fair)))
    wall = time.perf_counter() - t0
    admissions = sum(len(o.admitted_at) for o in result.jobs.values())
    waits: dict[str, list[int]] = defaultdict(list)
    for out in result.jobs.values():
        cls = out.key.split("/")[1].rsplit("-", 1)[0]
        if out.admitted_at:
            waits[cls].append(out.admitted_at[0] - out.created_at)
    unfinished = sum(1 for o in result.jobs.values() if o.finished_at is None)
    ideal = ideal_makespan_ms(shape)
    return {
        "shape": shape.name + (" (hierarchical, 3 Cohort levels, weighted)" if deep else ""),
        "fair_sharing": fair,
        "cluster_queues": shape.cohorts * shape.queues_per_cohort,
        "workloads": len(scen.jobs),
        "unfinished": unfinished,
        "wall_seconds_total": round(wall, 2),
        "wall_seconds_engine": round(result.engine_seconds, 2),
        "cpu_seconds_engine": round(result.engine_cpu_seconds, 3),
        "cycles": result.cycles,
        "decisions": result.decisions,
        "events_logged": result.events,
        "decisions_per_s_engine": round(result.decisions / result.engine_seconds),
        "admissions": admissions,
        "evictions": sum(len(o.evicted_at) for o in result.jobs.values()),
        "admissions_per_s_wall": round(admissions / wall),
        "makespan_s": result.end / 1000,
        "ideal_makespan_s": round(ideal / 1000, 2),
        "makespan_over_ideal": round(result.end / ideal, 3),
        "mean_time_to_admission_s": {k: round(statistics.mean(v) / 1000, 2) for k, v in sorted(waits.items())},
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _wl(ns: str, name: str, cpu: int, at: int) -> Workload:
    return Workload(
        namespace=ns,
        name=name,
        uid=f"{ns}-{name}",
        created_at=at,
        queue_name="q",
        pod_sets=(PodSet(name="main", count=1, requests={"cpu": cpu * 1000}),),
    )


def unfit_cycle(n_unfit: int, rounds: int = 60, *, same_tree: bool = False) -> dict[str, object]:
    """A full queue with `n_unfit` waiting workloads that cannot fit; cycles triggered by arrivals in another queue,
    in another quota tree, or (`same_tree`) in the same cohort, which lends nothing (lendingLimit 0), so that every
    cycle touches the waiters' tree without letting any of them fit."""
    cohort = "shared" if same_tree else None
    state = State()
    engine = AdmissionEngine()
    setup: tuple[ev.Event, ...] = (
        ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="rf")),
        ev.ClusterQueueObserved(cluster_queue=cpu_queue("full", cohort, 10)),
        ev.ClusterQueueObserved(cluster_queue=cpu_queue("busy", cohort, 10, lending_limit=0 if same_tree else None)),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="full", name="q", cluster_queue="full")),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="busy", name="q", cluster_queue="busy")),
        ev.JobObserved(workload=_wl("full", "running", 10, 0)),
        ev.WorkloadAdmitted(
            workload="full/running",
            at=0,
            admission=Admission(
                cluster_queue="full",
                pod_sets=(PodSetAssignment(name="main", count=1, flavors={"cpu": "rf"}, usage={"cpu": 10_000}),),
            ),
        ),
    )
    for e in setup:
        state.apply(e)
    for i in range(n_unfit):
        state.apply(ev.JobObserved(workload=_wl("full", f"waiting-{i}", 5, 1 + i)))
    t0 = time.perf_counter()
    first = engine.decide(state.view(), 1)  # evaluates every waiter once and records why it waits
    first_s = time.perf_counter() - t0
    for e in first:
        state.apply(e)
    times = []
    follow_ups = []  # the admit stage's next call on the cycle's own decisions (it runs one after an admission)
    for r in range(rounds):
        now = 10 + r
        state.apply(ev.JobObserved(workload=_wl("busy", f"arrival-{r}", 1, now)))
        t = time.perf_counter()
        decisions = engine.decide(state.view(), now)
        times.append(time.perf_counter() - t)
        for e in decisions:
            state.apply(e)
        if any(isinstance(e, ev.WorkloadAdmitted | ev.WorkloadPreempted) for e in decisions):
            t = time.perf_counter()
            again = engine.decide(state.view(), now)
            follow_ups.append(time.perf_counter() - t)
            assert not any(isinstance(e, ev.WorkloadAdmitted | ev.WorkloadPreempted) for e in again)
            for e in again:
                state.apply(e)
        state.apply(ev.JobFinished(job=f"busy/arrival-{r}", at=now))
    return {
        "trigger": "same cohort" if same_tree else "another tree",
        "unfit_pending": n_unfit,
        "first_cycle_ms": round(first_s * 1000, 2),
        "cycle_ms_median": round(statistics.median(times) * 1000, 3),
        "cycle_ms_p90": round(sorted(times)[int(len(times) * 0.9)] * 1000, 3),
        "follow_up_cycle_ms_median": round(statistics.median(follow_ups) * 1000, 3) if follow_ups else None,
    }


def borrowers_cycle(n_lender: int, n_borrowers: int, per_borrower: int = 10, rounds: int = 5) -> dict[str, object]:
    """One cohort: `lender` (nominal 2 x `n_lender` CPU) with `n_lender` waiting 1-CPU workloads, and `n_borrowers`
    queues of nominal 0 with `per_borrower` waiting 1-CPU workloads each. Everything fits; one cycle admits it all,
    the lender's workloads first (they do not borrow). The median of `rounds` cycles over the same state."""
    state = State()
    setup: list[ev.Event] = [
        ev.ResourceFlavorObserved(flavor=ResourceFlavor(name="rf")),
        ev.ClusterQueueObserved(cluster_queue=cpu_queue("lender", "shared", 2 * n_lender)),
        ev.LocalQueueObserved(local_queue=LocalQueue(namespace="lender", name="q", cluster_queue="lender")),
    ]
    for b in range(n_borrowers):
        setup.append(ev.ClusterQueueObserved(cluster_queue=cpu_queue(f"b{b}", "shared", 0)))
        setup.append(ev.LocalQueueObserved(local_queue=LocalQueue(namespace=f"b{b}", name="q", cluster_queue=f"b{b}")))
    setup += [ev.JobObserved(workload=_wl("lender", f"w{i}", 1, i)) for i in range(n_lender)]
    for b in range(n_borrowers):
        setup += [ev.JobObserved(workload=_wl(f"b{b}", f"w{i}", 1, i)) for i in range(per_borrower)]
    for e in setup:
        state.apply(e)
    view = state.view()
    times: list[float] = []
    admitted = 0
    for _ in range(rounds):
        t = time.perf_counter()
        decisions = AdmissionEngine().decide(view, 1)
        times.append(time.perf_counter() - t)
        admitted = sum(isinstance(d, ev.WorkloadAdmitted) for d in decisions)
    return {
        "lender_workloads": n_lender,
        "borrowing_queues": n_borrowers,
        "admitted": admitted,
        "cycle_ms_median": round(statistics.median(times) * 1000, 1),
    }


def main() -> None:
    configure_logging(level="warning")  # the simulator's per-cycle debug lines would otherwise be printed and timed
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    results: list[dict[str, object]] = []
    if what in ("baseline", "all"):
        results.append(shape_run(BASELINE))
    if what in ("fair-sharing", "fair-sharing-flat"):  # not in "all" (RESULTS.md, issue 9)
        results.append(shape_run(BASELINE, fair=True))
    if what in ("fair-sharing", "fair-sharing-deep"):
        results.append(shape_run(BASELINE, fair=True, deep=True))
    if what in ("large-scale", "all"):
        results.append(shape_run(LARGE_SCALE))
    if what in ("unfit", "all"):
        for same_tree in (False, True):
            small = unfit_cycle(1_000, same_tree=same_tree)
            deep = unfit_cycle(10_000, same_tree=same_tree)  # issue 23's target: a cycle under 10 ms
            big = unfit_cycle(50_000, same_tree=same_tree)
            ratio = float(str(big["cycle_ms_median"])) / float(str(small["cycle_ms_median"]))
            results.append({"unfit_cycle": [small, deep, big], "ratio_50000_over_1000": round(ratio, 2)})
    if what in ("borrowers", "all"):
        results.append({"borrowers_cycle": [borrowers_cycle(2_000, 50), borrowers_cycle(10_000, 100)]})
    print(json.dumps({"benchmark": "engine", "results": results}, indent=2))


if __name__ == "__main__":
    main()
