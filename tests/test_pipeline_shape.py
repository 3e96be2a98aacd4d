"""The tuning pipeline stays readable in pieces: no function in ``registry/pipeline/`` runs over 60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PIPELINE = Path(__file__).resolve().parent.parent / "registry" / "pipeline"
MAX_LINES = 60


def long_functions(path: Path, limit: int = MAX_LINES) -> list[str]:
    """``file:line name (N lines)`` for each function (nested ones and methods included) longer than ``limit``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_the_pipeline_is_over_60_lines():
    files = sorted(PIPELINE.glob("*.py"))
    assert files, f"no modules found under {PIPELINE}"
    found = [f for path in files for f in long_functions(path)]
    assert not found, f"functions over {MAX_LINES} lines (split them into one-job steps):\n" + "\n".join(found)


def test_the_check_catches_a_long_function(tmp_path):
    """The check itself: a 61-line function is reported, a 60-line one is not."""
    body = "".join(f"    x{i} = {i}\n" for i in range(59))
    (tmp_path / "long.py").write_text(f"def long():\n{body}    return 0\n", encoding="utf-8")
    (tmp_path / "fits.py").write_text(f"def fits():\n{body}", encoding="utf-8")
    assert long_functions(tmp_path / "long.py") == ["long.py:1 long (61 lines)"]
    assert long_functions(tmp_path / "fits.py") == []
