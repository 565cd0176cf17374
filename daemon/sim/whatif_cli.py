"""`admitd simulate --from-log LOG [--with CHANGES.yaml]`: the I/O around the pure what-if (daemon.sim.whatif).

Reads the log read-only and the CHANGES file, runs the simulation, prints the comparison. Bad input is one line on
stderr and exit status 2, as for every other command; nothing is written but the optional new `--db` log.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from daemon.domain import events as ev
from daemon.domain.admission import EngineConfig
from daemon.eventlog import LogReader
from daemon.eventlog.codec import decode
from daemon.eventlog.store import create_new_log
from daemon.manifests import ManifestError, load_documents
from daemon.manifests.config import load_config
from daemon.manifests.fields import printable
from daemon.sim.cli import _input_problem, _progress
from daemon.sim.run import run_simulation
from daemon.sim.scenario import _observed, _where
from daemon.sim.whatif import Recording, WhatIfError, compare, identity, recording, what_if_scenario
from daemon.sim.whatif_report import to_json, to_table
from daemon.stages.admit import PreemptionLoop

CHANGEABLE = "ResourceFlavor, ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, PriorityClass, Namespace"


class _BadInput(Exception):
    """One line for stderr: which file, which object, which field, what is wrong."""


def read_recording(path: Path) -> Recording:
    """The log's jobs and queue objects, read in one read transaction (a live log may grow meanwhile)."""
    with LogReader(path) as reader, reader.consistent():

        def events() -> Iterator[tuple[int, ev.Event]]:
            for row in reader.iter_events():
                yield row.recorded_at, decode(row.type, row.version, row.payload, seq=row.seq)

        return recording(events(), source=str(path))


def read_changes(path: Path) -> tuple[list[ev.Event], list[str]]:
    """The queue objects of a CHANGES file as observations, and its warnings. Raises _BadInput at the first
    document that is not a valid queue object, or an object given twice."""
    changes: list[ev.Event] = []
    warnings: list[str] = []
    where: dict[tuple[str, str], str] = {}
    try:
        docs = load_documents(path)
    except ManifestError as e:
        raise _BadInput(str(e)) from e
    for parsed in docs:
        warnings.extend(f"{_where(parsed)}: {w}" for w in parsed.warnings)
        if parsed.errors:
            more = f" (and {len(parsed.errors) - 1} more problems)" if len(parsed.errors) > 1 else ""
            raise _BadInput(f"{_where(parsed)}: {parsed.errors[0]}{more}")
        observed = _observed(parsed)
        if observed is None:
            if parsed.raw_job is None and not parsed.kind:
                continue  # an empty document
            what = f"{parsed.kind} {parsed.namespace + '/' if parsed.namespace else ''}{parsed.name}".strip()
            raise _BadInput(
                f"{_where(parsed)}: {what}: a CHANGES file holds queue objects only ({CHANGEABLE}); "
                "jobs come from the log"
            )
        ident = identity(observed)
        assert ident is not None  # every observation of a queue object has one
        if ident in where:
            raise _BadInput(f"{_where(parsed)}: {ident[0]} {ident[1]}: already given at {where[ident]}")
        where[ident] = _where(parsed)
        changes.append(observed)
    if not changes:
        raise _BadInput(f"{path}: no queue objects to change (expected Kueue YAML: {CHANGEABLE})")
    return changes, warnings


def _engine_config(args: argparse.Namespace) -> EngineConfig:
    try:
        config, warnings = (EngineConfig(), ()) if args.config is None else load_config(args.config)
    except ManifestError as e:
        raise _BadInput(str(e)) from e
    except UnicodeDecodeError as e:
        raise _BadInput(f"{args.config}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise _BadInput(f"{e.filename or args.config}: {e.strerror or e}") from e
    for line in warnings:
        print(f"admitd: warning: {printable(line)}", file=sys.stderr)
    return dataclasses.replace(config, fair_sharing=True) if args.fair_sharing else config


def _check_arguments(args: argparse.Namespace) -> None:
    if args.from_log is None:
        raise _BadInput("--with needs --from-log LOG (the recorded log the changes apply to)")
    if args.scenario is not None:
        raise _BadInput(f"{args.scenario}: give either a SCENARIO.yaml or --from-log LOG, not both")
    if args.until is not None:
        raise _BadInput("--until cannot be used with --from-log: a what-if runs until nothing more can happen")
    for path in (args.config, args.changes):
        if path is not None and (problem := _input_problem(path)) is not None:
            raise _BadInput(f"{path}: {problem}")


def cmd_what_if(args: argparse.Namespace) -> int:
    try:
        _check_arguments(args)
        config = _engine_config(args)
        changes, warnings = ([], []) if args.changes is None else read_changes(args.changes)
        rec = read_recording(args.from_log)
    except (_BadInput, WhatIfError) as e:
        print(f"admitd: {printable(str(e))}", file=sys.stderr)
        return 2
    for line in warnings:
        print(f"admitd: warning: {printable(line)}", file=sys.stderr)
    if args.db is not None:
        create_new_log(args.db)
    scenario = what_if_scenario(rec, changes)
    progress = _progress if sys.stderr.isatty() and not args.json else None
    run = run_simulation(scenario, db_path=args.db, config=config, progress=progress)
    try:
        result = asyncio.run(run)
    except KeyboardInterrupt:
        run.close()
        raise
    except PreemptionLoop as e:
        print(f"admitd: error: {e}", file=sys.stderr)
        return 1
    changed = [i for i in (identity(c) for c in changes) if i is not None]
    what_if = compare(rec, changed, result)
    if args.json:
        sys.stdout.write(json.dumps(to_json(what_if)) + "\n")
    else:
        print(to_table(what_if))
        if args.db is not None:
            print(f"event log of the what-if: {args.db}")
    return 0
