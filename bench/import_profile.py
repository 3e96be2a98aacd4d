"""Where `registry import`'s time goes: one import of a log into a fresh SQLite file, under cProfile.

    .venv/bin/python bench/import_profile.py LOG_FOLDER [--top 25]

Prints the records/s (the profiler on, so lower than bench/import_bench.py's), the time in the replay workers
(``ReplayPool.run``: this process waits on them), the functions with the most own time, and the stages the profile
splits into. The log is any TVM JSONDatabase: a generated one (``store_bench.write_logs``) or a real one
(``registry export -o FOLDER`` of a registry that tuned a model).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path

# (stage, the file and the function whose cumulative time it is), in the order a record passes them
STAGES = (
    ("read and parse the log (orjson)", "tvmlog.py", "read_records"),
    ("make RecordIn rows", "log_import.py", "_record"),
    ("validate records, replays included", "validator.py", "validate"),
    ("  of which waiting for trace replays", "replay_pool.py", "run"),
    ("prepare SQL rows", "ingest.py", "prepare_records"),
    ("wait on locks (the writer thread)", "~", "<method 'acquire' of '_thread.lock' objects>"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    from registry.share.log_import import import_logs
    from registry.store.sql.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/profile.db")
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        result = import_logs(store, args.logs, team="profile")
        profile.disable()
        seconds = time.perf_counter() - start
    print(f"{result.records_new} records in {seconds:.2f} s: {result.records_new / seconds:,.0f} records/s (profiled)")
    stats = pstats.Stats(profile)
    cumulative: dict[str, float] = {}
    for (file, _, name), (_, _, _, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        for stage, file_part, func in STAGES:
            if name == func and file.endswith(file_part):
                cumulative[stage] = cumulative.get(stage, 0.0) + cum
    print("\nstage (cumulative seconds)")
    for stage, _, _ in STAGES:
        s = cumulative.get(stage, 0.0)
        print(f"  {stage:40s} {s:7.2f} s  {s / max(result.records_new, 1) * 1e6:7.1f} µs/record")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()
