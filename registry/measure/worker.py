"""A measurement worker: the only process in which the registry runs a kernel or a model.

Forked by the zygote (``registry.measure.zygote``) for ``registry.measure.pool``, with a request and a reply pipe. It
reads one request at a time and answers each with one reply; a request it cannot serve gets ``{"error": line}``.
Ops:

- ``describe``: the device this worker measures on (its CPU or GPU, the runtime's threads, TVM's release).
- ``build``: a scheduled module built for a target and linked into a shared library (the builder pool's job); with
  ``trace``, the module is a workload and a stored record's trace is applied to it here first (``registry verify``).
- ``kernel``: a kernel (a built library, or a module built here first, a stored trace applied to it first where the
  job has one) timed on in-range inputs.
- ``model``: a compiled model (a Relax executable's library) timed end to end.
- ``replay``: an unchecked trace replayed on its workload (``registry.tvm_side.replay``), for record validation.

With ``rpc`` in a request, the device is a TVM RPC server's behind a tracker: the library is uploaded and timed
there, and ``describe`` reports the server's device, not this machine's.
"""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import sys
import tempfile
import traceback
from contextlib import contextmanager
from typing import Any

import numpy as np
import orjson

from registry.measure import gpu_state

_HEADER = struct.Struct("<I")
_PR_SET_PDEATHSIG = 1
_rng = np.random.default_rng(0)


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux), and catch a parent that died before this line ran."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (AttributeError, OSError):
        pass  # not Linux: the closed request pipe still ends the loop below
    if os.getppid() != parent:
        os._exit(0)


def _read_exact(fd: int, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _last_line(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "unknown error"


# -- the device ----------------------------------------------------------------------------------------------------


@contextmanager
def _session(rpc: dict | None):
    """An RPC session for one request (None: this machine). Not kept between requests: a session holds its server,
    and the tracker gives a freed server to whichever request waits, another worker's or this one's."""
    if rpc is None:
        yield None
        return
    from tvm import rpc as tvm_rpc

    tracker = tvm_rpc.connect_tracker(rpc["host"], rpc["port"])
    remote = tracker.request(rpc["key"], priority=1, session_timeout=int(rpc.get("session_timeout", 0)))
    try:
        yield remote
    finally:
        del remote  # closing the session frees the server for the tracker


def _device(kind: str, remote):
    import tvm

    return remote.device(kind, 0) if remote is not None else tvm.runtime.device(kind, 0)


def _load(path: str, remote):
    import tvm

    if remote is None:
        return tvm.runtime.load_module(path)
    remote.upload(path)
    return remote.load_module(os.path.basename(path))


def describe(request: dict[str, Any]) -> dict[str, Any]:

    with _session(request.get("rpc")) as remote:
        return _describe(request, remote)


def _describe(request: dict[str, Any], remote) -> dict[str, Any]:
    import tvm

    from registry import hostinfo

    kind = request.get("device", "cpu")
    dev = _device(kind, remote)
    if not dev.exist:
        where = "the RPC server has" if remote is not None else "this machine has"
        return {"error": f"{where} no {kind} device" + ("" if remote else " (measure on one with --rpc HOST:PORT:KEY)")}
    if remote is None:
        threads = int(tvm.get_global_func("runtime.NumThreads")())
        details = {
            "triple": _global(None, "target.llvm_get_system_triple"),
            "mcpu": _global(None, "target.llvm_get_system_cpu"),
        }
        model, version = hostinfo.cpu_model(), hostinfo.tvm_version()
    else:
        threads = int(remote.get_function("runtime.NumThreads")())
        details = {
            "triple": _global(remote, "target.llvm_get_system_triple"),
            "mcpu": _global(remote, "target.llvm_get_system_cpu"),
            "rpc": f"{request['rpc']['host']}:{request['rpc']['port']}:{request['rpc']['key']}",
        }
        model, version = _remote_cpu_model(remote), _remote_tvm_version(remote)
    if kind == "cuda":
        from registry.tvm_side.target import cuda_release, gpu_model

        driver = _nvidia_driver(remote)
        details.update(compute_version=str(dev.compute_version), driver=driver, cuda=cuda_release(dev))
        model = gpu_model(dev, driver)
    return {"kind": kind, "model": model, "threads": threads, "tvm_version": version, "details": details}


def _global(remote, name: str) -> str | None:
    import tvm

    try:
        func = remote.get_function(name) if remote is not None else tvm.get_global_func(name)
        return str(func())
    except Exception:  # noqa: BLE001 - a minimal runtime (the C++ RPC server) has no compiler functions
        return None


def _remote_cpu_model(remote) -> str:
    """The server's CPU name, from its /proc/cpuinfo (the Python RPC server serves absolute paths)."""
    try:
        text = bytes(remote.download("/proc/cpuinfo")).decode("utf-8", "replace")
        for line in text.splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except Exception:  # noqa: BLE001 - no such file there (another OS), or a server that refuses it
        pass
    mcpu = _global(remote, "target.llvm_get_system_cpu")
    return f"rpc cpu {mcpu}" if mcpu else "rpc cpu unknown"


def _remote_tvm_version(remote) -> str:
    from registry import hostinfo

    version = _global(remote, "runtime.GetTVMVersion") or _global(remote, "support.GetLibInfo")
    return hostinfo.release(version) if version and version[0].isdigit() else hostinfo.tvm_version()


def _nvidia_driver(remote) -> str | None:
    """The NVIDIA kernel module's version on the machine that runs the kernels."""
    from registry import hostinfo

    if remote is None:
        return hostinfo.local_nvidia_driver()
    try:
        return hostinfo.nvidia_driver(bytes(remote.download(hostinfo.NVIDIA_DRIVER_FILE)).decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - not an NVIDIA machine, or a server that does not serve the file
        return None


# -- inputs --------------------------------------------------------------------------------------------------------


def _array(shape: list[int], dtype: str, bound: list[int] | None) -> np.ndarray:
    """Random values; an integer argument's from [low, high) of its bound (see registry.measure.inputs)."""
    np_dtype = np.dtype(dtype)
    if np_dtype == np.bool_:
        return _rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(np_dtype, np.integer):
        low, high = bound if bound is not None else (1, 2)
        return _rng.integers(low, high, size=shape, dtype=np.int64).astype(np_dtype)
    return _rng.standard_normal(size=shape, dtype=np.float32).astype(np_dtype)


_args_cache: dict[bytes, list[np.ndarray]] = {}


def _kernel_arrays(args: list, bounds: list) -> list[np.ndarray]:
    """Numpy arrays for a kernel's arguments; the last set is kept, as a task's candidates share their arguments."""
    key = orjson.dumps([args, bounds])
    if key not in _args_cache:
        _args_cache.clear()
        arrays = []
        for arg, bound in zip(args, bounds, strict=True):
            _tag, dtype, shape = arg  # ["TENSOR", dtype, shape], MetaSchedule's ArgInfo JSON
            arrays.append(_array(shape, dtype, bound))
        _args_cache[key] = arrays
    return _args_cache[key]


# -- building and timing -------------------------------------------------------------------------------------------


class TraceError(Exception):
    """A stored trace that does not apply to its workload."""


def _scheduled(module_json: str, trace: list | None):
    """The module; with ``trace``, that trace (postprocessors included) applied to it as compilation applies a
    stored record's. Here, not in the caller: a trace from a log or another registry is unvouched-for input to
    TVM's C++, and a crash it causes must cost this worker only."""
    import tvm

    mod = tvm.ir.load_json(module_json)
    if trace is None:
        return mod
    from registry.tvm_side.apply_trace import as_stored

    sch = as_stored(mod, trace)
    if sch is None:
        raise TraceError("its trace does not apply to its workload")
    return sch.mod


def _compile(scheduled, target_json: str):
    """The scheduled module built for its target, in memory."""
    from tvm.target import Target

    from registry.tvm_side.build import build_module

    return build_module(scheduled, Target(orjson.loads(target_json)))


def _build(scheduled, target_json: str) -> str:
    """The module built and linked into a shared library in a fresh temporary directory."""
    path = os.path.join(tempfile.mkdtemp(prefix="registry-build-"), "kernel.so")
    _compile(scheduled, target_json).export_library(path)
    return path


def build(request: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"artifact": _build(_scheduled(request["module"], request.get("trace")), request["target"])}
    except TraceError as e:
        return {"error": str(e)}
    except Exception as e:  # noqa: BLE001 - TVM raises many kinds for a schedule that does not build
        return {"error": f"build failed: {_last_line(e)}"}


_UNPINNED = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None


def _pin(request: dict[str, Any]) -> None:
    """Run on the request's cores; a request without cores (a GPU kernel, an RPC job) gets every core this worker
    started with again, not the last kernel's slot. Every thread of the process: affinity is per thread on Linux, and
    TVM's pool threads, started under an earlier request, would stay on another slot's cores."""
    if _UNPINNED is None:
        return
    cores = request.get("cores") or _UNPINNED
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:
            pass  # a thread that ended meanwhile


def _evaluate(func, dev, settings: dict[str, Any], args) -> list[float]:
    evaluator = func.time_evaluator(
        func.entry_name if hasattr(func, "entry_name") else "main",
        dev,
        number=settings["number"],
        repeat=settings["repeat"],
        min_repeat_ms=settings["min_repeat_ms"],
        f_preproc="cache_flush_cpu_non_first_arg" if settings.get("cache_flush") else "",
    )
    dev.sync()
    return [float(s) for s in evaluator(*args).results]


def kernel(request: dict[str, Any]) -> dict[str, Any]:
    import tvm

    job, rpc = request["job"], request.get("rpc")
    artifact, rt_mod, args = job.get("artifact"), None, job["args"]
    _pin(request)  # before a build too: the slot's cores are this job's, the previous slot may be another's now
    if artifact is None:
        try:
            scheduled = _scheduled(job["module"], job.get("trace"))
            if job.get("trace") is not None:  # scheduled here: the caller knew only the workload's arguments
                from registry.tvm_side.compile import scheduled_arguments

                args, _bounds = scheduled_arguments((args, job["bounds"]), scheduled)
            if rpc is None:  # timed here, in memory: no library to link and load
                rt_mod = _compile(scheduled, job["target"])
            else:  # an RPC server needs the library file
                artifact = _build(scheduled, job["target"])
        except TraceError as e:
            return {"error": str(e)}
        except Exception as e:  # noqa: BLE001 - TVM raises many kinds for a schedule that does not build
            return {"error": f"build failed: {_last_line(e)}"}
    try:
        with _session(rpc) as remote:
            dev = _device(request.get("device", "cpu"), remote)
            if rt_mod is None:
                rt_mod = _load(artifact, remote)
            args = [tvm.runtime.tensor(a, dev) for a in _kernel_arrays(args, job["bounds"])]
            return {"run_secs": _evaluate(rt_mod, dev, request["settings"], args)}
    except Exception as e:  # noqa: BLE001 - a kernel that fails at run time, or an RPC session that broke
        return {"error": f"run failed: {_last_line(e)}"}
    finally:
        if artifact is not None and job.get("artifact") is None:
            _remove(artifact)


def model(request: dict[str, Any]) -> dict[str, Any]:
    import tvm
    from tvm import relax

    job = request["job"]
    try:
        _pin(request)
        with _session(request.get("rpc")) as remote:
            dev = _device(request.get("device", "cpu"), remote)
            vm = relax.VirtualMachine(_load(job["artifact"], remote), dev)
            inputs = [tvm.runtime.tensor(_array(i["shape"], i["dtype"], i["bound"]), dev) for i in job["inputs"]]
            s = request["settings"]

            def samples(repeat: int) -> list[float]:  # each timer runs the model once more first, untimed
                timer = vm.time_evaluator(
                    "main", dev, number=s["number"], repeat=repeat, min_repeat_ms=s["min_repeat_ms"]
                )
                return [float(t) for t in timer(*inputs).results]

            if not s.get("enough_s") or s["repeat"] < 2:
                return {"run_secs": samples(s["repeat"])}
            first = samples(1)
            if first[0] * s["repeat"] > s["enough_s"]:
                return {"run_secs": first}
            return {"run_secs": first + samples(s["repeat"] - 1)}
    except Exception as e:  # noqa: BLE001
        return {"error": f"run failed: {_last_line(e)}"}


def _remove(artifact: str) -> None:
    import shutil

    shutil.rmtree(os.path.dirname(artifact), ignore_errors=True)


def replay(request: dict[str, Any]) -> dict[str, Any]:
    from registry.tvm_side.replay import serve

    return serve(request)


def warm(request: dict[str, Any]) -> dict[str, Any]:
    """Answer once started: a prestarted worker's first request. TVM is imported already where the zygote could
    import it; this imports it otherwise."""
    import tvm  # noqa: F401

    return {}


OPS = {"describe": describe, "build": build, "kernel": kernel, "model": model, "replay": replay, "warm": warm}


def serve(request_fd: int, reply_fd: int) -> None:
    while True:
        header = _read_exact(request_fd, _HEADER.size)
        if header is None:
            return  # the parent closed the pipe, or died
        (n,) = _HEADER.unpack(header)
        body = _read_exact(request_fd, n)
        if body is None:
            return
        try:
            request = orjson.loads(body)
            reply = OPS[request["op"]](request)
        except Exception:  # noqa: BLE001 - a bug here must not look like a crash of the kernel
            reply = {"error": f"worker error: {_last_line(traceback.format_exc())}"}
        data = orjson.dumps(reply)
        os.write(reply_fd, _HEADER.pack(len(data)))
        view = memoryview(data)
        while view:
            view = view[os.write(reply_fd, view) :]


MEMORY_ENV = "REGISTRY_WORKER_MEMORY_MB"


def _limit_memory() -> None:
    """Cap this process's address space when asked (CPU measurement): a kernel whose buffers do not fit then fails
    to allocate, in this worker, instead of waking the kernel's OOM killer, which may pick another process. Not for
    a GPU: CUDA reserves far more address space than it uses."""
    limit = os.environ.get(MEMORY_ENV, "")
    if limit.isdigit() and int(limit) > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(limit) << 20, int(limit) << 20))


def forked(
    parent: int, request_fd: int, reply_fd: int, stderr_fd: int | None, env: dict[str, str], cores: list[int] | None
) -> None:
    """A worker's life, in a process just forked by the zygote (``registry.measure.zygote_process``): made what a fresh
    worker would be (its own session, its pool's environment, cores and stderr, the memory cap), then serving."""
    global _UNPINNED
    os.setsid()  # its own process group: a timeout kills what it started too (the compiler a build runs)
    _die_with_parent(parent)
    os.environ.clear()  # before TVM reads any of it: its thread pool starts on the first kernel, here
    os.environ.update(env)
    os.environ.setdefault("TVM_BIND_THREADS", "0")  # the pool gives each measurement its cores; TVM must not re-pin
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # replies go through their own pipe: TVM's prints cannot corrupt them
    os.dup2(devnull if stderr_fd is None else stderr_fd, 2)
    os.close(devnull)
    if cores is not None:
        os.sched_setaffinity(0, cores)
        _UNPINNED = set(cores)
    _limit_memory()
    serve(request_fd, reply_fd)


def main() -> None:
    """A worker's life as a fresh interpreter (``python -m registry.measure.worker REQUEST_FD REPLY_FD PARENT``),
    started by the pool where no zygote can fork it (``registry.measure.pool``): the pool gave it its session,
    environment, cores and standard streams already; TVM is imported on its first request."""
    request_fd, reply_fd, parent = (int(a) for a in sys.argv[1:4])
    gpu_state.keep_torch_out()  # 2-5 s of import a worker never needs (registry.measure.gpu_state)
    os.environ.setdefault("TVM_BIND_THREADS", "0")
    _die_with_parent(parent)
    _limit_memory()
    serve(request_fd, reply_fd)


if __name__ == "__main__":
    main()
