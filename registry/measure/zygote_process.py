"""The zygote's process (``python -m registry.measure.zygote_process FD``): imports TVM and the worker's code once,
then forks a worker whenever its client (``registry.measure.zygote``) asks, and reaps it when told to. See the
client's docstring for why, and for what each worker is given.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import Any

import orjson

from registry.measure import gpu_state
from registry.measure.zygote import FDS_PER_WORKER, MAX_MESSAGE


def _fork_worker(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    zygote = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: never return into the zygote's loop
        sock.close()
        from registry.measure import worker

        stderr = fds[2] if len(fds) > 2 else None
        worker.forked(zygote, fds[0], fds[1], stderr, request["env"], request["cores"])
    finally:
        os._exit(0)


def _end(pid: int) -> int:
    for kill in (os.killpg, os.kill):  # its group (it may not have made one yet), then the worker itself
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 0  # not ours, or already reaped
    return os.waitstatus_to_exitcode(status)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gpu_state.keep_torch_out()  # before TVM: its FFI would import torch, which initializes the GPU's driver
    # What every worker needs, imported once here. Importing starts nothing: no thread pool, JIT or device context.
    import tvm  # noqa: F401

    import registry.measure.worker  # noqa: F401
    import registry.tvm_side.apply_trace  # noqa: F401
    import registry.tvm_side.build  # noqa: F401

    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, FDS_PER_WORKER)
        except OSError:
            return
        if not data:
            return  # the registry process closed the socket, or died
        request = orjson.loads(data)
        if request["op"] == "spawn":
            held = gpu_state.gpu_files_open() if request.get("gpu") else []
            try:
                if held:
                    reply = {"error": f"the zygote holds {', '.join(held)} open: its children could not use the GPU"}
                else:
                    reply = {"pid": _fork_worker(sock, request, fds)}
            finally:
                for fd in fds:
                    os.close(fd)
        else:
            reply = {"status": _end(request["pid"])}
        try:
            sock.send(orjson.dumps(reply))
        except OSError:
            return  # the registry process died while it waited for this reply (kill -9): nothing left to tell


if __name__ == "__main__":
    main()
