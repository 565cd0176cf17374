"""/metrics, the ClusterQueue status and `admitd queues` say the same of every ClusterQueue after a random log:
usage per flavor and resource, pending, admitted, active or not (one definition, `daemon.views.queues`, rendered
three ways).

Real: logs written by `admitd simulate`'s stages (SQLite), the metrics follower and renderer, prometheus-client's
text parser, the status writer (its PATCH bodies), the CLI as a subprocess. Faked: the cluster (the simulator's
virtual clock) and the API server (a client that keeps the status patches).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.domain.quantity import parse_quantity
from daemon.eventlog import LogReader
from daemon.kube.client import KubeClient
from daemon.kube.status import StatusWriter
from daemon.metrics import LogMetrics
from daemon.query.moment import state_at
from daemon.sim.run import run_simulation
from daemon.sim.scenario import load_scenario
from tests.integration.test_views_live_equals_log import scenario_with_extras

ROOT = Path(__file__).resolve().parents[2]
SEEDS = range(6)


class _Patches:
    """Keeps what the status writer patches, by path."""

    def __init__(self) -> None:
        self.bodies: dict[str, Any] = {}

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        assert method == "PATCH", (method, path)
        self.bodies[path] = kw["body"]
        return {}


def from_metrics(db: Path) -> dict[str, dict[str, Any]]:
    metrics = LogMetrics(db)
    try:
        text = metrics.render().decode()
    finally:
        metrics.close()
    out: dict[str, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            cq = s.labels.get("cluster_queue")
            if cq is None:
                continue
            row = out.setdefault(cq, {"pending": 0, "usage": {}})
            if s.name == "kueue_pending_workloads":
                row["pending"] += int(s.value)
            elif s.name == "kueue_admitted_active_workloads":
                row["admitted"] = int(s.value)
            elif s.name == "kueue_cluster_queue_status" and s.value == 1:
                row["active"] = s.labels["status"] == "active"
            elif s.name == "kueue_cluster_queue_resource_usage":
                row["usage"][(s.labels["flavor"], s.labels["resource"])] = round(s.value * 1000)
    return out


def from_status(db: Path) -> dict[str, dict[str, Any]]:
    with LogReader(db) as reader:
        state = state_at(reader, reader.last_seq())
    client = _Patches()
    clock = cast(Any, SimpleNamespace(now=lambda: 0))
    writer = StatusWriter(cast(KubeClient, client), state, clock=clock, monotonic=lambda: 0.0)
    out: dict[str, dict[str, Any]] = {}
    for name in state.cluster_queues:
        asyncio.run(writer._write_cluster_queue(name))
        (path,) = [p for p in client.bodies if p.endswith(f"/clusterqueues/{name}/status")]
        status = client.bodies[path]["status"]
        (active,) = [c for c in status["conditions"] if c["type"] == "Active"]
        out[name] = {
            "pending": status["pendingWorkloads"],
            "admitted": status["admittedWorkloads"],
            "active": active["status"] == "True",
            "usage": {
                (f["name"], r["name"]): parse_quantity(r["total"])
                for f in status["flavorsUsage"]
                for r in f["resources"]
            },
        }
    return out


def from_cli(db: Path) -> dict[str, dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "queues", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return {
        q["name"]: {
            "pending": q["pending"],
            "admitted": q["admitted"],
            "active": q["status"] == "active",
            "usage": {(r["flavor"], r["resource"]): parse_quantity(r["used"]) for r in q["resources"]},
        }
        for q in json.loads(result.stdout)["cluster_queues"]
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_metrics_status_and_queues_agree_after_a_random_log(tmp_path: Path, seed: int) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(scenario_with_extras(seed))
    db = tmp_path / "sim.db"
    # Cut the run in the middle, so that queues hold admitted and pending workloads at the end.
    asyncio.run(run_simulation(load_scenario(scenario), db_path=db, until=300_000))
    cli = from_cli(db)
    status = from_status(db)
    metrics = from_metrics(db)
    assert set(cli) == set(status), seed
    assert any(row["admitted"] for row in cli.values()) and any(row["pending"] for row in cli.values()), seed
    for name, row in cli.items():
        assert status[name] == row, (seed, name, "status", status[name], row)
        assert metrics[name] == row, (seed, name, "metrics", metrics[name], row)
