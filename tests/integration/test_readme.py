"""README.md's shell commands, run as a newcomer runs them: every ```sh block, in order, in a fresh directory.

The directory is a copy of the checkout's files (the tracked ones and the new ones git does not ignore, so the
README is tried against the working tree being tested), with `.venv` linked to this checkout's (scripts/bootstrap
then finds it up to date: installing the lock again would cost minutes and the network, and is what CI's own
bootstrap already does). The blocks run one after the other in that one directory, each with `bash -euo pipefail`,
so a block may use what an earlier one made, as a reader following the README would; then all of them once more in
the same directory, as a reader trying an example again does.

What the README marks, in an HTML comment on the line before a block (invisible when rendered):

- `<!-- readme-test: skip: REASON -->`: not run (it needs a cluster, root, systemd, a registry); REASON is required.
- `<!-- readme-test: except "COMMAND": REASON -->`: run without the lines starting with COMMAND (the Setup block's
  `./scripts/check`, which is the suite running this test).

A ```text block right after a ```sh block is the output the README shows for it: the block's stdout must match
it, line by line, trailing spaces aside; a line `...` stands for any lines (none included), and `...` within a line
for any text (a temporary path). A block whose command fails, or whose output differs, fails this test, naming the
README line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK_TIMEOUT_S = 120

_FENCE = re.compile(r"^```(\S*)\s*$")
_DIRECTIVE = re.compile(r"^<!-- readme-test: (.*) -->$")
_SKIP = re.compile(r"^skip: (\S.*)$")
_EXCEPT = re.compile(r'^except "([^"]+)": (\S.*)$')


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    directive: str | None


@dataclass(frozen=True)
class Command:
    line: int
    script: str
    expected: str | None  # the ```text block after it
    skip: str | None  # the reason, when not run


def blocks(markdown: str) -> list[Block]:
    lines = markdown.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"README.md:{start + 1}: a fenced block is never closed")
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        d = _DIRECTIVE.match(lines[prev]) if prev >= 0 else None
        out.append(Block(start + 1, m.group(1), "\n".join(body) + "\n", d.group(1) if d else None))
        i += 1
    return out


def commands(markdown: str) -> list[Command]:
    found = blocks(markdown)
    out: list[Command] = []
    for n, b in enumerate(found):
        if b.lang != "sh":
            if b.directive is not None:
                raise AssertionError(f"README.md:{b.line}: a readme-test directive on a ```{b.lang} block")
            continue
        after = found[n + 1] if n + 1 < len(found) else None
        expected = after.text if after is not None and after.lang == "text" else None
        script, skip = b.text, None
        if b.directive is not None:
            if (m := _SKIP.match(b.directive)) is not None:
                skip = m.group(1)
            elif (m := _EXCEPT.match(b.directive)) is not None:
                kept = [ln for ln in b.text.splitlines() if not ln.lstrip().startswith(m.group(1))]
                if len(kept) == len(b.text.splitlines()):
                    raise AssertionError(f"README.md:{b.line}: no line starts with {m.group(1)!r}")
                script = "\n".join(kept) + "\n"
            else:
                raise AssertionError(f"README.md:{b.line}: unknown readme-test directive {b.directive!r}")
        out.append(Command(b.line, script, expected, skip))
    return out


def _line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")) + r"\Z")


def output_matches(expected: str, actual: str) -> bool:
    """`actual` against the README's shown output: `...` alone on a line is any lines, within a line any text."""
    want = [ln.rstrip() for ln in expected.rstrip("\n").splitlines()]
    got = [ln.rstrip() for ln in actual.rstrip("\n").splitlines()]

    def match(w: int, g: int) -> bool:
        if w == len(want):
            return g == len(got)
        if want[w] == "...":
            return any(match(w + 1, k) for k in range(g, len(got) + 1))
        return g < len(got) and _line_pattern(want[w]).match(got[g]) is not None and match(w + 1, g + 1)

    return match(0, 0)


def _fresh_copy(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        rel = Path(os.fsdecode(raw))
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree, not yet in the index
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, target)
    (dest / ".venv").symlink_to(ROOT / ".venv")


# --- the harness itself, on made-up READMEs ----------------------------------------------------------------------


def test_blocks_directives_and_shown_output_are_read_as_the_docstring_says() -> None:
    md = "\n".join(
        [
            "```",
            "admitd simulate SCENARIO",  # a synopsis: not run
            "```",
            "<!-- readme-test: skip: needs a cluster -->",
            "```sh",
            "kubectl get nodes",
            "```",
            '<!-- readme-test: except "./scripts/check": it runs this test -->',
            "",
            "```sh",
            "echo one",
            "./scripts/check",
            "```",
            "```text",
            "one",
            "```",
        ]
    )
    assert commands(md) == [
        Command(5, "kubectl get nodes\n", None, "needs a cluster"),
        Command(10, "echo one\n", "one\n", None),
    ]
    with pytest.raises(AssertionError, match=r"README\.md:2: unknown readme-test directive"):
        commands("<!-- readme-test: maybe -->\n```sh\ntrue\n```\n")
    with pytest.raises(AssertionError, match="never closed"):
        commands("```sh\ntrue\n")


def test_shown_output_with_ellipses() -> None:
    assert output_matches("a\n...\nd\n", "a\nb\nc\nd\n")
    assert output_matches("a\n...\nb\n", "a\nb\n")
    assert output_matches("on /tmp/.../x.db: 5 jobs  \n", "on /tmp/tmp.Ab3/x.db: 5 jobs\n")
    assert not output_matches("a\nb\n", "a\nc\n")
    assert not output_matches("a\n", "a\nb\n")
    assert not output_matches("a (b)\n", "a xbx\n")


# --- the README ----------------------------------------------------------------------------------------------------


def test_every_sh_block_of_the_readme_runs_in_a_fresh_directory_and_shows_what_it_says(tmp_path: Path) -> None:
    found = commands(README.read_text(encoding="utf-8"))
    runnable = [c for c in found if c.skip is None]
    assert len(runnable) >= 3, "the README's runnable examples were not found"
    assert any(c.expected is not None for c in runnable)
    work = tmp_path / "admitd"
    work.mkdir()
    _fresh_copy(work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "STATE_DIRECTORY", "PYTEST"))}
    env["HOME"] = str(tmp_path / "home")
    env["TMPDIR"] = str(tmp_path / "tmp")
    Path(env["TMPDIR"]).mkdir()
    # Twice in the same directory: a reader tries an example again, and it must not trip over what the first
    # run left (a log file named twice is refused: "already exists").
    for cmd in runnable + runnable:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", cmd.script],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )
        where = f"README.md:{cmd.line}"
        assert done.returncode == 0, f"{where}: exit status {done.returncode}\n{cmd.script}\n{done.stderr}"
        if cmd.expected is not None:
            assert output_matches(cmd.expected, done.stdout), (
                f"{where}: the output differs from the README's\n--- README\n{cmd.expected}--- got\n{done.stdout}"
            )
