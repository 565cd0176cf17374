"""Every Prometheus metric admitd exposes (Prometheus only; the figures are daemon/views').

- `families`: the catalogue of Kueue's names, types and labels, and admitd's own;
- `live`: what only a running process sees (prometheus-client instruments and the callables that feed them);
- `folded`, `renderer`, `text`: the exposition of the views, kept per family and queue, one function per group;
- `follower`: `LogMetrics`, a log file's metrics on a thread of their own; `fed`: `FedMetrics`, a running daemon's,
  fed by its recorder (no second fold); `server`: the one /metrics answer;
- `heap`: glibc tuning for the scrape's large bytes object.
"""

from daemon.metrics.families import LOCAL_QUEUE_FAMILIES, metric_names
from daemon.metrics.fed import FedMetrics
from daemon.metrics.folded import FoldedMetrics
from daemon.metrics.follower import LogMetrics, MetricsNotReady, log_file_figures
from daemon.metrics.heap import keep_on_heap
from daemon.metrics.live import (
    LIVE,
    admission_attempt,
    build_info_is,
    leader_is,
    replayed,
    status_backlog_is,
    status_event_dropped,
    status_synced,
    watch_restarted,
    webhook_requested,
    write_observer,
)
from daemon.metrics.renderer import Renderer
from daemon.metrics.server import failed, scrape, serve
from daemon.metrics.text import CONTENT_TYPE

__all__ = [
    "CONTENT_TYPE",
    "LIVE",
    "LOCAL_QUEUE_FAMILIES",
    "FedMetrics",
    "FoldedMetrics",
    "LogMetrics",
    "MetricsNotReady",
    "Renderer",
    "admission_attempt",
    "build_info_is",
    "failed",
    "keep_on_heap",
    "leader_is",
    "log_file_figures",
    "metric_names",
    "replayed",
    "scrape",
    "serve",
    "status_backlog_is",
    "status_event_dropped",
    "status_synced",
    "watch_restarted",
    "webhook_requested",
    "write_observer",
]
