"""Kubernetes quantity parsing and formatting (`daemon.domain.quantity`).

Real: the parser and formatter, on the strings users write. Faked: nothing. The expected values were worked out by
hand from apimachinery's `ParseQuantity`/`MilliValue` and Kueue's `ResourceValue`, and are exact integers.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from daemon.domain.quantity import (
    QuantityError,
    format_quantity,
    parse_exact,
    parse_quantity,
    resource_milli,
)

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # the property tests below need it; the table tests do not
    given = None

GI = 2**30
MI = 2**20


@pytest.mark.parametrize(
    ("value", "milli"),
    [
        ("500m", 500),
        ("2", 2000),
        ("64Gi", 64 * GI * 1000),
        ("1.5Gi", 1536 * MI * 1000),
        ("0.1Ki", 102_400),
        ("1e3", 1_000_000),
        ("1.5E2", 150_000),
        ("1E-3", 1),
        ("2k", 2_000_000),
        ("3M", 3 * 10**9),
        ("5E", 5 * 10**21),
        ("100n", 1),
        ("1n", 1),
        ("1001u", 2),
        ("1.5e-4", 1),
        ("0.0001", 1),
        ("0", 0),
        ("-0", 0),
        ("+1", 1000),
        ("-1", -1000),
        ("-500m", -500),
        ("1.", 1000),
        (".5", 500),
        (" 2 ", 2000),
        (8, 8000),
        (-3, -3000),
        (0.5, 500),
        (2.25, 2250),
        (1e20, 10**23),
    ],
    ids=[
        "milli-cpu as written in a pod spec",
        "a plain integer string is whole units",
        "binary suffix Gi",
        "fractional binary: 1.5Gi is exactly 1536Mi",
        "fractional Ki is exact, not float-rounded",
        "lower-case exponent",
        "upper-case exponent with a fraction",
        "negative exponent down to one milli",
        "decimal kilo",
        "decimal mega",
        "a bare E is exa, not an exponent",
        "100 nano rounds up to one milli, like MilliValue",
        "a single nano still costs one milli",
        "1001 micro is just over one milli, so two",
        "a fraction of a milli via exponent rounds up",
        "a fraction of a milli as a decimal rounds up",
        "zero",
        "negative zero is zero",
        "explicit plus sign",
        "negative whole number",
        "negative milli",
        "trailing dot, as ParseQuantity allows",
        "leading dot",
        "surrounding whitespace is trimmed as UnmarshalJSON does",
        "YAML integer",
        "YAML negative integer",
        "YAML float read through its repr, never float arithmetic",
        "YAML float with two decimals",
        "YAML float in exponent form",
    ],
)
def test_parse_quantity(value: object, milli: int) -> None:
    assert parse_quantity(value) == milli


@pytest.mark.parametrize(
    ("value", "exact"),
    [
        ("0.1n", Fraction(1, 10**9)),
        ("-0.1n", Fraction(-1, 10**9)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("250m", Fraction(1, 4)),
    ],
    ids=[
        "below a nano rounds away from zero to one nano",
        "negative below a nano rounds away from zero too",
        "binary fraction kept exact",
        "decimal fraction kept exact",
    ],
)
def test_parse_exact_rounds_to_nanos_like_kubernetes(value: str, exact: Fraction) -> None:
    assert parse_exact(value) == exact


_GARBAGE_HINT = (
    "expected a number with an optional suffix, e.g. 500m, 2, 64Gi, 1.5e3 "
    "(suffixes n u m k M G T P E Ki Mi Gi Ti Pi Ei)"
)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "invalid quantity '': empty"),
        ("   ", "invalid quantity '   ': empty"),
        (".", f"invalid quantity '.': {_GARBAGE_HINT}"),
        ("+", f"invalid quantity '+': {_GARBAGE_HINT}"),
        ("abc", f"invalid quantity 'abc': {_GARBAGE_HINT}"),
        ("1e", f"invalid quantity '1e': {_GARBAGE_HINT}"),
        ("1K", f"invalid quantity '1K': {_GARBAGE_HINT}"),
        ("1ki", f"invalid quantity '1ki': {_GARBAGE_HINT}"),
        ("1 Gi", f"invalid quantity '1 Gi': {_GARBAGE_HINT}"),
        ("1e1.5", f"invalid quantity '1e1.5': {_GARBAGE_HINT}"),
        ("--1", f"invalid quantity '--1': {_GARBAGE_HINT}"),
        ("Gi", f"invalid quantity 'Gi': {_GARBAGE_HINT}"),
        ("1Gim", f"invalid quantity '1Gim': {_GARBAGE_HINT}"),
        ("1e1001", "invalid quantity '1e1001': exponent out of range (|e| <= 1000)"),
        (True, "invalid quantity True: expected a number or a quantity string, got a boolean"),
        (None, "invalid quantity None: expected a number or a quantity string"),
        ([1], "invalid quantity [1]: expected a number or a quantity string"),
        (float("nan"), "invalid quantity nan: not a finite number"),
        (float("inf"), "invalid quantity inf: not a finite number"),
    ],
    ids=[
        "empty string",
        "only whitespace",
        "a lone dot (ParseQuantity says 0; the CRD pattern refuses it)",
        "a lone sign (likewise)",
        "words",
        "exponent marker without digits",
        "upper-case K is not a suffix",
        "lower-case ki is not a suffix",
        "space before the suffix",
        "fractional exponent",
        "double sign",
        "suffix without a number",
        "two suffixes",
        "an exponent that would build a thousand-digit number",
        "YAML true is not 1",
        "null",
        "a list",
        "NaN from YAML .nan",
        "infinity from YAML .inf",
    ],
)
def test_parse_quantity_rejects_garbage_naming_it(value: object, message: str) -> None:
    with pytest.raises(QuantityError) as e:
        parse_quantity(value)
    assert str(e.value) == message
    assert isinstance(e.value, ValueError)


def test_overlong_quantity_is_rejected_with_its_start() -> None:
    with pytest.raises(QuantityError) as e:
        parse_quantity("1" * 300)
    assert str(e.value) == f"invalid quantity {'1' * 32!r}...: longer than 256 characters"


@pytest.mark.parametrize(
    ("exact", "resource", "milli"),
    [
        ("100n", "cpu", 1),
        ("1.5", "cpu", 1500),
        ("1.5", "memory", 2000),
        ("100n", "memory", 1000),
        ("4", "nvidia.com/gpu", 4000),
        ("1Gi", "memory", GI * 1000),
    ],
    ids=[
        "cpu keeps milli precision, rounding up",
        "cpu fractions are exact milli-cores",
        "memory is whole bytes, rounded up, as Kueue's Value()",
        "a nano-byte is still a byte",
        "extended resources are whole units",
        "whole bytes stay as they are",
    ],
)
def test_resource_milli_follows_kueue_resource_value(exact: str, resource: str, milli: int) -> None:
    assert resource_milli(parse_exact(exact), resource) == milli


@pytest.mark.parametrize(
    ("milli", "resource", "text"),
    [
        (500, "cpu", "500m"),
        (2000, "cpu", "2"),
        (2500, "cpu", "2500m"),
        (0, "cpu", "0"),
        (64 * GI * 1000, "memory", "64Gi"),
        (1536 * MI * 1000, "memory", "1536Mi"),
        (1024 * 1000, "memory", "1Ki"),
        (1500 * 1000, "memory", "1500"),
        (0, "memory", "0"),
        (-GI * 1000, "memory", "-1Gi"),
        (4 * MI * 1000, "hugepages-2Mi", "4Mi"),
        (2 * GI * 1000, "ephemeral-storage", "2Gi"),
        (GI * 1000, "nvidia.com/gpu", str(GI)),
        (GI * 1000, None, str(GI)),
        (1500, "memory", "1500m"),
        (8000, None, "8"),
    ],
    ids=[
        "half a cpu",
        "two cpus",
        "two and a half cpus stay in milli",
        "zero cpu",
        "memory in Gi",
        "memory that is not whole Gi uses Mi",
        "memory in Ki",
        "memory that is no multiple of Ki is plain bytes",
        "zero memory is plain 0",
        "negative memory keeps its suffix",
        "hugepages are memory-like",
        "ephemeral-storage is memory-like",
        "a GPU count never gets a binary suffix",
        "no resource given: plain",
        "a fraction of a byte is written in milli",
        "no resource, whole units",
    ],
)
def test_format_quantity(milli: int, resource: str | None, text: str) -> None:
    assert format_quantity(milli, resource) == text
    assert parse_quantity(text) == milli


if given is not None:

    @settings(database=None, max_examples=300, deadline=None)
    @given(
        milli=st.integers(min_value=-(10**30), max_value=10**30),
        resource=st.sampled_from([None, "cpu", "memory", "nvidia.com/gpu", "hugepages-1Gi", "ephemeral-storage"]),
    )
    def test_format_then_parse_is_identity(milli: int, resource: str | None) -> None:
        assert parse_quantity(format_quantity(milli, resource)) == milli

    @settings(database=None, max_examples=300, deadline=None)
    @given(
        whole=st.integers(min_value=0, max_value=10**12),
        frac=st.text(alphabet="0123456789", min_size=1, max_size=15),
    )
    def test_decimal_strings_round_up_to_the_milli(whole: int, frac: str) -> None:
        exact = whole + Fraction(int(frac), 10 ** len(frac))
        nanos = exact * 10**9
        nano_rounded = Fraction(-(-nanos.numerator // nanos.denominator), 10**9)
        assert parse_quantity(f"{whole}.{frac}") == -(
            -(nano_rounded * 1000).numerator // (nano_rounded * 1000).denominator
        )

else:

    @pytest.mark.skip(reason="hypothesis is not installed")
    def test_format_then_parse_is_identity() -> None:
        raise AssertionError("unreachable")
