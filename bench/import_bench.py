"""`registry import` throughput on one log file, to compare two versions of the code on exactly the same input.

    .venv/bin/python bench/import_bench.py --records 100000 --logs /tmp/log100k             # this checkout
    .venv/bin/python bench/import_bench.py --logs /tmp/log100k --code /tmp/old              # another (git archive)
    .venv/bin/python bench/import_bench.py --logs REAL_LOG_FOLDER --code /tmp/old --code . --out bench/results/X.json

The log (real workloads, design-space traces with valid decisions varied per record: store_bench.write_logs) is
written on the first run and reused. Each run is a fresh process importing it into a fresh database, as a user's
`registry import` does: everything a process pays once (for this code: starting the trace-replay workers) is paid
by every run. Only the ``import_logs`` call is timed, not the interpreter's start. With several ``--code`` the runs
are interleaved (A, B, A, B, ...), so that a machine shared with other jobs slows both alike. Prints one JSON object:
per code and backend, records/s of each run and their median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from store_bench import PgScratch, SqliteScratch, write_logs  # noqa: E402

# One timed import, in the child process: the store is opened (and migrated) before the clock starts.
_CHILD = """
import json, sys, time
from pathlib import Path
import registry
from registry.store.sql.store import Store
from registry.share.log_import import import_logs
store = Store(sys.argv[1])
t = time.perf_counter()
result = import_logs(store, Path(sys.argv[2]), team="bench")
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds, "new": result.records_new, "code": str(Path(registry.__file__).parent)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records in the log (when it is written)")
    parser.add_argument("--logs", type=Path, required=True, help="the log folder: written if missing, else reused")
    parser.add_argument("--code", type=Path, action="append", help="a checkout to measure (default: this one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the result here, stamped with machine, commit and date")
    parser.add_argument("--pg", default="", help="PostgreSQL admin URL, to measure that backend too")
    args = parser.parse_args()
    if not (args.logs / "database_tuning_record.json").exists():
        write_logs(args.logs, args.records)
    n = sum(1 for line in open(args.logs / "database_tuning_record.json") if line.strip())
    codes = [c.resolve() for c in args.code] if args.code else [ROOT]
    backends = ["sqlite"] + (["postgresql"] if args.pg else [])
    rates: dict[str, dict[str, list[float]]] = {str(c): {b: [] for b in backends} for c in codes}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for code in codes:
                for backend in backends:
                    rate = n / _one(code, backend, args, Path(tmp), run, n)
                    rates[str(code)][backend].append(rate)
                    print(f"run {run} {code} {backend}: {rate:,.0f} records/s", file=sys.stderr)
    out = {
        "records": n,
        "import": {
            code: {b: {"records_per_s": statistics.median(r), "runs": r} for b, r in by.items()}
            for code, by in rates.items()
        },
    }
    print(json.dumps(out, indent=2))
    if args.out:
        from machine_speed import stamped

        args.out.write_text(json.dumps(stamped({"logs": str(args.logs), **out}), indent=1) + "\n")


def _one(code: Path, backend: str, args, tmp: Path, run: int, n: int) -> float:
    scratch = SqliteScratch(tmp, f"import_{run}.db") if backend == "sqlite" else PgScratch(args.pg)
    with scratch as url:
        # The checkout first on the path: the code of that commit, whatever is installed.
        env = {**os.environ, "PYTHONPATH": str(code if (code / "registry").is_dir() else ROOT)}
        child = [sys.executable, "-c", _CHILD, url, str(args.logs)]
        # run in the checkout: ``python -c`` puts the working directory first on the path
        done = subprocess.run(child, capture_output=True, text=True, env=env, cwd=code)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["new"] == n and result["code"] == str(code / "registry"), result
    return result["seconds"]


if __name__ == "__main__":
    main()
