"""Figures only a running process sees (cycle durations, append latency, watch restarts, leadership, the
build): prometheus-client instruments in `LIVE`, fed by `admitd run` through the callables below, so that none of
the packages that report them knows prometheus-client (`admitd simulate` feeds none of them)."""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, PlatformCollector, ProcessCollector

from daemon.buildinfo import BuildInfo
from daemon.eventlog.store import WriteObserver

LIVE = CollectorRegistry(auto_describe=True)
ADMISSION_ATTEMPTS = Counter(
    "kueue_admission_attempts_total",
    "Admission cycles, by result: success when the cycle admitted something, inadmissible otherwise",
    ["replica_role", "result"],
    registry=LIVE,
)
ADMISSION_ATTEMPT_DURATION = Histogram(
    "kueue_admission_attempt_duration_seconds",
    "Duration of one admission cycle, by result",
    ["replica_role", "result"],
    registry=LIVE,
)
APPEND_LATENCY = Histogram(
    "admitd_append_latency_seconds",
    "From append() to its batch being committed and fsynced (what an appender waits)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=LIVE,
)
COMMIT_LATENCY = Histogram(
    "admitd_commit_latency_seconds",
    "Duration of one group-commit transaction, fsync included",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=LIVE,
)
APPEND_FAILURES = Counter("admitd_append_failures_total", "Batches the log writer failed to commit", registry=LIVE)
WATCH_RESTARTS = Counter(
    "admitd_watch_restarts_total",
    "Kubernetes watches restarted (410 Gone, errors, timeouts)",
    ["resource"],
    registry=LIVE,
)
LEADER = Gauge("admitd_leader", "1 while this process holds the leader lease, else 0", registry=LIVE)
REPLAY_DURATION = Gauge(
    "admitd_replay_duration_seconds", "How long the last replay of the log into state took at start-up", registry=LIVE
)
STATUS_SYNC_DELAY = Histogram(
    "admitd_status_sync_delay_seconds",
    "From a change being marked for the cluster (a Workload, a queue's status, an Event) to its write done, by kind "
    "and by the writer's lane (urgent, routine, queues); the linger and retries included",
    ["kind", "lane"],
    buckets=(0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0),
    registry=LIVE,
)
STATUS_BACKLOG = Gauge(
    "admitd_status_backlog", "Objects and Events marked for the cluster and not yet written", registry=LIVE
)
STATUS_EVENTS_DROPPED = Counter(
    "admitd_status_events_dropped_total",
    "Events the status writer dropped unsent because MAX_QUEUED_EVENTS (10,000) were waiting, by the Event's "
    "reason (Pending first; Admitted, Preempted and the rest only when no Pending is left to drop)",
    ["reason"],
    registry=LIVE,
)
WEBHOOK_REQUESTS = Counter(
    "controller_runtime_webhook_requests_total",
    "Webhook requests answered, by path and HTTP status (controller-runtime's name, as Kueue's webhooks report)",
    ["webhook", "code"],
    registry=LIVE,
)
WEBHOOK_LATENCY = Histogram(
    "controller_runtime_webhook_latency_seconds",
    "Time to answer a webhook request, by path (controller-runtime's name and buckets)",
    ["webhook"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=LIVE,
)
# The process's own figures (process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds...,
# python_info), as every Go controller exports them.
ProcessCollector(registry=LIVE)
PlatformCollector(registry=LIVE)
KUEUE_BUILD_INFO = Gauge(
    "kueue_build_info",
    "Always 1; Kueue's build labels filled with admitd's: git_version (the package version), git_commit, "
    "build_date (empty), go_version (the Python version), compiler (CPython), platform",
    ["git_version", "git_commit", "build_date", "go_version", "compiler", "platform"],
    registry=LIVE,
)
BUILD_INFO = Gauge(
    "admitd_build_info",
    "Always 1; its labels say which admitd runs: the package version, the source commit, the Python version",
    ["version", "commit", "python"],
    registry=LIVE,
)
STARTUP_REPLAY = threading.Event()  # set once the process reported its own start-up replay


# --- feeding the live instruments: plain callables the edge (`admitd run`) hands to the writer, the stages, the
# watches and the elector, so that none of those packages knows prometheus-client.


def write_observer() -> WriteObserver:
    """The log writer's reports -> append latency, commit latency, append failures."""
    return WriteObserver(
        appended=APPEND_LATENCY.observe,
        committed=lambda _events, seconds: COMMIT_LATENCY.observe(seconds),
        failed=APPEND_FAILURES.inc,
    )


def admission_attempt(admitted: bool, seconds: float, role: str = "leader") -> None:
    """One admission cycle: Kueue's result is `success` when it admitted something, `inadmissible` otherwise."""
    result = "success" if admitted else "inadmissible"
    ADMISSION_ATTEMPTS.labels(replica_role=role, result=result).inc()
    ADMISSION_ATTEMPT_DURATION.labels(replica_role=role, result=result).observe(seconds)


def watch_restarted(resource: str) -> None:
    WATCH_RESTARTS.labels(resource=resource).inc()


def leader_is(is_leader: Callable[[], bool]) -> None:
    """`admitd_leader` reads `is_leader()` at every scrape."""
    LEADER.set_function(lambda: 1.0 if is_leader() else 0.0)


def status_synced(kind: str, lane: str, seconds: float) -> None:
    STATUS_SYNC_DELAY.labels(kind=kind, lane=lane).observe(seconds)


def status_event_dropped(reason: str) -> None:
    STATUS_EVENTS_DROPPED.labels(reason=reason).inc()


def status_backlog_is(backlog: Callable[[], int]) -> None:
    """`admitd_status_backlog` reads `backlog()` at every scrape."""
    STATUS_BACKLOG.set_function(lambda: float(backlog()))


def webhook_requested(path: str, code: int, seconds: float) -> None:
    """One webhook request answered (`daemon.kube.webhook.routes(requested=...)`)."""
    WEBHOOK_REQUESTS.labels(webhook=path, code=str(code)).inc()
    WEBHOOK_LATENCY.labels(webhook=path).observe(seconds)


def build_info_is(info: BuildInfo) -> None:
    """`admitd_build_info{version,commit,python} 1` (daemon.buildinfo) and the same in Kueue's `kueue_build_info`
    labels, set once by `admitd run` at start."""
    BUILD_INFO.labels(version=info.version, commit=info.commit, python=info.python).set(1)
    KUEUE_BUILD_INFO.labels(
        git_version=info.version,
        git_commit=info.commit,
        build_date="",
        go_version=info.python,
        compiler=platform.python_implementation(),
        platform=f"{platform.system().lower()}/{platform.machine()}",
    ).set(1)


def replayed(seconds: float) -> None:
    """The start-up replay's duration (the process's own; a scrape's fold no longer sets it after this)."""
    STARTUP_REPLAY.set()
    REPLAY_DURATION.set(seconds)
