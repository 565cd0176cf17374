"""Go duration strings (`90s`, `1m30s`, `1.5h`, `250ms`) as exact integer milliseconds."""

from __future__ import annotations

import re
from fractions import Fraction

_UNITS_MS = {
    "ns": Fraction(1, 1_000_000),
    "us": Fraction(1, 1000),
    "µs": Fraction(1, 1000),
    "ms": Fraction(1),
    "s": Fraction(1000),
    "m": Fraction(60_000),
    "h": Fraction(3_600_000),
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


class DurationError(ValueError):
    pass


def parse_duration(text: str) -> int:
    """Milliseconds in a Go duration. Sub-millisecond remainders round up, so a job never runs for 0 ms by accident.

    >>> parse_duration("1m30s")
    90000
    """
    s = text.strip()
    if s in ("0", "+0"):
        return 0
    if s.startswith("-"):
        raise DurationError(f"{text!r}: a duration must not be negative")
    s = s.removeprefix("+")
    pos, total = 0, Fraction(0)
    if not s:
        raise DurationError(f"{text!r}: empty duration; expected e.g. 90s or 1m30s")
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise DurationError(f"{text!r}: not a Go duration; expected e.g. 90s, 1m30s, 1.5h or 250ms")
        total += Fraction(m.group(1)) * _UNITS_MS[m.group(2)]
        pos = m.end()
    whole = total.numerator // total.denominator
    return whole if whole == total else whole + 1


def format_seconds(ms: int) -> str:
    """Virtual time for people: `90s` -> `1m30s`, `0.001s`, `29m59.999s`."""
    whole, frac = divmod(ms, 1000)
    h, rest = divmod(whole, 3600)
    m, sec = divmod(rest, 60)
    parts = [f"{h}h"] if h else []
    if m:
        parts.append(f"{m}m")
    if frac:
        parts.append(f"{sec}.{frac:03d}".rstrip("0") + "s")
    elif sec or not parts:
        parts.append(f"{sec}s")
    return "".join(parts)
