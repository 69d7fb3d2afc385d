"""statuses.stale_groups: the stale note above a page's answer, one line per reason with its cells."""

from __future__ import annotations

from pathlib import Path

from attnbench.notebook.site.statuses import stale_groups


def test_a_reason_several_cells_share_is_written_once_with_all_of_them():
    groups = dict(
        stale_groups(
            [
                (
                    "plot",
                    "code changed; new needs fwd_1, fwd_2; attnbench sources changed (report.figures, report.tables)",
                ),
                (
                    "summary",
                    "code changed; new needs fwd_1, fwd_2; attnbench sources changed (report.tables, report.answers)",
                ),
                ("trust", "code changed; upstream gpu changed"),
            ]
        )
    )
    assert groups["code changed"] == ["plot", "summary", "trust"]
    assert groups["new needs fwd_1, fwd_2"] == ["plot", "summary"]
    # the modules merged into one reason, each named once
    assert groups["attnbench sources changed (report.answers, report.figures, report.tables)"] == [
        "plot",
        "summary",
    ]
    assert len(groups) == 3  # "upstream gpu changed" gives way to trust's own reason


def test_brackets_keep_their_semicolons_and_upstream_only_cells_have_a_group():
    groups = stale_groups(
        [
            (
                "bench",
                "environment changed (cuda 13.0 -> 13.2; python 3.12 -> 3.11); machine fingerprint changed",
            ),
            ("table", "upstream bench changed"),
        ]
    )
    assert groups == [
        ("environment changed (cuda 13.0 -> 13.2; python 3.12 -> 3.11)", ["bench"]),
        ("machine fingerprint changed", ["bench"]),
        ("what it reads was measured again or changed", ["table"]),
    ]


def test_a_page_counts_each_stale_cell_once_whatever_its_reasons():
    import jinja2

    from attnbench.notebook.site import render
    from attnbench.notebook.site.compare import _stale_cells
    from attnbench.notebook.site.statuses import stale_cells

    groups = stale_groups([("plot", "code changed; new needs fwd_1"), ("summary", "code changed")])
    assert _stale_cells({"stale": groups}) == "2 cells"
    templates = jinja2.FileSystemLoader(Path(render.__file__).with_name("templates"))
    env = jinja2.Environment(loader=templates)
    env.filters["stale_cells"] = stale_cells  # as render.Site registers it
    macro = env.get_template("headline.html.j2").module.render_headline
    page = str(macro({}, None, "", {}, {}, groups, "gpu-a", "nb"))
    assert "2 cells of this run were measured by code that has changed since" in page
    # the cells once up front, then once per reason inside the folded details
    assert page.count('href="#cell-plot"') == 3 and page.count('href="#cell-summary"') == 2
    assert page.index("measured by code that has changed since") < page.index("<details>")
    assert "code changed: " in page[page.index("<details>") :]
