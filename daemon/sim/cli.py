"""Argument parsing for `admitd simulate` (placeholder until the simulator lands)."""

from __future__ import annotations

from typing import Any


def add_simulate_parser(sub: Any) -> None:
    del sub
