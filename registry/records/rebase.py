"""A trace moved from one copy of a workload to another whose blocks have other names. No TVM here.

The registry keys a workload by its structural hash, which ignores block and buffer names, so the same matmul from
two models is one workload row, stored with the module of whichever model came first. A trace names the blocks it
schedules (``GetSBlock("lv9")``), so a trace made on one copy does not replay on another (TVM: "Cannot find a block
with the name"). Structurally equal modules have their blocks in the same order, so the n-th block of one is the
n-th block of the other: a trace is moved by renaming what its ``GetSBlock`` instructions ask for, including the
blocks that scheduling derives from one (``lv9_reindex_shared`` from ``lv9``).

``onto_inlined_steps`` moves a trace between two modules that are not structurally equal but differ only in
elementwise steps the trace inlines: the registry's fast softmax and plain TVM's, for ``registry export -o``.
"""

from __future__ import annotations

from typing import Any

import orjson

from registry.store.validation import trace_is_sound

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
    ``T_fast_exp`` where plain TVM's softmax has ``T_softmax_exp``, and its schedules inline both. The source's blocks
    that the target lacks are paired with the target's that the source lacks, from the consumers' end: the trace's
    lookup of each paired one asks for the target's name instead (it is inlined as that one was), and the unpaired
    ones are neither looked up nor inlined. None where the trace is not sound (``validation.trace_is_sound``), a block
    the target lacks is looked up more than once or scheduled otherwise than inlined, or the target has more blocks of
    its own than the source: then the two schedules are not the same."""
    if not trace_is_sound(trace):
        return None
    source, target = block_names(source_json), block_names(target_json)
    if source is None or target is None:
        return None
    only_source = [n for n in source if n not in target]
    only_target = [n for n in target if n not in source]
    if not only_source or len(only_target) > len(only_source):
        return None
    insts, decisions = trace
    fetched: dict[str, list[str]] = {}  # block name -> the variables its lookups give
    uses: dict[str, list[str]] = {}  # variable -> the kinds of the instructions it is an input of
    for kind, inputs, attrs, outputs in insts:
        if kind == "GetSBlock":
            if not (attrs and isinstance(attrs[0], str)):
                return None  # a lookup by no name: TVM would refuse it
            fetched.setdefault(attrs[0], []).extend(outputs)
        for value in inputs:
            if isinstance(value, str):
                uses.setdefault(value, []).append(kind)
    for name in only_source:
        if len(fetched.get(name, [])) != 1 or set(uses.get(fetched[name][0], [])) != {"ComputeInline"}:
            return None
    names = dict(zip(reversed(only_source), reversed(only_target), strict=False))
    dropped = [fetched[n] for n in only_source if n not in names]  # one-item lists, as the instructions hold them
    kept, index = [], {}  # index: an instruction's position in the trace -> in the new one
    for i, (kind, inputs, attrs, outputs) in enumerate(insts):
        if (kind == "GetSBlock" and outputs in dropped) or (kind == "ComputeInline" and inputs[:1] in dropped):
            continue
        index[i] = len(kept)
        renamed = kind == "GetSBlock" and attrs[0] in names  # exactly: a shared block may extend a paired one's name
        kept.append([kind, inputs, [names[attrs[0]], *attrs[1:]] if renamed else attrs, outputs])
    return [kept, [[index[d[0]], *d[1:]] for d in decisions if d[0] in index]]
