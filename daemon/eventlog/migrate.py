"""Numbered, forward-only schema migrations from the top-level `migrations/` folder.

Each `NNNN_name.sql` runs in one transaction together with its `PRAGMA user_version = NNNN`, so a crash leaves the
database at the old version or the new one. Applying twice is a no-op; a newer database is refused.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from daemon.eventlog.errors import MigrationFailed, NotAnEventLog, SchemaTooNew

APPLICATION_ID = 0x61646D74  # "admt": marks a SQLite file as an admitd event log
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations_dir() -> Path:
    """The repository's `migrations/`, or the copy installed under `<prefix>/share/admitd/migrations`."""
    here = Path(__file__).resolve().parent.parent.parent / "migrations"
    if here.is_dir():
        return here
    return Path(sys.prefix) / "share" / "admitd" / "migrations"


def load_migrations(folder: Path | None = None) -> list[Migration]:
    folder = folder or migrations_dir()
    found: list[Migration] = []
    for path in sorted(folder.glob("*.sql")):
        m = _NAME.match(path.name)
        if m is None:
            raise MigrationFailed(folder, path.name, "file name must look like 0001_name.sql")
        found.append(Migration(int(m.group(1)), path.name, path.read_text(encoding="utf-8")))
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise MigrationFailed(folder, migration.name, f"expected version {expected:04d}: versions must be gapless")
    return found


def latest_version() -> int:
    return len(load_migrations())


def check_identity(conn: sqlite3.Connection, path: Path, *, allow_empty: bool) -> int:
    """Return the schema version of an admitd log; refuse foreign or newer files. 0 means an empty new file."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if app_id == 0 and version == 0 and tables == 0:
        if not allow_empty:
            raise NotAnEventLog(path, "the database is empty")
        return 0
    if app_id != APPLICATION_ID:
        raise NotAnEventLog(path, f"application_id is {app_id:#x}, expected {APPLICATION_ID:#x}")
    supported = latest_version()
    if version > supported:
        raise SchemaTooNew(path, version, supported)
    return int(version)


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the database up to the newest schema. Returns the version it is at afterwards."""
    current = check_identity(conn, path, allow_empty=True)
    if current == 0:
        # Before the first table exists: 16 KiB pages hold about a dozen ~1 KB events each, which measured about
        # 30% faster appends than the default 4 KiB here (bench/RESULTS.md).
        conn.execute("PRAGMA page_size = 16384")
    for migration in load_migrations():
        if migration.version <= current:
            continue
        script = (
            "BEGIN IMMEDIATE;\n"
            f"PRAGMA application_id = {APPLICATION_ID};\n"
            f"{migration.sql}\n"
            f"PRAGMA user_version = {migration.version};\n"
            "COMMIT;"
        )
        try:
            conn.executescript(script)
        except sqlite3.Error as e:
            if conn.in_transaction:
                conn.rollback()
            raise MigrationFailed(path, migration.name, str(e)) from e
        current = migration.version
    return current
