"""`admitd simulate --against LOG -f JOB.yaml`: a dry run on a recorded log's state with known answers.

Real: the simulator (to record the log), the log, the fold, the engine, the CLI. Faked: nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ADMITD = [sys.executable, "-m", "daemon.cli"]

SCENARIO = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: lab}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: h100
      resources: [{name: "nvidia.com/gpu", nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: lab}
spec: {clusterQueue: lab}
"""


def _job(name: str, gpus: int, *, at: str | None = None, runtime: str | None = None, urgent: bool = False) -> str:
    labels = "kueue.x-k8s.io/queue-name: main" + (", kueue.x-k8s.io/priority-class: urgent" if urgent else "")
    notes = ", ".join(
        f"simulate.admitd.io/{k}: {v}" for k, v in (("submit-at", at), ("runtime", runtime)) if v is not None
    )
    return (
        f"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  namespace: lab\n  labels: {{{labels}}}\n"
        f"  annotations: {{{notes}}}\nspec:\n  parallelism: {gpus}\n  template:\n    spec:\n"
        "      restartPolicy: Never\n      containers: [{name: w, image: w, resources: {requests: "
        "{nvidia.com/gpu: 1}}}]\n"
    )


def _log(tmp_path: Path) -> Path:
    """a and b (8 GPUs, 10 minutes each) one after the other: at the log's last event (+10m) a has finished (the
    one recorded run, 10 minutes) and b has just been admitted."""
    scenario = tmp_path / "lab.yaml"
    scenario.write_text(
        SCENARIO + "---\n" + _job("a", 8, at="0s", runtime="10m") + "---\n" + _job("b", 8, at="1s", runtime="10m")
    )
    db = tmp_path / "lab.db"
    subprocess.run(
        [*ADMITD, "simulate", str(scenario), "--db", str(db), "--until", "15m"], check=True, capture_output=True
    )
    return db


def _try(db: Path, tmp_path: Path, job: str) -> dict[str, object]:
    f = tmp_path / "try.yaml"
    f.write_text(job)
    out = subprocess.run(
        [*ADMITD, "simulate", "--against", str(db), "-f", str(f), "--json"], check=True, capture_output=True, text=True
    )
    body = json.loads(out.stdout)
    assert body["now"] == "+10m"
    [row] = body["jobs"]
    return row  # type: ignore[no-any-return]


def test_a_job_that_waits_gets_its_reason_and_starts_when_the_running_one_ends(tmp_path: Path) -> None:
    db = _log(tmp_path)
    row = _try(db, tmp_path, _job("c", 8))
    assert row["admitted_now"] is False and row["never"] is False and row["would_preempt"] == []
    assert row["reason"]["kind"] == "WaitingForQuota"  # type: ignore[index]
    assert (row["p50"], row["p90"]) == ("+20m", "+20m")  # b ends after the recorded 10 minutes
    assert row["p50_in_seconds"] == 600


def test_a_job_too_big_for_the_queue_would_never_be_admitted(tmp_path: Path) -> None:
    row = _try(_log(tmp_path), tmp_path, _job("huge", 100))
    assert row["never"] is True and row["reason"]["kind"] == "ExceedsMaxQuota"  # type: ignore[index]
    assert row["p50"] is None


def test_an_urgent_job_would_preempt_the_running_one_and_start_once_it_stops(tmp_path: Path) -> None:
    row = _try(_log(tmp_path), tmp_path, _job("hot", 8, urgent=True))
    assert row["would_preempt"] == ["lab/b"]
    assert row["reason"]["kind"] == "WaitingForPreemptedWorkloads"  # type: ignore[index]
    assert row["p50"] == "+10m"  # in the forward run the victim stops at once


def test_nothing_is_written_and_bad_input_is_one_line(tmp_path: Path) -> None:
    db = _log(tmp_path)
    before = db.stat().st_size, db.stat().st_mtime_ns
    _try(db, tmp_path, _job("c", 8))
    assert (db.stat().st_size, db.stat().st_mtime_ns) == before
    bare = subprocess.run([*ADMITD, "simulate", "--against", str(db)], check=False, capture_output=True, text=True)
    assert bare.returncode == 2 and "-f JOB.yaml" in bare.stderr
    missing = subprocess.run(
        [*ADMITD, "simulate", "--against", str(tmp_path / "none.db"), "-f", str(tmp_path / "try.yaml")],
        check=False,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


def test_eta_report_scores_the_estimates_of_a_known_history(tmp_path: Path) -> None:
    """a, b, c (8 GPUs, 10 minutes each) one after the other: at 5m nothing has finished (b and c: unknown); at 10m
    and 15m c is estimated to start at 20m from a's recorded 10 minutes, and it does: error 0, inside p10-p90."""
    scenario = tmp_path / "three.yaml"
    jobs = [_job(n, 8, at=f"{i}s", runtime="10m") for i, n in enumerate("abc")]
    scenario.write_text(SCENARIO + "---\n" + "---\n".join(jobs))
    db = tmp_path / "three.db"
    subprocess.run([*ADMITD, "simulate", str(scenario), "--db", str(db)], check=True, capture_output=True)
    out = subprocess.run(
        [*ADMITD, "eta-report", "--db", str(db), "--every", "5m", "--json"], check=True, capture_output=True, text=True
    )
    body = json.loads(out.stdout)
    assert (body["estimates_made"], body["unknown"], body["not_started_by_the_end"]) == (4, 2, 0)
    assert body["scores"]["lab"] == {"estimates": 2, "median_abs_error_seconds": 0.0, "inside_p10_p90": 1.0}
    assert body["scores"]["all"] == body["scores"]["lab"]
    by_class = subprocess.run(
        [*ADMITD, "eta-report", "--db", str(db), "--every", "5m", "--by", "priorityclass", "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert set(json.loads(by_class.stdout)["scores"]) == {"-", "all"}  # the jobs name no priority class


def test_a_simulation_records_estimates_for_eta_report_to_score(tmp_path: Path) -> None:
    """The same a, b, c with `--estimate-every 5m`: a round at the first instant from 5m on (10m: a finished, b
    admitted, c waiting: estimated to start at 20m from a's recorded 10 minutes) and from 15m on (20m: c admitted,
    nothing waits). One estimate recorded, and it was right. The run itself is the one without the option."""
    scenario = tmp_path / "three.yaml"
    scenario.write_text(
        SCENARIO + "---\n" + "---\n".join(_job(n, 8, at=f"{i}s", runtime="10m") for i, n in enumerate("abc"))
    )
    runs = {}
    for name, extra in (("plain", []), ("estimating", ["--estimate-every", "5m"])):
        db = tmp_path / f"{name}.db"
        out = subprocess.run(
            [*ADMITD, "simulate", str(scenario), "--db", str(db), "--json", *extra],
            check=True,
            capture_output=True,
            text=True,
        )
        report = subprocess.run(
            [*ADMITD, "eta-report", "--db", str(db), "--every", "5m", "--json"],
            check=True,
            capture_output=True,
            text=True,
        )
        runs[name] = (json.loads(out.stdout), json.loads(report.stdout)["recorded"])
    assert runs["plain"][0] == runs["estimating"][0]
    assert runs["plain"][1]["estimates_made"] == 0
    recorded = runs["estimating"][1]
    assert (recorded["estimates_made"], recorded["unknown"], recorded["not_started_by_the_end"]) == (1, 0, 0)
    assert recorded["scores"]["lab"] == {"estimates": 1, "median_abs_error_seconds": 0.0, "inside_p10_p90": 1.0}
    bad = subprocess.run(
        [*ADMITD, "simulate", str(scenario), "--estimate-every", "0s"], check=False, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "positive" in bad.stderr
