"""What a source file imports, read from its syntax tree (no import runs): for the tests that hold the layout."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
# Package -> its folder in the repository, as pyproject.toml maps them (cli/ is installed as registry.cli, migrations/
# as registry.store.migrations); longest package first, so a mapped subpackage wins over its parent's folder.
FOLDERS = dict(
    sorted(
        {"registry": ROOT / "registry", **{p: ROOT / d for p, d in SETUPTOOLS["package-dir"].items()}}.items(),
        key=lambda item: -len(item[0]),
    )
)


def source_files() -> Iterator[Path]:
    """Every .py file of the installed package, wherever it lies in the repository."""
    for folder in FOLDERS.values():
        yield from sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    """The dotted name ``path`` (under the repository) is imported as."""
    for package, folder in FOLDERS.items():
        if folder == path.parent or folder in path.parents:
            parts = [*package.split("."), *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise ValueError(f"{path} is in no package folder of pyproject.toml")


def source_of(module: str) -> Path | None:
    """The file that ``module`` is imported from, or None."""
    for package, folder in FOLDERS.items():
        if module == package or module.startswith(package + "."):
            base = folder.joinpath(*module[len(package) :].lstrip(".").split(".")) if module != package else folder
            return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    return None


def imported(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module name an import statement in ``source`` names, relative imports resolved against ``module``; for
    ``from a import b`` both ``a`` and ``a.b`` (b may be a module or a name in a)."""
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)  # `from registry.store import queries`
    return names
