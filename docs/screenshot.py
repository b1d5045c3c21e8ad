"""Retake docs/web-ui-run.png: the Web UI's page of a real run paused for approval.

    .venv/bin/python docs/screenshot.py [--out docs/web-ui-run.png] [--chromium PATH]

Runs ``treadle demo --manual`` on a throwaway dev server (free ports, a temporary SQLite file),
waits until its run waits for approval, opens the run in headless Chromium (Debian: ``apt-get
install chromium``), switches to the *User Metadata* tab, where *Current Details* shows the
run's state, step, tokens and the call waiting for approval, and saves a 1400x900 screenshot.
Then it approves the call, so the demo finishes and stops its server.

Chromium is driven over ``--remote-debugging-pipe`` (the DevTools protocol as NUL-separated
JSON on file descriptors 3 and 4), so nothing beyond the standard library is needed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 1400, 900
PAGE_TIMEOUT = 30.0
"""Seconds the Web UI may take to show the run's Current Details."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Chromium:
    """Headless Chromium, spoken to over the DevTools pipe."""

    def __init__(self, binary: str) -> None:
        to_browser, self._writer = os.pipe()
        self._reader, from_browser = os.pipe()

        def wire_fds() -> None:  # the browser reads commands on fd 3 and answers on fd 4
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self.process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",  # as root in a container there is no user namespace for it
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
                f"--window-size={WIDTH},{HEIGHT}",
                "about:blank",
            ],
            pass_fds=(to_browser, from_browser, 3, 4),
            preexec_fn=wire_fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._id = 0
        self.session = ""

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._writer, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._next()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result

    def _next(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._reader, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium exited")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
        self.send("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        reply = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        return reply["result"].get("value")

    def wait_for_text(self, *texts: str, timeout: float = PAGE_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            body = self.evaluate(PAGE_TEXT) or ""
            if all(text in body for text in texts):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the page never showed {texts}; it shows:\n{body[:2000]}")
            time.sleep(0.5)

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        os.close(self._writer)
        os.close(self._reader)


PAGE_TEXT = """
[document, ...[...document.querySelectorAll("iframe")].map((f) => f.contentDocument)]
  .map((d) => (d && d.body ? d.body.innerText : ""))
  .join("\\n")
"""
"""The page's text with its frames' (the Web UI renders summaries and details in iframes)."""

CLICK_TAB = """
(() => {
  const tab = [...document.querySelectorAll('[role="tab"]')]
    .find((e) => e.innerText.trim() === %s);
  if (!tab) return false;
  tab.click();
  return true;
})()
"""


def demo_until_paused(work: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``treadle demo --manual`` on a throwaway server; return it once it waits."""
    config = work / "temporal-dev.yaml"
    config.write_text(
        f"port: {free_port()}\nui_port: {free_port()}\ndb_filename: {work / 'dev.sqlite'}\n"
        "log_level: error\nsearch_attributes: {AgentState: Keyword, AgentStep: Int, "
        "AgentModel: Keyword}\n"
        "dynamic_config: {system.forceSearchAttributesCacheRefreshOnRead: true}\n"
    )
    process = subprocess.Popen(
        [sys.executable, "starter.py", "demo", "--manual", "--dev-config", str(config)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    while not seen or "waiting for you" not in seen[-1]:
        line = lines.get(timeout=120)
        if line is None:
            raise RuntimeError("the demo exited early:\n" + "\n".join(seen))
        print(line, flush=True)
        seen.append(line)
    threading.Thread(target=lambda: [print(x) for x in iter(lines.get, None)], daemon=True).start()
    return process, seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "web-ui-run.png")
    parser.add_argument("--chromium", default=None, help="the browser (default: from PATH)")
    args = parser.parse_args()
    binary = args.chromium or next(
        (
            found
            for name in ("chromium", "chromium-browser", "google-chrome")
            if (found := shutil.which(name))
        ),
        None,
    )
    if binary is None:
        print("error: no Chromium found; install it (apt-get install chromium) or pass --chromium")
        return 2
    with tempfile.TemporaryDirectory(prefix="treadle-screenshot-") as tmp:
        demo, printed = demo_until_paused(Path(tmp))
        try:
            text = "\n".join(printed)
            link = re.search(r"^   (http://\S+/workflows/(demo-[0-9a-f]+))$", text, re.M)
            approve = next(line.strip() for line in printed if " approve demo-" in line)
            assert link is not None, text
            browser = Chromium(binary)
            try:
                browser.open(link.group(1))
                browser.wait_for_text("Event History", "User Metadata")
                if not browser.evaluate(CLICK_TAB % json.dumps("User Metadata")):
                    raise RuntimeError("no User Metadata tab on the run's page")
                browser.wait_for_text(
                    "Look at the workspace",  # the summary: the task
                    "model openai:demo",  # the details: model and workspace
                    "State: WaitingForHuman",  # Current Details
                    "Waiting for approval",
                )
                time.sleep(1)  # let the tab's panels settle before the picture
                # The tab moves focus to the page's main element, which then wears a focus ring.
                browser.evaluate("document.activeElement && document.activeElement.blur()")
                browser.screenshot(args.out)
            finally:
                browser.close()
            print(f"saved {args.out}", flush=True)
            subprocess.run(approve, shell=True, cwd=ROOT, check=True)  # as the demo printed it
            demo.wait(timeout=60)
            shutil.rmtree(ROOT / "workspaces" / link.group(2), ignore_errors=True)
        finally:
            if demo.poll() is None:
                demo.send_signal(signal.SIGINT)  # the demo stops its dev server on Ctrl-C
                demo.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
