"""Durations for people: milliseconds as `1m30s`, `0.001s`, `29m59.999s` (the form Go durations take, so that a
shown duration can be given back wherever admitd reads one)."""

from __future__ import annotations


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
