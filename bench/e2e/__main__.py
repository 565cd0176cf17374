"""End to end against real Kueue: the same Jobs through admitd and through Kueue, each on a fresh local cluster.

Usage (from the repository root, with the project's venv):
  python -m bench.e2e compare --scale 10 --runs 3 --settings shipped,lifted [--systems admitd,kueue,kueue-tuned]
      [--creator python|go] [--no-results]
  python -m bench.e2e run --system kueue --setting lifted --scale 1
  python -m bench.e2e compare --shape deep --scale 100 --runs 3 --settings lifted --systems admitd,kueue,kueue-tuned
  python -m bench.e2e compare --scale 50 --runs 2 --settings lifted --systems admitd,kueue-tuned
      --ttl-after-finished 30 --name NAME   (7,500 Jobs, finished ones deleted; its own table NAME in RESULTS.md)
  python -m bench.e2e results bench/out/e2e-<time>.json      (the table again from a saved comparison)
  python -m bench.e2e merge --name NAME FILE... > merged.json  (rounds run one after the other as one comparison)

`compare` runs, per setting and per round, admitd then Kueue (each on its own fresh cluster), prints one JSON object
(every run, medians per system and setting, admitd/Kueue ratios) and, unless --no-results, writes the table between
the e2e markers of bench/RESULTS.md. Before the rounds of each setting it runs the same Jobs once with no scheduler
(`none`: created running and unlabelled; --baseline-runs), and reports what each scheduler causes: its API requests
per Job minus the baseline's. A run's requests and CPU are counted until the last Job completed and nothing has been
written for 3 s more (leases aside): what a scheduler still owes the cluster then is its cost too. Settings (client
qps / burst): `shipped` (each scheduler's own shipped limit: Kueue's clientConnection 50 / 100, admitd's
--status-qps 50 / --status-burst 100; kube-controller-manager lifted to 1000 / 2000 so that the Job controller does
not bind both), `lifted` (1000 / 2000 for all three) and `stock` (as shipped, kube-controller-manager's default 20 /
30 included). Work and cluster state go under --work (default /tmp/admitd/e2e-work). Kueue is built on first use by
tests/cluster/kueue/build-kueue.sh (about 2 minutes); the Jobs are the baseline shape of Kueue's scheduler
performance test read from its module (bench/e2e/shape.py).

Systems: `admitd`; `kueue` (its shipped Configuration and webhooks, what running outside a cluster needs aside, only
the batch/job integration); `kueue-tuned` (only what the scenario needs: the Job and Kueue webhooks, no controllers
or feature gates for what it does not use, the performance runner's client limits, logging at info; systems.py
KueueTuned). Creators: `python` (this process, 64 creates in flight, JSON) or `go` (tests/cluster/creator: client-go,
protobuf, one goroutine per workload set, as Kueue's performance runner). Every run records the work lost to
preemption: the pod-seconds (cpu core-seconds, GPU-seconds) its victims had been unsuspended when re-suspended.
The deep shape (`--shape deep`) adds, per group of ClusterQueues (deep, shallow), admissions per minute and the
longest time a pending Job waited while its queue's free quota held it (recorder.py queue_figures).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.e2e.results import write_results
from bench.e2e.runner import (
    CREATORS,
    System,
    aggregate,
    caused,
    log,
    make_plan,
    ratios,
    run_once,
    settings_named,
    shape_config,
)
from bench.e2e.shape import SHAPES
from bench.e2e.systems import SETTINGS, Admitd, Kueue, KueueTuned, NoScheduler, RunFailed, build_creator

DEFAULT_WORK = Path("/tmp/admitd/e2e-work")


SCHEDULERS = ("admitd", "kueue", "kueue-tuned")
KUEUES = ("kueue", "kueue-tuned")


def summary_of(runs: list[dict[str, Any]], settings: list[str], systems: list[str]) -> dict[str, Any]:
    """Per setting: each system's medians (and its failures), the no-scheduler baseline and what each scheduler
    causes over it, and admitd's ratios to each Kueue."""
    summary: dict[str, Any] = {}
    for setting in settings:
        per: dict[str, Any] = {}
        for name in systems:
            mine = [r for r in runs if r["system"] == name and r["setting"] == setting]
            ok = [r for r in mine if "failed" not in r]
            per[name] = aggregate(ok) if ok else {"runs": 0}
            per[name]["failed"] = [r["failed"] for r in mine if "failed" in r]
        base = [r for r in runs if r["system"] == "none" and r["setting"] == setting and "failed" not in r]
        if base:
            per["none"] = aggregate(base)
            for name in SCHEDULERS:
                if per.get(name, {}).get("runs"):
                    per[name].update(caused(per[name], per["none"]))
        for k in KUEUES:
            if per.get("admitd", {}).get("runs") and per.get(k, {}).get("runs"):
                per[f"admitd/{k}"] = ratios(per["admitd"], per[k])
        summary[setting] = per
    return summary


def merge(saved: list[dict[str, Any]], name: str, *, merging: bool = True) -> dict[str, Any]:
    """The runs of several saved comparisons (rounds run one after the other, e.g. alternating two creators) as one
    comparison whose one setting is `name`: each run keeps its own setting under `run_setting`. Not `merging`: one
    comparison renamed (`compare --name`), its command as run."""
    if not saved:
        raise SystemExit("merge: no saved comparison given")
    shapes = {
        (r["jobs"], r["cluster_queues"], r["scale_pct"], r.get("shape", "baseline"), r.get("ttl_after_finished_s"))
        for r in saved
    }
    if len(shapes) != 1:
        raise SystemExit(f"merge: the comparisons are of different shapes or scales: {sorted(map(str, shapes))}")
    runs = [
        {**run, "setting": name, "run_setting": run.get("run_setting", run["setting"])}
        for r in saved
        for run in r["runs"]
    ]
    systems = [s for s in (*SCHEDULERS, "none") if any(run["system"] == s for run in runs)]
    first = saved[0]
    return {
        **{k: first[k] for k in ("benchmark", "jobs", "cluster_queues", "scale_pct", "cpus") if k in first},
        **{k: first[k] for k in ("shape", "ttl_after_finished_s") if k in first},
        "date": " to ".join(dict.fromkeys([saved[0]["date"], saved[-1]["date"]])),
        "command": "; ".join(r["command"] for r in saved)
        + (f"; python -m bench.e2e merge --name {name} ..." if merging else ""),
        "versions": {
            "systems": list(dict.fromkeys(v for r in saved for v in r["versions"]["systems"])),
            "kubernetes": first["versions"]["kubernetes"],
        },
        "creator": "/".join(dict.fromkeys(r.get("creator", "python") for r in saved)),
        "complete": all(r.get("complete", True) for r in saved),
        "summary": summary_of(runs, [name], systems),
        "runs": runs,
    }


def systems_named(names: str, admitd: Admitd, kueue: Kueue) -> list[System]:
    known: dict[str, System] = {"admitd": admitd, "kueue": kueue, "kueue-tuned": KueueTuned(), "none": NoScheduler()}
    out: list[System] = []
    for name in names.split(","):
        if name not in known:
            raise SystemExit(f"unknown system {name!r}; known: {', '.join(known)}")
        out.append(known[name])
    return out


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def kube_version() -> str:
    out = subprocess.run(
        ["/usr/local/go/bin/go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2] / "tests" / "cluster",
    ).stdout.strip()
    return out or "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("compare", "run"):
        sp = sub.add_parser(name)
        sp.add_argument("--scale", type=float, default=10.0, help="percent of the baseline's Job counts (default 10)")
        sp.add_argument("--work", type=Path, default=DEFAULT_WORK, help=f"work folder (default {DEFAULT_WORK})")
        sp.add_argument("--timeout", type=float, default=1800, help="seconds to wait for every Job to complete")
        sp.add_argument("--keep", action="store_true", help="keep each run's work folder (logs, event log)")
        sp.add_argument(
            "--admitd-rev", default="HEAD", help="the commit of admitd to run, from a git archive (default HEAD)"
        )
        sp.add_argument("--admitd-patch", type=Path, help="a patch applied to that snapshot (git apply) before running")
        sp.add_argument(
            "--admitd-args", default="", help="more `admitd run` options, space-separated (e.g. --no-workload-objects)"
        )
        sp.add_argument(
            "--shape",
            choices=SHAPES,
            default="baseline",
            help="baseline (Kueue's scheduler performance test, the default) or deep (one ClusterQueue about 450 "
            "Jobs deep of three sizes, four shallow ones beside it; bench/e2e/shape.py deep_config)",
        )
        sp.add_argument(
            "--creator",
            choices=CREATORS,
            default="python",
            help="who creates the Jobs: this process (python, the default) or tests/cluster/creator (go: client-go, "
            "protobuf, one goroutine per workload set, as Kueue's performance runner)",
        )
        sp.add_argument(
            "--ttl-after-finished",
            type=int,
            metavar="SECONDS",
            help="every Job's ttlSecondsAfterFinished: finished Jobs (their pods and Workloads with them) deleted that "
            "long after they finished, so that a large run (--scale 50) holds in the API server's memory; the deletes "
            "are counted in the requests of both systems alike (default: finished Jobs kept)",
        )
    cmp_p = sub.choices["compare"]
    cmp_p.add_argument("--runs", type=int, default=3)
    cmp_p.add_argument("--settings", default="shipped,lifted")
    cmp_p.add_argument("--systems", default="admitd,kueue")
    cmp_p.add_argument("--no-results", action="store_true", help="do not write bench/RESULTS.md")
    cmp_p.add_argument(
        "--name",
        help="with one setting: the comparison's name in its table and its markers in bench/RESULTS.md (default: the "
        "setting's name), so that e.g. a 50%% run does not replace the 10%% table of the same setting",
    )
    cmp_p.add_argument(
        "--baseline-runs",
        type=int,
        default=1,
        help="runs per setting with no scheduler (the Jobs created running), whose API requests per Job are "
        "subtracted to give what each scheduler causes (default 1; 0 skips the baseline)",
    )
    res_p = sub.add_parser("results", help="write bench/RESULTS.md from a saved comparison (bench/out/e2e-*.json)")
    res_p.add_argument("file", type=Path)
    merge_p = sub.add_parser(
        "merge", help="several saved comparisons as one (its one setting named --name), printed as JSON"
    )
    merge_p.add_argument("--name", required=True, help="the merged setting's name (its block's markers)")
    merge_p.add_argument("files", type=Path, nargs="+")
    run_p = sub.choices["run"]
    run_p.add_argument("--system", choices=(*SCHEDULERS, "none"), required=True)
    run_p.add_argument("--setting", choices=tuple(SETTINGS), default="lifted")
    args = parser.parse_args()
    if args.command == "results":
        write_results(json.loads(args.file.read_text()))
        return 0
    if args.command == "merge":
        json.dump(merge([json.loads(f.read_text()) for f in args.files], args.name), sys.stdout, indent=2)
        print()
        return 0

    signal.signal(signal.SIGTERM, _interrupt)  # the runners stop what they started on SIGTERM as on Ctrl-C
    kueue = Kueue()  # the generator configuration comes from Kueue's module in any case
    admitd = Admitd(args.admitd_rev, args.admitd_patch, tuple(args.admitd_args.split()))
    systems = systems_named(args.system if args.command == "run" else args.systems, admitd, kueue)
    for s in systems:
        s.prepare()
    if args.creator == "go":
        build_creator()
    if args.ttl_after_finished is not None and args.ttl_after_finished < 0:
        raise SystemExit(f"--ttl-after-finished {args.ttl_after_finished}: not a number of seconds")
    p = make_plan(shape_config(args.shape, kueue.generator_config()), args.scale, args.ttl_after_finished)
    command = "python -m bench.e2e " + " ".join(sys.argv[1:])
    log(f"{len(p.jobs)} Jobs in {len(p.queues)} ClusterQueues at {args.scale:g}% of the {args.shape} shape")

    if args.command == "run":
        result = run_once(
            systems[0],
            SETTINGS[args.setting],
            p,
            args.work / "run",
            timeout_s=args.timeout,
            keep=args.keep,
            creator=args.creator,
        )
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0

    settings = settings_named(args.settings)
    if args.name is not None and len(settings) != 1:
        raise SystemExit(f"--name {args.name}: names the table of one setting, not of {args.settings}")
    runs: list[dict[str, Any]] = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out_dir = Path(__file__).resolve().parents[1] / "out"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"e2e-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"

    def current() -> dict[str, Any]:
        summary = summary_of(runs, [st.name for st in settings], [sy.name for sy in systems])
        raw = {
            "benchmark": "e2e",
            "date": started,
            "command": command,
            "versions": {"systems": [s.version() for s in systems], "kubernetes": kube_version()},
            "scale_pct": args.scale,
            "creator": args.creator,
            "shape": args.shape,
            **({"ttl_after_finished_s": args.ttl_after_finished} if args.ttl_after_finished is not None else {}),
            "jobs": len(p.jobs),
            "cluster_queues": len(p.queues),
            "cpus": os.cpu_count(),
            "complete": len(runs) == len(settings) * (args.runs * len(systems) + args.baseline_runs),
            "summary": summary,
            "runs": runs,
        }
        return raw if args.name is None else merge([raw], args.name, merging=False)

    baseline = NoScheduler()
    for setting in settings:
        for i in range(args.baseline_runs):
            try:
                runs.append(
                    run_once(
                        baseline,
                        setting,
                        p,
                        args.work / f"{setting.name}-none-{i}",
                        timeout_s=args.timeout,
                        creator=args.creator,
                    )
                )
            except RunFailed as e:
                log(f"baseline / {setting.name} run {i + 1} failed: {e}")
                runs.append({"system": "none", "setting": setting.name, "failed": str(e)})
            out.write_text(json.dumps(current(), indent=2))
        for i in range(args.runs):
            for system in systems:
                work = args.work / f"{setting.name}-{system.name}-{i}"
                try:
                    runs.append(
                        run_once(system, setting, p, work, timeout_s=args.timeout, keep=args.keep, creator=args.creator)
                    )
                except RunFailed as e:  # recorded, and the comparison goes on (everything it started is stopped)
                    log(f"{system.name} / {setting.name} run {i + 1} failed: {e}")
                    runs.append({"system": system.name, "setting": setting.name, "failed": str(e)})
                # After every run, so that what is done survives an interrupted comparison (`results FILE`).
                out.write_text(json.dumps(current(), indent=2))
    final = current()
    if not args.no_results:
        write_results(final)
    json.dump(final, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
