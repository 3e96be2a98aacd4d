"""A small driver of headless Chromium over the DevTools protocol, for the web view's tests.

One browser, one page (tab), one websocket (``websockets``' sync client) in flat session mode. Every event the page
sends is kept, so a test can ask what happened during its last navigation: the documents' statuses, every URL it
requested, the requests that failed, console errors and uncaught exceptions, and any JavaScript dialog (which is
dismissed at once, so an XSS that opens one never blocks the page).

The web view works without JavaScript, so the driver reads the page without it: ``scripts(False)`` turns the page's
scripts off, and ``select``/``text``/``outer_html`` read the DOM through the DOM domain, which needs none.
``evaluate`` is there for what only a script can tell (the layout of an element).

    with Browser() as browser:
        browser.set_cookie("registry_token", token, "http://127.0.0.1:8000")
        status = browser.navigate("http://127.0.0.1:8000/")
        assert status == 200 and not browser.problems()
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
TIMEOUT = 30.0  # seconds any one step may take: a start, a command, a page load


def find_browser() -> str | None:
    return next((p for b in BROWSERS if (p := shutil.which(b))), None)


class BrowserError(RuntimeError):
    pass


@dataclass
class Visit:
    """What the page did since the last ``navigate`` (or ``forget``)."""

    requested: list[str] = field(default_factory=list)  # every URL it asked for, in order
    responses: dict[str, int] = field(default_factory=dict)  # URL -> HTTP status
    documents: list[tuple[str, int]] = field(default_factory=list)  # (URL, status) of each document it loaded
    failed: list[str] = field(default_factory=list)  # "URL: net::ERR_..." of each request that failed
    console: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, error log entries
    dialogs: list[str] = field(default_factory=list)  # "alert: message" of each JavaScript dialog opened

    def problems(self) -> list[str]:
        return (
            [f"console: {c}" for c in self.console]
            + [f"failed request: {f}" for f in self.failed]
            + [f"dialog: {d}" for d in self.dialogs]
        )


class Browser:
    """Headless Chromium with one page, driven over the DevTools protocol; a context manager that closes it."""

    def __init__(self, executable: str | None = None, width: int = 1280, height: int = 900) -> None:
        self.executable = executable or find_browser()
        if self.executable is None:
            raise BrowserError("no Chromium on this machine")
        self.width, self.height = width, height
        self.visit = Visit()
        self._ids = itertools.count(1)
        self._events: list[dict] = []  # events not yet looked at by a wait
        self._process: subprocess.Popen | None = None
        self._profile: str | None = None
        self._ws = None
        self._session: str | None = None
        self._stderr: list[str] = []
        self._urls: dict[str, str] = {}  # request id -> URL
        self._exits = contextlib.ExitStack()  # the websocket

    # -- start and stop ---------------------------------------------------------------------------------------------

    def __enter__(self) -> Browser:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        self._profile = tempfile.mkdtemp(prefix="registry-browser-")
        self._process = subprocess.Popen(
            [
                self.executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",  # no request of the browser's own leaves the machine
                "--disable-component-update",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile}",
                f"--window-size={self.width},{self.height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group: a browser that will not close is killed whole
        )
        found = threading.Event()
        url: list[str] = []

        def drain() -> None:  # read stderr to its end, so that a chatty browser never blocks on a full pipe
            for line in self._process.stderr:
                self._stderr.append(line)
                if not url and (m := re.search(r"DevTools listening on (ws://\S+)", line)):
                    url.append(m.group(1))
                    found.set()
            found.set()  # it exited

        threading.Thread(target=drain, daemon=True).start()
        if not found.wait(TIMEOUT) or not url:
            raise BrowserError(f"Chromium did not start: {''.join(self._stderr)[-2000:]}")
        self._ws = self._exits.enter_context(connect(url[0], max_size=None, open_timeout=TIMEOUT))
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self._session = self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log", "DOM"):
            self.send(f"{domain}.enable")

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._ws.send(json.dumps({"id": next(self._ids), "method": "Browser.close"}))
            except Exception:  # noqa: BLE001 - it is going away anyway
                pass
            self._exits.close()
            self._ws = None
        if self._process is not None:
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait(10)
            self._process = None
        if self._profile is not None:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None

    # -- the protocol -----------------------------------------------------------------------------------------------

    def send(self, method: str, **params: Any) -> dict:
        """A command's result; the events that arrive meanwhile are recorded. Raises BrowserError on its error."""
        mid = next(self._ids)
        message = {"id": mid, "method": method, "params": params}
        if self._session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + TIMEOUT
        while True:
            answer = self._receive(deadline, method)
            if answer.get("id") == mid:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})

    def _receive(self, deadline: float, waiting_for: str) -> dict:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BrowserError(f"no answer to {waiting_for} in {TIMEOUT:g} s")
        try:
            message = json.loads(self._ws.recv(timeout=left))
        except TimeoutError:
            raise BrowserError(f"no answer to {waiting_for} in {TIMEOUT:g} s") from None
        if "method" in message:
            self._record(message["method"], message.get("params", {}))
            self._events.append(message)
        return message

    def _record(self, event: str, p: dict) -> None:
        v = self.visit
        if event == "Network.requestWillBeSent":
            v.requested.append(p["request"]["url"])
            self._urls[p["requestId"]] = p["request"]["url"]
        elif event == "Network.responseReceived":
            v.responses[p["response"]["url"]] = p["response"]["status"]
            if p.get("type") == "Document":
                v.documents.append((p["response"]["url"], p["response"]["status"]))
        elif event == "Network.loadingFailed":
            v.failed.append(f"{self._urls.get(p['requestId'], p['requestId'])}: {p.get('errorText')}")
        elif event == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            v.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif event == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            v.console.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif event == "Log.entryAdded" and p["entry"]["level"] == "error":
            v.console.append(f"{p['entry'].get('url', '')}: {p['entry']['text']}")
        elif event == "Page.javascriptDialogOpening":
            v.dialogs.append(f"{p['type']}: {p['message']}")
            # dismissed at once (not waited for: this runs while another command waits for its answer)
            self._ws.send(
                json.dumps(
                    {
                        "id": next(self._ids),
                        "method": "Page.handleJavaScriptDialog",
                        "params": {"accept": False},
                        "sessionId": self._session,
                    }
                )
            )

    def wait_for(self, event: str, timeout: float = TIMEOUT) -> dict:
        """The params of the next ``event`` (one that arrived during an earlier command counts)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, message in enumerate(self._events):
                if message["method"] == event:
                    del self._events[: i + 1]
                    return message.get("params", {})
            self._events.clear()
            self._receive(deadline, event)

    # -- pages ------------------------------------------------------------------------------------------------------

    def forget(self) -> None:
        """Start a new record of what the page does (``visit``); drops the events not yet waited for."""
        self.visit = Visit()
        self._events.clear()

    def navigate(self, url: str) -> int:
        """Load ``url`` and wait for its load event; the main document's HTTP status."""
        self.forget()
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"{url}: {result['errorText']}")
        return self.wait_for_load()

    def wait_for_load(self) -> int:
        """Wait for the page's load event (after a form was submitted, say); the last document's HTTP status."""
        self.wait_for("Page.loadEventFired")
        if not self.visit.documents:
            raise BrowserError(f"the page loaded no document: {self.visit.requested}")
        return self.visit.documents[-1][1]

    def problems(self) -> list[str]:
        return self.visit.problems()

    def scripts(self, enabled: bool) -> None:
        """Let the page run its scripts, or not (from the next page on)."""
        self.send("Emulation.setScriptExecutionDisabled", value=not enabled)

    def set_cookie(self, name: str, value: str, url: str, http_only: bool = True) -> None:
        ok = self.send("Network.setCookie", name=name, value=value, url=url, httpOnly=http_only, sameSite="Strict")
        if not ok.get("success", True):
            raise BrowserError(f"the cookie {name} was refused for {url}")

    def cookies(self) -> list[dict]:
        return self.send("Network.getCookies")["cookies"]

    def clear_cookies(self) -> None:
        self.send("Network.clearBrowserCookies")

    def url(self) -> str:
        return self.send("Page.getNavigationHistory")["entries"][-1]["url"]

    def evaluate(self, js: str) -> Any:
        """The value of a JavaScript expression in the page (works while the page's own scripts are off too)."""
        result = self.send("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{js[:80]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            m = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={**m, "x": 0, "y": 0, "scale": 1})
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))
        return path

    # -- the DOM, without a script ----------------------------------------------------------------------------------

    def select(self, selector: str) -> list[int]:
        """The node ids of the elements that match a CSS selector, in document order."""
        root = self.send("DOM.getDocument", depth=0)["root"]["nodeId"]
        return self.send("DOM.querySelectorAll", nodeId=root, selector=selector)["nodeIds"]

    def outer_html(self, node: int) -> str:
        return self.send("DOM.getOuterHTML", nodeId=node)["outerHTML"]

    def attributes(self, node: int) -> dict[str, str]:
        flat = self.send("DOM.getAttributes", nodeId=node)["attributes"]
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def text(self, node: int) -> str:
        """An element's text (its textContent), from its text nodes."""
        tree = self.send("DOM.describeNode", nodeId=node, depth=-1)["node"]

        def walk(n: dict) -> str:
            if n["nodeType"] == 3:
                return n["nodeValue"]
            return "".join(walk(c) for c in n.get("children", ()))

        return walk(tree)

    def texts(self, selector: str) -> list[str]:
        return [self.text(n) for n in self.select(selector)]

    def type_into(self, selector: str, text: str, submit: bool = True) -> None:
        """Type ``text`` into the (first) field that matches ``selector``, as a person would, and press Enter to
        submit its form; no script of the page's is needed. Wait for the next page with ``wait_for_load``."""
        nodes = self.select(selector)
        if not nodes:
            raise BrowserError(f"no field {selector!r} on the page")
        self.send("DOM.focus", nodeId=nodes[0])
        self.send("Input.insertText", text=text)
        if submit:
            self.forget()
            key = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13}
            self.send("Input.dispatchKeyEvent", type="keyDown", text="\r", **key)
            self.send("Input.dispatchKeyEvent", type="keyUp", **key)
