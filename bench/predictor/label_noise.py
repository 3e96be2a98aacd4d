"""How far the dataset's timings can be trusted to judge a ranking: its programs timed again here, in rounds.

    .venv/bin/python bench/predictor/label_noise.py [--db URL] --device D [--workloads 20] [--rounds 3] [--seed 0] \
        [--besides EARLIER.json] [--out bench/results/label_noise.json]
    .venv/bin/python bench/predictor/label_noise.py --pooled RESULT.json [RESULT.json ...]

The predictor's held-out scores judge its ranking against each program's stored timing, one `QUICK` timing taken
when the dataset was collected. If two timings of one program disagree, a ranking that knew every program's true
speed would still not score 1.0 against them. For ``--workloads`` workloads of device ``D`` (seeded, each with 8 or
more programs, none that only shape variants have: those are never judged), every program is replayed, built and
timed here with the measurer's `QUICK` settings, ``--rounds`` times in turn; then, as the predictor's evaluation
scores a ranking (top-1 / top-5 score, Spearman; mean over workloads, unweighted):

- ``stored, judged by the re-timed median``: how well the stored timings pick the programs that are fastest now;
- ``re-timed median, judged by the stored timings``: what a ranking that knew the re-timed speeds would score in
  the held-out evaluation as it is computed (against stored timings): a ceiling for any model;
- ``one round, judged by another``: two fresh single timings against each other (noise alone, same machine, same
  hour);
- per program, the ratio of two rounds' timings (10th, 50th and 90th percentile).

The stored timings may come from another machine of the same CPU model (the dataset's README says which), so the
first two mix noise with a machine's difference; the third is noise alone. Writes the result with the machine, the
commit and the date. ``--pooled`` times nothing: it prints the same figures over several results' workloads
together. ``evaluate.py --retimed FILE`` judges the held-out folds' rankings of these workloads against the re-timed
medians as well as the stored timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.machine_speed import stamped  # noqa: E402
from bench.predictor import dataset  # noqa: E402


def stored_key(mean_s: float) -> float:
    """A program's stored mean as this script keeps it, in µs to 2 decimals: what ``evaluate.py --retimed`` matches
    a re-timed program by."""
    return round(mean_s * 1e6, 2)


def workloads_of(*paths: Path) -> list[dict]:
    """The re-timed workloads of earlier results, in order (each as ``retimed`` returns it)."""
    return [w for path in paths for w in json.loads(path.read_text())["workloads"]]


def retimed(db: str, device: str, workloads: int, rounds: int, seed: int, done: set[int] = frozenset()) -> list[dict]:
    """Each chosen workload's programs: stored mean and each round's mean, in µs (a program that fails a round
    here is left out). Workloads in ``done`` (timed again by an earlier run) are not chosen."""
    import tvm
    from tvm.target import Target

    from registry.measure.jobs import kernel_arguments, module_job
    from registry.measure.measurer import Measurer
    from registry.measure.types import QUICK
    from registry.store.factory import open_storage
    from registry.tvm_side import apply_trace
    from registry.tvm_side.compat import prepare_tuning

    storage = open_storage(db, create_new=False)
    row = storage.resolve_one_device(device)
    target = Target(json.loads(row.target_json))
    prepare_tuning(target.kind.name)
    counts = storage.ok_record_counts(row.id)
    trained_only = dataset.variant_only(storage)  # the evaluation never judges these: not timed again
    rankable = sorted(w for w, (_, n) in counts.items() if n >= 8 and w not in trained_only and w not in done)
    chosen = sorted(np.random.default_rng(seed).choice(rankable, size=min(workloads, len(rankable)), replace=False))
    out = []
    with Measurer(target, row.num_threads) as measurer:
        for wid in chosen:
            task = counts[wid][0]
            mod = tvm.ir.load_json(storage.workloads_by_id([int(wid)])[int(wid)].mod_json)
            arguments = kernel_arguments(mod)
            programs = []
            for record in storage.top_k(int(wid), row.id, counts[wid][1]):
                sch = apply_trace.replay(mod, target, json.loads(record.trace_json))
                if sch is not None:
                    programs.append((stored_key(record.mean_s), module_job(sch.mod, target, arguments)))
            timings = [measurer.kernels([job for _, job in programs], QUICK) for _ in range(rounds)]
            kept = [
                {"stored_us": stored, "rounds_us": [round(statistics.fmean(m.run_secs) * 1e6, 2) for m in ms]}
                for (stored, _), ms in zip(programs, zip(*timings, strict=True), strict=True)
                if all(m.ok for m in ms)
            ]
            out.append({"workload": int(wid), "task": task, "programs": kept})
            print(f"{task} (#{wid}): {len(kept)} of {len(programs)} programs timed {rounds} times", flush=True)
    return out


def judged(found: list[dict]) -> dict:
    """The figures of the module docstring."""
    from registry.tvm_side.predictor_scores import spearman, top_k_score

    def scores(rank_by, judge_by) -> dict[str, float]:
        rows = []
        for w in found:
            if len(w["programs"]) < 8:
                continue
            lat = np.array([judge_by(p) for p in w["programs"]])
            score = -np.array([rank_by(p) for p in w["programs"]])  # faster: higher
            rows.append((top_k_score(lat, score, 1), top_k_score(lat, score, 5), spearman(-lat, score)))
        return {
            name: round(float(np.mean([r[i] for r in rows])), 3) for i, name in enumerate(["top1", "top5", "spearman"])
        }

    def median(p: dict) -> float:
        return statistics.median(p["rounds_us"])

    ratios = sorted(p["rounds_us"][1] / p["rounds_us"][0] for w in found for p in w["programs"])
    return {
        "workloads": len(found),
        "programs": sum(len(w["programs"]) for w in found),
        "stored, judged by the re-timed median": scores(lambda p: p["stored_us"], median),
        "re-timed median, judged by the stored timings": scores(median, lambda p: p["stored_us"]),
        "one round, judged by another": scores(lambda p: p["rounds_us"][0], lambda p: p["rounds_us"][1]),
        "second over first round, p10 / p50 / p90": [
            round(ratios[int(q * (len(ratios) - 1))], 3) for q in (0.1, 0.5, 0.9)
        ],
        "stored over re-timed median, median": round(
            statistics.median(p["stored_us"] / median(p) for w in found for p in w["programs"]), 3
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default=f"sqlite:///{ROOT / 'bench' / 'predictor' / 'data' / 'collect.db'}")
    ap.add_argument("--device", help="the device whose programs are timed again: this machine's CPU")
    ap.add_argument("--workloads", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="two or more")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--besides", type=Path, action="append", default=[], help="an earlier result: its workloads are not chosen"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/label_noise.json")
    ap.add_argument("--pooled", type=Path, nargs="+", help="earlier results: their figures together, nothing timed")
    args = ap.parse_args()
    if args.pooled:
        print(json.dumps(judged(workloads_of(*args.pooled))))
        return
    if not args.device:
        ap.error("--device is required: the device whose programs are timed again (or --pooled to time nothing)")
    if args.rounds < 2:
        ap.error("--rounds must be 2 or more: one round judged by another needs two")
    done = {w["workload"] for w in workloads_of(*args.besides)}
    found = retimed(args.db, args.device, args.workloads, args.rounds, args.seed, done)
    result = {"device": args.device, "rounds": args.rounds, "seed": args.seed, "figures": judged(found)}
    print(json.dumps(result["figures"]), flush=True)
    result["workloads"] = found
    args.out.write_text(json.dumps(stamped(result), separators=(",", ":")))  # every program: kept compact
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
