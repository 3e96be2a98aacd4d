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


def onto_inlined_steps(trace: list[Any], source_json: str, target_json: str) -> list[Any] | None:
    """``trace`` (made on the module ``source_json``) for a module ``target_json`` that computes the same through other
    elementwise steps, each of which the trace inlines: the registry's fast softmax has ``T_softmax_delta`` and
    ``T_fast_exp`` where plain TVM's softmax has ``T_softmax_exp``, and its schedule inlines both. Each block of the
    target only takes the name of a block of the source only (the last first: it is inlined as that one was); the
    source's left over are neither fetched nor inlined. None where a block of one module only is scheduled otherwise
    than inlined, or the target has more of them: then the two schedules are not the same."""
    source, target = block_names(source_json), block_names(target_json)
    if source is None or target is None:
        return None
    only_source = [n for n in source if n not in set(target)]
    only_target = [n for n in target if n not in set(source)]
    if not only_source or len(only_target) > len(only_source):
        return None
    if not (isinstance(trace, list) and len(trace) == 2 and all(isinstance(part, list) for part in trace)):
        return None
    insts, decisions = trace
    fetched: dict[str, str] = {}  # block name -> the variable its GetSBlock gives
    uses: dict[str, list[str]] = {}  # variable -> the kinds of the instructions it is an input of
    for inst in insts:
        if not (isinstance(inst, list) and len(inst) == 4 and all(isinstance(p, list) for p in inst[1:])):
            return None  # not of the shape TVM writes
        kind, inputs, attrs, outputs = inst
        named = kind == "GetSBlock" and attrs and len(outputs) == 1
        if named and isinstance(attrs[0], str) and isinstance(outputs[0], str):
            fetched.setdefault(attrs[0], outputs[0])
        for value in inputs:
            if isinstance(value, str):
                uses.setdefault(value, []).append(kind)
    for name in only_source:
        if name not in fetched or set(uses.get(fetched[name], [])) != {"ComputeInline"}:
            return None
    names = dict(zip(reversed(only_source), reversed(only_target), strict=False))  # from the consumers' end
    dropped = [[fetched[n]] for n in only_source if n not in names]  # one-item lists, as the instructions hold them
    kept, index = [], {}  # index: an instruction's position in the trace -> in the new one
    for i, (kind, inputs, attrs, outputs) in enumerate(insts):
        if (kind == "GetSBlock" and outputs[:1] in dropped) or (kind == "ComputeInline" and inputs[:1] in dropped):
            continue
        index[i] = len(kept)
        kept.append(_renamed([kind, inputs, attrs, outputs], names))
    return [kept, [[index[d[0]], *d[1:]] for d in decisions if isinstance(d, list) and d and _position(d[0], index)]]


def _position(value: Any, index: dict[int, int]) -> bool:
    return type(value) is int and value in index
