"""structlog set-up: JSON lines when stderr is not a terminal, readable lines when it is.

Context such as `seq`, `job` and `cluster_queue` is bound through contextvars, so every line about an event
carries its seq without threading it through calls.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def configure(*, level: str = "info", json: bool | None = None) -> None:
    """Configure structlog once per process. `json=None` picks JSON unless stderr is a TTY."""
    use_json = (not sys.stderr.isatty()) if json is None else json
    renderer: Any = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
