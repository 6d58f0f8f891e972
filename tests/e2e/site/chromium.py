"""Headless Chromium driven over its DevTools pipe (`--remote-debugging-pipe`: JSON messages,
each ended by a NUL, read from fd 3 and written to fd 4), so a layout check needs no browser
library: open a page at a width, evaluate a script in it, take a screenshot."""

import base64
import json
import os
import shutil
import subprocess

NAMES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


def find() -> str | None:
    return next((path for name in NAMES if (path := shutil.which(name))), None)


class Browser:
    def __init__(self, executable: str):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def onto_3_and_4():  # after fork; close_fds would close 3 and 4 after this runs
            read, write = os.dup(to_chrome_r), os.dup(from_chrome_w)  # either may be 3 or 4
            os.dup2(read, 3)
            os.dup2(write, 4)

        self._process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--hide-scrollbars",
                "--no-first-run",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            preexec_fn=onto_3_and_4,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        target = self._send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self._send("Page.enable", session=True)

    def _read_message(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _send(self, method: str, session: bool = False, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self._events.append(reply)

    def _wait_for(self, event: str) -> None:
        while True:
            if any(e.get("method") == event for e in self._events):
                self._events = [e for e in self._events if e.get("method") != event]
                return
            self._events.append(self._read_message())

    def open(self, url: str, width: int, height: int = 900) -> None:
        """`url` at a viewport `width` px wide; a phone's width (< 600) as a mobile device."""
        self._send(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        self._events.clear()
        self._send("Page.navigate", session=True, url=url)
        self._wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self._send(
            "Runtime.evaluate",
            session=True,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def screenshot(self, path) -> None:
        """The whole page, not only the viewport."""
        data = self._send(
            "Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True
        )["data"]
        with open(path, "wb") as out:
            out.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self._send("Browser.close")
        except RuntimeError:
            pass
        self._process.wait(timeout=10)
        os.close(self._to_chrome)
        os.close(self._from_chrome)
