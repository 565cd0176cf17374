"""Go duration strings (`90s`, `1m30s`, `1.5h`, `250ms`) read as exact integer milliseconds, bounded as Go bounds
them (`daemon.domain.durations` writes them back for people).

Read at the border: the simulator's annotations and the Kueue Configuration's durations (waitForPodsReady).
"""

from __future__ import annotations

import functools
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

MAX_DURATION_NS = 2**63 - 1
"""Go's `time.Duration` is an int64 of nanoseconds: about 292 years. `time.ParseDuration` rejects anything longer."""
MAX_DURATION_MS = -(-MAX_DURATION_NS // 1_000_000)  # rounded up, as parse_duration rounds
MAX_DURATION_TEXT = "2562047h47m16.854775807s"
_MAX_LENGTH = 100  # far longer than any real duration; keeps a megabyte of digits from being parsed at all


class DurationError(ValueError):
    pass


@functools.lru_cache(maxsize=1024)  # scenarios repeat a few durations thousands of times; errors are not kept
def parse_duration(text: str) -> int:
    """Milliseconds in a Go duration. Sub-millisecond remainders round up, so a job never runs for 0 ms by accident.

    Longer than Go's longest duration (``2562047h47m16.854775807s``) is an error, as it is for Go: every time the
    simulator computes from durations then fits the event log's 64-bit integers.

    >>> parse_duration("1m30s")
    90000
    """
    s = text.strip()
    if s in ("0", "+0"):
        return 0
    if len(s) > _MAX_LENGTH:
        raise DurationError(f"{s[:32]!r}...: longer than {_MAX_LENGTH} characters; not a Go duration")
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
    if total * 1_000_000 > MAX_DURATION_NS:
        raise DurationError(f"{text!r}: longer than the longest Go duration, {MAX_DURATION_TEXT} (about 292 years)")
    whole = total.numerator // total.denominator
    return whole if whole == total else whole + 1
