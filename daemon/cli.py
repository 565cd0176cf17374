"""The `admitd` command: `log verify|export|stats` read the event log; `simulate` runs a scenario.

Every failure is one line on stderr naming the file and the problem. Exit status: 0 done; 1 the log failed (the
writer stopped: disk full, I/O error, a value SQLite cannot store) or `log verify` found a broken chain or a bad
snapshot; 2 bad input or an unusable file (nothing was done); 130 interrupted (Ctrl-C); 70 a bug in admitd.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from daemon.buildinfo import build_info
from daemon.cliargs import whole_number
from daemon.domain.durations import format_seconds
from daemon.eventlog import EventLogError, LogReader, default_db_path
from daemon.eventlog.codec import encode_json
from daemon.eventlog.store import INTEGER_MAX
from daemon.obs.logging import configure as configure_logging
from daemon.obs.logging import get_logger
from daemon.query.moment import is_virtual

_DB_HELP = "event log file (default: $STATE_DIRECTORY/admitd.db under systemd, else ./admitd.db)"


class _ExportRow(msgspec.Struct, omit_defaults=False):
    seq: int
    recorded_at: int
    type: str
    version: int
    subject: str
    cause: int | None
    payload: msgspec.Raw
    hash: str


def _iso(ms: int | None) -> str | None:
    if ms is not None and is_virtual(ms):  # a simulated log: virtual ms since the scenario's start, not 1970
        return "+" + format_seconds(ms)
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _cmd_verify(args: argparse.Namespace) -> int:
    with LogReader(args.db) as reader:
        v = reader.check()
    # The head lets an operator compare with a copy kept elsewhere: a restored old copy, a lost -wal or a cut tail
    # leaves a shorter chain that is intact on its own.
    chain = "hash chain intact"
    if v.accepted:  # an operator ran admitd on these breaks (`run --accept-chain-break`); the log says when
        chain += f" but for {len(v.accepted)} accepted break(s), at seq " + ", ".join(map(str, v.accepted))
    print(
        f"{args.db}: ok, {v.events} events, {chain}, {v.snapshots} snapshots check; "
        f"head seq {v.head_seq} hash {v.head_hash.hex()}"
    )
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    with LogReader(args.db) as reader, reader.consistent():
        for ev in reader.iter_events(args.since):
            row = _ExportRow(
                seq=ev.seq,
                recorded_at=ev.recorded_at,
                type=ev.type,
                version=ev.version,
                subject=ev.subject,
                cause=ev.cause,
                payload=msgspec.Raw(ev.payload),
                hash=ev.hash.hex(),
            )
            out.write(encode_json(row) + b"\n")
    out.flush()
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    with LogReader(args.db) as reader:
        st = reader.stats()
    if args.json:
        body = {
            "path": st.path,
            "events": st.events,
            "file_bytes": st.file_bytes,
            "first_seq": st.first_seq,
            "last_seq": st.last_seq,
            "first_recorded_at": _iso(st.first_recorded_at),
            "last_recorded_at": _iso(st.last_recorded_at),
            "by_type": {t.type: t.count for t in st.by_type},
            "snapshots": st.snapshots,
            "schema_version": st.schema_version,
        }
        sys.stdout.buffer.write(encode_json(body) + b"\n")
        return 0
    print(f"log:            {st.path} (schema version {st.schema_version})")
    print(f"size:           {st.file_bytes} bytes")
    print(f"events:         {st.events} (seq {st.first_seq} .. {st.last_seq})")
    print(f"first recorded: {_iso(st.first_recorded_at)}")
    print(f"last recorded:  {_iso(st.last_recorded_at)}")
    print(f"snapshots:      {st.snapshots}")
    width = max((len(t.type) for t in st.by_type), default=0)
    for t in st.by_type:
        print(f"  {t.type:<{width}}  {t.count}")
    return 0


_non_negative = whole_number(  # a seq is a SQLite INTEGER
    0, "must not be negative, got {value}", INTEGER_MAX, f"must be at most {INTEGER_MAX} (2^63 - 1), got {{value}}"
)


QUERY_COMMANDS = frozenset(
    {"explain", "history", "queues", "pending", "replay", "preemptions", "usage", "eta", "eta-report"}
)
SERVED_COMMANDS = QUERY_COMMANDS - {"eta-report"}  # the answers a daemon serves (daemon.answers): --server, --kube
COMMANDS = frozenset({"log", "run", "simulate", "ui"} | QUERY_COMMANDS)


def command_in(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names, or None (none, or one admitd does not have: then every parser is built, so that
    argparse's error lists them all)."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


class _VersionAction(argparse.Action):
    """`--version`: the version, the source commit and the Python (daemon.buildinfo), read only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_: object) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="print the version, commit and Python",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(build_info().line())
        parser.exit()


LOG_LEVELS = ("debug", "info", "warning", "error")


def _add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command takes, before or after its name (`admitd --log-level debug run` or `admitd run
    --log-level debug`: an overlay can append to a container's args). Below the top level the default is SUPPRESS,
    so that a subcommand's parser leaves the value given before it (or the top level's default) alone."""
    parser.add_argument(
        "--log-level",
        default="warning" if top else argparse.SUPPRESS,
        choices=LOG_LEVELS,
        help="log lines on stderr: JSON off a terminal, readable on one (default: warning)",
    )


def _add_global_options_below(parser: argparse.ArgumentParser) -> None:
    """The global options on every subcommand's parser, at every depth (`log verify` as much as `run`)."""
    seen: set[int] = set()
    for action in parser._actions:  # argparse has no public way to list the subparsers
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if id(child) not in seen:
                    seen.add(id(child))
                    _add_global_options(child, top=False)
                    _add_global_options_below(child)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (`command`) the top level with only that command's subparsers."""
    parser = argparse.ArgumentParser(prog="admitd", description=__doc__)
    parser.add_argument("--version", action=_VersionAction)
    _add_global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)

    log = sub.add_parser("log", help="read the event log (read-only; safe while the daemon runs)")
    log_sub = log.add_subparsers(dest="log_command", required=True)
    verify = log_sub.add_parser("verify", help="walk the hash chain; exit 1 naming the first bad seq")
    verify.set_defaults(func=_cmd_verify)
    export = log_sub.add_parser("export", help="every event as JSON Lines, one per line, stable keys")
    export.add_argument("--since", type=_non_negative, default=0, metavar="SEQ", help="only events after SEQ")
    export.set_defaults(func=_cmd_export)
    stats = log_sub.add_parser("stats", help="events per type, size, first and last time")
    stats.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    stats.set_defaults(func=_cmd_stats)
    for p in (verify, export, stats):
        p.add_argument("--db", type=Path, default=default_db_path(), help=_DB_HELP)

    # Each command's parsers load only for that command (or for `admitd --help`): a read command does not import
    # the simulator or the Kubernetes client.
    if command is None or command in QUERY_COMMANDS:
        from daemon.query.commands import add_query_parsers  # noqa: PLC0415
        from daemon.remote import add_server_options  # noqa: PLC0415

        add_query_parsers(sub, db_default=default_db_path(), db_help=_DB_HELP)
        for name in sorted(SERVED_COMMANDS):  # --server / --kube: the same answer from a running daemon
            add_server_options(sub.choices[name])
            sub.choices[name].set_defaults(local=sub.choices[name].get_default("func"), func=_ask_where)
    if command is None or command == "run":
        from daemon.kube.cli import add_run_parser  # noqa: PLC0415

        add_run_parser(sub, db_default=default_db_path(), db_help=_DB_HELP)
    if command is None or command == "simulate":
        from daemon.sim.cli import add_simulate_parser  # noqa: PLC0415

        add_simulate_parser(sub)
        from daemon.remote import add_simulate_server_options  # noqa: PLC0415

        add_simulate_server_options(sub.choices["simulate"])  # a dry run on a daemon's state (--server URL -f)
        sub.choices["simulate"].set_defaults(local=sub.choices["simulate"].get_default("func"), func=_simulate_where)
    if command is None or command == "ui":
        from daemon.web.cli import add_ui_parser  # noqa: PLC0415

        add_ui_parser(sub, db_default=default_db_path(), db_help=_DB_HELP)
    _add_global_options_below(parser)
    return parser


def _ask_where(args: argparse.Namespace) -> int:
    """A read command: from the file (`--db`), or from a running daemon (`--server URL`, `--kube`)."""
    from daemon.remote import remote, run_remote  # noqa: PLC0415

    code: int = run_remote(args) if remote(args) else args.local(args)
    return code


def _simulate_where(args: argparse.Namespace) -> int:
    """`admitd simulate`: the simulator, or with `--server URL -f JOB.yaml` a dry run asked of a running daemon."""
    if args.server is None or args.job_file is None or args.against is not None:
        code: int = args.local(args)  # it says what is wrong with --server without -f, or with --against too
        return code
    from daemon.remote import post_file  # noqa: PLC0415

    return post_file(args, "simulate", args.job_file, json_out=args.json)


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in admitd, not a problem with the input or the log


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Whatever happens, stderr gets one line and the exit status says what kind of failure it was
    (module docstring); `--log-level debug` adds the traceback of an internal error."""
    try:
        words = sys.argv[1:] if argv is None else argv
        args = build_parser(command_in(words)).parse_args(words)
        configure_logging(level=args.log_level)
        code: int = args.func(args)
    except EventLogError as e:
        print(f"admitd: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("admitd: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): not an error. Point stdout at /dev/null so that the
        # interpreter's final flush does not report it again.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # e.g. stdout on a full disk
        where = e.filename if e.filename is not None else "output"
        print(f"admitd: {where}: {e.strerror or e}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug: still one line, and a status no expected failure uses
        get_logger("admitd").debug("internal error", exc_info=e)
        print(
            f"admitd: internal error: {type(e).__name__}: {e} (a bug; --log-level debug shows where)", file=sys.stderr
        )
        return EXIT_INTERNAL
    return code


if __name__ == "__main__":
    sys.exit(main())
