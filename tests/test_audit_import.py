"""The third audit's bundles: every field of an imported bundle checked and bounded (issue: "check every field").

A bundle is a claim from someone who may be hostile. Each case is the suite's real bundle (``test_bad_input``'s
``_bundle``) with one thing forged and its checksums made to match, imported with ``registry import`` on SQLite and
PostgreSQL: one ``Error:`` line, exit 1, the registry unchanged. Every case was run against the code before its fix
and was accepted there (or, for the zip bomb and the long line, took the memory it asked for); the few that were
refused before were refused for another reason than the one asserted (a raw database error, a wrong key).
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from registry import hostinfo
from registry.cli.main import cli
from registry.store.rows import DeviceSpec
from tests.shared_data import H100_LOG
from tests.test_bad_input import Case, Env, _bundle, _each, _first, _real_bundle, refused_cleanly

ROOT = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3"


def _device(**fields):
    """devices.jsonl's device with ``fields`` set, and its key made to match when ``rekey`` (so that only the field
    itself can be what is refused)."""
    rekey = fields.pop("rekey", False)

    def edit(rows):
        from registry.tvm_side.target import canonical_target

        rows[0].update(fields)
        if rekey:
            d = rows[0]
            spec = DeviceSpec(canonical_target(d["target"]), d["num_threads"], d["host_model"], d["tvm_version"])
            d["key"] = spec.key

    return _bundle(edit, member="devices.jsonl")


def _model(**fields):
    """models.jsonl replaced by one model of the bundle's workload, with ``fields`` set."""
    model = {"name": "m", "sha256": "ab" * 32, "input_shapes": {"x": [8, 64]}, "tasks": [[0, "t", 1]], **fields}
    return _bundle(lambda rows: [model], member="models.jsonl")


def _count(member: str, by: int = 1):
    return _bundle(edit_manifest=lambda m: m["counts"].__setitem__(member, m["counts"][member] + by))


def _effort_rows(rows):
    """Two efforts of the one workload on the one device, each valid alone."""
    return [[0, 0, 10, 60.0, [[1, 100.0], [10, 50.0]], False]] * 2


def _bomb(size: int, member: str = "records.jsonl"):
    """The real bundle with ``member`` replaced by ``size`` zero bytes, its checksum and size right: a few hundred KB
    that inflate a thousand times."""

    def make(data: bytes) -> bytes:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            members = {n: zf.read(n) for n in zf.namelist() if n != member}
        manifest = json.loads(members["manifest.json"])
        digest, block = hashlib.sha256(), bytes(1 << 20)
        for _ in range(size >> 20):
            digest.update(block)
        manifest["members"][member] = {"sha256": digest.hexdigest(), "bytes": size}
        members["manifest.json"] = json.dumps(manifest).encode()
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name, content in members.items():
                zf.writestr(name, content)
            with zf.open(member, "w", force_zip64=True) as f:
                for _ in range(size >> 20):
                    f.write(block)
        return out.getvalue()

    return make


def _long_line(rows):
    """A row of 18 MiB of hex digits: it compresses only twice, so only the line's length can refuse it."""
    return [*rows, random.Random(0).randbytes(9 << 20).hex()]


CASES = {
    # 1. latencies of another JSON type than a number
    "a latency given as a string": Case(_bundle(_first(lambda r: r.__setitem__(5, ["2e-6"]))), "list of numbers"),
    "a latency given as true": Case(_bundle(_first(lambda r: r.__setitem__(5, [True]))), "list of numbers"),
    # 2. physically impossible latencies (the FLOP rate: test_a_latency_beyond_any_device_is_refused)
    "a latency of 1 ps": Case(_bundle(_first(lambda r: r.__setitem__(5, [1e-12]))), "is not a measurement"),
    # 3. origins
    "an origin null": Case(_bundle(_each(7, None)), "no origin"),
    "an origin of markup": Case(_bundle(_each(7, "<script>alert(1)</script>")), "neither a registry id"),
    "an origin of 10,000 characters": Case(_bundle(_each(7, "a" * 10_000)), "neither a registry id"),
    "a donor's origin with an escape": Case(
        _bundle(_each(13, ["1", "structural", "f" * 64, "0" * 32, "\x1b[31m"])), "neither a registry id"
    ),
    "a manifest origin null": Case(_bundle(edit_manifest=lambda m: m.__setitem__("origin", None)), "not a registry id"),
    "a tool version with a newline": Case(_bundle(_each(11, "1.0\nError: forged")), "control character"),
    # 4. devices
    "a device of 0 threads": Case(_device(num_threads=0), "runs 0 threads"),
    "a device of -4 threads": Case(_device(num_threads=-4), "runs -4 threads"),
    "a device of 2^40 threads": Case(_device(num_threads=2**40), "threads, not a whole number from 1"),
    'a device of "1" threads': Case(_device(num_threads="1"), "is not a whole number"),
    "a device of 1.9 threads": Case(_device(num_threads=1.9), "is not a whole number"),
    "a host model with a newline and an escape": Case(
        _device(host_model="Xeon\n\x1b[2Jcuda-forged", rekey=True), "control character"
    ),
    "a host model null": Case(_device(host_model=None), "is not text"),
    "a device target that is a string": Case(_device(target="llvm"), "is not an object"),
    "a device TVM version that is a number": Case(_device(tvm_version=27), "is not text"),
    # 5. manifest counts that are not what is sent
    **{
        f"a manifest counting one {m} too many": Case(_count(m), "counts")
        for m in ("records", "workloads", "devices", "skeletons", "models")
    },
    "a manifest counting one record too few": Case(_count("records", -1), "holds 16"),
    # 6. dates and ids
    "a record measured in year 1": Case(_bundle(_each(12, "0001-01-01T00:00:00+00:00")), "before TVM existed"),
    "a record measured in 2015": Case(_bundle(_each(12, "2015-06-01T00:00:00+00:00")), "before TVM existed"),
    "a negative record id": Case(_bundle(_first(lambda r: r.__setitem__(0, -5))), "its id -5"),
    "a record id above 2^62": Case(_bundle(_first(lambda r: r.__setitem__(0, 2**62 + 1))), "from 1 to 2^62"),
    "a record id that is a string": Case(_bundle(_first(lambda r: r.__setitem__(0, "7"))), "from 1 to 2^62"),
    "a manifest's last record id of -1": Case(
        _bundle(edit_manifest=lambda m: m.__setitem__("last_record_id", -1)), "not a record id"
    ),
    # 7. models
    "a model sha256 that is a number": Case(_model(sha256=12345), "not 64 lowercase hex"),
    "a model sha256 null": Case(_model(sha256=None), "not 64 lowercase hex"),
    "a model sha256 of markup": Case(_model(sha256="<script>alert(1)</script>"), "not 64 lowercase hex"),
    "a model sha256 of 10,000 characters": Case(_model(sha256="a" * 10_000), "not 64 lowercase hex"),
    "model input shapes that are a list": Case(_model(input_shapes=[[8, 64]]), "not a mapping"),
    "model input shapes that are a string": Case(_model(input_shapes="x=8,64"), "not a mapping"),
    "model input shapes null": Case(_model(input_shapes=None), "not a mapping"),
    "a model input of a negative dimension": Case(_model(input_shapes={"x": [8, -1]}), "not a list of whole"),
    "a model input of a symbolic dimension": Case(_model(input_shapes={"x": ["n", 64]}), "not a list of whole"),
    "a model input named with a newline": Case(_model(input_shapes={"x\n<b>": [8]}), "control character"),
    "model input shapes of 2,000 inputs": Case(
        _model(input_shapes={f"x{i}": [1] for i in range(2000)}), "more than 1000 characters"
    ),
    # 8. a record's trace of another target kind than its device (CUDA traces on a CPU: test_cuda_traces_...)
    "CPU traces on a CUDA device": Case(
        _device(target={"kind": "cuda", "arch": "sm_90"}, num_threads=0, host_model=H100, rekey=True),
        "no GPU schedule, for a device of kind cuda",
    ),
    # 9. one (workload, device) with two efforts
    "two efforts on one workload and device": Case(
        _bundle(_effort_rows, lambda m: m.__setitem__("version", 2), member="efforts.jsonl"), "two efforts"
    ),
    # 10. reading bounded
    "a zip bomb: 1 MB inflating 1,000 times": Case(_bundle(raw=_bomb(128 << 20)), "times the"),
    "a line of 18 MiB": Case(_bundle(_long_line), "a line longer than"),
}


@pytest.mark.tvm
@pytest.mark.parametrize("name", list(CASES))
def test_a_forged_bundle_is_refused_in_one_line(name, db_url, tuned_logs, tmp_path):
    refused_cleanly(CASES[name], db_url, tuned_logs.work_dir, tmp_path)


@pytest.mark.tvm
def test_the_real_bundle_still_imports(sqlite_url, tuned_logs, tmp_path):
    """The control: the bundle the cases forge imports as it is (so a case is refused for what it forged)."""
    bundle = _real_bundle(Env(tmp_path, sqlite_url, tuned_logs.work_dir))
    done = CliRunner().invoke(cli, ["--db", sqlite_url, "import", str(bundle)])
    assert done.exit_code == 0, done.output


# -- a latency faster than any device runs its workload's FLOPs ----------------------------------------------------

N = 1024  # a float32 matmul of N^3 multiply-adds: 2.1 GFLOP, which no device runs in 0.1 µs (21 PFLOP/s)


def _matmul_log(dest: Path, run_secs: float) -> Path:
    """A MetaSchedule log of one record of the matmul: a schedule that tiles one loop, claiming ``run_secs``."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.schedule import Schedule

    from registry.tvm_side.target import host_target

    a, b = te.placeholder((N, N), "float32", name="A"), te.placeholder((N, N), "float32", name="B")
    k = te.reduce_axis((0, N), name="k")
    c = te.compute((N, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    sch = Schedule(mod, seed=1)
    _, j, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=64))
    dest.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(dest))
    record = ms.database.TuningRecord(
        sch.trace, db.commit_workload(mod), [run_secs], host_target(), ArgInfo.from_prim_func(mod["main"])
    )
    db.commit_tuning_record(record)
    return dest


def _matmul_bundle(env: Env) -> Path:
    """A bundle of the matmul's record at 1 ms (2 TFLOP/s: imported, the control), made once per session."""
    folder = env.tmp.parent / "matmul"
    if not (folder / "matmul.bundle").exists():
        folder.mkdir(exist_ok=True)
        db, log = f"sqlite:///{folder / 'source.db'}", _matmul_log(folder / "log", 1e-3)
        for args in (["import", str(log)], ["export", "--bundle", str(folder / "matmul.bundle")]):
            done = CliRunner().invoke(cli, ["--db", db, *args])
            assert done.exit_code == 0, done.output
    return folder / "matmul.bundle"


RATE_CASES = {
    "a log": Case(lambda env: (["import", str(_matmul_log(env.tmp / "log", 1e-7))], None), "21.5 PFLOP/s"),
    "a bundle": Case(_bundle(_each(5, [1e-7]), source=_matmul_bundle), "21.5 PFLOP/s"),
}


@pytest.mark.tvm
@pytest.mark.parametrize("name", list(RATE_CASES))
def test_a_latency_beyond_any_device_is_refused(name, db_url, tuned_logs, tmp_path):
    """0.1 µs for 2.1 GFLOP, above the 1 ns floor, is refused by every write (the same record at 1 ms is imported:
    ``_matmul_bundle``). Before: stored, and the workload's best record at 21 PFLOP/s."""
    refused_cleanly(RATE_CASES[name], db_url, tuned_logs.work_dir, tmp_path)


# -- real CUDA traces: imported under their GPU, refused under a CPU -----------------------------------------------


def _cuda_bundle(env: Env) -> Path:
    """A bundle of the shared H100 log's records of one workload, imported under the H100 and exported, made
    once per session: its import is the control that real CUDA traces pass the check."""
    folder = env.tmp.parent / "cuda"
    if not (folder / "cuda.bundle").exists():
        from registry.tvm_side import tvmlog

        shutil.copytree(H100_LOG, folder / "log", dirs_exist_ok=True)
        records = folder / "log" / tvmlog.RECORD_FILE
        one = [line for line in records.read_text().splitlines() if json.loads(line)[0] == 1]  # a fused matmul's 6
        records.write_text("".join(f"{line}\n" for line in one))
        db = f"sqlite:///{folder / 'source.db'}"
        for args in (
            ["import", str(folder / "log"), "--host-model", H100],
            ["export", "--bundle", str(folder / "cuda.bundle")],
        ):
            done = CliRunner().invoke(cli, ["--db", db, *args])
            assert done.exit_code == 0, done.output
    return folder / "cuda.bundle"


def _on_a_cpu(rows) -> None:
    from registry.tvm_side.target import canonical_target

    target = canonical_target({"kind": "llvm", "mcpu": "skylake", "num-cores": 2})
    rows[0].update(target=target, num_threads=1, host_model="Intel Xeon")
    rows[0]["key"] = DeviceSpec(target, 1, "Intel Xeon", hostinfo.tvm_version()).key


@pytest.mark.tvm
@pytest.mark.skipif(not H100_LOG.exists(), reason=f"{H100_LOG} (the shared CUDA log) is not here")
def test_cuda_traces_import_under_their_gpu_and_are_refused_under_a_cpu(db_url, tuned_logs, tmp_path):
    """Before: the H100's schedules (thread bindings and all) were stored as a CPU's records."""
    done = CliRunner().invoke(
        cli, ["--db", db_url, "import", str(_cuda_bundle(Env(tmp_path, db_url, tuned_logs.work_dir)))]
    )
    assert done.exit_code == 0 and "6 new" in done.output, done.output
    case = Case(
        _bundle(_on_a_cpu, member="devices.jsonl", source=_cuda_bundle), "a GPU schedule, for a device of kind llvm"
    )
    refused_cleanly(case, db_url, tuned_logs.work_dir, tmp_path)


# -- a zip bomb's memory ----------------------------------------------------------------------------------------------

_PEAK = """
import resource, sys
from click.testing import CliRunner
from registry.cli.main import cli
import registry.share.exchange_import  # TVM and the registry's modules loaded before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
done = CliRunner().invoke(cli, sys.argv[1:])
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(done.exit_code, grown >> 10, repr(done.stderr))
"""


@pytest.mark.tvm
def test_a_zip_bomb_is_refused_before_it_inflates(sqlite_url, tuned_logs, tmp_path):
    """256 MiB of zeros in 256 KB, checksum right: refused in one line, the peak memory of the process that reads it
    growing by far less than the member. Before: its one line was read whole (growth past 256 MiB, as the audit's
    1 GB bomb took a server from 260 MB to 2.3 GB)."""
    bomb = tmp_path / "bomb.bundle"
    real = _real_bundle(Env(tmp_path, sqlite_url, tuned_logs.work_dir))
    bomb.write_bytes(_bomb(256 << 20, "workloads.jsonl")(real.read_bytes()))
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, "--db", sqlite_url, "import", str(bomb)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    code, grown_mib, stderr = done.stdout.split(" ", 2)
    lines = ast.literal_eval(stderr).splitlines()
    assert int(grown_mib) < 64, done.stdout + done.stderr
    assert code == "1" and len(lines) == 1 and "times the" in lines[0], done.stdout
