"""The layout holds (docs/ARCHITECTURE.md): every import points down the layers, no two files import each other
through any chain, registry/ keeps few loose modules, and no folder holds more than a quarter of the code. No TVM here:
imports are read from the source, never run."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

from tests.imports import ROOT, imported, module_name, source_files, source_of

# Top to bottom. A module may import its own folder and the layers below it; folders on one line are siblings, which
# import neither each other nor anything above. registry.store includes its migrations.
LAYERS = [
    ("registry.cli",),
    ("registry.server",),
    ("registry.api",),
    ("registry.pipeline", "registry.share"),
    ("registry.records",),
    ("registry.measure",),
    ("registry.tvm_side",),
    ("registry.report", "registry.similarity"),
    ("registry.store",),
]
# Helpers any layer may use; they import nothing of the registry but each other.
BASE = {
    "registry.config",
    "registry.errors",
    "registry.hostinfo",
    "registry.options",
    "registry.perf",
    "registry.schemas",
    "registry.verbosity",
}
# The package's front (re-exports the API) and the tests' helper: they may import anything, and nothing imports them.
FRONT = {"registry", "registry.testing"}
MAX_LOOSE = 4  # modules directly in registry/ besides __init__, api, config, errors, options and schemas
MAX_SHARE = 0.25  # of all lines, in one folder (its own files; a subfolder is a folder of its own)


def _modules() -> dict[str, object]:
    return {module_name(p): p for p in source_files()}


def _edges(modules: dict) -> dict[str, set[str]]:
    """Module -> the registry modules it imports (a name imported from a module counts as that module)."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for n in imported(path.read_text(), name, path.name == "__init__.py"):
            while n and n not in modules:
                n = n.rpartition(".")[0]
            if n.startswith("registry") and n != name and n != "registry":
                found.add(n)
        edges[name] = found
    return edges


def _layer(module: str) -> tuple[int, str] | None:
    """(layer index, folder) of a module; None for BASE and FRONT."""
    if module in BASE or module in FRONT:
        return None
    for i, folders in enumerate(LAYERS):
        for folder in folders:
            if module == folder or module.startswith(folder + "."):
                return i, folder
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS (and to docs/ARCHITECTURE.md)")


def test_every_import_points_down_the_layers():
    wrong = []
    for a, targets in _edges(_modules()).items():
        for b in sorted(targets):
            if b in FRONT:
                wrong.append(f"{a} -> {b}: nothing imports the front")
            elif a in BASE and b not in BASE:
                wrong.append(f"{a} -> {b}: a base helper imports only base helpers")
            elif (la := _layer(a)) and (lb := _layer(b)) and la[1] != lb[1] and la[0] >= lb[0]:
                wrong.append(f"{a} -> {b}: {'sideways' if la[0] == lb[0] else 'up'}")
    assert wrong == [], "\n".join(wrong)


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return circles


def test_no_two_files_import_each_other_through_any_chain():
    assert _circles(_edges(_modules())) == []


def test_no_two_benchmark_scripts_import_each_other():
    """bench/ is not the package, but a circle there is as hard to follow (imports under TYPE_CHECKING count)."""
    paths = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in sorted(ROOT.glob("bench/**/*.py"))}
    edges = {}
    for name, path in paths.items():
        name = name.removesuffix(".__init__")
        edges[name] = {n for n in imported(path.read_text(), name) if n in paths and n != name}
    assert _circles(edges) == []


def test_registry_keeps_few_loose_modules():
    loose = sorted(p.stem for p in (ROOT / "registry").glob("*.py"))
    assert len(set(loose) - {"__init__", "api", "config", "errors", "options", "schemas"}) <= MAX_LOOSE, loose


def test_no_folder_holds_more_than_a_quarter_of_the_code():
    lines: collections.Counter = collections.Counter()
    for path in _modules().values():
        lines[str(path.parent.relative_to(ROOT))] += len(path.read_text().splitlines())
    folder, most = lines.most_common(1)[0]
    assert most <= MAX_SHARE * sum(lines.values()), (folder, most, sum(lines.values()))


def test_the_check_sees_an_arrow_that_runs_up():
    """The rule itself, on made-up edges: a store module importing the pipeline is refused."""
    assert _layer("registry.store.sql.ingest")[0] > _layer("registry.pipeline.tune")[0]
    assert _layer("registry.share.sync")[0] == _layer("registry.pipeline.tune")[0]  # siblings: neither way


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def test_benchmarks_and_tests_import_what_the_package_has():
    """A file moved in the package breaks the scripts that still name its old place; bench/ runs in no test, so its
    imports are checked here, read from the source."""
    broken = []
    for path in sorted([*ROOT.glob("bench/**/*.py"), *ROOT.glob("tests/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "registry"):
                continue
            source = source_of(node.module)
            if source is None:
                broken.append(f"{path.relative_to(ROOT)}: {node.module}")
                continue
            defined = _top_level_names(source)
            for alias in node.names:
                if alias.name not in defined and source_of(f"{node.module}.{alias.name}") is None:
                    broken.append(f"{path.relative_to(ROOT)}: {node.module}.{alias.name}")
    assert not broken, broken
