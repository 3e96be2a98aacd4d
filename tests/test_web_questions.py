"""The web view answers a team's questions (#55), each within 2 clicks from the overview, in headless Chromium at 1280
and 390 px: the best schedule for an operator on my device; what team X pushed this week; which models are covered
on my CPU and how fast; two devices compared; how to pull what a page shows. And what the pages stand on: a model's
device picker (default: the device with the most records), "before" as TVM's default where the registry holds it,
search paging with a total, team and date filters, form errors in the form's words, record pages in HTML, no page
wider than a phone.

The registry: the real tuning logs' records on device A (a hostile team's), the same schedules at half the speed on
device B by team "vision" with TVM's default schedule beside them (ten times the best), and device C with no record.
"""

from __future__ import annotations

import datetime as dt
import statistics
import urllib.parse
from dataclasses import dataclass

import pytest

from registry.report.html import collect
from registry.store.sql.store import Store
from registry.store.values import BrowseFilter
from tests.browser import Browser, find_browser
from tests.server import EVIL_MODEL, EVIL_TEAM, fill, make_token, serving

NO_BROWSER = "no headless browser on this machine (`make browser` installs Debian's chromium)"
pytestmark = pytest.mark.tvm
browsing = pytest.mark.skipif(find_browser() is None, reason=NO_BROWSER)

DEFAULT_TRACE = [[["GetSBlock", [], ["root", "main"], ["b0"]]], []]  # TVM's default on a CPU: changes nothing
MODEL_PATH = f"/models/{urllib.parse.quote(EVIL_MODEL, safe='')}"


@dataclass
class Site:
    base: str
    db: str
    token: str
    a: int  # device ids
    b: int
    c: int
    shash: str
    best_a_us: float
    best_b_us: float


def _more_devices(store: Store, logs) -> tuple[int, float, int]:
    """The logs' schedules on a second device, twice as slow, by team vision, and TVM's default there (ten times the
    best); and a third device with no record. Returns the second's id, its best µs and the third's id."""
    from registry.share.log_import import checked_workload
    from registry.store.rows import RecordIn
    from registry.tvm_side import tvmlog
    from registry.tvm_side.target import device_spec

    pair = tvmlog.find_logs(logs)[0]
    workloads = [checked_workload(w.where, w.mod_json) for w in tvmlog.read_workloads(pair.workload_file)]
    logged = list(tvmlog.read_records(pair.record_file))
    spec = device_spec(logged[0].target, host_model="vision-box")

    def rec(workload, trace, run_secs) -> RecordIn:
        return RecordIn(workload=workload, device=spec, trace=trace, run_secs=tuple(run_secs), source="tuned",
                        tool_version="test", team="vision", model=EVIL_MODEL, host="vision-host")  # fmt: skip

    slow = [rec(workloads[r.workload_index].ident, r.trace, [2 * s for s in r.run_secs]) for r in logged]
    best = min(statistics.fmean(r.run_secs) for r in slow if max(r.run_secs) < 1e9)
    default = rec(slow[0].workload, DEFAULT_TRACE, [10 * best])
    assert store.ingest(workloads, slow).records_new == len(slow)
    assert store.ingest(workloads, [default]).records_new == 1  # written last: no record's "first record"
    idle = store.add_device(device_spec(logged[0].target, host_model="idle-box"))
    return store.add_device(spec), best * 1e6, idle


def _stock(db: str, logs) -> Site:
    """The three devices' registry at ``db`` (no server yet: ``base`` and ``token`` empty)."""
    assert fill(db, logs) > 0
    with Store(db) as store:
        (a,) = [d.id for d in store.all_devices()]
        b, best_b, c = _more_devices(store, logs)
        (row,) = store.browse(BrowseFilter(device_ids=[a])).rows
    return Site("", db, "", a, b, c, row.workload, row.latency_us, best_b)


@pytest.fixture(scope="module")
def site(tuned_logs, tmp_path_factory):
    """One server for the module, over the three devices' registry (a file of its own, no user's settings)."""
    home, db = tmp_path_factory.mktemp("home"), f"sqlite:///{tmp_path_factory.mktemp('questions') / 'registry.db'}"
    with pytest.MonkeyPatch.context() as env:
        env.delenv("REGISTRY_DATABASE_URL", raising=False)
        env.setenv("REGISTRY_HOME", str(home))
        stocked = _stock(db, tuned_logs.work_dir)
        stocked.token = make_token(db, "reader")
        with serving(db, rate=0) as stocked.base:
            yield stocked


@pytest.fixture
def stocked(tuned_logs, db_url) -> Site:
    """The same registry on SQLite and on PostgreSQL, for the reads themselves."""
    return _stock(db_url, tuned_logs.work_dir)


# -- the reads behind the pages, without a browser ---------------------------------------------------------------


def test_browse_pages_sorts_and_filters_by_team_and_time(stocked):
    site = stocked
    with Store(site.db) as store:
        everything = store.browse(BrowseFilter(limit=1))
        assert everything.total == 2 and len(everything.rows) == 1
        second = store.browse(BrowseFilter(limit=1, offset=1))
        assert {everything.rows[0].device_id, second.rows[0].device_id} == {site.a, site.b}
        fastest = store.browse(BrowseFilter(sort="latency")).rows
        assert [r.device_id for r in fastest] == [site.a, site.b]
        assert [r.device_id for r in store.browse(BrowseFilter(sort="newest")).rows] == [site.b, site.a]
        vision = store.browse(BrowseFilter(team="vision"))
        assert vision.total == 1 and vision.rows[0].device_id == site.b
        assert store.browse(BrowseFilter(team=EVIL_TEAM)).rows[0].device_id == site.a
        assert store.browse(BrowseFilter(team="nobody")).total == 0
        tomorrow = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
        assert store.browse(BrowseFilter(since=tomorrow)).total == 0
        assert store.browse(BrowseFilter(since=tomorrow - dt.timedelta(days=8))).total == 2
        assert store.browse(BrowseFilter(workload=site.shash, device_ids=[site.c])).total == 0


def test_coverage_and_the_stored_default(stocked):
    site = stocked
    with Store(site.db) as store:
        (model,) = store.find_models(EVIL_MODEL)
        cover = store.coverage(model.id)
        assert [c.device_id for c in cover] == [site.b, site.a]  # the most records first
        assert all(c.tasks == 1 for c in cover)
        assert cover[0].estimate_us == pytest.approx(site.best_b_us, rel=1e-6)
        wids = [t.workload_id for t in store.model_tasks(model.id)]
        assert store.default_latencies(wids, site.b) == {wids[0]: pytest.approx(10 * site.best_b_us, rel=1e-6)}
        assert store.default_latencies(wids, site.a) == {}
        assert store.workload_hashes(wids) == {wids[0]: site.shash}
        (task,) = collect(store, EVIL_MODEL, device=str(site.b)).tasks
        assert task.before_us == pytest.approx(10 * site.best_b_us) and task.after_us == pytest.approx(site.best_b_us)
        assert task.workload == site.shash


# -- in the browser ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[1280, 390], ids=lambda w: f"{w}px")
def page(request, site):
    """A reader's browser at 1280 or 390 px wide, its pages' scripts off (one per width, for the module)."""
    if find_browser() is None:
        pytest.skip(NO_BROWSER)
    with Browser(width=request.param, height=900) as b:
        b.width = request.param
        # a phone's viewport: Chromium keeps a headless window at least 500 px wide whatever --window-size says
        b.send("Emulation.setDeviceMetricsOverride", width=b.width, height=900, deviceScaleFactor=1,
               mobile=b.width < 500)  # fmt: skip
        b.set_cookie("registry_token", site.token, site.base)
        b.scripts(False)
        yield b


def opens(browser: Browser, url: str, status: int = 200) -> None:
    got = browser.navigate(url)  # a new visit: what the page does is recorded from here on
    assert got == status, f"{url}: {got}: {' | '.join(browser.texts('h1, main p'))[:500]}"
    fits(browser)


def fits(browser: Browser) -> None:
    """No problem on the page, and nothing wider than the window."""
    assert not browser.problems(), browser.problems()
    width = browser.evaluate("document.documentElement.scrollWidth")
    assert width <= browser.width, f"{browser.url()} is {width} px wide in a {browser.width} px window"


def follow(browser: Browser, site: Site, selector: str, text: str | None = None) -> str:
    """Click (navigate to) the link that matches ``selector`` (and has ``text`` in it); returns its href."""
    links = [n for n in browser.select(selector) if text is None or text in browser.text(n)]
    assert links, f"no link {selector} {text or ''} on {browser.url()}"
    href = browser.attributes(links[0])["href"]
    opens(browser, urllib.parse.urljoin(site.base + "/", href))
    return href


@browsing
def test_question_how_do_i_pull_this_model(page, site):
    """Overview -> the model (1 click): its device picker opens on the device with the most records, "before" is
    TVM's default there, and the page says how to pull it."""
    opens(page, f"{site.base}/")
    follow(page, site, f'td.name a[href="{MODEL_PATH}"]')
    assert page.texts("h1") == [f"Model {EVIL_MODEL}"]
    assert any(t.endswith("(1 of 1 tasks)") for t in page.texts("nav.picker .now"))
    others = [page.attributes(n)["href"] for n in page.select("nav.picker a")]
    assert others == [f"{MODEL_PATH}?device={site.a}"]  # the other device; the current one is no link
    assert "10.0x" in page.texts("table td")  # before: the stored default; after: the best there
    (task,) = page.select("table tbody tr td:first-child a")
    assert page.attributes(task)["href"] == f"/workloads/{site.shash}"
    (command,) = page.texts(".pull code.command")
    assert command == f"registry pull {site.base} --model '{EVIL_MODEL}'"
    (bundle,) = [n for n in page.select(".pull a") if "bundle" in page.text(n)]
    assert page.attributes(bundle)["href"] == f"/api/v1/exchange/bundle?model={urllib.parse.quote(EVIL_MODEL)}"


@browsing
def test_a_device_without_records_says_so(page, site):
    opens(page, f"{site.base}{MODEL_PATH}?device={site.c}")
    summary = " ".join(page.texts("main li"))
    assert "no records on this device" in summary and "0.000 ms" not in summary


@browsing
def test_question_best_schedule_for_an_operator_on_my_device(page, site):
    """Overview -> the operator's search -> the best on device A (2 clicks)."""
    opens(page, f"{site.base}/")
    follow(page, site, 'a[href^="/search?op="]', "matmul")
    href = follow(page, site, f'td a[href="/workloads/{site.shash}?device={site.a}"]')
    assert href.endswith(f"device={site.a}")
    (heading,) = [h for h in page.texts("h2") if h.startswith("The best schedule on")]
    assert f"{site.best_a_us:.2f} µs" in heading
    assert not page.select('a[href^="/api/v1/records/"]')  # records open as pages
    follow(page, site, 'h2 a[href^="/records/"]')
    assert page.texts("h1")[0].startswith("Record ") and page.select("pre")


@browsing
def test_question_what_did_team_vision_push_this_week(page, site):
    """Overview -> the team's week (1 click)."""
    opens(page, f"{site.base}/")
    follow(page, site, 'a[href^="/search?team=vision&since="]')
    assert any(p.startswith("1 (workload, device) pair(s): rows 1-1 of 1") for p in page.texts("main p"))
    assert page.texts("table tbody td:nth-child(10)") == ["vision"]
    assert "--team vision --since" in page.texts(".pull code.command")[0]
    follow(page, site, 'table tbody td a[href="/search?team=vision"]')  # the team name: its view
    assert any(p.startswith("1 (workload, device) pair(s)") for p in page.texts("main p"))


@browsing
def test_question_which_models_are_covered_on_my_cpu_and_how_fast(page, site):
    """Overview -> the models on device A (1 click)."""
    opens(page, f"{site.base}/")
    follow(page, site, f'a[href="/models?device={site.a}"]')
    (cell,) = page.texts("table tbody td:nth-child(4)")
    assert f"1 of 1 tasks, {site.best_a_us / 1000:.3f} ms" in cell
    follow(page, site, 'a[href^="/models?sort=latency"]')  # sortable
    opens(page, f"{site.base}/models?device={site.c}")
    assert page.texts("table tbody td:nth-child(4)") == ["no records"]


@browsing
def test_question_compare_two_devices(page, site):
    """Overview -> the comparison (1 click): the two devices with the most records, side by side."""
    opens(page, f"{site.base}/")
    follow(page, site, 'a[href="/compare"]')
    (row,) = page.select("table tbody tr")
    cells = page.texts("table tbody tr td")
    assert cells[-1] == f"{site.best_a_us / site.best_b_us:.2f}x" and cells[-1] == "0.50x", cells
    opens(page, f"{site.base}/compare?a={site.a}&b={site.b}&model={urllib.parse.quote(EVIL_MODEL)}")
    assert page.texts("table tbody td:last-child") == ["2.00x"]


@browsing
def test_search_pages_with_a_total(page, site, monkeypatch):
    from registry.server import pages

    monkeypatch.setattr(pages, "PAGE_ROWS", 1)
    opens(page, f"{site.base}/search?op=matmul")
    assert any(p.startswith("2 (workload, device) pair(s): rows 1-1 of 2") for p in page.texts("main p"))
    follow(page, site, 'a[rel="next"]')
    assert any(p.startswith("2 (workload, device) pair(s): rows 2-2 of 2") for p in page.texts("main p"))
    assert not page.select('a[rel="next"]')
    follow(page, site, 'a[rel="prev"]')
    assert any(": rows 1-1 of 2" in p for p in page.texts("main p"))


@browsing
@pytest.mark.parametrize(
    ("query", "said"),
    [("shape=abc", "argument shape: 'abc' is no shape"), ("since=last+week", "pushed since: 'last week' is no date"),
     ("device=nowhere", "device: no device 'nowhere'"), ("op=matmul&page=0", "page: '0' is no page number")],
)  # fmt: skip
def test_the_search_form_says_what_is_wrong_in_its_own_words(page, site, query, said):
    opens(page, f"{site.base}/search?{query}")
    (problem,) = page.texts("p.problem")
    assert problem.startswith(said) and "--" not in problem, problem


@browsing
@pytest.mark.parametrize(
    "path",
    ["/", "/models", MODEL_PATH, "/search?op=matmul", "/workloads/{shash}", "/compare", "/records/1",
     "/search?team=vision"],
)  # fmt: skip
def test_no_page_is_wider_than_the_window(page, site, path):
    opens(page, site.base + path.format(shash=site.shash))
