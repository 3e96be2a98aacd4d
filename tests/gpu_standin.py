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
from collections.abc import Sequence

from registry import hostinfo
from registry.measure.measurer import Measurer
from registry.measure.types import MODEL, PRECISE, DeviceDescription, KernelJob, Measurement, ModelJob, Settings

STAND_IN = "stand-in GPU (no GPU on this machine: builds are real, latencies are made up)"


def made_up_seconds(artifact: str, base_us: float) -> tuple[float, ...]:
    """Five samples around a latency drawn from the library's bytes: base_us to 4 x base_us."""
    with open(artifact, "rb") as f:
        digest = hashlib.sha256(f.read()).digest()
    us = base_us * (1 + 3 * int.from_bytes(digest[:4], "little") / 2**32)
    return tuple(us * 1e-6 * (1 + k * 1e-3) for k in range(5))


class StandInGpuMeasurer(Measurer):
    """``Measurer`` for a CUDA target on a machine without a GPU (see the module docstring)."""

    builds = 0  # kernels built for CUDA by every stand-in of this process: a test's evidence that they were

    def _describe(self, threads: int | None) -> DeviceDescription:
        arch = str(self.target.attrs.get("arch", "sm_90"))
        return DeviceDescription(
            kind="cuda",
            model=STAND_IN,
            threads=0,
            tvm_version=hostinfo.tvm_version(),
            details={"compute_version": f"{arch[3]}.{arch[4:]}"},
        )

    def kernels(self, jobs: Sequence[KernelJob], settings: Settings = PRECISE, at_once: int = 1) -> list[Measurement]:
        built = self._built(jobs)
        out = []
        for job, (artifact, error) in zip(jobs, built, strict=True):
            out.append(Measurement((), error) if error else Measurement(made_up_seconds(artifact, 10.0)))
            if artifact is not None and job.artifact is None:
                shutil.rmtree(os.path.dirname(artifact), ignore_errors=True)
        return out

    def _built(self, jobs: Sequence[KernelJob]) -> list[tuple[str | None, str | None]]:
        """(library, None) or (None, why) per job: a job's own library, else its module built here for real."""
        todo = [job for job in jobs if job.artifact is None]
        requests = [{"op": "build", "module": j.module, "target": j.target, "trace": j.trace} for j in todo]
        replies = iter(self.pool.run(requests, at_once=self.pool.size, timeout=120.0))
        out = []
        for job in jobs:
            if job.artifact is not None:
                out.append((job.artifact, None))
                continue
            reply = next(replies)
            if "artifact" in reply:
                type(self).builds += 1
                out.append((reply["artifact"], None))
            else:
                error = reply["error"]
                known = error.startswith(("build failed", "its trace"))
                out.append((None, error if known else f"build failed: {error}"))
        return out

    def model(self, job: ModelJob, settings: Settings = MODEL) -> Measurement:
        return Measurement(made_up_seconds(job.artifact, 200.0))
