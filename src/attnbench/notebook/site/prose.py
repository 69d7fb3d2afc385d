"""Markdown prose and Markdown artifacts as HTML: markdown-it-py with the site's own rules.

Remote images become links (the site loads nothing from the network), prose headings get ids and
enter the page's contents, tables scroll in a box, numeric cells of a Markdown artifact's table align
right as in the CSV tables; code is highlighted by pygments in light and dark colours.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from attnbench.notebook.site.tables import MEASURE


def markdown(highlight: Callable[[str, str, str], str]):
    """The page's Markdown parser: CommonMark with tables, raw HTML off, `highlight` for fenced code."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "highlight": highlight}).enable("table")
    md.add_render_rule("image", _image_without_network)
    md.add_render_rule("heading_open", _heading_with_id)
    md.add_render_rule("table_open", _table_in_a_box)
    md.add_render_rule("table_close", lambda *_: "</table></div>\n")
    md.add_render_rule("td_open", _number_cell)
    return md


def _image_without_network(self, tokens, idx, options, env) -> str:
    """Markdown images with a remote source become links: the site loads nothing from the network."""
    token = tokens[idx]
    src = token.attrGet("src") or ""
    if "://" in src or src.startswith("//"):
        from markupsafe import escape

        alt = "".join(t.content for t in token.children or []) or src
        return f'<a href="{escape(src)}">image: {escape(alt)}</a>'
    return self.image(tokens, idx, options, env)


def _heading_with_id(self, tokens, idx, options, env) -> str:
    """Give each prose heading an id unique on the page and list it in the page's contents."""
    if "used" in env:  # prose, not a Markdown artifact
        text = "".join(t.content for t in tokens[idx + 1].children or [] if t.type in ("text", "code_inline"))
        base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
        slug, n = base, 1
        while slug in env["used"]:
            n += 1
            slug = f"{base}-{n}"
        env["used"].add(slug)
        tokens[idx].attrSet("id", slug)
        env["toc"].append({"level": int(tokens[idx].tag[1:]), "id": slug, "text": text})
    return self.renderToken(tokens, idx, options, env)


def _table_in_a_box(self, tokens, idx, options, env) -> str:
    """Tables scroll in their own box; a Markdown artifact's table looks like the CSV tables."""
    return (
        '<div class="table-box"><table class="data">\n'
        if env.get("artifact")
        else '<div class="scroll"><table>\n'
    )


def _number_cell(self, tokens, idx, options, env) -> str:
    if env.get("artifact") and MEASURE.fullmatch(tokens[idx + 1].content.strip()):
        tokens[idx].attrJoin("class", "num")  # numbers line up on the right, as in the CSV tables
    return self.renderToken(tokens, idx, options, env)


def pygments_css() -> str:
    """Token colours for light and dark; backgrounds come from style.css's variables."""
    from pygments.formatters import HtmlFormatter

    def rules(style: str) -> str:
        defs = HtmlFormatter(style=style, cssclass="hl").get_style_defs(".hl")
        lines = (line for line in defs.splitlines() if line.startswith(".hl ."))
        return "\n".join(re.sub(r"\s*/\*.*?\*/", "", line) for line in lines)  # no token-name comments

    return (
        f"\n@media not all and (prefers-color-scheme: dark) {{\n{rules('default')}\n}}\n"
        f"@media (prefers-color-scheme: dark) {{\n{rules('github-dark')}\n}}\n"
    )
