"""Synthetic registry content for tests and benchmarks: fast, deterministic, no TVM.

The module JSON is a placeholder, so these workloads cannot be compiled; they exercise the store, not TVM.
"""

from __future__ import annotations

import json
import random

from registry import hostinfo
from registry.store.rows import DeviceSpec, RecordIn, Signature, WorkloadIn

OPS = ("conv2d", "matmul", "dense", "softmax", "depthwise_conv2d", "pool", "injective")


def device(num_threads: int = 1, mcpu: str = "synthetic") -> DeviceSpec:
    return DeviceSpec(
        target={"kind": "llvm", "keys": ["cpu"], "mcpu": mcpu, "num-cores": 2, "tag": ""},
        num_threads=num_threads,
        host_model="Synthetic CPU",
        tvm_version=hostinfo.tvm_version(),
    )


def workload(i: int) -> WorkloadIn:
    """Workload number ``i``: its op cycles through OPS, its shapes grow with i."""
    op = OPS[i % len(OPS)]
    n = 8 * (1 + i % 64)
    c = 16 * (1 + (i // 64) % 16)
    args = (((1, c, n, n), "float32"), ((c, c, 3, 3), "float32"), ((1, c, n, n), "float32"))
    return WorkloadIn(
        shash=shash(i),
        mod_json=json.dumps({"synthetic": i, "metadata": {"tvm_version": hostinfo.tvm_version()}}),
        args_info=[["TENSOR", dt, list(s)] for s, dt in args],
        signature=Signature(op, f"fused_{op}_add", "SSSSRRR", (1, c, n, n, c, 3, 3), args, 2.0 * n * n * c * c * 9),
        tvm_version=hostinfo.tvm_version(),
    )


# The instructions every synthetic trace shares, as the traces of one design space do.
_INSTS = [["GetSBlock", [], ["conv2d_nchw", "main"], ["b0"]]] + [
    ["SamplePerfectTile", [f"l{k}"], [4, 64], [f"v{k}"]] for k in range(24)
]


def shash(i: int) -> str:
    return str(10**18 + i * 7919)


def trace(i: int, j: int) -> list:
    """A trace shaped like MetaSchedule's, made distinct by its decisions (about 2 KB, as real ones); each decision
    belongs to a sampling instruction and is of its kind, as ``registry.store.validation`` checks."""
    insts = _INSTS
    decisions = [[1, [1 + i, 1 + j, 2, 4]]]
    decisions += [[k + 1, [1 + (i + j + k) % 4, 2, 1 + (j * 31 + k) % 8, 4]] for k in range(1, 24)]
    return [insts, decisions]


def record(i: int, j: int, dev: DeviceSpec, *, failed: bool = False, source: str = "tuned") -> RecordIn:
    rnd = random.Random(i * 1_000_003 + j)
    secs = (1e10,) if failed else tuple(1e-4 * (1 + rnd.random()) for _ in range(3))
    return RecordIn(
        workload=(shash(i), "structural"),
        device=dev,
        trace=trace(i, j),
        run_secs=secs,
        source=source,
        tool_version="test",
        team="synthetic",
        model=f"model{i % 5}",
    )
