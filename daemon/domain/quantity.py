"""Exact Kubernetes resource quantities: parse ``"500m"``, ``"64Gi"``, ``"1e3"`` into integer milli-units, and back.

Pure and exact: every step is integer or `fractions.Fraction` arithmetic, never a float, so that sums of requests
and quotas agree bit for bit with what Kubernetes (and Kueue) compute from the same strings.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from daemon.domain.model import Milli

__all__ = [
    "QuantityError",
    "ceil_milli",
    "format_quantity",
    "is_memory_like",
    "parse_exact",
    "parse_quantity",
    "resource_milli",
]


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity. The message names the offending value."""


# What both the apiserver's CRD schema pattern for resource.Quantity and apimachinery's ParseQuantity accept: at
# least one digit, at most one suffix, integer exponents only. ParseQuantity alone also reads "+" and "." as 0; the
# CRD pattern alone also passes "1e1.5", which ParseQuantity then rejects. Either refusal is a refusal here.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<dec>[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?"
)

_DECIMAL_EXPONENT = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_EXPONENT = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# Bounds that Kubernetes does not have but a daemon reading untrusted manifests needs: "1e999999999" would
# otherwise build a billion-digit integer. No real quota or request comes anywhere near either bound.
_MAX_LENGTH = 256
_MAX_EXPONENT = 1000

_NANO = 10**9
_EXAMPLES = "500m, 2, 64Gi, 1.5e3 (suffixes n u m k M G T P E Ki Mi Gi Ti Pi Ei)"


def parse_exact(value: object) -> Fraction:
    """The exact value of a quantity, in units, after Kubernetes' own rounding to whole nano-units.

    Accepts a string in Kubernetes quantity syntax, an int, or a float as YAML produces it (read through its
    shortest repr, ``0.5`` -> ``"0.5"``, so no float arithmetic happens). Raises `QuantityError` otherwise.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    return _parse_text(_as_text(value))


# Manifests repeat the same few strings ("1", "500m", "8Gi") thousands of times, and a Fraction is immutable, so
# the parse of each distinct string is kept: it was half the cost of turning a Job into a Workload.
@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    stripped = text.strip()  # Quantity.UnmarshalJSON trims surrounding whitespace before parsing
    if not stripped:
        raise QuantityError(f"invalid quantity {text!r}: empty")
    if len(stripped) > _MAX_LENGTH:
        raise QuantityError(f"invalid quantity {stripped[:32]!r}...: longer than {_MAX_LENGTH} characters")
    m = _QUANTITY.fullmatch(stripped)
    if m is None or not (m["int"] or m["frac"]):
        raise QuantityError(
            f"invalid quantity {stripped!r}: expected a number with an optional suffix, e.g. {_EXAMPLES}"
        )
    frac = m["frac"] or ""
    amount = Fraction(int((m["int"] or "0") + frac), 10 ** len(frac))
    if m["bin"]:
        amount *= 2 ** _BINARY_EXPONENT[m["bin"]]
    else:
        exponent = _DECIMAL_EXPONENT[m["dec"]] if m["dec"] else int(m["exp"] or "0")
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"invalid quantity {stripped!r}: exponent out of range (|e| <= {_MAX_EXPONENT})")
        amount *= Fraction(10) ** exponent
    if m["sign"] == "-":
        amount = -amount
    # ParseQuantity rounds any non-zero value away from zero to a whole nano-unit ("if you want some resources,
    # you should get some resources"), so "0.1n" is 1n, not 0.
    nanos = amount * _NANO
    if nanos.denominator != 1:
        nanos = Fraction(math.ceil(nanos) if nanos > 0 else math.floor(nanos))
    return nanos / _NANO


def parse_quantity(value: object) -> Milli:
    """A quantity in integer milli-units, rounding any remaining fraction of a milli-unit up (``"100n"`` -> 1).

    This is `resource.Quantity.MilliValue` for non-negative values. For negative values it is the mathematical
    ceiling (``"-1.5m"`` -> -1); Kubernetes' own rounding there is truncation plus one, which is never used for
    anything but rejecting the value, and callers that reject negatives check the sign of `parse_exact`.
    """
    return ceil_milli(parse_exact(value))


def ceil_milli(exact: Fraction) -> Milli:
    """An exact quantity in milli-units, rounded up."""
    return math.ceil(exact * 1000)


def resource_milli(exact: Fraction, resource: str) -> Milli:
    """An exact quantity of `resource` as Kueue accounts it, in milli-units.

    Kueue (`pkg/resources/requests.go`, `ResourceValue`) keeps CPU in milli-cores (`MilliValue`) and every other
    resource in whole units (`Value`, which rounds up), so ``memory: 1.5`` counts as 2 bytes. The result is
    always milli-units, as the domain model wants, but for anything but CPU it is a whole multiple of 1000.
    """
    if resource == "cpu":
        return ceil_milli(exact)
    return math.ceil(exact) * 1000


def is_memory_like(resource: str | None) -> bool:
    """Resources counted in bytes, which people write with binary suffixes."""
    if resource is None:
        return False
    return resource in ("memory", "ephemeral-storage", "storage") or resource.startswith("hugepages-")


def format_quantity(milli: Milli, resource: str | None = None) -> str:
    """A short quantity string for messages, which `parse_quantity` reads back to the same value.

    Fractions of a unit are written in milli-units (``500m``); whole units plainly (``2``); memory-like resources
    with the largest binary suffix that divides exactly (``64Gi``, ``1536Mi``), else in plain bytes.
    """
    if milli % 1000:
        return f"{milli}m"
    units = milli // 1000
    if units and is_memory_like(resource):
        for suffix, exponent in reversed(_BINARY_EXPONENT.items()):
            if units % (1 << exponent) == 0:
                return f"{units // (1 << exponent)}{suffix}"
    return str(units)


def _as_text(value: object) -> str:
    # bool is an int subclass; YAML `true` where a quantity belongs is a mistake, not 1.
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}: expected a number or a quantity string, got a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"invalid quantity {value!r}: not a finite number")
        return repr(value)  # the shortest string that reads back as this float: what the YAML said, e.g. "0.5"
    if isinstance(value, str):
        return value
    raise QuantityError(f"invalid quantity {value!r}: expected a number or a quantity string")
