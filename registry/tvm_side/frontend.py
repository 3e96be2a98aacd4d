"""ONNX models into Relax modules."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from tvm.ir import IRModule
from tvm.relax.frontend.onnx import from_onnx

from registry.errors import BadInputError
from registry.tvm_side import onnx_prep
from registry.tvm_side.compat import error_line
from registry.tvm_side.onnx_inputs import Bound, InputSpec, ModelInput, input_specs


@dataclass
class LoadedModel:
    name: str
    sha256: str
    input_shapes: dict[str, list[int]]
    input_dtypes: dict[str, str]
    mod: IRModule  # as from_onnx returns it: tvm_side/compile.py's model_passes rewrite it, for tasks and compile
    # Keyword-only: passed by position, bounds once landed in exact_math.
    exact_math: bool = field(default=False, kw_only=True)  # keep erf, exp, tanh, softmax exact (no fast math)
    # Values of the integer inputs: token ids within their embedding table (registry.tvm_side.onnx_inputs), masks ones.
    bounds: dict[str, Bound | None] = field(default_factory=dict, kw_only=True)

    @property
    def inputs(self) -> list[ModelInput]:
        """The model's inputs as the measurer generates them: integers within their bounds (ones by default)."""
        return [
            ModelInput(name, tuple(shape), self.input_dtypes.get(name, "float32"), self.bounds.get(name))
            for name, shape in self.input_shapes.items()
        ]


def load_onnx(
    source: Path | bytes, input_shapes: dict[str, list[int]] | None = None, name: str | None = None
) -> LoadedModel:
    """Parse an ONNX file (or its bytes) and import it at fixed input shapes. Raises BadInputError on a bad file.

    ``input_shapes`` fixes the inputs it names (symbolic dimensions must be fixed); the others keep the file's shapes.
    Shape arithmetic that is constant at these shapes is folded first (see registry.tvm_side.onnx_prep).
    """
    data = source if isinstance(source, bytes) else _read(source)
    where = str(source) if isinstance(source, Path) else name or "model"
    try:
        model = onnx.load_model_from_string(data)
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - protobuf and onnx raise many kinds for a corrupt file
        raise BadInputError(f"{where}: not a valid ONNX model ({str(e).splitlines()[0][:200]})") from None
    label = name or (source.stem if isinstance(source, Path) else model.graph.name or "model")
    onnx_prep.check_opset(model, where)
    shapes = onnx_prep.fixed_input_shapes(model, input_shapes or {})
    model = onnx_prep.prepare(model, shapes, where)
    _check_ops(model, label)  # after folding: an unsupported op on a constant shape path is gone by now
    try:
        mod = from_onnx(model, shape_dict=shapes, keep_params_in_input=False)
    except Exception as e:  # noqa: BLE001
        raise BadInputError(f"{where}: TVM cannot import this model: {error_line(e)}") from None
    bounds = {spec.name: _bound(spec) for spec in input_specs(model, shapes)}
    digest = hashlib.sha256(data).hexdigest()
    return LoadedModel(label, digest, shapes, onnx_prep.input_dtypes(model), mod, bounds=bounds)


def _bound(spec: InputSpec) -> Bound | None:
    """What the measurer draws an input from: token ids within their table, masks ones, floats (None) normal."""
    return None if spec.kind == "normal" else Bound(spec.low, spec.high)


def _check_ops(model: onnx.ModelProto, label: str) -> None:
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    supported = set(_get_convert_map()) | {"Constant", "If"}
    missing = sorted({op for op in _op_types(model.graph) if op not in supported})
    if missing:
        raise BadInputError(f"{label}: TVM's ONNX importer does not support the operator(s) {', '.join(missing)}")


def _op_types(graph: onnx.GraphProto):
    """Every node's operator, including those inside If branches (silero-vad's LSTM is only there: TVM's error for
    it would otherwise be about a shape deep inside the branch)."""
    for node in graph.node:
        yield node.op_type
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                yield from _op_types(sub)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise BadInputError(f"{path}: cannot read ({e.strerror})") from None
