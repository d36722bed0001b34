"""A real browser for the report's layout tests: the system's Chromium, driven by Playwright.

Playwright's own browser download is not used (a CI machine or a closed network may not reach it):
``chromium()`` finds the system's Chromium (``GPUSCHED_CHROMIUM``, else ``chromium``, ``chromium-browser``,
``google-chrome`` on the PATH). Without Playwright or a Chromium the tests skip, saying which is missing
and how to install it; in CI (``GPUSCHED_REQUIRE_DEPS``) they fail instead (``tests/optional.py``).

``layout_problems`` runs in the page and lists, in words, what a reader would see as broken: the page
scrolling sideways, an element or its text reaching past the viewport, a table that is not inside a
container of its own that scrolls, a figure broken over two lines, text too small to read.
"""

from __future__ import annotations

import os
import shutil

from tests.optional import missing

MIN_FONT_PX = 12.0  # below this a phone's text needs zooming (Apple's HIG and Material both go no smaller)

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str:
    """The system Chromium's path; skips (fails in CI) when there is none."""
    given = os.environ.get("GPUSCHED_CHROMIUM")
    if given:
        if shutil.which(given):
            return shutil.which(given) or given
        missing(f"GPUSCHED_CHROMIUM={given} is not an executable browser")
    for name in _CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    missing("no Chromium for the report's browser checks: install it (Debian: apt-get install -y chromium) "
            "or set GPUSCHED_CHROMIUM to its path")
    raise AssertionError("unreachable")  # missing() skips or fails


def sync_playwright():  # noqa: ANN201 - playwright's own context manager type
    try:
        from playwright.sync_api import sync_playwright as start
    except ImportError:
        missing("playwright is not installed: pip install -e '.[test]' (it drives the system's Chromium)")
    return start()


# The page's own view of itself. Elements inside a container that scrolls sideways (overflow-x auto or
# scroll) may be wider than the screen: that is what the container is for, so only the container is held
# to the viewport. ``wide_tables`` asks more: that no table needs its container to scroll at all.
_LAYOUT_JS = """
({minFont, wideTables}) => {
  const vw = document.documentElement.clientWidth;
  const problems = [];
  const name = (el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    if (el.classList.length) s += '.' + [...el.classList].join('.');
    const text = (el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 40);
    return text ? `${s} "${text}"` : s;
  };
  const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const scroller = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) if (scrolls(p)) return p;
    return null;
  };
  if (document.documentElement.scrollWidth > vw + 1)
    problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth}px wide in a ${vw}px viewport`);
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden' || (box.width === 0 && box.height === 0)) continue;
    const inside = scroller(el);
    if (!inside) {
      const [left, right] = [Math.round(box.left), Math.round(box.right)];
      const spills = style.overflowX === 'visible' && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1;
      if (box.left < -1 || box.right > vw + 1)
        problems.push(`${name(el)} reaches past the viewport (${left}..${right}px of ${vw}px)`);
      else if (spills && !['img', 'svg'].includes(el.tagName.toLowerCase()))
        problems.push(`${name(el)}: its content is ${el.scrollWidth}px wide in a ${el.clientWidth}px box`);
    }
    const own = [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
    if (own && parseFloat(style.fontSize) < minFont)
      problems.push(`${name(el)}: text at ${style.fontSize}, under ${minFont}px`);
  }
  for (const td of document.querySelectorAll('td.num')) {
    const range = document.createRange();
    range.selectNodeContents(td);
    const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.bottom)));
    if (lines.size > 1) problems.push(`${name(td)}: a figure breaks over ${lines.size} lines`);
  }
  for (const table of document.querySelectorAll('table')) {
    const box = scroller(table);
    if (!box) { problems.push(`${name(table)} is not inside a container that scrolls sideways`); continue; }
    if (wideTables && box.scrollWidth > box.clientWidth + 1)
      problems.push(`${name(table)} needs scrolling: ${box.scrollWidth}px in ${box.clientWidth}px`);
  }
  return problems;
}
"""

_IMAGES_JS = """
() => [...document.images].map((img) => ({alt: img.alt, complete: img.complete, natural: img.naturalWidth,
                                          shown: img.getBoundingClientRect().width,
                                          phone: img.currentSrc !== img.src}))
"""

_VIEWPORT_JS = """
() => { const m = document.querySelector('meta[name=viewport]'); return m ? m.getAttribute('content') : null; }
"""


def layout_problems(page, *, min_font_px: float = MIN_FONT_PX, wide_tables: bool = False) -> list[str]:  # noqa: ANN001
    """What is broken about the page's layout at its current viewport, in words; [] when nothing is."""
    return page.evaluate(_LAYOUT_JS, {"minFont": min_font_px, "wideTables": wide_tables})


def images(page) -> list[dict]:  # noqa: ANN001
    """Each <img>: its alt text, whether it finished loading, its natural and its shown width in px, and
    whether the browser took a ``<picture>``'s other source (the phone's charts) instead of its src."""
    return page.evaluate(_IMAGES_JS)


def viewport_meta(page) -> str | None:  # noqa: ANN001
    return page.evaluate(_VIEWPORT_JS)
