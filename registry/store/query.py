"""The filters of a lookup as users type them (``registry lookup``'s options, the server's query parameters), parsed
into what ``LookupFilter`` holds, and which devices ``host`` names. No SQLAlchemy and no TVM: the server and the CLI
check input before any read.
"""

from __future__ import annotations

import json
import re

from registry import hostinfo
from registry.errors import BadInputError
from registry.store.values import DeviceRow


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    """An argument shape as `--shape` and the server's ``shape`` take it: ``1,3,224,224`` or ``1x3x224x224``."""
    if text is None:
        return None
    compact = re.sub(r"\s+", "", text)
    if not re.fullmatch(r"\d+([,x]\d+)*", compact):
        raise BadInputError(f"--shape {text!r}: expected dimensions like 1,3,224,224 or 1x3x224x224")
    dims = re.split(r"[,x]", compact)
    if any(len(d) > 18 for d in dims):  # int() of 5,000 digits is refused by Python itself; no tensor is that big
        raise BadInputError(f"--shape {text[:40]!r}...: a dimension of more than 18 digits is no tensor's")
    return tuple(int(p) for p in dims)


def parse_workload(text: str | None) -> str | None:
    """A structural hash as the registry stores it: a whole number below 2^64, in decimal."""
    if text is None:
        return None
    if not (re.fullmatch(r"\d{1,20}", text) and int(text) < 2**64):
        raise BadInputError(f"--workload {text[:40]!r}: a structural hash is a whole number below 2^64, in decimal")
    return text


def is_host(d: DeviceRow) -> bool:
    """Whether a device is this machine's as ``--device host`` means it: its CPU model and TVM release."""
    return d.host_model == hostinfo.cpu_model() and d.tvm_version == hostinfo.tvm_version()


def host_device(found: list[DeviceRow], measured_here: set[int] = frozenset()) -> list[DeviceRow]:
    """Of this machine's devices, the one(s) ``transfer`` and ``tune`` file records under here: one with records
    this registry measured (``measured_here``: a VM's CPU model names no generation, so a pulled bundle's device of
    another generation, say emeraldrapids against this rocketlake, has the same name), then a target naming its mcpu
    before a generic one (plain TVM's usual target, which an imported log brings), then the runtime thread count
    ``$TVM_NUM_THREADS`` asks for. Without TVM, which alone knows this CPU's mcpu, this is the closest rule."""

    def rank(d: DeviceRow) -> tuple[bool, bool, bool]:
        try:
            target = json.loads(d.target_json)
        except ValueError:
            target = {}
        env = hostinfo.env_threads()
        return d.id in measured_here, bool(target.get("mcpu")), (d.num_threads == env) if env is not None else True

    best = max(rank(d) for d in found)
    return [d for d in found if rank(d) == best]
