"""Regenerate the real exported models checked in under tests/fixtures/models/ (tiny, so CI can import them fast).

    .venv/bin/python bench/corpus/make_fixtures.py [--out tests/fixtures/models]

They are exported exactly as the corpus's HF entries are (bench/corpus/hf.py: seeded random weights, torch's
TorchScript exporter), only smaller. tests/fixtures/models/README.md says what each exercises.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import HF, CorpusModel  # noqa: E402

FIXTURES = [
    # Gather embeddings over int64 token ids, erf GELU, an attention mask; its attention reshapes are Shape -> Gather
    # -> Unsqueeze -> Concat -> Reshape chains.
    CorpusModel(
        "bert-tiny",
        "bert",
        HF("BertModel", "BertConfig", {"vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 32}),
        {"input_ids": (1, 16), "attention_mask": (1, 16)},
        "Apache-2.0",
        int_high={"input_ids": 256, "attention_mask": 2},
    ),
    # BatchNormalization kept (exported without constant folding, which would fuse it into the convolutions),
    # depthwise convolutions, and TF-style "same" padding computed at run time (Shape -> ... -> Pad).
    CorpusModel(
        "mobilenetv2-tiny",
        "mobilenet",
        HF("MobileNetV2ForImageClassification", "MobileNetV2Config",
           {"image_size": 32, "depth_multiplier": 0.25, "finegrained_output": False, "num_labels": 10},
           output="logits", opset=13, constant_folding=False),
        {"pixel_values": (1, 3, 32, 32)},
        "Apache-2.0",
    ),
    # Window attention: padding computed at run time (Shape -> Gather -> Mod -> ... -> Pad) and window partitions
    # reshaped through Shape -> Gather -> Concat -> Reshape of the padded value: folding needs several rounds.
    CorpusModel(
        "swin-tiny",
        "swin",
        HF("SwinModel", "SwinConfig", {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": (1, 1),
           "num_heads": (1, 2), "window_size": 4}),
        {"pixel_values": (1, 3, 32, 32)},
        "Apache-2.0",
    ),
]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "models")
    args = parser.parse_args()
    from bench.corpus import hf

    args.out.mkdir(parents=True, exist_ok=True)
    for fixture in FIXTURES:
        path = args.out / f"{fixture.name}.onnx"
        hf.export_model(fixture.origin, fixture.input_shapes, fixture.int_high, path)
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {path.stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
