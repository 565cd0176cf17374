"""Go durations for the simulator's annotations and reports. The parser lives at the border,
`daemon.manifests.durations`, where the Kueue Configuration's durations (waitForPodsReady.timeout) are read too."""

from __future__ import annotations

from daemon.manifests.durations import (
    MAX_DURATION_MS,
    MAX_DURATION_NS,
    MAX_DURATION_TEXT,
    DurationError,
    format_seconds,
    parse_duration,
)

__all__ = [
    "MAX_DURATION_MS",
    "MAX_DURATION_NS",
    "MAX_DURATION_TEXT",
    "DurationError",
    "format_seconds",
    "parse_duration",
]
