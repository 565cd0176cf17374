"""Numbers that become SQLite INTEGERs: durations, quantities, counts and priorities in a scenario are bounded, and
a value out of range is one clear line naming the object, the field and the bound, while the rest runs.

Real: `admitd simulate` run in-process (`daemon.cli.main`), the YAML loader, the fold, the engine, the SQLite log.
Faked: the cluster (the simulator's virtual clock).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.manifests.durations import DurationError, parse_duration
from tests.integration.inprocess import admitd
from tests.integration.scenario_text import BASE, job


def simulate(tmp_path: Path, text: str, *extra: str) -> tuple[dict[str, dict[str, object]], str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    run = admitd("simulate", str(path), "--json", *extra)
    assert run.crash is None, run.crash
    assert run.status == 0, run.stderr
    jobs = run.json()["jobs"]
    assert isinstance(jobs, dict)
    return jobs, run.stderr


@pytest.mark.parametrize("annotation", ["runtime", "submit-at"])
@pytest.mark.parametrize(
    "value",
    [
        "9223372036854775808ms",  # 2**63 ms: overflowed SQLite INTEGER inside the writer, which then hung
        "2562047h47m16.854775808s",  # one nanosecond past Go's longest duration
        "1" + "0" * 5000 + "h",  # too long to be a duration at all (and past Python's int-conversion limit)
    ],
)
def test_a_duration_past_gos_maximum_is_rejected_and_the_rest_runs(tmp_path: Path, annotation: str, value: str) -> None:
    kw = {"runtime": value} if annotation == "runtime" else {"submit_at": value}
    jobs, stderr = simulate(tmp_path, BASE + job("forever", **kw) + job("ok"))
    assert f"Job research/forever: metadata.annotations[simulate.admitd.io/{annotation}]" in stderr
    assert "Go duration" in stderr
    assert "research/forever" not in jobs
    assert jobs["research/ok"]["admitted_at"] == [0]


def test_gos_longest_duration_is_accepted_and_fits_the_log(tmp_path: Path) -> None:
    jobs, _ = simulate(tmp_path, BASE + job("long", runtime="2562047h47m16.854775807s"), "--db", str(tmp_path / "l.db"))
    # Rounded up to the millisecond: 9,223,372,036,855 ms, written to and read back from the log.
    assert jobs["research/long"]["finished_at"] == 9_223_372_036.855


def test_until_past_gos_maximum_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE, encoding="utf-8")
    run = admitd("simulate", str(path), "--until", "9223372036854775808ms")
    assert run.crash is None, run.crash
    assert run.status == 2
    assert "--until" in run.stderr and "Go duration" in run.stderr


def test_parse_duration_bounds() -> None:
    assert parse_duration("2562047h47m16.854775807s") == 9_223_372_036_855
    with pytest.raises(DurationError, match="longest Go duration"):
        parse_duration("2562048h")


def test_a_quota_past_int64_milli_units_names_the_field(tmp_path: Path) -> None:
    text = BASE.replace("nominalQuota: 8}", 'nominalQuota: "9223372036854775808"}') + job("a")
    jobs, stderr = simulate(tmp_path, text)
    assert "ClusterQueue team: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: too large" in stderr, stderr
    assert "64-bit" in stderr
    assert jobs["research/a"]["pending_reason"] == "ClusterQueueNotFound: ClusterQueue team doesn't exist"


def test_a_request_past_int64_milli_units_names_the_field(tmp_path: Path) -> None:
    jobs, stderr = simulate(tmp_path, BASE + job("huge", gpus="1e30") + job("ok"))
    assert "Job research/huge: spec.template.spec.containers[0].resources.requests[nvidia.com/gpu]" in stderr
    assert "too large" in stderr
    assert "research/huge" not in jobs
    assert jobs["research/ok"]["admitted_at"] == [0]


def test_pods_times_request_past_int64_is_rejected(tmp_path: Path) -> None:
    # Each value alone is valid; the admission would hold 2,147,483,647 x 8e9 GPUs, past int64 milli-units.
    jobs, stderr = simulate(tmp_path, BASE + job("gang", gpus="8e9", parallelism=2_147_483_647) + job("ok"))
    assert "Job research/gang: spec.parallelism: 2147483647 pods x" in stderr
    assert "research/gang" not in jobs
    assert jobs["research/ok"]["admitted_at"] == [0]


def test_a_priority_outside_int32_is_rejected(tmp_path: Path) -> None:
    wpc = "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: top}\n"
    wpc += "value: 2147483648\n"
    _, stderr = simulate(tmp_path, BASE + wpc + job("ok"))
    assert "WorkloadPriorityClass top: value: must be at most 2147483647 (got 2147483648)" in stderr


def test_an_integer_too_long_to_convert_is_a_yaml_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: " + "1" * 5000 + "}\n")
    run = admitd("simulate", str(path), "--json")
    assert run.crash is None, run.crash
    assert run.status == 2
    assert "integer too long (5000 characters)" in run.stderr
    assert len(run.stderr) < 500
