"""The docs site is readable at a laptop's and a phone's width (issue 55), checked in headless
Chromium on every page: nothing makes the page scroll sideways, a command block wraps rather than
hiding its end, a command in a table cell stays on one line, a figure is shown at the width its
box gives it (up to its own). Skipped where no Chromium is installed (`apt-get install
chromium-headless-shell`); SITE_SHOTS=<folder> keeps a screenshot of each page and width."""

import functools
import http.server
import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.site import chromium

WIDTHS = (1280, 390)  # a laptop; a phone (mobile emulation)

# What a reader would call broken, as the browser lays the page out.
LAYOUT_FAULTS = r"""(() => {
  const faults = [];
  const root = document.scrollingElement;
  if (root.scrollWidth > innerWidth + 1)
    faults.push(`the page scrolls sideways: ${root.scrollWidth} px in ${innerWidth}`);
  for (const code of document.querySelectorAll('.md-typeset pre > code')) {
    const head = code.textContent.split('\n')[0].slice(0, 60);
    const language = [...code.closest('div').classList].find(c => c.startsWith('language-'));
    if (!language) faults.push(`a code block says no language (text for outputs): ${head}`);
    else if (language != 'language-text' && code.scrollWidth > code.clientWidth + 1)
      faults.push(`a command block is cut: ${head}`);  // outputs keep their lines and scroll
  }
  for (const code of document.querySelectorAll('.md-typeset td code'))
    if (code.getClientRects().length > 1)
      faults.push(`a command breaks across lines in a table: ${code.textContent.slice(0, 60)}`);
  for (const img of document.querySelectorAll('.md-typeset img')) {
    if (!img.naturalWidth) { faults.push(`an image does not load: ${img.src}`); continue; }
    const room = img.parentElement.clientWidth;
    if (img.width + 2 < Math.min(img.naturalWidth, room))
      faults.push(`a figure is shown ${img.width} px wide in ${room} px: ${img.src}`);
  }
  return faults;
})()"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built as `make docs` builds it, served on a free local port."""
    out = tmp_path_factory.mktemp("site")
    subprocess.run(
        [str(REPO / ".venv/bin/mkdocs"), "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=REPO,
        check=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with server:
        yield out, f"http://127.0.0.1:{server.server_port}/"
        server.shutdown()


def test_every_page_reads_at_a_laptops_and_a_phones_width(site):
    executable = chromium.find()
    if executable is None:
        pytest.skip("no Chromium on this host (apt-get install chromium-headless-shell)")
    folder, url = site
    pages = sorted(p.relative_to(folder).parent.as_posix() for p in folder.rglob("index.html"))
    shots = Path(os.environ["SITE_SHOTS"]) if os.environ.get("SITE_SHOTS") else None
    browser = chromium.Browser(executable)
    faults = []
    try:
        for page in pages:
            for width in WIDTHS:
                browser.open(url + ("" if page == "." else page + "/"), width)
                faults += [f"{page} at {width} px: {f}" for f in browser.evaluate(LAYOUT_FAULTS)]
                if shots:
                    shots.mkdir(parents=True, exist_ok=True)
                    browser.screenshot(shots / f"{page.replace('/', '_')}-{width}.png")
    finally:
        browser.close()
    assert len(pages) > 20  # every page of the nav, not an empty build
    assert not faults, "\n".join(faults)
