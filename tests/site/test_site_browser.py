"""The fixture site in headless Chromium: every page loads cleanly and reads at 400 px.

Needs Debian's `chromium` (.ci/run installs it). Without it the test is skipped here, and fails in CI
(CI is set), where a missing browser must not pass silently. Screenshots go to
$ATTNBENCH_SCREENSHOTS (CI: .ci/artifacts/screenshots), else to a temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attnbench.tooling.browser import find_chromium
from attnbench.tooling.sitecheck import check_site, pages_of


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser test, and no chromium is installed (.ci/run installs it)")
        pytest.skip("chromium is not installed: `apt-get install chromium` to run the browser test")
    return path


def test_every_page_clean_in_chromium(chromium, demo_site, tmp_path):
    shots = Path(os.environ.get("ATTNBENCH_SCREENSHOTS") or tmp_path / "screenshots")
    reports = check_site(demo_site, shots)
    assert [r.page for r in reports] == pages_of(demo_site.resolve())
    assert len(reports) == 5  # index, compare, three machines
    problems = {str(r.page.relative_to(demo_site.resolve())): r.problems for r in reports if r.problems}
    assert problems == {}
    assert all(p.stat().st_size > 1000 for r in reports for p in r.screenshots)


def test_the_check_finds_what_it_looks_for(chromium, tmp_path):
    """A page with each defect: the check must report every one (it is not a check that cannot fail)."""
    site = tmp_path / "bad"
    site.mkdir()
    (site / "index.html").write_text(
        "<!doctype html><html><body>"
        '<figure class="artifact image"><img src="data:image/png;base64,AAAA" alt="broken"></figure>'
        '<section id="headline">late</section>'
        '<a href="missing.html">x</a> <a href="#nowhere">y</a>'
        '<div style="width: 900px">wide</div>'
        "<script>console.error('boom')</script></body></html>"
    )
    (report,) = check_site(site)
    text = "\n".join(report.problems)
    assert "image not decoded: broken" in text
    assert "the headline comes after the first figure" in text
    assert "broken link: file://" in text and "missing.html" in text and "broken anchor" in text
    assert "overflows sideways at 400 px" in text
    assert "console.error: boom" in text
