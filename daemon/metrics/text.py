"""The exposition format's small parts: escaping, numbers, amounts, renaming a family's lines."""

from __future__ import annotations

import math

from daemon.domain.model import Milli
from daemon.domain.quota import UNLIMITED

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def esc(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def num(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    if math.isnan(v):
        return "NaN"
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v)}.0"
    return repr(float(v))


def amount(milli: Milli) -> float:
    return math.inf if milli >= UNLIMITED else milli / 1000


def rename(text: bytes, old: bytes, new: bytes) -> bytes:
    """`text`, lines of the family `old`, as the same lines of the family `new` (a name is only ever at the start
    of a line: newlines inside label values are escaped)."""
    if not text:
        return text
    assert text.startswith(old), (text[:80], old)
    return new + text[len(old) :].replace(b"\n" + old, b"\n" + new)
