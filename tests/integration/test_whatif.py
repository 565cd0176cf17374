"""`admitd simulate --from-log LOG [--with CHANGES.yaml]`: a recorded run replayed unchanged is reproduced exactly; a
queue given more quota waits less, by amounts computed by hand; bad inputs are one line and exit status 2.

Real: the simulator's driver, the fold, the engine, the SQLite event log written by one run and read by the next,
the CLI as a subprocess. Faked: the cluster (a virtual clock), random scenarios drawn by hypothesis.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.domain import events as ev
from daemon.domain.admission import EngineConfig
from daemon.sim.run import SimResult, run_simulation
from daemon.sim.scenario import Scenario
from daemon.sim.whatif import compare, recording, what_if_scenario
from daemon.sim.whatif_cli import read_recording
from tests.integration.logtools import ROOT, admitd, assert_one_clean_line
from tests.integration.test_reproduce_property import scenarios
from tests.unit.builders import cq, flavor, job, lq

SAMPLES = ROOT / "config" / "samples"
EXIT_BAD_INPUT = 2


def _story(result: SimResult) -> dict[str, tuple[object, ...]]:
    return {
        k: (o.cluster_queue, tuple(o.admitted_at), tuple(o.evicted_at), o.finished_at, o.running)
        for k, o in result.jobs.items()
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), fair=st.booleans())
def test_a_recorded_run_replayed_without_changes_is_reproduced_exactly(scenario: Scenario, fair: bool) -> None:
    config = EngineConfig(fair_sharing=fair)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "recorded.db"
        recorded = asyncio.run(run_simulation(scenario, db_path=db, config=config))
        rec = read_recording(db)
    again = asyncio.run(run_simulation(what_if_scenario(rec, []), config=config))
    assert _story(again) == _story(recorded)
    w = compare(rec, [], again)
    for j in w.jobs:
        assert j.recorded == j.what_if, j.key
        assert j.wait_delta in (0, None)
    assert w.total.recorded == w.total.what_if


def _run_json(*args: str) -> dict[str, Any]:
    result = admitd("simulate", *args, "--json")
    assert result.returncode == 0, result.stderr
    body: dict[str, Any] = json.loads(result.stdout)
    return body


@pytest.mark.parametrize(
    ("sample", "config"),
    [
        ("seed.yaml", None),
        ("cohort-borrow-reclaim.yaml", None),
        ("fair-sharing.yaml", None),
        ("fair-sharing.yaml", "config/admitd-fair-sharing.yaml"),
    ],
)
def test_a_sample_recorded_by_simulate_is_reproduced_by_the_cli(
    tmp_path: Path, sample: str, config: str | None
) -> None:
    db = tmp_path / "recorded.db"
    extra = [] if config is None else ["--config", str(ROOT / config)]
    original = _run_json(str(SAMPLES / sample), "--db", str(db), *extra)
    body = _run_json("--from-log", str(db), *extra)
    assert body["changed"] == []
    assert set(body["jobs"]) == set(original["jobs"])
    for key, diff in body["jobs"].items():
        assert diff["recorded"]["admitted_at"] == original["jobs"][key]["admitted_at"], key
        assert diff["what_if"] == diff["recorded"], key
        assert diff["recorded"]["finished_at"] == original["jobs"][key]["finished_at"], key
        assert diff["wait_delta"] in (0, None), key
    assert body["total"]["recorded"] == body["total"]["what_if"]
    assert body["total"]["mean_wait_delta"] == 0


HAND = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: gpu
      resources:
      - {name: "nvidia.com/gpu", nominalQuota: 2}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-b}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: gpu
      resources:
      - {name: "nvidia.com/gpu", nominalQuota: 2}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: a}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: b}
spec: {clusterQueue: team-b}
"""

_JOB = """\
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {ns}
  labels: {{kueue.x-k8s.io/queue-name: q}}
  annotations: {{simulate.admitd.io/submit-at: {at}, simulate.admitd.io/runtime: {runtime}}}
spec:
  template:
    spec:
      containers:
      - name: main
        image: busybox
        resources: {{requests: {{nvidia.com/gpu: {gpus}}}}}
"""

MORE_GPUS = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: gpu
      resources:
      - {name: "nvidia.com/gpu", nominalQuota: 6}
"""


def _hand_scenario(path: Path) -> Path:
    jobs = [("a1", "a", "0s", "10m", 2), ("b1", "b", "30s", "10m", 1), ("a2", "a", "1m", "10m", 2)]
    jobs.append(("a3", "a", "2m", "5m", 2))
    path.write_text(HAND + "".join(_JOB.format(name=n, ns=ns, at=at, runtime=r, gpus=g) for n, ns, at, r, g in jobs))
    return path


def test_more_quota_for_a_queue_cuts_its_waits_by_the_amounts_computed_by_hand(tmp_path: Path) -> None:
    db = tmp_path / "recorded.db"
    _run_json(str(_hand_scenario(tmp_path / "s.yaml")), "--db", str(db))
    changes = tmp_path / "changes.yaml"
    changes.write_text(MORE_GPUS)
    body = _run_json("--from-log", str(db), "--with", str(changes))
    assert body["changed"] == ["ClusterQueue/team-a"]
    jobs = body["jobs"]
    # Recorded, with 2 GPUs: a1 runs 0-10m; a2 (arrived 1m) runs 10m-20m; a3 (arrived 2m) runs 20m-25m.
    # With 6 GPUs each starts on arrival: a1 0-10m, a2 1m-11m, a3 2m-7m. team-b's b1 runs 30s-10m30s in both.
    expected = {  # key: (recorded wait, what-if wait, recorded finish, what-if finish), seconds
        "a/a1": (0, 0, 600, 600),
        "a/a2": (540, 0, 1200, 660),
        "a/a3": (1080, 0, 1500, 420),
        "b/b1": (0, 0, 630, 630),
    }
    for key, (rw, ww, rf, wf) in expected.items():
        diff = jobs[key]
        assert (diff["recorded"]["wait"], diff["what_if"]["wait"]) == (rw, ww), key
        assert (diff["recorded"]["finished_at"], diff["what_if"]["finished_at"]) == (rf, wf), key
        assert diff["wait_delta"] == ww - rw, key
        assert diff["finish_delta"] == wf - rf, key
    a, b, total = body["queues"]["team-a"], body["queues"]["team-b"], body["total"]
    # team-a: waits 0, 9m, 18m -> mean 9m, max 18m; makespan 0 -> 25m. What-if: no waits, makespan 0 -> 11m.
    assert (a["recorded"]["mean_wait"], a["what_if"]["mean_wait"], a["mean_wait_delta"]) == (540, 0, -540)
    assert (a["recorded"]["max_wait"], a["what_if"]["max_wait"], a["max_wait_delta"]) == (1080, 0, -1080)
    assert (a["recorded"]["makespan"], a["what_if"]["makespan"], a["makespan_delta"]) == (1500, 660, -840)
    # team-b: one job, 30s -> 10m30s in both runs.
    assert (b["recorded"]["makespan"], b["what_if"]["makespan"], b["mean_wait_delta"]) == (600, 600, 0)
    # All four: mean wait (0 + 9m + 18m + 0) / 4 = 6m45s -> 0; makespan 25m -> 11m.
    assert (total["recorded"]["mean_wait"], total["what_if"]["mean_wait"]) == (405, 0)
    assert (total["recorded"]["makespan"], total["what_if"]["makespan"]) == (1500, 660)


def test_the_table_shows_the_differences(tmp_path: Path) -> None:
    db = tmp_path / "recorded.db"
    _run_json(str(_hand_scenario(tmp_path / "s.yaml")), "--db", str(db))
    changes = tmp_path / "changes.yaml"
    changes.write_text(MORE_GPUS)
    result = admitd("simulate", "--from-log", str(db), "--with", str(changes))
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.strip()}
    assert rows["team-a"][1:] == ["3", "9m", "0s", "-9m", "18m", "0s", "-18m", "25m", "11m", "-14m"]
    assert rows["a/a3"][1:] == ["team-a", "2m", "5m", "18m", "0s", "-18m", "25m", "7m", "-18m"]
    assert "changed: ClusterQueue team-a" in result.stdout


def test_a_file_that_is_not_an_admitd_log_is_refused(tmp_path: Path) -> None:
    result = admitd("simulate", "--from-log", str(_hand_scenario(tmp_path / "s.yaml")))
    assert_one_clean_line(result, EXIT_BAD_INPUT, "s.yaml", "not an admitd event log")


def test_a_log_without_jobs_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "no-jobs.db"
    (tmp_path / "queues.yaml").write_text(HAND)
    _run_json(str(tmp_path / "queues.yaml"), "--db", str(db))
    result = admitd("simulate", "--from-log", str(db))
    assert_one_clean_line(result, EXIT_BAD_INPUT, str(db), "records no jobs")


@pytest.mark.parametrize(
    ("changes", "needles"),
    [
        (
            MORE_GPUS.replace("nominalQuota: 6", "nominalQuota: -6"),
            ["changes.yaml:1", "ClusterQueue team-a", "nominalQuota", "must not be negative"],
        ),
        (
            "apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: q, namespace: a}\nspec: {}\n",
            ["LocalQueue a/q", "spec.clusterQueue"],
        ),
        (_JOB.format(name="x", ns="a", at="0s", runtime="1m", gpus=1), ["Job a/x", "queue objects only"]),
        (
            MORE_GPUS + "---\n" + MORE_GPUS,
            ["changes.yaml:13", "ClusterQueue team-a", "already given at", "changes.yaml:1"],
        ),
        ("# nothing here\n", ["no queue objects"]),
        ("kind: [\n", ["changes.yaml"]),
    ],
    ids=["a-negative-quota", "a-localqueue-without-its-clusterqueue", "a-job", "twice", "empty", "not-yaml"],
)
def test_bad_changes_are_refused_naming_the_object_and_field(tmp_path: Path, changes: str, needles: list[str]) -> None:
    db = tmp_path / "recorded.db"
    _run_json(str(_hand_scenario(tmp_path / "s.yaml")), "--db", str(db))
    path = tmp_path / "changes.yaml"
    path.write_text(changes)
    result = admitd("simulate", "--from-log", str(db), "--with", str(path))
    assert_one_clean_line(result, EXIT_BAD_INPUT, *needles)
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--with", "c.yaml"], "--with needs --from-log"),
        (["s.yaml", "--from-log", "x.db"], "not both"),
        (["--from-log", "x.db", "--until", "10m"], "--until"),
        ([], "needs a SCENARIO.yaml"),
        (["--from-log", "missing.db"], "missing.db"),
    ],
)
def test_wrong_arguments_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    result = admitd("simulate", *(str(tmp_path / a) if a.endswith((".db", ".yaml")) else a for a in args))
    assert_one_clean_line(result, EXIT_BAD_INPUT, needle)


def test_a_daemon_log_replays_its_queue_changes_at_their_times_unless_changed(tmp_path: Path) -> None:
    wall = 1_764_560_000_000
    none = ev.ClusterQueueObserved(cluster_queue=cq("team-a").flavor("gpu", gpu=0).obj())
    two = ev.ClusterQueueObserved(cluster_queue=cq("team-a").flavor("gpu", gpu=2).obj())
    events: list[tuple[int, ev.Event]] = [
        (wall, ev.ResourceFlavorObserved(flavor=flavor("gpu"))),
        (wall, none),
        (wall, ev.LocalQueueObserved(local_queue=lq("default", "q", "team-a"))),
        (wall + 1000, ev.JobObserved(workload=job("a").gpus(2).at(wall + 1000).obj())),
        (wall + 60_000, two),  # an operator raised the quota a minute in
    ]
    rec = recording(events, source="daemon.db")
    replayed = asyncio.run(run_simulation(what_if_scenario(rec, [])))
    assert replayed.jobs["default/a"].admitted_at == [60_000]
    changed = asyncio.run(run_simulation(what_if_scenario(rec, [two])))
    assert changed.jobs["default/a"].admitted_at == [1000]
    w = compare(rec, [("ClusterQueue", "team-a")], changed)
    (a,) = w.jobs
    assert (a.recorded.wait, a.what_if.wait, a.runtime) == (None, 0, None)
