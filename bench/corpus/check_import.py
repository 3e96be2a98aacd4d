"""Import every corpus model with the registry's frontend and count its MetaSchedule tasks.

    .venv/bin/python bench/corpus/check_import.py [--cache DIR] [--json OUT] [NAME ...]

A model either imports (``load_onnx`` at the catalogue's input shapes, the zero pipeline, ``extract_tasks`` for this
CPU) or is refused with the one-line BadInputError the CLI would print. Anything else (a traceback from deep inside
TVM) is a bug in the registry's import path and is reported as such. Each model runs in its own process, so a crash
in one does not hide the others. The ``fold_error`` of a row checks onnx_prep's folding itself: onnxruntime runs the
file and its folded copy on the same inputs, and the outputs must agree to float rounding.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, MODELS, CorpusModel, materialize  # noqa: E402


def check(model: CorpusModel, cache: str | None) -> dict[str, Any]:
    """One row: name, family, ok, tasks / weight or error, seconds."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    from registry.errors import BadInputError
    from registry.tvm_side.compile import task_module
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import host_target

    row: dict[str, Any] = {"model": model.name, "family": model.family, "ok": False}
    path = materialize(model, cache)
    row["mb"] = round(path.stat().st_size / 1e6, 2)
    row["fold_error"] = folding_error(path, model.shapes)
    start = time.perf_counter()
    try:
        loaded = load_onnx(path, model.shapes, name=model.name)
    except BadInputError as e:
        row["error"] = str(e)
        return row
    target = host_target()
    tasks = extract_tasks(task_module(loaded.mod, target), target)
    row.update(ok=True, tasks=len(tasks), weight=sum(int(t.weight) for t in tasks))
    # Structural hashes (as the registry keys workloads): which tasks models share, e.g. for transfer experiments.
    row["workloads"] = sorted({str(tvm_ffi.structural_hash(t.dispatched[0])) for t in tasks})
    row["import_s"] = round(time.perf_counter() - start, 1)
    return row


def folding_error(path: Path, shapes: dict[str, list[int]]) -> float | None:
    """The largest difference, relative to the output's largest value, between onnxruntime's outputs on the file and
    on ``onnx_prep.prepare``'s folded copy (same inputs, from registry.tvm_side.onnx_inputs). None if the folding
    refused."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from registry.errors import BadInputError
    from registry.tvm_side import onnx_prep
    from registry.tvm_side.onnx_inputs import input_specs, make_inputs

    model = onnx.load(str(path))
    try:
        fixed = onnx_prep.fixed_input_shapes(model, shapes)
        folded = onnx_prep.prepare(model, fixed).SerializeToString()
    except BadInputError:
        return None
    feeds = make_inputs(input_specs(model, fixed), seed=0)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    want, got = (ort.InferenceSession(m, options, providers=["CPUExecutionProvider"]).run(None, feeds)
                 for m in (str(path), folded))  # fmt: skip
    return max(
        float(np.abs(a.astype(np.float64) - b).max() / max(float(np.abs(a).max()), 1e-30))
        for a, b in zip(want, got, strict=True)
    )


def _child(model: CorpusModel, cache: str | None, queue: mp.Queue) -> None:
    try:
        queue.put(check(model, cache))
    except Exception as e:  # noqa: BLE001 - reported as a registry bug in the table
        line = str(e).strip().splitlines()
        queue.put({"model": model.name, "family": model.family, "ok": False,
                   "error": f"BUG {type(e).__name__}: {line[-1] if line else ''}"[:300]})  # fmt: skip


def check_isolated(model: CorpusModel, cache: str | None, timeout: float = 600) -> dict[str, Any]:
    queue: mp.Queue = mp.get_context("spawn").Queue()
    proc = mp.get_context("spawn").Process(target=_child, args=(model, cache, queue))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return {"model": model.name, "family": model.family, "ok": False, "error": f"BUG: timed out after {timeout} s"}
    if queue.empty():
        return {"model": model.name, "family": model.family, "ok": False, "error": f"BUG: exit code {proc.exitcode}"}
    return queue.get()


def table(rows: list[dict[str, Any]]) -> str:
    header = ["model", "family", "MB", "fold err", "ok", "tasks (weight) or error"]
    body = [
        [
            r["model"],
            r["family"],
            f"{r['mb']:.2f}" if "mb" in r else "-",
            f"{r['fold_error']:.0e}" if r.get("fold_error") is not None else "-",
            "yes" if r["ok"] else "no",
            f"{r['tasks']} ({r['weight']})" if r["ok"] else r["error"],
        ]
        for r in rows
    ]
    n = len(header) - 1
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(n)]
    lines = [[*header], ["-" * w for w in widths] + ["-" * len(header[n])], *body]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[n]]) for line in lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="models to check (default: all)")
    parser.add_argument("--cache", help="corpus cache directory (default: $TVM_REGISTRY_CORPUS or ~/.cache/...)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    models = [BY_NAME[n] for n in args.names] if args.names else MODELS
    rows = []
    for model in models:
        rows.append(check_isolated(model, args.cache))
        r = rows[-1]
        print(f"{r['model']}: " + (f"{r['tasks']} tasks" if r["ok"] else r["error"]), file=sys.stderr, flush=True)
    print(table(rows))
    refused = sum(not r["ok"] for r in rows)
    bugs = sum(str(r.get("error", "")).startswith("BUG") for r in rows)
    print(f"\n{len(rows) - refused} of {len(rows)} imported, {refused} refused ({bugs} not with a one-line error)")
    tasks = sum(r.get("tasks", 0) for r in rows)
    distinct = len({h for r in rows for h in r.get("workloads", [])})
    print(f"{tasks} tasks in all, {distinct} distinct workloads")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
