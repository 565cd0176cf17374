"""bench/e2e: the baseline-shape generator and the recorder's arithmetic (no cluster; the full run is a benchmark)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench.e2e.__main__ import merge
from bench.e2e.procs import request_counts, write_latency
from bench.e2e.recorder import (
    Timeline,
    cpu_milli,
    fit_waits,
    max_pending,
    percentile,
    pod_requests,
    queue_figures,
    summarize,
)
from bench.e2e.results import markers, write_results
from bench.e2e.runner import aggregate, caused, make_plan, ratios, tally_events, writes
from bench.e2e.shape import CLASS_LABEL, ShapeError, creator_plan, deep_config, job_object, plan, queue_objects, scaled
from bench.e2e.systems import sync_delays

# The baseline generator configuration as Kueue v0.17.0 ships it (test/performance/scheduler/configs/baseline).
BASELINE: dict[str, Any] = {
    "cohorts": [
        {
            "className": "cohort",
            "count": 5,
            "queuesSets": [
                {
                    "className": "cq",
                    "count": 6,
                    "nominalQuota": 20,
                    "borrowingLimit": 100,
                    "reclaimWithinCohort": "Any",
                    "withinClusterQueue": "LowerPriority",
                    "workloadsSets": [
                        {
                            "count": 350,
                            "creationIntervalMs": 100,
                            "workloads": [{"className": "small", "runtimeMs": 200, "priority": 50, "request": 1}],
                        },
                        {
                            "count": 100,
                            "creationIntervalMs": 500,
                            "workloads": [{"className": "medium", "runtimeMs": 500, "priority": 100, "request": 5}],
                        },
                        {
                            "count": 50,
                            "creationIntervalMs": 1200,
                            "workloads": [{"className": "large", "runtimeMs": 1000, "priority": 200, "request": 20}],
                        },
                    ],
                }
            ],
        }
    ]
}


def test_ten_percent_of_the_baseline_is_30_queues_of_35_10_5_jobs() -> None:
    p = plan(BASELINE, scale_pct=10)
    assert len(p.queues) == 30
    assert len({q.cohort for q in p.queues}) == 5
    assert len(p.jobs) == 1500
    per_queue = Counter((j.namespace, j.klass) for j in p.jobs)
    for q in p.queues:
        assert per_queue[(q.name, "small")] == 35
        assert per_queue[(q.name, "medium")] == 10
        assert per_queue[(q.name, "large")] == 5
    assert p.priorities == {"small": 50, "medium": 100, "large": 200}


def test_sizes_quotas_runtimes_and_creation_times_follow_the_generator_with_cpu_divided_by_ten() -> None:
    p = plan(BASELINE, scale_pct=10)
    q = p.queues[0]
    assert (q.nominal_milli, q.borrowing_limit_milli) == (2000, 10000)
    assert (q.reclaim_within_cohort, q.within_cluster_queue) == ("Any", "LowerPriority")
    by_class = {j.klass: j for j in p.jobs if j.namespace == q.name and j.name.endswith("-0-0")}
    assert (by_class["small"].cpu_milli, by_class["small"].runtime_ms) == (100, 200)
    assert (by_class["medium"].cpu_milli, by_class["medium"].runtime_ms) == (500, 500)
    assert (by_class["large"].cpu_milli, by_class["large"].runtime_ms) == (2000, 1000)
    smalls = sorted(j.create_at_s for j in p.jobs if j.namespace == q.name and j.klass == "small")
    assert smalls[0] == pytest.approx(0.1) and smalls[-1] == pytest.approx(3.5)
    larges = sorted(j.create_at_s for j in p.jobs if j.namespace == q.name and j.klass == "large")
    assert larges == pytest.approx([1.2, 2.4, 3.6, 4.8, 6.0])
    assert [j.create_at_s for j in p.jobs] == sorted(j.create_at_s for j in p.jobs)
    assert len({(j.namespace, j.name) for j in p.jobs}) == len(p.jobs)


def test_objects_are_suspended_jobs_and_v1beta2_queues() -> None:
    p = plan(BASELINE, scale_pct=1)
    large = next(j for j in p.jobs if j.klass == "large")
    body = job_object(large)
    assert body["spec"]["suspend"] is True
    assert body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "large"
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == large.namespace
    assert body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2"}
    assert body["spec"]["template"]["metadata"]["annotations"]["pod-complete.stage.kwok.x-k8s.io/delay"] == "1000ms"
    docs = queue_objects(p)
    kinds = Counter(d["kind"] for d in docs)
    assert kinds == {
        "ResourceFlavor": 1,
        "WorkloadPriorityClass": 3,
        "Namespace": 30,
        "ClusterQueue": 30,
        "LocalQueue": 30,
    }
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    quota = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert (quota["nominalQuota"], quota["borrowingLimit"]) == ("2", "10")
    assert cq["spec"]["cohortName"] == "cohort-0"


def test_scaling_rounds_and_never_drops_a_set() -> None:
    assert scaled(350, 10) == 35
    assert scaled(50, 1) == 1  # 0.5 rounds up
    assert scaled(100, 0.1) == 1
    assert scaled(350, 50) == 175
    with pytest.raises(ShapeError, match="percentage"):
        plan(BASELINE, scale_pct=0)


def test_a_quantity_that_is_not_whole_millicores_after_division_is_refused() -> None:
    bad = {"cohorts": [{**BASELINE["cohorts"][0], "queuesSets": [{**BASELINE["cohorts"][0]["queuesSets"][0]}]}]}
    bad["cohorts"][0]["queuesSets"][0]["nominalQuota"] = "0.0001"
    with pytest.raises(ShapeError, match=r"cohorts\[0\]\.queuesSets\[0\].*millicores"):
        plan(bad, scale_pct=10)


def _job(ns: str, name: str, klass: str, *, suspend: bool, complete: bool = False) -> dict[str, Any]:
    status = {"conditions": [{"type": "Complete", "status": "True"}]} if complete else {}
    return {
        "metadata": {"namespace": ns, "name": name, "labels": {CLASS_LABEL: klass}},
        "spec": {"suspend": suspend},
        "status": status,
    }


def synthetic() -> Timeline:
    t = Timeline()
    # a: small, created 10, admitted 12, evicted 13, readmitted 15, done 16
    t.observe(_job("n", "a", "small", suspend=True), 10.0)
    t.observe(_job("n", "a", "small", suspend=False), 12.0)
    t.observe(_job("n", "a", "small", suspend=True), 13.0)
    t.observe(_job("n", "a", "small", suspend=False), 15.0)
    t.observe(_job("n", "a", "small", suspend=False, complete=True), 16.0)
    t.observe(_job("n", "a", "small", suspend=False, complete=True), 17.0)  # a later update changes nothing
    # b: small, created 11, admitted 11.5, done 14
    t.observe(_job("n", "b", "small", suspend=True), 11.0)
    t.observe(_job("n", "b", "small", suspend=False), 11.5)
    t.observe(_job("n", "b", "small", suspend=False, complete=True), 14.0)
    # c: large, created 10.5, admitted 20.5, done 30
    t.observe(_job("n", "c", "large", suspend=True), 10.5)
    t.observe(_job("n", "c", "large", suspend=False), 20.5)
    t.observe(_job("n", "c", "large", suspend=False, complete=True), 30.0)
    t.observe({"metadata": {"namespace": "n", "name": "other"}, "spec": {"suspend": False}}, 40.0)  # not ours
    return t


def test_summary_of_a_synthetic_timeline() -> None:
    s = summarize(synthetic())
    assert s["jobs"] == 3
    assert s["makespan_s"] == 20.0  # first creation 10 -> last completion 30
    assert s["admissions"] == 4 and s["evictions"] == 1
    assert s["admissions_per_s"] == 0.2
    assert s["time_to_admission_s"]["small"] == {"jobs": 2, "mean": 1.25, "p90": 2.0}  # 2.0 and 0.5
    assert s["time_to_admission_s"]["large"] == {"jobs": 1, "mean": 10.0, "p90": 10.0}


def test_summary_refuses_a_run_with_unfinished_jobs() -> None:
    t = synthetic()
    t.observe(_job("n", "d", "small", suspend=True), 18.0)
    with pytest.raises(ValueError, match=r"1 Jobs never completed, e\.g\. n/d"):
        summarize(t)


def test_nearest_rank_percentile() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 90) == 9.0
    assert percentile(values, 100) == 10.0
    assert percentile([5.0], 90) == 5.0
    assert percentile(list(reversed(values)), 50) == 5.0


def test_request_counter_is_summed_per_verb_and_resource() -> None:
    text = "\n".join(
        [
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",resource="jobs",'
            'scope="resource",subresource="",verb="POST",version="v1"} 7',
            'apiserver_request_total{code="409",component="apiserver",dry_run="",group="batch",resource="jobs",'
            'scope="resource",subresource="",verb="POST",version="v1"} 2',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",'
            'scope="resource",subresource="status",verb="PATCH",version="v1"} 5',
            'apiserver_request_duration_seconds_count{verb="POST"} 99',
        ]
    )
    assert request_counts(text) == Counter({"POST batch/jobs": 9, "PATCH pods/status": 5})


def _run(system: str, makespan: float, cpu: float, load: float) -> dict[str, Any]:
    return {
        "system": system,
        "makespan_s": makespan,
        "admissions_per_s": 1500 / makespan,
        "evictions": 3,
        "time_to_admission_s": {"small": {"mean": makespan / 2, "p90": makespan}},
        "cpu_s": {"scheduler": cpu, "kube-apiserver": 10.0},
        "peak_rss_mib": {"scheduler": 100.0},
        "api_requests_per_job": 10.0 if system == "admitd" else 20.0,
        "api_requests_by_kind": {"POST batch/jobs": 1500, **({"PATCH batch/jobs": 1500} if system == "admitd" else {})},
        "jobs": 1500,
        "loadavg_1m_start_end": [load, load],
        "settle_s": 12.5 if system == "admitd" else 3.0,
    }


def _result(summary: dict[str, Any]) -> dict[str, Any]:
    """A saved comparison around `summary`, as `compare` writes it."""
    return {
        "date": "2026-12-01 06:00 UTC",
        "command": "python -m bench.e2e compare",
        "versions": {"systems": ["admitd x", "kueue v0.17.0"], "kubernetes": "v1.36.3"},
        "jobs": 1500,
        "cluster_queues": 30,
        "scale_pct": 10.0,
        "cpus": 2,
        "summary": summary,
    }


def test_medians_ratios_and_the_results_block(tmp_path: Any) -> None:
    a = aggregate([_run("admitd", m, 5.0, 1.0) for m in (40.0, 50.0, 60.0)])
    k = aggregate([_run("kueue", m, 20.0, 2.0) for m in (80.0, 100.0, 90.0)])
    assert a["makespan_s"] == 50.0 and k["makespan_s"] == 90.0
    r = ratios(a, k)
    assert r["makespan_s"] == round(50 / 90, 3)
    assert r["api_requests_per_job"] == 0.5
    assert r["scheduler_cpu_s"] == 0.25
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n\nother text\n")
    result = _result({"lifted": {"admitd": a, "kueue": k, "admitd/kueue": r}})
    write_results(result, path)
    write_results(result, path)  # replaced, not appended twice
    text = path.read_text()
    begin, end = markers("lifted")
    assert text.count(begin) == 1 and text.count(end) == 1 and text.startswith("# Results\n\nother text\n")
    assert "| makespan, s | 50.0 | 90.0 | 0.556 |" in text
    settle = "| still writing after the last Job completed, s (each run; counted in the requests) |"
    assert f"{settle} 12.5, 12.5, 12.5 | 3, 3, 3 | — |" in text


def test_a_failed_run_is_named_in_the_results_block(tmp_path: Any) -> None:
    k = aggregate([_run("kueue", 90.0, 20.0, 2.0)])
    k["failed"] = []
    result = _result(
        {"shipped": {"admitd": {"runs": 0, "failed": ["only 110 of 180 Jobs completed in 180 s"]}, "kueue": k}}
    )
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n")
    write_results(result, path)
    text = path.read_text()
    assert "A admitd run failed: only 110 of 180 Jobs completed in 180 s" in text
    assert "| figure | kueue |" in text and "admitd/Kueue" not in text


def test_the_no_scheduler_baseline_creates_the_same_jobs_running_and_unlabelled() -> None:
    large = next(j for j in plan(BASELINE, scale_pct=1).jobs if j.klass == "large")
    managed, bare = job_object(large), job_object(large, managed=False)
    assert bare["spec"]["suspend"] is False
    assert bare["metadata"]["labels"] == {CLASS_LABEL: "large"}
    assert bare["spec"]["template"] == managed["spec"]["template"]
    t = Timeline()  # a Job created running counts as admitted at its creation
    t.observe(_job("n", "a", "small", suspend=False), 10.0)
    t.observe(_job("n", "a", "small", suspend=False, complete=True), 11.0)
    s = summarize(t)
    assert s["admissions"] == 1 and s["evictions"] == 0 and s["time_to_admission_s"]["small"]["mean"] == 0.0


def test_what_a_scheduler_causes_is_its_requests_minus_the_baselines(tmp_path: Any) -> None:
    none = aggregate([{**_run("none", 30.0, 0.0, 1.0), "api_requests_per_job": 4.0}])
    a = aggregate([_run("admitd", m, 5.0, 1.0) for m in (40.0, 50.0, 60.0)])
    k = aggregate([_run("kueue", m, 20.0, 2.0) for m in (80.0, 100.0, 90.0)])
    a.update(caused(a, none))
    k.update(caused(k, none))
    assert a["caused_requests_per_job"] == 6.0 and k["caused_requests_per_job"] == 16.0
    assert a["caused_requests_per_job_by_kind"] == {"PATCH batch/jobs": 1.0}  # POST batch/jobs: the same as none's
    assert ratios(a, k)["caused_requests_per_job"] == 0.375
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n")
    result = _result({"lifted": {"admitd": a, "kueue": k, "none": none, "admitd/kueue": ratios(a, k)}})
    write_results(result, path)
    text = path.read_text()
    assert "| API requests per Job caused (minus the no-scheduler baseline) | 6 | 16.0 | 0.375 |" in text
    assert "| no-scheduler baseline, API requests per Job (median of 1) | 4 | 4 | — |" in text


def test_admitds_sync_delays_are_read_from_its_histogram_per_kind() -> None:
    text = "".join(
        f'admitd_status_sync_delay_seconds_bucket{{kind="{kind}",lane="urgent",le="{le}"}} {n}\n'
        for kind, counts in (("event", (0, 6, 9, 10, 10)), ("workload", (0, 0, 0, 1, 4)))
        for le, n in zip(("0.5", "1.0", "2.0", "5.0", "+Inf"), counts, strict=True)
    )
    text = "# TYPE admitd_status_sync_delay_seconds histogram\n" + text
    assert sync_delays(text) == {
        "event/urgent": {"count": 10, "p50_le": 1.0, "p90_le": 2.0},
        "workload/urgent": {"count": 4, "p50_le": None, "p90_le": None},  # past the last finite bound
    }


def test_settling_counts_writes_but_not_reads_watches_or_lease_renewals() -> None:
    counts = Counter(
        {
            "PATCH kueue.x-k8s.io/workloads/status": 3,
            "POST events": 2,
            "APPLY kueue.x-k8s.io/workloads/status": 1,
            "PUT coordination.k8s.io/leases": 50,
            "GET batch/jobs": 7,
            "WATCH batch/jobs": 1,
            "LIST limitranges": 4,
        }
    )
    assert writes(counts) == 6


def test_the_go_creators_plan_has_the_python_creators_bodies_in_one_sequence_per_workload_set() -> None:
    p = plan(BASELINE, scale_pct=10)
    cp = creator_plan(p)
    assert len(cp["jobs"]) == len(p.jobs) == 1500
    assert [e["job"] for e in cp["jobs"]] == [job_object(j) for j in p.jobs]
    groups = Counter(e["group"] for e in cp["jobs"])
    assert len(groups) == 90  # 30 queues x 3 workload sets, as Kueue's generator runs one goroutine each
    q = p.queues[0].name
    assert (groups[f"{q}/0"], groups[f"{q}/1"], groups[f"{q}/2"]) == (35, 10, 5)
    larges = [e["at_s"] for e in cp["jobs"] if e["group"] == f"{q}/2"]
    assert larges == pytest.approx([1.2, 2.4, 3.6, 4.8, 6.0])
    assert all(e["job"]["metadata"]["name"].startswith("large-2-") for e in cp["jobs"] if e["group"] == f"{q}/2")
    bare = creator_plan(p, managed=False)
    assert all(e["job"]["spec"]["suspend"] is False for e in bare["jobs"])


def _sized(
    ns: str, name: str, *, suspend: bool, parallelism: int, cpu: str, gpus: int = 0, complete: bool = False
) -> dict[str, Any]:
    obj = _job(ns, name, "large", suspend=suspend, complete=complete)
    requests: dict[str, Any] = {"cpu": cpu, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    obj["spec"].update(
        {"parallelism": parallelism, "template": {"spec": {"containers": [{"resources": {"requests": requests}}]}}}
    )
    return obj


def test_work_lost_to_preemption_is_the_time_since_each_unsuspend_before_a_resuspend_times_the_pods() -> None:
    t = Timeline()
    # v: 4 pods of 500m and 2 GPUs; runs 10-13 (preempted), 20-21 (preempted), 30-35 (completes)
    for at, suspend in ((9.0, True), (10.0, False), (13.0, True), (20.0, False), (21.0, True), (30.0, False)):
        t.observe(_sized("n", "v", suspend=suspend, parallelism=4, cpu="500m", gpus=2), at)
    t.observe(_sized("n", "v", suspend=False, parallelism=4, cpu="500m", gpus=2, complete=True), 35.0)
    # w: 1 pod of 2 cpu, never preempted: 10-12
    t.observe(_sized("n", "w", suspend=True, parallelism=1, cpu="2"), 9.0)
    t.observe(_sized("n", "w", suspend=False, parallelism=1, cpu="2"), 10.0)
    t.observe(_sized("n", "w", suspend=False, parallelism=1, cpu="2", complete=True), 12.0)
    lost = summarize(t)["lost_work"]
    assert lost["lost_pod_s"] == 16.0  # (3 + 1) s x 4 pods
    assert lost["lost_cpu_core_s"] == 8.0  # x 0.5 core
    assert lost["lost_gpu_s"] == 32.0  # x 2 GPUs per pod
    assert lost["run_pod_s"] == 16.0 + 20.0 + 2.0  # lost + v's last run (5 s x 4) + w's 2 s
    assert lost["lost_share"] == round(16 / 38, 4)
    assert lost["victims"] == 1
    s = summarize(synthetic())  # a: unsuspended 12, re-suspended 13: 1 pod-second, no requests given
    assert s["lost_work"]["lost_pod_s"] == 1.0 and s["lost_work"]["lost_cpu_core_s"] == 0.0


def test_pod_requests_and_a_cpu_quantity_that_is_not_one_are_named() -> None:
    assert cpu_milli("2") == 2000 and cpu_milli("250m") == 250 and cpu_milli("0.5") == 500
    with pytest.raises(ValueError, match=r"'2Gi' is not a number of cores"):
        cpu_milli("2Gi")
    job = _sized("n", "x", suspend=True, parallelism=3, cpu="100m", gpus=1)
    assert pod_requests(job["spec"]) == (3, 100, 1)
    assert pod_requests({}) == (1, 0, 0)


def test_the_results_block_has_kueue_tuned_and_lost_work_and_old_files_still_render(tmp_path: Any) -> None:
    def with_lost(r: dict[str, Any], pod_s: float) -> dict[str, Any]:
        return {**r, "lost_work": {"lost_pod_s": pod_s, "lost_cpu_core_s": pod_s / 10, "lost_gpu_s": 0.0,
                                   "lost_share": pod_s / 1000}}  # fmt: skip

    a = aggregate([with_lost(_run("admitd", m, 5.0, 1.0), 40.0) for m in (40.0, 50.0, 60.0)])
    k = aggregate([with_lost(_run("kueue", m, 20.0, 2.0), 4.0) for m in (80.0, 100.0, 90.0)])
    kt = aggregate([with_lost(_run("kueue-tuned", m, 10.0, 2.0), 2.0) for m in (60.0, 70.0)])
    assert a["lost_pod_s"] == 40.0 and a["lost_share"] == 0.04 and a["lost_pod_s_all"] == [40.0, 40.0, 40.0]
    summary = {"admitd": a, "kueue": k, "kueue-tuned": kt}
    summary.update({"admitd/kueue": ratios(a, k), "admitd/kueue-tuned": ratios(a, kt)})
    result = {**_result({"lifted": summary}), "creator": "go"}
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n")
    write_results(result, path)
    text = path.read_text()
    assert "| figure | admitd | kueue | kueue-tuned | admitd/Kueue | admitd/Kueue tuned |" in text
    assert "| makespan, s | 50.0 | 90.0 | 65.0 | 0.556 | 0.769 |" in text
    assert (
        "| work lost to preemption, pod-s unsuspended before a re-suspend (upper bound) | 40.0 | 4 | 2 | 10.0 | 20.0 |"
        in text
    )
    assert "Jobs created by the go creator" in text
    assert "GPU-s" not in text  # no GPUs in the shape: no row
    # A file saved before lost work, Kueue tuned and the creator existed: its old columns, "—" for lost work.
    old_a = aggregate([_run("admitd", m, 5.0, 1.0) for m in (40.0, 50.0, 60.0)])
    old_k = aggregate([_run("kueue", m, 20.0, 2.0) for m in (80.0, 100.0, 90.0)])
    for old in (old_a, old_k):
        for key in ("lost_pod_s", "lost_cpu_core_s", "lost_gpu_s", "lost_share", "lost_pod_s_all", "creators"):
            old.pop(key)
    path.write_text("# Results\n")
    write_results(_result({"lifted": {"admitd": old_a, "kueue": old_k, "admitd/kueue": ratios(old_a, old_k)}}), path)
    text = path.read_text()
    assert "| figure | admitd | kueue | admitd/Kueue |" in text
    assert "| work lost to preemption, pod-s unsuspended before a re-suspend (upper bound) | — | — | — |" in text
    assert "Jobs created by the python creator" in text


def test_merged_comparisons_are_one_setting_with_every_run_and_the_ratios_to_both_kueues(tmp_path: Any) -> None:
    def saved(creator: str, makespans: tuple[float, float, float]) -> dict[str, Any]:
        runs = [
            {**_run(system, m, 5.0, 1.0), "setting": "lifted", "creator": creator}
            for system, m in zip(("admitd", "kueue", "kueue-tuned"), makespans, strict=True)
        ]
        return {**_result({}), "benchmark": "e2e", "creator": creator, "complete": True, "runs": runs}

    merged = merge([saved("go", (50.0, 100.0, 80.0)), saved("go", (70.0, 120.0, 60.0))], "i28-go")
    per = merged["summary"]["i28-go"]
    assert set(per) == {"admitd", "kueue", "kueue-tuned", "admitd/kueue", "admitd/kueue-tuned"}
    assert per["admitd"]["makespan_s_all"] == [50.0, 70.0] and per["admitd"]["makespan_s"] == 60.0
    assert per["admitd/kueue-tuned"]["makespan_s"] == 0.857  # 60 / 70
    assert {r["run_setting"] for r in merged["runs"]} == {"lifted"} and merged["creator"] == "go"
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n")
    write_results(merged, path)
    assert "<!-- e2e:i28-go:begin" in path.read_text() and "<!-- e2e:lifted:begin" not in path.read_text()
    other = {**saved("go", (1.0, 2.0, 3.0)), "scale_pct": 50.0}
    with pytest.raises(SystemExit, match="different shapes or scales"):
        merge([saved("go", (1.0, 2.0, 3.0)), other], "x")


def test_the_deep_shape_is_one_queue_hundreds_deep_and_four_shallow_ones_without_borrowing() -> None:
    p = plan(deep_config(), scale_pct=100)
    deep = [j for j in p.jobs if j.namespace == "deep-0-0-deep-0"]
    assert Counter(j.klass for j in deep) == {"small": 400, "medium": 40, "large": 20}
    assert max(j.create_at_s for j in deep) == pytest.approx(4.0)  # all of them in the first 4 s
    assert {j.cpu_milli for j in deep} == {400, 2000, 8000}
    queues = {q.name: q for q in p.queues}
    assert queues["deep-0-0-deep-0"].nominal_milli == 20000
    assert sorted(queues) == ["deep-0-0-deep-0", *(f"shallow-0-{i}-shallow-0" for i in range(4))]
    assert all(q.borrowing_limit_milli == 0 and q.within_cluster_queue == "Never" for q in p.queues)
    assert len({j.priority for j in p.jobs}) == 1  # nothing is preempted
    # The work in the deep queue is far more than its quota holds at once: it stays deep for most of the run.
    work_core_s = sum(j.cpu_milli / 1000 * j.runtime_ms / 1000 for j in deep)
    assert work_core_s / (queues["deep-0-0-deep-0"].nominal_milli / 1000) > 60


def _q(ns: str, name: str, cpu: str, *, suspend: bool, complete: bool = False) -> dict[str, Any]:
    return _sized(ns, name, suspend=suspend, parallelism=1, cpu=cpu, complete=complete)


def test_queue_figures_time_a_pending_job_waiting_while_it_fit_and_admissions_per_minute() -> None:
    t = Timeline()
    # Queue "d", nominal 2 cpu. a (2 cpu) runs 0-10; b (2 cpu) waits from 1, fits from 10 (a completes), admitted
    # at 13: 3 s waiting while it fit. c (1 cpu) created at 2, fits from 10, admitted at 10.5 into the same room:
    # then b no longer fits at 10.5 (c took 1 of 2), so b's wait ends at 10.5; b fits again at 12 (c done), admitted
    # at 13: its longest wait 1 s.
    t.observe(_q("d", "a", "2", suspend=True), 0.0)
    t.observe(_q("d", "a", "2", suspend=False), 0.0)
    t.observe(_q("d", "b", "2", suspend=True), 1.0)
    t.observe(_q("d", "c", "1", suspend=True), 2.0)
    t.observe(_q("d", "a", "2", suspend=False, complete=True), 10.0)
    t.observe(_q("d", "c", "1", suspend=False), 10.5)
    t.observe(_q("d", "c", "1", suspend=False, complete=True), 12.0)
    t.observe(_q("d", "b", "2", suspend=False), 13.0)
    t.observe(_q("d", "b", "2", suspend=False, complete=True), 14.0)
    t.observe(_q("other", "x", "1", suspend=True), 0.0)  # a queue not asked for
    waits = fit_waits({k: r for k, r in t.jobs.items() if k.startswith("d/")}, 2000)
    assert waits == {"d/a": 0.0, "d/b": 1.0, "d/c": 0.5}
    figures = queue_figures(t, {"d": 2000})
    assert set(figures) == {"d"}
    assert figures["d"]["admissions_per_min"] == round(3 / 13 * 60, 2)  # 3 first admissions from 0 to 13
    assert figures["d"]["fit_wait_max_s"] == 1.0 and figures["d"]["max_pending"] == 2
    assert max_pending([]) == 0


def test_the_deep_shapes_queue_groups_are_medians_over_runs_in_the_table(tmp_path: Any) -> None:
    def run(apm: float, wait: float) -> dict[str, Any]:
        queues = {
            "deep-0-0-deep-0": {"admissions_per_min": apm, "fit_wait_max_s": wait, "fit_wait_p99_s": wait / 2},
            "shallow-0-0-shallow-0": {"admissions_per_min": 10.0, "fit_wait_max_s": 0.5, "fit_wait_p99_s": 0.2},
            "shallow-0-1-shallow-0": {"admissions_per_min": 12.0, "fit_wait_max_s": 0.7, "fit_wait_p99_s": 0.3},
        }
        return {**_run("admitd", 50.0, 5.0, 1.0), "queues": queues}

    a = aggregate([run(300.0, 1.0), run(400.0, 3.0), run(500.0, 2.0)])
    assert a["queue_groups"]["deep"] == {"admissions_per_min": 400.0, "fit_wait_max_s": 2.0, "fit_wait_p99_s": 1.0}
    assert a["queue_groups"]["shallow"] == {"admissions_per_min": 22.0, "fit_wait_max_s": 0.7, "fit_wait_p99_s": 0.3}
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n")
    write_results({**_result({"lifted": {"admitd": a}}), "shape": "deep"}, path)
    text = path.read_text()
    assert "| deep queues: admissions per minute | 400.0 |" in text
    assert "| shallow queues: longest wait of a pending Job while it fit, s | 0.7 |" in text
    assert "of the deep shape" in text


def test_the_api_servers_write_latency_sums_the_writes_but_not_reads_watches_or_leases() -> None:
    def line(what: str, verb: str, resource: str, value: float) -> str:
        labels = f'component="apiserver",resource="{resource}",verb="{verb}"'
        return f"apiserver_request_duration_seconds_{what}{{{labels}}} {value}"

    text = "\n".join(
        [
            line("sum", "POST", "jobs", 2.0),
            line("count", "POST", "jobs", 40),
            line("sum", "PATCH", "workloads", 1.0),
            line("count", "PATCH", "workloads", 10),
            line("sum", "PUT", "leases", 9.0),
            line("count", "PUT", "leases", 9),
            line("sum", "WATCH", "jobs", 300.0),
            line("count", "WATCH", "jobs", 1),
            line("sum", "GET", "jobs", 5.0),
            line("count", "GET", "jobs", 5),
            'apiserver_request_duration_seconds_bucket{resource="jobs",verb="POST",le="0.1"} 40',
        ]
    )
    assert write_latency(text) == (3.0, 50.0)


def test_a_ttl_after_finished_goes_into_every_jobs_spec_from_both_creators() -> None:
    p = make_plan(BASELINE, 2, ttl_after_finished_s=30)
    assert p.ttl_after_finished_s == 30
    large = next(j for j in p.jobs if j.klass == "large")
    body = job_object(large, ttl_s=p.ttl_after_finished_s)
    assert body["spec"]["ttlSecondsAfterFinished"] == 30 and body["spec"]["suspend"] is True
    assert "ttlSecondsAfterFinished" not in job_object(large)["spec"]  # none asked: finished Jobs are kept
    assert all(e["job"]["spec"]["ttlSecondsAfterFinished"] == 30 for e in creator_plan(p)["jobs"])
    assert all("ttlSecondsAfterFinished" not in e["job"]["spec"] for e in creator_plan(make_plan(BASELINE, 2))["jobs"])
    with pytest.raises(ShapeError, match="negative"):
        job_object(large, ttl_s=-1)


def test_scheduler_cpu_per_job_is_a_median_over_runs_and_a_row_with_its_ratio(tmp_path: Any) -> None:
    a = aggregate([_run("admitd", 50.0, cpu, 1.0) for cpu in (3.0, 4.5, 6.0)])  # 1,500 Jobs each
    k = aggregate([_run("kueue", 90.0, cpu, 1.0) for cpu in (15.0, 12.0)])
    assert a["scheduler_cpu_ms_per_job"] == 3.0 and k["scheduler_cpu_ms_per_job"] == 9.0
    r = ratios(a, k)
    assert r["scheduler_cpu_ms_per_job"] == 0.333
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n")
    write_results(
        {**_result({"lifted": {"admitd": a, "kueue": k, "admitd/kueue": r}}), "ttl_after_finished_s": 30}, path
    )
    text = path.read_text()
    assert "| scheduler CPU per Job, ms | 3 | 9 | 0.333 |" in text
    assert "finished Jobs deleted 30 s after they finished" in text


def test_a_named_comparison_is_its_one_setting_under_that_name_with_its_own_command() -> None:
    runs = [{**_run(s, m, 5.0, 1.0), "setting": "lifted"} for s, m in (("admitd", 50.0), ("kueue", 90.0))]
    raw = {**_result({}), "benchmark": "e2e", "complete": True, "runs": runs, "ttl_after_finished_s": 30}
    named = merge([raw], "issue28-50pct", merging=False)
    assert set(named["summary"]) == {"issue28-50pct"} and named["command"] == raw["command"]
    assert named["ttl_after_finished_s"] == 30
    assert named["summary"]["issue28-50pct"]["admitd/kueue"]["makespan_s"] == 0.556
    with pytest.raises(SystemExit, match="different shapes or scales"):
        merge([raw, {**raw, "ttl_after_finished_s": None}], "x")  # kept and deleted Jobs are not one comparison


def test_events_are_tallied_by_component_kind_and_reason_with_their_repeats() -> None:
    items = [
        {"reportingComponent": "admitd", "involvedObject": {"kind": "Job"}, "reason": "Admitted", "count": 1},
        {"source": {"component": "job-controller"}, "involvedObject": {"kind": "Job"}, "reason": "Completed"},
        {
            "reportingComponent": "",
            "source": {"component": "kueue-admission"},
            "involvedObject": {"kind": "Workload"},
            "reason": "Pending",
            "count": 3,
        },
        {
            "reportingComponent": "admitd",
            "involvedObject": {"kind": "Job"},
            "reason": "Admitted",
            "series": {"count": 2},
        },
    ]
    assert tally_events(items) == {
        "admitd: Job Admitted": 3,
        "kueue-admission: Workload Pending": 3,
        "job-controller: Job Completed": 1,
    }
