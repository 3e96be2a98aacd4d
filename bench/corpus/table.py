"""The corpus benchmark's results as the Markdown table in docs/BENCHMARKS.md.

.venv/bin/python bench/corpus/table.py [bench/results/corpus.json]

Rows from a ``--floor`` run (``run.py --floor 32``) also get the depth of their tuning (the tasks of at least 1% of
the tuned model, those whose search space ran out, the fewest trials any other of them had) and the better of
transfer and tune against onnxruntime.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ms(row: dict, column: str) -> str:
    value = (row.get("ms") or {}).get(column)
    return "-" if value is None else f"{value:.3f}" if value < 10 else f"{value:.1f}"


def ratio(row: dict, column: str) -> str:
    times = row.get("ms") or {}
    if times.get(column) is None or not times.get("onnxruntime"):
        return "-"
    return f"{times[column] / times['onnxruntime']:.2f}"


def best_ratio(row: dict) -> str:
    times = row.get("ms") or {}
    built = [times[k] for k in ("transfer", "tune") if times.get(k) is not None]
    return f"{min(built) / times['onnxruntime']:.2f}" if built and times.get("onnxruntime") else "-"


def depth(row: dict) -> str:
    floor = row.get("floor")
    if not floor:
        return "-"
    return f"{floor['tasks']} ({floor['exhausted']}), {floor['fewest_trials'] if floor['fewest_trials'] else '-'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=ROOT / "bench" / "results" / "corpus.json")
    rows = json.loads(parser.parse_args().results.read_text())
    deep = any(row.get("floor") for row in rows)
    extra = " tasks >= 1% (space exhausted), fewest trials | best / ort |" if deep else ""
    print("| model | family | tasks | untuned ms | transfer ms (tasks transferred) | tune ms (candidates measured) "
          f"| onnxruntime ms | tune / ort |{extra}")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if deep else ""))
    for row in rows:
        if row["import"] != "ok":
            empty = " | |" if deep else ""
            print(f"| {row['model']} | {row['family']} | refused: {row['import']} | | | | | |{empty}")
            continue
        transferred = row.get("transferred")
        print(
            f"| {row['model']} | {row['family']} | {row['tasks'] or '-'} | {ms(row, 'untuned')} "
            f"| {ms(row, 'transfer')} ({transferred if transferred is not None else '-'}) "
            f"| {ms(row, 'tune')} ({row.get('tune_measured') or '-'}) | {ms(row, 'onnxruntime')} "
            f"| {ratio(row, 'tune')} |" + (f" {depth(row)} | {best_ratio(row)} |" if deep else "")
        )


if __name__ == "__main__":
    main()
