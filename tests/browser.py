"""Headless Chromium for the dashboard and report tests (``test_monitor``, ``test_monitor_policies``).

The live page is a Bokeh *server* page: its plots arrive over a websocket after the page has loaded, and
``chromium --screenshot`` / ``--dump-dom`` capture at load (with ``--virtual-time-budget`` too: websockets do
not hold virtual time), so they only ever see the empty template. :class:`Browser` therefore drives the page over
the DevTools protocol (``--remote-debugging-port``, tornado's websocket client): wait until the plots hold data,
read the DOM (shadow roots included), then take the screenshot. A static page needs only :func:`chromium_cli`.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else shutil.which("chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")

# In the page: how many Bokeh roots and canvases (inside shadow roots) there are, and how many rows the series
# source holds (the source is named "daskrl-series" by daskrl.monitor.dashboard.RunPage).
PAGE_PROBE = """(() => {
  const walk = (root, out) => { for (const el of root.querySelectorAll('*')) {
      if (el.tagName === 'CANVAS') out.push(el); if (el.shadowRoot) walk(el.shadowRoot, out); } return out; };
  const docs = (window.Bokeh && window.Bokeh.documents) || [];
  const src = docs.length ? docs[0].get_model_by_name('daskrl-series') : null;
  return {root_divs: document.querySelectorAll('[data-root-id]').length, canvases: walk(document, []).length,
          roots: docs.length ? docs[0].roots().length : 0, rows: src ? src.data.env_steps.length : -1,
          last_steps: src && src.data.env_steps.length ? src.data.env_steps[src.data.env_steps.length - 1] : -1};
})()"""


class Browser:
    """A headless Chromium driven over the DevTools protocol (for pages that render after they load)."""

    def __init__(self, tmp: Path) -> None:
        self.profile = tmp / "chromium-profile"
        self.proc = subprocess.Popen(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
             "--window-size=1400,1500", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (active.exists() and active.read_text().count("\n") >= 1):
            assert self.proc.poll() is None, "chromium exited at start"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        self.port = int(active.read_text().split()[0])

    def inspect(self, url: str, until, timeout: float = 60.0, probe: str = PAGE_PROBE) -> tuple[dict, bytes]:
        """Load ``url``, evaluate ``probe`` (a JavaScript expression) until ``until(its value)`` holds; returns
        the value and a PNG."""
        return asyncio.run(self._inspect(url, until, timeout, probe))

    async def _inspect(self, url: str, until, timeout: float, expression: str) -> tuple[dict, bytes]:
        from tornado.websocket import websocket_connect

        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?{url}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as r:
            target = json.loads(r.read())
        ws = await websocket_connect(target["webSocketDebuggerUrl"], max_message_size=64 << 20)
        ids = iter(range(1, 1 << 30))

        async def call(method: str, **params):
            n = next(ids)
            await ws.write_message(json.dumps({"id": n, "method": method, "params": params}))
            while True:
                msg = await asyncio.wait_for(ws.read_message(), 30)
                assert msg is not None, "DevTools connection closed"
                msg = json.loads(msg)
                if msg.get("id") == n:
                    assert "error" not in msg, msg["error"]
                    return msg["result"]

        try:
            await call("Emulation.setDeviceMetricsOverride", width=1400, height=1500, deviceScaleFactor=1,
                       mobile=False)
            deadline = time.monotonic() + timeout
            probe: dict = {}
            while time.monotonic() < deadline:
                result = await call("Runtime.evaluate", expression=expression, returnByValue=True)
                probe = result["result"].get("value") or {}
                if probe and until(probe):
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError(f"the page at {url} never got there: {probe}")
            await asyncio.sleep(1.0)  # let the last update paint
            shot = await call("Page.captureScreenshot", format="png")
            return probe, base64.b64decode(shot["data"])
        finally:
            ws.close()

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(15)


def chromium_cli(tmp: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """One plain headless Chromium command (--screenshot / --dump-dom)."""
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'chromium-cli'}", *args],
                          capture_output=True, timeout=timeout, start_new_session=True)


def colour_pixels(png: bytes, hex_colour: str, tolerance: int = 24) -> int:
    """Pixels within ``tolerance`` (per channel) of a colour: a curve drawn in it is on the image."""
    from PIL import Image

    target = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return sum(count for count, rgb in image.getcolors(maxcolors=1 << 24)
               if all(abs(a - b) <= tolerance for a, b in zip(rgb, target, strict=True)))


def distinct_colours(png: bytes) -> int:
    from PIL import Image

    return len(Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 24))
