"""waitForPodsReady end to end in the simulator: the timeouts, the backoff, deactivation and blockAdmission as a user
of `admitd simulate` sees them, and `admitd explain` naming the reason.

Real: the scenario loader, the Configuration parser, the daemon's stages (ingest, admit, actuate) on the simulated
cluster and virtual clock, the SQLite event log, the read side (explain, history) and `reproduce`. Faked: the
cluster (daemon.sim), whose pods become ready as `simulate.admitd.io/ready-after` says.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.model import PendingReasonKind
from daemon.eventlog import LogReader
from daemon.eventlog.codec import decode
from daemon.manifests.config import load_config as parse_config_file
from daemon.manifests.config import parse_config
from daemon.sim.reproduce import reproduce
from daemon.sim.run import SimResult, run_simulation
from daemon.sim.scenario import load_scenario

MIN = 60_000
ROOT = Path(__file__).resolve().parents[2]

QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: gpu
      resources:
      - {name: "nvidia.com/gpu", nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: research}
spec: {clusterQueue: team}
"""


def job(name: str, gpus: int, *, runtime: str | None, ready_after: str | None = None, submit_at: str = "0s") -> str:
    annotations = {"simulate.admitd.io/submit-at": submit_at}
    if runtime is not None:
        annotations["simulate.admitd.io/runtime"] = runtime
    if ready_after is not None:
        annotations["simulate.admitd.io/ready-after"] = ready_after
    return json.dumps(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": "research",
                "labels": {"kueue.x-k8s.io/queue-name": "q"},
                "annotations": annotations,
            },
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {"containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}
                },
            },
        }
    )


def config(**fields: object) -> dict[str, object]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "waitForPodsReady": {"enable": True, **fields},
    }


def simulate(tmp_path: Path, jobs: list[str], cfg: dict[str, object], db: Path | None = None) -> SimResult:
    path = tmp_path / "scenario.yaml"
    path.write_text(QUEUES + "".join(f"---\n{j}\n" for j in jobs), encoding="utf-8")
    engine, warnings = parse_config(cfg)
    assert warnings == ()
    return asyncio.run(run_simulation(load_scenario(path), config=engine, db_path=db))


def test_a_job_never_ready_is_evicted_at_each_timeout_requeued_after_a_doubling_backoff_then_deactivated(
    tmp_path: Path,
) -> None:
    # `long` keeps the run going (it is ready at once and runs 2 h); `stuck` never gets its pods ready.
    db = tmp_path / "log.db"
    cfg = config(timeout="5m", blockAdmission=False, requeuingStrategy={"backoffLimitCount": 2})
    result = simulate(
        tmp_path, [job("stuck", 4, runtime="10m", ready_after="never"), job("long", 4, runtime="2h")], cfg, db
    )
    stuck = result.jobs["research/stuck"]
    # Admitted at 0; timeouts at 5m, 11m (requeued 6m after 60 s), 18m (requeued 13m after 120 s): deactivated.
    assert stuck.admitted_at == [0, 6 * MIN, 13 * MIN]
    assert stuck.evicted_at == [5 * MIN, 11 * MIN, 18 * MIN]
    assert stuck.finished_at is None
    assert stuck.pending_reason is not None and stuck.pending_reason.kind is PendingReasonKind.DEACTIVATED
    assert result.jobs["research/long"].evicted_at == []
    assert result.jobs["research/long"].finished_at == 120 * MIN + 1  # created 1 ms after stuck (same instant)
    reader = LogReader(db)
    timed_out = [
        e
        for seq, t, v, p in reader.iter_payloads()
        if isinstance(e := decode(t, v, p, seq=seq), ev.WorkloadTimedOut) and e.workload == "research/stuck"
    ]
    assert [(e.at, e.timeouts, e.requeue_at, e.deactivated) for e in timed_out] == [
        (5 * MIN, 1, 6 * MIN, False),
        (11 * MIN, 2, 13 * MIN, False),
        (18 * MIN, 3, None, True),
    ]
    # Every decision in the log (timeouts and requeues included) is what the engine decides again from the log.
    again = reproduce(reader, parse_config(cfg)[0])
    assert again.first_mismatch is None
    assert again.decisions_checked >= 5  # 3 timeouts, 2 requeues, besides the admissions
    # With another backoffLimitCount the same log is not what admitd would have decided.
    other = config(timeout="5m", blockAdmission=False, requeuingStrategy={"backoffLimitCount": 3})
    assert reproduce(reader, parse_config(other)[0]).first_mismatch is not None


def test_block_admission_holds_the_next_job_until_the_admitted_one_is_ready_or_timed_out(tmp_path: Path) -> None:
    jobs = [
        job("stuck", 3, runtime="10m", ready_after="never"),
        job("slow", 3, runtime="10m", ready_after="2m", submit_at="1s"),
        job("quick", 2, runtime="10m", submit_at="2s"),
    ]
    db = tmp_path / "held.db"
    held = simulate(tmp_path, jobs, config(timeout="5m"), db)
    assert reproduce(LogReader(db), parse_config(config(timeout="5m"))[0]).first_mismatch is None
    # stuck blocks everything until it times out at 5m; slow is admitted then and blocks until ready at 7m, when
    # quick is admitted (stuck is back from its backoff at 6m but newer in the queue: requeued by eviction time).
    assert held.jobs["research/slow"].admitted_at[0] == 5 * MIN
    assert held.jobs["research/quick"].admitted_at[0] == 7 * MIN
    assert held.jobs["research/stuck"].evicted_at[0] == 5 * MIN
    free = simulate(tmp_path, jobs, config(timeout="5m", blockAdmission=False))
    assert free.jobs["research/slow"].admitted_at[0] == 1000
    assert free.jobs["research/quick"].admitted_at[0] == 2000


def test_a_job_ready_within_the_timeout_runs_to_completion(tmp_path: Path) -> None:
    result = simulate(tmp_path, [job("fine", 4, runtime="30m", ready_after="4m59s")], config(timeout="5m"))
    fine = result.jobs["research/fine"]
    assert (fine.admitted_at, fine.evicted_at, fine.finished_at) == ([0], [], 30 * MIN)


def test_explain_and_history_name_the_pods_ready_timeout(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    simulate(
        tmp_path,
        [job("stuck", 4, runtime="10m", ready_after="never"), job("long", 4, runtime="1h")],
        config(timeout="5m", requeuingStrategy={"backoffLimitCount": 0}),
        db,
    )
    cli = [sys.executable, "-m", "daemon.cli"]
    at_6m = subprocess.run(
        [*cli, "explain", "research/stuck", "--db", str(db), "--at", "6m"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert at_6m.returncode == 0, at_6m.stderr
    assert "InactiveWorkload: its pods were not all ready 300s after its admission" in at_6m.stdout
    assert "Deactivated" in at_6m.stdout
    history = subprocess.run(
        [*cli, "history", "research/stuck", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert history.returncode == 0, history.stderr
    events = json.loads(history.stdout)["events"]
    assert [e["kind"] for e in events].count("timed-out") == 1
    evicted = [e["text"] for e in events if e["kind"] == "evicted"]
    assert evicted == ["evicted (InactiveWorkload); deactivated, not requeued"]


def test_the_sample_does_what_its_header_says() -> None:
    engine, warnings = parse_config_file(ROOT / "config/admitd-wait-for-pods-ready.yaml")
    assert warnings == ()
    result = asyncio.run(run_simulation(load_scenario(ROOT / "config/samples/wait-for-pods-ready.yaml"), config=engine))
    jobs = result.jobs
    assert jobs["research/warm-up"].admitted_at == [0]
    assert jobs["research/train"].admitted_at == [MIN] and jobs["research/eval"].admitted_at == [MIN]
    bad = jobs["research/bad-image"]
    assert bad.admitted_at == [20 * MIN, 28 * MIN, 32 * MIN]
    assert bad.evicted_at == [23 * MIN, 31 * MIN, 35 * MIN]
    assert bad.pending_reason is not None and bad.pending_reason.kind is PendingReasonKind.DEACTIVATED
    assert jobs["research/later"].admitted_at == [23 * MIN]
