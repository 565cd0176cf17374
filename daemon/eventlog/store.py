"""The SQLite event log: one writer with group commit (aiosqlite), and read-only readers that never block it.

Durability: WAL with `synchronous=FULL`, so every committed batch is fsynced before its appenders are told it is
done. A power loss can cost only the batch being written at that moment, which nobody was told about.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

from daemon.domain.events import Event
from daemon.eventlog import codec
from daemon.eventlog.codec import GENESIS_HASH, StoredEvent
from daemon.eventlog.errors import (
    AppendFailed,
    ChainBroken,
    CorruptDatabase,
    DatabaseUnavailable,
    EventLogError,
    NotAnEventLog,
)
from daemon.eventlog.migrate import check_identity, migrate

Clock = Callable[[], int]
"""Milliseconds since the epoch (a virtual clock in simulations)."""

_COLUMNS = "seq, recorded_at, type, version, subject, payload, cause, hash"
_INSERT = f"INSERT INTO events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def default_db_path() -> Path:
    """`$STATE_DIRECTORY/admitd.db` under systemd (StateDirectory=), else `./admitd.db`."""
    state_dir = os.environ.get("STATE_DIRECTORY")
    if state_dir:
        return Path(state_dir.split(":")[0]) / "admitd.db"
    return Path("admitd.db")


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


class LogReader:
    """Read-only access (CLI, metrics, offline replay). Opens with `mode=ro`; WAL keeps it off the writer's path."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        _check_readable_file(self.path)
        try:
            self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            self.schema_version = check_identity(self._conn, self.path, allow_empty=False)
            if self.schema_version < 1:
                raise NotAnEventLog(self.path, "no events table")
        except sqlite3.Error as e:
            raise _classify(self.path, e) from e

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _query(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.Error as e:
            raise _classify(self.path, e) from e

    def last_seq(self) -> int:
        return int(self._query("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])

    def _chunks(self, columns: str, since: int, chunk: int) -> Iterator[list[tuple[Any, ...]]]:
        """Rows with seq > since, in order, a chunk at a time, so memory stays flat on large logs."""
        last = since
        while True:
            rows = self._query(
                f"SELECT {columns} FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (last, chunk)
            ).fetchall()
            if not rows:
                return
            yield rows
            last = rows[-1][0]

    def iter_events(self, since: int = 0, *, chunk: int = 5000) -> Iterator[StoredEvent]:
        """Events with seq > since, in order, every column."""
        for rows in self._chunks(_COLUMNS, since, chunk):
            for r in rows:
                yield _row(r)

    def iter_payloads(self, since: int = 0, *, chunk: int = 20000) -> Iterator[tuple[int, str, int, bytes]]:
        """`(seq, type, version, payload)` for seq > since: the lean read replay uses (no hash, no row objects)."""
        for rows in self._chunks("seq, type, version, payload", since, chunk):
            yield from rows

    def verify(self) -> int:
        """Walk the hash chain; return the number of events, or raise ChainBroken at the first bad seq."""
        previous = GENESIS_HASH
        expected_seq = 1
        count = 0
        for ev in self.iter_events():
            if ev.seq != expected_seq:
                raise ChainBroken(self.path, expected_seq, f"row missing (next stored row is seq {ev.seq})")
            digest = codec.chain_hash(
                previous,
                codec.row_bytes(ev.seq, ev.recorded_at, ev.type, ev.version, ev.subject, ev.cause, ev.payload),
            )
            if digest != ev.hash:
                raise ChainBroken(self.path, ev.seq, "stored hash does not match the row's contents")
            previous = ev.hash
            expected_seq += 1
            count += 1
        # AUTOINCREMENT remembers the highest seq ever written, so a cut-off tail shows as well.
        row = self._query("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        if row is not None and int(row[0]) >= expected_seq:
            raise ChainBroken(self.path, expected_seq, f"rows {expected_seq}..{row[0]} at the end are missing")
        return count

    def latest_snapshot(self, state_version: int) -> tuple[int, bytes] | None:
        """The newest snapshot of this shape whose event is still the one it was taken at."""
        rows = self._query(
            "SELECT s.seq, s.body FROM snapshots s JOIN events e ON e.seq = s.seq "
            "WHERE s.state_version = ? AND s.event_hash = e.hash ORDER BY s.seq DESC LIMIT 1",
            (state_version,),
        ).fetchall()
        return None if not rows else (int(rows[0][0]), bytes(rows[0][1]))

    # --- point reads for `admitd explain|history|queues|pending|replay` and the metrics (daemon.query, obs) ---

    def events_of(self, subject: str, upto: int | None = None) -> list[StoredEvent]:
        """Every event about `subject` (e.g. `job/ns/name`) with seq <= upto, in order: the events_by_subject index."""
        rows = self._query(
            f"SELECT {_COLUMNS} FROM events WHERE subject = ? AND seq <= ? ORDER BY seq",
            (subject, 2**62 if upto is None else upto),
        ).fetchall()
        return [_row(r) for r in rows]

    def bounds(self) -> tuple[int, int, int, int] | None:
        """`(first_seq, first_recorded_at, last_seq, last_recorded_at)` by primary key (no scan); None when empty."""
        first = self._query("SELECT seq, recorded_at FROM events ORDER BY seq LIMIT 1").fetchone()
        last = self._query("SELECT seq, recorded_at FROM events ORDER BY seq DESC LIMIT 1").fetchone()
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
            row = self._query("SELECT recorded_at FROM events WHERE seq >= ? ORDER BY seq LIMIT 1", (mid,)).fetchone()
            if row is not None and int(row[0]) <= recorded_at:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def snapshot_at_or_before(self, state_version: int, seq: int) -> tuple[int, bytes] | None:
        """The newest valid snapshot (as `latest_snapshot`) taken at or before `seq`: a moment's replay starts there."""
        rows = self._query(
            "SELECT s.seq, s.body FROM snapshots s JOIN events e ON e.seq = s.seq "
            "WHERE s.state_version = ? AND s.event_hash = e.hash AND s.seq <= ? ORDER BY s.seq DESC LIMIT 1",
            (state_version, seq),
        ).fetchall()
        return None if not rows else (int(rows[0][0]), bytes(rows[0][1]))

    def newest_snapshot_info(self) -> tuple[int, int] | None:
        """`(seq, created_at)` of the newest snapshot row, without its body (the metrics' snapshot age)."""
        row = self._query("SELECT seq, created_at FROM snapshots ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def stats(self) -> LogStats:
        first_seq, last_seq, first_at, last_at, n = self._query(
            "SELECT min(seq), max(seq), min(recorded_at), max(recorded_at), count(*) FROM events"
        ).fetchone()
        by_type = tuple(
            TypeStats(t, c)
            for t, c in self._query("SELECT type, count(*) FROM events GROUP BY type ORDER BY type").fetchall()
        )
        snaps = self._query("SELECT count(*) FROM snapshots").fetchone()[0]
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


@dataclass(slots=True)
class _Request:
    items: Sequence[tuple[Event, int | None]]
    done: asyncio.Future[list[int]]
    recorded_at: int | None = None


@dataclass(slots=True)
class _Prepared:
    requests: list[_Request]
    rows: list[tuple[int, int, str, int, str, bytes, int | None, bytes]]
    first_seq: int  # the seq this batch starts at; the log must end at first_seq - 1 when it commits


class EventStore:
    """The single writer. `append` returns only once the batch holding its events is committed and fsynced.

    Appends that arrive while a batch is being written are grouped into the next one (group commit), up to
    `max_batch` events, so a burst costs one fsync instead of one per event. Two tasks form a pipeline: one
    encodes and chains the next batch while the other commits the previous one in SQLite's thread.
    """

    def __init__(self, conn: aiosqlite.Connection, path: Path, clock: Clock, max_batch: int) -> None:
        self.path = path
        self._conn = conn
        self._clock = clock
        self._max_batch = max_batch
        self._queue: asyncio.Queue[_Request] = asyncio.Queue()
        self._prepared: asyncio.Queue[_Prepared] = asyncio.Queue(maxsize=2)
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: BaseException | None = None
        self._seq = 0
        self._tail_hash = GENESIS_HASH
        self._base_seq = 0
        self._submitted = 0

    @classmethod
    async def open(
        cls, path: Path | str, *, clock: Clock = wall_clock_ms, max_batch: int = 1000, durable: bool = True
    ) -> EventStore:
        """Open (creating and migrating if needed) the log at `path` for writing.

        `durable=False` (simulations only) skips the fsyncs: a crash may then lose the tail, never corrupt it.
        """
        path = Path(path)
        if path.exists() and not path.is_file():
            raise DatabaseUnavailable(path, "not a regular file")
        if not path.parent.exists():
            raise DatabaseUnavailable(path, f"directory {path.parent} does not exist")
        try:
            # Identity and migrations on a plain connection first: nothing is written to a foreign file.
            with contextlib.closing(sqlite3.connect(path)) as setup:
                migrate(setup, path)
                setup.execute("PRAGMA journal_mode=WAL").fetchone()
            conn = await aiosqlite.connect(path, isolation_level=None)
            await conn.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=OFF")
            await conn.execute("PRAGMA busy_timeout=5000")
            await conn.execute("PRAGMA cache_size=-65536")  # 64 MiB: the subject index stays in memory
            async with conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1") as cur:
                tail = await cur.fetchone()
        except sqlite3.Error as e:
            raise _classify(path, e) from e
        store = cls(conn, path, clock, max_batch)
        if tail is not None:
            store._seq, store._tail_hash = int(tail[0]), _bytes(tail[1])
            store._base_seq = store._seq
        store._tasks = [
            asyncio.create_task(store._prepare_loop(), name="eventlog-prepare"),
            asyncio.create_task(store._commit_loop(), name="eventlog-commit"),
        ]
        return store

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self._conn.close()

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
            raise AppendFailed(f"{self.path}: the writer stopped earlier: {self._failure}") from self._failure
        done: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Request(items, done, recorded_at))
        self._submitted += len(items)
        return done

    @property
    def expected_seq(self) -> int:
        """The seq the next submitted event will get, given that this process is the only writer."""
        return self._base_seq + self._submitted + 1

    async def write_snapshot(self, seq: int, state_version: int, body: bytes) -> None:
        async with self._conn.execute("SELECT hash FROM events WHERE seq = ?", (seq,)) as cur:
            row = await cur.fetchone()
        if row is None:
            raise AppendFailed(f"{self.path}: cannot snapshot at seq {seq}: no such event")
        await self._conn.execute(
            "INSERT OR REPLACE INTO snapshots (seq, event_hash, state_version, created_at, body) "
            "VALUES (?, ?, ?, ?, ?)",
            (seq, row[0], state_version, self._clock(), body),
        )

    async def _prepare_loop(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            size = len(first.items)
            while size < self._max_batch and not self._queue.empty():
                nxt = self._queue.get_nowait()
                batch.append(nxt)
                size += len(nxt.items)
            first_seq = self._seq + 1
            seq, previous, clock_now = self._seq, self._tail_hash, self._clock()
            rows: list[tuple[int, int, str, int, str, bytes, int | None, bytes]] = []
            try:
                for req in batch:
                    now = clock_now if req.recorded_at is None else req.recorded_at
                    for event, cause in req.items:
                        seq += 1
                        payload = codec.encode_payload(event)
                        subject = event.subject
                        previous = codec.chain_hash(
                            previous, codec.row_bytes(seq, now, event.TYPE, event.VERSION, subject, cause, payload)
                        )
                        rows.append((seq, now, event.TYPE, event.VERSION, subject, payload, cause, previous))
            except Exception as e:  # an event that cannot be encoded fails its batch, not the writer
                for req in batch:
                    req.done.set_exception(AppendFailed(f"{self.path}: batch not written: {e}"))
                continue
            self._seq, self._tail_hash = seq, previous
            await self._prepared.put(_Prepared(batch, rows, first_seq))

    async def _commit_loop(self) -> None:
        conn = self._conn
        while True:
            prepared = await self._prepared.get()
            try:
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    # Under the write lock: the log must end where this writer thinks it does. Another process
                    # writing the same file would otherwise fork the chain.
                    async with conn.execute("SELECT coalesce(max(seq), 0) FROM events") as cur:
                        row = await cur.fetchone()
                    last = 0 if row is None else int(row[0])
                    if last != prepared.first_seq - 1:
                        raise AppendFailed(
                            f"{self.path}: the log ends at seq {last}, expected {prepared.first_seq - 1}: "
                            "another process is writing this file"
                        )
                    await conn.executemany(_INSERT, prepared.rows)
                    await conn.commit()
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        await conn.rollback()
                    raise
            except (sqlite3.Error, EventLogError) as e:
                # Later prepared batches chained onto this one: fail them too and stop taking appends.
                self._failure = e
                failed = [prepared]
                while not self._prepared.empty():
                    failed.append(self._prepared.get_nowait())
                for p in failed:
                    for req in p.requests:
                        if not req.done.done():
                            req.done.set_exception(AppendFailed(f"{self.path}: batch not written: {e}"))
                continue
            offset = 0
            for req in prepared.requests:
                n = len(req.items)
                if not req.done.done():
                    req.done.set_result([r[0] for r in prepared.rows[offset : offset + n]])
                offset += n
