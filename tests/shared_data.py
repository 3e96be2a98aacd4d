"""Where the project's shared test data is: ``../shared/data`` beside the checkout, as on the developers' machines
and in CI, or where ``REGISTRY_SHARED_DATA`` points. Tests that need it skip, saying why, when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _find() -> Path:
    if os.environ.get("REGISTRY_SHARED_DATA"):
        return Path(os.environ["REGISTRY_SHARED_DATA"])
    here = Path(__file__).resolve()
    for parent in here.parents:  # the checkout's parent holds shared/, whatever the checkout's folder is called
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return here.parents[2] / "shared" / "data"


SHARED_DATA = _find()
H100_LOG = SHARED_DATA / "ms_bert_src_cuda_h100"
H100_RUNS = SHARED_DATA / "h100_registry_runs"
needs_shared = pytest.mark.skipif(
    not H100_RUNS.is_dir(), reason=f"{SHARED_DATA} (../shared/data, or $REGISTRY_SHARED_DATA) is not here"
)
