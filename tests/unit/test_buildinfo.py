"""daemon.buildinfo: the version from the package's metadata, the commit baked in by scripts/build-image or read
from git, and `admitd --version` printing them."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from daemon import buildinfo, metrics

REPO = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "one")
    return repo


def test_a_baked_commit_file_wins_over_git(tmp_path: Path, checkout: Path) -> None:
    baked = tmp_path / "BUILD_COMMIT"
    baked.write_text("0123abcd-dirty\n")
    assert buildinfo.source_commit(baked, checkout) == "0123abcd-dirty"


def test_a_checkout_gives_its_head_and_dirty_when_a_tracked_file_changed(tmp_path: Path, checkout: Path) -> None:
    absent = tmp_path / "no-such-file"
    head = _git(checkout, "rev-parse", "HEAD")
    assert buildinfo.source_commit(absent, checkout) == head
    (checkout / "untracked.py").write_text("")  # untracked files do not make it dirty
    assert buildinfo.source_commit(absent, checkout) == head
    (checkout / "a.py").write_text("x = 2\n")
    assert buildinfo.source_commit(absent, checkout) == f"{head}-dirty"


def test_neither_a_file_nor_a_checkout_is_unknown(tmp_path: Path) -> None:
    assert buildinfo.source_commit(tmp_path / "absent", tmp_path) == buildinfo.UNKNOWN
    empty = tmp_path / "empty"
    empty.write_text("\n")  # an empty file is no commit
    assert buildinfo.source_commit(empty, tmp_path) == buildinfo.UNKNOWN


def test_admitd_version_prints_the_package_version_and_this_checkouts_commit() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "--version"], capture_output=True, text=True, check=False, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    head = _git(REPO, "rev-parse", "HEAD")
    line = out.stdout.strip()
    assert line.startswith(f"admitd {metadata.version('admitd')} (commit {head}"), line
    assert line.endswith(f", Python {sys.version.split()[0]})"), line


def test_the_build_info_gauge_carries_the_three_labels() -> None:
    info = buildinfo.BuildInfo(version="9.9.9", commit="feedface", python="3.11.2")
    metrics.build_info_is(info)
    try:
        labels = {"version": "9.9.9", "commit": "feedface", "python": "3.11.2"}
        assert metrics.LIVE.get_sample_value("admitd_build_info", labels) == 1.0
        (kueue,) = [s for m in metrics.LIVE.collect() if m.name == "kueue_build_info" for s in m.samples]
        assert (kueue.labels["git_version"], kueue.labels["git_commit"], kueue.labels["go_version"]) == (
            "9.9.9",
            "feedface",
            "3.11.2",
        )
    finally:
        metrics.live.BUILD_INFO.remove("9.9.9", "feedface", "3.11.2")  # the registry is the process's
        metrics.live.KUEUE_BUILD_INFO.clear()
    assert {"admitd_build_info", "kueue_build_info", "process_cpu_seconds_total"} <= metrics.metric_names()
