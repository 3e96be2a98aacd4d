"""A real ``registry serve`` app under uvicorn on a loopback port, for the server's tests, and a registry that holds
real records (replayable traces, as a pushed or pulled bundle needs) and a model with hostile names."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from registry.cli.main import cli
from registry.server.app import ServeConfig, create_app
from registry.server.auth import digest, new_token
from registry.store.rows import ModelIn
from registry.store.sql.store import Store

EVIL_MODEL = 'evil"<b>model</b>&amp;'
EVIL_TEAM = "<script>alert('team')</script>"
EVIL_HOST = "<img src=x onerror=alert(1)>"


@contextlib.contextmanager
def serving(url: str, **config) -> Iterator[str]:
    """The app over ``url`` served by uvicorn in a thread, on a port of its own; yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(ServeConfig(db=url, **config))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def make_token(url: str, role: str, name: str | None = None) -> str:
    token = new_token()
    with Store(url) as store:
        store.add_token(name or f"{role}-{token[-6:]}", role, digest(token))
    return token


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


def request(
    url: str, token: str | None = None, *, method: str = "GET", data: bytes | None = None, headers=None
) -> Answer:
    """One HTTP request; an error status is an answer like any other."""
    req = urllib.request.Request(url, method=method, data=data, headers=dict(headers or {}))
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return Answer(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
    except urllib.error.HTTPError as e:
        return Answer(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


def fill(url: str, logs: Path, keep=lambda i: True) -> int:
    """``url`` with the real tuning logs' records, measured there (as if it tuned them) by a team and on a host
    with hostile names, and a model of their workload with a hostile name. Returns the records written."""
    from tests.tvm_env import logged_workloads, measured_here

    with Store(url) as store:
        n = measured_here(store, logs, EVIL_TEAM, keep, host=EVIL_HOST, model=EVIL_MODEL)
        tasks = [(w, f"task<{i}>", 1 + i) for i, w in enumerate(logged_workloads(logs))]
        store.save_model(ModelIn(EVIL_MODEL, "ab" * 32, {"x": [8, 64]}, tasks))
    return n


# -- what a client sees: the CLI's JSON, its one-line refusals, a problem document --------------------------------


def ok(*args: str, env: dict | None = None) -> dict:
    result = CliRunner(env=env).invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout[result.stdout.index("{") :])  # progress and warnings go to stderr


def refused(*args: str, env: dict | None = None) -> str:
    """The one line a refused command prints (a refusal, never an internal error)."""
    result = CliRunner(env=env).invoke(cli, list(args))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert "internal error" not in lines[0], lines[0]
    return lines[0]


def problem(answer, status: int) -> str:
    """The one line of a problem document, which ``answer`` must be, with ``status``."""
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.headers["content-type"].startswith("application/problem+json"), answer.headers
    doc = answer.json()
    assert doc["status"] == status and set(doc) == {"type", "title", "status", "detail"}, doc
    assert "\n" not in doc["detail"] and "Traceback" not in doc["detail"] and len(doc["detail"]) <= 400
    return doc["detail"]
