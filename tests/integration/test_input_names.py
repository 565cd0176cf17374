"""Names, namespaces, labels and annotations validated as Kubernetes and Kueue validate them, and nothing raw reaches
a terminal: a bad name is one escaped line naming the object, the field and the rule, and the rest of the scenario
runs; the report escapes non-printable characters even in names that got past validation.

Real: `admitd simulate` in-process (`daemon.cli.main`), the loader, the fold, the engine, the SQLite log, the report.
Faked: the cluster (the virtual clock); `test_the_table_escapes_*` builds a `SimResult` by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.sim.report import to_table
from daemon.sim.run import SimResult
from daemon.views.jobs import JobOutcome
from tests.integration.inprocess import Run, admitd
from tests.integration.scenario_text import BASE, job

ESC = "\x1b"


def simulate(tmp_path: Path, text: str, *extra: str) -> Run:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    run = admitd("simulate", str(path), *extra)
    assert run.crash is None, run.crash
    assert run.status == 0, run.stderr
    return run


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("evil\nresearch/forged  team  gpu  0s", "lower case alphanumeric"),  # a newline forged a table row
        (f"{ESC}[31mred{ESC}[0m", "lower case alphanumeric"),  # ANSI escapes reached the terminal
        ("Train-A", "lower case alphanumeric"),
        ("b/c", "lower case alphanumeric"),
        ("x" * 64, "no more than 63 characters"),  # a Job's name becomes a label value on its pods
    ],
)
def test_a_bad_job_name_is_one_escaped_line_and_the_rest_runs(tmp_path: Path, name: str, rule: str) -> None:
    run = simulate(tmp_path, BASE + job(name) + job("ok"))
    rejected = [line for line in run.stderr.splitlines() if "rejected" in line]
    assert len(rejected) == 1, run.stderr
    assert ": metadata.name: invalid value " in rejected[0] and rule in rejected[0]
    assert ESC not in run.stderr and ESC not in run.stdout
    rows = [line for line in run.stdout.splitlines() if line.startswith("research/")]
    assert [r.split()[0] for r in rows] == ["research/ok"]  # no forged row, no row for the bad job


def test_a_bad_queue_label_is_rejected_with_kueues_rule(tmp_path: Path) -> None:
    run = simulate(tmp_path, BASE + job("a", queue="Bad Queue!") + job("ok"), "--json")
    assert "Job research/a: metadata.labels[kueue.x-k8s.io/queue-name]: invalid value 'Bad Queue!'" in run.stderr, (
        run.stderr
    )
    assert set(run.json()["jobs"]) == {"research/ok"}  # type: ignore[arg-type]


def test_a_queue_name_valid_as_a_label_but_not_as_a_kueue_name_is_rejected(tmp_path: Path) -> None:
    # "Research_Queue" is a valid label value; Kueue's job webhook also wants a DNS-1123 subdomain.
    run = simulate(tmp_path, BASE + job("a", queue="Research_Queue"), "--json")
    assert "metadata.labels[kueue.x-k8s.io/queue-name]: invalid value 'Research_Queue'" in run.stderr


def test_a_megabyte_label_value_is_rejected_in_one_short_line(tmp_path: Path) -> None:
    run = simulate(tmp_path, BASE + job("a", labels={"team": "x" * 1_000_000}) + job("ok"), "--json")
    assert "Job research/a: metadata.labels[team]: invalid value 'xxxx" in run.stderr
    assert "(1000000 characters): must be no more than 63 characters" in run.stderr
    assert len(run.stderr) < 2_000
    assert set(run.json()["jobs"]) == {"research/ok"}  # type: ignore[arg-type]


def test_a_bad_namespace_and_label_key_are_rejected(tmp_path: Path) -> None:
    text = BASE + job("a", namespace="Research") + job("b", labels={"bad key!": "v"}) + job("ok")
    run = simulate(tmp_path, text, "--json")
    assert "metadata.namespace: invalid value 'Research'" in run.stderr
    assert "metadata.labels[bad key!]: invalid key 'bad key!'" in run.stderr
    assert set(run.json()["jobs"]) == {"research/ok"}  # type: ignore[arg-type]


def test_keys_cannot_collide_once_names_are_validated(tmp_path: Path) -> None:
    # namespace a + name b/c and namespace a/b + name c were both the key "a/b/c".
    lq = (
        "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\n"
        "metadata: {name: q, namespace: a}\nspec: {clusterQueue: team}\n"
    )
    text = BASE + lq + job("b/c", namespace="a", queue="q") + job("c", namespace="a/b", queue="q") + job("ok")
    run = simulate(tmp_path, text, "--json")
    assert "Job a/'b/c': metadata.name: invalid value 'b/c'" in run.stderr
    assert "metadata.namespace: invalid value 'a/b'" in run.stderr
    assert set(run.json()["jobs"]) == {"research/ok"}  # type: ignore[arg-type]


def test_a_queue_object_with_escapes_in_its_name_never_reaches_the_terminal_raw(tmp_path: Path) -> None:
    # YAML's own escapes (\\e, \\n) put an ESC and a newline into the name; a raw ESC is not valid YAML.
    cq = '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: "\\e[2Jx\\nforged"}\n'
    run = simulate(tmp_path, BASE + cq + job("ok"))
    assert ESC not in run.stderr
    line = next(x for x in run.stderr.splitlines() if "ClusterQueue" in x and "metadata.name" in x)
    assert "\\x1b[2Jx\\nforged" in line


def test_the_table_escapes_non_printable_characters_in_every_cell() -> None:
    # Defence in depth: a name or message that got past validation (a future adapter, an old log) is escaped.
    bad = f"research/a{ESC}[31m\nforged"
    result = SimResult(end=0, jobs={bad: JobOutcome(key=bad, cluster_queue="q\u202eevil")})
    table = to_table(result)
    assert ESC not in table and "\u202e" not in table
    assert "research/a\\x1b[31m\\nforged" in table and "q\\u202eevil" in table
    assert len(table.splitlines()) == 1 + 1 + 3  # header, one row, blank line and two summary lines
