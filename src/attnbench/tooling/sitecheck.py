"""Load every page of a built site in headless Chromium and say what a reader would trip over.

For each page: no console error, uncaught exception or failed load; every image decoded; every local
link (and its #fragment) resolves; the answer (`#answer`, else the headline `#headline`) comes before the first figure and starts
on the first screen; nothing overflows sideways at 400 px; in every SVG figure shown, at 1400 px and at
400 px, no text falls outside the drawing or is cut with "…", and no text is smaller than MIN_TEXT_PX. Screenshots (first screen at 1400 px light
and dark, 400 px, and the whole page at 1400 px) go to a folder for a person to look at.

    uv run python -m attnbench.tooling.sitecheck site/ --screenshots /tmp/shots
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

from attnbench.tooling.browser import Chromium

DESKTOP = (1400, 900)
NARROW = (400, 800)

# Every <img> loads now (lazy ones too) and is decoded; the ones that fail are named.
DECODE_IMAGES = """
(async () => {
  const bad = [];
  for (const img of document.images) {
    img.loading = "eager";
    try { await img.decode(); } catch (e) { }
    if (!img.complete || img.naturalWidth === 0) bad.push(img.alt || img.src.slice(0, 80));
  }
  return bad;
})()
"""

LINKS = """
[...document.querySelectorAll("a[href]")].map(a => a.href)
  .concat([...document.querySelectorAll("img[src]")].map(i => i.src).filter(s => !s.startsWith("data:")))
"""

HEADLINE = """
(() => {
  // a report's answer (question, answer, key numbers, key figure) opens the page; the ranking
  // (#headline) follows it; a page without an answer opens with the ranking
  const headline = document.getElementById("answer") || document.getElementById("headline");
  const figure = document.querySelector("figure.artifact img, figure.artifact.image");
  if (!headline) return {present: false};
  return {
    present: true,
    top: headline.getBoundingClientRect().top + window.scrollY,
    beforeFigure: !figure || !!(headline.compareDocumentPosition(figure) & Node.DOCUMENT_POSITION_FOLLOWING),
  };
})()
"""

# Elements sticking out past the right edge, outside any box that scrolls them.
OVERFLOW = """
(() => {
  const width = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth <= width + 1) return [];
  const scrolls = el => { for (let p = el.parentElement; p; p = p.parentElement) {
      const s = getComputedStyle(p).overflowX; if (s === "auto" || s === "scroll" || s === "hidden") return true; }
    return false; };
  const out = [];
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.right > width + 1 && !scrolls(el)) {
      out.push(`${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}${el.className && typeof el.className === "string" ? "." + el.className.split(" ").join(".") : ""} (right edge ${Math.round(r.right)} px)`);
      if (out.length >= 5) break;
    }
  }
  return out.length ? out : [`the page is ${document.documentElement.scrollWidth} px wide`];
})()
"""


# Each SVG figure shown on the page, drawn inline off-screen at its shown size: text outside the drawing
# (cut off by the viewBox) or clipped with an ellipsis, and the smallest text as shown, in CSS pixels.
FIGURES = """
(async () => {
  const out = [];
  const shown = [...document.querySelectorAll("figure img")].filter(i => i.clientWidth > 0 &&
      (i.src.startsWith("data:image/svg") || /\\.svg$/i.test(i.src)));
  for (const img of shown) {
    let text;
    try { text = await (await fetch(img.src)).text(); } catch (e) { continue; }
    const holder = document.createElement("div");
    holder.style.cssText = "position:absolute;left:-30000px;top:0";
    holder.innerHTML = text;
    const svg = holder.querySelector("svg");
    if (!svg || !svg.viewBox.baseVal || !svg.viewBox.baseVal.width) continue;
    svg.setAttribute("width", img.clientWidth); svg.setAttribute("height", img.clientHeight);
    document.body.appendChild(holder);
    const box = svg.getBoundingClientRect(), scale = box.width / svg.viewBox.baseVal.width;
    const cut = [], sizes = [];
    for (const t of svg.querySelectorAll("text")) {
      const words = t.textContent.trim(), r = t.getBoundingClientRect();
      if (!words || !r.width) continue;
      if (words.includes("\u2026") || r.left < box.left - 1 || r.right > box.right + 1 ||
          r.top < box.top - 1 || r.bottom > box.bottom + 1) cut.push(words.slice(0, 60));
      sizes.push(parseFloat(getComputedStyle(t).fontSize) * scale);
    }
    holder.remove();
    out.push({name: img.alt || img.src.slice(0, 60), cut, smallest: sizes.length ? Math.min(...sizes) : null});
  }
  return out;
})()
"""
MIN_TEXT_PX = {DESKTOP[0]: 8.0, NARROW[0]: 6.0}  # the smallest figure text a reader can still read


def _figure_problems(tab, width: int) -> list[str]:
    problems = []
    for figure in tab.evaluate(FIGURES, timeout=120):
        for words in figure["cut"]:
            problems.append(f"figure text cut off in {figure['name']}: {words!r}")
        small = figure["smallest"]
        if small is not None and small < MIN_TEXT_PX[width]:
            problems.append(f"figure text too small at {width} px in {figure['name']}: {small:.1f} px"
                            f" (at least {MIN_TEXT_PX[width]:.0f})")  # fmt: skip
    return problems


@dataclass
class PageReport:
    page: Path
    problems: list[str] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.ids.update(value for name, value in attrs if name == "id" and value)


def _ids_of(path: Path, cache: dict[Path, set[str]]) -> set[str]:
    if path not in cache:
        parser = _Ids()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = parser.ids
    return cache[path]


def pages_of(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"), key=lambda p: (len(p.relative_to(site).parts), str(p)))


def check_site(
    site: Path, screenshots: Path | None = None, browser: Chromium | None = None
) -> list[PageReport]:
    """One report per page of `site` (index first); screenshots under `screenshots` if given."""
    site = Path(site).resolve()
    own = browser is None
    browser = browser or Chromium.start()
    ids: dict[Path, set[str]] = {}
    try:
        return [_check_page(browser, site, page, screenshots, ids) for page in pages_of(site)]
    finally:
        if own:
            browser.close()


def _shot_name(site: Path, page: Path, suffix: str) -> str:
    stem = "-".join(page.relative_to(site).with_suffix("").parts)
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', stem)}.{suffix}.png"


def _check_page(browser: Chromium, site: Path, page: Path, shots: Path | None, ids) -> PageReport:
    report = PageReport(page)
    tab = browser.open(page.as_uri(), *DESKTOP)
    try:
        undecoded = tab.evaluate(DECODE_IMAGES, timeout=120)
        report.problems += [f"image not decoded: {name}" for name in undecoded]
        report.problems += _broken_links(
            tab.evaluate(LINKS),
            page,
            set(tab.evaluate("[...document.querySelectorAll('[id]')].map(e => e.id)")),
            ids,
        )
        report.problems += _figure_problems(tab, DESKTOP[0])
        headline = tab.evaluate(HEADLINE)
        if not headline["present"]:
            report.problems.append("no headline (#headline)")
        else:
            if not headline["beforeFigure"]:
                report.problems.append("the headline comes after the first figure")
            if headline["top"] > DESKTOP[1]:
                report.problems.append(
                    f"the headline starts {headline['top']:.0f} px down: below the first screen"
                )
        if shots:
            report.screenshots.append(tab.screenshot(shots / _shot_name(site, page, "desktop")))
            report.screenshots.append(tab.screenshot(shots / _shot_name(site, page, "full"), full_page=True))
        tab.resize(*NARROW)
        tab.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        report.problems += [
            f"overflows sideways at {NARROW[0]} px: {what}" for what in tab.evaluate(OVERFLOW)
        ]
        report.problems += _figure_problems(tab, NARROW[0])
        if shots:
            report.screenshots.append(tab.screenshot(shots / _shot_name(site, page, "narrow")))
            tab.resize(*DESKTOP, dark=True)
            tab.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            report.screenshots.append(tab.screenshot(shots / _shot_name(site, page, "dark")))
        report.problems += tab.errors
    finally:
        tab.close()
    return report


def _broken_links(urls: list[str], page: Path, own_ids: set[str], ids) -> list[str]:
    problems = []
    for url in dict.fromkeys(urls):
        base, fragment = urldefrag(url)
        parsed = urlparse(base)
        if parsed.scheme != "file":
            continue  # remote links are links (the site loads nothing from the network)
        target = Path(unquote(parsed.path))
        if not target.exists():
            problems.append(f"broken link: {url}")
        elif fragment and target.suffix == ".html":
            known = own_ids if target.resolve() == page.resolve() else _ids_of(target, ids)
            if unquote(fragment) not in known:
                problems.append(f"broken anchor: {url}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path)
    parser.add_argument("--screenshots", type=Path, help="folder for the PNG screenshots")
    args = parser.parse_args(argv)
    reports = check_site(args.site, args.screenshots)
    bad = 0
    for report in reports:
        print(f"{'ok ' if not report.problems else 'BAD'} {report.page.relative_to(args.site.resolve())}")
        for problem in report.problems:
            print(f"    {problem}")
        bad += bool(report.problems)
    if args.screenshots:
        print(f"screenshots: {args.screenshots}")
    print(f"{len(reports) - bad} pages clean, {bad} with problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
