"""The loader's fast constructor (`_Loader.construct_plain`) builds exactly what PyYAML's own constructor builds, and
leaves to it every document it does not handle (which is also where YAML errors are reported)."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.manifests.errors import ManifestError
from daemon.manifests.loader import _Loader, _Slow, parse_documents

# Plain scalars that YAML 1.1 resolves to every implicit type, including those the fast path hands back (dates,
# merge keys, `=`), and texts that need quoting.
_SCALARS = st.sampled_from(
    [
        "a", "cpu", "1", "0", "-3", "0x1F", "017", "1_000", "1.5", "1e3", ".inf", "-.inf", ".nan", "yes", "No",
        "on", "OFF", "true", "False", "~", "null", "", "2024-01-02", "2024-01-02T03:04:05Z", "=", "<<", "500m",
        "8Gi", "'quoted'", '"1"', "!!str 5", "!!int '7'", "!custom x", "9" * 30,
    ]
)  # fmt: skip
_KEYS = st.sampled_from(["a", "b", "name", "1", "true", "yes", "1.0", "~", "<<", "=", "2024-01-02", "'a'"])


def _render(value: object, indent: int = 0) -> str:
    pad = " " * indent
    if isinstance(value, list):
        if not value:
            return "[]"
        return "\n" + "\n".join(f"{pad}- {_render(v, indent + 2).lstrip()}" for v in value)
    if isinstance(value, tuple):  # a mapping, as (key, value) pairs: keys may repeat
        if not value:
            return "{}"
        return "\n" + "\n".join(f"{pad}{k}: {_render(v, indent + 2)}" for k, v in value)
    return str(value)


_TREES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.lists(st.tuples(_KEYS, inner), max_size=4).map(tuple),
    max_leaves=20,
)


def _library(text: str) -> object:
    """PyYAML's constructor with the loader's own checks (duplicate keys, bounded integers)."""
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _fast(text: str) -> object:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        assert node is not None
        return loader.construct_plain(node, set())
    finally:
        loader.dispose()


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(_TREES.filter(lambda t: isinstance(t, list | tuple) and bool(t)))
def test_fast_constructor_builds_what_the_library_builds(tree: object) -> None:
    text = "root:" + _render(tree, 2) + "\n"
    try:
        expected = _library(text)
    except yaml.YAMLError:
        with pytest.raises((_Slow, yaml.YAMLError)):
            _fast(text)
        return
    try:
        got = _fast(text)
    except _Slow:
        return  # left to the library, which built `expected`
    assert _same(got, expected), (text, got, expected)


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\na: 2\n",  # a repeated key: the library's way reports it with both lines
        "a: &x {b: 1}\nc: *x\n",  # an alias
        "a: &x [*x]\n",  # a recursive alias
        "base: &b {x: 1}\nderived: {<<: *b, y: 2}\n",  # a merge key
        "a: !!binary aGk=\n",  # an explicit tag
        "when: 2024-01-02\n",  # a timestamp
        "a: " + "[" * 150 + "]" * 150 + "\n",  # deeper than the fast path goes
        "{[1]: 2}\n",  # a key that is not a scalar
    ],
)
def test_documents_outside_the_fast_path_are_left_to_the_library(text: str) -> None:
    with pytest.raises(_Slow):
        _fast(text)


def test_errors_are_those_of_the_library() -> None:
    with pytest.raises(ManifestError, match=r"duplicate key 'a' \(first at line 1\)"):
        parse_documents("a: 1\na: 2\n")
    with pytest.raises(ManifestError, match="integer too long"):
        parse_documents("a: " + "9" * 5000 + "\n")
    # An alias still gives the library's result: the same object twice.
    parsed = parse_documents("kind: Namespace\napiVersion: v1\nmetadata: &m {name: ns}\nx: *m\n")
    assert len(parsed) == 1
