"""The measurement interface with real TVM kernels: in-range inputs, isolation from crashes and hangs, the device
description, and workers that die with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import tvm
from tvm.script import tirx as T

from registry.measure.inputs import argument_bounds
from registry.measure.jobs import module_job
from registry.measure.measurer import Measurer
from registry.measure.pool import WorkerPool
from registry.measure.types import PRECISE
from registry.tvm_side.onnx_inputs import ONES, Bound
from registry.tvm_side.target import host_target

pytestmark = pytest.mark.tvm


@T.prim_func(s_tir=True)
def take(table: T.Buffer((100, 16), "float32"), ids: T.Buffer((8,), "int64"), out: T.Buffer((8, 16), "float32")):
    for j, k in T.grid(8, 16):
        with T.sblock("take"):
            vj, vk = T.axis.remap("SS", [j, k])
            out[vj, vk] = table[ids[vj], vk]


@T.prim_func(s_tir=True)
def take_normalized(
    table: T.Buffer((100, 16), "float32"), ids: T.Buffer((1, 8), "int64"), out: T.Buffer((1, 8, 16), "float32")
):
    # ONNX Gather as TVM imports it: negative indices wrapped first, through an intermediate buffer
    wrapped = T.sblock_alloc_buffer((1, 8), "int64")
    for i, j in T.grid(1, 8):
        with T.sblock("wrap"):
            vi, vj = T.axis.remap("SS", [i, j])
            wrapped[vi, vj] = T.Select(ids[vi, vj] < T.int64(0), ids[vi, vj] + T.int64(100), ids[vi, vj])
    for i, j, k in T.grid(1, 8, 16):
        with T.sblock("take"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            out[vi, vj, vk] = table[wrapped[vi, vj], vk]


@T.prim_func(s_tir=True)
def strided(table: T.Buffer((100, 16), "float32"), ids: T.Buffer((8,), "int32"), out: T.Buffer((8, 16), "float32")):
    for j, k in T.grid(8, 16):
        with T.sblock("take"):
            vj, vk = T.axis.remap("SS", [j, k])
            out[vj, vk] = table[ids[vj] * 2 + 1, vk]


@T.prim_func(s_tir=True)
def masked(x: T.Buffer((8,), "float32"), mask: T.Buffer((8,), "int64"), out: T.Buffer((8,), "float32")):
    for j in range(8):
        with T.sblock("mask"):
            vj = T.axis.remap("S", [j])
            out[vj] = x[vj] * T.Cast("float32", mask[vj])


@T.prim_func(s_tir=True)
def writes_out_of_bounds(x: T.Buffer((16,), "float32"), out: T.Buffer((16,), "float32")):
    for j in range(16):
        with T.sblock("w"):
            vj = T.axis.remap("S", [j])
            out[vj * 100000000] = x[vj]


@T.prim_func(s_tir=True)
def slow(a: T.Buffer((1024, 1024), "float32"), out: T.Buffer((1024, 1024), "float32")):
    for i, j, k, r in T.grid(1024, 1024, 1024, 64):
        with T.sblock("s"):
            vi, vj, vk, vr = T.axis.remap("SSRR", [i, j, k, r])
            with T.init():
                out[vi, vj] = T.float32(0)
            out[vi, vj] = out[vi, vj] + a[vi, vk] * T.float32(vr)


def test_integer_arguments_get_the_range_of_what_they_index():
    assert argument_bounds(take) == [None, Bound(0, 100), None]
    assert argument_bounds(take_normalized) == [None, Bound(0, 100), None]
    assert argument_bounds(strided) == [None, Bound(0, 50), None]  # 2 * 49 + 1 = 99, the last row
    assert argument_bounds(masked) == [None, ONES, None]  # not an index: ones (a mask, never a zero divisor)


def _job(func):
    return module_job(tvm.IRModule({"main": func}), host_target())


def test_an_embedding_lookup_runs_on_in_range_ids():
    with Measurer(host_target()) as measurer:
        [m] = measurer.kernels([_job(take_normalized)])
    # it ran (random ids past the table's 100 rows would read out of bounds) and was timed as PRECISE asks
    assert m.ok and len(m.run_secs) == PRECISE.repeat and all(0 < s < float("inf") for s in m.run_secs), m


def test_a_crashing_kernel_costs_that_measurement_only():
    with Measurer(host_target()) as measurer:
        before, crashed, after = measurer.kernels([_job(take), _job(writes_out_of_bounds), _job(take)])
    assert before.ok and after.ok
    assert not crashed.ok and "crashed (SIGSEGV)" in crashed.error


def test_a_hanging_kernel_is_killed_at_its_timeout(monkeypatch):
    monkeypatch.setattr("registry.measure.measurer.KERNEL_TIMEOUT_S", 3.0)
    with Measurer(host_target()) as measurer:
        start = time.monotonic()
        hung, fine = measurer.kernels([_job(slow), _job(take)])
    assert "timeout: killed after 3 s" in hung.error and fine.ok
    assert time.monotonic() - start < 30


def test_the_measurer_describes_the_device_it_measures_on():
    from registry import hostinfo

    with Measurer(host_target()) as measurer:
        device = measurer.device
    assert device.host_model == hostinfo.cpu_model() and device.tvm_version == hostinfo.tvm_version()
    assert device.num_threads >= 1 and device.kind == "llvm"


def test_the_workers_run_the_thread_count_asked_for():
    with Measurer(host_target(), threads=2) as measurer:
        assert measurer.device.num_threads == 2 and measurer.device.name.endswith("-2t")


def test_a_target_for_another_machine_is_refused_in_one_line():
    from tvm.target import Target

    from registry.errors import BadInputError

    other = Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 2})
    with pytest.raises(BadInputError, match="cannot run there"):
        Measurer(other)


def test_workers_die_with_their_parent_even_after_kill_9(tmp_path):
    """A process that holds a worker pool mid-request is killed with SIGKILL: its workers go within seconds."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from registry.measure.pool import WorkerPool
            pool = WorkerPool(2)
            pool.run([{"op": "describe"}] * 2, at_once=2)
            print(" ".join(str(w.pid) for w in pool._all), flush=True)
            time.sleep(600)
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie is dead, waiting to be reaped by init
    except FileNotFoundError:
        return False


def test_a_closed_pool_leaves_no_process_behind():
    pool = WorkerPool(2)
    pool.run([{"op": "describe"}] * 2, at_once=2)
    workers = list(pool._all)
    pool.close()
    assert all(w.returncode is not None for w in workers)  # reaped
    assert not any(_alive(w.pid) for w in workers)


@T.prim_func(s_tir=True)
def huge(x: T.Buffer((1 << 36,), "float32"), out: T.Buffer((16,), "float32")):
    for j in range(16):
        with T.sblock("h"):
            vj = T.axis.remap("S", [j])
            out[vj] = x[vj]


def test_a_kernel_whose_buffers_exceed_memory_fails_alone():
    """256 GiB of input: the worker's address-space cap makes the allocation fail there, and the run goes on."""
    with Measurer(host_target()) as measurer:
        too_big, fine = measurer.kernels([_job(huge), _job(take)])
    assert not too_big.ok and fine.ok, (too_big, fine)


def test_prestarting_never_grows_a_pool_past_its_size():
    """A process that imports many times prestarts its shared replay pool each time: that must not add a worker (each
    holds a TVM import, about 200 MB) per import. It did, and a test session grew to 100 idle workers."""
    with WorkerPool(2) as pool:
        for _ in range(6):
            pool.prestart({"op": "warm"})
        workers = list(pool._all)
        assert len(workers) == 2
        assert all(r.get("error") is None for r in pool.run([{"op": "warm"}] * 4, at_once=2))
        assert len(pool._all) == 2
    assert all(w.returncode is not None and not _alive(w.pid) for w in workers)  # closed with the pool


@T.prim_func(s_tir=True)
def medium(a: T.Buffer((128, 128), "float32"), b: T.Buffer((128, 128), "float32"), c: T.Buffer((128, 128), "float32")):
    for i, j, k in T.grid(128, 128, 128):
        with T.sblock("c"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                c[vi, vj] = T.float32(0)
            c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_measurements_side_by_side_never_share_a_core(monkeypatch):
    """Jobs of unequal length finish out of order: each one sent must get cores that no job in flight holds. Cores
    fixed per job beforehand (job i on slot i mod 2) put two jobs on one core while the other idled."""
    from registry.measure import pool as pool_module

    in_flight: dict[int, tuple] = {}  # reply fd -> cores
    clashes: list[tuple] = []
    send, read = pool_module.Worker.send, pool_module.Worker.read

    def spy_send(self, request, timeout):
        cores = tuple(request.get("cores") or ())
        if request["op"] == "kernel":
            if cores in in_flight.values():
                clashes.append(cores)
            in_flight[self.fd] = cores
        send(self, request, timeout)

    def spy_read(self):
        reply = read(self)
        if reply is not None:
            in_flight.pop(self.fd, None)
        return reply

    monkeypatch.setattr(pool_module.Worker, "send", spy_send)
    monkeypatch.setattr(pool_module.Worker, "read", spy_read)
    jobs = [_job(medium), _job(take), _job(take), _job(medium), _job(take), _job(take), _job(medium), _job(take)]
    with Measurer(host_target(), threads=1) as measurer:
        results = measurer.screen(jobs)
    assert all(m.ok for m in results), results
    assert not clashes, clashes


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _pipes(pid: int) -> int:
    return sum(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:") for fd in os.listdir(f"/proc/{pid}/fd"))


def test_workers_are_forked_by_the_zygote_and_hold_only_their_own_pipes():
    """Every worker, a crashed one's replacement included, comes from the one process that imported TVM, and holds
    just its request and reply pipes: a worker holding another's request pipe would keep that one from exiting."""
    from registry.measure import zygote

    with Measurer(host_target()) as measurer:
        measurer.kernels([_job(take), _job(take)], at_once=2)
        measurer.kernels([_job(writes_out_of_bounds)])
        workers = list(measurer.pool._all)
        assert workers and all(_parent(w.pid) == zygote.shared()._proc.pid for w in workers)
        assert all(_pipes(w.pid) == 2 for w in workers)


def test_a_dead_zygote_costs_no_request_that_was_not_in_flight():
    """The zygote killed: its workers die with it. An idle worker's death is not blamed on the next request (a
    replayed trace or a candidate would be recorded as a crash): that request goes to a new zygote's worker."""
    import select

    from registry.measure import zygote

    with WorkerPool(2) as pool:
        assert "error" not in pool.call({"op": "warm"})  # one idle worker
        pool.prestart({"op": "warm"})  # and one prestarted, its warm-up answered before the zygote dies
        select.select([pool._warming[0].fd], [], [], 60)
        old = zygote.shared()._proc
        workers = [w.pid for w in pool._all]
        os.kill(old.pid, signal.SIGKILL)
        old.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.05)
        assert len(workers) == 2 and not any(_alive(w) for w in workers)
        assert not any("error" in r for r in pool.run([{"op": "warm"}] * 2, at_once=2))
        assert zygote.shared()._proc.pid != old.pid and not {w.pid for w in pool._all} & set(workers)


def test_a_forked_process_gets_a_zygote_of_its_own():
    """A process forked after measuring must not talk to its parent's zygote over the inherited socket (the two would
    read each other's replies), nor keep it open (the zygote would outlive the parent): the child closes its copy at
    once, its pool works through a zygote of its own, and the parent's still works."""
    from registry.measure import zygote

    with WorkerPool(1) as pool:
        assert "error" not in pool.call({"op": "warm"})
        parents, socket_fd = zygote.shared()._proc.pid, zygote.shared()._sock.fileno()
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                try:
                    os.fstat(socket_fd)
                    ok = False  # still open in the child
                except OSError:
                    ok = True
                with WorkerPool(1) as own:
                    ok = ok and "error" not in own.call({"op": "warm"}) and _parent(own._all[0].pid) != parents
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write)
        answer = os.read(read, 1)
        os.waitpid(child, 0)
        assert answer == b"1"
        assert "error" not in pool.call({"op": "warm"}) and zygote.shared()._proc.pid == parents


def test_workers_for_a_gpu_are_forked_only_by_a_zygote_that_holds_no_gpu_file(monkeypatch):
    """A child forked from a process whose GPU driver is initialized cannot use CUDA (measured on an H100). GPU pools
    (the measurer's, the builder's for a CUDA target) ask the zygote for a checked fork; a zygote that holds a GPU
    device file refuses, and the worker is started by exec instead. CPU pools just fork."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from registry.measure import zygote
    from registry.measure.builder import PersistentBuilder
    from registry.measure.pool import EXEC, FORK, uses_gpu
    from tests.gpu_standin import StandInGpuMeasurer
    from tests.test_cuda_pipeline import CUDA

    assert [k for k in ("cpu", "llvm", "cuda", "rocm", "vulkan") if uses_gpu(k)] == ["cuda", "rocm", "vulkan"]
    with Measurer(host_target()) as cpu, StandInGpuMeasurer(tvm.target.Target(CUDA)) as gpu:
        assert (cpu.pool.gpu, gpu.pool.gpu) == (False, True)
    builder = PersistentBuilder(max_workers=1)
    try:
        builder.build([BuilderInput(tvm.IRModule({"main": take}), tvm.target.Target(CUDA))])
        [worker] = builder._pool._all
        assert builder._pool.gpu and worker.start == FORK and _parent(worker.pid) == zygote.shared()._proc.pid
    finally:
        builder.shutdown()

    def unsafe(*_args, **_kwargs):
        raise zygote.GpuUnsafe("the zygote holds /dev/nvidiactl open")

    monkeypatch.setattr(zygote.Zygote, "spawn", unsafe)
    with WorkerPool(1, gpu=True) as pool:
        assert "error" not in pool.call({"op": "warm"})
        assert pool._all[0].start == EXEC and _parent(pool._all[0].pid) == os.getpid()


def test_the_zygote_keeps_torch_out_and_tells_gpu_files_apart(tmp_path):
    """tvm_ffi imports torch whenever it is installed, and torch's import initializes the GPU's driver: the zygote
    never has it loaded. GPU device files are what the zygote's check looks for among its open files."""
    from registry.measure import zygote
    from registry.measure.gpu_state import gpu_files_open

    with WorkerPool(1) as pool:
        pool.call({"op": "warm"})
        with open(f"/proc/{zygote.shared()._proc.pid}/maps") as f:
            assert "libtorch" not in f.read()
    fds = tmp_path / "fd"
    fds.mkdir()
    for name, target in (("0", "/dev/null"), ("3", "pipe:[77]"), ("4", "/dev/nvidiactl"), ("5", "/dev/dri/card0")):
        os.symlink(target, fds / name)
    assert gpu_files_open(str(fds)) == ["/dev/dri/card0", "/dev/nvidiactl"]


def test_an_exec_started_worker_is_this_process_child_and_dies_as_a_forked_one(tmp_path):
    """Started by exec, a worker is a fresh interpreter, this process's child (no zygote), in its own session, holding
    only its two pipes; a request that crashes it costs that request, and kill -9 of its parent ends it."""
    from registry.measure.pool import EXEC

    with WorkerPool(1, start=EXEC) as pool:
        assert "error" not in pool.call({"op": "describe"})
        [worker] = pool._all
        assert _parent(worker.pid) == os.getpid() and os.getsid(worker.pid) == worker.pid
        assert _pipes(worker.pid) == 2
        with open(f"/proc/{worker.pid}/cmdline", "rb") as f:
            assert b"registry.measure.worker" in f.read()
        from registry.measure.types import QUICK

        kernel = {"op": "kernel", "device": "cpu", "settings": QUICK.as_json()}
        crashed, after = pool.run([{**kernel, "job": _job(writes_out_of_bounds).as_json()},
                                   {**kernel, "job": _job(take).as_json()}])  # fmt: skip
        assert crashed["error"].startswith("crashed (SIG") and "run_secs" in after, (crashed, after)
    script = tmp_path / "parent.py"
    script.write_text(
        "import time\nfrom registry.measure.pool import WorkerPool, EXEC\npool = WorkerPool(1, start=EXEC)\n"
        "pool.call({'op': 'warm'})\nprint(pool._all[0].pid, flush=True)\ntime.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    assert _alive(pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid)


def test_a_gpu_measurer_builds_the_kernels_it_is_given_on_every_core_first():
    """A GPU times one kernel at a time; built in the worker that holds it, N kernels cost N builds in a row (transfer
    on the H100: 27 s for 12 candidates). They are built first, side by side, in a pool as large as the cores; a
    kernel that does not build is reported so and never sent to the GPU. (The GPU is the stand-in's: no GPU here.)"""
    from registry.measure.jobs import kernel_arguments, traced_job
    from tests.gpu_standin import StandInGpuMeasurer
    from tests.test_cuda_pipeline import CUDA

    cuda = tvm.target.Target(CUDA)
    workload = tvm.IRModule({"main": take})
    nowhere = [[["GetSBlock", [], ["no_such_block", "main"], ["b0"]]], []]
    unbuilt = traced_job(tvm.ir.save_json(workload), nowhere, cuda, kernel_arguments(workload))
    with StandInGpuMeasurer(cuda) as measurer:
        from registry.tvm_side.defaults import default_schedule

        good = module_job(default_schedule(tvm.IRModule({"main": take}), cuda), cuda)
        timed = StandInGpuMeasurer.builds
        results = measurer.kernels([good, unbuilt, good])
        assert measurer._builders is not None and measurer._builders.size == len(os.sched_getaffinity(0))
        assert results[0].ok and results[2].ok and results[0].run_secs == results[2].run_secs
        assert not results[1].ok and results[1].error.startswith("its trace does not apply")
        assert StandInGpuMeasurer.builds - timed == 2  # the one that did not build was never timed


def test_torch_kept_out_leaves_libraries_that_look_for_it_working():
    """A process that keeps torch out (the CLI, workers, the zygote) still imports what reads ``sys.modules["torch"]``
    to recognise tensors: SciPy's ``scipy.stats`` (which xgboost imports through scikit-learn) failed on the old
    ``None`` entry, and so did every ``registry tune`` on the GPU machine. ``import torch`` itself still fails, as
    tvm_ffi expects where torch is absent."""
    code = textwrap.dedent(
        """
        import sys
        from registry.measure.gpu_state import keep_torch_out
        keep_torch_out()
        import scipy.stats, tvm
        try:
            import torch
        except ImportError:
            print("torch refused", "torch" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["torch", "refused", "False"]


def test_a_cpu_measurer_builds_a_batch_timed_one_at_a_time_on_every_core_first():
    """Timed one at a time (a transfer's candidates, each task's default), N kernels built in the worker that times
    them are N builds in a row on one core while the others idle. They are built first, side by side, on every core.
    A stored trace is still applied where it is timed (its layout rewrites change the arguments the worker makes), and
    kernels timed side by side build their own."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: nothing to build beside")
    from registry.measure.jobs import kernel_arguments, traced_job
    from registry.measure.types import QUICK
    from registry.tvm_side.defaults import default_schedule

    target = host_target()
    workload = tvm.IRModule({"main": take})
    good = module_job(default_schedule(workload, target), target)
    nowhere = [[["GetSBlock", [], ["no_such_block", "main"], ["b0"]]], []]
    unbuilt = traced_job(tvm.ir.save_json(workload), nowhere, target, kernel_arguments(workload))
    with Measurer(target, threads=1) as measurer:
        assert all(m.ok for m in measurer.kernels([good, good], QUICK, at_once=2))
        assert measurer._builders is None
        results = measurer.kernels([good, unbuilt, good])
        assert measurer._builders is not None and measurer._builders.size == len(os.sched_getaffinity(0))
    assert results[0].ok and results[2].ok and len(results[0].run_secs) == PRECISE.repeat
    assert not results[1].ok and results[1].error.startswith("its trace does not apply"), results[1].error


@pytest.mark.parametrize("enough_s, samples", [(None, 3), (60.0, 3), (1e-9, 1)])
def test_a_model_slower_than_enough_is_sampled_once(enough_s, samples):
    """An untuned detector runs seconds a call: three samples a side of the final model were 24 s of a first
    transfer, for a ratio a percent of noise does not change. A model whose first sample says ``repeat`` samples
    would take more than ``enough_s`` keeps that one; the others are timed in full."""
    from tvm import relax

    from registry.measure.jobs import model_job
    from registry.measure.types import Settings
    from tests.tvm_env import tiny_model

    model = tiny_model()
    executable = relax.build(model.mod, target=host_target())
    settings = Settings(number=1, repeat=3, min_repeat_ms=1, enough_s=enough_s)
    with Measurer(host_target(), threads=1) as measurer, model_job(executable, model.inputs) as job:
        timing = measurer.model(job, settings)
    assert timing.ok and len(timing.run_secs) == samples, timing
