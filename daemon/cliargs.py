"""argparse types shared by the command lines (`admitd log`, `admitd run`, the read side)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def whole_number(minimum: int, too_small: str, maximum: int | None = None, too_large: str = "") -> Callable[[str], int]:
    """An argparse `type` for a whole number >= `minimum` (and <= `maximum`); `too_small` / `too_large` say what was
    wrong, formatted with the value (`{value}`)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(too_small.format(value=value))
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(too_large.format(value=value))
        return value

    return parse
