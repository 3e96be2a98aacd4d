"""Facts about this machine and this installation, read without importing TVM (``registry lookup`` must stay fast)."""

from __future__ import annotations

import functools
import platform
import re
import socket
from importlib import metadata

# The variable TVM's runtime reads its thread count from, once, when its thread pool starts.
THREADS_ENV = "TVM_NUM_THREADS"
# The most runtime threads the registry runs or files records under: TVM's thread pool aborts the process when it
# cannot start what it is asked for (100,000 did), and no machine it tunes for has more cores.
MAX_THREADS = 1024


def env_threads() -> int | None:
    """``$TVM_NUM_THREADS`` as a thread count, None where it is unset or empty. A value that is no count from 1 to
    MAX_THREADS is refused (BadInputError): records would be filed under a thread count the runtime never ran."""
    import os

    from registry.errors import BadInputError

    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return None
    if not (text.isdigit() and len(text) <= 5 and 1 <= int(text) <= MAX_THREADS):
        raise BadInputError(f"{THREADS_ENV}={text[:20]!r} is not a thread count from 1 to {MAX_THREADS}")
    return int(text)


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name, e.g. "AMD EPYC 9B45": part of a device's fingerprint."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


@functools.cache
def tvm_version() -> str:
    """The installed TVM release, e.g. "0.27.0". Read from package metadata so that TVM is not imported."""
    try:
        return release(metadata.version("apache-tvm"))
    except metadata.PackageNotFoundError:
        return "unknown"


def release(version: str) -> str:
    """ "0.27.0.post1" and "0.27.0" are the same release of TVM's code; ".postN" only re-packages it."""
    m = re.match(r"\d+(\.\d+)*", version)
    return ".".join(m.group(0).split(".")[:3]) if m else version


@functools.cache
def tool_version() -> str:
    try:
        return metadata.version("tvm-registry")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@functools.cache
def hostname() -> str:
    return socket.gethostname()


NVIDIA_DRIVER_FILE = "/proc/driver/nvidia/version"


def nvidia_driver(text: str) -> str | None:
    """The kernel module's version in the text of /proc/driver/nvidia/version: "580.65.06"."""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


def local_nvidia_driver() -> str | None:
    try:
        with open(NVIDIA_DRIVER_FILE, encoding="utf-8") as f:
            return nvidia_driver(f.read())
    except OSError:
        return None


def cuda_arch(compute_version: str) -> str:
    """The arch a CUDA target names for a GPU of this compute capability: "9.0" -> "sm_90"."""
    return "sm_" + compute_version.replace(".", "")


def gpu_identity(name: str, driver: str | None, cuda: str | None) -> str:
    """What a GPU device is filed under: its name, and the driver and CUDA versions its kernels ran with, e.g.
    "NVIDIA H100 80GB HBM3 (driver 580.65.06, CUDA 13.0)"."""
    extra = ", ".join(p for p in (f"driver {driver}" if driver else "", f"CUDA {cuda}" if cuda else "") if p)
    return f"{name} ({extra})" if extra else name
