"""`registry serve` against an outside audit's findings: a sign-in must prove it comes from the site's own pages,
answers that depend on a token are stored by no cache, tokens can expire, the header block is bounded before any
token is looked at, control characters in a path or query are refused before they reach the database, the serve
options refuse what is no number, and a model row with unreadable input shapes is shown, not a 500. A real uvicorn
on loopback (tests/server.py; the header bound through the real `registry serve`), real SQLite and PostgreSQL.

Each test failed on the code before its fix (checked by undoing the fix), except where its docstring says otherwise."""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from registry.cli.main import cli
from registry.errors import BadInputError
from registry.server.auth import digest, new_token
from registry.store.rows import ModelIn
from registry.store.sql.store import Store
from registry.testing import workload
from tests.server import make_token, problem, request, serving

MODEL = "audit-model"


@pytest.fixture
def registry(db_url) -> str:
    """A registry with one model (its input shapes {"x": [8, 64]}) and no records."""
    with Store(db_url) as store:
        store.save_model(ModelIn(MODEL, "ab" * 32, {"x": [8, 64]}, [(workload(0), "task0", 1)]))
    return db_url


def _cli(*args: str):
    return CliRunner().invoke(cli, list(args))


def _one_line_refusal(result, code: int) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == code and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


# -- 1. a sign-in proves it comes from this site ----------------------------------------------------------------------


def test_a_sign_in_is_taken_only_when_it_proves_it_comes_from_this_site(sqlite_url):
    """`Origin: null` (a sandboxed frame, a redirect) and a form naming no origin at all got a sign-in cookie."""
    reader = make_token(sqlite_url, "reader")
    form = f"token={reader}".encode()
    with serving(sqlite_url) as base:
        other_port = f"http://127.0.0.1:{int(base.rsplit(':', 1)[1]) + 1}"
        for headers in (
            {"Origin": "null"},
            {},
            {"Origin": "https://evil.example"},
            {"Origin": other_port},
            {"Origin": base.replace("http://", "https://")},
            {"Sec-Fetch-Site": "same-site", "Origin": base},  # a browser's word is taken over the Origin
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "none"},
        ):
            refused = request(base + "/login", method="POST", data=form, headers=headers)
            assert "this site" in problem(refused, 403) and "set-cookie" not in refused.headers, headers
            out = request(base + "/logout", method="POST", data=b"", headers=headers)
            assert out.status == 403 and "set-cookie" not in out.headers, headers
        for headers in ({"Origin": base}, {"Sec-Fetch-Site": "same-origin"}):
            signed_in = _post_unfollowed(base, "/login", form, headers)
            assert signed_in[0] == 303 and "registry_token=" in signed_in[1], headers


def _post_unfollowed(base: str, path: str, body: bytes, headers: dict) -> tuple[int, str]:
    """(status, Set-Cookie) of a POST whose redirect is not followed."""
    import http.client

    host, port = urllib.parse.urlsplit(base).netloc.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", path, body=body, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.getheader("Set-Cookie", "")
    finally:
        conn.close()


# -- 2. what depends on a token is stored by no cache -----------------------------------------------------------------


def test_an_answer_that_depends_on_a_token_is_stored_by_no_cache(sqlite_url):
    """No answer carried Cache-Control: a shared cache could keep a signed-in page or the token list."""
    reader, admin = make_token(sqlite_url, "reader"), make_token(sqlite_url, "admin")
    with serving(sqlite_url, public=True) as base:
        private = [
            request(base + "/api/v1/registry", reader),
            request(base + "/api/v1/tokens", admin),
            request(base + "/api/v1/tokens"),  # 401: the list is an admin's, whoever asks
            request(base + "/api/v1/registry", "rgt_not-a-token"),
            request(base + "/", headers={"Accept": "text/html", "Cookie": f"registry_token={reader}"}),
            request(base + "/models", headers={"Accept": "text/html", "Cookie": f"registry_token={reader}"}),
        ]
        for answer in private:
            assert answer.headers.get("cache-control") == "no-store", answer.headers
            assert "Authorization" in answer.headers["vary"] and "Cookie" in answer.headers["vary"]
        # the sign-in's cookie itself
        import http.client

        host, port = urllib.parse.urlsplit(base).netloc.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/login", body=f"token={reader}".encode(), headers={"Origin": base})
        signed_in = conn.getresponse()
        assert signed_in.status == 303 and signed_in.getheader("Cache-Control") == "no-store"
        conn.close()
        # what anyone may read, asked without a token, may be kept; its Vary keeps it from a signed-in browser
        public = request(base + "/openapi.json")
        assert public.status == 200 and "cache-control" not in public.headers
        assert "Cookie" in public.headers["vary"]


# -- 3. tokens can expire ---------------------------------------------------------------------------------------------


def test_a_token_made_to_expire_is_listed_with_its_expiry_and_refused_after_it(registry):
    """There was no --expires, no expiry in `token list`, and a token was admitted until revoked."""
    made = _cli("--db", registry, "token", "create", "--role", "reader", "--name", "month", "--expires", "30d",
                "--json")  # fmt: skip
    assert made.exit_code == 0, made.output
    month = json.loads(made.stdout)["token"]
    forever = make_token(registry, "reader", "forever")
    past = new_token()
    with Store(registry) as store:
        store.add_token("gone", "reader", digest(past), dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))

    rows = {t["name"]: t for t in json.loads(_cli("--db", registry, "token", "list", "--json").stdout)["rows"]}
    expires = dt.datetime.fromisoformat(rows["month"]["expires_at"])
    assert abs(expires - (dt.datetime.now(dt.UTC) + dt.timedelta(days=30))) < dt.timedelta(minutes=5)
    assert rows["forever"]["expires_at"] is None and rows["gone"]["expires_at"] < rows["month"]["expires_at"]
    table = _cli("--db", registry, "token", "list").stdout.splitlines()
    assert "expires" in table[0] and any("month" in r and rows["month"]["expires_at"] in r for r in table)
    assert any("forever" in r and "never" in r for r in table)

    with serving(registry) as base:
        assert request(base + "/api/v1/registry", month).status == 200
        assert request(base + "/api/v1/registry", forever).status == 200
        refused = request(base + "/api/v1/registry", past)
        detail = problem(refused, 401)
        assert "expired" in detail and rows["gone"]["expires_at"] in detail and "gone" in detail
        page = request(base + "/models", headers={"Accept": "text/html", "Cookie": f"registry_token={past}"})
        assert page.status == 401 and b"expired" in page.body
        login = request(base + "/login", method="POST", data=f"token={past}".encode(), headers={"Origin": base})
        assert login.status == 401 and b"expired" in login.body and "set-cookie" not in login.headers


@pytest.mark.parametrize("value", ["0d", "30", "30x", "-1d", "9999999w", "nan"])
def test_an_expiry_that_is_no_duration_is_one_line(sqlite_url, value):
    """(There was no --expires.)"""
    result = _cli("--db", sqlite_url, "token", "create", "--role", "reader", "--name", "x", "--expires", value)
    assert "Invalid value for '--expires'" in _one_line_refusal(result, 2)


# -- 4. the header block is bounded -----------------------------------------------------------------------------------


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_huge_header_block_is_refused_quickly_without_the_server_growing(tmp_path):
    """`registry serve` (uvicorn's httptools parser) read a 64 MB header block whole, and held it, before any token
    was looked at: now 431 past --max-header (32 KiB), the connection closed."""
    db = f"sqlite:///{tmp_path / 'registry.db'}"
    Store(db).close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    registry = Path(sys.executable).with_name("registry")
    child = subprocess.Popen([str(registry), "--db", db, "serve", "--port", str(port), "--public"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert request(f"http://127.0.0.1:{port}/api/v1/registry").status == 200
                break
            except OSError:
                assert child.poll() is None and time.monotonic() < deadline, child.communicate()
                time.sleep(0.05)
        before = _peak_rss_kib(child.pid)
        line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
        total, sent, answer = 64 << 20, 0, b""
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(b"GET /api/v1/registry HTTP/1.1\r\nHost: x\r\n")
            try:
                while sent < total:
                    conn.sendall(line * 64)
                    sent += len(line) * 64
                conn.sendall(b"\r\n")
            except OSError:  # the server closed the connection: what it read is what it took
                pass
            try:
                answer = conn.recv(4096)
            except OSError:
                pass
        took = time.monotonic() - started
        grew = _peak_rss_kib(child.pid) - before
        assert sent < total and took < 20, (sent, took, answer[:200])
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:200]
        assert grew < 16 << 10, f"the server grew by {grew} KiB"
        assert request(f"http://127.0.0.1:{port}/api/v1/registry").status == 200  # and serves on
        small = request(f"http://127.0.0.1:{port}/api/v1/registry", headers={"X-Filler": "a" * 20_000})
        assert small.status == 200  # a large header block, but within the bound
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:  # past it, arriving in one read
            conn.sendall(b"GET /api/v1/registry HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * 40_000 + b"\r\n\r\n")
            whole = conn.recv(4096)
        assert whole.startswith(b"HTTP/1.1 431") and b"application/problem+json" in whole, whole[:300]
    finally:
        child.terminate()
        _, err = child.communicate(timeout=30)
    assert "Traceback" not in err, err


# -- 5. control characters never reach the database -------------------------------------------------------------------

HEX = "0" * 64
# Every kind of place a text from the client reaches a query: filters, a model's and a token's name in the path.
WITH_NUL = [
    ("GET", "/api/v1/workloads?op={c}"),
    ("GET", "/api/v1/workloads?model=m{c}"),
    ("GET", "/api/v1/workloads?dtype=float32{c}"),
    ("GET", "/api/v1/workloads?device={c}"),
    ("GET", "/api/v1/workloads/{c}"),
    ("GET", "/api/v1/models/audit{c}model"),
    ("GET", f"/api/v1/models/{MODEL}?device=cpu{{c}}"),
    ("GET", "/api/v1/exchange?team=t{c}"),
    ("GET", "/api/v1/exchange?model=m{c}"),
    ("GET", "/api/v1/exchange/bundle?device=d{c}"),
    ("GET", f"/api/v1/sync-state?origin=o{{c}}&key={HEX}"),
    ("DELETE", "/api/v1/tokens/admin{c}"),
    ("GET", "/models/audit{c}model"),
    ("GET", "/search?op=conv2d{c}"),
    ("GET", "/search?model={c}"),
]


@pytest.mark.parametrize("char", ["%00", "%01", "%1B", "%7F"])
def test_a_control_character_in_a_path_or_query_is_refused_before_the_database(registry, char):
    """On PostgreSQL a NUL was a database error, 503 "not answering", on every one of these; on SQLite it was
    looked up as any text. Now 400 on both, with one line, and nothing changes."""
    admin = make_token(registry, "admin", "admin")
    with serving(registry) as base:
        for method, path in WITH_NUL:
            answer = request(base + path.format(c=char), admin, method=method)
            assert "control character" in problem(answer, 400), path
            page = request(base + path.format(c=char), admin, method=method, headers={"Accept": "text/html"})
            if not path.startswith("/api/"):
                assert page.status == 400 and b"control character" in page.body, path
        assert request(base + "/api/v1/workloads?op=conv2d", admin).status == 200  # and it serves on
    with Store(registry) as store:
        assert [(t.name, t.revoked_at) for t in store.tokens()] == [("admin", None)]


def test_a_token_name_with_a_control_character_is_refused_in_one_line(sqlite_url):
    """The command line refused it already (its NAME type); the store let any caller write one."""
    for name in ("a\x00b", "a\nb", "\x1b[31mred"):
        result = _cli("--db", sqlite_url, "token", "create", "--role", "reader", "--name", name)
        assert "control character" in _one_line_refusal(result, 2)
    with Store(sqlite_url) as store:
        with pytest.raises(BadInputError, match="control character"):
            store.add_token("a\x00b", "reader", digest(new_token()))
        assert store.tokens() == []


# -- 6. the serve options are numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option",
    ids=lambda o: f"{o[0]}={o[1][:8]}",
    argvalues=[
        ("--rate-limit", "nan"),
        ("--rate-limit", "inf"),
        ("--rate-limit", "-1"),
        ("--rate-limit", "1e309"),
        ("--max-upload", "9" * 400),
        ("--max-header", "10"),
        ("--max-header", "nan"),
    ],
)
def test_a_serve_option_that_is_no_sane_number_is_one_line(sqlite_url, option):
    """`--rate-limit nan` raised ValueError out of uvicorn's config, `inf` and `--max-upload` of 400 digits an
    OverflowError (--max-header is new; a negative rate was refused already)."""
    line = _one_line_refusal(_cli("--db", sqlite_url, "serve", *option), 2)
    assert f"Invalid value for '{option[0]}'" in line


# -- 7. a model row with unreadable input shapes ----------------------------------------------------------------------


@pytest.mark.parametrize("shapes", ["[8, 64]", '"8x64"', "null", '{"x": "8x64"}', '{"x": [8.5]}', "not json"])
def test_a_model_row_with_unreadable_input_shapes_is_shown_as_unknown(registry, shapes):
    """One such row (written around the registry) made /, /models and /api/v1/models answer 500."""
    engine = create_engine(registry.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(text("UPDATE model SET input_shapes_json = :s WHERE name = :n"), {"s": shapes, "n": MODEL})
    engine.dispose()
    reader = make_token(registry, "reader")
    with serving(registry) as base:
        rows = request(base + "/api/v1/models", reader)
        assert rows.status == 200, rows.body[:300]
        assert [(r["name"], r["input_shapes"]) for r in rows.json()["rows"]] == [(MODEL, None)]
        for path in ("/", "/models"):
            page = request(base + path, reader, headers={"Accept": "text/html"})
            assert page.status == 200 and MODEL.encode() in page.body, (path, page.status)
            assert b"unknown" in page.body
