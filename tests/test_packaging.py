"""What pyproject.toml declares: every package ships, every dependency is used, py.typed is package data."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.imports import module_name, source_files

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


def test_the_top_level_is_the_design_cards():
    """The design card names the top level: the click commands and the Alembic folder sit beside the package."""
    for name in ("registry", "migrations", "cli", "tests"):
        assert (REPO / name).is_dir(), name
    for name in ("alembic.ini", "pyproject.toml"):
        assert (REPO / name).is_file(), name
    assert "%(here)s/migrations" in (REPO / "alembic.ini").read_text()
    assert not (REPO / "registry" / "cli").exists() and not (REPO / "registry" / "store" / "migrations").exists()


def test_every_source_folder_is_a_declared_package():
    """Packages are listed (find() cannot follow package-dir): every folder of code under registry/, cli/ and
    migrations/ is a regular package (its __init__.py says what lives there) that the list declares, and every
    declared package is a folder that exists."""
    folders = {py.parent for py in source_files()}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []
    assert sorted(module_name(f / "__init__.py") for f in folders) == sorted(SETUPTOOLS["packages"])
    assert SETUPTOOLS["package-dir"] == {"registry.cli": "cli", "registry.store.migrations": "migrations"}


@pytest.mark.tvm
def test_a_wheel_installed_outside_the_checkout_runs_and_migrates(tmp_path):
    """The wheel built from the checkout, installed into a fresh venv, run from elsewhere: its CLI starts, creates a
    registry, and upgrades an older one with the migrations the wheel carries. The venv borrows this one's
    dependencies (a .pth line; TVM is 300 MB) but not its editable install of the package."""
    src = tmp_path / "src"
    for name in ("registry", "cli", "migrations"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", src], check=True)
    wheel = next((tmp_path / "dist").glob("tvm_registry-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    for member in (
        "registry/cli/main.py",
        "registry/store/migrations/env.py",
        "registry/store/migrations/script.py.mako",
        "registry/store/migrations/versions/0001_initial_schema.py",
        "registry/share/bundles/starter.bundle",
    ):
        assert member in names, member

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([*pip, "--python", python, "install", "--no-deps", wheel], check=True)

    run = functools.partial(subprocess.run, cwd=tmp_path, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    where = run([python, "-c", "import registry.cli, registry.store.migrations as m; print(m.__file__)"])
    assert where.returncode == 0 and where.stdout.startswith(site), (where.stdout, where.stderr)
    exe = str(venv / "bin" / "registry")
    assert "transfer" in run([exe, "--help"]).stdout
    made = run([exe, "--db", "new.db", "db", "upgrade"])
    assert made.returncode == 0 and (tmp_path / "new.db").is_file(), made.stderr
    older = (
        "from alembic import command; from registry.store.sql import engine, migrate; "
        "command.upgrade(migrate.alembic_config(engine.create('sqlite:///old.db')), '0001')"
    )
    assert run([python, "-c", older]).returncode == 0
    assert "registry db upgrade" in run([exe, "--db", "old.db", "stats"]).stderr
    upgraded = run([exe, "--db", "old.db", "db", "upgrade"])
    assert upgraded.returncode == 0 and "0001 -> " in upgraded.stdout, (upgraded.stdout, upgraded.stderr)
    assert run([exe, "--db", "old.db", "stats"]).returncode == 0


def test_py_typed_is_shipped():
    assert (REPO / "registry" / "py.typed").is_file()
    assert "py.typed" in SETUPTOOLS["package-data"]["registry"]


def test_every_dependency_is_used():
    sources = "\n".join(p.read_text() for p in source_files())
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
