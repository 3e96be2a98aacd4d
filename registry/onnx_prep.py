"""Make an ONNX file importable at fixed input shapes: pin the symbolic dimensions, fold the shape arithmetic.

Files exported by PyTorch or Paddle compute Reshape targets at run time (``Shape -> Gather -> Concat``). Once the
input shapes are fixed those values are constants, but TVM's Relax importer only accepts a constant new shape
("Reshape requires the input new shape to be Shape"). Here every node whose inputs are all known is evaluated with
ONNX's reference implementation and replaced by an initializer. Nothing here imports TVM.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from registry.errors import BadInputError

# Folding stops at values bigger than this many elements: shape arithmetic is tiny, and evaluating weight transforms
# here would only copy the weights.
MAX_FOLDED_ELEMENTS = 1 << 16
# Nodes that are never evaluated here, even on constant inputs: random values must stay random.
NOT_FOLDABLE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def parse_input_shapes(specs: list[str] | tuple[str, ...]) -> dict[str, list[int]]:
    """``["x=1,3,224,224", "mask=1,128"]`` -> ``{"x": [1, 3, 224, 224], "mask": [1, 128]}``."""
    shapes: dict[str, list[int]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shape = [int(d) for d in dims.split(",")] if dims.strip() else []
            if any(d <= 0 for d in shape):
                raise ValueError
        except ValueError:
            raise BadInputError(f"--input-shape {spec!r}: expected NAME=D1,D2,... with positive integers") from None
        shapes[name] = shape
    return shapes


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real inputs: old exporters also list every initializer as a graph input."""
    weights = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in weights]


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    shape = value.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in shape.dim]


def fixed_input_shapes(model: onnx.ModelProto, given: dict[str, list[int]]) -> dict[str, list[int]]:
    """Every input's shape: from ``given`` where named, else from the file, which must then be fully static."""
    inputs = {i.name: _dims(i) for i in graph_inputs(model)}
    unknown = sorted(set(given) - set(inputs))
    if unknown:
        raise BadInputError(f"--input-shape names {', '.join(unknown)}, but the model's inputs are {_listing(inputs)}")
    shapes = {}
    for name, dims in inputs.items():
        if name in given:
            if len(given[name]) != len(dims):
                raise BadInputError(
                    f"--input-shape {name}: {len(given[name])} dimensions given, the model's input has {len(dims)} "
                    f"({_shape_text(dims)})"
                )
            shapes[name] = list(given[name])
        elif all(isinstance(d, int) and d > 0 for d in dims):
            shapes[name] = list(dims)
        else:
            raise BadInputError(
                f"input {name!r} has symbolic dimensions ({_shape_text(dims)}); fix them with "
                f"--input-shape {name}={','.join(str(d) if isinstance(d, int) and d > 0 else '1' for d in dims)}"
            )
    return shapes


def _shape_text(dims: list[int | str]) -> str:
    return "x".join(str(d) for d in dims) or "scalar"


def _listing(inputs: dict[str, list[int | str]]) -> str:
    return ", ".join(f"{n} ({_shape_text(d)})" for n, d in inputs.items())


def prepare(model: onnx.ModelProto, shapes: dict[str, list[int]], where: str = "model") -> onnx.ModelProto:
    """A copy of ``model`` with its inputs pinned to ``shapes`` and its constant subgraphs folded."""
    model = _pin_inputs(model, shapes)
    try:
        model = shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:  # noqa: BLE001 - onnx raises its own kinds for an inconsistent graph
        raise BadInputError(
            f"{where}: the shapes do not check at these input shapes: {str(e).splitlines()[0]}"
        ) from None
    return _fold_constants(model)


def _pin_inputs(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    for value in graph_inputs(pinned):
        if value.name not in shapes:
            continue
        tensor_shape = value.type.tensor_type.shape
        del tensor_shape.dim[:]
        for d in shapes[value.name]:
            tensor_shape.dim.add().dim_value = d
    # Intermediate shapes recorded by the exporter may still be symbolic; inference recomputes them from the inputs.
    del pinned.graph.value_info[:]
    return pinned


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    shapes = {}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        dims = _dims(value)
        if value.type.tensor_type.HasField("shape") and all(isinstance(d, int) and d > 0 for d in dims):
            shapes[value.name] = dims
    return shapes


def _fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = model.graph
    known: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    initial = set(known)
    shapes = _static_shapes(model)
    opsets = {o.domain: o.version for o in model.opset_import}
    kept: list[onnx.NodeProto] = []
    for node in graph.node:
        values = _evaluate(node, known, shapes, opsets)
        if values is None:
            kept.append(node)
        else:
            known.update(values)
    if len(kept) == len(graph.node):
        return model
    used = {name for node in kept for name in node.input} | {o.name for o in graph.output}
    new_consts = [numpy_helper.from_array(known[n], n) for n in known if n not in initial and n in used]
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_consts)
    return model


def _evaluate(
    node: onnx.NodeProto, known: dict[str, np.ndarray], shapes: dict[str, list[int]], opsets: dict[str, int]
) -> dict[str, np.ndarray] | None:
    """The node's outputs if they can be computed now, else None."""
    if node.domain not in ("", "ai.onnx") or node.op_type in NOT_FOLDABLE or node.op_type == "If":
        return None
    if node.op_type == "Shape" and node.input[0] in shapes:
        dims = np.asarray(shapes[node.input[0]], dtype=np.int64)
        attrs = {a.name: a.i for a in node.attribute}
        return {node.output[0]: dims[attrs.get("start", 0) : attrs.get("end", len(dims))]}
    if node.op_type == "Size" and node.input[0] in shapes:
        return {node.output[0]: np.asarray(math.prod(shapes[node.input[0]]), dtype=np.int64)}
    inputs = [name for name in node.input if name]
    if not all(name in known for name in inputs):
        return None
    if sum(known[n].size for n in inputs) > MAX_FOLDED_ELEMENTS and node.op_type != "Constant":
        return None
    try:
        evaluator = ReferenceEvaluator(node, opsets=opsets)
        results = evaluator.run(None, {name: known[name] for name in inputs})
    except Exception:  # noqa: BLE001 - anything the reference cannot evaluate is left for TVM to import
        return None
    if any(np.asarray(r).size > MAX_FOLDED_ELEMENTS for r in results) and node.op_type != "Constant":
        return None
    return {name: np.asarray(r) for name, r in zip(node.output, results, strict=False) if name}
