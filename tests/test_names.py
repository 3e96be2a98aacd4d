"""One name, one meaning: no two classes of the package share a name (docs/ARCHITECTURE.md, "Glossary")."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def class_names(root: Path, *folders: str) -> dict[str, list[str]]:
    """Each class name defined in these folders' modules (nested classes too), with the modules that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    found[node.name].append(str(path.relative_to(root)))
    return found


def test_no_class_name_is_used_twice() -> None:
    twice = {name: where for name, where in class_names(ROOT, "registry", "cli").items() if len(where) > 1}
    assert twice == {}


def test_the_check_sees_a_name_used_twice(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("class Task:\n    pass\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    class Task:\n        pass\n")
    assert class_names(tmp_path, "pkg")["Task"] == ["pkg/a.py", "pkg/b.py"]
