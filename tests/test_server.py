"""`registry serve`: the JSON API answers what the CLI prints, tokens and roles hold, pull/push/sync by URL copy
exactly and resume, and every abuse gets one problem document while the server keeps serving and the database stays
as it was. A real uvicorn server on a loopback port (tests/server.py), real SQLite and PostgreSQL, real TVM records.
The web view in a real browser: tests/test_web_view.py."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, func, select, text

from registry.cli.main import cli
from registry.server.auth import digest
from registry.store.sql.models import ApiToken, TuningRecord
from registry.store.sql.store import Store
from tests.rows import rows_of
from tests.server import EVIL_HOST, EVIL_MODEL, EVIL_TEAM, fill, make_token, ok, problem, refused, request, serving
from tests.tvm_env import measured_here

pytestmark = pytest.mark.tvm


@pytest.fixture
def filled(db_url, tuned_logs) -> str:
    assert fill(db_url, tuned_logs.work_dir) > 0
    return db_url


# -- the API answers what the CLI prints -------------------------------------------------------------------------------


def test_the_api_answers_what_the_cli_prints(filled):
    reader = make_token(filled, "reader")
    with serving(filled) as base:
        get = lambda path: request(base + path, reader)  # noqa: E731
        stats = get("/api/v1/stats").json()
        cli_stats = ok("--db", filled, "stats")
        assert stats.pop("database") == base + "/" and cli_stats.pop("database") != base  # no database URL leaks
        assert stats == cli_stats and stats["by_team"][0]["team"] == EVIL_TEAM
        assert get("/api/v1/devices").json() == ok("--db", filled, "devices")
        rows = get("/api/v1/workloads?op=matmul&top_k=3").json()
        assert rows == ok("--db", filled, "lookup", "--op", "matmul", "--top-k", "3") and rows["rows"]
        shape = ",".join(map(str, rows["rows"][0]["args"][0]["shape"]))
        assert get(f"/api/v1/workloads?shape={shape}").json()["rows"]
        assert get("/api/v1/workloads?shape=3,3,3").json()["rows"] == []
        shash = rows["rows"][0]["workload"]
        records = get(f"/api/v1/workloads/{shash}?top_k=100").json()["rows"]
        assert len(records) == rows["rows"][0]["records"]  # every ok record of it, each with provenance
        assert {(r["team"], r["trust"]) for r in records} == {(EVIL_TEAM, "measured")}
        best = get(f"/api/v1/records/{records[0]['record_id']}").json()
        assert best["workload"] == shash and best["host"] == EVIL_HOST and len(best["trace"]) == 2
        [model] = get("/api/v1/models").json()["rows"]
        assert model["name"] == EVIL_MODEL and model["input_shapes"] == {"x": [8, 64]}
        report = get("/api/v1/models/" + urllib.parse.quote(EVIL_MODEL, safe="")).json()
        [task] = report["tasks"]
        assert task["records"] == len(records) and task["curve"] and report["model_curve"]
        assert get("/api/v1/registry").json()["role"] == "reader"
        spec = request(base + "/openapi.json").json()  # the schema is public: it says what a token would unlock
        assert {"/api/v1/workloads", "/api/v1/bundles", "/api/v1/exchange/bundle"} <= set(spec["paths"])


# -- tokens and roles --------------------------------------------------------------------------------------------------


def test_a_token_is_printed_once_and_stored_as_its_hash_only(sqlite_url):
    made = ok("--db", sqlite_url, "token", "create", "--role", "writer", "--name", "ci")
    token = made["token"]
    assert token.startswith("rgt_") and len(token) > 40
    with Store(sqlite_url) as store, store.read() as s:
        [(name, role, stored)] = s.execute(select(ApiToken.name, ApiToken.role, ApiToken.digest)).all()
    assert (name, role, stored) == ("ci", "writer", digest(token))
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    assert token.encode() not in b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert [r["name"] for r in ok("--db", sqlite_url, "token", "list")["rows"]] == ["ci"]
    assert "exists" in refused("--db", sqlite_url, "token", "create", "--role", "reader", "--name", "ci")
    assert "no token" in refused("--db", sqlite_url, "token", "revoke", "nobody")
    assert "role" in refused("--db", sqlite_url, "token", "create", "--role", "boss", "--name", "x")


def test_roles_nest_and_a_revoked_token_is_refused(filled, tuned_logs, tmp_path):
    reader, writer, admin = (make_token(filled, r, r) for r in ("reader", "writer", "admin"))
    bundle = tmp_path / "b.bundle"
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with Store(other) as store:
        measured_here(store, tuned_logs.work_dir, "other")
    ok("--db", other, "export", "--bundle", str(bundle))
    with serving(filled) as base:
        post = lambda token: request(  # noqa: E731
            base + "/api/v1/bundles", token, method="POST", data=bundle.read_bytes()
        )
        assert "needed" in problem(request(base + "/api/v1/stats"), 401)
        assert "not valid" in problem(request(base + "/api/v1/stats", "rgt_" + "x" * 43), 401)
        assert "writer" in problem(post(reader), 403)
        assert "admin" in problem(request(base + "/api/v1/tokens", writer), 403)
        names = [t["name"] for t in request(base + "/api/v1/tokens", admin).json()["rows"]]
        assert names == ["reader", "writer", "admin"]
        pushed = post(writer).json()
        assert pushed["records_new"] > 0 and pushed["records_skipped"] == 0
        done = CliRunner().invoke(cli, ["--db", filled, "token", "revoke", "writer"])
        assert done.exit_code == 0 and "revoked" in done.output
        assert "not valid" in problem(post(writer), 401)
        assert "not valid" in problem(request(base + "/api/v1/stats", writer), 401)
        assert request(base + "/api/v1/stats", reader).status == 200


def test_a_public_server_lets_anyone_read_and_nobody_push_without_a_token(filled):
    with serving(filled, public=True) as base:
        assert request(base + "/api/v1/workloads").json()["rows"]
        info = request(base + "/api/v1/registry").json()
        assert info["public"] is True and info["role"] is None
        assert "push" in problem(request(base + "/api/v1/bundles", method="POST", data=b"PK"), 401)
        assert "not valid" in problem(request(base + "/api/v1/stats", "rgt_wrong"), 401)  # a bad token is no key


# -- pull, push and sync by URL ----------------------------------------------------------------------------------------


def _teams(tuned_logs, tmp_path) -> tuple[str, str]:
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    with Store(a) as store:
        measured_here(store, tuned_logs.work_dir, "a", keep=lambda i: i % 2 == 0)
    with Store(b) as store:
        measured_here(store, tuned_logs.work_dir, "b", keep=lambda i: i % 2 == 1)
    return a, b


def _origins(url: str) -> dict[str, int]:
    with Store(url) as store, store.read() as s:
        rows = s.execute(
            select(TuningRecord.origin, TuningRecord.trust, func.count()).group_by(
                TuningRecord.origin, TuningRecord.trust
            )
        ).all()
    return {f"{o}:{t}": n for o, t, n in rows}


def test_push_and_pull_by_url_give_the_counts_of_a_database_sync(db_url, tuned_logs, tmp_path):
    a, b = _teams(tuned_logs, tmp_path)
    Store(db_url).close()
    writer = make_token(db_url, "writer")
    env = {"REGISTRY_TOKEN": writer}
    # what database-to-database sync gives, for comparison
    by_db = f"sqlite:///{tmp_path / 'by_db.db'}"
    expected = [ok("sync", a, by_db)["records_new"], ok("sync", b, by_db)["records_new"]]
    with serving(db_url) as base:
        pushed = [ok("--db", a, "push", base, "--page-size", "3", env=env), ok("sync", b, base, env=env)]
        assert [p["records_new"] for p in pushed] == expected
        assert pushed[0]["pages"] == -(-expected[0] // 3)
        assert _origins(db_url) == _origins(by_db)  # every record "imported", under its own origin
        again = ok("--db", a, "push", base, env=env)
        assert again["incremental"] and again["records_read"] == 0 and again["records_new"] == 0
        pulled = ok("--db", f"sqlite:///{tmp_path / 'c.db'}", "pull", base, "--page-size", "4", env=env)
        assert pulled["records_new"] == sum(expected) and pulled["pages"] == -(-sum(expected) // 4)
        assert _origins(f"sqlite:///{tmp_path / 'c.db'}") == _origins(by_db)
        assert ok("--db", f"sqlite:///{tmp_path / 'c.db'}", "pull", base, env=env)["records_new"] == 0
        team_b = ok("sync", base, f"sqlite:///{tmp_path / 'd.db'}", "--team", "b", env=env)
        assert team_b["records_new"] == expected[1] and not team_b["incremental"]
        assert "same registry" in refused("--db", db_url, "pull", base, env=env)
        assert "one side" in refused("sync", base, base, env=env)


def test_a_pull_killed_mid_way_resumes_and_completes_exactly(filled, tmp_path):
    """kill -9 of a pull between pages: what it committed stays, the next pull adds the rest, nothing twice."""
    total = ok("--db", filled, "stats")["records"]
    dst = tmp_path / "dst.db"
    reader = make_token(filled, "reader")
    registry = Path(sys.executable).with_name("registry")
    with serving(filled) as base:
        child = subprocess.Popen(
            [str(registry), "--db", f"sqlite:///{dst}", "pull", base, "--page-size", "2", "-q"],
            env={**os.environ, "REGISTRY_TOKEN": reader},
        )
        deadline = time.monotonic() + 120
        while _count(dst) == 0:  # the first page committed
            assert child.poll() is None and time.monotonic() < deadline, "the pull ended before a page was seen"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
        kept = _count(dst)
        assert 0 < kept < total
        rest = ok("--db", f"sqlite:///{dst}", "pull", base, env={"REGISTRY_TOKEN": reader})
        assert rest["incremental"] and rest["records_new"] == total - kept and rest["records_present"] == 0
    assert _count(dst) == total


def test_a_push_killed_mid_way_resumes_and_completes_exactly(filled, tmp_path):
    """kill -9 of a push between pages: the server keeps the pages it committed, the next push sends the rest."""
    total = ok("--db", filled, "stats")["records"]
    server_db = tmp_path / "server.db"
    Store(f"sqlite:///{server_db}").close()
    writer = make_token(f"sqlite:///{server_db}", "writer")
    registry = Path(sys.executable).with_name("registry")
    with serving(f"sqlite:///{server_db}") as base:
        child = subprocess.Popen(
            [str(registry), "--db", filled, "push", base, "--page-size", "2", "-q"],
            env={**os.environ, "REGISTRY_TOKEN": writer},
        )
        deadline = time.monotonic() + 120
        while _count(server_db) == 0:  # the server committed the first page
            assert child.poll() is None and time.monotonic() < deadline, "the push ended before a page was seen"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
        rest = ok("--db", filled, "push", base, env={"REGISTRY_TOKEN": writer})
        kept = total - rest["records_new"]
        # the page in flight when the pusher died may still be committed by the server while the second push asks
        # how far it got: then it is sent again and found present, never stored twice (the count below)
        assert rest["incremental"] and 0 < kept < total and rest["records_present"] <= 2
    assert _count(server_db) == total


def _count(path: Path) -> int:
    if not path.exists():
        return 0
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM tuning_record").fetchone()[0]
    except sqlite3.OperationalError:  # the tables are not there yet
        return 0
    finally:
        conn.close()


# -- bad input and abuse: one problem document, the server still serving, the database unchanged -------------------


def _bundle(src: str, tmp_path: Path) -> bytes:
    path = tmp_path / "push.bundle"
    ok("--db", src, "export", "--bundle", str(path))
    return path.read_bytes()


def _altered(data: bytes, tmp_path: Path, member: str, edit) -> bytes:
    src, out = tmp_path / "in.bundle", tmp_path / "out.bundle"
    src.write_bytes(data)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for item in zin.infolist():
            body = zin.read(item.filename)
            zout.writestr(item.filename, edit(body) if item.filename == member else body)
    return out.read_bytes()


def _forged_decisions(data: bytes, tmp_path: Path) -> bytes:
    """A bundle whose checksums hold but one record's decisions are changed to values its trace cannot take."""
    src = tmp_path / "forge.bundle"
    src.write_bytes(data)
    with zipfile.ZipFile(src) as z:
        manifest = json.loads(z.read("manifest.json"))
        members = {n: z.read(n) for n in z.namelist() if n != "manifest.json"}
    lines = members["records.jsonl"].splitlines()
    row = json.loads(lines[0])
    decisions = json.loads(row[4])
    decisions[0][1] = [999_999, 1, 1, 1] if isinstance(decisions[0][1], list) else 999_999
    row[4] = json.dumps(decisions)
    lines[0] = json.dumps(row).encode()
    members["records.jsonl"] = b"\n".join(lines) + b"\n"
    import hashlib

    for name, body in members.items():
        manifest["members"][name] = {"sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}
    out = tmp_path / "forged.bundle"
    with zipfile.ZipFile(out, "w") as z:
        for name, body in members.items():
            z.writestr(name, body)
        z.writestr("manifest.json", json.dumps(manifest))
    return out.read_bytes()


def test_abuse_gets_one_problem_document_and_changes_nothing(filled, tuned_logs, tmp_path):
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with Store(other) as store:
        measured_here(store, tuned_logs.work_dir, "other")
    good = _bundle(other, tmp_path)
    writer = make_token(filled, "writer")
    reader = make_token(filled, "reader")
    before = rows_of(filled)
    limit = 20 * len(good)
    with serving(filled, max_upload=limit) as base:
        push = lambda data: request(base + "/api/v1/bundles", writer, method="POST", data=data)  # noqa: E731
        cases = {
            "not a zip": (push(b"hello, registry"), 400),
            "empty": (push(b""), 400),
            "altered": (
                push(_altered(good, tmp_path, "records.jsonl", lambda d: d[:50] + bytes([d[50] ^ 1]) + d[51:])),
                400,
            ),
            "truncated member": (push(_altered(good, tmp_path, "records.jsonl", lambda d: d[: len(d) // 2])), 400),
            "forged decisions": (push(_forged_decisions(good, tmp_path)), 400),
            "too large": (push(b"PK" + b"x" * limit), 413),
            "unknown path": (request(base + "/api/v1/nothing", reader), 404),
            "traversal": (request(base + "/api/v1/records/..%2F..%2Fetc%2Fpasswd", reader), 404),
            "not a number": (request(base + "/api/v1/workloads?top_k=lots", reader), 422),
            "shape injection": (request(base + "/api/v1/workloads?shape=1%3BDROP%20TABLE%20workload", reader), 400),
            "unknown device": (request(base + "/api/v1/workloads?device=nowhere", reader), 404),
            "unknown model": (request(base + "/api/v1/models/nothing", reader), 404),
            "unknown record": (request(base + "/api/v1/records/999999", reader), 404),
            "wrong method": (request(base + "/api/v1/stats", reader, method="DELETE"), 405),
            "bad auth scheme": (request(base + "/api/v1/stats", headers={"Authorization": "Basic eDp5"}), 401),
        }
        details = {name: problem(answer, status) for name, (answer, status) in cases.items()}
        assert "checksum" in details["altered"] and "the bundle" in details["altered"]
        assert "/tmp" not in " ".join(details.values())  # the server's own files are nobody's business
        assert "do not apply" in details["forged decisions"] and "skip-invalid" not in details["forged decisions"]
        # SQL in filter values is data: it matches nothing, and drops nothing
        for evil in ("' OR 1=1 --", "x'; DROP TABLE tuning_record; --"):
            q = urllib.parse.quote(evil)
            assert request(f"{base}/api/v1/workloads?op={q}", reader).json()["rows"] == []
            assert request(f"{base}/api/v1/workloads?model={q}", reader).json()["rows"] == []
        # raw paths a client would normalise: the server answers them itself
        for raw in ("/../../etc/passwd", "/api/v1/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd"):
            status, body = _raw_get(base, raw, reader)
            assert status in (400, 404) and b"root:" not in body, (raw, status, body[:200])
        assert request(base + "/api/v1/registry", reader).status == 200  # still serving
    assert rows_of(filled) == before  # nothing of it landed


def test_a_push_that_skips_invalid_records_keeps_the_rest_and_names_the_first(filled, tuned_logs, tmp_path):
    """``?skip_invalid=true`` (a served run's pushes): a record the server refuses is left out and counted, so one
    bad record of an outbox cannot stop every later push; without it the whole bundle is refused (above)."""
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with Store(other) as store:
        n = measured_here(store, tuned_logs.work_dir, "other")
    forged = _forged_decisions(_bundle(other, tmp_path), tmp_path)
    writer = make_token(filled, "writer")
    with serving(filled) as base:
        answer = request(base + "/api/v1/bundles?skip_invalid=true", writer, method="POST", data=forged)
    assert answer.status == 200, answer.body
    counts = answer.json()
    assert counts["records_skipped"] == 1 and "record 1, instruction" in counts["first_skipped"], counts
    assert counts["records_new"] + counts["records_present"] == n - 1, counts


def _raw_get(base: str, path: str, token: str) -> tuple[int, bytes]:
    host, port = urllib.parse.urlsplit(base).netloc.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("GET", path, skip_accept_encoding=True)
    conn.putheader("Authorization", f"Bearer {token}")
    conn.endheaders()
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, body


def test_an_upload_over_the_limit_is_refused_before_it_is_read(filled):
    writer = make_token(filled, "writer")
    with serving(filled, max_upload=10_000) as base:
        host, port = urllib.parse.urlsplit(base).netloc.split(":")
        # declares a gigabyte and sends none of it: the answer comes anyway, so nothing was waited for
        with socket.create_connection((host, int(port)), timeout=20) as s:
            s.sendall(
                b"POST /api/v1/bundles HTTP/1.1\r\nHost: x\r\nContent-Type: application/zip\r\n"
                b"Authorization: Bearer " + writer.encode() + b"\r\nContent-Length: 1000000000\r\n\r\n"
            )
            head = s.recv(65536)
        assert head.startswith(b"HTTP/1.1 413") and b"application/problem+json" in head
        # chunked, no length declared: refused once more than the limit has arrived
        conn = http.client.HTTPConnection(host, int(port), timeout=20)
        conn.request(
            "POST", "/api/v1/bundles", body=iter([b"x" * 4096] * 8), encode_chunked=True,
            headers={"Authorization": f"Bearer {writer}", "Transfer-Encoding": "chunked"},
        )  # fmt: skip
        r = conn.getresponse()
        assert r.status == 413 and "the most" in json.loads(r.read())["detail"]
        conn.close()
        assert request(base + "/api/v1/registry", writer).status == 200


def test_ten_thousand_requests_from_one_client_leave_the_others_served(filled):
    reader = make_token(filled, "reader")
    with serving(filled, rate=50, burst=100) as base:
        host, port = urllib.parse.urlsplit(base).netloc.split(":")
        statuses: dict[int, int] = {}
        lock = threading.Lock()

        def flood(n: int) -> None:
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            for _ in range(n):
                conn.request("GET", "/api/v1/registry", headers={"Authorization": f"Bearer {reader}"})
                r = conn.getresponse()
                body = r.read()
                if r.status == 429:
                    assert json.loads(body)["status"] == 429 and r.getheader("Retry-After")
                    assert r.getheader("X-Content-Type-Options") == "nosniff"
                with lock:
                    statuses[r.status] = statuses.get(r.status, 0) + 1
            conn.close()

        threads = [threading.Thread(target=flood, args=(2500,)) for _ in range(4)]
        for t in threads:
            t.start()
        # meanwhile another client (another loopback address) is served
        other = http.client.HTTPConnection(host, int(port), timeout=30, source_address=("127.0.0.2", 0))
        other.request("GET", "/api/v1/registry", headers={"Authorization": f"Bearer {reader}"})
        first = other.getresponse()
        assert first.status == 200 and first.read()
        for t in threads:
            t.join()
        assert sum(statuses.values()) == 10_000 and set(statuses) == {200, 429}, statuses
        assert 100 <= statuses[200] < 2000  # the burst, then about 50 a second
        other.close()  # idle past the server's keep-alive while the flood went on: a new connection
        other = http.client.HTTPConnection(host, int(port), timeout=30, source_address=("127.0.0.2", 0))
        other.request("GET", "/api/v1/registry", headers={"Authorization": f"Bearer {reader}"})
        assert other.getresponse().status == 200


def test_a_slow_client_holds_no_transaction(filled):
    """A client that asks for a page of records and never reads the answer: the server has finished with the
    database, so a writer that needs every reader gone gets its lock at once."""
    reader = make_token(filled, "reader")
    with serving(filled) as base:
        host, port = urllib.parse.urlsplit(base).netloc.split(":")
        stalled = []
        for path in ("/api/v1/exchange/bundle?limit=100000", "/api/v1/workloads?top_k=100&limit=10000"):
            s = socket.create_connection((host, int(port)), timeout=20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {reader}\r\n\r\n".encode())
            s.recv(1)  # the answer has begun: the server has read what it answers with
            stalled.append(s)
        engine = create_engine(filled.replace("postgresql://", "postgresql+psycopg://"))
        with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text("SET lock_timeout = '2s'"))
                conn.execute(text("LOCK TABLE tuning_record IN ACCESS EXCLUSIVE MODE"))
                idle = conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE state = 'idle in transaction' AND pid <> pg_backend_pid()"
                    )
                ).scalar()
                assert idle == 0
            else:
                conn.exec_driver_sql("PRAGMA busy_timeout = 2000")
                conn.exec_driver_sql("BEGIN EXCLUSIVE")
            conn.rollback()
        engine.dispose()
        for s in stalled:
            s.close()
        assert request(base + "/api/v1/registry", reader).status == 200


# -- the command itself ------------------------------------------------------------------------------------------------


def test_registry_serve_starts_answers_and_stops_on_ctrl_c(filled):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    registry = Path(sys.executable).with_name("registry")
    child = subprocess.Popen(
        [str(registry), "--db", filled, "serve", "--port", str(port), "--public"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = request(f"http://127.0.0.1:{port}/api/v1/registry")
                break
            except OSError:
                assert child.poll() is None and time.monotonic() < deadline, child.communicate()
                time.sleep(0.05)
        assert answer.status == 200 and answer.json()["public"] is True
        assert answer.headers["x-content-type-options"] == "nosniff"
    finally:
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
    assert child.returncode == 0 and "Traceback" not in err and f":{port}/" in err


def test_serve_refuses_a_missing_registry_in_one_line(tmp_path):
    assert "no registry" in refused("--db", f"sqlite:///{tmp_path / 'none.db'}", "serve").lower()
    assert not (tmp_path / "none.db").exists()


def test_serve_refuses_an_address_it_cannot_listen_on_before_it_says_it_serves(sqlite_url):
    """A busy port or an unknown host was logged by uvicorn after "serving ... at"; an empty host listened on
    every address."""
    Store(sqlite_url).close()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        assert "cannot listen on '127.0.0.1' port " + port in refused("--db", sqlite_url, "serve", "--port", port)
    assert "--host is empty" in refused("--db", sqlite_url, "serve", "--host", "")
    assert "not an address" in refused("--db", sqlite_url, "serve", "--host", "no-such-host.invalid")


def test_a_fault_of_the_server_is_one_problem_document_and_it_keeps_serving(filled, monkeypatch):
    reader = make_token(filled, "reader")

    def broken(self):
        raise RuntimeError("the disk is on fire")

    with serving(filled) as base:
        monkeypatch.setattr(Store, "stats", broken)
        detail = problem(request(base + "/api/v1/stats", reader), 500)
        assert "internal error" in detail and "fire" not in detail  # the cause is the log's, not the client's
        page = request(base + "/", reader, headers={"Accept": "text/html"})
        assert page.status == 500 and b"Traceback" not in page.body and b"internal error" in page.body
        monkeypatch.undo()
        assert request(base + "/api/v1/stats", reader).status == 200


def test_a_pooled_connection_postgresql_closed_is_pinged_and_replaced(db_url, monkeypatch):
    """A long-running server keeps connections: one the database closed (a restart) is replaced when it has been
    idle, and used unpinged when it was just in use (the ping that every checkout paid is gone)."""
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's connections")
    from registry.errors import DatabaseError
    from registry.store.sql import engine as engine_module

    def close_the_others() -> None:
        admin = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        admin.dispose()

    with Store(db_url) as store:
        store.stats()
        close_the_others()
        monkeypatch.setattr(engine_module, "IDLE_PING_S", 1e9)  # just used: not pinged, and found dead
        with pytest.raises(DatabaseError):
            store.stats()
        store.stats()  # the pool dropped it on the error
        close_the_others()
        monkeypatch.setattr(engine_module, "IDLE_PING_S", 0.0)  # idle: pinged, and replaced before use
        assert store.stats().records == 0


def test_a_client_follows_no_redirect_and_never_echoes_a_token(filled, tmp_path):
    """A redirect would carry the token to wherever it points: refused, in one line. A token with a stray newline
    (a CI secret) is used, one that is no token is refused without being quoted back."""
    import http.server

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(302)
            self.send_header("Location", "http://elsewhere.invalid/steal")
            self.end_headers()

        def log_message(self, *args):
            pass

    reader = make_token(filled, "reader")
    elsewhere = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=elsewhere.serve_forever, daemon=True).start()
    dst = f"sqlite:///{tmp_path / 'dst.db'}"
    try:
        url = f"http://127.0.0.1:{elsewhere.server_address[1]}"
        assert "redirected" in refused("--db", dst, "pull", url, env={"REGISTRY_TOKEN": reader})
    finally:
        elsewhere.shutdown()
    with serving(filled) as base:
        assert ok("--db", dst, "pull", base, env={"REGISTRY_TOKEN": reader + "\n"})["records_new"] > 0
        line = refused("--db", dst, "pull", base, env={"REGISTRY_TOKEN": "not a token; " + reader})
        assert "does not hold a token" in line and reader not in line


def test_a_sign_in_from_another_site_is_refused(filled):
    reader = make_token(filled, "reader")
    with serving(filled) as base:
        form = f"token={reader}".encode()
        cross = request(base + "/login", method="POST", data=form, headers={"Origin": "https://evil.example"})
        assert "this site" in problem(cross, 403) and "set-cookie" not in cross.headers
        host, port = urllib.parse.urlsplit(base).netloc.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)  # not following the redirect: its cookie
        conn.request("POST", "/login", body=form, headers={"Origin": base})
        own = conn.getresponse()
        assert own.status == 303 and "registry_token=" in own.getheader("Set-Cookie", "")
        conn.close()


def test_a_typo_in_a_servers_url_is_one_line_not_an_internal_error(sqlite_url):
    assert "is not a URL" in refused("--db", "https://registry.example.com:notaport", "stats")
    assert "is not a URL" in refused("--db", sqlite_url, "pull", "http://[::1")
    assert "is not a URL" in refused("--db", sqlite_url, "push", "http://[::1")
