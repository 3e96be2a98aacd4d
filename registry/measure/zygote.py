"""Measurement workers forked from one process that has imported TVM already, instead of each importing it.

Importing TVM takes about a second of a core. A worker started as a fresh interpreter paid it every time: twice when
a measurer starts its two slots, once more for every worker a crashing kernel cost, and again in every builder pool.
The zygote is one process per registry process that imports TVM and the worker's code once, then forks a worker
(milliseconds) whenever the pool asks for one.

- **One job.** The zygote only forks workers and reaps them; it never builds, loads or runs anything, so every worker
  starts from a process in which no TVM thread pool, LLVM JIT or CUDA context exists yet.
- **Safe for the GPU, and checked.** A child forked from a process whose GPU driver is initialized cannot use CUDA.
  The zygote keeps torch out before importing TVM (``tvm_ffi`` imports it if installed, and its import initializes the
  driver: ``registry.measure.gpu_state``), and before forking a worker for a GPU it checks that it holds no GPU
  device file: if it ever does (another library, a future TVM), it refuses, and the pool starts that worker by exec.
- **Nothing is inherited by accident.** Each worker gets the environment, the cores and the stderr its pool asks for,
  in its own session (a timeout kills what it started too), and only its own two pipes: the zygote closes a worker's
  file descriptors once it has forked it, so no worker holds another's pipe open.
- **Exit statuses are not lost.** The zygote reaps a worker only when the pool ends it (``end``): until then a dead
  worker stays a zombie, so its pid is not reused before it is killed, and the pool still learns that it died of a
  SIGSEGV rather than of being killed.
- **Nothing outlives its parent.** A worker is killed when the zygote dies (``PR_SET_PDEATHSIG``); the zygote exits
  when the socket to its registry process closes, which a ``kill -9`` of that process does too.

Requests and replies are single JSON messages on a Unix ``SOCK_SEQPACKET`` socket, with the worker's pipes passed
alongside (``SCM_RIGHTS``). This module is the client, and imports no TVM; the process is
``registry.measure.zygote_process``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from typing import Any

import orjson

MAX_MESSAGE = 1 << 20
FDS_PER_WORKER = 3  # request pipe (read end), reply pipe (write end), and stderr when the pool is verbose


class ZygoteError(RuntimeError):
    """The zygote could not be started, or died."""


class GpuUnsafe(ZygoteError):
    """The zygote holds a GPU device file open: a worker forked from it could not use the GPU."""


class Zygote:
    """The client: asks the zygote process for workers and ends them. Safe to share between threads."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "registry.measure.zygote_process", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal is for the registry process to handle, not for it
        )
        theirs.close()
        self._sock = ours
        self._lock = threading.Lock()

    def spawn(self, request_fd: int, reply_fd: int, env: dict[str, str], verbose: bool, gpu: bool = False) -> int:
        """A new worker serving these pipes (its ends of them; the caller closes its copies), with ``env`` and this
        thread's cores. Returns its pid. ``gpu``: the worker will use the GPU; raises GpuUnsafe when the zygote
        cannot give it one that can."""
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        fds = [request_fd, reply_fd] + ([sys.stderr.fileno()] if verbose and _has_fd(sys.stderr) else [])
        reply = self._ask({"op": "spawn", "env": env, "cores": cores, "gpu": gpu}, fds)
        if "error" in reply:
            raise GpuUnsafe(reply["error"])
        return reply["pid"]

    def end(self, pid: int) -> int:
        """Kill the worker and what it started, reap it, and return how it ended (a negative signal number, as
        ``subprocess`` reports it, or its exit code)."""
        return self._ask({"op": "end", "pid": pid})["status"]

    def _ask(self, request: dict[str, Any], fds: list[int] | None = None) -> dict[str, Any]:
        with self._lock:
            try:
                socket.send_fds(self._sock, [orjson.dumps(request)], fds or [])
                reply = self._sock.recv(MAX_MESSAGE)
            except OSError as e:
                raise ZygoteError(f"the measurement workers' zygote is gone: {e}") from None
        if not reply:
            raise ZygoteError(f"the measurement workers' zygote exited ({self._proc.poll()})")
        return orjson.loads(reply)

    def alive(self) -> bool:
        return self._proc.poll() is None


def _has_fd(stream) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, ValueError):  # pytest's captured streams have none
        return False


_shared: Zygote | None = None
_shared_lock = threading.Lock()


def shared() -> Zygote:
    """This process's zygote, started on first use (and again if it died)."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.alive():
            _shared = Zygote()
        return _shared


def _forget_in_child() -> None:
    """In a child forked from this process: the parent's zygote and socket are the parent's (two processes talking
    over one socket would read each other's replies). The child closes its copy and starts a zygote of its own when it
    needs one."""
    global _shared, _shared_lock
    if _shared is not None:
        _shared._sock.close()
    _shared, _shared_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def start_early() -> None:
    """Start the zygote now, so that its TVM import runs beside whatever this process does before it measures (a
    command's own imports), instead of after."""
    shared()
