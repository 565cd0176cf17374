"""`admitd simulate` with PyTorchJob, RayJob and JobSet: the distributed-training sample and bad distributed jobs.

Real: the CLI as a subprocess, the YAML loader with the three adapters, the fold, the engine, the SQLite event log
(`--db`, then `admitd log export`). Faked: the cluster (a virtual clock: jobs "run" for their annotated runtime).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "config" / "samples" / "distributed-training.yaml"


def admitd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_the_distributed_training_sample(tmp_path: Path) -> None:
    db = tmp_path / "sim.db"
    result = admitd("simulate", str(SAMPLE), "--json", "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    jobs: dict[str, Any] = json.loads(result.stdout)["jobs"]

    # The PyTorchJob is admitted whole at once, each pod set in its own flavor: the workers would have to borrow
    # on h100 (whenCanBorrow: TryNextFlavor), so they go to a100.
    bert = jobs["training/bert"]
    assert (bert["admitted_at"], bert["evicted_at"], bert["finished_at"]) == ([60], [], 1860)
    assert bert["flavors"] == {
        "master": {"cpu": "cpu-nodes", "memory": "cpu-nodes", "nvidia.com/gpu": "h100"},
        "worker": {"cpu": "cpu-nodes", "memory": "cpu-nodes", "nvidia.com/gpu": "a100"},
    }

    # The RayJob reclaims the h100s the sweep borrowed, is preempted whole by the urgent Job at 10m, and is admitted
    # again when the urgent Job finishes at 20m; its runtime restarts then (45m).
    tune = jobs["training/tune"]
    assert (tune["admitted_at"], tune["evicted_at"], tune["finished_at"]) == ([120, 1200], [600], 1200 + 45 * 60)
    assert tune["flavors"] == {
        "head": {"cpu": "cpu-nodes", "memory": "cpu-nodes"},
        "gpu": {"cpu": "cpu-nodes", "memory": "cpu-nodes", "nvidia.com/gpu": "h100"},
        "submitter": {"cpu": "cpu-nodes", "memory": "cpu-nodes"},
    }
    assert jobs["training/urgent-eval"]["admitted_at"] == [600]

    # The batch sweep lost its borrowed GPUs to the RayJob and waited until the PyTorchJob released a100/h100.
    sweep = jobs["batch/sweep"]
    assert (sweep["admitted_at"], sweep["evicted_at"]) == ([0, 1860], [120])
    assert jobs["batch/etl"]["admitted_at"] == [180]

    # The log says who preempted whom, and why.
    export = admitd("log", "export", "--db", str(db))
    assert export.returncode == 0, export.stderr
    events = [json.loads(line) for line in export.stdout.splitlines()]
    preemptions = {
        e["payload"]["workload"]: (e["payload"]["preemptor"], e["payload"]["reason"])
        for e in events
        if e["type"] == "workload.preempted"
    }
    assert preemptions == {
        "batch/sweep": ("training/tune", "InCohortReclamation"),
        "training/tune": ("training/urgent-eval", "InClusterQueue"),
    }
    observed = [e["payload"]["workload"] for e in events if e["type"] == "job.observed"]
    kinds = {w["namespace"] + "/" + w["name"]: (w["kind"], [ps["name"] for ps in w["pod_sets"]]) for w in observed}
    assert kinds["training/bert"] == ("PyTorchJob", ["master", "worker"])
    assert kinds["training/tune"] == ("RayJob", ["head", "gpu", "submitter"])

    # explain and history name each pod set's flavors.
    explain = admitd("explain", "training/bert", "--db", str(db))
    assert explain.returncode == 0, explain.stderr
    assert (
        "with master: cpu in flavor cpu-nodes, memory in flavor cpu-nodes, nvidia.com/gpu in flavor h100; "
        "worker: cpu in flavor cpu-nodes, memory in flavor cpu-nodes, nvidia.com/gpu in flavor a100"
    ) in explain.stdout
    history = admitd("history", "training/tune", "--db", str(db))
    assert history.returncode == 0, history.stderr
    assert "gpu: cpu in cpu-nodes, memory in cpu-nodes, nvidia.com/gpu in h100; submitter:" in history.stdout


BAD = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: ml}
spec: {clusterQueue: cq}
---
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: on-shared, namespace: ml, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  clusterSelector: {ray.io/cluster: shared}
  entrypoint: python x.py
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: chief, namespace: ml, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  pytorchReplicaSpecs:
    Chief: {replicas: 1, template: {spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}}
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: good
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: q}
  annotations: {simulate.admitd.io/runtime: 5m}
spec:
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 2
        template: {spec: {containers: [{name: c, resources: {requests: {cpu: 2}}}]}}
"""


def test_bad_distributed_jobs_are_reported_and_the_rest_runs(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(BAD)
    result = admitd("simulate", str(scenario), "--json")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert any(
        "RayJob ml/on-shared: spec.clusterSelector: a queued RayJob cannot run on an existing Ray cluster" in line
        for line in lines
    ), lines
    assert any(
        "PyTorchJob ml/chief: spec.pytorchReplicaSpecs[Chief]: unknown replica type 'Chief'" in line for line in lines
    ), lines
    jobs = json.loads(result.stdout)["jobs"]
    assert set(jobs) == {"ml/good"}
    assert jobs["ml/good"]["admitted_at"] == [0]
    assert jobs["ml/good"]["flavors"] == {"workers": {"cpu": "default"}}  # 2 x 2 pods x 2 CPUs = 8, the quota
