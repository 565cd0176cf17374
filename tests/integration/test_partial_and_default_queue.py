"""`admitd simulate` with partial admission and Kueue's job-management settings (the default LocalQueue,
manageJobsWithoutQueueName, managedJobsNamespaceSelector, the PartialAdmission feature gate).

Real: the CLI as a subprocess, the YAML loader and the Job adapter, the Configuration reader, the fold, the engine.
Faked: the cluster (a virtual clock: jobs "run" for their annotated runtime).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "config" / "samples" / "partial-and-default-queue.yaml"
MANAGE_ALL = ROOT / "config" / "admitd-manage-all-jobs.yaml"


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def jobs_of(*args: str) -> dict[str, Any]:
    result = simulate(*args, "--json")
    assert result.returncode == 0, result.stderr
    jobs: dict[str, Any] = json.loads(result.stdout)["jobs"]
    return jobs


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n" + text)
    return str(path)


def test_the_sample_as_kueue_would_run_it() -> None:
    jobs = jobs_of(str(SAMPLE))
    # Unlabelled, research has a LocalQueue `default`: queued there.
    assert jobs["research/pretrain"]["cluster_queue"] == "team-research"
    assert jobs["research/pretrain"]["admitted_at"] == [0]
    # 8 pods asked, min 2, 4 GPUs free at 1m: admitted with 4, and runs its annotated 5m.
    assert jobs["research/sweep"]["admitted_at"] == [60]
    assert jobs["research/sweep"]["counts"] == {"main": 4}
    assert jobs["research/sweep"]["finished_at"] == 360
    assert jobs["research/eval"]["admitted_at"] == [600]
    assert jobs["research/eval"]["counts"] == {"main": 8}
    # No label, no default queue in scratch; kube-system never managed: neither is simulated.
    assert set(jobs) == {"research/pretrain", "research/sweep", "research/eval"}


def test_manage_jobs_without_queue_name_holds_the_unlabelled_job() -> None:
    jobs = jobs_of(str(SAMPLE), "--config", str(MANAGE_ALL))
    held = jobs["scratch/cleanup"]
    assert held["admitted_at"] == [] and held["cluster_queue"] is None
    assert held["pending_reason"].startswith("LocalQueueNotFound: the job has no kueue.x-k8s.io/queue-name label")
    assert "namespace scratch had no LocalQueue named default" in held["pending_reason"]
    assert "kube-system/node-check" not in jobs  # the namespace selector's default leaves kube-system out
    assert jobs["research/pretrain"]["admitted_at"] == [0]  # the default LocalQueue still wins


def test_the_namespace_selector_is_always_respected(tmp_path: Path) -> None:
    """Only scratch is managed: research's jobs, labelled or not, are left alone; scratch's unlabelled one is held."""
    cfg = config(
        tmp_path,
        "manageJobsWithoutQueueName: true\n"
        "managedJobsNamespaceSelector:\n"
        "  matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [scratch]}]\n",
    )
    jobs = jobs_of(str(SAMPLE), "--config", cfg)
    assert set(jobs) == {"scratch/cleanup"}


def test_partial_admission_gate_off_runs_the_sweep_whole(tmp_path: Path) -> None:
    jobs = jobs_of(str(SAMPLE), "--config", config(tmp_path, "featureGates: {PartialAdmission: false}\n"))
    assert jobs["research/sweep"]["admitted_at"] == [600]  # waits for all 8 GPUs, older than eval
    assert jobs["research/sweep"]["counts"] == {"main": 8}
    assert jobs["research/eval"]["admitted_at"] == [900]


def test_a_bad_min_parallelism_rejects_that_job_only(tmp_path: Path) -> None:
    text = SAMPLE.read_text().replace(
        'kueue.x-k8s.io/job-min-parallelism: "2"', 'kueue.x-k8s.io/job-min-parallelism: "8"'
    )
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(text)
    result = simulate(str(scenario), "--json")
    assert result.returncode == 0, result.stderr
    jobs = json.loads(result.stdout)["jobs"]
    assert "research/sweep" not in jobs
    assert jobs["research/eval"]["admitted_at"] == [600]
    assert (
        "Job research/sweep: metadata.annotations[kueue.x-k8s.io/job-min-parallelism]: must be from 1 to 7, "
        "fewer than the Job's 8 pods (got 8)"
    ) in result.stderr


def test_a_bad_setting_is_a_clear_error(tmp_path: Path) -> None:
    cfg = config(tmp_path, "managedJobsNamespaceSelector: {}\n")
    result = simulate(str(SAMPLE), "--config", cfg)
    assert result.returncode == 2
    assert 'managedJobsNamespaceSelector: should not match the "kube-system" namespace' in result.stderr


def test_the_table_says_when_a_job_ran_with_fewer_pods() -> None:
    result = simulate(str(SAMPLE))
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("research/")}
    assert rows["research/sweep"].endswith("finished (4 of 8 pods)")
    assert rows["research/eval"].endswith("finished")


def test_explain_says_the_job_runs_with_fewer_pods(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    assert simulate(str(SAMPLE), "--db", str(db)).returncode == 0
    result = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "explain", "research/sweep", "--at", "2m", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    body = json.loads(result.stdout)
    assert body["admission"]["counts"] == {"main": 4}
    text = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "explain", "research/sweep", "--at", "2m", "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    ).stdout
    assert "partial admission: 4 of 8 pods (at least 2)" in text
