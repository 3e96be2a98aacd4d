"""ONNX models into Relax modules."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import onnx
from tvm.ir import IRModule
from tvm.relax.frontend.onnx import from_onnx

from registry.errors import BadInputError


@dataclass
class LoadedModel:
    name: str
    sha256: str
    input_shapes: dict[str, list[int]]
    mod: IRModule  # as from_onnx returns it: compile_relax needs this one, not the zero-pipelined module


def load_onnx(source: Path | bytes, input_shapes: dict[str, list[int]], name: str | None = None) -> LoadedModel:
    """Parse an ONNX file (or its bytes) and import it at fixed input shapes. Raises BadInputError on a bad file."""
    data = source if isinstance(source, bytes) else _read(source)
    try:
        model = onnx.load_model_from_string(data)
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - protobuf and onnx raise many kinds for a corrupt file
        raise BadInputError(f"{name or source}: not a valid ONNX model ({str(e).splitlines()[0][:200]})") from None
    try:
        mod = from_onnx(model, shape_dict=input_shapes, keep_params_in_input=False)
    except Exception as e:  # noqa: BLE001
        raise BadInputError(
            f"{name or source}: TVM cannot import this model: {str(e).strip().splitlines()[-1]}"
        ) from None
    label = name or (source.stem if isinstance(source, Path) else model.graph.name or "model")
    return LoadedModel(label, hashlib.sha256(data).hexdigest(), dict(input_shapes), mod)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise BadInputError(f"{path}: cannot read ({e.strerror})") from None
