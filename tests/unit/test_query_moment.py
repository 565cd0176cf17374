"""Times for the read-side commands: parsing `--at`, showing virtual and wall times, durations.

Real: the parsing and formatting functions of daemon.query.moment. Faked: the log, as a `Clock` value (no file).
"""

from __future__ import annotations

import pytest

from daemon.domain.durations import format_seconds as format_duration
from daemon.query.moment import Clock, QueryError, is_virtual, parse_duration_ms, parse_time

VIRTUAL = Clock(virtual=True, first_seq=1, first_ms=0, last_seq=40, last_ms=3_000_000)
WALL = Clock(virtual=False, first_seq=1, first_ms=1_780_000_000_000, last_seq=9, last_ms=1_780_000_360_000)
NOW = 1_780_000_400_000


@pytest.mark.parametrize(
    ("text", "clock", "expected"),
    [
        pytest.param("+1m30s", VIRTUAL, 90_000, id="virtual offset from the scenario's start"),
        pytest.param("90s", VIRTUAL, 90_000, id="virtual offset without its plus sign"),
        pytest.param("-10m", VIRTUAL, 2_400_000, id="virtual relative counts back from the simulation's end"),
        pytest.param("now", VIRTUAL, 3_000_000, id="virtual now is the end"),
        pytest.param("2026-05-28T20:26:40Z", WALL, 1_780_000_000_000, id="RFC 3339 with Z"),
        pytest.param("2026-05-28T22:26:40+02:00", WALL, 1_780_000_000_000, id="RFC 3339 with an offset"),
        pytest.param("2026-05-28T20:26:40", WALL, 1_780_000_000_000, id="naive time taken as UTC"),
        pytest.param("-2h", WALL, NOW - 7_200_000, id="wall relative counts back from now"),
        pytest.param("-1.5h", WALL, NOW - 5_400_000, id="fractional durations"),
    ],
)
def test_parse_time(text: str, clock: Clock, expected: int) -> None:
    assert parse_time(text, clock, NOW) == expected


@pytest.mark.parametrize(
    ("text", "clock", "fragment"),
    [
        pytest.param("2026-05-28T20:26:40Z", VIRTUAL, "virtual times", id="a date on a simulated log"),
        pytest.param("+5m", WALL, "only applies to a simulated log", id="an offset on a real log"),
        pytest.param("yesterday", WALL, "not a time", id="not a time at all"),
        pytest.param("-2x", WALL, "not a duration", id="bad unit"),
    ],
)
def test_parse_time_errors_say_what_to_write(text: str, clock: Clock, fragment: str) -> None:
    with pytest.raises(QueryError, match=fragment):
        parse_time(text, clock, NOW)


def test_showing_times() -> None:
    assert VIRTUAL.show(90_000) == "+1m30s"
    assert VIRTUAL.show(1) == "+0.001s"
    assert WALL.show(1_780_000_000_000) == "2026-05-28T20:26:40.000Z"
    assert format_duration(0) == "0s" and format_duration(3_600_000 * 49) == "49h"
    assert parse_duration_ms("1m30s") == 90_000 and parse_duration_ms("250ms") == 250
    assert is_virtual(0) and is_virtual(86_400_000 * 365) and not is_virtual(1_780_000_000_000)
