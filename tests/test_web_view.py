"""The web view in a real headless browser (Chromium over the DevTools protocol, ``tests/browser.py``): every page
loads with nothing but the server's own requests, no console error and no sideways scrolling in a 1280-px window;
the search finds the stored workload; the model page draws its chart; hostile names stay text; a browser signs in
through the form, without a script. Skipped where no Chromium is installed (``make browser``).

``REGISTRY_SCREENSHOTS=DIR`` keeps a screenshot of each page in DIR (else they go to a temporary folder)."""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.browser import Browser, find_browser
from tests.server import EVIL_HOST, EVIL_MODEL, EVIL_TEAM, fill, make_token, request, serving

NO_BROWSER = "no headless browser on this machine (`make browser` installs Debian's chromium)"
pytestmark = [pytest.mark.tvm, pytest.mark.skipif(find_browser() is None, reason=NO_BROWSER)]

WIDTH = 1280


@dataclass
class Site:
    base: str  # the server's URL
    db: str
    token: str  # a reader's
    shash: str  # the stored workload
    op: str  # its operator
    shape: str  # its first argument's shape, as the search form takes it: 8,64


@pytest.fixture(scope="module")
def site(tuned_logs, tmp_path_factory):
    """One server for the module, over a registry with real records and a model, all with hostile names."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("REGISTRY_HOME", str(tmp_path_factory.mktemp("home")))
        env.delenv("REGISTRY_DATABASE_URL", raising=False)
        db = f"sqlite:///{tmp_path_factory.mktemp('web') / 'registry.db'}"
        assert fill(db, tuned_logs.work_dir) > 0
        token = make_token(db, "reader")
        with serving(db, rate=0) as base:
            rows = request(f"{base}/api/v1/workloads", token).json()["rows"]
            assert len(rows) == 1, rows
            row = rows[0]
            shape = ",".join(map(str, row["args"][0]["shape"]))
            yield Site(base, db, token, row["workload"], row["op"], shape)


@pytest.fixture(scope="module")
def browser():
    with Browser(width=WIDTH, height=900) as b:
        yield b


@pytest.fixture
def page(browser, site):
    """The browser signed in as a reader, its page's scripts off: the web view must work without them."""
    browser.clear_cookies()
    browser.set_cookie("registry_token", site.token, site.base)
    browser.scripts(False)
    browser.forget()
    return browser


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    where = os.environ.get("REGISTRY_SCREENSHOTS")
    if not where:
        return tmp_path_factory.mktemp("screenshots")
    Path(where).mkdir(parents=True, exist_ok=True)
    return Path(where)


def opens(browser: Browser, url: str, status: int = 200) -> None:
    got = browser.navigate(url)
    assert got == status, f"{url}: {got}: {' | '.join(browser.texts('h1, main p'))[:500]}"


def stays_home(browser: Browser, base: str) -> None:
    """Nothing went wrong on the page, and it asked nothing of anyone but the server."""
    assert not browser.problems(), browser.problems()
    origin = urllib.parse.urlsplit(base)[:2]
    away = [u for u in browser.visit.requested if urllib.parse.urlsplit(u)[:2] != origin]
    assert not away, f"requests that left {base}: {away}"


# The outermost elements that stick out of the window (none inside a box that scrolls or clips them), for the
# message when a page scrolls sideways.
WIDER_THAN_WINDOW = """(() => {
  const width = document.documentElement.clientWidth;
  const clipped = e => {
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement)
      if (getComputedStyle(a).overflowX !== 'visible') return true;
    return false;
  };
  const wide = new Set([...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > width && !clipped(e)));
  const name = e => [e.tagName.toLowerCase(), ...e.classList].join('.');
  return [...wide].filter(e => !wide.has(e.parentElement)).map(e => {
    const box = e.getBoundingClientRect();
    return `${name(e)}: ${Math.round(box.width)} px wide, its right edge at ${Math.round(box.right)} px`;
  });
})()"""

PAGES = {  # name: (path, its heading)
    "overview": ("/", "Overview"),
    "search": ("/search?op=matmul", "Search"),
    "models": ("/models", "Models"),
    "model": (f"/models/{urllib.parse.quote(EVIL_MODEL, safe='')}", f"Model {EVIL_MODEL}"),
    "workload": ("/workloads/{shash}", "Workload {shash}"),
    "login": ("/login", "Sign in"),
}


@pytest.mark.parametrize("name", list(PAGES))
def test_each_page_loads_whole_from_the_server_alone_and_fits_the_window(page, site, shots, name):
    path, heading = (s.format(shash=site.shash) for s in PAGES[name])
    opens(page, site.base + path)
    assert page.texts("h1") == [heading]
    stays_home(page, site.base)
    assert page.visit.documents == [(site.base + path, 200)]  # no redirect, no frame

    width, window = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert window <= WIDTH
    assert width <= window, f"{path} scrolls sideways ({width} px): {page.evaluate(WIDER_THAN_WINDOW)}"

    shot = page.screenshot(shots / f"{name}.png")
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000, (shot, len(data))


def test_the_search_finds_the_stored_workload_by_operator_and_by_shape(page, site):
    assert site.op == "matmul"
    link = f'a[href="/workloads/{site.shash}"]'
    opens(page, f"{site.base}/search?op={site.op}")
    assert len(page.select(link)) == 1

    # the form, as a person fills it (no script): the first argument's shape, then Enter
    opens(page, f"{site.base}/search")
    assert not page.select("table")  # no query, no results
    page.type_into("input[name=shape]", site.shape)
    assert page.wait_for_load() == 200
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(page.url()).query)["shape"] == [site.shape]
    assert len(page.select(link)) == 1
    stays_home(page, site.base)

    # a shape nobody has: no workload
    opens(page, f"{site.base}/search?shape=3,3,3")
    assert not page.select('a[href^="/workloads/"]')
    assert any(p.startswith("0 (workload, device) pair(s)") for p in page.texts("main p"))
    stays_home(page, site.base)


def test_the_model_page_draws_the_chart_of_its_task_and_the_task_table(page, site):
    opens(page, f"{site.base}/models/{urllib.parse.quote(EVIL_MODEL, safe='')}")
    assert page.select("svg.chart")
    curves = {c["data-label"]: c for c in map(page.attributes, page.select("svg.chart polyline.curve"))}
    assert set(curves) == {"model", "task<0>"}  # the model's curve and its task's, the name as text
    assert all(int(c["data-points"]) >= 1 and c["points"].strip() for c in curves.values()), curves
    assert page.texts("table tbody tr td:first-child") == ["task<0>"]  # the task table, the name as text
    stays_home(page, site.base)


def test_hostile_names_are_shown_as_text_never_as_markup(page, site):
    """With the page's scripts on: were a name markup, its script would run and open a dialog."""
    page.scripts(True)

    def no_markup_from_names() -> None:
        assert not page.select("script, img, iframe, object, embed")
        assert all(page.text(b).strip().isdigit() for b in page.select("b")), "a <b> that is no stats card's"
        stays_home(page, site.base)

    opens(page, f"{site.base}/")
    assert EVIL_TEAM in page.texts("td")  # the by-team table
    assert EVIL_MODEL in page.texts("td.name a")  # the model list
    no_markup_from_names()

    # the model list's own link leads to the model's page
    (link,) = [n for n in page.select("td.name a") if page.text(n) == EVIL_MODEL]
    opens(page, urllib.parse.urljoin(site.base, page.attributes(link)["href"]))
    assert page.texts("h1") == [f"Model {EVIL_MODEL}"]
    no_markup_from_names()

    opens(page, f"{site.base}/workloads/{site.shash}")
    cells = page.texts("td")
    assert EVIL_TEAM in cells and EVIL_MODEL in cells
    provenance = " ".join(page.texts("main li"))
    assert f"team {EVIL_TEAM}, model {EVIL_MODEL}, host {EVIL_HOST}," in provenance
    no_markup_from_names()
    assert not page.visit.dialogs


def test_a_browser_without_the_cookie_signs_in_through_the_form(page, site):
    page.clear_cookies()
    opens(page, f"{site.base}/", 401)
    assert page.texts("h1") == ["Sign in"] and page.select('form[action="/login"] input[name="token"]')

    page.type_into("input[name=token]", "rgt_not-a-token-of-ours")
    assert page.wait_for_load() == 401
    assert page.texts("p.problem") == ["That token is not valid here."]
    assert not page.cookies()

    page.type_into("input[name=token]", site.token)
    assert page.wait_for_load() == 200  # 303 to the overview
    assert page.url() == f"{site.base}/"
    assert page.texts("h1") == ["Overview"]
    assert "signed in (reader)" in page.texts("header .who")[0]
    stays_home(page, site.base)
    (cookie,) = page.cookies()
    assert (cookie["name"], cookie["value"], cookie["httpOnly"]) == ("registry_token", site.token, True)


def test_a_public_server_shows_the_overview_without_a_token(page, site):
    page.clear_cookies()
    with serving(site.db, rate=0, public=True) as base:
        opens(page, f"{base}/")
        assert page.texts("h1") == ["Overview"]
        assert "public, read-only" in page.texts("header .who")[0]
        assert EVIL_TEAM in page.texts("td")
        stays_home(page, base)
