"""Export a catalogue ``HF`` entry: a transformers architecture built from a small config with seeded random weights,
exported to ONNX by torch's TorchScript exporter (``torch.onnx.export(..., dynamo=False)``).

The TorchScript exporter is what most ONNX files in the wild came from (optimum and the HF docs used it for years), and
it leaves the run-time shape arithmetic (``Shape -> Gather -> Concat -> Reshape``) that real users' files carry.
Weights do not change kernel speed, shapes do, so seeded random weights stand in for trained ones. The batch and
sequence (or image) dimensions are exported as dynamic axes, as real exports declare them; the catalogue pins them.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import transformers

if TYPE_CHECKING:
    from bench.corpus.origins import HF

SEED = 0


class _Named(torch.nn.Module):
    """Positional inputs to the keyword arguments HF models take (transformers 5 forwards reject positionals beyond
    the first few), one named output tensor out."""

    def __init__(self, model: torch.nn.Module, names: list[str], output: str) -> None:
        super().__init__()
        self.model, self.names, self.output = model, names, output

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(**dict(zip(self.names, args, strict=True))), self.output)


def build(origin: HF) -> torch.nn.Module:
    """The model in eval mode, weights drawn from torch's generator seeded with SEED."""
    config = getattr(transformers, origin.config)(**origin.kwargs)
    torch.manual_seed(SEED)
    model = getattr(transformers, origin.model)(config).eval()
    return model.get_encoder() if origin.encoder else model


def example_inputs(shapes: dict[str, tuple[int, ...]], int_high: dict[str, int]) -> list[torch.Tensor]:
    """Token ids in [0, vocab), masks of ones, floats standard normal; seeded."""
    generator = torch.Generator().manual_seed(SEED)
    out = []
    for name, shape in shapes.items():
        if name == "attention_mask":
            out.append(torch.ones(shape, dtype=torch.int64))
        elif name in int_high:
            out.append(torch.randint(0, int_high[name], shape, dtype=torch.int64, generator=generator))
        else:
            out.append(torch.randn(shape, generator=generator))
    return out


def dynamic_axes(shapes: dict[str, tuple[int, ...]]) -> dict[str, dict[int, str]]:
    """Batch always; the sequence of token inputs and audio; height and width of images."""
    axes: dict[str, dict[int, str]] = {}
    for name, shape in shapes.items():
        if name == "pixel_values":
            axes[name] = {0: "batch", 2: "height", 3: "width"}
        elif name == "input_features":
            axes[name] = {0: "batch"}  # Whisper's encoder requires exactly 2 x max_source_positions frames
        else:
            axes[name] = {0: "batch", len(shape) - 1: "sequence"}
    return axes


def calibrate_batchnorm(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
    """Give every BatchNorm a scale of 1, a shift of 0 and the running statistics of one batch like ``args``.

    transformers initializes BatchNorm scales like weights (about 0.02) and leaves the statistics at mean 0, variance
    1, so activations shrink layer after layer: MobileViT's logits were 1e-42 (denormal floats, which make CPU
    arithmetic many times slower and would distort every timing), MobileNetV2's 1e-25 and EfficientNet's exactly 0.
    Trained networks keep them near unit scale, and so do these after this.
    """
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for norm in norms:
        norm.reset_parameters()  # scale 1, shift 0, statistics reset
        norm.momentum = None  # cumulative average: after one batch, exactly that batch's statistics
        norm.train()
    # A batch of 8 (the inputs repeated, floats redrawn) so that statistics exist where the image is down to 1x1.
    generator = torch.Generator().manual_seed(SEED + 1)
    batch = [
        torch.randn((8, *a.shape[1:]), generator=generator)
        if a.is_floating_point()
        else a.repeat(8, *[1] * (a.dim() - 1))
        for a in args
    ]
    with torch.no_grad():
        module(*batch)
    module.eval()


def export_model(origin: HF, shapes: dict[str, tuple[int, ...]], int_high: dict[str, int], path: Path) -> None:
    names = list(shapes)
    module = _Named(build(origin), names, origin.output)
    args = tuple(example_inputs(shapes, int_high))
    calibrate_batchnorm(module, args)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # TracerWarnings, the exporter's deprecation notice
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=names,
            output_names=[origin.output],
            dynamic_axes=dynamic_axes(shapes),
            opset_version=origin.opset,
            do_constant_folding=origin.constant_folding,
            dynamo=False,
        )
