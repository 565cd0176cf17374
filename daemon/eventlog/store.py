"""The SQLite event log: one writer with group commit (aiosqlite), and read-only readers that never block it.

One writer per log: `EventStore.open` takes an exclusive `flock` on the sidecar `<log>.lock`, which names the
holder's PID, before SQLite touches the file. Durability: WAL with `synchronous=FULL`, so every committed batch is
fsynced before its appenders are told it is done; a power loss can cost only the batch being written at that
moment, which nobody was told about. Any failure in the write path stops the writer: every pending and every later
append fails with `AppendFailed` naming the first cause, so nothing waits forever on a dead writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import resource
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiosqlite

from daemon.domain.events import BREAK_SUBJECT, ChainBreakAccepted, Event
from daemon.eventlog import codec
from daemon.eventlog.codec import GENESIS_HASH, StoredEvent
from daemon.eventlog.errors import (
    AppendFailed,
    BadSnapshot,
    ChainBroken,
    CorruptDatabase,
    DatabaseUnavailable,
    EventLogError,
    LogLocked,
    NotAnEventLog,
)
from daemon.eventlog.migrate import APPLICATION_ID, check_identity, migrate
from daemon.obs.logging import get_logger

log = get_logger(__name__)

Clock = Callable[[], int]
"""Milliseconds since the epoch (a virtual clock in simulations)."""

SNAPSHOTS_KEPT = 3
"""The newest snapshots always kept; older ones not marked `kept` are pruned in the transaction that writes a new
one. Migration 0004's `snapshots_keep_the_newest_three_and_the_kept` trigger holds the same number: change both
together, in a new migration."""

SNAPSHOT_KEEP_RATIO: float = 1
"""A snapshot is kept for the log's lifetime (a historical one, for past moments) when the events since the previous
kept one hold at least SNAPSHOT_KEEP_RATIO times its body's stored size (compressed since migration 0005) in payload
bytes. Bound: the kept snapshots take at most 1/SNAPSHOT_KEEP_RATIO of the events' payload bytes, plus the newest
SNAPSHOTS_KEPT (migration 0004)."""

INTEGER_MIN, INTEGER_MAX = -(2**63), 2**63 - 1
"""SQLite's INTEGER range: every number stored in a column must be inside it."""

_COLUMNS = "seq, recorded_at, type, version, subject, payload, cause, hash"
_INSERT = f"INSERT INTO events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_SQLITE_MAGIC = b"SQLite format 3\x00"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def default_db_path() -> Path:
    """`$STATE_DIRECTORY/admitd.db` under systemd (StateDirectory=), else `./admitd.db`."""
    state_dir = os.environ.get("STATE_DIRECTORY")
    if state_dir:
        return Path(state_dir.split(":")[0]) / "admitd.db"
    return Path("admitd.db")


def _describe(e: BaseException, path: Path) -> str:
    """One line for an error met in the write path: SQLite's own text (with a likely cause for a failed write,
    which SQLite reports without its errno), else the exception's type and text."""
    if isinstance(e, EventLogError):
        return str(e)
    if not isinstance(e, sqlite3.Error):
        return f"{type(e).__name__}: {e}"
    name = getattr(e, "sqlite_errorname", "")
    if name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR"):
        return f"{e} ({name}{_write_failure_hint(path)})"
    return str(e)


def _write_failure_hint(path: Path) -> str:
    with contextlib.suppress(OSError):
        fs = os.statvfs(path.parent)
        if fs.f_bavail * fs.f_frsize < 4 * 2**20:
            return f": the file system of {path.parent} is full"
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        with contextlib.suppress(OSError):
            biggest = max(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
            if biggest + 2**20 >= soft:
                return f": the process's file size limit (RLIMIT_FSIZE, ulimit -f) of {soft} bytes is reached"
    return ""


def _classify(path: Path, e: sqlite3.Error) -> EventLogError:
    text = str(e)
    if "file is not a database" in text:
        return NotAnEventLog(path, "not a SQLite database")
    if "malformed" in text or "corrupt" in text:
        return CorruptDatabase(path, text)
    return DatabaseUnavailable(path, text)


def _check_readable_file(path: Path) -> None:
    if not path.exists():
        raise DatabaseUnavailable(path, "no such file")
    if not path.is_file():
        raise DatabaseUnavailable(path, "not a regular file")
    if not os.access(path, os.R_OK):
        raise DatabaseUnavailable(path, "permission denied")


def _check_writable_target(path: Path) -> None:
    """Refuse what a writer must not open or create: a dangling symlink (SQLite would create the file wherever it
    points), something that is not a regular file, a missing directory."""
    if path.is_symlink() and not path.exists():
        raise DatabaseUnavailable(
            path, f"a symbolic link to {os.readlink(path)}, which does not exist; refusing to create a log there"
        )
    if path.exists() and not path.is_file():
        raise DatabaseUnavailable(path, "not a regular file")
    if not path.parent.exists():
        raise DatabaseUnavailable(path, f"directory {path.parent} does not exist")


_HELD: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> this process's open SQLite connections to that file
_HELD_LOCK = threading.Lock()


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _hold(path: Path) -> tuple[int, int] | None:
    """Count a connection of this process to `path` (`_header_kind` must not read the file while one is open)."""
    key = _file_id(path)
    if key is not None:
        with _HELD_LOCK:
            _HELD[key] = _HELD.get(key, 0) + 1
    return key


def _unhold(key: tuple[int, int] | None) -> None:
    if key is None:
        return
    with _HELD_LOCK:
        left = _HELD.get(key, 0) - 1
        if left > 0:
            _HELD[key] = left
        else:
            _HELD.pop(key, None)


def _header_kind(path: Path) -> str:
    """Identify the file from its first 100 bytes, before SQLite opens it, so that nothing (no -wal, -shm or lock
    file) is ever created beside a file that is not an admitd log. Returns "missing", "empty" (0 bytes), "blank"
    (a SQLite database with no schema and no application id) or "ours"; raises NotAnEventLog otherwise.

    Not read while this process has a SQLite connection to the file (a reader or the writer): it was checked when
    that one opened it, and closing a descriptor of our own would drop every POSIX lock SQLite holds on it
    (sqlite.org/howtocorrupt.html, 2.2). Without its locks, a writer in another process that opens the log next
    takes itself for the only connection, removes the -wal and -shm files and starts new ones, and the readers
    here, still on the old -shm, never see another append."""
    key = _file_id(path)
    if key is not None:
        with _HELD_LOCK:
            if _HELD.get(key):
                return "ours"
    try:
        with path.open("rb") as f:
            head = f.read(100)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        raise DatabaseUnavailable(path, e.strerror or str(e)) from e
    if not head:
        return "empty"
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        raise NotAnEventLog(path, "not a SQLite database")
    app_id = int.from_bytes(head[68:72], "big")
    schema_cookie = int.from_bytes(head[40:44], "big")
    if app_id == APPLICATION_ID:
        return "ours"
    if app_id == 0 and schema_cookie == 0:
        return "blank"
    raise NotAnEventLog(path, f"application_id is {app_id:#x}, expected {APPLICATION_ID:#x}")


def lock_path(path: Path | str) -> Path:
    """The writer's lock file: beside the real file (symlinks resolved, so two names of one file share a lock)."""
    return Path(os.path.realpath(path) + ".lock")


def create_new_log(path: Path | str) -> None:
    """Create `path` as a new, empty file, atomically refusing one that exists (O_EXCL), including any symlink.

    For callers whose log must be new (`admitd simulate --db`): two of them started together cannot both get it.
    """
    path = Path(path)
    _check_writable_target(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise DatabaseUnavailable(path, "already exists; a new log needs a new file (choose another path)") from None
    except OSError as e:
        raise DatabaseUnavailable(path, f"cannot create: {e.strerror or e}") from e
    os.close(fd)


class _WriterLock:
    """An exclusive `flock` on `<log>.lock`, held for the writer's lifetime; the file holds the holder's PID.

    Why a sidecar file and not the database itself: SQLite locks the database with POSIX `fcntl` locks, and closing
    *any* descriptor of a file drops every POSIX lock the process holds on it, so a descriptor of our own on the
    database could silently release SQLite's locks (sqlite.org/howtocorrupt.html, 2.2). `flock` on a separate file
    cannot interfere with them. The lock file is left in place after the writer exits (unlinking it would let two
    writers lock two different files); the kernel releases the lock when the holder dies, even by SIGKILL.
    Limit: a second hard link to the same log has a different lock file; admitd never makes one.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, db: Path) -> _WriterLock:
        path = lock_path(db)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise DatabaseUnavailable(db, f"cannot open the writer's lock file {path}: {e.strerror or e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_pid(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LogLocked(db, path, holder) from None
            raise DatabaseUnavailable(db, f"cannot lock {path}: {e.strerror or e}") from e
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:
            os.close(fd)
            raise DatabaseUnavailable(db, f"cannot write the writer's lock file {path}: {e.strerror or e}") from e
        return cls(path, fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def writer_pid(db: Path | str, *, locks: Path = Path("/proc/locks")) -> int | None:
    """The PID of the process writing `db` now, or None: no writer, or it cannot be told.

    Looked up without touching the lock (taking even a shared `flock` to test it could make a daemon starting at
    that moment refuse the log): the writer's PID from `<log>.lock`, and the kernel's table of locks (`/proc/locks`,
    Linux) holding an exclusive FLOCK by that PID on that file's inode. A lock file left by a writer that has
    exited, or a PID reused since, finds no such lock. For the read side, whose present on a live log is now."""
    path = lock_path(db)
    try:
        inode = os.stat(path).st_ino
        text = path.read_text(encoding="ascii", errors="replace").strip()
        table = locks.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 00:2d:1234567 0 EOF" (a "->" marks a waiter, never the holder)
        fields = line.split()
        if len(fields) < 6 or "->" in fields or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        if fields[4] == str(pid) and fields[5].rsplit(":", 1)[-1] == str(inode):
            return pid
    return None


def _bytes(value: bytes | str) -> bytes:
    # A row edited by hand (e.g. with SQL replace()) may come back as TEXT: read it as the bytes it now holds.
    return value.encode() if isinstance(value, str) else bytes(value)


def _row(r: tuple[int, int, str, int, str, bytes | str, int | None, bytes | str]) -> StoredEvent:
    return StoredEvent(
        seq=r[0],
        recorded_at=r[1],
        type=r[2],
        version=r[3],
        subject=r[4],
        payload=_bytes(r[5]),
        cause=r[6],
        hash=_bytes(r[7]),
    )


@dataclass(frozen=True, slots=True)
class WriteObserver:
    """What the writer reports as it works, for whoever runs it to count (the daemon's metrics; this package knows
    no metrics library). Each is called on the event loop and must return at once."""

    appended: Callable[[float], None]  # seconds from submit to durable, once per append
    committed: Callable[[int, float], None]  # events in a committed batch, seconds the transaction took (fsync too)
    failed: Callable[[], None]  # the writer stopped: a batch could not be written


@dataclass(frozen=True, slots=True)
class TypeStats:
    type: str
    count: int


@dataclass(frozen=True, slots=True)
class LogStats:
    path: str
    events: int
    file_bytes: int
    first_seq: int | None
    last_seq: int | None
    first_recorded_at: int | None
    last_recorded_at: int | None
    by_type: tuple[TypeStats, ...]
    snapshots: int
    schema_version: int


@dataclass(frozen=True, slots=True)
class Verified:
    """What `log verify` read in one consistent snapshot: the head lets an operator compare with a copy kept
    elsewhere (a restored old copy, a lost -wal or a cut tail is a shorter chain that verifies on its own)."""

    events: int
    head_seq: int
    head_hash: bytes
    snapshots: int
    accepted: tuple[int, ...] = ()
    """The accepted breaks the walk passed (their seqs), which `log verify` names."""


def _snapshot_problem(
    seq: int, state_version: int, event_hash: bytes, body: bytes, digest: bytes, chain_hash: bytes | None
) -> str | None:
    """Why a snapshot row cannot be trusted, or None when it checks."""
    if chain_hash is None:
        return f"event {seq} it was taken at is missing"
    if event_hash != chain_hash:
        return f"its event hash does not match event {seq}'s hash in the chain"
    if codec.snapshot_digest(seq, state_version, event_hash, body) != digest:
        return "its digest does not match its contents (the snapshot was edited or damaged)"
    return None


AcceptedBreaks = frozenset[int]
"""Seqs at which an operator accepted a break of the hash chain: there the walk takes the stored rows as they are
(a row whose hash does not fit: its stored hash; rows missing, inside or cut off the end: the next stored row
starts the chain anew)."""


class _ChainWalk:
    """The hash chain checked row by row from the row at `since` (GENESIS_HASH before seq 1)."""

    def __init__(self, reader: LogReader, since: int, accepted: AcceptedBreaks) -> None:
        self.reader, self.accepted = reader, accepted
        self.expected = since + 1
        self.accepted_seen: tuple[int, ...] = ()
        if since == 0:
            self.previous = GENESIS_HASH
        else:
            row = reader._one("SELECT hash FROM events WHERE seq = ?", (since,))
            if row is None:
                raise ChainBroken(reader.path, since, "the row a snapshot was taken at is missing")
            self.previous = _bytes(row[0])

    def rows(self, sql: str, size: int) -> Iterator[tuple[Any, ...]]:
        for row in self.reader._stream(sql, (), size):
            yield from self.checked((row,))

    def checked(self, rows: Iterable[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
        previous, expected, accepted = self.previous, self.expected, self.accepted
        row_bytes, chain_hash = codec.row_bytes, codec.chain_hash
        for row in rows:
            seq, at, type_, version, subject, payload, cause, stored = row
            digest = _bytes(stored)
            if seq != expected:
                if expected not in accepted:
                    self.previous, self.expected = previous, expected
                    raise ChainBroken(
                        self.reader.path, expected, f"row missing (next stored row is seq {seq})", kind="gap"
                    )
                self.accepted_seen += (expected,)
            elif chain_hash(previous, row_bytes(seq, at, type_, version, subject, cause, _bytes(payload))) != digest:
                if seq not in accepted:
                    self.previous, self.expected = previous, expected
                    raise ChainBroken(
                        self.reader.path, seq, "stored hash does not match the row's contents", kind="mismatch"
                    )
                self.accepted_seen += (seq,)
            previous = digest
            expected = seq + 1
            yield row
        self.previous, self.expected = previous, expected

    def check_tail(self) -> None:
        # AUTOINCREMENT remembers the highest seq ever written, so a cut-off tail shows as well.
        row = self.reader._one("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
        if row is not None and int(row[0]) >= self.expected and self.expected not in self.accepted:
            raise ChainBroken(
                self.reader.path, self.expected, f"rows {self.expected}..{row[0]} at the end are missing", kind="cut"
            )


class LogReader:
    """Read-only access (CLI, metrics, offline replay): never writes the log and never blocks its writer (WAL).

    How it opens, so that it leaves no -wal/-shm files behind and can read a log in a read-only directory:

    - the header is checked first (`_header_kind`): SQLite never opens a file that is not an admitd log;
    - a `-wal` exists (a writer is running, or one was killed): `mode=ro`, with SQLite's normal locking;
    - no `-wal`, and the file and its directory are writable: `mode=rw` with `PRAGMA query_only=1`, so SQLite
      refuses any write through this connection, and, as every SQLite connection does, the last one to close
      checkpoints and removes the -wal/-shm files (here, the ones it created);
    - no `-wal` and a directory we cannot write: `immutable=1`. No writer can be running there (it could not create
      its -wal), so the file cannot change under the reader;
    - otherwise (a file we may not write in a directory we may): `mode=ro`, which leaves -wal/-shm files behind.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        _check_readable_file(self.path)
        kind = _header_kind(self.path)
        if kind in ("empty", "blank"):
            raise NotAnEventLog(self.path, "the database is empty")
        if kind == "missing":
            raise DatabaseUnavailable(self.path, "no such file")
        real = Path(os.path.realpath(self.path))
        query_only = False
        if Path(f"{real}-wal").exists():
            params = "mode=ro"
        elif os.access(real, os.W_OK) and os.access(real.parent, os.W_OK | os.X_OK):
            params, query_only = "mode=rw", True
        elif not os.access(real.parent, os.W_OK | os.X_OK):
            params = "mode=ro&immutable=1"
        else:
            params = "mode=ro"
        try:
            self._conn = sqlite3.connect(
                f"file:{quote(str(real))}?{params}", uri=True, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as e:
            raise _classify(self.path, e) from e
        try:
            if query_only:
                self._conn.execute("PRAGMA query_only = 1")
            self.schema_version = check_identity(self._conn, self.path, allow_empty=False)
            if self.schema_version < 1:
                raise NotAnEventLog(self.path, "no events table")
        except sqlite3.Error as e:
            self._conn.close()
            raise _classify(self.path, e) from e
        except BaseException:
            self._conn.close()
            raise
        self._file_key: tuple[int, int] | None = _hold(real)

    def close(self) -> None:
        self._conn.close()
        held, self._file_key = self._file_key, None
        _unhold(held)

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # SQLite reports damage when a page is read, which may be while rows are fetched rather than when the query
    # starts: every fetch goes through these, so that an error always names the file and says what is wrong.

    def _all(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise _classify(self.path, e) from e

    def _one(self, sql: str, params: Sequence[object] = ()) -> Any:
        try:
            return self._conn.execute(sql, params).fetchone()
        except sqlite3.Error as e:
            raise _classify(self.path, e) from e

    def _stream(self, sql: str, params: Sequence[object] = (), size: int = 5000) -> Iterator[Any]:
        try:
            cursor = self._conn.execute(sql, params)
            while rows := cursor.fetchmany(size):
                yield from rows
        except sqlite3.Error as e:
            raise _classify(self.path, e) from e

    @contextlib.contextmanager
    def consistent(self) -> Iterator[None]:
        """Everything read inside sees one state of the log (one read transaction), however a writer appends."""
        if self._conn.in_transaction:
            yield
            return
        try:
            self._conn.execute("BEGIN")
        except sqlite3.Error as e:
            raise _classify(self.path, e) from e
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):  # a read transaction has nothing to lose
                self._conn.execute("ROLLBACK")

    def last_seq(self) -> int:
        return int(self._one("SELECT coalesce(max(seq), 0) FROM events")[0])

    def _chunks(self, columns: str, since: int, chunk: int) -> Iterator[list[tuple[Any, ...]]]:
        """Rows with seq > since, in order, a chunk at a time, so memory stays flat on large logs."""
        last = min(since, INTEGER_MAX)
        while True:
            rows = self._all(f"SELECT {columns} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (last, chunk))
            if not rows:
                return
            yield rows
            last = rows[-1][0]

    def iter_events(self, since: int = 0, *, chunk: int = 5000) -> Iterator[StoredEvent]:
        """Events with seq > since, in order, every column. Inside `consistent()` for one view of a live log."""
        for rows in self._chunks(_COLUMNS, since, chunk):
            for r in rows:
                yield _row(r)

    def iter_payloads(self, since: int = 0, *, chunk: int = 20000) -> Iterator[tuple[int, str, int, bytes]]:
        """`(seq, type, version, payload)` for seq > since: the lean read replay uses (no hash, no row objects)."""
        for rows in self._chunks("seq, type, version, payload", since, chunk):
            yield from rows

    def iter_timed_payloads(self, since: int = 0, *, chunk: int = 20000) -> Iterator[tuple[int, int, str, int, bytes]]:
        """`(seq, recorded_at, type, version, payload)` for seq > since: `iter_payloads` with each event's time (the
        web view's plots over time)."""
        for rows in self._chunks("seq, recorded_at, type, version, payload", since, chunk):
            yield from rows

    def verify(self) -> int:
        """The number of events, once `check` passes."""
        return self.check().events

    def check(self, accepted: AcceptedBreaks | None = None) -> Verified:
        """Walk the hash chain and check every snapshot, all in one read transaction, so that a writer appending
        meanwhile can never look like a cut tail. Raises ChainBroken at the first bad seq that `accepted` (default:
        the breaks the log records as accepted) does not cover, BadSnapshot."""
        with self.consistent():
            walk = _ChainWalk(self, 0, self.accepted_breaks() if accepted is None else accepted)
            for _ in walk.rows(f"SELECT {_COLUMNS} FROM events ORDER BY seq", 5000):
                pass
            walk.check_tail()
            snapshots = 0
            for seq, version, event_hash, body, digest, in_chain in self._stream(
                "SELECT s.seq, s.state_version, s.event_hash, s.body, s.digest, e.hash "
                "FROM snapshots s LEFT JOIN events e ON e.seq = s.seq ORDER BY s.seq",
                size=1,
            ):
                problem = _snapshot_problem(
                    seq,
                    version,
                    _bytes(event_hash),
                    _bytes(body),
                    _bytes(digest),
                    None if in_chain is None else _bytes(in_chain),
                )
                if problem is not None:
                    raise BadSnapshot(self.path, seq, problem)
                snapshots += 1
        return Verified(
            events=walk.expected - 1,
            head_seq=walk.expected - 1,
            head_hash=walk.previous,
            snapshots=snapshots,
            accepted=walk.accepted_seen,
        )

    def iter_verified_payloads(
        self, since: int = 0, *, accepted: AcceptedBreaks | None = None, chunk: int = 20000
    ) -> Iterator[tuple[int, str, int, bytes]]:
        """`iter_payloads`, each row checked against the hash chain as it is read, from the row at `since` (whose
        stored hash a checked snapshot vouches for) to the head, the cut-tail check included; raises ChainBroken at
        the first bad seq `accepted` does not cover (default: the breaks the log records as accepted), after the
        rows before it. One read of the tail: what a start-up replays is what it verifies."""
        walk = _ChainWalk(self, since, self.accepted_breaks() if accepted is None else accepted)
        last = min(since, INTEGER_MAX)
        while True:
            rows = self._all(f"SELECT {_COLUMNS} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (last, chunk))
            if not rows:
                break
            for seq, _at, type_, version, _subject, payload, _cause, _stored in walk.checked(rows):
                yield seq, type_, version, _bytes(payload)
            last = rows[-1][0]
        walk.check_tail()

    def accepted_breaks(self) -> AcceptedBreaks:
        """The chain breaks an operator accepted (`admitd run --accept-chain-break`), as the log records them
        (`log.break_accepted`, subject `log/chain`: one index lookup)."""
        seqs: set[int] = set()
        for stored in self.events_of(BREAK_SUBJECT):
            event = codec.decode(stored.type, stored.version, stored.payload, seq=stored.seq)
            if isinstance(event, ChainBreakAccepted):
                seqs.add(event.seq)
        return frozenset(seqs)

    def snapshot_at_or_before(self, state_version: int, seq: int) -> tuple[int, bytes] | None:
        """`(seq, body)` of the newest snapshot of this shape at or before `seq`, if it checks against the chain
        and its digest. One that does not check is never used: a warning is logged and None returned, so the
        caller replays from the start (slower, never wrong)."""
        with self.consistent():
            row = self._one(
                "SELECT s.seq, s.event_hash, s.body, s.digest, e.hash FROM snapshots s "
                "LEFT JOIN events e ON e.seq = s.seq WHERE s.state_version = ? AND s.seq <= ? "
                "ORDER BY s.seq DESC LIMIT 1",
                (state_version, min(seq, INTEGER_MAX)),
            )
        if row is None:
            return None
        at, body = int(row[0]), _bytes(row[2])
        problem = _snapshot_problem(
            at, state_version, _bytes(row[1]), body, _bytes(row[3]), None if row[4] is None else _bytes(row[4])
        )
        if problem is not None:
            log.warning(
                "snapshot ignored; replaying from the first event", path=str(self.path), seq=at, problem=problem
            )
            return None
        return at, body

    def latest_snapshot(self, state_version: int) -> tuple[int, bytes] | None:
        """The newest snapshot of this shape, if it checks (see `snapshot_at_or_before`)."""
        return self.snapshot_at_or_before(state_version, INTEGER_MAX)

    # --- point reads for `admitd explain|history|queues|pending|replay` and the metrics (daemon.query, obs) ---

    def events_of(self, subject: str, upto: int | None = None) -> list[StoredEvent]:
        """Every event about `subject` (e.g. `job/ns/name`) with seq <= upto, in order: the events_by_subject index."""
        rows = self._all(
            f"SELECT {_COLUMNS} FROM events WHERE subject = ? AND seq <= ? ORDER BY seq",
            (subject, INTEGER_MAX if upto is None else min(upto, INTEGER_MAX)),
        )
        return [_row(r) for r in rows]

    def last_seq_of(self, subject: str, upto: int | None = None) -> int | None:
        """The seq of the newest event about `subject` with seq <= upto (`events_of(...)[-1].seq` without reading
        them all: one step down the events_by_subject index), or None."""
        row = self._one(
            "SELECT max(seq) FROM events WHERE subject = ? AND seq <= ?",
            (subject, INTEGER_MAX if upto is None else min(upto, INTEGER_MAX)),
        )
        return None if row is None or row[0] is None else int(row[0])

    def bounds(self) -> tuple[int, int, int, int] | None:
        """`(first_seq, first_recorded_at, last_seq, last_recorded_at)` by primary key (no scan); None when empty."""
        with self.consistent():
            first = self._one("SELECT seq, recorded_at FROM events ORDER BY seq LIMIT 1")
            last = self._one("SELECT seq, recorded_at FROM events ORDER BY seq DESC LIMIT 1")
        return None if first is None else (int(first[0]), int(first[1]), int(last[0]), int(last[1]))

    def seq_at(self, recorded_at: int) -> int:
        """The last seq recorded at or before `recorded_at` (0 if none), by binary search over seq: O(log n) point
        reads. Assumes recorded_at does not decrease along seq (one writer's clock; virtual time in simulations)."""
        b = self.bounds()
        if b is None or recorded_at < b[1]:
            return 0
        lo, hi = b[0], b[2]  # invariant: recorded_at(lo) <= t; the answer is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            row = self._one("SELECT recorded_at FROM events WHERE seq >= ? ORDER BY seq LIMIT 1", (mid,))
            if row is not None and int(row[0]) <= recorded_at:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def newest_snapshot_info(self) -> tuple[int, int] | None:
        """`(seq, created_at)` of the newest snapshot row, without its body (the metrics' snapshot age)."""
        row = self._one("SELECT seq, created_at FROM snapshots ORDER BY seq DESC LIMIT 1")
        return None if row is None else (int(row[0]), int(row[1]))

    def stats(self) -> LogStats:
        with self.consistent():
            first_seq, last_seq, first_at, last_at, n = self._one(
                "SELECT min(seq), max(seq), min(recorded_at), max(recorded_at), count(*) FROM events"
            )
            by_type = tuple(
                TypeStats(t, c) for t, c in self._all("SELECT type, count(*) FROM events GROUP BY type ORDER BY type")
            )
            snaps = self._one("SELECT count(*) FROM snapshots")[0]
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return LogStats(
            path=str(self.path),
            events=n,
            file_bytes=size,
            first_seq=first_seq,
            last_seq=last_seq,
            first_recorded_at=first_at,
            last_recorded_at=last_at,
            by_type=by_type,
            snapshots=snaps,
            schema_version=self.schema_version,
        )


_PREVIOUS_KEPT = "SELECT max(seq) FROM snapshots WHERE kept = 1 AND state_version = ? AND seq < ?"


def _bytes_since_kept(path: Path, state_version: int, seq: int) -> tuple[int, int]:
    """`(previous kept snapshot's seq or 0, payload bytes of the events after it up to seq)`: a range scan of at
    most about one snapshot's worth of events (plus one snapshot interval), read-only."""
    with contextlib.closing(sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)) as conn:
        row = conn.execute(_PREVIOUS_KEPT, (state_version, seq)).fetchone()
        since = 0 if row is None or row[0] is None else int(row[0])
        grown = conn.execute(
            "SELECT total(length(payload)) FROM events WHERE seq > ? AND seq <= ?", (since, seq)
        ).fetchone()[0]
    return since, int(grown)


@dataclass(slots=True)
class _Request:
    items: Sequence[tuple[Event, int | None]]
    done: asyncio.Future[list[int]]
    recorded_at: int | None = None
    submitted: float = 0.0  # time.perf_counter() at submit, for WriteObserver.appended


@dataclass(slots=True)
class _Prepared:
    requests: list[_Request]
    rows: list[tuple[int, int, str, int, str, bytes, int | None, bytes]]
    first_seq: int  # the seq this batch starts at; the log must end at first_seq - 1 when it commits


def _fail(future: asyncio.Future[list[int]], error: AppendFailed) -> None:
    if not future.done():
        future.set_exception(error)
        # Mark it retrieved: an appender that awaits it still gets the error, but a future nobody awaits any more
        # (the process is already stopping on the first one) adds no "exception was never retrieved" noise.
        future.exception()


async def _connect(path: Path) -> aiosqlite.Connection:
    """An aiosqlite connection that a cancellation (Ctrl-C) cannot leave half made. Cancelled while connecting,
    aiosqlite stops its thread without waiting, and the thread, answering after the event loop has closed, dies with
    "Event loop is closed" on stderr. Here the connection is finished and closed before the cancellation goes on."""
    connecting = asyncio.ensure_future(aiosqlite.connect(path, isolation_level=None))
    try:
        return await asyncio.shield(connecting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await (await connecting).close()
        raise


class EventStore:
    """The single writer. `append` returns only once the batch holding its events is committed and fsynced.

    Appends that arrive while a batch is being written are grouped into the next one (group commit), up to
    `max_batch` events, so a burst costs one fsync instead of one per event. Two tasks form a pipeline: one
    encodes and chains the next batch while the other commits the previous one in SQLite's thread.

    Failure: seqs are promised in submission order (`expected_seq`), and every prepared batch chains onto the one
    before it, so a batch that cannot be written (an event that does not encode, a number beyond SQLite's
    INTEGER, a full disk, an I/O error, any bug) stops the writer. Every pending and every later append then fails
    with `AppendFailed` naming that first cause; the process should exit, and replay on restart recovers.
    """

    def __init__(self, conn: aiosqlite.Connection, path: Path, clock: Clock, max_batch: int, lock: _WriterLock) -> None:
        self.path = path
        self._conn = conn
        self._clock = clock
        self._max_batch = max_batch
        self._lock = lock
        self._file_key: tuple[int, int] | None = None  # counted in _HELD while open (see _header_kind)
        self._queue: asyncio.Queue[_Request] = asyncio.Queue()
        self._prepared: asyncio.Queue[_Prepared] = asyncio.Queue(maxsize=2)
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: str | None = None
        self._preparing: list[_Request] = []
        self._committing: list[_Request] = []
        self._write_lock = asyncio.Lock()  # one transaction at a time on the connection: batches and snapshots
        self._seq = 0
        self._tail_hash = GENESIS_HASH
        self._base_seq = 0
        self._stored_last = 0  # the last seq in the file, as this writer left it (below _seq after a cut tail)
        self._submitted = 0
        self.observer: WriteObserver | None = None

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        clock: Clock = wall_clock_ms,
        max_batch: int = 1000,
        durable: bool = True,
        new: bool = False,
    ) -> EventStore:
        """Open (creating and migrating if needed) the log at `path` for writing; the caller is its only writer
        until `close` (LogLocked names the process that already is).

        `new=True` requires that `path` does not exist yet and creates it exclusively (`create_new_log`).
        `durable=False` (simulations only) runs SQLite with `synchronous=OFF`: nothing is fsynced. A crash of the
        process loses nothing committed (SQLite has handed it to the OS); an OS crash or a power loss may lose the
        tail or leave a file that `log verify` reports as damaged.
        """
        path = Path(path)
        _check_writable_target(path)
        _header_kind(path)  # a foreign file is refused before even a lock file is made beside it
        lock = _WriterLock.acquire(path)
        conn: aiosqlite.Connection | None = None
        held: tuple[int, int] | None = None
        try:
            if new:
                create_new_log(path)
            try:
                # Identity and migrations on a plain connection first: nothing is written to a foreign file.
                with contextlib.closing(sqlite3.connect(path)) as setup:
                    migrate(setup, path)
                    setup.execute("PRAGMA journal_mode=WAL").fetchone()
                conn = await _connect(path)
                held = _hold(path)
                await conn.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=OFF")
                await conn.execute("PRAGMA busy_timeout=5000")
                await conn.execute("PRAGMA cache_size=-65536")  # 64 MiB: the subject index stays in memory
                async with conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1") as cur:
                    tail = await cur.fetchone()
                # Rows cut off the end (an accepted break): the next seq is above the highest ever written, which
                # the append-only trigger requires; the chain goes on from the last stored row.
                async with conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'") as cur:
                    highest = await cur.fetchone()
            except sqlite3.Error as e:
                raise _classify(path, e) from e
        except BaseException:
            if conn is not None:
                _unhold(held)
                with contextlib.suppress(sqlite3.Error):
                    await conn.close()
            lock.release()
            raise
        store = cls(conn, path, clock, max_batch, lock)
        store._file_key = held
        if tail is not None:
            store._stored_last = int(tail[0])
            store._seq, store._tail_hash = max(int(tail[0]), 0 if highest is None else int(highest[0])), _bytes(tail[1])
            store._base_seq = store._seq
        store._tasks = [
            asyncio.create_task(store._guard(store._prepare_loop), name="eventlog-prepare"),
            asyncio.create_task(store._guard(store._commit_loop), name="eventlog-commit"),
        ]
        return store

    async def close(self) -> None:
        """Stop the writer and release the log. Appends not yet written fail (AppendFailed); none is left waiting.

        A cancellation of the caller that arrives meanwhile (Ctrl-C at the end of a run) is not lost: the log is
        closed all the same, then the cancellation goes on."""
        for task in self._tasks:
            task.cancel()
        cancelled = False
        while self._tasks:
            try:
                await asyncio.wait(self._tasks)  # never raises the writer tasks' own CancelledError
                break
            except asyncio.CancelledError:
                cancelled = True  # ours: finish closing first
        self._tasks = []
        self._fail_all("the log was closed before this batch was written")
        try:
            await self._conn.close()
        except sqlite3.Error as e:
            if self._failure is None:  # after a failure, closing is expected to fail the same way
                raise _classify(self.path, e) from e
        finally:
            held, self._file_key = self._file_key, None
            _unhold(held)
            self._lock.release()
        if cancelled:
            raise asyncio.CancelledError

    async def __aenter__(self) -> EventStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def append(self, events: Sequence[Event], *, cause: int | None = None) -> list[int]:
        """Append events (all caused by `cause`); return their seqs once they are durable."""
        return await self.append_caused([(e, cause) for e in events])

    async def append_caused(self, items: Sequence[tuple[Event, int | None]]) -> list[int]:
        if not items:
            return []
        return await self.submit(items)

    def submit(
        self, items: Sequence[tuple[Event, int | None]], *, recorded_at: int | None = None
    ) -> asyncio.Future[list[int]]:
        """Queue events without waiting; the future resolves to their seqs once durable.

        Seqs follow submission order, so a sole writer (the simulator) can know them before they are written;
        `expected_seq` says what the next one will be. `recorded_at` overrides the clock (virtual time).
        """
        if self._failure is not None:
            raise AppendFailed(f"{self.path}: not written, the writer stopped earlier: {self._failure}")
        done: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Request(items, done, recorded_at, time.perf_counter()))
        self._submitted += len(items)
        return done

    @property
    def expected_seq(self) -> int:
        """The seq the next submitted event will get, given that this process is the only writer."""
        return self._base_seq + self._submitted + 1

    async def write_snapshot(self, seq: int, state_version: int, body: bytes) -> bool:
        """Store a snapshot of the state after event `seq` (committed), tied to the chain by that event's hash and a
        digest; in the same transaction, prune all but the newest SNAPSHOTS_KEPT and the kept ones. Returns whether
        this one is kept for the log's lifetime (SNAPSHOT_KEEP_RATIO). A failure raises AppendFailed and leaves the
        snapshots as they were; it does not stop the writer (snapshots are only an accelerator)."""
        if self._failure is not None:
            raise AppendFailed(f"{self.path}: snapshot not written, the writer stopped earlier: {self._failure}")
        try:
            # Read on a connection of its own in a thread: the scan must not hold up the commits on the writer's.
            previous_kept, grown = await asyncio.to_thread(_bytes_since_kept, self.path, state_version, seq)
        except sqlite3.Error as e:
            raise AppendFailed(f"{self.path}: snapshot at seq {seq} not written: {_describe(e, self.path)}") from e
        kept = grown >= SNAPSHOT_KEEP_RATIO * len(body)
        conn = self._conn
        async with self._write_lock:
            try:
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    async with conn.execute(
                        "SELECT e.hash, (SELECT max(seq) FROM snapshots) FROM events e WHERE e.seq = ?", (seq,)
                    ) as cur:
                        row = await cur.fetchone()
                    if row is None:
                        raise AppendFailed(f"{self.path}: snapshot at seq {seq} not written: no such event")
                    if row[1] is not None and seq <= row[1]:
                        raise AppendFailed(
                            f"{self.path}: snapshot at seq {seq} not written: one at seq {row[1]} is newer or equal"
                        )
                    event_hash = _bytes(row[0])
                    if kept:  # another snapshot written meanwhile may have become the previous kept one
                        async with conn.execute(_PREVIOUS_KEPT, (state_version, seq)) as cur:
                            again = await cur.fetchone()
                        kept = (0 if again is None or again[0] is None else int(again[0])) == previous_kept
                    digest = codec.snapshot_digest(seq, state_version, event_hash, body)
                    await conn.execute(
                        "INSERT INTO snapshots (seq, event_hash, state_version, created_at, body, digest, kept) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (seq, event_hash, state_version, self._clock(), body, digest, int(kept)),
                    )
                    await conn.execute(
                        "DELETE FROM snapshots WHERE (kept = 0 OR state_version != ?) AND seq < "
                        "(SELECT min(seq) FROM (SELECT seq FROM snapshots ORDER BY seq DESC LIMIT ?))",
                        (state_version, SNAPSHOTS_KEPT),
                    )
                    await conn.commit()
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        await conn.rollback()
                    raise
            except (sqlite3.Error, OverflowError) as e:
                raise AppendFailed(f"{self.path}: snapshot at seq {seq} not written: {_describe(e, self.path)}") from e
        return kept

    async def _guard(self, loop: Callable[[], Any]) -> None:
        """Run a writer loop; any exception stops the writer loudly instead of leaving appenders waiting forever."""
        try:
            await loop()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # every failure, expected or not, must reach the appenders
            self._stop(e, in_commit=loop == self._commit_loop)

    def _stop(self, e: BaseException, *, in_commit: bool) -> None:
        """Refuse every later append, and fail each pending one that can no longer be written.

        A failure while preparing leaves the batches already prepared to be committed (they are whole and chained);
        a failed commit also fails them, since each chains onto the batch that was not written.
        """
        if self._failure is None:
            self._failure = _describe(e, self.path)
            log.debug("event log writer stopped", path=str(self.path), cause=self._failure, exc_info=e)
            if self.observer is not None:
                self.observer.failed()
        failed, self._preparing = self._preparing, []
        if in_commit:
            failed += self._committing
            self._committing = []
            for task in self._tasks:
                if task is not asyncio.current_task():
                    task.cancel()
        for req in failed:
            _fail(req.done, AppendFailed(f"{self.path}: batch not written: {self._failure}"))
        self._fail_all(f"not written, the writer stopped: {self._failure}", prepared=in_commit)

    def _fail_all(self, why: str, *, prepared: bool = True) -> None:
        """Fail every request not yet written: queued, in preparation, and (`prepared`) prepared or committing."""
        requests = [*self._preparing]
        if prepared:
            requests += self._committing
            while not self._prepared.empty():
                requests.extend(self._prepared.get_nowait().requests)
        while not self._queue.empty():
            requests.append(self._queue.get_nowait())
        for req in requests:
            _fail(req.done, AppendFailed(f"{self.path}: {why}"))

    async def _prepare_loop(self) -> None:
        while True:
            first = await self._queue.get()
            batch = self._preparing = [first]
            size = len(first.items)
            while size < self._max_batch and not self._queue.empty():
                nxt = self._queue.get_nowait()
                batch.append(nxt)
                size += len(nxt.items)
            first_seq = self._seq + 1
            seq, previous, clock_now = self._seq, self._tail_hash, self._clock()
            rows: list[tuple[int, int, str, int, str, bytes, int | None, bytes]] = []
            for req in batch:
                now = clock_now if req.recorded_at is None else req.recorded_at
                if not INTEGER_MIN <= now <= INTEGER_MAX:
                    raise AppendFailed(f"{self.path}: recorded_at {now} is outside SQLite's INTEGER range")
                for event, cause in req.items:
                    seq += 1
                    if cause is not None and not INTEGER_MIN <= cause <= INTEGER_MAX:
                        raise AppendFailed(f"{self.path}: cause {cause} is outside SQLite's INTEGER range")
                    payload = codec.encode_payload(event)
                    subject = event.subject
                    previous = codec.chain_hash(
                        previous, codec.row_bytes(seq, now, event.TYPE, event.VERSION, subject, cause, payload)
                    )
                    rows.append((seq, now, event.TYPE, event.VERSION, subject, payload, cause, previous))
            self._seq, self._tail_hash = seq, previous
            await self._prepared.put(_Prepared(batch, rows, first_seq))
            self._preparing = []  # only now: while put waits, a failed commit must still find this batch

    async def _commit_loop(self) -> None:
        conn = self._conn
        while True:
            prepared = await self._prepared.get()
            self._committing = prepared.requests
            async with self._write_lock:
                started = time.perf_counter()
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    # Under the write lock: the log must end where this writer thinks it does. The writer's lock
                    # file keeps other admitd processes out; this catches anything else writing the file.
                    async with conn.execute("SELECT coalesce(max(seq), 0) FROM events") as cur:
                        row = await cur.fetchone()
                    last = 0 if row is None else int(row[0])
                    if last != self._stored_last:
                        raise AppendFailed(
                            f"{self.path}: the log ends at seq {last}, expected {self._stored_last}: "
                            "another process is writing this file"
                        )
                    await conn.executemany(_INSERT, prepared.rows)
                    await conn.commit()
                    self._stored_last = prepared.rows[-1][0]
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        await conn.rollback()
                    raise
            self._committing = []
            done = time.perf_counter()
            observer = self.observer
            if observer is not None:
                observer.committed(len(prepared.rows), done - started)
            offset = 0
            for req in prepared.requests:
                n = len(req.items)
                if not req.done.done():
                    req.done.set_result([r[0] for r in prepared.rows[offset : offset + n]])
                if observer is not None:
                    observer.appended(done - req.submitted)
                offset += n
