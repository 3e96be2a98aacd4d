"""What pyproject.toml declares: every package ships, every dependency is used, py.typed is package data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]

# Import names of the distributions whose name differs.
IMPORT_NAMES = {
    "apache-tvm": "tvm",
    "apache-tvm-ffi": "tvm_ffi",
    "faiss-cpu": "faiss",
    "xgboost-cpu": "xgboost",
    "sqlalchemy": "sqlalchemy",
}
# Declared for another package that needs them and does not declare them, or used where no import shows it.
INDIRECT = {
    "cloudpickle": "TVM's popen and RPC pools (tvm/support/popen_pool.py)",
    "tornado": "TVM's RPC tracker and servers (tvm/rpc/tracker.py)",
    "psutil": "MetaSchedule (tvm/s_tir/meta_schedule/utils.py)",
    "pydantic": "the CLI's JSON output models (issue 13, item 1)",
}


def _dist(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()


def test_every_source_folder_is_a_package_that_ships():
    """Packages are found, not listed: every folder of code under registry/ must be a regular package (its
    __init__.py, whose docstring says what lives there), and the one include pattern must cover it."""
    assert SETUPTOOLS["packages"]["find"]["include"] == ["registry*"] and "package-dir" not in SETUPTOOLS
    folders = {py.parent for py in (REPO / "registry").rglob("*.py") if "__pycache__" not in py.parts}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_py_typed_is_shipped():
    assert (REPO / "registry" / "py.typed").is_file()
    assert "py.typed" in SETUPTOOLS["package-data"]["registry"]


def test_every_dependency_is_used():
    sources = "\n".join(p.read_text() for p in (REPO / "registry").rglob("*.py"))
    unused = []
    for requirement in PYPROJECT["project"]["dependencies"]:
        dist = _dist(requirement)
        if dist in INDIRECT:
            continue
        module = IMPORT_NAMES.get(dist, dist.replace("-", "_"))
        if not re.search(rf"^\s*(import|from) {module}\b", sources, re.MULTILINE):
            unused.append(dist)
    assert not unused, f"declared but never imported: {unused}"


def test_no_gpu_xgboost_on_linux():
    """`xgboost` pulls 474 MB of NCCL GPU libraries on Linux; only macOS (no xgboost-cpu wheels, no NCCL) gets it."""
    for requirement in PYPROJECT["project"]["dependencies"]:
        dist, _, marker = requirement.partition(";")
        if _dist(dist) == "xgboost":
            assert "platform_system == 'Darwin'" in marker, requirement
