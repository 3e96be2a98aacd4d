"""Bad input of every kind, on SQLite and on PostgreSQL: logs, ONNX files, command lines, database URLs and files.

Every case runs the real CLI and asserts the standard: the exit code (1, or 2 for a command line that does not
parse), exactly one line on stderr, "Error: ...", naming the problem, no traceback, and the rows of the database the
command was pointed at unchanged (for a file that is not a registry: its bytes, and nothing new beside it).
"""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from registry import testing
from registry.cli.main import cli
from registry.store.sql.revision import VERSION_TABLE
from registry.store.sql.store import Store
from registry.tvm_side import tvmlog, zoo
from tests.rows import rows_of


@dataclass(frozen=True)
class Env:
    tmp: Path
    db_url: str  # the suite's registry, with some records in it
    logs: Path  # good MetaSchedule logs, to break


@dataclass(frozen=True)
class Case:
    """``setup(env)`` makes what the case needs and returns the command line (after ``--db URL``), and the URL when
    the command is pointed at another database than the suite's."""

    setup: Callable[[Env], tuple[list[str], str | None]]
    fragment: str
    code: int = 1
    watch_suite_db: bool = False  # the URL given is no database at all: the suite's must stay as it was
    env: tuple[tuple[str, str], ...] = ()  # environment variables the command runs with


def _on_suite_db(args: Callable[[Env], list[str]]) -> Callable[[Env], tuple[list[str], str | None]]:
    return lambda env: (args(env), None)


# -- logs ---------------------------------------------------------------------------------------------------------


def _log(edit_records=None, edit_workloads=None) -> Callable[[Env], tuple[list[str], str | None]]:
    """``registry import`` of the good logs with their record lines (or workload lines) edited."""

    def setup(env: Env) -> tuple[list[str], str | None]:
        bad = env.tmp / "bad_log"
        shutil.copytree(env.logs, bad)
        for name, edit in ((tvmlog.RECORD_FILE, edit_records), (tvmlog.WORKLOAD_FILE, edit_workloads)):
            if edit is not None:
                lines = (bad / name).read_text().splitlines()
                (bad / name).write_text("".join(line + "\n" for line in edit(lines)))
        return ["import", str(bad)], None

    return setup


def _records(edit) -> Callable:
    """Edit the second record, parsed: ``edit(record)`` changes [index, [trace, run_secs, target, args_info]]."""

    def lines(ls: list[str]) -> list[str]:
        record = json.loads(ls[1])
        edit(record)
        return [ls[0], json.dumps(record), *ls[2:]]

    return _log(edit_records=lines)


def _decisions(r):
    return r[1][0][1]


def _insts(r):
    return r[1][0][0]


def _sampler(r, kind: str) -> list:
    return next(d for d in _decisions(r) if _insts(r)[d[0]][0] == kind)


def _set(path: Callable, value) -> Callable:
    """An edit that sets the last element of ``path(record)``'s container: ``_set(lambda r: (r[1], 1), x)``."""

    def edit(r):
        container, key = path(r)
        container[key] = value

    return edit


def _append_decision(entry) -> Callable:
    return lambda r: _decisions(r).append(entry)


def _target(**attrs) -> Callable:
    return lambda r: r[1][2].update(attrs)


def _other_tvm(lines: list[str]) -> list[str]:
    shash, b64 = json.loads(lines[0])
    graph = json.loads(tvmlog.decode_module(b64))
    graph["metadata"]["tvm_version"] = "0.26.0"
    return [json.dumps([shash, tvmlog.encode_module(json.dumps(graph))]), *lines[1:]]


def _not_a_module(lines: list[str]) -> list[str]:
    shash, b64 = json.loads(lines[0])
    version = json.loads(tvmlog.decode_module(b64))["metadata"]["tvm_version"]
    graph = {"root": 1, "nodes": [{"type_key": ""}, {"type_key": "no.SuchNode"}], "metadata": {"tvm_version": version}}
    return [json.dumps([shash, tvmlog.encode_module(json.dumps(graph))]), *lines[1:]]


def _huge_line(env: Env) -> tuple[list[str], str | None]:
    bad = env.tmp / "huge"
    shutil.copytree(env.logs, bad)
    with open(bad / tvmlog.RECORD_FILE, "a") as f:
        f.write('[0, [[[], []], ["' + "9" * (17 << 20) + '"]]]\n')  # 17 MiB on one line
    return ["import", str(bad)], None


def _record_file_alone(env: Env) -> tuple[list[str], str | None]:
    alone = env.tmp / "alone"
    alone.mkdir()
    shutil.copy(env.logs / tvmlog.RECORD_FILE, alone)
    return ["import", str(alone / tvmlog.RECORD_FILE)], None


def _garbage_logs(env: Env) -> tuple[list[str], str | None]:
    (env.tmp / tvmlog.WORKLOAD_FILE).write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    (env.tmp / tvmlog.RECORD_FILE).write_bytes(b"\x00\x01")
    return ["import", str(env.tmp)], None


def _empty_dir(env: Env) -> list[str]:
    (env.tmp / "empty").mkdir()
    return ["import", str(env.tmp / "empty")]


def _pair(payload: bytes) -> list[str]:
    return [json.dumps(["123", base64.b64encode(struct.pack("<Q", len(payload)) + payload).decode()])]


LOG_CASES = {
    "record line that is not JSON": Case(_log(lambda ls: ls[:1] + ["[0, {not json"] + ls[1:]), "not valid JSON"),
    "truncated log": Case(_log(lambda ls: ls[:-1] + [ls[-1][: len(ls[-1]) // 2]]), "truncated"),
    "record of a missing workload": Case(_records(_set(lambda r: (r, 0), 7)), "refers to workload line 8"),
    "negative workload index": Case(_records(_set(lambda r: (r, 0), -1)), "expected [workload_index"),
    "record of the wrong structure": Case(_log(lambda ls: ls + ["[0, [1, 2]]"]), "expected [workload_index"),
    "record that is an object": Case(_log(lambda ls: ls + ['{"trace": []}']), "expected [workload_index"),
    "target that is a string": Case(_records(_set(lambda r: (r[1], 2), "llvm")), "expected [workload_index"),
    "line longer than 16 MiB": Case(_huge_line, "longer than 16 MiB"),
    "binary garbage": Case(_garbage_logs, "not valid JSON"),
    "decision past the last instruction": Case(_records(_append_decision([100001, 0])), "for instruction 100001"),
    "negative decision index": Case(_records(_append_decision([-5, 0])), "for instruction -5"),
    "decision of an instruction that samples nothing": Case(_records(_append_decision([0, 1])), "samples nothing"),
    "two decisions for one instruction": Case(
        _records(lambda r: _decisions(r).append(list(_decisions(r)[0]))), "two decisions"
    ),
    "missing decision": Case(_records(lambda r: _decisions(r).pop()), "has no decision"),
    "zero tile size": Case(
        _records(lambda r: _sampler(r, "SamplePerfectTile").__setitem__(1, [0, 1, 1, 8])), "not positive loop sizes"
    ),
    "tiles that do not multiply to the loop": Case(
        _records(lambda r: _sampler(r, "SamplePerfectTile")[1].__setitem__(0, 1000)), "do not multiply"
    ),
    "categorical choice past its candidates": Case(
        _records(lambda r: _sampler(r, "SampleCategorical").__setitem__(1, 99)), "picks none of its"
    ),
    "categorical choice of 2^32": Case(
        _records(lambda r: _sampler(r, "SampleCategorical").__setitem__(1, 2**32)), "picks none of its"
    ),
    "decision of the wrong type": Case(
        _records(lambda r: _sampler(r, "SamplePerfectTile").__setitem__(1, "4,4")), "is not 4 tile sizes"
    ),
    "trace that is a string": Case(_records(_set(lambda r: (r[1], 0), "trace")), "must be [instructions, decisions]"),
    "unknown instruction": Case(
        _records(lambda r: _insts(r).append(["NoSuchInstruction", [], [], []])), "does not apply to its workload"
    ),
    "instruction on an undefined loop": Case(
        _records(lambda r: _insts(r).append(["Parallel", ["l999"], [], []])), "does not apply to its workload"
    ),
    "tile sampler that would loop forever": Case(
        _records(lambda r: _insts(r)[_sampler(r, "SamplePerfectTile")[0]][2].__setitem__(1, 0)),
        "max_innermost_factor=0",
    ),
    "negative latency": Case(_records(_set(lambda r: (r[1], 1), [-1e-4])), "is not a measurement"),
    "zero latency": Case(_records(_set(lambda r: (r[1], 1), [0.0])), "is not a measurement"),
    "latency of 1e308 s": Case(_records(_set(lambda r: (r[1], 1), [1e308])), "is not a measurement"),
    "latency above an hour": Case(_records(_set(lambda r: (r[1], 1), [1e5])), "is not a measurement"),
    "latency that is a string": Case(_records(_set(lambda r: (r[1], 1), ["0.001"])), "not a number"),
    "latencies that are not a list": Case(_records(_set(lambda r: (r[1], 1), 0.001)), "not a list of latencies"),
    "unknown target kind": Case(_records(_target(kind="no-such-kind")), "not a valid TVM target"),
    "negative core count": Case(_records(_target(**{"num-cores": -5})), "num-cores -5 is not a count"),
    "core count that is a string": Case(_records(_target(**{"num-cores": "two"})), "not a valid TVM target"),
    "CPU that LLVM does not know": Case(_records(_target(mcpu="no-such-cpu-xyz")), "not a CPU that LLVM knows"),
    "triple that LLVM does not know": Case(
        _records(lambda r: r[1][2].pop("mcpu") and r[1][2].update(mtriple="zzz-none")), "LLVM knows no 'zzz-none'"
    ),
    "corrupt workload payload": Case(_log(edit_workloads=lambda ls: ['["123", "!!!not base64!!!"]']), "corrupt"),
    "workload payload that is not JSON": Case(_log(edit_workloads=lambda ls: _pair(b"not json!")), "not JSON"),
    "workload of another TVM": Case(_log(edit_workloads=_other_tvm), "TVM 0.26.0"),
    "workload line that is not a pair": Case(_log(edit_workloads=lambda ls: ['["123"]']), "expected [structural_hash"),
    "workload that is not a module": Case(_log(edit_workloads=_not_a_module), "corrupt workload module"),
    "records without their workload file": Case(_record_file_alone, "is missing"),
    "records of an empty workload file": Case(_log(edit_workloads=lambda ls: []), "has 0 workload(s)"),
    "a path that does not exist": Case(_on_suite_db(lambda env: ["import", str(env.tmp / "nope")]), "no such file"),
    "a folder without logs": Case(_on_suite_db(_empty_dir), "no database_workload.json"),
    "a file that is not a log": Case(
        _on_suite_db(
            lambda env: (
                ["import", str(env.logs / "logs")]
                if (env.logs / "logs").is_file()
                else ["import", str(_touch(env.tmp / "notes.txt"))]
            )
        ),
        "expected a MetaSchedule work dir",
    ),
}


def _touch(path: Path) -> Path:
    path.write_text("hello\n")
    return path


# -- ONNX files and the per-model commands --------------------------------------------------------------------------


def _model(env: Env, name: str = "mlp.onnx", model=None) -> Path:
    path = env.tmp / name
    onnx.save(model if model is not None else zoo.exported_mlp(), path)
    return path


def _file(content: bytes, name: str = "model.onnx") -> Callable[[Env], Path]:
    def make(env: Env) -> Path:
        (env.tmp / name).write_bytes(content)
        return env.tmp / name

    return make


def _fancy_op(env: Env) -> Path:
    model = zoo.mlp(4, (8, 8))
    model.graph.node[0].op_type = "FancyMatMul"
    return _model(env, "odd.onnx", model)


def _transfer(make_model: Callable[[Env], Path], *extra: str, command: str = "transfer"):
    return _on_suite_db(lambda env: [command, str(make_model(env)), *extra])


SHAPE = ("--input-shape", "x=8,64")
ONNX_CASES = {
    "corrupt ONNX file": Case(_transfer(_file(b"\x08\x07garbage")), "not a valid ONNX model"),
    "empty ONNX file": Case(_transfer(_file(b"")), "ONNX"),
    "text file as a model": Case(_transfer(_file(b"graph { node: [] }\n" * 20)), "not a valid ONNX model"),
    "unsupported operator": Case(_transfer(_fancy_op), "FancyMatMul"),
    "shape for an input the model lacks": Case(_transfer(_model, "--input-shape", "y=8,64"), "inputs are x"),
    "shape of the wrong rank": Case(_transfer(_model, "--input-shape", "x=8"), "1 dimensions given"),
    "shape that is not numbers": Case(_transfer(_model, "--input-shape", "x=8,zero"), "expected NAME=D1,D2"),
    "target that is not JSON": Case(_transfer(_model, *SHAPE, "--target", "llvm -mcpu=x"), 'expected "host"'),
    "target of an unknown kind": Case(_transfer(_model, *SHAPE, "--target", '{"kind": "nope"}'), "not a valid TVM"),
    "target with zero cores": Case(
        _transfer(_model, *SHAPE, "--target", '{"kind": "llvm", "num-cores": 0}'), "num-cores 0 is not a count"
    ),
    "target CPU that LLVM does not know": Case(
        _transfer(_model, *SHAPE, "--target", '{"kind": "llvm", "mcpu": "pentium-9000"}'), "not a CPU that LLVM knows"
    ),
    "tune: corrupt ONNX file": Case(_transfer(_file(b"\x08\x07garbage"), command="tune"), "not a valid ONNX model"),
    "tune: a budget that is no duration": Case(
        _transfer(_model, *SHAPE, "--budget", "soon", command="tune"), "is not a duration", code=2
    ),
    "tune: an RPC tracker without a key": Case(
        _transfer(_model, *SHAPE, "--rpc", "nohost", command="tune"), "HOST:PORT"
    ),
    "tune: keep more than all": Case(_transfer(_model, *SHAPE, "--keep", "2", command="tune"), "--keep", code=2),
    "model path that is a folder": Case(_transfer(lambda env: env.tmp), "is a directory", code=2),
    "model that does not exist": Case(_transfer(lambda env: env.tmp / "none.onnx"), "does not exist", code=2),
}


# -- other command lines ------------------------------------------------------------------------------------------


def _cmd(*args: str, **kw) -> Case:
    fragment, code = kw["fragment"], kw.get("code", 1)
    return Case(_on_suite_db(lambda env: list(args)), fragment, code)


def _export_under_a_file(env: Env) -> list[str]:
    return ["export", "-o", str(_touch(env.tmp / "a-file") / "sub")]


def _train_a_device_without_records(env: Env) -> list[str]:
    store = Store(env.db_url)
    dev = store.add_device(testing.device(mcpu="no-records"))
    store.close()
    return ["predictor", "train", "--device", str(dev)]


CLI_CASES = {
    "lookup of a shape that is not numbers": _cmd("lookup", "--shape", "1,x,3", fragment="--shape"),
    "lookup on an unknown device": _cmd("lookup", "--device", "tpu-9000", fragment="tpu-9000"),
    "export of an unknown device": _cmd("export", "-o", "x", "--device", "42", fragment="no device '42'"),
    # past a BIGINT: no row's id, and an OverflowError in the database driver before
    "lookup on a device id of 31 digits": _cmd("lookup", "--device", "1" + "0" * 30, fragment="no device '1000"),
    "a report of a model id of 31 digits": _cmd("report", "1" + "0" * 30, fragment="no model '1000"),
    # "" was the current folder (import read every file under it) or the default registry (sync wrote into it)
    "import of an empty path": _cmd("import", "", fragment="is empty", code=2),
    "export into an empty path": _cmd("export", "-o", "", fragment="is empty", code=2),
    "sync into an empty destination": _cmd("sync", "a.db", "", fragment="is empty", code=2),
    "an empty --db": _cmd("--db", "", "stats", fragment="is empty", code=2),
    "show of an empty workload": _cmd("show", "", fragment="is empty", code=2),
    "export to a path under a file": Case(_on_suite_db(_export_under_a_file), "cannot write the export there"),
    "training an unknown device": _cmd("predictor", "train", "--device", "nope", fragment="nope"),
    "training a device without records": Case(_on_suite_db(_train_a_device_without_records), "no ok records"),
    "held-out share of 1.5": _cmd("predictor", "train", "--holdout", "1.5", fragment="--holdout", code=2),
    "import with zero threads": _cmd("import", "x", "--threads", "0", fragment="--threads", code=2),
    "a command that does not exist": _cmd("frobnicate", fragment="No such command", code=2),
    "an option that does not exist": _cmd("stats", "--colour", fragment="No such option", code=2),
    "import without a path": _cmd("import", fragment="Missing argument", code=2),
    "an output format that does not exist": _cmd("lookup", "--format", "xml", fragment="--format", code=2),
    "--json and another --format": _cmd("devices", "--format", "csv", "--json", fragment="disagree", code=2),
    "transfer's old --budget (now --candidates)": _cmd(
        "transfer", "m.onnx", "--budget", "3", fragment="--budget", code=2
    ),
    "show of a workload that is not stored": _cmd("show", "0xfeed", fragment="no ok record of workload '0xfeed'"),
}


# -- database URLs and files --------------------------------------------------------------------------------------


def _url(make: Callable[[Env], str]) -> Callable[[Env], tuple[list[str], str | None]]:
    return lambda env: (["stats"], make(env))


def _sqlite_file(make: Callable[[Path], None]) -> Callable[[Env], tuple[list[str], str | None]]:
    def setup(env: Env) -> tuple[list[str], str | None]:
        folder = env.tmp / "dbfile"
        folder.mkdir()
        make(folder / "other.db")
        return ["import", str(env.logs)], f"sqlite:///{folder / 'other.db'}"

    return setup


def _foreign_sqlite(path: Path, wal: bool = False) -> None:
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
    conn.commit()
    conn.close()


def _truncated_sqlite(path: Path) -> None:
    _foreign_sqlite(path)
    path.write_bytes(path.read_bytes()[:100])


def _suite_db_at(revision: str) -> Callable[[Env], tuple[list[str], str | None]]:
    """The suite's registry with another schema revision in its version table."""

    def setup(env: Env) -> tuple[list[str], str | None]:
        engine = create_engine(_driver(env.db_url))
        with engine.begin() as conn:
            conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = :r"), {"r": revision})
        engine.dispose()
        return ["import", str(env.logs)], None

    return setup


def _foreign_tables(env: Env) -> tuple[list[str], str | None]:
    """Another application's tables in the database: an SQLite file of its own, or the PostgreSQL scratch database
    (emptied of the registry first)."""
    if env.db_url.startswith("sqlite"):
        return _sqlite_file(_foreign_sqlite)(env)
    engine = create_engine(_driver(env.db_url), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
        conn.execute(text("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)"))
        conn.execute(text("INSERT INTO invoices VALUES (1, 9.5)"))
    engine.dispose()
    return ["import", str(env.logs)], None


def _driver(url: str) -> str:
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


DATABASE_CASES = {
    "not a URL": Case(_url(lambda env: "not a url"), "not a database URL", watch_suite_db=True),
    "a dialect the registry does not speak": Case(
        _url(lambda env: "mysql://u@127.0.0.1/x"), "cannot use database", watch_suite_db=True
    ),
    "PostgreSQL that does not answer": Case(
        _url(lambda env: "postgresql://nobody@127.0.0.1:1/x"), "cannot use", watch_suite_db=True
    ),
    "SQLite path that is a folder": Case(_url(lambda env: f"sqlite:///{env.tmp}"), "is a directory"),
    "another program's SQLite file": Case(_sqlite_file(_foreign_sqlite), "another program's SQLite database"),
    "another program's SQLite file in WAL mode": Case(
        _sqlite_file(lambda p: _foreign_sqlite(p, wal=True)), "another program's SQLite database"
    ),
    "a file that is no database": Case(
        _sqlite_file(lambda p: p.write_bytes(b"hello " * 200)), "is not an SQLite database"
    ),
    "a truncated SQLite file": Case(_sqlite_file(_truncated_sqlite), "not a readable SQLite database"),
    "another application's tables in the registry's database": Case(_foreign_tables, "not a registry"),
    "a registry of an older schema": Case(_suite_db_at("0001"), "registry db upgrade"),
    "a registry of a newer registry": Case(_suite_db_at("9999"), "written by a newer registry"),
}

# -- bundles: a real one (the suite's logs imported and exported), edited member by member ---------------------------

_BUNDLES: dict[str, Path] = {}


def _real_bundle(env: Env) -> Path:
    """A bundle of the suite's real logs, made once per session (its import and export check every record)."""
    key = str(env.logs)
    if key not in _BUNDLES:
        folder = env.tmp.parent / f"bundle-of-{env.logs.name}"
        folder.mkdir(exist_ok=True)
        db, path = folder / "source.db", folder / "real.bundle"
        for args in (["import", str(env.logs)], ["export", "--bundle", str(path)]):
            done = CliRunner().invoke(cli, ["--db", str(db), *args])
            assert done.exit_code == 0, done.output
        _BUNDLES[key] = path
    return _BUNDLES[key]


def _bundle(edit_rows=None, edit_manifest=None, *, member: str = "records.jsonl", raw=None, source=None):
    """``registry import`` of the real bundle (or ``source(env)``) with one member's rows edited (``edit_rows(rows)``,
    rows as parsed JSON) and the manifest's checksum and count of it made to match, or the manifest edited
    (``edit_manifest(dict)``), or the whole file replaced by ``raw(bytes)``."""
    import hashlib
    import zipfile

    def setup(env: Env) -> tuple[list[str], str | None]:
        src, dest = (source or _real_bundle)(env), env.tmp / "edited.bundle"
        if raw is not None:
            dest.write_bytes(raw(src.read_bytes()))
            return ["import", str(dest)], None
        with zipfile.ZipFile(src) as zf:
            members = {n: zf.read(n) for n in zf.namelist()}
        manifest = json.loads(members["manifest.json"])
        if edit_rows is not None:
            rows = [json.loads(line) for line in members.get(member, b"").splitlines()]
            rows = edit_rows(rows) or rows
            data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
            members[member] = data
            manifest["members"][member] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
            manifest["counts"][member.removesuffix(".jsonl")] = len(rows)
        if edit_manifest is not None:
            edit_manifest(manifest)
        members["manifest.json"] = json.dumps(manifest).encode()
        with zipfile.ZipFile(dest, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
        return ["import", str(dest)], None

    return setup


def _each(field: int, value):
    def edit(rows):
        for row in rows:
            row[field] = value

    return edit


def _first(edit):
    def rows(rs):
        edit(rs[0])

    return rows


def _big_manifest(manifest):
    manifest["padding"] = " " * (17 << 20)  # declared (and stored) past the 16 MiB a manifest may hold


def _huge_model(elements_dims: list[int]) -> Callable[[Env], Path]:
    def make(env: Env) -> Path:
        from onnx import TensorProto, helper

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, elements_dims)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, elements_dims)
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "huge", [x], [y])
        return _model(env, "huge.onnx", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))

    return make


def _opset(version: int) -> Callable[[Env], Path]:
    def make(env: Env) -> Path:
        model = zoo.exported_mlp()
        model.opset_import[0].version = version
        return _model(env, "opset.onnx", model)

    return make


def _deep_target(env: Env) -> list[str]:
    return ["transfer", str(_model(env)), *SHAPE, "--target", '{"kind": ' + "[" * 5000 + "]" * 5000 + "}"]


def _bundle_onto_registry(env: Env) -> tuple[list[str], str | None]:
    """`export --bundle` naming the registry's own SQLite file (on PostgreSQL too: a SQLite registry of its own)."""
    db = env.tmp / "own.db"
    done = CliRunner().invoke(cli, ["--db", str(db), "import", str(env.logs)])
    assert done.exit_code == 0, done.output
    return ["export", "--bundle", str(db)], f"sqlite:///{db}"


def _into_new_file(env: Env) -> tuple[list[str], str | None]:
    """A refused import into a registry file that does not exist yet: nothing may be left behind."""
    bad = env.tmp / "bad_log"
    shutil.copytree(env.logs, bad)
    (bad / tvmlog.RECORD_FILE).write_text("not json\n")
    return ["import", str(bad)], f"sqlite:///{env.tmp / 'fresh' / 'new.db'}"


BUNDLE_CASES = {
    "bundle: a record whose workload index is negative": Case(_bundle(_each(1, -1)), "workload index -1"),
    "bundle: a record whose device index is negative": Case(_bundle(_each(2, -1)), "device index -1"),
    "bundle: a record whose workload index is past the list": Case(_bundle(_each(1, 10**6)), "workload index"),
    "bundle: a model whose task index is negative": Case(
        _bundle(
            lambda rows: [{"name": "m", "sha256": "0" * 64, "input_shapes": {}, "tasks": [[-1, "t", 1]]}],
            member="models.jsonl",
        ),
        "workload index -1",
    ),  # fmt: skip
    "bundle: a workload whose stated hash is not its module's": Case(
        _bundle(_first(lambda w: w.__setitem__("shash", "123456789")), member="workloads.jsonl"),
        "structural hash",
    ),
    "bundle: a record without an origin": Case(_bundle(_each(7, "")), "no origin"),
    "bundle: a record whose latencies are not numbers": Case(_bundle(_each(5, ["fast"])), "malformed record"),
    "bundle: a record that is not a list": Case(_bundle(lambda rows: [{"a": 1}]), "malformed record"),
    "bundle: manifest counts missing": Case(_bundle(edit_manifest=lambda m: m.pop("counts")), "counts"),
    "bundle: a manifest count that is not a number": Case(
        _bundle(edit_manifest=lambda m: m["counts"].__setitem__("records", "many")), "not a count"
    ),
    "bundle: a negative manifest count": Case(
        _bundle(edit_manifest=lambda m: m["counts"].__setitem__("devices", -3)), "not a count"
    ),
    "bundle: a format version that is a string": Case(
        _bundle(edit_manifest=lambda m: m.__setitem__("version", "1")), "not a positive whole number"
    ),
    "bundle: a member's declared size is not its own": Case(
        _bundle(edit_manifest=lambda m: m["members"]["records.jsonl"].__setitem__("bytes", 10**12)),
        "declares",
    ),
    "bundle: a manifest of 17 MiB": Case(_bundle(edit_manifest=_big_manifest), "at most"),
    "bundle: a truncated file": Case(_bundle(raw=lambda data: data[: len(data) // 2]), "not a readable bundle"),
    "bundle: a zip without a manifest": Case(
        _bundle(edit_manifest=None, raw=lambda data: _zip_without_manifest()), "without manifest.json"
    ),
}


def _zip_without_manifest() -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("records.jsonl", "{}\n")
    return buf.getvalue()


AUDIT_CASES = {
    "export --bundle to a path under /proc": _cmd("export", "--bundle", "/proc/x.bundle", fragment="cannot write"),
    "export --bundle into a folder that does not exist": Case(
        _on_suite_db(lambda env: ["export", "--bundle", str(env.tmp / "none" / "x.bundle")]), "cannot write"
    ),
    "export --bundle onto the registry's own file": Case(_bundle_onto_registry, "registry's own database file"),
    "transfer --overlay under /proc": Case(
        _transfer(_model, *SHAPE, "--overlay", "/proc/x/o.db"), "cannot create the registry"
    ),
    "tune --overlay under /proc": Case(
        _transfer(_model, *SHAPE, "--overlay", "/proc/x/o.db", command="tune"), "cannot create the registry"
    ),
    "a registry under /proc": Case(
        lambda env: (["import", str(env.logs)], "sqlite:////proc/x/r.db"),
        "cannot create the registry",
        watch_suite_db=True,
    ),
    "a target nested 5,000 deep": Case(_on_suite_db(_deep_target), 'expected "host"'),
    "a target whose host has a host": Case(
        _transfer(_model, *SHAPE, "--target", '{"kind": "llvm", "host": {"kind": "llvm", "host": {"kind": "llvm"}}}'),
        "host has a host",
    ),
    "ONNX opset 999": Case(_transfer(_opset(999), *SHAPE), "opset 999"),
    "an ONNX input of 65536^3 floats": Case(_transfer(_huge_model([65536, 65536, 65536])), "at most 2 GiB"),
    "an ONNX input of 2^40 floats": Case(_transfer(_huge_model([1 << 20, 1 << 20])), "at most 2 GiB"),
    "--input-shape of 99999999999 x 64": Case(_transfer(_model, "--input-shape", "x=99999999999,64"), "at most 2 GiB"),
    "--input-shape of 10 GiB": Case(_transfer(_model, "--input-shape", "x=42000000,64"), "at most 2 GiB"),
    "tune: --input-shape of 10 GiB": Case(
        _transfer(_model, "--input-shape", "x=42000000,64", command="tune"), "at most 2 GiB"
    ),
    "--rpc to a tracker that does not answer": Case(
        _transfer(_model, *SHAPE, "--rpc", "127.0.0.1:1:key"), "cannot reach the RPC tracker"
    ),
    "--rpc with port 0": Case(_transfer(_model, *SHAPE, "--rpc", "127.0.0.1:0:key"), "HOST:PORT:KEY"),
    "--threads 100000": Case(_transfer(_model, *SHAPE, "--threads", "100000"), "--threads", code=2),
    "tune --threads 100000": Case(
        _transfer(_model, *SHAPE, "--threads", "100000", command="tune"), "--threads", code=2
    ),
    "import --threads 100000": _cmd("import", "x", "--threads", "100000", fragment="--threads", code=2),
    "a refused import into a new registry file": Case(_into_new_file, "not valid JSON"),
    "sync with --db": _cmd("sync", "--db", "x.db", "a.db", "b.db", fragment="--db does not apply", code=2),
    "pull of a bundle that is not shipped": _cmd("pull", "no-such-bundle", fragment="no-such-bundle"),
    "check of an unknown device": _cmd("check", "--device", "tpu-9000", fragment="tpu-9000"),
    "verify of an unknown device": _cmd("verify", "--device", "tpu-9000", fragment="tpu-9000"),
    "report of a model that is not stored": _cmd("report", "no-such-model", fragment="no-such-model"),
    "tune: a target that is not JSON": Case(
        _transfer(_model, *SHAPE, "--target", "{nope", command="tune"), 'expected "host"'
    ),
    "transfer: a dimension of zero": Case(_transfer(_model, "--input-shape", "x=0,64"), "positive integers"),
    "transfer: a negative dimension": Case(_transfer(_model, "--input-shape", "x=-8,64"), "positive integers"),
    "transfer: --candidates 0": Case(_transfer(_model, *SHAPE, "--candidates", "0"), "--candidates", code=2),
    "tune: --trials 0": Case(_transfer(_model, *SHAPE, "--trials", "0", command="tune"), "--trials", code=2),
}

# -- the second audit (issue 34): files written over the registry, NaN options, forged bundles, odd filters ---------


def _own_registry(env: Env) -> Path:
    """An SQLite registry of its own with the suite's logs (on PostgreSQL too: these cases are about its files)."""
    db = env.tmp / "own.db"
    done = CliRunner().invoke(cli, ["--db", str(db), "import", str(env.logs)])
    assert done.exit_code == 0, done.output
    return db


def _onto_own_file(*args: str, suffix: str = "") -> Callable[[Env], tuple[list[str], str | None]]:
    """A command whose output path (the last argument, completed here) is one of the registry's own files."""

    def setup(env: Env) -> tuple[list[str], str | None]:
        db = _own_registry(env)
        own = db.with_suffix(suffix) if suffix.startswith(".") else Path(f"{db}{suffix}")
        made = [str(_model(env)) if a == "MODEL" else a for a in args]
        return [*made, str(own)], f"sqlite:///{db}"

    return setup


def _overlay_is_the_registry(env: Env) -> tuple[list[str], str | None]:
    db = _own_registry(env)
    return ["transfer", str(_model(env)), *SHAPE, "--overlay", str(db)], f"sqlite:///{db}"


def _zip_with(data: bytes, extra: dict[str, bytes]) -> bytes:
    """The bundle ``data`` with ``extra`` members appended (a name it already holds is then there twice)."""
    import io
    import warnings
    import zipfile

    buf = io.BytesIO(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name: that is the point
        with zipfile.ZipFile(buf, "a") as zf:
            for name, content in extra.items():
                zf.writestr(name, content)
    return buf.getvalue()


def _forged_latency(data: bytes) -> bytes:
    """A second records.jsonl whose record claims 1 ps: the manifest's checksum is the first one's."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        row = json.loads(zf.read("records.jsonl").splitlines()[0])
    row[5] = [1e-12]
    return _zip_with(data, {"records.jsonl": json.dumps(row).encode() + b"\n"})


def _weighing(weight):
    """models.jsonl replaced by one model whose one task weighs ``weight``."""
    return lambda rows: [{"name": "m", "sha256": "0" * 64, "input_shapes": {}, "tasks": [[0, "t", weight]]}]


AUDIT2_CASES = {
    "report -o the registry's database file": Case(
        _onto_own_file("report", "no-such-model", "-o"), "registry's own database file"
    ),
    "report -o the registry's write-ahead log": Case(
        _onto_own_file("report", "no-such-model", "-o", suffix="-wal"), "registry's own write-ahead log"
    ),
    "export --bundle onto the similarity index": Case(
        _onto_own_file("export", "--bundle", suffix=".faiss"), "registry's own similarity index"
    ),
    "transfer -o the registry's database file": Case(
        _onto_own_file("transfer", "MODEL", *SHAPE, "-o"), "registry's own database file"
    ),
    "transfer --report onto the registry's database file": Case(
        _onto_own_file("transfer", "MODEL", *SHAPE, "--report"), "registry's own database file"
    ),
    "--overlay that is the --db registry": Case(_overlay_is_the_registry, "registry's own database file"),
    "verify --tolerance nan": _cmd("verify", "--tolerance", "nan", fragment="not a finite number", code=2),
    "verify --tolerance inf": _cmd("verify", "--tolerance", "inf", fragment="not a finite number", code=2),
    "tune --min-gain nan": Case(
        _transfer(_model, *SHAPE, "--min-gain", "nan", command="tune"), "not a finite number", code=2
    ),
    "bundle: records.jsonl twice, the second forging 1 ps": Case(
        _bundle(raw=_forged_latency), "holds records.jsonl more than once"
    ),
    "bundle: a member the manifest does not list": Case(
        _bundle(raw=lambda data: _zip_with(data, {"extra.jsonl": b"{}\n"})), "no member of a registry bundle"
    ),
    "bundle: a record without latencies": Case(_bundle(_each(5, [])), "states no latencies"),
    "bundle: a record measured in 9999": Case(_bundle(_each(12, "9999-01-01T00:00:00+00:00")), "in the future"),
    "bundle: a donor that names no workload of the set": Case(
        _bundle(_each(13, ["999", "structural", "f" * 64, "0" * 64, "e" * 32])), "names a donor"
    ),
    "bundle: a team with a newline and an ANSI escape": Case(
        _bundle(_each(8, "vision\n\x1b[31mred")), "control character"
    ),
    "bundle: a task weight of -5": Case(
        _bundle(_weighing(-5), member="models.jsonl"), "task weight -5 is not a whole number"
    ),
    "bundle: a task weight of 10^30": Case(
        _bundle(_weighing(10**30), member="models.jsonl"), "is not a whole number from 1"
    ),
    "lookup --shape of 5,000 digits": _cmd("lookup", "--shape", "1," + "9" * 5000, fragment="18 digits"),
    "lookup --workload abc": _cmd("lookup", "--workload", "abc", fragment="whole number below 2^64"),
    "lookup --workload 2^64": _cmd("lookup", "--workload", str(2**64), fragment="whole number below 2^64"),
    "lookup --op ''": _cmd("lookup", "--op", "", fragment="--op", code=2),
    "lookup --device ''": _cmd("lookup", "--device", "", fragment="--device", code=2),
    "import --team with a newline and an ANSI escape": Case(
        _on_suite_db(lambda env: ["import", str(env.logs), "--team", "vision\n\x1b[31mred"]),
        "control character",
        code=2,
    ),
    "TVM_NUM_THREADS=abc": Case(
        _transfer(_model, *SHAPE), "TVM_NUM_THREADS='abc' is not a thread count", env=(("TVM_NUM_THREADS", "abc"),)
    ),
    "lookup with TVM_NUM_THREADS=abc": Case(
        _on_suite_db(lambda env: ["lookup", "--device", "host"]),
        "TVM_NUM_THREADS='abc'",
        env=(("TVM_NUM_THREADS", "abc"),),
    ),
}

CASES = {**LOG_CASES, **ONNX_CASES, **CLI_CASES, **DATABASE_CASES, **BUNDLE_CASES, **AUDIT_CASES, **AUDIT2_CASES}


def test_every_case_has_a_name_of_its_own():
    """The groups are merged into one dict: a name in two groups would silently drop a case."""
    groups = [LOG_CASES, ONNX_CASES, CLI_CASES, DATABASE_CASES, BUNDLE_CASES, AUDIT_CASES, AUDIT2_CASES]
    assert len(CASES) == sum(len(g) for g in groups)


@pytest.mark.tvm
@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_one_line_and_changes_nothing(name, db_url, tuned_logs, tmp_path):
    refused_cleanly(CASES[name], db_url, tuned_logs.work_dir, tmp_path)


def refused_cleanly(case: Case, db_url: str, logs: Path, tmp_path: Path) -> None:
    """``case`` run on a registry with some records: one ``Error:`` line, its exit code, and nothing changed."""
    store = Store(db_url)
    dev = testing.device()
    store.ingest([testing.workload(i) for i in range(3)], [testing.record(i, j, dev) for i in range(3) for j in (0, 1)])
    store.close()
    args, url = case.setup(Env(tmp_path, db_url, logs))
    target = url or db_url
    watched = db_url if case.watch_suite_db else target
    before, before_bytes = rows_of(watched), _file_bytes(watched)

    result = CliRunner().invoke(cli, ["--db", target, *args], env=dict(case.env))

    assert result.exit_code == case.code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert case.fragment in lines[0], lines[0]
    assert rows_of(watched) == before
    assert _file_bytes(watched) == before_bytes  # an SQLite registry: byte for byte


def _file_bytes(url: str) -> str | None:
    """The sha256 of an SQLite registry's file, None for another database or a file that is not there."""
    path = Path(make_url(url).database or "") if url.startswith("sqlite") else None
    if path is None or not path.is_file():
        return None
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sync_into_a_registrys_write_ahead_log_is_refused(tmp_path):
    """Made there, the destination was deleted as the source's journal when the source closed."""
    source = tmp_path / "a.db"
    Store(f"sqlite:///{source}").close()
    result = CliRunner().invoke(cli, ["sync", str(source), f"{source}-wal"])
    assert result.exit_code == 1 and "write-ahead log of the SQLite database" in result.stderr, result.output
    assert len(result.stderr.splitlines()) == 1 and not Path(f"{source}-wal").exists()
