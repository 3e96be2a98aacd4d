"""The corpus benchmark's results as the Markdown table in docs/BENCHMARKS.md.

.venv/bin/python bench/corpus/table.py [bench/results/corpus.json]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=ROOT / "bench" / "results" / "corpus.json")
    rows = json.loads(parser.parse_args().results.read_text())
    print("| model | family | tasks | untuned ms | transfer ms (tasks transferred) | tune ms (candidates measured) "
          "| onnxruntime ms | tune / ort |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        if row["import"] != "ok":
            print(f"| {row['model']} | {row['family']} | refused: {row['import']} | | | | | |")
            continue
        transferred = row.get("transferred")
        print(
            f"| {row['model']} | {row['family']} | {row['tasks'] or '-'} | {ms(row, 'untuned')} "
            f"| {ms(row, 'transfer')} ({transferred if transferred is not None else '-'}) "
            f"| {ms(row, 'tune')} ({row.get('tune_measured') or '-'}) | {ms(row, 'onnxruntime')} "
            f"| {ratio(row, 'tune')} |"
        )


if __name__ == "__main__":
    main()
