"""Errors of the event log. Every one names the database file and says what is wrong with it.

EventLogError
├── DatabaseUnavailable      missing, unreadable or unopenable file            (permanent; exit 2)
├── NotAnEventLog            a SQLite file, but not one admitd wrote           (permanent; exit 2)
├── CorruptDatabase          SQLite says the file is damaged                   (permanent; exit 2)
├── SchemaTooNew             written by a newer admitd                         (permanent; exit 2)
├── MigrationFailed          a migration did not apply; nothing was changed    (permanent; exit 2)
├── UnknownEvent             a stored (type, version) this build cannot read   (permanent; names the seq)
├── AppendFailed             a batch was not written; none of it is durable    (temporary: retry)
└── ChainBroken              `log verify` found a row whose hash does not fit  (names the first bad seq)
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


class AppendFailed(EventLogError):
    exit_code = 1


class ChainBroken(EventLogError):
    exit_code = 1

    def __init__(self, path: Path | str, seq: int, problem: str) -> None:
        super().__init__(f"{path}: hash chain broken at seq {seq}: {problem}")
        self.path = Path(path)
        self.seq = seq
