"""Workload.spec.active: false (Kueue's `kubectl kueue stop workload`) in the simulator: the admitted job is
evicted (reason Deactivated, decided by the admit stage from the observation), held out of its queue while inactive,
and requeued when active again; bad annotations are refused with the field named.

Real: the CLI as a subprocess, the loader, the fold, the engine, the event log. Faked: the cluster (virtual clock;
`simulate.admitd.io/deactivate-at` / `reactivate-at` stand for the user's edits of the Workload).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from daemon.eventlog import LogReader
from daemon.sim.reproduce import reproduce
from tests.integration.scenario_text import BASE, job

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "config" / "samples" / "stop-and-resume.yaml"


def admitd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )


def test_a_deactivated_job_is_evicted_held_and_requeued_when_active_again(tmp_path: Path) -> None:
    db = tmp_path / "stop.db"
    done = admitd("simulate", str(SAMPLE), "--db", str(db), "--json")
    assert done.returncode == 0, done.stderr
    jobs = json.loads(done.stdout)["jobs"]
    train, nxt, parked = jobs["lab/train"], jobs["lab/next"], jobs["lab/parked"]
    assert (train["admitted_at"], train["evicted_at"], train["finished_at"]) == ([0, 300], [120], 900)
    assert (nxt["admitted_at"], nxt["finished_at"]) == ([120], 180), "the quota it freed is used at once"
    assert parked["admitted_at"] == [] and parked["pending_reason"].startswith("Deactivated: ")
    with LogReader(db) as reader:
        story = [(e.type, e.payload) for e in reader.events_of("job/lab/train")]
    types = [t for t, _ in story]
    first_off = types.index("workload.active_changed")
    preempted = types.index("workload.preempted")
    assert first_off < preempted < types.index("job.suspended") < types.index("workload.evicted")
    reason = json.loads(story[preempted][1])
    assert (reason["reason"], reason["preemptor"], reason["policy"]) == ("Deactivated", None, "spec.active=false")
    back_on = [json.loads(p)["active"] for t, p in story if t == "workload.active_changed"]
    assert back_on == [False, True]
    # While inactive it is never readmitted: the second admission comes after the reactivation.
    admitted = [i for i, t in enumerate(types) if t == "workload.admitted"]
    assert len(admitted) == 2 and admitted[1] > [i for i, t in enumerate(types) if t == "workload.active_changed"][1]
    history = admitd("history", "lab/train", "--db", str(db)).stdout
    assert "deactivated (spec.active: false)" in history and "reactivated (spec.active: true)" in history
    x = json.loads(admitd("explain", "lab/parked", "--db", str(db), "--json").stdout)
    assert (x["pending"]["reason"], x["pending"]["kueue_reason"]) == ("Deactivated", "Deactivated")


def test_the_recorded_log_reproduces(tmp_path: Path) -> None:
    db = tmp_path / "stop.db"
    assert admitd("simulate", str(SAMPLE), "--db", str(db)).returncode == 0
    with LogReader(db) as reader:
        result = reproduce(reader)
    assert result.first_mismatch is None and result.decisions_checked > 0, result


def _scenario(tmp_path: Path, **annotations: str) -> Path:
    doc: dict[str, Any] = json.loads(job("a").removeprefix("---\n"))
    doc["metadata"].setdefault("annotations", {}).update(annotations)
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "---\n" + json.dumps(doc) + "\n")
    return path


def test_bad_activity_annotations_reject_the_job_naming_the_field(tmp_path: Path) -> None:
    cases = {
        "simulate.admitd.io/deactivate-at": ({"simulate.admitd.io/deactivate-at": "soon"}, "soon"),
        "simulate.admitd.io/reactivate-at": ({"simulate.admitd.io/reactivate-at": "1m"}, "needs"),
    }
    for field, (given, text) in cases.items():
        done = admitd("simulate", str(_scenario(tmp_path, **given)))
        assert f"metadata.annotations[{field}]" in done.stderr and text in done.stderr, done.stderr
    early = {"simulate.admitd.io/submit-at": "2m", "simulate.admitd.io/deactivate-at": "1m"}
    done = admitd("simulate", str(_scenario(tmp_path, **early)))
    assert "must not be before the job is submitted (2m)" in done.stderr, done.stderr
