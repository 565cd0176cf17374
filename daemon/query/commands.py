"""The `admitd explain|history|queues|pending|replay` subcommands: arguments, errors and output.

Each opens the log read-only, answers, and exits 0; an unknown job, a bad time or a time before the log begins is
one line on stderr and exit status 2. Tables by default, one JSON object with `--json` (shapes in the README).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.cliargs import whole_number
from daemon.eventlog import LogReader
from daemon.eventlog.codec import encode_json
from daemon.eventlog.store import writer_pid
from daemon.query import explain as explain_mod
from daemon.query import history as history_mod
from daemon.query import ledger as ledger_mod
from daemon.query import usage as usage_mod
from daemon.query.estimates import pending_estimates
from daemon.query.listing import (
    pending_json,
    pending_seqs,
    pending_text,
    queues_at,
    queues_json,
    queues_text,
    replay_json,
)
from daemon.query.moment import Clock, Moment, QueryError, clock_of, parse_duration_ms, resolve, state_at


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_positive = whole_number(1, "a seq starts at 1, got {value}")


def _emit(body: dict[str, Any]) -> None:
    sys.stdout.buffer.write(encode_json(body) + b"\n")
    sys.stdout.flush()


def _run(args: argparse.Namespace, answer: Callable[[LogReader, Clock], int]) -> int:
    try:
        with LogReader(args.db) as reader:
            return answer(reader, clock_of(reader))
    except QueryError as e:
        print(f"admitd: {e}", file=sys.stderr)
        return 2


def _live_now(args: argparse.Namespace, clock: Clock) -> int | None:
    """Now, when a daemon is writing this log (its present is now: a running job's time runs to it), else None (the
    present of a finished or copied log is its last event)."""
    if clock.virtual or writer_pid(args.db) is None:
        return None
    return max(_now_ms(), clock.last_ms)


def _moment(args: argparse.Namespace, reader: LogReader, clock: Clock) -> Moment:
    at, seq = getattr(args, "at", None), getattr(args, "seq", None)
    if at is None and seq is None and (now := _live_now(args, clock)) is not None:
        return Moment(clock.last_seq, now)
    return resolve(reader, clock, at=at, seq=seq, now_ms=_now_ms())


def _cmd_explain(args: argparse.Namespace) -> int:
    def answer(reader: LogReader, clock: Clock) -> int:
        x = explain_mod.explain(reader, clock, args.job, _moment(args, reader, clock))
        if args.json:
            _emit(explain_mod.to_json(x, clock))
        else:
            print(explain_mod.to_text(x, clock))
        return 0

    return _run(args, answer)


def _cmd_history(args: argparse.Namespace) -> int:
    def answer(reader: LogReader, clock: Clock) -> int:
        h = history_mod.history(reader, args.job, clock, until=_live_now(args, clock))
        if args.json:
            _emit(history_mod.to_json(h, clock))
        else:
            print(history_mod.to_text(h, clock))
        return 0

    return _run(args, answer)


def _cmd_queues(args: argparse.Namespace) -> int:
    def answer(reader: LogReader, clock: Clock) -> int:
        m = _moment(args, reader, clock)
        state, pending_counts = queues_at(reader, m.seq)
        if args.json:
            _emit(queues_json(state, clock, m, pending_counts))
        else:
            print(queues_text(state, clock, m, pending_counts))
        return 0

    return _run(args, answer)


def _cmd_pending(args: argparse.Namespace) -> int:
    def answer(reader: LogReader, clock: Clock) -> int:
        m = _moment(args, reader, clock)
        state = state_at(reader, m.seq)
        seqs, estimates = pending_seqs(reader, m.seq), pending_estimates(reader, m.seq)
        if args.json:
            _emit(pending_json(state, clock, m, args.queue, seqs, estimates))
        else:
            print(pending_text(state, clock, m, args.queue, seqs, estimates))
        return 0

    return _run(args, answer)


def _cmd_replay(args: argparse.Namespace) -> int:
    def answer(reader: LogReader, clock: Clock) -> int:
        m = _moment(args, reader, clock)
        _emit(replay_json(state_at(reader, m.seq), clock, m))
        return 0

    return _run(args, answer)


def _body_command(
    args: argparse.Namespace,
    body: Callable[[LogReader, Clock], dict[str, Any]],
    text: Callable[[dict[str, Any]], str],
) -> int:
    """A command whose table is drawn from its JSON body: the body with --json, else its text."""

    def answer(reader: LogReader, clock: Clock) -> int:
        b = body(reader, clock)
        if args.json:
            _emit(b)
        else:
            print(text(b))
        return 0

    return _run(args, answer)


def _cmd_preemptions(args: argparse.Namespace) -> int:
    def body(reader: LogReader, clock: Clock) -> dict[str, Any]:
        start = ledger_mod.since_ms(args.since, clock, _now_ms())
        return ledger_mod.preemptions_json(reader, clock, start_ms=start, queue=args.queue)

    return _body_command(args, body, ledger_mod.preemptions_text)


def _cmd_usage(args: argparse.Namespace) -> int:
    def body(reader: LogReader, clock: Clock) -> dict[str, Any]:
        start = ledger_mod.since_ms(args.since, clock, _now_ms())
        return usage_mod.usage_json(reader, clock, start_ms=start, by=args.by)

    return _body_command(args, body, usage_mod.usage_text)


def _cmd_eta(args: argparse.Namespace) -> int:
    from daemon.query import eta as eta_mod  # noqa: PLC0415  (the engine: only eta and eta-report need it)

    return _body_command(args, lambda r, c: eta_mod.eta_json(r, c, queue=args.queue), eta_mod.eta_text)


def _cmd_eta_report(args: argparse.Namespace) -> int:
    from daemon.query import eta as eta_mod  # noqa: PLC0415

    def body(reader: LogReader, clock: Clock) -> dict[str, Any]:
        every = parse_duration_ms(args.every)
        return eta_mod.eta_report_json(reader, clock, every_ms=every, by=args.by, recompute=not args.recorded_only)

    return _body_command(args, body, eta_mod.eta_report_text)


_RELATIVE = re.compile(r"^-(\d+(\.\d+)?(ms|s|m|h|d)?)+$")

_TIME_HELP = (
    "a moment: RFC 3339 (2026-12-01T03:00:00Z) or relative to now (-2h); on a simulated log an offset from the "
    "scenario's start (+1m30s) or relative to its end (-30s). Default: the log's end"
)


def add_query_parsers(sub: Any, *, db_default: Path, db_help: str) -> None:
    """Register the read-side subcommands on `admitd`'s subparsers."""
    explain = sub.add_parser(
        "explain", help="why a job is pending, running, preempted or finished, each statement with its seq"
    )
    explain.add_argument("job", metavar="NAMESPACE/JOB")
    explain.add_argument("--at", metavar="TIME", help=_TIME_HELP)
    explain.set_defaults(func=_cmd_explain)
    history = sub.add_parser("history", help="a job's timeline: observed, pending reasons, admitted, preempted...")
    history.add_argument("job", metavar="NAMESPACE/JOB")
    history.set_defaults(func=_cmd_history)
    queues = sub.add_parser("queues", help="one row per ClusterQueue: cohort, quota, usage, borrowed, lent, counts")
    queues.add_argument("--at", metavar="TIME", help=_TIME_HELP)
    queues.set_defaults(func=_cmd_queues)
    pending = sub.add_parser("pending", help="pending workloads in admission order, with positions and reasons")
    pending.add_argument("--queue", metavar="NAME", help="a ClusterQueue, or a LocalQueue as NAMESPACE/NAME")
    pending.add_argument("--at", metavar="TIME", help=_TIME_HELP)
    pending.set_defaults(func=_cmd_pending)
    replay = sub.add_parser("replay", help="the whole folded state at a moment, as JSON")
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--at", metavar="TIME", help=_TIME_HELP)
    which.add_argument("--seq", type=_positive, metavar="N", help="the state right after event N")
    replay.set_defaults(func=_cmd_replay)
    preemptions = sub.add_parser(
        "preemptions", help="who preempted whom, under which rule, at which Cohort level, the work lost, the rerun"
    )
    preemptions_since_help = (
        "a duration back from now (7d, 12h; on a simulated log from its end) or a time as --at takes; "
        "default: the whole log"
    )
    preemptions.add_argument("--since", metavar="WHEN", help=preemptions_since_help)
    preemptions.add_argument("--queue", metavar="CLUSTERQUEUE", help="only preemptions of or by this ClusterQueue")
    preemptions.set_defaults(func=_cmd_preemptions)
    usage = sub.add_parser(
        "usage", help="GPU-hours and pod-hours used, borrowed and lent, per ClusterQueue, LocalQueue or namespace"
    )
    usage.add_argument("--since", metavar="WHEN", help=preemptions_since_help)
    usage.add_argument("--by", choices=usage_mod.GROUPINGS, default="clusterqueue", help="default: clusterqueue")
    usage.set_defaults(func=_cmd_usage)
    eta = sub.add_parser("eta", help="when each pending workload is estimated to start (p50, p90), from recorded runs")
    eta.add_argument("--queue", metavar="CLUSTERQUEUE", help="only the workloads pending in this ClusterQueue")
    eta.set_defaults(func=_cmd_eta)
    eta_report = sub.add_parser(
        "eta-report", help="back-test: the estimates eta would have given through the log, against the actual starts"
    )
    eta_report.add_argument("--every", default="5m", metavar="DURATION", help="one moment per DURATION (default 5m)")
    eta_report.add_argument("--by", choices=("clusterqueue", "priorityclass"), default="clusterqueue")
    eta_report.add_argument(
        "--recorded-only",
        action="store_true",
        help="score only the estimates the daemon recorded (workload.estimated), not re-computed ones",
    )
    eta_report.set_defaults(func=_cmd_eta_report)
    for p in (explain, history, queues, pending, replay, preemptions, usage, eta, eta_report):
        # So that `--at -2h` reads as a value, as argparse already does for negative numbers (private, but stable
        # since Python 3.2; the alternative, `--at=-2h`, works too).
        p._negative_number_matcher = _RELATIVE
        p.add_argument("--db", type=Path, default=db_default, help=db_help)
        p.add_argument("--json", action="store_true", help="one JSON object (replay always prints JSON)")
