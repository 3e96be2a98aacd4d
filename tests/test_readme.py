"""The README runs as written: every ```sh block, in order, as a user pastes them into a fresh clone after
`make demo` (here: a temporary folder with this checkout's venv, and a temporary registry).

A block fenced ```sh no-test is skipped; only long `make` targets (the test suite itself, the corpus, benchmarks) may
be. `make` runs this checkout's Makefile without reinstalling, and the demo tunes DEMO_TRIALS trials instead of 32.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
DEMO_TRIALS = "8"
# What a no-test block may hold: make targets that take minutes or hours, optionally after VAR=value.
LONG_TARGETS = {"test", "corpus", "lint", "bench", "bench-tuning", "bench-gpu", "bench-corpus", "bench-isolation"}


def blocks(text: str) -> list[tuple[list[str], str]]:
    """(the fence's info words, the body) of every fenced block."""
    return [(m.group(1).split(), m.group(2)) for m in FENCE.finditer(text)]


def shell_blocks(text: str) -> tuple[list[str], list[str]]:
    """(blocks to run, blocks marked no-test)."""
    run, skipped = [], []
    for info, body in blocks(text):
        if info[:1] == ["sh"]:
            (skipped if "no-test" in info[1:] else run).append(body)
    return run, skipped


def commands(block: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_only_long_make_targets_are_skipped():
    run, skipped = shell_blocks(README.read_text())
    assert run, "the README has no ```sh block"
    for block in skipped:
        for command in commands(block):
            words = [w for w in command.split() if not re.match(r"^[A-Z_]+=", w)]
            assert words[:1] == ["make"] and set(words[1:]) <= LONG_TARGETS, f"no-test block runs {command!r}"


def test_commands_are_one_per_line():
    """`registry index status / registry index rebuild` on one line is not a command."""
    run, _ = shell_blocks(README.read_text())
    for block in run:
        for command in commands(block):
            assert " / registry" not in command, command


def test_python_blocks_parse_and_use_the_public_api():
    """The Python snippets are not run (they tune for minutes); they must parse, and name only what `registry`
    exports (tests/test_api.py runs the same calls on a tiny model)."""
    import ast

    import registry

    pythons = [body for info, body in blocks(README.read_text()) if info[:1] == ["python"]]
    assert pythons
    for body in pythons:
        tree = ast.parse(body)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "registry":
                assert node.attr in registry.__all__, f"README uses registry.{node.attr}: not exported"


@pytest.mark.tvm
def test_readme_shell_blocks_run(tmp_path):
    """All blocks in one shell session, as pasted into one terminal: the README's own `. .venv/bin/activate` puts
    `registry` on the PATH."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "registry").exists():
        pytest.skip(f"the tests run outside a venv with the registry installed ({venv})")
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(venv)
    drop = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TVM_NUM_THREADS", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    bin_dir = str(venv / "bin")  # pytest's own venv must not be on the PATH before the README activates it
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if d != bin_dir)
    env.update(
        REGISTRY_HOME=str(tmp_path / "home"),
        REGISTRY_DATABASE_URL=f"sqlite:///{tmp_path / 'registry.db'}",
        DEMO_TRIALS=DEMO_TRIALS,
        README_MAKEFILE=str(REPO / "Makefile"),
        README_VENV=str(venv),
    )
    # This checkout's Makefile and venv, which make must not rebuild (-o: the venv counts as installed).
    script = ['make() { command make -f "$README_MAKEFILE" -o "$README_VENV/.installed" VENV="$README_VENV" "$@"; }']
    run, _ = shell_blocks(README.read_text())
    for i, block in enumerate(run, 1):
        script += [f"echo '### README block {i} of {len(run)}' >&2", block]
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", "\n".join(script)],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        markers = re.findall(r"### README block (\d+) of", proc.stderr)
        failed = int(markers[-1]) if markers else 1
        pytest.fail(
            f"README sh block {failed} of {len(run)} failed (exit {proc.returncode}):\n{run[failed - 1]}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
