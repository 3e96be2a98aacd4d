"""What `registry pull`, `push` and `sync` by URL tell a user who got something wrong (#55): a missing token names
--token-file and $REGISTRY_TOKEN, a page's URL pasted from the browser is read as its server (and its model), an
address without its scheme says to write http://, and a filter that matches nothing names what exists and creates
no registry. A real server on a loopback port (tests/server.py), the CLI as a user runs it, SQLite and PostgreSQL."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from click.testing import CliRunner

from registry.cli.main import cli
from registry.errors import BadInputError
from registry.share.remote import missing_scheme, server_root
from registry.store.sql.store import Store
from tests.server import EVIL_MODEL, EVIL_TEAM, fill, make_token, ok, refused, serving


def test_a_page_url_is_cut_to_its_server_and_names_its_model():
    assert server_root("http://h:8000") == ("http://h:8000", None)
    assert server_root("http://h:8000/") == ("http://h:8000", None)
    assert server_root("http://h:8000/models/vit_dst") == ("http://h:8000", "vit_dst")
    assert server_root("http://h:8000/models/vit_dst?device=2#tasks") == ("http://h:8000", "vit_dst")
    assert server_root("https://h/models/" + urllib.parse.quote("a b/<c>", safe="")) == ("https://h", "a b/<c>")
    assert server_root("http://h:8000/models") == ("http://h:8000", None)
    assert server_root("http://h:8000/search?op=matmul") == ("http://h:8000", None)
    assert server_root("http://h:8000/api/v1/workloads?op=x") == ("http://h:8000", None)
    assert server_root("http://h:8000/workloads/123") == ("http://h:8000", None)
    # a server behind a proxy, under a path of its own, keeps it
    assert server_root("https://h/registry/models/m") == ("https://h/registry", "m")
    assert server_root("https://h/registry/") == ("https://h/registry", None)


def test_an_address_without_its_scheme_is_recognised():
    for text in ("host:8000", "127.0.0.1:8000", "registry.example.com:443/models/x", "[::1]:8000", "localhost",
                 "localhost/models/x"):  # fmt: skip
        assert "write http://" in missing_scheme(text), text
    for text in ("starter", "team.db", "sqlite:///a.db", "postgresql://u@h:5432/db", "http://h:1", "./a:1.db"):
        assert missing_scheme(text) is None, text


def test_commands_given_an_address_without_its_scheme_say_so_and_create_nothing(tmp_path: Path):
    db = tmp_path / "mine.db"
    line = refused("--db", f"sqlite:///{db}", "pull", "127.0.0.1:8000", "--model", "m")
    assert "write http://127.0.0.1:8000" in line and "shipped bundle" not in line
    assert "write http://h:8000" in refused("--db", f"sqlite:///{db}", "push", "h:8000")
    assert "write http://h:8000" in refused("sync", "h:8000", f"sqlite:///{db}")
    assert "write http://h:8000" in refused("sync", f"sqlite:///{db}", "h:8000")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)  # where a file named after the address would have been created
        assert "write http://localhost:9" in refused("sync", "localhost:9", "mine.db")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def empty(db_url) -> str:
    Store(db_url).close()
    return db_url


def test_a_token_file_is_read_no_further_than_a_token_could_be(tmp_path: Path):
    """``--token-file /dev/zero`` read until the process was killed."""
    from registry.share.remote import read_token

    with pytest.raises(BadInputError, match="holds more than a token"):
        read_token(Path("/dev/zero"))
    large = tmp_path / "large"
    large.write_text("a" * 10_000)
    assert "holds more than a token" in refused("--db", "http://127.0.0.1:1", "--token-file", str(large), "stats")


def test_a_refused_token_names_token_file_and_the_variable(empty, tmp_path: Path):
    mine = f"sqlite:///{tmp_path / 'mine.db'}"
    with serving(empty) as base:
        for args in (["--db", mine, "pull", base], ["sync", base, mine]):
            line = refused(*args, env={"REGISTRY_TOKEN": ""})
            assert "401" in line and "Authorization" in line, line  # the server's detail stays
            assert "--token-file FILE or $REGISTRY_TOKEN" in line and "no token was given" in line, line
        assert not (tmp_path / "mine.db").exists()  # asked before the registry here was opened
        line = refused("--db", mine, "pull", base, env={"REGISTRY_TOKEN": "rgt_" + "x" * 43})
        assert "refused" in line and "--token-file" in line, line
        Store(mine).close()
        line = refused("--db", mine, "push", base, env={"REGISTRY_TOKEN": ""})
        assert "--token-file FILE or $REGISTRY_TOKEN" in line, line
        reader = make_token(empty, "reader")
        line = refused("--db", mine, "push", base, env={"REGISTRY_TOKEN": reader})
        assert "403" in line and "--token-file" not in line  # the token was read: its role is what falls short


# -- against a registry with records -------------------------------------------------------------------------------


@pytest.fixture
def filled(db_url, tuned_logs) -> str:
    assert fill(db_url, tuned_logs.work_dir) > 0
    return db_url


@pytest.mark.tvm
def test_a_filter_that_matches_nothing_names_what_exists_and_creates_no_registry(filled, tmp_path: Path):
    reader = make_token(filled, "reader")
    env = {"REGISTRY_TOKEN": reader}
    db = tmp_path / "mine.db"
    mine = f"sqlite:///{db}"
    with serving(filled) as base:
        line = refused("--db", mine, "pull", base, "--team", "nlpp", env=env)
        assert "404" in line and "'nlpp'" in line and repr(EVIL_TEAM) in line, line
        line = refused("--db", mine, "pull", base, "--model", "bert-l2", env=env)
        assert "'bert-l2'" in line and repr(EVIL_MODEL) in line, line
        line = refused("--db", mine, "pull", base, "--device", "99", env=env)
        assert "'99'" in line and "known" in line, line
        line = refused("sync", base, mine, "--team", "nlpp", env=env)
        assert "'nlpp'" in line, line
        line = refused("--db", mine, "pull", base, "--team", EVIL_TEAM, "--model", "nope", env=env)
        assert "model 'nope'" in line, line  # the filter that matches nothing alone is the one named
        assert not db.exists()
        # a filter that matches, with nothing since a time: an empty pull, not a refusal
        empty = ok("--db", mine, "pull", base, "--team", EVIL_TEAM, "--since", "2999-01-01", env=env)
        assert empty["records_read"] == 0


@pytest.mark.tvm
def test_a_pasted_page_url_pulls_from_its_server_the_model_it_shows(filled, tmp_path: Path):
    env = {"REGISTRY_TOKEN": make_token(filled, "reader")}
    with serving(filled) as base:
        page = f"{base}/models/{urllib.parse.quote(EVIL_MODEL, safe='')}?device=1"
        by_page = CliRunner(env=env).invoke(cli, ["--db", f"sqlite:///{tmp_path / 'a.db'}", "pull", page])
        assert by_page.exit_code == 0, by_page.output
        assert f"pulled from {base} " in by_page.output and repr(EVIL_MODEL) in by_page.output
        by_flag = ok("--db", f"sqlite:///{tmp_path / 'b.db'}", "pull", base, "--model", EVIL_MODEL, env=env)
        again = ok("--db", f"sqlite:///{tmp_path / 'b.db'}", "pull", page, env=env)
        assert by_flag["records_new"] > 0 and again["records_new"] == 0 and again["incremental"]  # the same pull
        search = ok("--db", f"sqlite:///{tmp_path / 'c.db'}", "pull", f"{base}/search?op=matmul", env=env)
        assert search["url"] == base and search["records_new"] >= by_flag["records_new"]
        line = refused("--db", f"sqlite:///{tmp_path / 'd.db'}", "pull", f"{base}/models/nope", env=env)
        assert "'nope'" in line and repr(EVIL_MODEL) in line  # the page's model, checked as --model is
