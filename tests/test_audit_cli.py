"""An outside audit of what the CLI writes to files and to terminals: no output file lands on another registry, no
text stored in a registry reaches a reader's terminal as control characters, and a report's default file name is
bounded. Each test here failed on the code before its fix (checked by undoing the fix)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from registry import testing
from registry.cli.main import cli
from registry.store.rows import ModelIn
from registry.store.sql.store import Store

EVIL = "\x1b[2J\x1b]0;title\x07\nrun: curl x | sh\r\u202e\x9b"
RAW = ("\x1b", "\x07", "\r", "\x00", "\u202e", "\x9b")


def _invoke(db: str, *args: str):
    return CliRunner().invoke(cli, ["--db", db, *args])


def _fill(url: str, model: str = "m") -> None:
    """One device with one record of one workload, and a model of that workload (no TVM)."""
    store = Store(url)
    try:
        wl, dev = testing.workload(0), testing.device()
        store.ingest([wl], [testing.record(0, 0, dev)])
        store.save_model(ModelIn(model, "ab" * 32, {"x": [1, 3]}, [(wl, "t", 1)]))
    finally:
        store.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- 1. an output path that names another registry -----------------------------------------------------------------


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """A second registry, made by the CLI, with a record in it."""
    path = tmp_path / "other.db"
    done = _invoke(str(path), "db", "upgrade")
    assert done.exit_code == 0, done.output
    _fill(f"sqlite:///{path}")
    return path


OUTPUTS = {
    "report -o": (["report", "m", "-o"], "", "-o"),
    "export --bundle": (["export", "--bundle"], "", "--bundle"),
    "export --bundle onto its write-ahead log": (["export", "--bundle"], "-wal", "--bundle"),
    "report -o onto its rollback journal": (["report", "m", "-o"], "-journal", "-o"),
    "report -o onto its migration lock": (["report", "m", "-o"], ".migrate.lock", "-o"),
    "export --bundle onto its similarity index": (["export", "--bundle"], ".faiss", "--bundle"),
    "transfer -o": (["transfer", "MODEL", "--input-shape", "x=1,3", "-o"], "", "-o"),
    "transfer --report": (["transfer", "MODEL", "--input-shape", "x=1,3", "--report"], "", "--report"),
    "tune -o": (["tune", "MODEL", "--input-shape", "x=1,3", "-o"], "", "-o"),
}


@pytest.mark.parametrize("case", list(OUTPUTS))
def test_no_output_lands_on_another_registry(case, db_url, other, tmp_path):
    """`report -o other.db` and `export --bundle other.db` overwrote another registry's SQLite file (the guard knew
    only the registry's own files); so would any output on that registry's journal, lock or index files. Each is one
    line naming the option and the file, and the other registry's bytes stay as they were."""
    _fill(db_url)
    args, suffix, option = OUTPUTS[case]
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not an onnx model: the command must refuse its output before reading it")
    target = Path(f"{other}{suffix}") if suffix.startswith("-") else other.with_suffix(suffix) if suffix else other
    if target != other:
        target.write_bytes(b"a file the other registry keeps")
    before = {p: _digest(p) for p in (other, target)}
    done = _invoke(db_url, *[str(model) if a == "MODEL" else a for a in args], str(target))
    assert done.exit_code == 1, done.output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {option} {target} "), done.stderr
    assert "SQLite database" in lines[0] and "give another path" in lines[0]
    assert {p: _digest(p) for p in (other, target)} == before


def test_an_earlier_report_or_bundle_is_overwritten_a_registry_is_not(sqlite_url, other, tmp_path):
    """The guard reads what is there: an ordinary file (an earlier report, an earlier bundle) is written over as
    before, and the same command onto the other registry is refused (before the fix, it was written over)."""
    _fill(sqlite_url)
    before = _digest(other)
    for args in (["report", "m", "-o"], ["export", "--bundle"]):
        for _ in range(2):
            done = _invoke(sqlite_url, *args, str(tmp_path / "earlier"))
            assert done.exit_code == 0, done.output
        done = _invoke(sqlite_url, *args, str(other))
        assert done.exit_code == 1 and "SQLite database" in done.stderr, done.output
    assert _digest(other) == before


# -- 2. stored text on the reader's terminal ----------------------------------------------------------------------


def _crafted(url: str) -> None:
    """A registry whose device, model and task names hold a terminal escape, a bell, a newline, a carriage return,
    a bidi override and a C1 control, written with SQL as a foreign writer (or an older registry) could."""
    _fill(url)
    store = Store(url)
    try:
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE device SET host_model = :e, name = :e"), {"e": EVIL})
            conn.execute(text("UPDATE model SET name = :e"), {"e": EVIL})
            conn.execute(text("UPDATE model_task SET task_name = :e"), {"e": EVIL})
            conn.execute(text("UPDATE tuning_record SET team = :e"), {"e": EVIL})
    finally:
        store.close()


@pytest.mark.parametrize(
    "args",
    [["devices"], ["lookup"], ["stats"], ["devices", "--format", "csv"], ["report", "1", "-o", "REPORT"]],
    ids=lambda a: " ".join(a),
)
def test_stored_control_characters_are_printed_escaped(args, db_url, tmp_path):
    """`registry devices`, `lookup`, `stats` and `report` printed a stored name raw: ESC [2J cleared the reader's
    screen, an OSC set the terminal's title, and a newline started a forged `run: curl x | sh` line. Now each such
    character is shown as repr shows it, on both backends."""
    _crafted(db_url)
    done = _invoke(db_url, *[str(tmp_path / "r.html") if a == "REPORT" else a for a in args])
    assert done.exit_code == 0, done.output
    for stream in (done.stdout, done.stderr):
        assert not any(c in stream for c in RAW), stream
        assert not any(line.startswith("run: curl") for line in stream.splitlines()), stream
    assert "\\x1b[2J\\x1b]0;title\\x07\\nrun: curl x | sh\\r\\u202e\\x9b" in done.stdout


def test_an_error_quoting_stored_text_is_one_escaped_line(db_url):
    """`registry report` of an unknown model lists the known ones in its `Error:` line: a stored name with a newline
    made it two lines, the second a forged one, and its escapes reached the terminal."""
    _crafted(db_url)
    done = _invoke(db_url, "report", "no-such-model")
    assert done.exit_code == 1, done.output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: no model"), done.stderr
    assert not any(c in done.stderr for c in RAW) and "\\x1b[2J" in lines[0]


# -- 3. a report's file name -------------------------------------------------------------------------------------


def test_a_report_of_a_very_long_model_name_gets_a_bounded_file_name(sqlite_url, tmp_path, monkeypatch):
    """A model named with 5,000 characters (an older registry, or one written by SQL, holds it) made
    `registry report NAME` fail with "File name too long" as an internal error; its default file name is now the
    name cut short plus a digest of the whole, and two such names get two files."""
    names = ["m" * 5000, "m" * 4999 + "n"]
    _fill(sqlite_url)
    store = Store(sqlite_url)
    try:
        store.save_model(ModelIn("second", "cd" * 32, {"x": [1, 3]}, [(testing.workload(0), "t", 1)]))
        with store.engine.begin() as conn:
            for model_id, name in enumerate(names, 1):
                conn.execute(text("UPDATE model SET name = :n WHERE id = :i"), {"n": name, "i": model_id})
    finally:
        store.close()
    monkeypatch.chdir(tmp_path)
    for name in names:
        done = _invoke(sqlite_url, "report", name)
        assert done.exit_code == 0, done.output
    written = sorted(p.name for p in tmp_path.glob("*.report.html"))
    assert len(written) == 2 and all(n.startswith("m" * 50) and len(n) < 150 for n in written), written


def test_an_output_name_the_os_refuses_is_one_line(sqlite_url, tmp_path):
    """`registry report -o` of a name longer than the filesystem takes was an internal error with the name's 5,000
    characters; now it is one `Error:` line that says why, with the name cut to its ends."""
    _fill(sqlite_url)
    done = _invoke(sqlite_url, "report", "m", "-o", str(tmp_path / ("r" * 5000)))
    assert done.exit_code == 1, done.output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: cannot write the report to "), done.stderr
    assert "File name too long" in lines[0] and len(lines[0]) < 400
