"""ONNX models into Relax modules."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.frontend.onnx import from_onnx
from tvm.target import Target

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
    mod: IRModule  # as from_onnx returns it: compile_model fuses it (tvm_side/compile.py), as task_module does
    # Values of the integer inputs: token ids within their embedding table (registry.tvm_side.onnx_inputs), masks ones.
    bounds: dict[str, Bound | None] = field(default_factory=dict)

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
    return LoadedModel(label, hashlib.sha256(data).hexdigest(), shapes, onnx_prep.input_dtypes(model), mod, bounds)


def with_fast_math(loaded: LoadedModel, target: Target) -> LoadedModel:
    """On a CPU, the model with erf, exp, tanh and softmax as TVM's fast approximations (``topi.fast_erf``, ...).

    LLVM lowers ``erf`` to a call of libm's ``erff`` per element, which does not vectorize: 6.4 µs for 1,024
    elements against 0.26 µs for ``fast_erf`` (AMD EPYC, AVX-512). In a GELU transformer that call outweighs the
    matmul it is fused into: tuned at 192 trials, a 2-layer ViT took 1.20 ms exact and 0.79 ms approximated
    (onnxruntime 0.86 ms). The approximations are within 4e-7 of the exact functions (measured over [-12, 12]),
    onnxruntime approximates the same functions, and the models' outputs differ from onnxruntime's no more than the
    exact build's do. On a GPU erf, exp and tanh are fast intrinsics already: the module is left as it is.

    Powers by a constant 2, 3 or 4 become multiplications first (``integer_powers``), for the same reason.
    """
    if target.kind.name != "llvm":
        return loaded
    return replace(loaded, mod=relax.transform.FastMathTransform()(integer_powers(loaded.mod)))


_MAX_POWER = 4  # x**4 is 3 multiplications; beyond that, rounding grows and such exponents are rare in models


def integer_powers(mod: IRModule) -> IRModule:
    """``mod`` with ``power(x, c)`` for a scalar constant c of 2, 3 or 4 written as ``x * x (* x ...)``.

    LLVM keeps ``powf(x, 3.0)`` a call of libm per element, which does not vectorize (it expands only ``pow(x, 2)``
    without fast-math flags): GPT-2's GELU (``0.5x(1 + tanh(k(x + 0.044715x**3)))``, 16,384 elements) took 57.7 µs
    as TVM's only candidate for it, a quarter of the tuned model, where onnxruntime's FastGelu is one fused kernel.
    The product differs from ``powf`` by a rounding or two (a few ulp).
    """
    from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

    base, exponent = wildcard(), is_const()
    pattern = is_op("relax.power")(base, exponent)

    def rewrite(call, matched):
        value = matched[exponent].value.numpy()
        if value.ndim != 0 or float(value) not in range(2, _MAX_POWER + 1):
            return call
        x = product = matched[base]
        for _ in range(int(value) - 1):
            product = relax.op.multiply(product, x)
        return product

    @relax.transform.function_pass(opt_level=0, name="IntegerPowers")
    class IntegerPowers:
        def transform_function(self, func, _mod, _ctx):
            return rewrite_call(pattern, rewrite, func)

    return IntegerPowers()(mod)


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
