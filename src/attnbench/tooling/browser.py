"""Drive headless Chromium over the DevTools protocol on a pipe: load a page, read it, screenshot it.

`--remote-debugging-pipe` makes Chromium read protocol messages on fd 3 and write them on fd 4, each a
JSON object ended by a NUL byte. No websocket, no driver binary and no browser download: the system's
`chromium` (Debian's package) is the whole dependency. Only long-stable protocol methods are used
(Target, Page, Runtime, Log, Emulation).

    with Chromium.start() as browser:
        page = browser.open("file:///.../index.html", width=1280, height=900)
        page.evaluate("document.title")
        page.screenshot(Path("index.png"))
        page.errors           # console errors, uncaught exceptions, failed loads, in order
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserError(RuntimeError):
    """Chromium could not start, died, answered with an error, or did not answer in time."""


def find_chromium() -> str | None:
    """The Chromium executable: $CHROMIUM if set, else the first of CANDIDATES on PATH."""
    chosen = os.environ.get("CHROMIUM")
    if chosen:
        return chosen if shutil.which(chosen) else None
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


@dataclass
class Page:
    """One tab, attached with its own session id."""

    browser: Chromium
    session: str
    target: str
    errors: list[str] = field(default_factory=list)

    def call(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        return self.browser.call(method, params, session=self.session, timeout=timeout)

    def evaluate(self, expression: str, timeout: float = 30) -> Any:
        """The value of a JavaScript expression (awaited if it is a promise), as JSON."""
        reply = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout=timeout,
        )
        if "exceptionDetails" in reply:
            details = reply["exceptionDetails"]
            text = (details.get("exception") or {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript failed: {text}")
        return reply["result"].get("value")

    def resize(self, width: int, height: int, dark: bool = False) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        scheme = "dark" if dark else "light"
        self.call(
            "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
        )

    def screenshot(self, path: Path, full_page: bool = False, max_height: int = 16000) -> Path:
        """A PNG of the viewport, or of the page from the top (at most `max_height` pixels)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            width, height = self.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
            )
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": 0, "width": width, "height": min(height, max_height), "scale": 1}
        data = self.call("Page.captureScreenshot", params, timeout=60)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.browser.call("Target.closeTarget", {"targetId": self.target})


class Chromium:
    """One headless Chromium process; `open` gives a Page per URL."""

    def __init__(self, executable: str, user_data: Path):
        self.user_data = user_data
        import fcntl

        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The child's ends move above 3 and 4 first, so that moving them onto 3 and 4 clobbers neither.
        low = (to_child_r, from_child_w)
        to_child_r, from_child_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in low)
        for fd in low:
            os.close(fd)
        args = [
            executable,
            "--headless",
            "--remote-debugging-pipe",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
            "--allow-file-access-from-files",
            f"--user-data-dir={user_data}",
            "about:blank",
        ]

        def onto_3_and_4() -> None:  # in the child, before exec: two dup2 calls, nothing else
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        # preexec_fn only runs dup2 (async-signal-safe), so the threads warning does not apply; a shell
        # doing the redirection instead cannot name fds above 9 (dash). dup2's copies are inheritable;
        # every other descriptor of this process is close-on-exec (PEP 446; the pipe ends made so
        # above), so close_fds=False leaks nothing, and pass_fds cannot be used: it needs 3 and 4 open
        # here, and closes what preexec_fn made.
        self.process = subprocess.Popen(
            args,
            close_fds=False,
            preexec_fn=onto_3_and_4,  # noqa: PLW1509
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self._pages: dict[str, Page] = {}
        self.events: list[dict] = []

    @classmethod
    def start(cls, executable: str | None = None) -> Chromium:
        executable = executable or find_chromium()
        if not executable:
            raise BrowserError("no Chromium found: install Debian's `chromium` package (or set $CHROMIUM)")
        browser = cls(executable, Path(tempfile.mkdtemp(prefix="attnbench-chromium-")))
        try:
            browser.call("Browser.getVersion", timeout=60)
        except BrowserError:
            browser.close()
            raise
        return browser

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the protocol ----

    def _send(self, message: dict) -> None:
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._to_child, data) :]
        except OSError as err:
            raise BrowserError(f"Chromium is gone ({err}){self._stderr_tail()}") from err

    def _receive(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium closed the pipe{self._stderr_tail()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout=30) -> dict:
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._send(message)
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self._event(reply)

    def wait_for(self, method: str, session: str, timeout: float = 30) -> dict:
        """Wait for an event of this session (events that arrived earlier are kept in `events`)."""
        for i, event in enumerate(self.events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(deadline)
            if message.get("method") == method and message.get("sessionId") == session:
                return message
            self._event(message)

    def _event(self, message: dict) -> None:
        """Record errors on their page; keep other events for wait_for."""
        page = self._pages.get(message.get("sessionId", ""))
        method, params = message.get("method"), message.get("params") or {}
        if page is not None:
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails") or {}
                text = (details.get("exception") or {}).get("description") or details.get("text")
                page.errors.append(f"uncaught exception: {text}")
                return
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                page.errors.append(f"console.{params['type']}: {args}")
                return
            if method == "Log.entryAdded" and (params.get("entry") or {}).get("level") == "error":
                entry = params["entry"]
                page.errors.append(
                    f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip()
                )
                return
        if method in ("Page.loadEventFired", "Page.lifecycleEvent"):
            self.events.append(message)

    # ---- pages ----

    def open(self, url: str, width: int = 1280, height: int = 900, dark: bool = False) -> Page:
        """A new tab of `width` × `height` CSS pixels, `url` loaded (load event fired)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session, target)
        self._pages[session] = page
        for domain in ("Page", "Runtime", "Log"):
            page.call(f"{domain}.enable")
        page.resize(width, height, dark)
        page.call("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired", session, timeout=60)
        return page

    def close(self) -> None:
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.user_data, ignore_errors=True)

    def _stderr_tail(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        tail = self.process.stderr.read().decode(errors="replace")[-2000:]
        return f" (exit {self.process.returncode}): {tail}" if tail else f" (exit {self.process.returncode})"
