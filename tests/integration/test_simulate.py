"""`admitd simulate` end to end: the bundled samples, the JSON contract, the kept log, bad scenarios.

Real: the CLI as a subprocess, the YAML loader, the fold, the engine, the SQLite event log, `admitd log verify`.
Faked: the cluster (a virtual clock: jobs "run" for their annotated runtime).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.eventlog import LogReader, replay
from daemon.sim import run as sim_run
from daemon.sim.reproduce import reproduce
from daemon.sim.scenario import load_scenario
from daemon.stages import recorder as stages_recorder

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "config" / "samples"


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def simulate_json(*args: str) -> dict[str, object]:
    result = simulate(*args, "--json")
    assert result.returncode == 0, result.stderr
    body: dict[str, object] = json.loads(result.stdout)
    return body


def test_the_seed_runs_as_a_kueue_user_expects() -> None:
    out = simulate_json(str(SAMPLES / "seed.yaml"))
    jobs = out["jobs"]
    assert isinstance(jobs, dict)
    assert set(out) == {"end", "jobs"}
    assert set(jobs["research/pretrain-a"]) == {
        "cluster_queue",
        "admitted_at",
        "evicted_at",
        "finished_at",
        "flavors",
        "counts",
        "pending_reason",
    }
    # 4 + 4 GPUs fit the nominal 8 side by side; the 8-GPU gang waits for both, then runs whole.
    assert jobs["research/pretrain-a"]["admitted_at"] == [0]
    assert jobs["research/finetune-b"]["admitted_at"] == [30]
    assert jobs["research/big-sweep"]["admitted_at"] == [600]
    assert jobs["research/big-sweep"]["finished_at"] == 1800
    assert jobs["research/big-sweep"]["flavors"] == {"main": {"nvidia.com/gpu": "h100-flavor"}}
    # borrowingLimit without a cohort has no effect: 16 GPUs can never fit in 8.
    assert jobs["research/too-big"]["admitted_at"] == []
    assert jobs["research/too-big"]["pending_reason"].startswith("ExceedsMaxQuota")
    assert jobs["research/too-big"]["cluster_queue"] == "team-research"
    assert jobs["vision/lost"]["pending_reason"].startswith("LocalQueueNotFound")
    assert jobs["vision/lost"]["cluster_queue"] is None
    assert out["end"] == 1800


def test_the_seed_warns_that_its_borrowing_limit_needs_a_cohort() -> None:
    result = simulate(str(SAMPLES / "seed.yaml"))
    assert result.returncode == 0
    assert "borrowingLimit has no effect until the ClusterQueue joins a cohort" in result.stderr
    assert "research/big-sweep" in result.stdout and "finished" in result.stdout


def test_the_cohort_sample_borrows_reclaims_and_preempts_by_priority() -> None:
    jobs = simulate_json(str(SAMPLES / "cohort-borrow-reclaim.yaml"))["jobs"]
    assert isinstance(jobs, dict)
    borrower, routine, urgent = jobs["team-a/a-borrower"], jobs["team-b/b-routine"], jobs["team-b/b-urgent"]
    assert borrower["admitted_at"][0] == 10  # borrowed team-b's idle quota
    assert borrower["evicted_at"] == [300]  # reclaimed when team-b's own job arrived at 5m
    assert routine["admitted_at"][0] == 300
    assert routine["evicted_at"] == [600]  # the urgent job preempts it inside team-b
    assert urgent["admitted_at"] == [600] and urgent["finished_at"] == 1200
    assert routine["admitted_at"][1] == 1200 and routine["finished_at"] == 1200 + 1800  # runtime restarts
    assert borrower["finished_at"] == borrower["admitted_at"][-1] + 3600


def test_until_stops_the_clock_and_reports_why_jobs_wait(tmp_path: Path) -> None:
    out = simulate_json(str(SAMPLES / "seed.yaml"), "--until", "1m30s")
    jobs = out["jobs"]
    assert isinstance(jobs, dict)
    assert out["end"] == 90
    assert jobs["research/big-sweep"]["admitted_at"] == []
    assert jobs["research/big-sweep"]["pending_reason"].startswith("WaitingForQuota")
    assert "research/too-big" not in jobs  # created at 2m, after the end


def test_the_kept_log_verifies_replays_to_the_same_state_and_reproduces_every_decision(tmp_path: Path) -> None:
    db = tmp_path / "sim.db"
    result = simulate(str(SAMPLES / "cohort-borrow-reclaim.yaml"), "--db", str(db))
    assert result.returncode == 0, result.stderr
    verify = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "log", "verify", "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    with LogReader(db) as reader:
        state = replay(reader)
        report = reproduce(reader)
    assert report.first_mismatch is None
    assert report.decisions_checked >= 8
    assert state.finished.keys() == {"team-a/a-nominal", "team-a/a-borrower", "team-b/b-routine", "team-b/b-urgent"}


def test_an_existing_db_is_refused_rather_than_appended_to(tmp_path: Path) -> None:
    db = tmp_path / "taken.db"
    db.write_bytes(b"")
    result = simulate(str(SAMPLES / "seed.yaml"), "--db", str(db))
    assert result.returncode == 2
    assert "already exists" in result.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("kind: [unclosed", "s.yaml:2: invalid YAML"),
        ("", ""),
    ],
    ids=["broken-yaml", "empty-file"],
)
def test_bad_scenario_files(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    result = simulate(str(path), "--json")
    if text:
        assert result.returncode == 2
        assert str(path) in result.stderr and needle in result.stderr
        assert result.stdout == ""
    else:
        assert result.returncode == 0
        assert json.loads(result.stdout) == {"end": 0, "jobs": {}}


def test_a_missing_scenario_is_one_line_exit_2() -> None:
    result = simulate("/nonexistent/scenario.yaml")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "/nonexistent/scenario.yaml" in result.stderr


def test_bad_objects_are_reported_and_do_not_stop_the_others(tmp_path: Path) -> None:
    scenario = (
        (SAMPLES / "seed.yaml").read_text()
        + """
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: broken
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["cpu"]
    flavors:
    - name: h100-flavor
      resources:
      - name: cpu
        nominalQuota: -4
---
apiVersion: batch/v1
kind: Job
metadata:
  name: bad-time
  namespace: research
  labels: {kueue.x-k8s.io/queue-name: research-queue}
  annotations: {simulate.admitd.io/submit-at: "soon"}
spec:
  template:
    spec:
      containers: [{name: c, image: c, resources: {requests: {nvidia.com/gpu: 1}}}]
"""
    )
    path = tmp_path / "s.yaml"
    path.write_text(scenario)
    result = simulate(str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert "ClusterQueue broken" in result.stderr and "nominalQuota" in result.stderr
    assert "bad-time" in result.stderr and "simulate.admitd.io/submit-at" in result.stderr
    jobs = json.loads(result.stdout)["jobs"]
    assert "research/bad-time" not in jobs
    assert jobs["research/big-sweep"]["finished_at"] == 1800  # the good objects ran as before


def test_log_lines_are_json_off_a_terminal_and_carry_the_seq_they_are_about() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "--log-level", "debug", "simulate", str(SAMPLES / "seed.yaml"), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    cycles = [line for line in lines if line["event"] == "admission cycle"]
    assert cycles, result.stderr
    assert all(isinstance(c["seq"], int) and c["seq"] > 0 for c in cycles)
    assert lines[-1]["event"] == "simulation finished"


async def test_snapshots_written_during_a_simulation_replay_to_the_simulators_own_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim_run, "SNAPSHOT_EVERY", 5)
    monkeypatch.setattr(stages_recorder, "_CATCH_UP_EVERY", 1)
    db = tmp_path / "snap.db"
    result = await sim_run.run_simulation(load_scenario(SAMPLES / "cohort-borrow-reclaim.yaml"), db_path=db)
    assert result.state is not None
    with LogReader(db) as reader:
        assert reader.stats().snapshots >= 2
        from_snapshot, from_scratch = replay(reader), replay(reader, use_snapshots=False)
    assert from_snapshot.to_snapshot() == from_scratch.to_snapshot() == result.state.to_snapshot()


def test_pending_messages_show_quantities_as_kubernetes_writes_them() -> None:
    jobs = simulate_json(str(SAMPLES / "seed.yaml"))["jobs"]
    assert isinstance(jobs, dict)
    assert jobs["research/too-big"]["pending_reason"].endswith("request 16 exceeds the maximum capacity 8")


def test_fair_sharing_from_the_configuration_file_changes_who_gets_the_last_slot() -> None:
    def first_wave(*extra: str) -> dict[str, int]:
        jobs = simulate_json(str(SAMPLES / "fair-sharing.yaml"), *extra)["jobs"]
        assert isinstance(jobs, dict)
        return {
            team: sum(1 for k, v in jobs.items() if k.startswith(team) and v["admitted_at"][:1] == [60])
            for team in ("team-a", "team-b")
        }

    assert first_wave() == {"team-a": 4, "team-b": 3}  # FIFO: team-a's jobs were created first
    assert first_wave("--config", str(ROOT / "config" / "admitd-fair-sharing.yaml")) == {"team-a": 3, "team-b": 4}
    assert first_wave("--fair-sharing") == {"team-a": 3, "team-b": 4}


def test_a_bad_configuration_file_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nfairSharing: {enable: 1}\n")
    result = simulate(str(SAMPLES / "seed.yaml"), "--config", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "fairSharing.enable: must be true or false" in result.stderr and str(path) in result.stderr
