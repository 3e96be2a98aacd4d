"""Make an ONNX file importable at fixed input shapes: pin the symbolic dimensions, fold the shape arithmetic.

Files exported by PyTorch or Paddle compute Reshape targets at run time (``Shape -> Gather -> Concat``). Once the
input shapes are fixed those values are constants, but TVM's Relax importer only accepts a constant new shape
("Reshape requires the input new shape to be Shape"). Here every node whose inputs are all known is evaluated with
ONNX's reference implementation and replaced by an initializer, in rounds with shape inference in between (a folded
Pad or Expand gives its output a static shape, so the Shape node after it folds in the next round). Then, as
onnxruntime does when it loads a model, an inference ``BatchNormalization`` after a convolution is folded into its
weights and bias (``_batch_norms_into_convs``). Nothing here imports TVM.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from registry.errors import BadInputError

# Folding stops at values bigger than this many elements: shape arithmetic is tiny, and evaluating weight transforms
# here would only copy the weights.
MAX_FOLDED_ELEMENTS = 1 << 16
# One model input's size, at most: 2 GiB is a batch of 170 1024x1024 RGB images in float32. Past it, measuring the
# model needs more memory than the machines that tune hold, and TVM indexes some buffers with 32 bits.
MAX_INPUT_BYTES = 2 << 30
MAX_FOLD_ROUNDS = 16
# Nodes that are never evaluated here, even on constant inputs: random values must stay random (Dropout is random
# when its training_mode input is true), and sequence and optional values are not tensors an initializer can hold.
NOT_FOLDABLE = {
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout",
    "If", "Loop", "Scan", "Optional", "OptionalGetElement", "OptionalHasElement",
}  # fmt: skip


def parse_input_shapes(specs: list[str] | tuple[str, ...]) -> dict[str, list[int]]:
    """``["x=1,3,224,224", "mask=1,128"]`` -> ``{"x": [1, 3, 224, 224], "mask": [1, 128]}``."""
    shapes: dict[str, list[int]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shape = [int(d) for d in dims.split(",")]
            if any(d <= 0 for d in shape):
                raise ValueError
        except ValueError:
            raise BadInputError(f"--input-shape {spec!r}: expected NAME=D1,D2,... with positive integers") from None
        shapes[name] = shape
    return shapes


def check_opset(model: onnx.ModelProto, where: str) -> None:
    """Refuse an operator set newer than the installed onnx package defines: nothing can say what its operators
    mean (TVM's importer would read them as the newest it knows)."""
    newest = onnx.defs.onnx_opset_version()
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > newest:
            raise BadInputError(f"{where}: ONNX opset {opset.version}, but the newest this onnx knows is {newest}")


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real inputs: old exporters also list every initializer as a graph input."""
    weights = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in weights]


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    shape = value.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in shape.dim]


def _has_rank(value: onnx.ValueInfoProto) -> bool:
    return value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape")


def input_dtypes(model: onnx.ModelProto) -> dict[str, str]:
    """Each real input's element type as a numpy dtype name ("float32", "int64", ...)."""
    return {
        i.name: str(helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
        for i in graph_inputs(model)
        if i.type.HasField("tensor_type")
    }


def fixed_input_shapes(model: onnx.ModelProto, given: dict[str, list[int]]) -> dict[str, list[int]]:
    """Every input's shape: from ``given`` where named, else from the file, which must then be fully static."""
    for value in graph_inputs(model):
        if not _has_rank(value) and value.name not in given:
            raise BadInputError(
                f"input {value.name!r} has no declared shape (not even its rank); give it with --input-shape "
                f"{value.name}=D1,D2,..."
            )
    inputs = {i.name: _dims(i) for i in graph_inputs(model)}
    unknown = sorted(set(given) - set(inputs))
    if unknown:
        raise BadInputError(f"--input-shape names {', '.join(unknown)}, but the model's inputs are {_listing(inputs)}")
    shapes = {}
    for name, dims in inputs.items():
        if name in given:
            if dims and len(given[name]) != len(dims):
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
    dtypes = input_dtypes(model)
    for name, shape in shapes.items():
        size = math.prod(shape) * np.dtype(dtypes.get(name, "float32")).itemsize
        if size > MAX_INPUT_BYTES:
            raise BadInputError(
                f"input {name!r} at {_shape_text(shape)} holds {size / 2**30:.3g} GiB; an input may hold at most "
                f"{MAX_INPUT_BYTES >> 30} GiB (give a smaller --input-shape)"
            )
    return shapes


def _shape_text(dims: list[int | str]) -> str:
    return "x".join(str(d) for d in dims) or "scalar"


def _listing(inputs: dict[str, list[int | str]]) -> str:
    return ", ".join(f"{n} ({_shape_text(d)})" for n, d in inputs.items())


def prepare(model: onnx.ModelProto, shapes: dict[str, list[int]], where: str = "model") -> onnx.ModelProto:
    """A copy of ``model`` with its inputs pinned to ``shapes`` and its constant subgraphs folded."""
    model = _pin_inputs(model, shapes)
    # Folding and shape inference feed each other: a folded Expand or Reshape target gives its output a static shape,
    # which lets the next Shape node fold (HF exports need a few rounds). Stop when a round folds nothing.
    for _ in range(MAX_FOLD_ROUNDS):
        del model.graph.value_info[:]  # a folded value's inferred shape would shadow its initializer's
        try:
            model = shape_inference.infer_shapes(model, data_prop=True)
        except Exception as e:  # noqa: BLE001 - onnx raises its own kinds for an inconsistent graph
            raise BadInputError(
                f"{where}: the shapes do not check at these input shapes: {str(e).splitlines()[0]}"
            ) from None
        before = len(model.graph.node)
        model = _fold_constants(model)
        if len(model.graph.node) == before:
            break
    before = len(model.graph.node)
    model = _batch_norms_into_convs(model)
    if len(model.graph.node) < before:  # the shapes inferred for the values no node makes now go
        del model.graph.value_info[:]
        model = shape_inference.infer_shapes(model, data_prop=True)
    return model


def _batch_norms_into_convs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every inference ``BatchNormalization`` whose input is a ``Conv`` read by nothing else folded into
    that convolution: weights scaled per output channel by ``scale / sqrt(var + eps)``, and the shift added to its
    bias. TVM imports a batch norm as a kernel of its own, a pass over the activation that also keeps the activation
    after it (PaddleOCR's hard-swish) out of the convolution's kernel; onnxruntime folds it at session start."""
    graph = model.graph
    known, readers, outputs = _index(graph)
    made = {o: node for node in graph.node for o in node.output}
    folded, new_inits = [], []
    for bn in graph.node:
        conv = made.get(bn.input[0]) if bn.op_type == "BatchNormalization" and bn.domain in ("", "ai.onnx") else None
        if conv is None or not _foldable(bn, conv, known, readers, outputs):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
        scale, shift, mean, var = (numpy_helper.to_array(known[n]).astype(np.float64) for n in bn.input[1:5])
        factor = scale / np.sqrt(var + attrs.get("epsilon", 1e-5))
        weight = numpy_helper.to_array(known[conv.input[1]])
        bias = numpy_helper.to_array(known[conv.input[2]]) if len(conv.input) > 2 and conv.input[2] else 0.0
        per_channel = factor.reshape(-1, *[1] * (weight.ndim - 1))
        stem = f"{conv.output[0]}.bn_folded"
        new_inits += [
            numpy_helper.from_array((weight * per_channel).astype(weight.dtype), f"{stem}.weight"),
            numpy_helper.from_array(((bias - mean) * factor + shift).astype(weight.dtype), f"{stem}.bias"),
        ]
        del conv.input[1:]
        conv.input.extend([f"{stem}.weight", f"{stem}.bias"])
        conv.output[0] = bn.output[0]
        folded.append(bn)
    graph.initializer.extend(new_inits)
    return _without(model, folded)


def _foldable(bn, conv, known, readers, outputs) -> bool:
    """Whether ``bn`` normalizes ``conv``'s output alone, in inference mode, with constants throughout."""
    if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or len(readers.get(conv.output[0], [])) != 1:
        return False
    if conv.output[0] in outputs or any(name for name in bn.output[1:]):  # training mode's running statistics
        return False
    if any(a.name == "training_mode" and a.i for a in bn.attribute):
        return False
    constants = [*bn.input[1:5], *[n for n in conv.input[1:] if n]]
    if len(bn.input) != 5 or not all(n in known for n in constants):
        return False
    weight = known[conv.input[1]]  # its header only: the caller converts the values it folds
    floating = helper.tensor_dtype_to_np_dtype(weight.data_type).kind == "f"
    # one statistic per output channel (before opset 9, ``spatial=0`` normalized every element on its own)
    return floating and all(list(known[n].dims) == list(weight.dims[:1]) for n in bn.input[1:5])


def _index(graph: onnx.GraphProto):
    """The graph's initializers by name, the nodes that read each value, and the names of its outputs."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in _names_read(node):
            readers.setdefault(name, []).append(node)
    return {t.name: t for t in graph.initializer}, readers, {o.name for o in graph.output}


def _without(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    """``model`` without ``nodes``, and without the initializers nothing reads once they are gone."""
    if not nodes:
        return model
    graph = model.graph
    for node in nodes:
        graph.node.remove(node)
    _drop_unread_initializers(graph, _values_read(graph))
    return model


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
    # Shapes recorded by the exporter for intermediates and outputs may be symbolic, or fixed at other input shapes:
    # inference recomputes them from the pinned inputs.
    del pinned.graph.value_info[:]
    for value in pinned.graph.output:
        if value.type.HasField("tensor_type"):
            value.type.tensor_type.ClearField("shape")
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
    opsets = list(model.opset_import)
    kept: list[onnx.NodeProto] = []
    for node in graph.node:
        values = _evaluate(node, known, shapes, opsets)
        if values is None:
            kept.append(node)
        else:
            known.update(values)
    if len(kept) == len(graph.node):
        return model
    del graph.node[:]
    graph.node.extend(kept)
    read = _values_read(graph)
    _drop_unread_initializers(graph, read)  # those only folded nodes read (onnxruntime warns of each)
    graph.initializer.extend(numpy_helper.from_array(known[n], n) for n in known if n not in initial and n in read)
    return model


def _values_read(graph: onnx.GraphProto) -> set[str]:
    """The values the graph's nodes read, and its outputs and inputs (old exporters list initializers as inputs too:
    those stay)."""
    read = {name for node in graph.node for name in _names_read(node)}
    return read | {o.name for o in graph.output} | {i.name for i in graph.input}


def _drop_unread_initializers(graph: onnx.GraphProto, read: set[str]) -> None:
    for i in reversed(range(len(graph.initializer))):
        if graph.initializer[i].name not in read:
            del graph.initializer[i]


def _names_read(node: onnx.NodeProto):
    """The values a node reads, including those read inside its subgraphs (If branches, Loop and Scan bodies)."""
    yield from node.input
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            for inner in sub.node:
                yield from _names_read(inner)


def _evaluate(
    node: onnx.NodeProto, known: dict[str, np.ndarray], shapes: dict[str, list[int]], opsets: list
) -> dict[str, np.ndarray] | None:
    """The node's outputs if they can be computed now, else None."""
    if node.domain not in ("", "ai.onnx") or node.op_type in NOT_FOLDABLE or node.op_type.startswith("Sequence"):
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
    if sum(known[n].size for n in inputs) > MAX_FOLDED_ELEMENTS:
        return None
    if any(math.prod(shapes[o]) > MAX_FOLDED_ELEMENTS for o in node.output if o in shapes):
        return None  # e.g. a large ConstantOfShape or Expand: not shape arithmetic, and costly to hold here
    feeds = {name: known[name] for name in inputs}
    try:
        with np.errstate(all="ignore"):  # e.g. T5's log of relative positions: -inf where a later Where drops it
            if node.op_type == "GatherElements":
                results = [_gather_elements(node, *(known[name] for name in node.input))]
            else:
                results = _reference(node, feeds, opsets).run(None, feeds)
    except Exception:  # noqa: BLE001 - anything the reference cannot evaluate is left for TVM to import
        return None
    if not all(isinstance(r, np.ndarray) and r.size <= MAX_FOLDED_ELEMENTS for r in results):
        return None
    return {name: r for name, r in zip(node.output, results, strict=False) if name}


def _reference(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opsets: list) -> ReferenceEvaluator:
    """An evaluator of one node at the model's opsets (given a bare node, the reference uses the newest opset, and
    e.g. Softmax changed meaning at opset 13)."""
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()
    ]
    outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    return ReferenceEvaluator(helper.make_model(graph, opset_imports=opsets))


def _gather_elements(node: onnx.NodeProto, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """GatherElements, which ONNX's reference gets wrong when the gathered axis has 64 or more entries (it uses
    np.choose, limited to 64 choices, then falls back to code that fails). HF BERT's buffered token type ids hit it."""
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    return np.take_along_axis(data, np.where(indices < 0, indices + data.shape[axis], indices), axis=axis)
