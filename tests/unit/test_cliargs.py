"""The argparse types the command lines share (daemon/cliargs.py)."""

from __future__ import annotations

import argparse

import pytest

from daemon.cliargs import whole_number


def test_a_whole_number_within_bounds_is_parsed_and_each_bad_value_says_what_was_wrong() -> None:
    seq = whole_number(1, "a seq starts at 1, got {value}", 10, "must be at most 10, got {value}")
    assert seq("1") == 1 and seq("10") == 10
    for text, said in (
        ("0", "a seq starts at 1, got 0"),
        ("11", "must be at most 10, got 11"),
        ("1.5", "expected a whole number, got '1.5'"),
        ("", "expected a whole number, got ''"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=said.replace(".", r"\.")):
            seq(text)
    assert whole_number(0, "negative: {value}")("123456789012345678901234567890") == 123456789012345678901234567890
