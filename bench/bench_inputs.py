"""Wide and deep scenario inputs (issue 8): 10,000 Jobs submitted at one instant into one ClusterQueue that fits
them all, and a Cohort chain 1,000 deep. Each is a YAML scenario, loaded and run by the simulator as `admitd
simulate` would; load and run are timed separately.

Usage: python -m bench.bench_inputs [wide|deep|all]   (default: all). Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from daemon.obs.logging import configure as configure_logging
from daemon.sim.run import run_simulation
from daemon.sim.scenario import load_scenario

_JOB = """---
apiVersion: batch/v1
kind: Job
metadata:
  name: j-{i}
  namespace: ns
  labels: {{kueue.x-k8s.io/queue-name: lq}}
  annotations: {{simulate.admitd.io/runtime: {runtime}, simulate.admitd.io/submit-at: {at}}}
spec:
  template:
    spec:
      containers:
      - name: c
        resources: {{requests: {{cpu: 1}}}}
"""
_QUEUES = """apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: rf}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  {cohort}
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: rf
      resources:
      - {{name: cpu, nominalQuota: {nominal}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: lq, namespace: ns}}
spec: {{clusterQueue: cq}}
"""


def wide_yaml(jobs: int) -> str:
    """`jobs` one-CPU Jobs, all submitted at 0s, into one ClusterQueue of `jobs` CPUs."""
    head = _QUEUES.format(cohort="", nominal=jobs)
    return head + "".join(_JOB.format(i=i, runtime="1h", at="0s") for i in range(jobs))


def deep_yaml(depth: int, jobs: int = 20) -> str:
    """A Cohort chain `depth` deep (each cohort 1 CPU), a ClusterQueue at the bottom, `jobs` Jobs a second apart."""
    cohorts = "".join(
        f"---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {{name: c{i}}}\nspec:\n"
        + (f"  parentName: c{i - 1}\n" if i else "")
        + "  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n    - name: rf\n"
        "      resources:\n      - {name: cpu, nominalQuota: 1}\n"
        for i in range(depth)
    )
    head = _QUEUES.format(cohort=f"cohort: c{depth - 1}", nominal=1)
    return head + cohorts + "".join(_JOB.format(i=i, runtime="1m", at=f"{i}s") for i in range(jobs))


def run(name: str, text: str, target_s: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="admitd-bench-") as tmp:
        path = Path(tmp) / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        t0 = time.perf_counter()
        scenario = load_scenario(path)
        t1 = time.perf_counter()
        result = asyncio.run(run_simulation(scenario))
        t2 = time.perf_counter()
    admitted = sum(1 for o in result.jobs.values() if o.admitted_at)
    return {
        "case": name,
        "jobs": len(scenario.jobs),
        "admitted": admitted,
        "problems": len(scenario.problems),
        "load_seconds": round(t1 - t0, 2),
        "simulate_seconds": round(t2 - t1, 2),
        "engine_seconds": round(result.engine_seconds, 2),
        "wall_seconds_total": round(t2 - t0, 2),
        "target_wall_seconds": target_s,
        "cycles": result.cycles,
    }


def main(argv: list[str]) -> int:
    which = argv[0] if argv else "all"
    configure_logging(level="warning")  # the per-cycle debug lines would otherwise be printed and timed
    results = []
    if which in ("wide", "all"):
        results.append(run("wide-10000-jobs-one-instant", wide_yaml(10_000), 5.0))
    if which in ("deep", "all"):
        results.append(run("cohort-chain-1000-deep", deep_yaml(1000), 2.0))
    print(json.dumps({"benchmark": "inputs", "python": sys.version.split()[0], "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
