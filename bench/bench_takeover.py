"""The HA take-over (bench/takeover.py), run N times against the local control plane; medians as JSON.

Needs a running local cluster (`scripts/local-cluster up [--state-dir DIR]`; LOCAL_CLUSTER_STATE_DIR names it).
Usage: python -m bench.bench_takeover [--runs 3] [--probe-s 5] [--create-every-s 0.25]   Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import uuid
from pathlib import Path
from typing import Any

from bench import takeover
from bench.bench_status import cluster
from tests.integration.daemon_harness import install_crds, kubectl

OUT = Path(__file__).resolve().parent / "out"
MEASURES = (
    "takeover_lease_s",
    "takeover_first_admission_s",
    "create_failure_window_s",
    "creates_failed_after_kill",
    "create_latency_after_kill_max_s",
    "create_latency_after_kill_median_s",
    "creates_ok",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--probe-s", type=float, default=5.0, help="the Service stand-in's readiness probe period")
    parser.add_argument("--create-every-s", type=float, default=0.25)
    args = parser.parse_args()
    c = cluster()
    install_crds(c)
    runs: list[dict[str, Any]] = []
    for _ in range(args.runs):
        ns = f"bench-ha-{uuid.uuid4().hex[:8]}"
        kubectl(c, "create", "namespace", ns)
        try:
            workdir = OUT / ns  # the two logs and daemon logs are kept (bench/out is git-ignored)
            runs.append(takeover.run(c, workdir, ns, probe_s=args.probe_s, create_every_s=args.create_every_s))
        finally:
            kubectl(c, "delete", "namespace", ns, "--wait=false")
    medians = {
        k: statistics.median(r[k] for r in runs if r[k] is not None)
        for k in MEASURES
        if any(r[k] is not None for r in runs)
    }
    print(
        json.dumps(
            {
                "runs": runs,
                "median": medians,
                "unsuspended_by_both": sorted({j for r in runs for j in r["unsuspended_by_both"]}),
                "admitted_twice": sorted({j for r in runs for j in r["admitted_twice"]}),
                "probe_s": args.probe_s,
                "create_every_s": args.create_every_s,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
