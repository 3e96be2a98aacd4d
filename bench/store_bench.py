"""Store benchmark: lookup latency, `registry lookup` wall time and import throughput at 10^4..10^6 records.

    .venv/bin/python bench/store_bench.py [--sizes 10000 100000 1000000] [--pg postgresql://postgres@127.0.0.1/test]

Results go to bench/results/store.json and are printed as the Markdown tables of docs/BENCHMARKS.md.
Lookups run against synthetic records (registry.testing, 100 records per workload); imports read real TVM log files
(real workloads from extract_tasks, real design-space traces with varied decisions) through `registry import`'s code.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine_speed import stamped  # noqa: E402
from registry import testing
from registry.store.sql import queries
from registry.store.sql.store import Store
from registry.store.values import LookupFilter
from registry.tvm_side import tvmlog

ROOT = Path(__file__).resolve().parent.parent
RECORDS_PER_WORKLOAD = 100
QUERIES = 2000


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


# -- databases ------------------------------------------------------------------------------------------------


class PgScratch:
    """A scratch PostgreSQL database, dropped on exit."""

    def __init__(self, admin_url: str) -> None:
        self.admin = make_url(admin_url).set(drivername="postgresql+psycopg")
        self.name = f"registry_bench_{uuid.uuid4().hex[:8]}"
        self.engine = create_engine(self.admin, isolation_level="AUTOCOMMIT")

    def __enter__(self) -> str:
        with self.engine.connect() as c:
            c.execute(text(f'CREATE DATABASE "{self.name}"'))
        return self.admin.set(database=self.name).render_as_string(hide_password=False)

    def __exit__(self, *exc) -> None:
        with self.engine.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self.engine.dispose()


def fill_synthetic(store: Store, n_records: int) -> None:
    dev = testing.device()
    n_wl = max(1, n_records // RECORDS_PER_WORKLOAD)
    step = 200  # workloads per transaction: 20,000 records
    for start in range(0, n_wl, step):
        ids = range(start, min(n_wl, start + step))
        store.ingest(
            [testing.workload(i) for i in ids],
            [testing.record(i, j, dev) for i in ids for j in range(RECORDS_PER_WORKLOAD)],
        )


# -- lookup latency -------------------------------------------------------------------------------------------


def lookup_latency(store: Store, n_records: int) -> dict:
    n_wl = max(1, n_records // RECORDS_PER_WORKLOAD)
    dev = store.resolve_one_device(testing.device().name)
    rng = random.Random(0)
    picks = [rng.randrange(n_wl) for _ in range(QUERIES)]
    with store.read() as s:
        wl_ids = {w: queries.workload_id(s, testing.workload(w).shash, "structural") for w in set(picks)}

    def timed(fn) -> dict:
        for i in picks[:50]:
            fn(i)  # warm caches and SQLAlchemy's statement cache
        samples = []
        for i in picks:
            t = time.perf_counter()
            fn(i)
            samples.append((time.perf_counter() - t) * 1e3)
        return {"p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99)}

    def best_record(i: int) -> None:  # what compile_relax asks through RegistryDatabase.get_top_k
        with store.read() as s:
            assert queries.top_k(s, wl_ids[i], dev.id, 1)

    def by_workload(i: int) -> None:  # registry lookup --workload HASH --device D
        assert store.lookup(LookupFilter(workload=testing.workload(i).shash, device_ids=[dev.id]))

    def by_op_shape(i: int) -> None:  # registry lookup --op OP --shape S --device D
        w = testing.workload(i)
        f = LookupFilter(op=w.signature.op_kind, shape=w.signature.args[0][0], device_ids=[dev.id], limit=20)
        assert store.lookup(f)

    return {"best_record": timed(best_record), "by_workload": timed(by_workload), "by_op_shape": timed(by_op_shape)}


def cli_wall(url: str, n_records: int, runs: int = 7) -> dict:
    w = testing.workload((n_records // RECORDS_PER_WORKLOAD) // 2)
    shape = ",".join(map(str, w.signature.args[0][0]))
    cmd = [str(ROOT / ".venv/bin/registry"), "--db", url, "lookup", "--op", w.signature.op_kind, "--shape", shape]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - t)
        assert w.shash in out.stdout
    return {"median_s": statistics.median(times), "max_s": max(times)}


# -- import throughput ----------------------------------------------------------------------------------------


def write_logs(folder: Path, n_records: int) -> None:
    """A JSONDatabase as tune_relax writes it: real workloads and real traces, decisions varied per record."""
    from tvm.s_tir import meta_schedule as ms

    from registry.tvm_side import zoo
    from registry.tvm_side.compile import task_module
    from registry.tvm_side.frontend import load_onnx
    from registry.tvm_side.target import canonical_target, host_target

    target = host_target()
    tasks = []
    # batch 32, not 1: every task needs room for 10^5 distinct valid tilings (at batch 1 one had 5,280)
    for batch, sizes in [(32, (128, 256, 512, 64)), (8, (96, 192, 384, 32)), (16, (64, 160, 320, 48))]:
        m = load_onnx(zoo.mlp(batch, sizes).SerializeToString(), {"x": [batch, sizes[0]]})
        tasks += ms.relax_integration.extract_tasks(task_module(m.mod, target), target)
    target_json = canonical_target(target)
    folder.mkdir(parents=True, exist_ok=True)
    space = []
    with open(folder / tvmlog.WORKLOAD_FILE, "w") as f:
        for t in tasks:
            mod = t.dispatched[0]
            f.write(json.dumps([str(x) for x in ms.database.Workload(mod).as_json()]) + "\n")
            ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name=t.task_name)
            sch = ctx.generate_design_space()[0]
            from registry.tvm_side.signature import args_info_json, plain_json

            space.append((plain_json(sch.trace.as_json()), args_info_json(mod)))
    rng = random.Random(0)
    seen: set[str] = set()
    full: set[int] = set()  # tasks whose schedules ran out: small loops allow only so many tilings
    with open(folder / tvmlog.RECORD_FILE, "w") as f:
        for r in range(n_records):
            k, varied = _distinct(r, space, rng, seen, full)
            insts, _ = space[k][0]
            secs = [1e-4 * (1 + rng.random()) for _ in range(3)]
            f.write(json.dumps([k, [[insts, varied], secs, target_json, space[k][1]]], separators=(",", ":")) + "\n")


def _distinct(r: int, space: list, rng: random.Random, seen: set[str], full: set[int]) -> tuple[int, list]:
    """A task (round robin, skipping those that ran out) and decisions for it that no earlier record has: a tuner
    measures each candidate once."""
    for k in [(r + i) % len(space) for i in range(len(space))]:
        if k in full:
            continue
        insts, decisions = space[k][0]
        for _ in range(200):
            varied = [[i, _vary(insts[i], d, rng)] for i, d in decisions]
            key = f"{k}{varied}"
            if key not in seen:
                seen.add(key)
                return k, varied
        full.add(k)
    raise RuntimeError(f"the tasks have fewer distinct schedules than {r + 1} records")


def _vary(inst: list, decision, rng: random.Random):
    """Another decision a tuner could have made: tile sizes that still multiply to the loop extent (the design
    space's own decision tells it), another categorical candidate; compute locations kept, since they change the
    loop structure. Records stay valid, as a real log's are (``registry import`` replays them all)."""
    if inst[0] == "SamplePerfectTile":
        tiles = [1] * len(decision)
        for p in _prime_factors(math.prod(decision)):
            tiles[rng.randrange(len(tiles))] *= p
        return tiles
    if inst[0] == "SampleCategorical":
        return rng.randrange(len(inst[2][0]))
    return decision


@functools.cache
def _prime_factors(n: int) -> tuple[int, ...]:
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return tuple(factors)


def import_throughput(url_for_run, logs: Path, n_records: int, runs: int) -> dict:
    """Median over ``runs`` imports, each into a fresh database, then one re-import (everything already present)."""
    from registry.share.log_import import import_logs

    rates, again_rate = [], 0.0
    for run in range(runs):
        with url_for_run(run) as url:
            store = Store(url)
            t = time.perf_counter()
            result = import_logs(store, logs, team="bench")
            rates.append(n_records / (time.perf_counter() - t))
            assert result.records_new == n_records, result
            if run == runs - 1:
                t = time.perf_counter()
                assert import_logs(store, logs, team="bench").records_new == 0
                again_rate = n_records / (time.perf_counter() - t)
            store.close()
    return {"records_per_s": statistics.median(rates), "runs": rates, "reimport_records_per_s": again_rate}


class SqliteScratch:
    def __init__(self, folder: Path, name: str) -> None:
        self.path = folder / name

    def __enter__(self) -> str:
        return f"sqlite:///{self.path}"

    def __exit__(self, *exc) -> None:
        for p in self.path.parent.glob(self.path.name + "*"):
            p.unlink()


# -- main -----------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test", help="admin URL, or '' to skip")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/store.json")
    parser.add_argument("--tables", type=Path, help="only print the tables of an earlier results file")
    args = parser.parse_args()
    if args.tables:
        print_tables(json.loads(args.tables.read_text()))
        return

    results = {"sizes": args.sizes, "lookup": {}, "cli": {}, "import": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n in args.sizes:
            url = f"sqlite:///{tmp / f'lookup_{n}.db'}"
            t = time.perf_counter()
            fill_synthetic(Store(url), n)
            print(f"[{n}] synthetic fill: {n / (time.perf_counter() - t):,.0f} records/s", file=sys.stderr)
            results["lookup"][f"sqlite/{n}"] = lookup_latency(Store(url), n)
            results["cli"][f"sqlite/{n}"] = cli_wall(url, n)
            print(
                f"[{n}] lookup: {results['lookup'][f'sqlite/{n}']} cli: {results['cli'][f'sqlite/{n}']}",
                file=sys.stderr,
            )
            if args.pg:
                with PgScratch(args.pg) as pg_url:
                    fill_synthetic(Store(pg_url), n)
                    results["lookup"][f"postgresql/{n}"] = lookup_latency(Store(pg_url), n)
                    results["cli"][f"postgresql/{n}"] = cli_wall(pg_url, n)
            logs = tmp / f"logs_{n}"
            write_logs(logs, n)
            runs = 3 if n <= 100_000 else 1
            results["import"][f"sqlite/{n}"] = import_throughput(
                lambda run, n=n: SqliteScratch(tmp, f"import_{n}_{run}.db"), logs, n, runs
            )
            print(f"[{n}] import sqlite: {results['import'][f'sqlite/{n}']}", file=sys.stderr)
            if args.pg:
                results["import"][f"postgresql/{n}"] = import_throughput(lambda run: PgScratch(args.pg), logs, n, runs)
                print(f"[{n}] import pg: {results['import'][f'postgresql/{n}']}", file=sys.stderr)
            for p in tmp.glob(f"lookup_{n}.db*"):
                p.unlink()
            for p in logs.iterdir():
                p.unlink()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamped(results), indent=2))
    print_tables(results)


def print_tables(r: dict) -> None:
    print(
        "| backend | records | best record p50 / p99 (ms) | lookup by hash p50 / p99 | by op+shape p50 / p99 |"
        " `registry lookup` median / max (s) |"
    )
    print("|---|---|---|---|---|---|")
    for key, v in r["lookup"].items():
        backend, n = key.split("/")
        c = r["cli"][key]
        cells = [f"{v[q]['p50_ms']:.3f} / {v[q]['p99_ms']:.3f}" for q in ("best_record", "by_workload", "by_op_shape")]
        print(f"| {backend} | {int(n):,} | " + " | ".join(cells) + f" | {c['median_s']:.3f} / {c['max_s']:.3f} |")
    print()
    print("| backend | records | import records/s (median) | runs | re-import (all present) records/s |")
    print("|---|---|---|---|---|")
    for key, v in r["import"].items():
        backend, n = key.split("/")
        runs = ", ".join(f"{x:,.0f}" for x in v["runs"])
        print(f"| {backend} | {int(n):,} | {v['records_per_s']:,.0f} | {runs} | {v['reimport_records_per_s']:,.0f} |")


if __name__ == "__main__":
    main()
