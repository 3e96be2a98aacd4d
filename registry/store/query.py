"""The filters of a lookup as users type them (``registry lookup``'s options, the server's query parameters), parsed
into what ``LookupFilter`` holds. No SQLAlchemy and no TVM: the server and the CLI check input before any read.
"""

from __future__ import annotations

import re

from registry.errors import BadInputError


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
