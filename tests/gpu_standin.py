"""A stand-in for the GPU, for machines that have none (CI's): a ``Measurer`` whose builds are real and whose
latencies are made up.

Everything up to the GPU itself runs for real: the pipeline extracts the model's tasks, generates and transfers
candidates, builds each one for CUDA in the measurer's workers (nvcc is on CI's machines), commits records through the
registry's one check and compiles the model for CUDA. Only where a GPU would run the kernel does this return a
latency it makes up from the built library's bytes (deterministic: the same code gets the same latency). So a test
using it proves that the CUDA pipeline produces replayable records and a model that compiles, never that anything is
fast. The real path is proven on a GPU: tests marked ``gpu`` and ``make bench-gpu``.
"""

from __future__ import annotations

import hashlib
import os
import shutil

from registry import hostinfo
from registry.measure.measurer import Measurer
from registry.measure.types import MODEL, DeviceDescription, Measurement, ModelJob, Settings

STAND_IN = "stand-in GPU (no GPU on this machine: builds are real, latencies are made up)"


def made_up_seconds(artifact: str, base_us: float) -> tuple[float, ...]:
    """Five samples around a latency drawn from the library's bytes: base_us to 4 x base_us."""
    with open(artifact, "rb") as f:
        digest = hashlib.sha256(f.read()).digest()
    us = base_us * (1 + 3 * int.from_bytes(digest[:4], "little") / 2**32)
    return tuple(us * 1e-6 * (1 + k * 1e-3) for k in range(5))


class StandInGpuMeasurer(Measurer):
    """``Measurer`` for a CUDA target on a machine without a GPU (see the module docstring)."""

    builds = 0  # kernels built for CUDA and "timed" by every stand-in of this process: evidence that they were built

    def _describe(self, threads: int | None) -> DeviceDescription:
        arch = str(self.target.attrs.get("arch", "sm_90"))
        return DeviceDescription(
            kind="cuda",
            model=STAND_IN,
            threads=0,
            tvm_version=hostinfo.tvm_version(),
            details={"compute_version": f"{arch[3]}.{arch[4:]}"},
        )

    def _time(self, requests: list[dict], at_once: int, slots: list[list[int]] | None) -> list[dict]:
        """Where a GPU would run each kernel: a made-up latency of its library, built by the measurer (a GPU's kernels
        are built on every CPU core first), by the tuner's builder, or here for a lone kernel to build."""
        replies = []
        for request in requests:
            job = request["job"]
            artifact = job["artifact"]
            if artifact is None:
                built = self.pool.call({"op": "build", "module": job["module"], "target": job["target"],
                                        "trace": job["trace"]}, timeout=120.0)  # fmt: skip
                if "error" in built:
                    replies.append(built)
                    continue
                artifact = built["artifact"]
            type(self).builds += 1
            replies.append({"run_secs": list(made_up_seconds(artifact, 10.0))})
            if job["artifact"] is None:
                shutil.rmtree(os.path.dirname(artifact), ignore_errors=True)
        return replies

    def model(self, job: ModelJob, settings: Settings = MODEL) -> Measurement:
        return Measurement(made_up_seconds(job.artifact, 200.0))
