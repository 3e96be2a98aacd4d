"""A registry a team works in by URL (issue 55): the same work against a served registry and against its database.

    .venv/bin/python bench/served_bench.py [--model distilbert-l2-h128] [--rounds 3] [--trials 48] \
        [--out bench/results/served.json]

The registry is a new user's: `registry pull` (the starter bundle) into an SQLite file. The server is a real
`registry serve` process on a loopback port over a copy of it, with a writer's token; each run against it has a
registry home of its own (its outbox). ``MODEL`` is a corpus model the bundle does not hold (make corpus).

1. **lookup**: `registry lookup --op matmul` by URL and against the file, 7 processes each, in turn: the rows of
   each, and the median wall time.
2. **transfer**: `registry transfer MODEL --tune-budget 0 -o X.so` (the donors measured, nothing tuned) against a
   fresh copy of the file and against a fresh served copy, in turn, ``--rounds`` times: wall time and sources of
   each; then every library timed in turn in one process by the registry's workers (TVM's ``time_evaluator``),
   ``--rounds`` times, medians.
3. **tune together**: two `registry --db URL tune MODEL --trials T` started at once, each with its own registry
   home (two machines): the tasks both tuned (leases divide them), the trials measured against the budget asked.

Writes the result with the machine, the commit and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus.catalogue import BY_NAME, materialize  # noqa: E402
from bench.corpus.run import shape_args  # noqa: E402
from bench.machine_speed import stamped  # noqa: E402
from bench.no_measure_bench import timed  # noqa: E402
from bench.sqlite_copy import copy_sqlite  # noqa: E402

REGISTRY = str(Path(sys.executable).with_name("registry"))


def cli(db: str, *args: str, env: dict | None = None) -> tuple[dict, float]:
    """The command's JSON report and its wall time; exits on failure with its last line."""
    start = time.perf_counter()
    done = subprocess.run([REGISTRY, "--db", db, *args, "--json"], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"registry {' '.join(args[:2])} against {db}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout[done.stdout.index("{") :]), seconds


class Served:
    """`registry serve` over ``db`` on a free loopback port, with a writer's token."""

    def __init__(self, db: Path) -> None:
        token = subprocess.run(
            [REGISTRY, "--db", str(db), "token", "create", "--role", "writer", "--name", "bench"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        self.token = token.stdout.strip()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [REGISTRY, "--db", str(db), "serve", "--port", str(port)], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.2)

    def env(self, home: Path) -> dict:
        return {**os.environ, "REGISTRY_TOKEN": self.token, "REGISTRY_HOME": str(home)}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def lookups(base: Path, served: Served, work: Path, runs: int = 7) -> dict:
    out: dict = {}
    for where, db, env in (("file", f"sqlite:///{base}", None), ("url", served.url, served.env(work / "home-lookup"))):
        rows, seconds = None, []
        for _ in range(runs):
            report, s = cli(db, "lookup", "--op", "matmul", env=env)
            rows, seconds = report["rows"], [*seconds, s]
        out[where] = {"rows": len(rows), "median_s": statistics.median(seconds), "runs_s": seconds, "_rows": rows}
    out["same_rows"] = out["file"].pop("_rows") == out["url"].pop("_rows")
    return out


def transfers(name: str, base: Path, work: Path, rounds: int) -> dict:
    model = BY_NAME[name]
    path, shapes = str(materialize(model)), shape_args(model)
    runs, libs = [], {}
    for i in range(rounds):
        for where in ("file", "url"):
            db = work / f"{where}-{i}.db"
            copy_sqlite(base, db)
            library = work / f"{where}-{i}.so"
            args = ("transfer", path, *shapes, "--tune-budget", "0", "-o", str(library))
            if where == "file":
                report, seconds = cli(f"sqlite:///{db}", *args)
            else:
                served = Served(db)
                try:
                    report, seconds = cli(served.url, *args, env=served.env(work / f"home-{i}"))
                finally:
                    served.close()
            runs.append({"where": where, "round": i, "wall_s": seconds, "sources": report["sources"]})
            libs[f"{where}-{i}"] = {"library": str(library)}
            print(f"transfer {where} {i}: {seconds:.1f} s {report['sources']}", flush=True)
    ms = timed(name, libs, rounds)
    for r in runs:
        r["ms"] = ms.get(f"{r['where']}-{r['round']}")
    wall = {w: statistics.median(r["wall_s"] for r in runs if r["where"] == w) for w in ("file", "url")}
    latency = {w: statistics.median(r["ms"] for r in runs if r["where"] == w and r["ms"]) for w in ("file", "url")}
    return {"runs": runs, "wall_s": wall, "wall_ratio": wall["url"] / wall["file"], "ms": latency,
            "ms_ratio": latency["url"] / latency["file"]}  # fmt: skip


def together(name: str, base: Path, work: Path, trials: int) -> dict:
    from registry.store.sql.store import Store

    model = BY_NAME[name]
    db = work / "together.db"
    copy_sqlite(base, db)
    before = Store(f"sqlite:///{db}").stats().records
    served = Served(db)
    start = time.perf_counter()
    try:
        procs = [
            subprocess.Popen(
                [
                    REGISTRY,
                    "--db",
                    served.url,
                    "tune",
                    str(materialize(model)),
                    *shape_args(model),
                    "--trials",
                    str(trials),
                    "--team",
                    team,
                    "--json",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=served.env(work / f"home-{team}"),
            )  # fmt: skip
            for team in ("one", "two")
        ]
        reports = []
        for proc in procs:
            out, err = proc.communicate(timeout=3600)
            if proc.returncode != 0:
                raise SystemExit(f"tune: {err.strip().splitlines()[-1:]}")
            reports.append(json.loads(out[out.index("{") :]))
    finally:
        wall = time.perf_counter() - start
        served.close()
    stored = Store(f"sqlite:///{db}").stats().records - before
    measured = [r["tuning"]["trials"]["measured"] for r in reports]
    return {"trials_asked": trials, "measured": measured, "stored": stored, "wall_s": wall,
            **shared_tasks(f"sqlite:///{db}"), "stops": [r["tuning"]["stop"] for r in reports]}  # fmt: skip


def shared_tasks(url: str) -> dict:
    """How many tasks the runs tuned, how many have records of both, and how many of both at once: where the times
    of one run's records of a task overlap the other's (a task one run stopped and released may be taken up by the
    other later: that is not at once)."""
    from sqlalchemy import func, select

    from registry.store.sql.models import TuningRecord
    from registry.store.sql.store import Store

    spans: dict[int, dict[str, tuple]] = {}
    cols = (TuningRecord.workload_id, TuningRecord.team, func.min(TuningRecord.created_at),
            func.max(TuningRecord.created_at))  # fmt: skip
    with Store(url).read() as s:
        for wid, team, first, last in s.execute(
            select(*cols).where(TuningRecord.team.is_not(None)).group_by(TuningRecord.workload_id, TuningRecord.team)
        ):
            spans.setdefault(wid, {})[team] = (first, last)
    both = [list(t.values()) for t in spans.values() if len(t) > 1]
    at_once = sum(1 for (a0, a1), (b0, b1) in both if a0 <= b1 and b0 <= a1)
    return {"tasks_tuned": len(spans), "tasks_tuned_by_both": len(both), "tasks_tuned_by_both_at_once": at_once}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="distilbert-l2-h128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "served")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "served.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    base = args.work / "base.db"
    if not base.exists():
        cli(f"sqlite:///{base}", "pull")
    result: dict = {"model": args.model, "rounds": args.rounds}
    copy_sqlite(base, args.work / "lookup.db")
    served = Served(args.work / "lookup.db")
    try:
        result["lookup"] = lookups(base, served, args.work)
    finally:
        served.close()
    print("lookup", json.dumps(result["lookup"]), flush=True)
    result["transfer"] = transfers(args.model, base, args.work, args.rounds)
    print("transfer", json.dumps({k: v for k, v in result["transfer"].items() if k != "runs"}), flush=True)
    result["together"] = together(args.model, base, args.work, args.trials)
    print("together", json.dumps(result["together"]), flush=True)
    args.out.write_text(json.dumps(stamped(result), indent=1) + "\n")


if __name__ == "__main__":
    main()
