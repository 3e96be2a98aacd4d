"""Targets and devices: from TVM's Target to the registry's DeviceSpec."""

from __future__ import annotations

import json
import os
from typing import Any

import tvm
from tvm.target import Target

from registry import hostinfo
from registry.errors import BadInputError
from registry.store.rows import DeviceSpec
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
    """A ``--target`` value: a TVM target as JSON. An llvm target without ``num-cores`` gets this machine's."""
    try:
        spec = json.loads(text)
    except ValueError:
        raise BadInputError(
            f'--target {text!r}: expected "host" or a TVM target as JSON, e.g. {{"kind": "llvm"}}'
        ) from None
    if isinstance(spec, dict) and spec.get("kind") == "llvm":
        spec.setdefault("num-cores", os.cpu_count() or 1)
    return Target(canonical_target(spec))


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
    return DeviceSpec(
        target=canon,
        num_threads=num_threads if num_threads is not None else runtime_threads(),
        host_model=host_model or _default_host_model(canon),
        tvm_version=hostinfo.tvm_version(),
    )


def _default_host_model(target: dict[str, Any]) -> str:
    if target.get("kind") == "cuda":
        try:
            dev = tvm.cuda(0)
            if dev.exist:
                return str(dev.device_name)
        except Exception:  # noqa: BLE001 - no CUDA driver here is the normal case
            pass
        return "unknown-gpu"
    return hostinfo.cpu_model()
