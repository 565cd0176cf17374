"""Hostile scenario documents: random mutations of a valid scenario (wrong types, huge numbers, deep nesting, odd
and unicode strings, missing fields, duplicated documents, bad durations, broken YAML text) run through the real
`admitd simulate --json`; whatever the input, it exits 0, 1 or 2 and never with a traceback, within a deadline.

Real: `admitd simulate` in-process (`daemon.cli.main`): loader, fold, engine, SQLite log, report.
Faked: the cluster (the virtual clock). Hypothesis chooses the mutations; a failure prints the scenario.
"""

from __future__ import annotations

import copy
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.inprocess import admitd
from tests.integration.scenario_text import BASE, job

VALID = list(
    yaml.safe_load_all(
        BASE
        + job("a", runtime="30s")
        + job("b", gpus=4, submit_at="10s", labels={"kueue.x-k8s.io/priority-class": "high"})
        + job("c", gpus=8, runtime="1m", parallelism=2)
        + "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: high}\nvalue: 10\n"
        + "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: all}\n"
    )
)

odd_strings = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "",
            "Bad Queue!",
            "a\nb",
            "\x1b[31mred",
            "\u202eevil",
            "日本語",
            "x" * 300,
            "9223372036854775808ms",
            "2562047h47m16.854775808s",
            "-1s",
            "1e400",
            "NaN",
            "-0",
            "9223372036854775808",
            "1Ei",
            "0.0000000001n",
            "b/c",
        ]
    ),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, 2**63 - 1, -(2**63) - 1, 2**31, 10**300]),
    st.floats(allow_nan=True, allow_infinity=True),
    odd_strings,
)


def _nested(depth: int) -> object:
    value: object = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(odd_strings, scalars, max_size=3),
    st.integers(min_value=1, max_value=200).map(_nested),
)


def _paths(doc: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(_paths(v, (*prefix, i)))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> str:
    docs = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        action = draw(st.sampled_from(["replace", "delete", "duplicate", "drop-doc"]))
        i = draw(st.integers(min_value=0, max_value=len(docs) - 1))
        if action == "duplicate":
            docs.insert(i, copy.deepcopy(docs[i]))
            continue
        if action == "drop-doc" and len(docs) > 1:
            docs.pop(i)
            continue
        path = draw(st.sampled_from(_paths(docs[i])))
        if not path:
            docs[i] = draw(values)
            continue
        parent = docs[i]
        for step in path[:-1]:
            parent = parent[step]
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(values)
    text = yaml.safe_dump_all(docs, allow_unicode=draw(st.booleans()))
    if draw(st.integers(min_value=0, max_value=9)) == 0:  # now and then, damage the text itself
        cut = draw(st.integers(min_value=0, max_value=len(text)))
        text = text[:cut] + draw(st.sampled_from(["", "\t", ": [", "\x00", "&a *a", "!!python/object:os.system ''"]))
    return text


@settings(
    max_examples=60,
    deadline=timedelta(seconds=30),  # generous for a noisy 2-core machine; a hang shows up as a failure
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # the same examples on every run, so a failure replays
)
@given(text=mutated())
def test_any_mutated_scenario_ends_with_a_documented_status_and_no_traceback(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        run = admitd("simulate", str(path), "--json")
    assert run.crash is None, f"crashed on:\n{text}\n{run.crash}"
    assert run.status in (0, 1, 2), (run.status, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr
    if run.status == 0:
        assert set(run.json()) == {"end", "jobs"}
