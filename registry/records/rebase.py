"""A trace moved from one copy of a workload to another whose blocks have other names. No TVM here.

The registry keys a workload by its structural hash, which ignores block and buffer names, so the same matmul from
two models is one workload row, stored with the module of whichever model came first. A trace names the blocks it
schedules (``GetSBlock("lv9")``), so a trace made on one copy does not replay on another (TVM: "Cannot find a block
with the name"). Structurally equal modules have their blocks in the same order, so the n-th block of one is the
n-th block of the other: a trace is moved by renaming what its ``GetSBlock`` instructions ask for, including the
blocks that scheduling derives from one (``lv9_reindex_shared`` from ``lv9``).
"""

from __future__ import annotations

from typing import Any

import orjson

_BLOCK = "s_tir.SBlock"


def block_names(mod_json: str) -> list[str] | None:
    """The names of a module's blocks, in the order its JSON graph holds them; None if it is not such a graph."""
    try:
        nodes = orjson.loads(mod_json)["nodes"]
        return [nodes[node["data"]["name_hint"]]["data"] for node in nodes if node.get("type") == _BLOCK]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return None


def renaming(source_json: str, stored_json: str) -> dict[str, str] | None:
    """Block name in ``source_json`` -> the same block's name in ``stored_json`` (empty: the names agree); None when
    the two do not pair up block for block, so no trace can be moved."""
    if source_json == stored_json:
        return {}
    source, stored = block_names(source_json), block_names(stored_json)
    if source is None or stored is None or len(source) != len(stored):
        return None
    names: dict[str, str] = {}
    for a, b in zip(source, stored, strict=True):
        if names.setdefault(a, b) != b:
            return None  # one name for two blocks that the other copy tells apart
    return {a: b for a, b in names.items() if a != b}


def rebased(trace: list[Any], names: dict[str, str]) -> list[Any]:
    """``trace`` with every block it gets by name renamed by ``names`` (see ``renaming``)."""
    if not names:
        return trace
    insts, decisions = trace
    return [[_renamed(inst, names) for inst in insts], decisions]


def _renamed(inst: Any, names: dict[str, str]) -> Any:
    if not (isinstance(inst, list) and len(inst) == 4 and inst[0] == "GetSBlock"):
        return inst
    attrs = inst[2]
    if not (isinstance(attrs, list) and attrs and isinstance(attrs[0], str)):
        return inst  # not of the shape TVM writes: the check that follows refuses it
    return [inst[0], inst[1], [_name(attrs[0], names), *attrs[1:]], inst[3]]


def _name(name: str, names: dict[str, str]) -> str:
    if name in names:
        return names[name]
    # a block scheduling made from another ("lv9_reindex_pad_shared" from "lv9"): the longest name it extends
    for old in sorted(names, key=len, reverse=True):
        if name.startswith(old + "_"):
            return names[old] + name[len(old) :]
    return name
