"""Targets and devices: from TVM's Target to the registry's DeviceSpec."""

from __future__ import annotations

import json
import os
from typing import Any

import tvm
from tvm.target import Target

from registry import hostinfo
from registry.errors import BadInputError
from registry.store.rows import GPU_KINDS, DeviceSpec
from registry.tvm_side.compat import TVM_ERRORS, error_line, unpin

THREADS_ENV = "TVM_NUM_THREADS"


def canonical_target(target: Target | dict[str, Any] | str) -> dict[str, Any]:
    """The target as TVM exports it, as a plain dict: the same target always gives the same dict.

    Raises BadInputError for a target TVM does not accept.
    """
    if not isinstance(target, Target):
        try:
            target = Target(json.loads(target) if isinstance(target, str) else target)
        except TVM_ERRORS as e:
            raise BadInputError(f"not a valid TVM target {target!r}: {error_line(e)}") from None
    return json.loads(str(target))


def host_target(num_cores: int | None = None) -> Target:
    """This machine's CPU as an llvm target, with mcpu and mtriple spelled out.

    The mcpu matters: the same schedule ran 10% faster with mcpu=znver4 than without, so devices key on it.
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
    try:
        spec = json.loads(text)
    except ValueError:
        raise BadInputError(
            f'--target {text!r}: expected "host", "cuda" or a TVM target as JSON, e.g. {{"kind": "llvm"}}'
        ) from None
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
    if os.environ.get(THREADS_ENV):
        return int(os.environ[THREADS_ENV])
    return running_threads()


def running_threads() -> int:
    """The thread count TVM's runtime in this process actually runs."""
    threads = int(tvm.get_global_func("runtime.NumThreads")())
    unpin()  # asking started TVM's thread pool, which pinned this thread to one core
    return threads


def device_spec(
    target: Target | dict[str, Any] | str, num_threads: int | None = None, host_model: str | None = None
) -> DeviceSpec:
    canon = canonical_target(target)
    gpu = canon.get("kind") in GPU_KINDS
    return DeviceSpec(
        target=canon,
        # a GPU's latency does not depend on the host runtime's threads: not part of its identity
        num_threads=0 if gpu else num_threads if num_threads is not None else runtime_threads(),
        host_model=host_model or _default_host_model(canon),
        tvm_version=hostinfo.tvm_version(),
    )


def _default_host_model(target: dict[str, Any]) -> str:
    """This machine's CPU, or its GPU for a GPU target; never this CPU's name for GPU records."""
    if target.get("kind") in GPU_KINDS:
        dev = tvm.cuda(0) if target.get("kind") == "cuda" else None
        if dev is None or not dev.exist:
            raise BadInputError(
                f"these records are for a {target.get('kind')} GPU and this machine has none: say which GPU they were "
                'measured on with --host-model, e.g. --host-model "NVIDIA H100 80GB HBM3"'
            )
        cuda = f"{int(dev.api_version) // 1000}.{int(dev.api_version) % 1000 // 10}" if dev.api_version else None
        return hostinfo.gpu_identity(str(dev.device_name), hostinfo.local_nvidia_driver(), cuda)
    return hostinfo.cpu_model()
