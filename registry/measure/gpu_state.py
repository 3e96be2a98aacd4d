"""Whether a process may fork children that use the GPU, and keeping torch from making it one that may not.

A child forked from a process whose CUDA driver is initialized cannot use CUDA (cudaErrorInitializationError), and
TVM can make that happen without running anything on the GPU: ``tvm_ffi`` imports torch whenever it is installed (a
work-around for a Windows symbol clash, its ``__init__`` says), and torch's import opens the GPU's device files.
With torch installed, every child forked after ``import tvm`` fails to use CUDA; with torch kept out, children forked
after importing TVM and the worker's modules use CUDA, and ``import tvm`` takes a fraction of the time
(docs/BENCHMARKS.md, "Evidence behind the code's rules"). No registry process needs torch.

No TVM here.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

# Device files a GPU driver holds open once it is initialized in a process: NVIDIA's (/dev/nvidiactl, /dev/nvidia0,
# /dev/nvidia-uvm), and AMD's (/dev/kfd, /dev/dri/...).
_GPU_FILES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/")


def keep_torch_out() -> None:
    """Make ``import torch`` fail in this process, unless torch is imported already (a user's process: leave it).
    Call before TVM is imported.

    Not by a ``None`` entry in ``sys.modules``: libraries read ``sys.modules["torch"]`` to ask whether a value is a
    torch tensor without importing torch, and SciPy's (1.17, under ``scipy.stats``, which xgboost imports with
    scikit-learn) then takes ``None.Tensor``: every ``registry tune`` on a machine with torch, SciPy and scikit-learn
    would fail at its first prediction. A finder that refuses torch leaves it out of
    ``sys.modules``, as on a machine without it."""
    if "torch" not in sys.modules and not any(isinstance(f, _NoTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoTorch())


class _NoTorch(importlib.abc.MetaPathFinder):
    """Refuses ``torch`` and its submodules with the ImportError that tvm_ffi expects where torch is not installed."""

    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (kept out: registry.measure.gpu_state)")
        return None


def gpu_files_open(fd_dir: str = "/proc/self/fd") -> list[str]:
    """The GPU device files this process holds open: empty for a process whose children may use the GPU."""
    found = []
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return found  # not Linux: nothing to tell by
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue  # closed meanwhile
        if target.startswith(_GPU_FILES):
            found.append(target)
    return sorted(found)
