"""Valid inputs for an ONNX model: each graph input's dtype and value range, and seeded arrays drawn from them.

Random integers are not valid token ids: an id past the vocabulary makes onnxruntime fail and TVM's ``take`` ("fast"
mode) read out of bounds or crash. So an integer input that reaches the ``indices`` of a ``Gather`` whose data is an
initializer (an embedding table), directly or through shape-preserving operators, is drawn from
``[0, data.shape[axis])``; other integer inputs (attention masks, token types) are ones; floats are standard normal.
onnxruntime's reference timings and TVM's end-to-end timings use the same arrays. Nothing here imports TVM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from registry.tvm_side.onnx_prep import graph_inputs

# Operators an index flows through unchanged in value (the ids keep their range): Gather's indices may be reached
# from the graph input through any chain of these.
PASS_THROUGH = {"Cast", "Unsqueeze", "Reshape", "Squeeze", "Flatten", "Expand", "Identity"}


@dataclass(frozen=True)
class Bound:
    """Integer values are drawn uniformly from [low, high): a model input's, or a kernel argument's
    (``registry.measure.inputs`` finds those in the kernel itself)."""

    low: int
    high: int


ZEROS = Bound(0, 1)
ONES = Bound(1, 2)


@dataclass(frozen=True)
class ModelInput:
    """One input of a model; integers drawn from ``bound``, floats from a standard normal distribution."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    bound: Bound | None = None

    def as_json(self) -> dict[str, Any]:
        bound = None if self.bound is None else [self.bound.low, self.bound.high]
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "bound": bound}


@dataclass(frozen=True)
class InputSpec:
    """One graph input: ``kind`` is "index" (uniform integers in [low, high)), "ones" or "normal"."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name
    kind: str
    low: int = 0
    high: int = 1


def input_specs(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> list[InputSpec]:
    """Every real graph input, in graph order, at ``shapes`` (all inputs must be named there, as
    ``onnx_prep.fixed_input_shapes`` returns them)."""
    bounds = _index_bounds(model)
    specs = []
    for value in graph_inputs(model):
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        shape = tuple(shapes[value.name])
        if dtype.kind in "iu":
            if value.name in bounds:
                specs.append(InputSpec(value.name, shape, dtype.name, "index", 0, bounds[value.name]))
            else:
                specs.append(InputSpec(value.name, shape, dtype.name, "ones", 1, 2))
        elif dtype.kind == "b":
            specs.append(InputSpec(value.name, shape, dtype.name, "ones", 1, 2))
        else:
            specs.append(InputSpec(value.name, shape, dtype.name, "normal"))
    return specs


def make_inputs(specs: list[InputSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """Arrays for ``specs``, the same for the same seed."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in specs:
        if spec.kind == "index":
            out[spec.name] = rng.integers(spec.low, spec.high, size=spec.shape).astype(spec.dtype)
        elif spec.kind == "ones":
            out[spec.name] = np.ones(spec.shape, dtype=spec.dtype)
        else:
            out[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
    return out


def _index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """Graph input -> the smallest ``data.shape[axis]`` of the initializer Gathers its values reach as indices."""
    graph = model.graph
    tables = {t.name: list(t.dims) for t in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    bounds: dict[str, int] = {}
    for value in graph_inputs(model):
        seen, frontier = {value.name}, [value.name]
        while frontier:
            name = frontier.pop()
            for node in consumers.get(name, []):
                if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
                    dims = tables.get(node.input[0])
                    if dims:
                        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                        size = dims[axis % len(dims)]
                        bounds[value.name] = min(bounds.get(value.name, size), size)
                elif node.op_type in PASS_THROUGH and node.input[0] == name:
                    for out in node.output:
                        if out and out not in seen:
                            seen.add(out)
                            frontier.append(out)
    return bounds
