"""onnxruntime reference timings for the corpus: what a user gets without TVM, on the same inputs TVM is timed with.

    .venv/bin/python bench/corpus/ort_reference.py [--threads 1] [--json OUT] [NAME ...]

One intra-op and one inter-op thread by default (TVM's runtime here runs one thread unless told otherwise), all
graph optimizations (``ORT_ENABLE_ALL``). Inputs come from ``registry.tvm_side.onnx_inputs`` (token ids within the
vocabulary, masks of ones, floats standard normal), seeded, so TVM's end-to-end timing can use identical arrays. A
sample is at least ``min_ms`` of back-to-back calls; the result is the median of ``samples`` samples, per call, in
milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, MODELS, materialize  # noqa: E402
from registry.tvm_side import onnx_prep  # noqa: E402
from registry.tvm_side.onnx_inputs import input_specs, make_inputs  # noqa: E402


def session(
    path: Path,
    intra_threads: int = 1,
    inter_threads: int = 1,
    profile_prefix: str | None = None,
    optimized_path: str | None = None,
    optimize: bool = True,
) -> ort.InferenceSession:
    """``profile_prefix``: onnxruntime's own profiler on, writing there (bench/tuning/gap.py); ``optimized_path``:
    the graph its optimizer made is saved there (bench/cnn_bench.py); ``optimize``: all graph optimizations, else
    none (bench/float64_reference.py)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_threads
    options.inter_op_num_threads = inter_threads
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    options.log_severity_level = 3  # no warnings about unused initializers in exported files
    if profile_prefix:
        options.enable_profiling, options.profile_file_prefix = True, profile_prefix
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def time_session(
    sess: ort.InferenceSession, feeds: dict[str, np.ndarray], samples: int = 5, min_ms: float = 50.0
) -> list[float]:
    """Per-call milliseconds of ``samples`` samples, each at least ``min_ms`` of repeated calls (after a warm-up)."""
    sess.run(None, feeds)
    start, calls = time.perf_counter(), 0
    while (time.perf_counter() - start) * 1e3 < min_ms:  # calibrate the number of calls per sample
        sess.run(None, feeds)
        calls += 1
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(calls):
            sess.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3 / calls)
    return times


def reference_ms(
    path: Path,
    shapes: dict[str, list[int]],
    threads: int = 1,
    inter_threads: int = 1,
    samples: int = 5,
    min_ms: float = 50.0,
    seed: int = 0,
) -> dict[str, Any]:
    """onnxruntime's median latency of the model at ``shapes`` and the spread of the samples."""
    model = onnx.load(str(path))
    fixed = onnx_prep.fixed_input_shapes(model, shapes)
    feeds = make_inputs(input_specs(model, fixed), seed)
    times = time_session(session(path, threads, inter_threads), feeds, samples, min_ms)
    return {"ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "threads": threads}


def timed_with_onnxruntime(measurer, builds: dict, inputs, path: Path, shapes: dict, rounds: int) -> dict:
    """TVM's ``builds`` and onnxruntime timed in turn, ``rounds`` times: each round the builds one after the other
    in ``measurer``'s worker (``interleaved_model_ms``), then onnxruntime in this process (7 samples of at least
    50 ms), so that a drift of the machine hits all alike. Returns the samples (ms) per build and under
    "onnxruntime"; a build that did not run has none."""
    from registry.measure.jobs import interleaved_model_ms

    samples: dict[str, list[float]] = {k: [] for k in [*builds, "onnxruntime"]}
    for _ in range(rounds):
        for k, v in interleaved_model_ms(measurer, builds, inputs, rounds=1).items():
            if v is not None:
                samples[k].append(v)
        samples["onnxruntime"].append(reference_ms(path, shapes, samples=7)["ms"])
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="models to time (default: all)")
    parser.add_argument("--cache", help="corpus cache directory")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    parser.add_argument("--inter-threads", type=int, default=1, help="inter-op threads (default 1)")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--min-ms", type=float, default=50.0, help="least duration of one sample")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows = []
    print(f"{'model':28s} {'ms':>9s} {'min':>9s} {'max':>9s}")
    for model in [BY_NAME[n] for n in args.names] if args.names else MODELS:
        path = materialize(model, args.cache)
        try:
            row = {"model": model.name, **reference_ms(path, model.shapes, args.threads, args.inter_threads,
                                                       args.samples, args.min_ms)}  # fmt: skip
            print(f"{model.name:28s} {row['ms']:9.3f} {row['min_ms']:9.3f} {row['max_ms']:9.3f}", flush=True)
        except Exception as e:  # noqa: BLE001 - one model's failure is a row, not the end of the table
            row = {"model": model.name, "error": str(e).strip().splitlines()[0][:200]}
            print(f"{model.name:28s} error: {row['error']}", flush=True)
        rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
