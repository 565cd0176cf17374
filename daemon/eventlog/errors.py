"""Errors of the event log. Every one names the database file and says what is wrong with it.

EventLogError
├── DatabaseUnavailable   missing, unreadable or unopenable file; a new log that exists   (permanent; exit 2)
├── NotAnEventLog         a SQLite file, but not one admitd wrote                          (permanent; exit 2)
├── CorruptDatabase       SQLite says the file is damaged                                  (permanent; exit 2)
├── SchemaTooNew          written by a newer admitd                                        (permanent; exit 2)
├── MigrationFailed       a migration did not apply; nothing was changed                   (permanent; exit 2)
├── UnknownEvent          a stored (type, version) this build cannot read; names the seq   (permanent; exit 2)
├── LogLocked             another process is this log's writer; names its PID              (permanent; exit 2)
├── AppendFailed          a batch was not written, none of it is durable; the writer then  (exit 1)
│                         stops, and every pending and later append fails naming the cause
├── ChainBroken           `log verify`: a row whose hash does not fit; names the first seq (exit 1)
├── LogNotTrusted         `admitd run`: the chain is broken where no accepted break covers it (exit 2)
└── BadSnapshot           `log verify`: a snapshot that does not check; names its seq      (exit 1)
"""

from __future__ import annotations

from pathlib import Path


class EventLogError(Exception):
    """Base of every event-log failure."""

    exit_code = 2


class DatabaseUnavailable(EventLogError):
    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)


class NotAnEventLog(EventLogError):
    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: not an admitd event log ({problem})")
        self.path = Path(path)


class CorruptDatabase(EventLogError):
    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: the database is corrupt ({problem})")
        self.path = Path(path)


class SchemaTooNew(EventLogError):
    def __init__(self, path: Path | str, found: int, supported: int) -> None:
        super().__init__(
            f"{path}: written by a newer admitd (schema version {found}; this build knows up to {supported}); "
            "upgrade admitd to read it"
        )
        self.path = Path(path)
        self.found = found
        self.supported = supported


class MigrationFailed(EventLogError):
    def __init__(self, path: Path | str, migration: str, problem: str) -> None:
        super().__init__(f"{path}: migration {migration} failed and was rolled back: {problem}")
        self.path = Path(path)


class UnknownEvent(EventLogError):
    def __init__(self, seq: int, type_: str, version: int, problem: str = "unknown event type or version") -> None:
        super().__init__(f"event seq {seq}: cannot decode {type_!r} version {version}: {problem}")
        self.seq = seq
        self.type = type_
        self.version = version


class LogLocked(EventLogError):
    """A second writer: the lock file names the process that holds the log."""

    def __init__(self, path: Path | str, lock_file: Path | str, holder: int | None) -> None:
        who = f"process {holder}" if holder is not None else "another process (PID not yet written)"
        super().__init__(f"{path}: {who} is writing this log (lock {lock_file} is held); a log has one writer")
        self.path = Path(path)
        self.holder = holder


class AppendFailed(EventLogError):
    exit_code = 1


class ChainBroken(EventLogError):
    """`kind`: "mismatch" (a row's contents do not fit its hash), "gap" (rows missing inside the log) or "cut" (rows
    missing at the end)."""

    exit_code = 1

    def __init__(self, path: Path | str, seq: int, problem: str, *, kind: str = "mismatch") -> None:
        super().__init__(f"{path}: hash chain broken at seq {seq}: {problem}")
        self.path = Path(path)
        self.seq = seq
        self.problem = problem
        self.kind = kind


class LogNotTrusted(EventLogError):
    """`admitd run` found the log's hash chain broken: it does not act on a state it cannot vouch for (exit 2)."""

    def __init__(self, broken: ChainBroken) -> None:
        super().__init__(
            f"{broken}; admitd will not run on a log it cannot verify (`admitd log verify --db {broken.path}` shows "
            f"the same). Restore the log from a copy, or run once with --accept-chain-break {broken.seq} to accept "
            "the break (recorded in the log)"
        )
        self.broken = broken


class BadSnapshot(EventLogError):
    exit_code = 1

    def __init__(self, path: Path | str, seq: int, problem: str) -> None:
        super().__init__(f"{path}: snapshot at seq {seq} does not check: {problem}")
        self.path = Path(path)
        self.seq = seq
