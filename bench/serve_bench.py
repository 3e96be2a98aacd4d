"""Server benchmark: `registry serve` under a real HTTP load generator (wrk) on loopback, and pull/push throughput.

    apt-get install -y wrk       # once: the load generator (C, Lua scripting, latency percentiles)
    .venv/bin/python bench/serve_bench.py [--records 100000,1000000] [--backends sqlite,postgresql]
        [--concurrency 1,2,4,8,16,32,64] [--page-concurrency 1,8,64] [--duration 10] [--repeat 1] [--workers 2]
        [--pull-records 100000] [--runs 3] [--pg postgresql://postgres@127.0.0.1:5432/test] [--skip-load] [--skip-pull]

1. Load. For each backend and record count: a registry of synthetic records (``store_bench.fill_synthetic``: 100
   records per workload) and a model of 100 tasks whose workloads have records; SQLite files are kept under
   bench/work/serve/ and reused, PostgreSQL ones are scratch databases, dropped after. The real server
   (`registry serve --workers W --rate-limit 0`, a subprocess) serves it, and wrk loads it, ``--duration`` seconds
   per concurrency level, with a reader's token: `registry lookup` over HTTP (GET /api/v1/workloads, op + shape +
   device, a different stored workload on each request so that no one query is answered from a cache), and the model
   page (GET /models/NAME; should it fail, that is recorded and the same report as JSON, GET /api/v1/models/NAME, is
   measured instead). Each series starts with an unrecorded warm-up run. Responses other than 2xx are counted.
2. Pull and push. A registry of ``--pull-records`` real records (``store_bench.write_logs``: real workloads, traces
   that replay) is imported once into SQLite and kept; it is exported as a bundle. Then, ``--runs`` times in
   alternating order: `registry import BUNDLE` into a fresh SQLite file, and `registry pull URL` of the same records
   from the server serving that registry into a fresh SQLite file (both check every record). And `registry push URL`
   of it into a freshly created registry served by a fresh server, per backend. Times are the commands' wall times,
   process start included (what a user waits for); the wall time of a command that only creates an empty registry is
   reported beside them, subtracted from nothing.

The load generator shares the machine's cores with the server: on a 2-core VM wrk takes CPU the server would
otherwise have, so these are lower bounds of what the server alone does. Results go to bench/results/serve.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.machine_speed import stamped  # noqa: E402
from bench.store_bench import RECORDS_PER_WORKLOAD, PgScratch, fill_synthetic, write_logs  # noqa: E402
from bench.sync_bench import settle  # noqa: E402
from registry import testing  # noqa: E402
from registry.store.rows import ModelIn  # noqa: E402
from registry.store.sql.revision import HEAD  # noqa: E402
from registry.store.sql.store import Store  # noqa: E402

REGISTRY = str(ROOT / ".venv" / "bin" / "registry")
WORK = ROOT / "bench" / "work" / "serve"
MODEL = "bench-model"
MODEL_TASKS = 100
QUERIES = 1000  # distinct lookups a wrk script rotates through
WRK_THREADS = 1  # one event loop keeps 64 connections busy at these rates, and leaves the server the other core
NOTE = (
    "wrk runs on the same machine as the server and takes CPU from it (the server has {workers} worker process(es), "
    "wrk {threads} thread); on this {cores}-core machine the figures are lower bounds of the server's alone."
)


# -- processes ------------------------------------------------------------------------------------------------------


def registry(db: str, *args: str, env: dict | None = None) -> tuple[float, str]:
    """Run ``registry --db DB ARGS``: its wall time in seconds and its stdout; its stderr on failure."""
    start = time.perf_counter()
    done = subprocess.run(
        [REGISTRY, "--db", db, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=ROOT
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"registry {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def make_token(db: str, role: str) -> str:
    """A new token of ``role`` in ``db``, made as an admin makes one (`registry token create`)."""
    _, out = registry(db, "token", "create", "--role", role, "--name", f"bench-{uuid.uuid4().hex[:8]}")
    return out.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`registry serve` of ``db`` as a subprocess (its own process group), answering once entered."""

    def __init__(self, db: str, token: str, workers: int, log: Path) -> None:
        self.db, self.token, self.workers, self.log = db, token, workers, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [REGISTRY, "--db", self.db, "serve", "--port", str(self.port), "--workers", str(self.workers),
               "--rate-limit", "0"]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=ROOT, start_new_session=True)
        self._wait_until_up(deadline_s=120)
        return self

    def _wait_until_up(self, deadline_s: float) -> None:
        """Poll until the registry answers (no fixed sleep: a cold start imports FastAPI, SQLAlchemy, maybe TVM)."""
        end = time.monotonic() + deadline_s
        request = urllib.request.Request(self.url + "/api/v1/registry", headers=self.auth())
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): see {self.log}")
            try:
                with urllib.request.urlopen(request, timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError(f"the server did not answer within {deadline_s:.0f} s: see {self.log}")

    def auth(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(urllib.request.Request(self.url + path, headers=self.auth()), timeout=60) as r:
            return r.read()

    def problem(self, path: str) -> str | None:
        """None when GET ``path`` answers 200, else its status and detail."""
        try:
            self.get(path)
            return None
        except urllib.error.HTTPError as e:
            return f"{e.code} {e.read()[:300].decode(errors='replace')}"

    def __exit__(self, *exc) -> None:
        """SIGTERM (uvicorn stops its workers), then SIGKILL of the whole group if it lingers."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the workers too, should one have outlived its parent
        self.proc.wait()
        self.proc = None


def remove_sqlite(path: Path) -> None:
    """An SQLite file, its WAL files and the lock file its migration leaves beside it."""
    for p in [*path.parent.glob(path.name + "*"), path.with_suffix(".migrate.lock")]:
        p.unlink(missing_ok=True)


def server_problems(log: Path) -> list[str]:
    """Lines of a server's log that report an error (a traceback, an internal error): empty when it ran clean."""
    if not log.exists():
        return []
    words = ("error", "traceback", "exception", "killed", "timeout")
    return [line for line in log.read_text(errors="replace").splitlines() if any(w in line.lower() for w in words)]


# -- registries -----------------------------------------------------------------------------------------------------


def fill(url: str, n: int) -> dict:
    """``url`` with ``n`` synthetic records and a model of ``MODEL_TASKS`` tasks spread over the stored workloads
    (all with records when there are as many workloads: at 10^5 records, 1000)."""
    n_wl = max(1, n // RECORDS_PER_WORKLOAD)
    step = max(1, n_wl // MODEL_TASKS)
    start = time.perf_counter()
    with Store(url) as store:
        fill_synthetic(store, n)
        tasks = [(testing.workload(k * step), f"task_{k}", 1 + k % 3) for k in range(MODEL_TASKS)]
        store.save_model(ModelIn(MODEL, "ab" * 32, {"x": [1, 3, 224, 224]}, tasks))
    return {"fill_s": round(time.perf_counter() - start, 1), "model_tasks_with_records": min(MODEL_TASKS, n_wl)}


@contextlib.contextmanager
def synthetic_registry(backend: str, n: int, pg: str) -> Iterator[tuple[str, dict]]:
    """(URL, how it was built) of a registry of ``n`` synthetic records: a cached SQLite file, or a scratch
    PostgreSQL database (dropped on exit) filled, then left to its autovacuum before it is measured."""
    if backend == "sqlite":
        path = WORK / f"synthetic_{n}.db"
        url = f"sqlite:///{path}"
        built = cached(path, lambda: fill(url, n))
        yield url, built
        return
    scratch = PgScratch(pg)
    with scratch as url:
        built = fill(url, n)
        built["waited_for_autovacuum_s"] = settle(scratch.engine)  # the fill sets it off; it would share the cores
        yield url, built


def cached(path: Path, build) -> dict:
    """What ``build()`` returned when it made ``path``, kept in ``path.json`` beside it: reused when it is there
    for this schema revision, else ``path`` (and its WAL files) is removed and built again."""
    marker = path.with_suffix(".json")
    if marker.exists():
        info = json.loads(marker.read_text())
        if info.get("schema") == HEAD and path.exists():
            return {**info, "cached": True}
    remove_sqlite(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    info = {**build(), "schema": HEAD}
    marker.write_text(json.dumps(info))
    return {**info, "cached": False}


def real_registry(n: int) -> tuple[str, dict]:
    """A SQLite registry of ``n`` real records (kept): its log written, then imported with every trace replayed."""
    logs = WORK / f"logs_{n}"
    if not (logs / ".done").exists():
        shutil.rmtree(logs, ignore_errors=True)
        print(f"writing a real log of {n:,} records to {logs} ...", flush=True)
        write_logs(logs, n)
        (logs / ".done").touch()
    path = WORK / f"real_{n}.db"
    url = f"sqlite:///{path}"

    def build() -> dict:
        print(f"importing it into {path} ...", flush=True)
        seconds, _ = registry(url, "import", str(logs), "--team", "bench")
        return {"import_s": round(seconds, 1)}

    return url, cached(path, build)


# -- load -----------------------------------------------------------------------------------------------------------

# wrk's Lua script: a reader's token on every request, the paths rotated (each thread from its own offset), and the
# results printed as one JSON line (latencies in microseconds; "status": responses that were not 2xx or 3xx).
LUA = """
local paths = {%(paths)s}
local counter = 0
local threads = 0

function setup(thread)
  thread:set("offset", threads * 7919)
  threads = threads + 1
end

function init(args)
  counter = offset or 0
  wrk.headers["Authorization"] = "Bearer %(token)s"
end

function request()
  counter = counter + 1
  return wrk.format("GET", paths[(counter %% #paths) + 1])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('SERVE_BENCH {"requests":%%.0f,"duration_us":%%.0f,"bytes":%%.0f,"p50_us":%%.0f,' ..
    '"p90_us":%%.0f,"p99_us":%%.0f,"max_us":%%.0f,"mean_us":%%.1f,"connect":%%.0f,"read":%%.0f,"write":%%.0f,' ..
    '"status":%%.0f,"timeout":%%.0f}\\n', summary.requests, summary.duration, summary.bytes, latency:percentile(50),
    latency:percentile(90), latency:percentile(99), latency.max, latency.mean, e.connect, e.read, e.write, e.status,
    e.timeout))
end
"""


def lookup_paths(n: int, device: str) -> list[str]:
    """``QUERIES`` lookups as `registry lookup --op OP --shape S --device D` makes them, of stored workloads spread
    over the registry (the synthetic ones are numbered: registry.testing.workload(i))."""
    n_wl = max(1, n // RECORDS_PER_WORKLOAD)
    paths = []
    for q in range(QUERIES):
        w = testing.workload((q * 7919) % n_wl)
        shape = ",".join(map(str, w.signature.args[0][0]))
        query = {"op": w.signature.op_kind, "shape": shape, "device": device, "top_k": 1, "limit": 20}
        paths.append("/api/v1/workloads?" + urllib.parse.urlencode(query))
    return paths


def wrk(url: str, paths: list[str], token: str, clients: int, seconds: float, work: Path) -> dict:
    """One wrk run: requests/s, latency percentiles in ms, and the errors it counted."""
    script = work / "bench.lua"
    script.write_text(LUA % {"paths": ", ".join(json.dumps(p) for p in paths), "token": token})
    threads = min(clients, WRK_THREADS)
    cmd = ["wrk", "-t", str(threads), "-c", str(clients), "-d", f"{seconds:g}s", "--timeout", "30s", "--latency",
           "-s", str(script), url + paths[0]]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("SERVE_BENCH ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result:\n{done.stdout}\n{done.stderr}")
    r = json.loads(line.split(" ", 1)[1])
    errors = {k: int(r[k]) for k in ("connect", "read", "write", "timeout") if r[k]}
    return {
        "clients": clients,
        "requests": int(r["requests"]),
        "requests_per_s": round(r["requests"] / (r["duration_us"] / 1e6), 1),
        "p50_ms": round(r["p50_us"] / 1e3, 2),
        "p90_ms": round(r["p90_us"] / 1e3, 2),
        "p99_ms": round(r["p99_us"] / 1e3, 2),
        "max_ms": round(r["max_us"] / 1e3, 2),
        "kb_per_request": round(r["bytes"] / max(1, r["requests"]) / 1e3, 1),
        "non_2xx": int(r["status"]),  # 4xx and 5xx answers: a run with any is not a clean measurement
        "socket_errors": errors,
    }


def load_series(
    server: Server, paths: list[str], levels: list[int], seconds: float, work: Path, repeat: int = 1
) -> list[dict]:
    """wrk at each concurrency level, ``repeat`` runs of it, after an unrecorded warm-up that has every worker's
    caches and connections (and, on PostgreSQL, the database's pages) ready."""
    wrk(server.url, paths, server.token, min(4, max(levels)), min(2.0, seconds), work)
    rows = []
    for clients in levels:
        row = median_run([wrk(server.url, paths, server.token, clients, seconds, work) for _ in range(repeat)])
        rows.append(row)
        bad = (
            f"  {row['non_2xx']} non-2xx, errors {row['socket_errors']}"
            if row["non_2xx"] or row["socket_errors"]
            else ""
        )
        print(f"    {clients:>3} clients: {row['requests_per_s']:>8,.1f} req/s  p50 {row['p50_ms']:.1f} ms  "
              f"p99 {row['p99_ms']:.1f} ms{bad}", flush=True)  # fmt: skip
    return rows


def median_run(runs: list[dict]) -> dict:
    """Several wrk runs of one level as one row: the median of each figure, the errors of all, and every run."""
    if len(runs) == 1:
        return runs[0]
    row = {k: statistics.median(r[k] for r in runs) for k in ("requests_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms")}
    errors: dict[str, int] = {}
    for r in runs:
        for k, v in r["socket_errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "clients": runs[0]["clients"], **row, "requests": sum(r["requests"] for r in runs),
        "kb_per_request": runs[0]["kb_per_request"], "non_2xx": sum(r["non_2xx"] for r in runs),
        "socket_errors": errors, "runs": runs,
    }  # fmt: skip


def measure_load(args, work: Path) -> list[dict]:
    results = []
    device = testing.device().name
    for backend in args.backends:
        for n in args.records:
            print(f"[{backend} {n:,}] building ...", flush=True)
            with synthetic_registry(backend, n, args.pg) as (url, built):
                print(f"[{backend} {n:,}] {built}", flush=True)
                token = make_token(url, "reader")
                log = work / f"server_{backend}_{n}.log"
                entry = {"backend": backend, "records": n, "build": built}
                with Server(url, token, args.workers, log) as server:
                    paths = lookup_paths(n, device)
                    found = json.loads(server.get(paths[0]))["rows"]
                    assert found, f"the lookup {paths[0]} found nothing: the queries do not match the registry"
                    print(f"[{backend} {n:,}] lookup ({QUERIES} distinct queries)", flush=True)
                    entry["lookup"] = load_series(server, paths, args.concurrency, args.duration, work, args.repeat)
                    kind, page = "model_page", f"/models/{MODEL}"
                    entry["model_page_error"] = server.problem(page)
                    if entry["model_page_error"]:
                        # still measure the model's report, as the JSON the page is drawn from (same queries)
                        print(f"[{backend} {n:,}] THE MODEL PAGE FAILS: {entry['model_page_error']}", flush=True)
                        kind, page = "model_api", f"/api/v1/models/{MODEL}"
                    print(f"[{backend} {n:,}] {kind} {page} ({MODEL_TASKS} tasks)", flush=True)
                    entry[kind] = load_series(server, [page], args.page_concurrency, args.duration, work, args.repeat)
                entry["server_log_problems"] = server_problems(log)[:20]
                results.append(entry)
    return results


# -- pull, import, push ---------------------------------------------------------------------------------------------


def transfer(args, work: Path) -> dict:
    n = args.pull_records
    source, built = real_registry(n)
    print(f"[pull] source {source}: {built}", flush=True)
    bundle = work / "source.bundle"
    export_s, _ = registry(source, "export", "--bundle", str(bundle))
    empty = []
    for _ in range(args.runs):
        empty.append(round(registry(f"sqlite:///{work / 'empty.db'}", "db", "upgrade")[0], 2))
        remove_sqlite(work / "empty.db")
    token = make_token(source, "reader")
    imports, pulls = [], []
    with Server(source, token, args.workers, work / "server_pull.log") as server:
        for run in range(args.runs):
            # alternate which goes first, so that a machine slowing down (or warming up) favours neither
            order = [("import", imports), ("pull", pulls)]
            for kind, times in order if run % 2 == 0 else order[::-1]:
                dest = f"sqlite:///{work / 'dest.db'}"
                if kind == "import":
                    seconds, out = registry(dest, "import", str(bundle), "--json")
                else:
                    seconds, out = registry(dest, "pull", server.url, "--json", env={"REGISTRY_TOKEN": token})
                remove_sqlite(work / "dest.db")
                assert json.loads(out)["records_new"] == n, out
                times.append(round(seconds, 2))
                print(f"  {kind}: {n / seconds:,.0f} records/s ({seconds:.1f} s)", flush=True)
    out = {
        "records": n,
        "source": built,
        "export_bundle_s": round(export_s, 2),
        "bundle_mb": round(bundle.stat().st_size / 1e6, 1),
        "empty_registry_s": empty,  # `registry db upgrade` of a new file: process start + schema, in every run below
        "import_s": imports,
        "pull_s": pulls,
        "import_records_per_s": round(n / statistics.median(imports)),
        "pull_records_per_s": round(n / statistics.median(pulls)),
        "pull_server_log_problems": server_problems(work / "server_pull.log")[:20],
    }
    out["pull_over_import"] = round(out["pull_records_per_s"] / out["import_records_per_s"], 3)
    out["push"] = {backend: push_runs(args, backend, source, n, work) for backend in args.backends}
    return out


def push_runs(args, backend: str, source: str, n: int, work: Path) -> dict:
    """`registry push URL` of ``source`` into a new registry on ``backend``, served by a new server, per run."""
    times, problems = [], []
    for run in range(args.runs):
        with contextlib.ExitStack() as stack:
            if backend == "sqlite":
                dest = f"sqlite:///{work / 'pushed.db'}"
                stack.callback(remove_sqlite, work / "pushed.db")
            else:
                dest = stack.enter_context(PgScratch(args.pg))
            token = make_token(dest, "writer")  # creates the registry too
            log = work / f"server_push_{backend}_{run}.log"
            server = stack.enter_context(Server(dest, token, args.workers, log))
            seconds, out = registry(source, "push", server.url, "--json", env={"REGISTRY_TOKEN": token})
            assert json.loads(out)["records_new"] == n, out
            times.append(round(seconds, 2))
            print(f"  push into {backend}: {n / seconds:,.0f} records/s ({seconds:.1f} s)", flush=True)
        problems += server_problems(log)
    return {"push_s": times, "records_per_s": round(n / statistics.median(times)), "server_log_problems": problems[:20]}


# -- report ---------------------------------------------------------------------------------------------------------


def targets(result: dict) -> dict:
    """The issue's targets, where this run measured what they name."""
    out = {}
    for entry in result.get("load", []):
        n, backend = entry["records"], entry["backend"]
        for row in entry["lookup"]:
            if backend == "postgresql" and n == 1_000_000 and row["clients"] == 32:
                ok = row["p99_ms"] <= 50 and row["requests_per_s"] >= 500
                ok = ok and not row["non_2xx"] and not row["socket_errors"]
                out["lookup_1e6_postgresql_32_clients: p99 <= 50 ms, >= 500 req/s"] = ok
        name = f"model_page_{backend}_{n}_8_clients: p99 <= 200 ms"
        if entry.get("model_page_error"):
            out[f"{name} (the page answers {entry['model_page_error'].split()[0]})"] = False
        for row in entry.get("model_page", []):
            if row["clients"] == 8:
                out[name] = row["p99_ms"] <= 200 and not row["non_2xx"]
    if "transfer" in result:
        out["pull >= 0.8x import records/s"] = result["transfer"]["pull_over_import"] >= 0.8
    return out


def print_tables(result: dict) -> None:
    if result.get("load"):
        print("\n| backend | records | endpoint | clients | req/s | p50 ms | p99 ms | non-2xx / errors |")
        print("|---|---|---|---|---|---|---|---|")
        for e in result["load"]:
            for endpoint in ("lookup", "model_page", "model_api"):
                for r in e.get(endpoint, []):
                    errors = f"{r['non_2xx']} / {sum(r['socket_errors'].values())}"
                    cells = [e["backend"], f"{e['records']:,}", endpoint, r["clients"], f"{r['requests_per_s']:,.1f}",
                             f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}", errors]  # fmt: skip
                    print("| " + " | ".join(map(str, cells)) + " |")
    t = result.get("transfer")
    if t:
        print(f"\n{t['records']:,} real records (median of {len(t['import_s'])} runs, wall time, process start "
              f"included; an empty registry alone: {statistics.median(t['empty_registry_s']):.1f} s)")  # fmt: skip
        print("| operation | records/s | runs (s) |")
        print("|---|---|---|")
        print(f"| `registry import BUNDLE` (SQLite) | {t['import_records_per_s']:,} | {t['import_s']} |")
        print(f"| `registry pull URL` (SQLite from SQLite) | {t['pull_records_per_s']:,} | {t['pull_s']} |")
        for backend, p in t["push"].items():
            print(f"| `registry push URL` (into {backend}) | {p['records_per_s']:,} | {p['push_s']} |")
        print(f"pull / import: {t['pull_over_import']:.2f}")
    for name, ok in result.get("targets", {}).items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")


def main() -> None:
    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x]

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=ints, default=[100_000, 1_000_000], help="registry sizes for the load")
    parser.add_argument("--backends", type=lambda s: s.split(","), default=["sqlite", "postgresql"])
    parser.add_argument("--concurrency", type=ints, default=[1, 2, 4, 8, 16, 32, 64], help="lookup's clients")
    parser.add_argument("--page-concurrency", type=ints, default=[1, 8, 64], help="the model page's clients")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of each wrk run")
    parser.add_argument("--repeat", type=int, default=1, help="wrk runs per level; the median of each figure is kept")
    parser.add_argument("--workers", type=int, default=2, help="`registry serve --workers`")
    parser.add_argument("--pull-records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each pull, import and push")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test", help="PostgreSQL admin URL")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--skip-pull", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "serve.json")
    args = parser.parse_args()
    if not args.skip_load and shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install -y wrk (or --skip-load)")
    result: dict = {
        "note": NOTE.format(workers=args.workers, threads=WRK_THREADS, cores=os.cpu_count()),
        "workers": args.workers,
        "wrk_threads": WRK_THREADS,
        "duration_s": args.duration,
        "repeat": args.repeat,
        "lookup_queries": QUERIES,
        "model_tasks": MODEL_TASKS,
    }
    # this run's scratch files and the servers' logs, kept until the next run for a look at what went wrong
    work = WORK / "last-run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if not args.skip_load:
        result["load"] = measure_load(args, work)
    if not args.skip_pull:
        result["transfer"] = transfer(args, work)
    result["targets"] = targets(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamped(result), indent=1) + "\n")
    print_tables(result)
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
