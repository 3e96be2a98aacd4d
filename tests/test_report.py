"""`registry report`: the HTML page, its SVG curves, escaping of the database's text, and a real headless browser."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import struct
import subprocess
import zlib
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select, update

from registry import testing
from registry.cli.main import cli
from registry.report.svg import PALETTE, Series, log_ticks, nice_ticks, step_chart
from registry.store.rows import ModelIn
from registry.store.sql.models import TuningRecord
from registry.store.sql.store import Store
from registry.tvm_side import zoo
from tests.rows import rows_of

EVIL_TASK = "<script>alert(1)</script>"
EVIL_MODEL = 'evil"<b>model</b>&amp;'


def _fill(url: str) -> None:
    """A model of three tasks on the synthetic device: one with records improving a minute apart, one transferred
    from a donor of another workload, one without any record; slower records written first. Names come from an
    untrusted writer."""
    store = Store(url)
    dev = testing.device()
    wls = [testing.workload(i) for i in range(4)]
    tasks = [(wls[0], EVIL_TASK, 2), (wls[1], "dense_1", 1), (wls[2], "idle", 3)]
    store.save_model(ModelIn(EVIL_MODEL, "ab" * 32, {"x": [1, 3]}, tasks))
    store.ingest(wls, [testing.record(3, 0, dev)])  # the donor: workload 3, not in the model
    with store.read() as conn:
        donor = conn.execute(select(func.max(TuningRecord.id))).scalar()
    tuned = [replace(testing.record(0, j, dev), run_secs=(1e-3 / (1 + j),)) for j in range(3)]  # 1000, 500, 333 µs
    moved = replace(testing.record(1, 0, dev, source="transferred"), run_secs=(2e-4,), donor_record_id=donor)
    store.ingest(wls, [*tuned, moved])
    start = dt.datetime(2026, 1, 1, 12, 0, 0)
    with store.engine.begin() as conn:
        ids = [r for (r,) in conn.execute(select(TuningRecord.id).order_by(TuningRecord.mean_s.desc()))]
        for k, rid in enumerate(ids):
            stamp = start + dt.timedelta(minutes=k)
            conn.execute(update(TuningRecord).where(TuningRecord.id == rid).values(created_at=stamp))
    store.close()


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.curves: list[dict[str, str]] = []
        self.tags: list[str] = []
        self.handlers: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append(tag)
        a = dict(attrs)
        self.handlers += [k for k in a if k.startswith("on")]
        if tag == "polyline" and "curve" in (a.get("class") or ""):
            self.curves.append(a)

    handle_startendtag = handle_starttag

    def handle_data(self, data) -> None:
        self.text.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _coords(curve: dict[str, str]) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in curve["points"].split()]


def test_the_page_has_one_curve_per_tuned_task_and_escapes_the_database_text(db_url, tmp_path):
    _fill(db_url)
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["--db", db_url, "report", EVIL_MODEL, "-o", str(out)])
    assert result.exit_code == 0, result.output
    raw = out.read_text(encoding="utf-8")
    page = _parse(out)

    # no script anywhere, none injected, nothing fetched: self-contained
    assert "script" not in page.tags and not page.handlers
    assert EVIL_TASK not in raw and "&lt;script&gt;alert(1)&lt;/script&gt;" in raw
    assert "<b>model</b>" not in raw and "&amp;amp;" in raw
    assert "http://" not in raw.replace("http://www.w3.org/2000/svg", "") and "https://" not in raw
    text = "".join(page.text)
    assert EVIL_TASK in text and EVIL_MODEL in text  # shown as text, exactly as stored

    tasks = {c["data-label"]: c for c in page.curves if c["data-label"] != "model"}
    assert set(tasks) == {EVIL_TASK, "dense_1"}  # one curve per task with records; "idle" has none
    assert int(tasks[EVIL_TASK]["data-points"]) == 3 and int(tasks["dense_1"]["data-points"]) == 1
    for curve in tasks.values():
        coords = _coords(curve)
        assert len(coords) >= 2 and len({x for x, _ in coords}) >= 2, curve  # a visible line, not a dot
    # the task improving 1000 -> 500 -> 333 µs: its staircase goes down (SVG y grows downwards)
    ys = [y for _, y in _coords(tasks[EVIL_TASK])]
    assert ys[-1] > ys[0]
    [model] = [c for c in page.curves if c["data-label"] == "model"]
    assert int(model["data-points"]) >= 3
    # the table: the donor of the transferred task, and the shares of the model's estimate
    assert "testing" not in text and "#3" in text  # donor named task#workload
    assert "share" in text and "%" in text


def test_an_unknown_model_and_an_unwritable_path_are_one_line_and_change_nothing(sqlite_url, tmp_path):
    _fill(sqlite_url)
    before = rows_of(sqlite_url)
    for args, fragment, code in (
        (["report", "nope", "-o", str(tmp_path / "x.html")], "no model 'nope'", 1),
        (["report", EVIL_MODEL, "-o", str(tmp_path / "missing" / "x.html")], "cannot write the report", 1),
        (["report", EVIL_MODEL, "--device", "999", "-o", str(tmp_path / "y.html")], "no device '999'", 1),
        (["report", EVIL_MODEL, "-o", str(tmp_path)], "is a directory", 2),  # click's usage error, as `-o` elsewhere
    ):
        result = CliRunner().invoke(cli, ["--db", sqlite_url, *args])
        assert result.exit_code == code, (args, result.output)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], (args, result.stderr)
    assert not (tmp_path / "x.html").exists() and not (tmp_path / "y.html").exists()
    assert rows_of(sqlite_url) == before


def test_a_model_without_records_still_gets_a_page(sqlite_url, tmp_path):
    store = Store(sqlite_url)
    store.save_model(ModelIn("lonely", "cd" * 32, {}, [(testing.workload(5), "t", 1)]))
    store.close()
    out = tmp_path / "lonely.html"
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "report", "lonely", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "nothing to draw" in out.read_text(encoding="utf-8") and not _parse(out).curves


def test_report_does_not_import_tvm(sqlite_url, tmp_path):
    _fill(sqlite_url)
    code = (
        "import sys; from registry.cli.main import main; sys.argv = ['registry', '--db', sys.argv[1], 'report', "
        f"{EVIL_MODEL!r}, '-o', sys.argv[2]]\ntry: main()\nexcept SystemExit: pass\nassert 'tvm' not in sys.modules"
    )
    done = subprocess.run([_python(), "-c", code, sqlite_url, str(tmp_path / "r.html")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r.html").exists()


def _python() -> str:
    import sys

    return sys.executable


# -- the SVG helpers -------------------------------------------------------------------------------------------------


def test_help_has_examples_and_the_run_commands_take_report(sqlite_url):
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "report", "--help"])
    assert result.exit_code == 0 and "Example" in result.output
    for command in ("tune", "transfer"):
        result = CliRunner().invoke(cli, ["--db", sqlite_url, command, "--help"])
        assert result.exit_code == 0 and "--report PATH" in result.output


def test_default_file_names_are_tame():
    from registry.report.html import default_path

    assert default_path("resnet.v2") == Path("resnet.v2.report.html")
    assert default_path("../../etc/x y") == Path("etc_x_y.report.html") and default_path("..") == Path(
        "model.report.html"
    )


def test_ticks_and_an_empty_chart():
    assert nice_ticks(0, 10) == [0, 2, 4, 6, 8, 10] and nice_ticks(12.3, 480) == [100, 200, 300, 400]
    assert log_ticks(3, 600) == [5, 10, 20, 50, 100, 200, 500]
    assert "no data" in step_chart([Series("a", [])], title="t", x_label="time", y_label="y")
    one = step_chart([Series("a", [(0.0, 5.0)], PALETTE[1])], title="<t>", x_label="time", y_label="y")
    assert "&lt;t&gt;" in one and 'data-points="1"' in one


# -- a real headless browser -----------------------------------------------------------------------------------------

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def _browser() -> str | None:
    return next((p for b in BROWSERS if (p := shutil.which(b))), None)


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit non-interlaced PNG, as a browser writes screenshots."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(b"".join(chunks)), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a, b = line[i - bpp] if i >= bpp else 0, prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def test_the_page_renders_its_curves_in_a_headless_browser(sqlite_url, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no headless browser on this machine (`make browser` installs Debian's chromium)")
    _fill(sqlite_url)
    out = tmp_path / "r.html"
    assert CliRunner().invoke(cli, ["--db", sqlite_url, "report", EVIL_MODEL, "-o", str(out)]).exit_code == 0
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1400,1400",
            out.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), done.stderr[-2000:]
    width, bpp, rows = _png_pixels(shot.read_bytes())

    def painted(color: str) -> int:
        r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
        return sum(
            1
            for row in rows
            for x in range(0, width * bpp, bpp)
            if abs(row[x] - r) < 40 and abs(row[x + 1] - g) < 40 and abs(row[x + 2] - b) < 40
        )

    # the model's curve and the first task's are drawn in the first colour (each a staircase hundreds of pixels
    # long), the second task's (one record, written last: a short step) in the next
    assert painted(PALETTE[0]) > 500 and painted(PALETTE[1]) > 15
    white = sum(1 for row in rows for x in range(0, width * bpp, bpp) if row[x : x + 3] == b"\xff\xff\xff")
    assert white < width * len(rows)  # not a blank page


# -- a real run: tune --json --report --------------------------------------------------------------------------------


@pytest.mark.tvm
def test_tune_keeps_its_history_and_writes_the_report(sqlite_url, tmp_path):
    model = tmp_path / "mlp.onnx"
    onnx.save(zoo.mlp(16, (64, 64, 32)), model)
    out = tmp_path / "tune.html"
    result = CliRunner().invoke(
        cli,
        ["--db", sqlite_url, "tune", str(model), "--trials", "8", "--batch", "4", "--no-predictor", "--json"]
        + ["--report", str(out)],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    history = report["history"]
    assert len(history) >= 2 and history[0]["task"] is None
    assert [h["seconds"] for h in history] == sorted(h["seconds"] for h in history)
    assert history[-1]["trials"] == 8 and history[-1]["model_us"] <= history[0]["model_us"]
    assert set(history[-1]["best_us"]) == {t["name"] for t in report["tasks"]}
    assert f"report written to {out}" in result.stderr
    page = _parse(out)
    curves = {c["data-label"] for c in page.curves}
    tuned = {t["name"] for t in report["tasks"] if t["measurements"]}
    assert tuned and tuned <= curves and "model estimate" in curves
    assert "default schedule" in "".join(page.text)  # the run's before: each task's default schedule

    # transfer of the same model: every task an exact hit, and the page says so
    again = tmp_path / "transfer.html"
    result = CliRunner().invoke(cli, ["--db", sqlite_url, "transfer", str(model), "--report", str(again)])
    assert result.exit_code == 0, result.output
    page = _parse(again)
    assert tuned <= {c["data-label"] for c in page.curves} and "exact" in "".join(page.text)


def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(sqlite_url, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not read: the report path is checked first")
    for command in ("tune", "transfer"):
        args = ["--db", sqlite_url, command, str(model), "--report", str(tmp_path / "no" / "r.html")]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, result.output
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and "cannot write the report" in lines[0], result.stderr
