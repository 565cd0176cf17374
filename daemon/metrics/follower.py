"""The metrics of one log file, folded on a thread of their own (`LogMetrics`): the follower of the log
(daemon/views' second feeder) with a renderer, for a scrape that only joins kept text."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import generate_latest

from daemon.eventlog import LogReader
from daemon.eventlog.errors import NotAnEventLog
from daemon.metrics.folded import FoldedMetrics
from daemon.metrics.heap import keep_on_heap
from daemon.metrics.live import LIVE
from daemon.metrics.renderer import Renderer
from daemon.metrics.text import num


def log_file_figures(reader: LogReader, fm: FoldedMetrics, now_ms: int | None = None) -> list[str]:
    """admitd_log_size_bytes and the snapshot age, read from the file itself."""
    path = Path(reader.path)
    size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    out = [
        "# HELP admitd_log_size_bytes The event log file, WAL included\n# TYPE admitd_log_size_bytes gauge\n",
        f"admitd_log_size_bytes {size}.0\n",
    ]
    snap = reader.newest_snapshot_info()
    out.append(
        "# HELP admitd_snapshot_age_events Events after the newest snapshot (what a restart replays)\n"
        "# TYPE admitd_snapshot_age_events gauge\n"
        "# HELP admitd_snapshot_age_seconds Wall time since the newest snapshot was written\n"
        "# TYPE admitd_snapshot_age_seconds gauge\n"
    )
    if snap is not None:
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        out.append(f"admitd_snapshot_age_events {max(0, fm.state.seq - snap[0])}.0\n")
        out.append(f"admitd_snapshot_age_seconds {num(max(0, now - snap[1]) / 1000)}\n")
    return out


class MetricsNotReady(Exception):
    """The log file exists but its writer has not created the schema yet: a scrape says so (HTTP 503) and the
    next one tries again."""


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _being_created(path: Path) -> bool:
    """An empty file, a SQLite header still being written, or a SQLite file with no schema and no application id:
    what a writer's log looks like before its first migration commits."""
    try:
        with path.open("rb") as f:
            head = f.read(100)
    except OSError:
        return False
    if len(head) < 100:
        return _SQLITE_MAGIC.startswith(head[:16])
    return head.startswith(_SQLITE_MAGIC) and head[68:72] == bytes(4) and head[40:44] == bytes(4)


class LogMetrics:
    """Metrics of one log file. Thread-safe (the HTTP server's threads share it). A log its writer is still creating
    raises MetricsNotReady.

    Without `follow_every`, folded on demand: every scrape first folds what was appended since the last one and
    renders what it changed. With it, a thread folds new events and renders what they changed every
    `follow_every` seconds, a chunk of events at a time, so a scrape only folds and renders the last moments and
    joins the text; until that thread has caught up with the log once, a scrape is answered "not ready"."""

    CHUNK = 5_000  # events folded per hold of the lock while catching up, so a scrape never waits for a whole fold
    READY_WAIT = 5.0  # seconds a scrape waits for the background fold to catch up before answering "not ready"

    def __init__(
        self,
        path: Path,
        replica_role: str | Callable[[], str] = "leader",
        *,
        local_queue_metrics: bool = False,
        fair_sharing: bool = False,
        follow_every: float | None = None,
    ) -> None:
        self.path = path
        self.fm = FoldedMetrics()
        # Kueue's replica_role: a name, or a callable read at every refresh (`admitd run`: leader or follower with
        # leader election, standalone without).
        self._role = replica_role if callable(replica_role) else (lambda: replica_role)
        self.renderer = Renderer(self._role(), local_queue_metrics=local_queue_metrics, fair_sharing=fair_sharing)
        self._reader: LogReader | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._caught_up = threading.Event()
        self._follower: threading.Thread | None = None
        self.follow_error: BaseException | None = None
        if follow_every is not None:
            self._follower = threading.Thread(
                target=self._follow, args=(follow_every,), name="admitd-metrics-fold", daemon=True
            )
        else:
            self._caught_up.set()

    def set_fair_sharing(self, on: bool) -> None:
        """Render Kueue's weighted shares (fair sharing on) or not, from the next scrape on."""
        with self._lock:
            self.renderer.fair_sharing = on
            self.fm.config_changed = True  # the cohort text, which holds them, is rendered again

    def start(self) -> LogMetrics:
        """Start the background fold (with `follow_every`; until then a scrape is "not ready")."""
        if self._follower is not None and not self._follower.is_alive():
            self._follower.start()
        return self

    def _open(self) -> LogReader | None:
        """The reader, opened at the first call that finds the log; None while there is no log file (lock held)."""
        if self._reader is None:
            if not self.path.exists():
                return None
            try:
                self._reader = LogReader(self.path)
            except NotAnEventLog as e:
                if _being_created(self.path):
                    raise MetricsNotReady(
                        f"not ready: {self.path} is being created by its writer (no schema yet); scrape again"
                    ) from e
                raise
        return self._reader

    def _follow(self, every: float) -> None:
        started = time.perf_counter()
        while not self._stop.is_set():
            try:
                with self._lock:
                    reader = self._open()
                    n = self.fm.follow(reader, self.CHUNK) if reader is not None else 0
                    if n < self.CHUNK:
                        self.renderer.set_role(self._role())
                        self.renderer.refresh(self.fm)
                        if reader is not None and not self._caught_up.is_set():
                            self.fm.replay_seconds = time.perf_counter() - started
                            self._caught_up.set()
            except MetricsNotReady:
                n = 0
            except Exception as e:  # said by every scrape from now on (`render`), rather than lost in a thread
                self.follow_error = e
                return
            if n < self.CHUNK:
                self._stop.wait(every)

    def caught_up(self, timeout: float | None = None) -> bool:
        """Has the log been folded to its end once (always true without `follow_every`)?"""
        return self._caught_up.wait(timeout)

    def render(self) -> bytes:
        if self.follow_error is not None:
            raise RuntimeError(
                f"folding {self.path} for the metrics failed: {self.follow_error}"
            ) from self.follow_error
        if self._follower is not None and self._follower.is_alive() and self.path.exists():
            self._caught_up.wait(self.READY_WAIT)  # a small log is folded by then; a large one answers 503
        with self._lock:
            reader = self._open()
            if reader is None:
                return generate_latest(LIVE)
            if not self._caught_up.is_set():
                raise MetricsNotReady(
                    f"not ready: folding {self.path} for the metrics, at seq {self.fm.state.seq} of "
                    f"{reader.last_seq()}; scrape again"
                )
            self.fm.follow(reader)
            self.renderer.set_role(self._role())
            body = self.renderer.render(self.fm, lambda: log_file_figures(reader, self.fm), extra=generate_latest(LIVE))
        keep_on_heap(len(body))
        return body

    def close(self) -> None:
        self._stop.set()
        if self._follower is not None and self._follower.is_alive():
            self._follower.join()
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
