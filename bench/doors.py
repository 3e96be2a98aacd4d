"""One model, one result, whichever door (issue 35): the records of one `registry tune` run, reached through each
door a user takes, each library timed by TVM's own ``time_evaluator`` in turn, in one process.

    .venv/bin/python bench/doors.py [--budget 120s] [--rounds 5] [NAME ...]    # corpus names (make corpus)

Doors, for each model:
- ``cli``: ``registry tune MODEL --budget B -o cli.so`` into a fresh registry; the exported library.
- ``api``: ``registry.compile_model(mod, registry.database(db=...))``, ``mod`` from TVM's ``from_onnx`` (or, where
  TVM cannot import the export, from ``registry.load_model``, which prepares it as the CLI does).
- ``relax.build``: plain ``relax.build(mod, relax_pipeline=relax.get_pipeline("registry"))`` inside ``with db:``.
- ``export``: ``registry export -o DIR``, then plain ``compile_relax(JSONDatabase(DIR), mod, target)``, as
  ``registry export --help`` shows it.
- ``export+fastmath``: the same after TVM's own ``relax.transform.FastMathTransform()``, as the export's README
  suggests: the registry's records of its fast-math kernels then apply as they are.
- ``untuned``: ``compile_relax`` with an empty database.

Each round times every build (a median of 7 samples of 20 runs); the table gives the median over rounds and its
spread, and each door's ratio to the CLI's library. Writes bench/results/doors.json with the machine, the commit and
the date.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.corpus.run import shape_args  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402

MODELS = ["vit-l2-h192-p8", "bert-l2-h128", "resnet-basic-w32"]  # a vision transformer, a text one, a CNN
REGISTRY = str(Path(sys.executable).with_name("registry"))


def tune(name: str, budget: str, work: Path) -> tuple[Path, Path, float]:
    db, library = work / f"{name}.db", work / f"{name}.so"
    if not library.exists():
        db.unlink(missing_ok=True)
        model = BY_NAME[name]
        start = time.perf_counter()
        args = [REGISTRY, "--db", str(db), "tune", str(materialize(model)), *shape_args(model), "--budget", budget]
        subprocess.run([*args, "-o", str(library)], check=True, stdout=subprocess.DEVNULL)
        print(f"{name}: tuned in {time.perf_counter() - start:.0f} s", flush=True)
    return db, library, 0.0


def plain_module(name: str):
    """The module as a user makes it: TVM's from_onnx, else (``prepared``) registry.load_model."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    import registry

    model = BY_NAME[name]
    try:
        return from_onnx(onnx.load(str(materialize(model))), shape_dict=model.shapes, keep_params_in_input=False), False
    except Exception:  # noqa: BLE001 - TVM's importer fails on some TorchScript exports' shape arithmetic
        return registry.load_model(materialize(model), model.shapes).mod, True


def builds(name: str, db_path: Path, library: Path, work: Path) -> tuple[dict, bool]:
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    import registry

    db = registry.database(db=f"sqlite:///{db_path}")
    target = db.target
    mod, prepared = plain_module(name)
    out = {"cli": tvm.runtime.load_module(str(library)), "api": registry.compile_model(mod, db)}
    with target, db, tvm.transform.PassContext(opt_level=3):
        out["relax.build"] = relax.build(mod, target=target, relax_pipeline=relax.get_pipeline("registry"))
    logs = work / f"{name}-export"
    subprocess.run([REGISTRY, "--db", str(db_path), "export", "-o", str(logs)], check=True, stdout=subprocess.DEVNULL)
    exported = ms.database.JSONDatabase(work_dir=str(logs))
    out["export"] = ms.relax_integration.compile_relax(exported, mod, target, None)
    fast = relax.transform.FastMathTransform()(mod)  # the export README's one stock-TVM pass
    out["export+fastmath"] = ms.relax_integration.compile_relax(exported, fast, target, None)
    out["untuned"] = ms.relax_integration.compile_relax(ms.database.MemoryDatabase(), mod, target, None)
    return out, prepared


def timed(built, inputs) -> float:
    import numpy as np
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(built, tvm.cpu())
    timer = vm.time_evaluator("main", tvm.cpu(), number=20, repeat=7)
    return float(np.median(timer(*inputs).results)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=MODELS)
    parser.add_argument("--budget", default="120s", help="registry tune --budget, per model")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "doors")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "doors.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    import tvm

    import registry

    rows = []
    for name in args.names:
        db, library, _ = tune(name, args.budget, args.work)
        built, prepared = builds(name, db, library, args.work)
        import onnx

        from registry.tvm_side import onnx_prep
        from registry.tvm_side.onnx_inputs import input_specs, make_inputs

        model = BY_NAME[name]
        loaded = registry.load_model(materialize(model), model.shapes)
        onnx_model = onnx.load(str(materialize(model)))
        feeds = make_inputs(input_specs(onnx_model, onnx_prep.fixed_input_shapes(onnx_model, model.shapes)), 0)
        inputs = [tvm.runtime.tensor(feeds[i.name]) for i in loaded.inputs]
        samples: dict[str, list[float]] = {door: [] for door in built}
        for _ in range(args.rounds):
            for door, b in built.items():
                samples[door].append(timed(b, inputs))
        ms = {door: sorted(v)[len(v) // 2] for door, v in samples.items()}
        row = {
            "model": name,
            "module": "registry.load_model (TVM's from_onnx cannot import it)" if prepared else "from_onnx",
            "budget": args.budget,
            "ms": ms,
            "spread": {door: [min(v), max(v)] for door, v in samples.items()},
            "vs_cli": {door: ms[door] / ms["cli"] for door in ms},
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps(stamped({"rounds": args.rounds, "rows": rows}), indent=1))
    print(f"| model | module | {' | '.join(rows[0]['ms'])} |")
    for r in rows:
        cells = " | ".join(f"{r['ms'][d]:.3f} ({r['vs_cli'][d]:.2f}x)" for d in r["ms"])
        print(f"| {r['model']} | {r['module']} | {cells} |")


if __name__ == "__main__":
    main()
