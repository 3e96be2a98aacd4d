"""Plot the corpus benchmark: each model's latency untuned, after transfer and after tune, relative to onnxruntime.

    .venv/bin/python bench/corpus/plot.py [bench/results/corpus.json] [-o bench/results/corpus.png]

One row per model that was timed; the x axis is TVM's latency divided by onnxruntime's on the same machine and
thread count (log scale), so 1 is parity and left of it TVM is faster. Needs matplotlib (the `bench` extra).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = {"untuned": "#bbbbbb", "transfer": "#4c9be8", "tune": "#e8844c"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=ROOT / "bench" / "results" / "corpus.json")
    parser.add_argument("-o", "--out", type=Path, default=ROOT / "bench" / "results" / "corpus.png")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in json.loads(args.results.read_text()) if r.get("ms") and r["ms"].get("onnxruntime")]
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.2))
    height = 0.8 / len(COLUMNS)
    for i, row in enumerate(rows):
        for j, (column, colour) in enumerate(COLUMNS.items()):
            value = row["ms"].get(column)
            if value is not None:
                label = column if i == 0 else None
                ax.barh(i + (j - 1) * height, value / row["ms"]["onnxruntime"], height, color=colour, label=label)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), [r["model"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("latency / onnxruntime latency (log scale; < 1 is faster than onnxruntime)")
    ax.legend(loc="lower right", fontsize=7)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
