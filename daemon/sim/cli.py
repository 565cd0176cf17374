"""`admitd simulate SCENARIO.yaml [--db FILE] [--json] [--until DURATION] [--fair-sharing]`, and the what-if on a
recorded log, `admitd simulate --from-log LOG [--with CHANGES.yaml]` (daemon.sim.whatif_cli)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import shlex
import stat
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.domain.admission import EngineConfig
from daemon.domain.durations import format_seconds
from daemon.eventlog.store import create_new_log
from daemon.manifests import ManifestError
from daemon.manifests.config import load_config
from daemon.manifests.durations import DurationError, parse_duration
from daemon.sim.faults import Faults, FaultSpecError, parse_faults
from daemon.sim.report import to_json, to_table
from daemon.sim.run import SimProgress, run_simulation
from daemon.sim.scenario import Scenario, load_scenario
from daemon.stages.admit import PreemptionLoop


def _duration(text: str) -> int:
    try:
        return parse_duration(text)
    except DurationError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _faults(text: str) -> Faults:
    try:
        return parse_faults(text)
    except FaultSpecError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_simulate_parser(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="run a YAML scenario on a virtual clock with the real engine and event log",
        description="Run the admission engine on a virtual clock. Jobs use the annotations "
        "simulate.admitd.io/submit-at and simulate.admitd.io/runtime (Go durations).",
    )
    p.add_argument(
        "scenario",
        type=Path,
        nargs="?",
        help="multi-document YAML of Kueue objects, Namespaces, PriorityClasses, Jobs (or --from-log)",
    )
    p.add_argument(
        "--from-log",
        type=Path,
        metavar="LOG",
        help="what-if: replay the arrivals, requests and runtimes this event log recorded, instead of a scenario",
    )
    p.add_argument(
        "--with",
        dest="changes",
        type=Path,
        metavar="CHANGES.yaml",
        help="with --from-log: queue objects (Kueue YAML) that replace the recorded ones of the same kind and name",
    )
    p.add_argument(
        "--against",
        type=Path,
        metavar="LOG",
        help="dry run: would the jobs of -f be admitted now on this log's state, when, or never (nothing written)",
    )
    p.add_argument(
        "-f", dest="job_file", type=Path, metavar="JOB.yaml", help="with --against or --server: the job(s) to try"
    )
    p.add_argument("--db", type=Path, help="keep the event log in this new file (for `admitd log ...`)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--until", type=_duration, metavar="DURATION", help="stop at this virtual time (e.g. 10m)")
    p.add_argument(
        "--estimate-every",
        type=_duration,
        metavar="DURATION",
        help="record every pending workload's estimated start (workload.estimated, when new or moved) once per "
        "DURATION of virtual time, as admitd run --estimate-every does, for admitd eta-report (default: never)",
    )
    p.add_argument(
        "--faults",
        type=_faults,
        metavar="SPEC",
        help="run against a faulty cluster (e.g. evict-latency=30s,api-error=0.05,crash=0.01, or all) and check the "
        "invariants at every step; exit 1 if one fails",
    )
    p.add_argument("--seed", type=int, default=1, help="with --faults: the seed the faults are drawn from (default 1)")
    p.add_argument(
        "--churn-window",
        type=_duration,
        default=10_000,
        metavar="DURATION",
        help="with --faults: an admission preempted within this long, with nothing to explain it, is churn (10s)",
    )
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="admitd settings as a Kueue Configuration file (config.kueue.x-k8s.io); see config/admitd.yaml",
    )
    p.add_argument(
        "--fair-sharing", action="store_true", help="admit by weighted dominant resource share (overrides --config)"
    )
    p.add_argument(
        "--metrics-port",
        type=_metrics_address,
        metavar="[HOST:]PORT",
        help="serve Prometheus /metrics (Kueue's names), folded from the log, while the run lasts (HOST: 127.0.0.1)",
    )
    p.add_argument(
        "--metrics-linger", action="store_true", help="with --metrics-port: keep serving after the run, until Ctrl-C"
    )
    p.set_defaults(func=_cmd_simulate_served)


def _metrics_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected [HOST:]PORT with a port 1..65535, got {text!r}")
    return (host or "127.0.0.1", int(port))


def _cmd_simulate_served(args: argparse.Namespace) -> int:
    """`--metrics-port`: serve /metrics from the simulation's log (a temporary one without --db) during the run."""
    if args.metrics_port is None:
        return _cmd_simulate(args)
    from daemon.metrics import LogMetrics, serve  # noqa: PLC0415  (only this option needs the server)

    with tempfile.TemporaryDirectory(prefix="admitd-sim-") as tmp:
        if args.db is None:
            args.db = Path(tmp) / "simulation.db"
        metrics = LogMetrics(args.db)
        try:
            server = serve(args.metrics_port, metrics.render)
        except OSError as e:
            print(f"admitd: --metrics-port {args.metrics_port[1]}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"admitd: serving http://{args.metrics_port[0]}:{args.metrics_port[1]}/metrics", file=sys.stderr)
        try:
            code = _cmd_simulate(args, on_config=lambda config: metrics.set_fair_sharing(config.fair_sharing))
            if args.metrics_linger and code == 0:
                print("admitd: the run is over; still serving /metrics until Ctrl-C", file=sys.stderr)
                with contextlib.suppress(KeyboardInterrupt):
                    threading.Event().wait()
        finally:
            server.shutdown()
            server.server_close()
            metrics.close()
    return code


def _progress(p: SimProgress, final: bool) -> None:
    line = (
        f"\r  t={format_seconds(p.now):>10}  created {p.created}/{p.total_jobs}  admitted {p.admitted}"
        f"  finished {p.finished}"
    )
    sys.stderr.write(line + ("\n" if final else ""))
    sys.stderr.flush()


def _input_problem(path: Path) -> str | None:
    """Why `path` cannot be read as an input file: checked before opening it, since opening a FIFO blocks and
    reading /dev/zero never ends."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        return e.strerror or str(e)
    return None if stat.S_ISREG(mode) else "not a regular file"


def _cmd_simulate(args: argparse.Namespace, on_config: Callable[[EngineConfig], None] | None = None) -> int:
    """`on_config`: told the engine configuration the run uses (the flags applied), before it starts."""
    server = getattr(args, "server", None)  # `admitd simulate --server` (daemon.cli) asks a daemon instead
    estimating = getattr(args, "estimate_every", None) is not None
    if estimating and (args.against or args.job_file or server or args.from_log or args.changes or args.faults):
        print(
            "admitd: --estimate-every records estimates in a scenario's run: not with a dry run, a what-if or --faults",
            file=sys.stderr,
        )
        return 2
    if estimating and args.estimate_every <= 0:
        print("admitd: --estimate-every needs a positive DURATION (leave it out for no estimates)", file=sys.stderr)
        return 2
    if args.against is not None or args.job_file is not None or server is not None:
        from daemon.sim.dryrun_cli import cmd_dry_run  # noqa: PLC0415  (only the dry run needs it)

        if args.against is not None and server is not None:
            print("admitd: --against LOG and --server URL: give one, the state to try the job on", file=sys.stderr)
            return 2
        if args.against is None and server is None:
            print("admitd: -f JOB.yaml needs --against LOG or --server URL: the state to try it on", file=sys.stderr)
            return 2
        return cmd_dry_run(args)
    if args.from_log is not None or args.changes is not None:
        from daemon.sim.whatif_cli import cmd_what_if  # noqa: PLC0415  (only the what-if needs it)

        return cmd_what_if(args)
    if args.scenario is None:
        print("admitd: simulate needs a SCENARIO.yaml, or --from-log LOG for a what-if", file=sys.stderr)
        return 2
    if args.faults is not None and (args.until is not None or args.metrics_port is not None):
        print(
            "admitd: --faults runs until every job has ended: it takes neither --until nor --metrics-port",
            file=sys.stderr,
        )
        return 2
    for path in (args.config, args.scenario):
        if path is not None and (problem := _input_problem(path)) is not None:
            print(f"admitd: {path}: {problem}", file=sys.stderr)
            return 2
    try:
        config, config_warnings = (EngineConfig(), ()) if args.config is None else load_config(args.config)
        scenario = load_scenario(args.scenario, config.jobs)
    except ManifestError as e:
        print(f"admitd: {e}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as e:  # load_config reads text; a file that is not UTF-8 is bad input
        print(f"admitd: {args.config}: not UTF-8 text ({e.reason} at byte {e.start})", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"admitd: {e.filename or args.scenario}: {e.strerror or e}", file=sys.stderr)
        return 2
    if args.db is not None:
        # Exclusively (O_EXCL, no symlink followed): of two runs given the same --db, exactly one gets it.
        create_new_log(args.db)
    if args.fair_sharing:
        config = dataclasses.replace(config, fair_sharing=True)
    if on_config is not None:
        on_config(config)
    for line in (*config_warnings, *scenario.warnings):
        print(f"admitd: warning: {line}", file=sys.stderr)
    for line in scenario.problems:
        print(f"admitd: rejected: {line}", file=sys.stderr)
    if args.faults is not None:
        return _cmd_faulty(args, scenario, config)
    progress = _progress if sys.stderr.isatty() and not args.json else None
    run = run_simulation(
        scenario,
        db_path=args.db,
        until=args.until,
        config=config,
        progress=progress,
        estimate_every=args.estimate_every,
    )
    try:
        result = asyncio.run(run)
    except KeyboardInterrupt:
        run.close()  # Ctrl-C before the loop started it: no "coroutine was never awaited" warning on the way out
        raise
    except PreemptionLoop as e:  # an engine bug, never a property of the input: say which jobs, exit 1
        print(f"admitd: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(json.dumps(to_json(result)) + "\n")
    else:
        print(to_table(result))
        if scenario.unmanaged_jobs:
            print(
                f"({scenario.unmanaged_jobs} jobs are not managed: no kueue.x-k8s.io/queue-name label and no "
                "LocalQueue default in their namespace, or a namespace managedJobsNamespaceSelector leaves out)"
            )
        if args.db is not None:
            print(f"event log: {args.db} (try: admitd log stats --db {shlex.quote(str(args.db))})")
    return 0


def _cmd_faulty(args: argparse.Namespace, scenario: Scenario, config: EngineConfig) -> int:
    """`--faults SPEC --seed N`: the scenario against the faulty cluster; exit 1 when an invariant failed."""
    from daemon.obs.logging import configure  # noqa: PLC0415  (only --faults quiets the stages)
    from daemon.sim.faulty import report_json, report_text, run_faulty  # noqa: PLC0415  (only --faults needs it)

    if getattr(args, "log_level", "info") != "debug":
        configure(level="error")  # the retries of injected faults are counted in the report, not logged one by one

    run = run_faulty(scenario, args.faults, args.seed, config=config, churn_window=args.churn_window, db_path=args.db)
    result = asyncio.run(run)
    if args.json:
        sys.stdout.write(json.dumps(report_json(result)) + "\n")
    else:
        print(report_text(result))
        if args.db is not None:
            print(f"event log: {args.db} (try: admitd log stats --db {shlex.quote(str(args.db))})")
    return 0 if result.ok else 1
