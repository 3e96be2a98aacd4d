"""A TVM RPC tracker, as ``--rpc HOST:PORT:KEY`` names it: where remote measurements are sent."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from registry.errors import BadInputError, RegistryError

CONNECT_TIMEOUT_S = 10.0  # a tracker on the network answers in milliseconds


@dataclass(frozen=True)
class Tracker:
    host: str
    port: int
    key: str

    @classmethod
    def parse(cls, text: str) -> Tracker:
        """``HOST:PORT:KEY``, e.g. ``127.0.0.1:9190:xeon``."""
        parts = text.rsplit(":", 2)
        if len(parts) != 3 or not parts[1].isdigit() or not 0 < int(parts[1]) < 65536 or not parts[0] or not parts[2]:
            raise BadInputError(f"--rpc expects HOST:PORT:KEY, e.g. 127.0.0.1:9190:xeon; got {text!r}")
        return cls(parts[0], int(parts[1]), parts[2])

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def as_json(self) -> dict:
        return {"host": self.host, "port": self.port, "key": self.key}

    def free_servers(self) -> int:
        """How many servers of this key the tracker has free."""
        from tvm import rpc

        # TVM's client retries a refused connection for a minute, with a warning each time: ask once first.
        try:
            socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as e:
            raise RegistryError(f"cannot reach the RPC tracker at {self.address}: {e.strerror or e}") from None
        try:
            summary = rpc.connect_tracker(self.host, self.port).summary()
        except (OSError, RuntimeError) as e:
            raise RegistryError(f"cannot reach the RPC tracker at {self.address}: {e}") from None
        return int(summary.get("queue_info", {}).get(self.key, {}).get("free", 0))
