"""PyTorch's latency for the GPU benchmark's models, the outside reference of ``make bench-gpu``: eager,
``torch.compile`` and ``torch.compile(mode="reduce-overhead")`` (CUDA graphs), batch 1, fp32.

Each model is built from the same transformers config as its ONNX file (bench/corpus/catalogue.py), on the GPU, with
the same input shapes. Timing: CUDA events around one call, after warm-up runs that include the compilation; the
median of ``--runs`` calls, repeated ``--rounds`` times in turn across the modes (so a drift of the machine hits every
mode alike), and the median of the rounds is reported with their spread.

    python bench/gpu/torch_ref.py --models bert-l2-h128 --out torch.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MODES = ("eager", "compile", "reduce-overhead")


def _inputs(model, device):

    from bench.corpus.hf import example_inputs

    return [t.to(device) for t in example_inputs(model.input_shapes, model.int_high)]


def _timed(fn, args, runs: int) -> float:
    """The median of ``runs`` calls in ms, each between two CUDA events."""
    import torch

    samples = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def measure(name: str, runs: int, rounds: int, warmup: int) -> dict:
    import torch

    from bench.corpus.catalogue import BY_NAME
    from bench.corpus.hf import _Named, build

    entry = BY_NAME[name]
    net = _Named(build(entry.origin), list(entry.input_shapes), entry.origin.output).to("cuda").eval()
    args = _inputs(entry, "cuda")
    fns, compile_s = {"eager": net}, {}
    with torch.inference_mode():
        for mode in MODES[1:]:
            torch._dynamo.reset()
            fn = torch.compile(net) if mode == "compile" else torch.compile(net, mode=mode)
            t0 = time.perf_counter()
            for _ in range(warmup):  # the first calls compile (and, for reduce-overhead, record the CUDA graph)
                fn(*args)
            torch.cuda.synchronize()
            compile_s[mode], fns[mode] = time.perf_counter() - t0, fn
        for _ in range(warmup):
            net(*args)
        per_round = {mode: [] for mode in MODES}
        for _ in range(rounds):
            for mode in MODES:
                per_round[mode].append(_timed(fns[mode], args, runs))
    return {
        "model": name,
        "ms": {m: statistics.median(v) for m, v in per_round.items()},
        "rounds_ms": per_round,
        "warmup_s": compile_s,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results = [measure(name, args.runs, args.rounds, args.warmup) for name in args.models]
    args.out.write_text(json.dumps(results, indent=1))
    for r in results:
        print(r["model"], " ".join(f"{m} {ms:.3f} ms" for m, ms in r["ms"].items()), flush=True)


if __name__ == "__main__":
    main()
