"""structlog set-up: JSON lines when stderr is not a terminal, readable lines when it is.

Context such as `seq`, `job` and `cluster_queue` is bound through contextvars, so every line about an event
carries its seq without threading it through calls.

structlog is imported when the first line is logged, not when a module asks for a logger: a read command that logs
nothing (`admitd explain`, `queues`...) starts without it (with `rich` installed, as in the development
environment, importing structlog costs about 60 ms). `configure` called before that is applied then.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType
from typing import Any

_pending: list[tuple[str, bool | None]] = []  # configure()'s last arguments, until structlog is loaded


def configure(*, level: str = "info", json: bool | None = None) -> None:
    """Configure structlog once per process. `json=None` picks JSON unless stderr is a TTY."""
    logging.getLevelNamesMapping()[level.upper()]  # an unknown level fails here, not at the first line logged
    _pending[:] = [(level, json)]
    if "structlog" in sys.modules:
        _structlog()


def _structlog() -> ModuleType:
    """structlog, loaded and configured as `configure` last asked."""
    import structlog  # noqa: PLC0415  (loaded on first use: see the module docstring)

    if _pending:
        level, json = _pending.pop()
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
    return structlog


class _Logger:
    """A structlog logger made on first use (`log.info(...)`, `log.bind(...)`): what `get_logger` hands out."""

    __slots__ = ("_name", "_real")

    def __init__(self, name: str) -> None:
        self._name = name
        self._real: Any = None

    def __getattr__(self, attr: str) -> Any:
        real = self._real
        if real is None:
            real = self._real = _structlog().get_logger(self._name)
        return getattr(real, attr)


def get_logger(name: str) -> Any:
    return _Logger(name)
