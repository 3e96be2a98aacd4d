"""Persistent worker processes that run one request at a time each, and whose failures stay theirs.

A request is a JSON object sent to a worker (``registry.measure.worker``); the reply is a JSON object. Whatever a
worker does to itself (a segfault in a kernel, an abort, a hang, running out of memory), the caller gets an
``{"error": ...}`` reply for that request, the dead worker is reaped, and a fresh one starts on the next request.

Workers are forked by this process's zygote, which has imported TVM already (``registry.measure.zygote``): a new or
replacement worker costs milliseconds, not TVM's import (a second or two: docs/BENCHMARKS.md, "Evidence behind the
code's rules"). A worker for a GPU
too: a child forked from a process whose GPU driver is initialized cannot use CUDA, and the zygote keeps it
uninitialized and checks that before each such fork (``registry.measure.gpu_state``). Where it cannot vouch for that,
the worker is started by exec instead, a fresh interpreter (``python -m registry.measure.worker``) that imports TVM
itself; ``start=EXEC`` asks for that always.

Either way workers die with this process, ``kill -9`` included (a forked worker gets SIGKILL when its zygote dies, and
the zygote exits when its socket closes; an exec'd worker gets SIGKILL when this process dies), and also exit when
their request pipe closes. Each runs in its own process group, so that a timeout kills what a worker started too (the
compiler the build step runs).

No threads: requests in flight are multiplexed with ``select`` from the calling thread.

No TVM and no pickle here: the framing is a 4-byte length and orjson.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

import orjson

from registry.measure import zygote

_HEADER = struct.Struct("<I")


def signal_name(returncode: int) -> str:
    """``-11`` -> "SIGSEGV"; a plain exit code for a normal exit."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def why_died(returncode: int) -> str:
    """A one-line reason for a worker that died while it worked on a request."""
    name = signal_name(returncode)
    if returncode == -signal.SIGKILL:
        return f"crashed ({name}: killed, likely out of memory)"
    if returncode < 0:
        return f"crashed ({name})"
    return f"worker exited ({name})"


FORK, EXEC = "fork", "exec"
# Device types whose workers use a GPU (target kinds and the measurer's device types alike).
GPU_DEVICES = frozenset({"cuda", "rocm", "vulkan", "metal", "opencl", "gpu"})


def uses_gpu(device_type: str) -> bool:
    """Whether workers whose work is for ``device_type`` ("cpu", "cuda", or a target kind such as "llvm") use a GPU."""
    return device_type in GPU_DEVICES


class _Forked:
    """A worker forked by this process's zygote, and ended by it."""

    start = FORK

    def __init__(self, request_fd: int, reply_fd: int, env: dict[str, str], verbose: bool, gpu: bool) -> None:
        # Ended by the zygote that forked it: if that one died, so did this worker, and a new zygote must not be
        # asked to kill a pid that may belong to another process by now.
        self._zygote = zygote.shared()
        self.pid = self._zygote.spawn(request_fd, reply_fd, env, verbose, gpu)

    def alive(self) -> bool:
        return self._zygote.alive()

    def end(self) -> int:
        try:
            return self._zygote.end(self.pid)
        except zygote.ZygoteError:
            return -signal.SIGKILL  # the zygote died, and its workers with it


class _Execd:
    """A worker started as a fresh interpreter, its own session's leader."""

    start = EXEC

    def __init__(self, request_fd: int, reply_fd: int, env: dict[str, str], verbose: bool, gpu: bool = False) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "registry.measure.worker", str(request_fd), str(reply_fd), str(os.getpid())],
            pass_fds=(request_fd, reply_fd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None if verbose else subprocess.DEVNULL,
            start_new_session=True,  # its own process group, as a forked worker's: a timeout kills what it started
        )
        self.pid = self._proc.pid

    def alive(self) -> bool:
        return True  # it has no zygote to lose; its own death shows on its reply pipe

    def end(self) -> int:
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return self._proc.wait()


class Worker:
    """One worker process, forked by this process's zygote or exec'd (see the module docstring), and its two pipes.
    ``start`` says which it was."""

    def __init__(self, env: dict[str, str], verbose: bool, start: str = FORK, gpu: bool = False) -> None:
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        try:
            try:
                self._process = (_Execd if start == EXEC else _Forked)(req_r, rep_w, env, verbose, gpu)
            except zygote.GpuUnsafe:  # the zygote cannot vouch that its children can use the GPU
                self._process = _Execd(req_r, rep_w, env, verbose)
        except BaseException:
            os.close(self._req_w)
            os.close(self._rep_r)
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.pid, self.start = self._process.pid, self._process.start
        self.returncode: int | None = None  # once ended
        self._buffer = b""
        self.deadline: float | None = None  # while a request is in flight
        self.uses = 0

    @property
    def fd(self) -> int:
        return self._rep_r

    def send(self, request: dict[str, Any], timeout: float) -> None:
        data = orjson.dumps(request)
        try:
            os.write(self._req_w, _HEADER.pack(len(data)))
            _write_all(self._req_w, data)
        except BrokenPipeError:
            pass  # it died already: the read side reports how
        self.deadline = time.monotonic() + timeout

    def read(self) -> dict[str, Any] | None:
        """After select says the reply pipe is readable: the reply if it is complete, else None (more to come).
        Raises EOFError when the worker is gone."""
        chunk = os.read(self._rep_r, 1 << 20)
        if not chunk:
            raise EOFError
        self._buffer += chunk
        if len(self._buffer) < _HEADER.size:
            return None
        (n,) = _HEADER.unpack_from(self._buffer)
        if len(self._buffer) < _HEADER.size + n:
            return None
        reply = orjson.loads(self._buffer[_HEADER.size : _HEADER.size + n])
        self._buffer = self._buffer[_HEADER.size + n :]
        self.deadline = None
        return reply

    def alive(self) -> bool:
        """Whether an idle worker can take a request: its zygote, if it has one, lives (it dies with it) and its
        reply pipe is not at its end (an idle worker writes nothing)."""
        return self._process.alive() and not select.select([self._rep_r], [], [], 0)[0]

    def kill(self) -> str:
        """Kill the worker and what it started, reap it, and say why it died."""
        if self.returncode is None:
            self.returncode = self._process.end()
            for fd in (self._req_w, self._rep_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
        return why_died(self.returncode)

    def close(self) -> None:
        """Ask the worker to exit (its request pipe closes), give it two seconds to, then make sure it did."""
        try:
            os.close(self._req_w)
        except OSError:
            pass
        deadline = time.monotonic() + 2
        try:
            while time.monotonic() < deadline and select.select([self._rep_r], [], [], deadline - time.monotonic())[0]:
                if not os.read(self._rep_r, 1 << 16):
                    break  # its end of the reply pipe closed: it exited
        except OSError:
            pass
        self.kill()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class WorkerPool:
    """Up to ``size`` workers, started when first needed and kept for later requests.

    ``env`` is added to this process's environment for the workers (e.g. the TVM runtime's thread count). ``gpu``:
    their work uses a GPU (``uses_gpu``), so each is forked only from a zygote that can vouch for it (see the module
    docstring); ``start=EXEC`` starts every worker by exec. A worker is replaced after ``max_uses`` requests, a guard
    against slow leaks in what it runs (TVM recycles its own pools).
    """

    def __init__(
        self,
        size: int,
        env: dict[str, str] | None = None,
        *,
        verbose: bool = False,
        max_uses: int | None = None,
        start: str = FORK,
        gpu: bool = False,
    ) -> None:
        self.size = max(1, size)
        self.max_uses = max_uses
        self.env = {**os.environ, **(env or {})}
        self.verbose = verbose
        self.start, self.gpu = start, gpu
        self._idle: list[Worker] = []
        self._all: list[Worker] = []
        self._warming: list[Worker] = []  # started by prestart, still answering their warm-up request

    def prestart(self, request: dict[str, Any], timeout: float = 60.0) -> None:
        """Start a worker now on ``request`` (one that imports what later requests need), without waiting: its start
        overlaps whatever the caller does before its first ``run``. Nothing happens when the pool already has its
        ``size`` workers: a long-lived pool (the shared replay pool of a process that imports many times) would
        otherwise gain a worker per call, each holding a TVM import's memory until the process exits."""
        if len(self._all) >= self.size:
            return
        worker = Worker(self.env, self.verbose, self.start, self.gpu)
        self._all.append(worker)
        worker.send(request, timeout)
        self._warming.append(worker)

    def _worker(self) -> Worker:
        while self._idle or self._warming:
            if self._idle:
                worker = self._idle.pop()
            else:
                worker = self._warming.pop()
                if not self._finish_warming(worker):
                    continue
            if worker.alive():
                return worker
            # It died after its last reply (its zygote was killed): that is not the next request's fault.
            self._retire(worker)
        worker = Worker(self.env, self.verbose, self.start, self.gpu)
        self._all.append(worker)
        return worker

    def _finish_warming(self, worker: Worker) -> bool:
        """Wait for a prestarted worker's warm-up reply; False (and the worker gone) if it died or hung."""
        while worker.deadline is not None:
            readable, _, _ = select.select([worker.fd], [], [], max(0.0, worker.deadline - time.monotonic()))
            try:
                if not readable or worker.read() is not None:
                    break
            except (EOFError, OSError):
                break
        if worker.deadline is None:
            return True
        self._retire(worker)
        return False

    def _retire(self, worker: Worker) -> str:
        self._all.remove(worker)
        return worker.kill()

    def run(
        self,
        requests: Iterable[dict[str, Any]],
        *,
        at_once: int = 1,
        timeout: float = 60.0,
        slots: list[list[int]] | None = None,
    ) -> list[dict]:
        """Replies in request order, at most ``at_once`` requests in flight. A request that outlives ``timeout``
        seconds, or whose worker dies, gets ``{"error": reason}``; its worker is replaced.

        With ``slots`` (one list of cores per request in flight), each request is sent with ``"cores"``: those of a
        slot no other request in flight holds. Chosen when it is sent, not beforehand: requests of unequal length
        finish out of order, and a core list fixed per request would put two of them on one core."""
        pending = list(enumerate(requests))[::-1]
        replies: list[dict | None] = [None] * len(pending)
        busy: dict[int, tuple[Worker, int]] = {}  # reply fd -> (worker, request index)
        limit = max(1, min(at_once, self.size, len(slots) if slots else at_once))
        free_slots = list(range(limit))[::-1]
        slot_of: dict[int, int] = {}  # reply fd -> slot
        try:
            while pending or busy:
                while pending and len(busy) < limit:
                    index, request = pending.pop()
                    worker = self._worker()
                    if slots:
                        slot_of[worker.fd] = free_slots.pop()
                        request = {**request, "cores": slots[slot_of[worker.fd]]}
                    worker.send(request, timeout)
                    busy[worker.fd] = (worker, index)
                now = time.monotonic()
                wait = max(0.0, min(w.deadline for w, _ in busy.values()) - now)
                readable, _, _ = select.select(list(busy), [], [], wait)
                for fd in readable:
                    worker, index = busy[fd]
                    try:
                        reply = worker.read()
                    except (EOFError, OSError):
                        self._release(busy, fd, slot_of, free_slots)
                        replies[index] = {"error": self._retire(worker)}
                        continue
                    if reply is not None:
                        self._release(busy, fd, slot_of, free_slots)
                        replies[index] = reply
                        worker.uses += 1
                        if self.max_uses and worker.uses >= self.max_uses:
                            self._all.remove(worker)
                            worker.close()
                        else:
                            self._idle.append(worker)
                now = time.monotonic()
                for fd, (worker, index) in list(busy.items()):
                    if worker.deadline is not None and now >= worker.deadline:
                        self._release(busy, fd, slot_of, free_slots)
                        self._retire(worker)
                        replies[index] = {"error": f"timeout: killed after {timeout:g} s"}
        except BaseException:
            for worker, _ in busy.values():  # interrupted: a worker mid-request cannot be reused
                self._retire(worker)
            raise
        return [r if r is not None else {"error": "no reply"} for r in replies]

    @staticmethod
    def _release(busy: dict, fd: int, slot_of: dict[int, int], free_slots: list[int]) -> None:
        """A request's worker is done with it (answered, died or timed out): its slot is free again."""
        del busy[fd]
        if fd in slot_of:
            free_slots.append(slot_of.pop(fd))

    def call(self, request: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        return self.run([request], timeout=timeout)[0]

    def close(self) -> None:
        for worker in list(self._all):
            worker.close()
        self._all.clear()
        self._idle.clear()
        self._warming.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
