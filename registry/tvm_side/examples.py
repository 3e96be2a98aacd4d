"""The README's example models (``make examples``): small ONNX files built in code, no download, no TVM.

Run as ``python -m registry.tvm_side.examples [DIR]`` (default ``examples``). It writes:

- ``mlp-sibling.onnx``: the demo's MLP with other shapes (batch 32, 96 -> 192 -> 48 instead of 16, 128 -> 256 -> 64),
  so its tasks are new to the registry but have close donors among the demo's records;
- ``exported-mlp.onnx``: the demo's first layer (128 -> 256, ReLU) as PyTorch exports it: a symbolic batch
  (``--input-shape x=16,128`` fixes it) and a Reshape whose shape is computed at run time. At batch 16 its matmul is
  the demo's own workload, so transfer finds an exact record.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx

from registry.tvm_side import zoo

EXAMPLES = {
    "mlp-sibling.onnx": lambda: zoo.mlp(batch=32, sizes=(96, 192, 48)),
    "exported-mlp.onnx": lambda: zoo.exported_mlp(n_in=128, n_out=256),
}


def write(directory: Path) -> list[Path]:
    """Write every example model into ``directory`` (made if missing); the same files every time."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in EXAMPLES.items():
        path = directory / name
        onnx.save_model(build(), path)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", default="examples", type=Path)
    args = parser.parse_args()
    for path in write(args.directory):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
