"""No file of the repository names the sibling directory `shared` that only our own machines have.

A fresh clone (CI, a new contributor) has nothing beside it, so a test or script that reads the sibling fails there
and passes here. Every file git tracks or would track (untracked but not ignored) is read as bytes, whatever its
kind (code, YAML, docs, scripts); nothing is excluded but `.git`, which `git ls-files` never lists. Two spellings
are caught: the relative path itself, and a Python path built from the repository's parent.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIBLING = "shared"
# The relative path with either separator; `X.parent / "..."` or `X.parents[1] / '...'` naming the sibling (the form
# test_daemon.py used until a8077a8).
FORBIDDEN = re.compile(
    rb"\.\.[/\\]" + SIBLING.encode() + rb"\b"
    rb"|\.parents?(?:\[\d+\])?\s*/\s*[\"']" + SIBLING.encode() + rb"[\"'/]"
)


def repository_files(root: Path) -> list[Path]:
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    return [root / name for name in out.decode().split("\0") if name]


def offenders(root: Path) -> list[str]:
    found = []
    for path in repository_files(root):
        if not path.is_file():  # a tracked file deleted in the work tree, or a submodule's directory
            continue
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.decode(errors='replace').strip()}")
    return found


def test_no_file_of_the_repository_names_the_sibling_shared_directory() -> None:
    files = repository_files(REPO)
    assert REPO / "README.md" in files and REPO / "tests" / "integration" / "test_daemon.py" in files
    assert offenders(REPO) == []


def test_the_guard_finds_each_spelling_in_any_kind_of_file(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    up = ".." + "/" + SIBLING  # spelled apart, so that this file does not name it
    samples = {
        "tests/test_a.py": f'SEED = REPO.parent / "{SIBLING}" / "seed"\n',
        "tests/test_b.py": f"x = ROOT.parents[1] / '{SIBLING}'\n",
        "scripts/run.sh": f"cat {up}/seed/*.txt\n",
        "docs/notes.md": f"see {up}\\reference\n",
        "config/x.yaml": f"path: {up}/seed\n",
    }
    for name, text in samples.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "fine.py").write_text('cohort = "shared"\nREPO / "shared.db"\n# a shared disk\n')
    found = offenders(tmp_path)
    assert sorted(line.split(":")[0] for line in found) == sorted(samples), found
