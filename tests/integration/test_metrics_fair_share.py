"""Kueue's fair-sharing shares on /metrics: kueue_cluster_queue_weighted_share and kueue_cohort_weighted_share, with
fair sharing on (and absent with it off, as in Kueue), worked out by hand for a small tree, equal to the quota tree's
shares at every seq of a simulated log, and accepted by prometheus-client's text parser.

Real: `admitd simulate --fair-sharing --until` (SQLite log), the fold, the renderer, `prometheus_client.parser`.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.domain.fairsharing import dominant_resource_share
from daemon.domain.quota import QuotaTree
from daemon.eventlog import LogReader
from daemon.metrics import FoldedMetrics, LogMetrics, Renderer

ROOT = Path(__file__).resolve().parents[2]

# org (root cohort): team (a child cohort) holding queue `a` (4 GPUs), queue `b` (4 GPUs), queue `z` (0 GPUs, weight
# 0). `a` runs 6 GPUs: 2 above its nominal quota, out of the 8 its parent can lend; `z` runs 1 GPU it can only borrow.
SCENARIO = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: org}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: team}
spec: {parentName: org}
""" + "".join(
    f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  cohort: {cohort}
  namespaceSelector: {{}}
  fairSharing: {{weight: "{weight}"}}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: h100
      resources: [{{name: "nvidia.com/gpu", nominalQuota: {nominal}}}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: main, namespace: {name}}}
spec: {{clusterQueue: {name}}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: job
  namespace: {name}
  labels: {{kueue.x-k8s.io/queue-name: main}}
  annotations: {{simulate.admitd.io/runtime: 1h}}
spec:
  template:
    spec:
      containers:
      - name: main
        resources: {{requests: {{nvidia.com/gpu: {gpus}}}}}
"""
    for name, cohort, weight, nominal, gpus in (("a", "team", 1, 4, 6), ("b", "org", 1, 4, 0), ("z", "org", 0, 0, 1))
)


def _simulate(tmp_path: Path, *flags: str) -> Path:
    scenario, db = tmp_path / "shares.yaml", tmp_path / "shares.db"
    scenario.write_text(SCENARIO)
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", str(scenario), "--db", str(db), "--until", "10m", *flags],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return db


def _shares(text: str, cohort_of: dict[str, str] | None = None) -> dict[tuple[str, str], float]:
    """The shares in an exposition, by ("cq" | "cohort", name); checks each queue's cohort label if given."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "kueue_cluster_queue_weighted_share":
                out[("cq", s.labels["cluster_queue"])] = s.value
                if cohort_of is not None:
                    assert s.labels["cohort"] == cohort_of[s.labels["cluster_queue"]]
            elif s.name == "kueue_cohort_weighted_share":
                out[("cohort", s.labels["cohort"])] = s.value
    return out


def test_the_shares_of_a_small_tree_worked_out_by_hand(tmp_path: Path) -> None:
    db = _simulate(tmp_path, "--fair-sharing")
    metrics = LogMetrics(db, fair_sharing=True)
    try:
        shares = _shares(metrics.render().decode(), {"a": "team", "b": "org", "z": "org"})
    finally:
        metrics.close()
    assert math.isnan(shares.pop(("cq", "z")))  # weight 0 and borrowing: Kueue's +Inf, reported as NaN
    assert shares == {
        ("cq", "a"): 250.0,  # 2 GPUs above nominal * 1000 / 8 lendable, weight 1
        ("cq", "b"): 0.0,  # below its nominal quota
        ("cohort", "team"): 250.0,  # team's usage 6 above its subtree's 4, out of the 8 org can lend
        ("cohort", "org"): 0.0,  # a root cohort has no share
    }


def test_the_shares_are_absent_with_fair_sharing_off(tmp_path: Path) -> None:
    db = _simulate(tmp_path)
    metrics = LogMetrics(db)
    try:
        text = metrics.render().decode()
    finally:
        metrics.close()
    assert "weighted_share" not in text
    assert "kueue_cohort_subtree_quota" in text


@pytest.mark.parametrize("sample", ["cohort-borrow-reclaim.yaml", "seed.yaml"])
def test_the_shares_equal_the_quota_trees_at_every_seq(tmp_path: Path, sample: str) -> None:
    db = tmp_path / "log.db"
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", str(ROOT / "config" / "samples" / sample), "--db", str(db),
         "--fair-sharing"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    fm, renderer = FoldedMetrics(), Renderer(fair_sharing=True)
    with LogReader(db) as reader:
        while fm.follow(reader, limit=1):
            shares = _shares(renderer.render(fm).decode())
            tree = QuotaTree.build(fm.state.cluster_queues, fm.state.cohorts, fm.state.flavors)
            tree.load_usage(fm.usage)
            expected = {("cq", n): node for n, node in tree.cqs.items()}
            expected |= {("cohort", n): node for n, node in tree.cohorts.items()}
            assert shares.keys() == expected.keys()
            for key, node in expected.items():
                drs = dominant_resource_share(node)
                want = math.nan if drs.key[0] else float(drs.key[1])
                assert shares[key] == want or (math.isnan(shares[key]) and math.isnan(want)), (fm.state.seq, key)


def test_turning_fair_sharing_on_after_a_render_shows_the_shares_at_the_next(tmp_path: Path) -> None:
    """`admitd simulate --metrics-port` learns the engine configuration after its server is up."""
    db = _simulate(tmp_path, "--fair-sharing")
    metrics = LogMetrics(db)
    try:
        assert "weighted_share" not in metrics.render().decode()
        metrics.set_fair_sharing(True)
        assert _shares(metrics.render().decode())[("cq", "a")] == 250.0
    finally:
        metrics.close()
