"""Which build of admitd this is: `admitd --version` and the `admitd_build_info` metric.

The version is the installed package's (its metadata, from pyproject.toml). The source commit is, in this order:
the `COMMIT_FILE` that scripts/build-image writes beside this module in the image (the commit of the tree it was
built from, with "-dirty" when that tree had changes not committed); else, run from a git checkout (an editable
install, `python -m daemon.cli`), git's HEAD of that checkout, with "-dirty" when a tracked file differs from it;
else "unknown" (e.g. a wheel installed with pip, which carries no commit).
"""

from __future__ import annotations

import functools
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "admitd"
COMMIT_FILE = Path(__file__).with_name("BUILD_COMMIT")
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class BuildInfo:
    version: str
    commit: str
    python: str

    def line(self) -> str:
        """What `admitd --version` prints."""
        return f"admitd {self.version} (commit {self.commit}, Python {self.python})"


def package_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a checkout without installing it
        return UNKNOWN


def _git(checkout: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, check=False, timeout=10
        )
    except (OSError, subprocess.SubprocessError):  # no git on PATH, or it hung
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def source_commit(commit_file: Path = COMMIT_FILE, checkout: Path | None = None) -> str:
    try:
        baked = commit_file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        baked = ""
    if baked:
        return baked
    checkout = checkout or Path(__file__).resolve().parent.parent
    if not (checkout / ".git").exists():  # a directory, or a worktree's file pointing at one
        return UNKNOWN
    head = _git(checkout, "rev-parse", "--verify", "HEAD")
    if not head:
        return UNKNOWN
    changed = _git(checkout, "status", "--porcelain", "--untracked-files=no")
    return f"{head}-dirty" if changed else head


@functools.cache
def build_info() -> BuildInfo:
    return BuildInfo(version=package_version(), commit=source_commit(), python=platform.python_version())
