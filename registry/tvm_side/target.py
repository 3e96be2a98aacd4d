"""Targets and devices: from TVM's Target to the registry's DeviceSpec."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import tvm
from tvm.target import Target

from registry import hostinfo
from registry.errors import BadInputError
from registry.store.rows import GPU_KINDS, DeviceSpec
from registry.tvm_side.compat import TVM_ERRORS, error_line
from registry.tvm_side.cpus import unpin


def canonical_target(target: Target | dict[str, Any] | str) -> dict[str, Any]:
    """The target as TVM exports it, as a plain dict: the same target always gives the same dict.

    Raises BadInputError for a target TVM does not accept, and for one it accepts but that names no real device
    (see ``target_problem``): either would otherwise become a device row that no measurement can belong to.
    """
    if not isinstance(target, Target):
        try:
            target = Target(_json(target) if isinstance(target, str) else target)
        except TVM_ERRORS as e:
            raise BadInputError(f"not a valid TVM target {_short(target)}: {error_line(e)}") from None
    canon = json.loads(str(target))
    problem = target_problem(canon)
    if problem:
        raise BadInputError(f"not a valid TVM target {_short(canon)}: {problem}")
    return canon


# Target attributes that count something: TVM takes any integer, so "num-cores": -5 would become a device.
_COUNTS = (
    "num-cores",
    "max_num_threads",
    "max_threads_per_block",
    "max_shared_memory_per_block",
    "max_local_memory_per_block",
    "thread_warp_size",
    "registers_per_block",
    "l2_cache_size_bytes",
    "vector-width",
)
_MAX_COUNT = 2**31 - 1
_MAX_CORES = 1 << 16  # no machine that TVM tunes for has more


def target_problem(target: dict[str, Any]) -> str | None:
    """What TVM accepts in a target but no device has: a count that is not positive, or an ``mcpu`` (or
    ``mtriple``) that this LLVM does not know. TVM only logs the latter and compiles for a generic CPU instead."""
    for key in _COUNTS:
        value = target.get(key)
        limit = _MAX_CORES if key == "num-cores" else _MAX_COUNT
        if value is not None and not (isinstance(value, int) and 1 <= value <= limit):
            return f"{key} {value!r} is not a count between 1 and {limit}"
    if target.get("kind") == "llvm":
        from tvm.target import codegen

        triple = target.get("mtriple") or codegen.llvm_get_system_triple()
        cpu = target.get("mcpu")
        with quiet_stderr():  # LLVM prints its own complaint about an unknown triple to fd 2
            known = codegen.llvm_is_valid_cpu(cpu or "generic", triple)
        if not known:
            return f"mcpu {cpu!r} is not a CPU that LLVM knows for {triple}" if cpu else f"LLVM knows no {triple!r}"
    host = target.get("host")
    if isinstance(host, dict) and isinstance(host.get("host"), dict):
        return "its host has a host of its own (a host is the CPU that launches the target's code, and has none)"
    return target_problem(host) if isinstance(host, dict) else None


def _json(text: str) -> Any:
    """A target given as JSON text; BadInputError for what is not JSON, or nests deeper than orjson reads (1,024)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise BadInputError(
            f'--target {_short(text)}: expected "host", "cuda" or a TVM target as JSON, e.g. {{"kind": "llvm"}}'
        ) from None


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Nothing written to fd 2 inside reaches the terminal: LLVM prints its complaints about a target (which may be a
    crafted row's, escapes included) there itself."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if isinstance(value, dict) else repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def host_target(num_cores: int | None = None) -> Target:
    """This machine's CPU as an llvm target, with mcpu and mtriple spelled out.

    The mcpu matters: the same schedule runs faster with its CPU's mcpu than without (docs/BENCHMARKS.md, "Evidence
    behind the code's rules"), so devices key on it.
    """
    from tvm.target import codegen

    return Target(
        {
            "kind": "llvm",
            "mcpu": codegen.llvm_get_system_cpu(),
            "mtriple": codegen.llvm_get_system_triple(),
            "num-cores": num_cores or os.cpu_count() or 1,
        }
    )


def target_from_option(text: str) -> Target:
    """A ``--target`` value: "host" (this CPU), "cuda" (the GPU present, with its arch and limits) or a TVM target as
    JSON. An llvm target without ``num-cores`` gets this machine's."""
    if text == "host":
        return host_target()
    if text == "cuda":
        return cuda_target()
    spec = _json(text)
    if isinstance(spec, dict) and spec.get("kind") == "llvm":
        spec.setdefault("num-cores", os.cpu_count() or 1)
    return Target(canonical_target(spec))


def cuda_target() -> Target:
    """The GPU of this machine as a cuda target: its arch, thread and shared-memory limits, as TVM reads them."""
    dev = tvm.cuda(0)
    if not dev.exist:
        raise BadInputError(
            'this machine has no CUDA GPU: give the target as JSON for the GPU you mean, e.g. --target \'{"kind": '
            '"cuda", "arch": "sm_90"}\' (building and importing need no GPU; measuring needs one, or --rpc)'
        )
    return Target.from_device(dev)


def runtime_threads() -> int:
    """Threads the TVM runtime measures with: ``$TVM_NUM_THREADS``, else what the runtime reports (1 here)."""
    env = hostinfo.env_threads()
    return env if env is not None else running_threads()


def running_threads() -> int:
    """The thread count TVM's runtime in this process actually runs."""
    threads = int(tvm.get_global_func("runtime.NumThreads")())
    unpin()  # asking started TVM's thread pool, which pinned this thread to one core
    return threads


def device_spec(
    target: Target | dict[str, Any] | str, num_threads: int | None = None, host_model: str | None = None
) -> DeviceSpec:
    canon = canonical_target(target)
    if num_threads is None and canon.get("kind") not in GPU_KINDS:  # a GPU's is no part of its device: not asked
        num_threads = runtime_threads()
    return DeviceSpec.of(canon, num_threads or 0, host_model or _default_host_model(canon), hostinfo.tvm_version())


def _default_host_model(target: dict[str, Any]) -> str:
    """This machine's CPU, or its GPU for a GPU target; never this CPU's name for GPU records."""
    if target.get("kind") in GPU_KINDS:
        dev = tvm.cuda(0) if target.get("kind") == "cuda" else None
        if dev is None or not dev.exist:
            raise BadInputError(
                f"these records are for a {target.get('kind')} GPU and this machine has none: say which GPU they were "
                'measured on with --host-model, e.g. --host-model "NVIDIA H100 80GB HBM3"'
            )
        return gpu_model(dev, hostinfo.local_nvidia_driver())
    return hostinfo.cpu_model()


def cuda_release(dev) -> str | None:
    """The CUDA release TVM's runtime was built with, as the device reports it: 13000 -> "13.0"."""
    try:
        version = int(dev.api_version)
        return f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001 - not reported by every runtime
        return None


def gpu_model(dev, driver: str | None) -> str:
    """A CUDA device as the registry names its hardware: its name, the driver and the CUDA release, since records of
    two drivers or CUDA releases must not mix (``registry devices`` shows it)."""
    return hostinfo.gpu_identity(str(dev.device_name), driver, cuda_release(dev))
