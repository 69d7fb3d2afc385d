"""How the site shows a file or a value: images embedded, CSV/TSV/JSONL as tables, Markdown, text, times.

Pure functions; render.py decides where things go on the page. Numbers in tables are rounded
for reading (tables.py); the exact value is the cell's tooltip and the file itself is a download link. A
JSONL of attnbench result rows (README: results.jsonl) gets a curated view (results_view.py) with every
column of every row folded below.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from attnbench.notebook.site.results_view import RESULT_KEYS, results
from attnbench.notebook.site.tables import MAX_RECORDS, MAX_TABLE_ROWS, human_size, shown, table

MAX_EMBED_BYTES = 8 * 2**20  # larger images are linked, not embedded
MAX_TEXT_CHARS = 100_000  # stdout/stderr/text artifacts: the tail is shown, the full file linked
TAIL_LINES = 30  # long stdout: the last lines are shown, the earlier ones folded above them
FOLD_OUTPUT_LINES = 45  # ...when it has more lines than this
FOLD_TEXT_LINES = 15  # text artifacts longer than this are folded
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp", ".svg": "image/svg+xml"}  # fmt: skip
TEXT_SUFFIXES = {".txt", ".log", ".json", ".yaml", ".yml", ".toml", ".py", ".sh", ".cfg", ".ini"}


def artifact_view(src: Path, rel: str, href: str) -> dict[str, Any]:
    suffix, size = src.suffix.lower(), src.stat().st_size
    view: dict[str, Any] = {"name": rel, "href": href, "size": human_size(size), "kind": "file"}
    if suffix in IMAGE_TYPES and size <= MAX_EMBED_BYTES:
        # SVG too goes through <img>: an SVG shown as an image runs no script and fetches nothing,
        # a guarantee no hand-written sanitiser gives; it also keeps figure ids and CSS apart.
        raw = src.read_bytes()
        data = base64.b64encode(raw).decode("ascii")
        view.update(kind="image", src=f"data:{IMAGE_TYPES[suffix]};base64,{data}")
        # width and height reserve the image's box before it loads (no jump while a lazy image arrives)
        view["width"], view["height"] = image_size(raw, suffix) or (None, None)
        title = svg_title(raw, view["height"]) if suffix == ".svg" else ""  # figures of a run share one
        view["alt"] = f"{rel}: {title}" if title else rel  # title, so the file name stays in front
    elif suffix in (".csv", ".tsv"):
        view.update(kind="table", **_csvtable(src, "\t" if suffix == ".tsv" else ","))
    elif suffix == ".jsonl":
        view.update(_jsonl_view(src))
    elif suffix == ".md":  # render.py turns it into HTML (raw HTML off, like the prose)
        text, omitted = read_head(src, MAX_TEXT_CHARS)
        view.update(kind="markdown", text=text, omitted=omitted)
    elif suffix in TEXT_SUFFIXES:
        shown, omitted = read_head(src, MAX_TEXT_CHARS)
        shown = terminal_text(shown)
        lines = shown.count("\n") + (not shown.endswith("\n"))
        view.update(kind="text", text=shown, omitted=omitted, lines=lines, folded=lines > FOLD_TEXT_LINES)
    return view


SVG_LENGTH = re.compile(r"\s*([0-9.]+)\s*(px|pt|pc|in|cm|mm)?\s*")
CSS_PX = {None: 1.0, "px": 1.0, "pt": 4 / 3, "pc": 16.0, "in": 96.0, "cm": 96 / 2.54, "mm": 96 / 25.4}


def image_size(data: bytes, suffix: str) -> tuple[int, int] | None:
    """An image's intrinsic size in CSS pixels, from its header (PNG, GIF, JPEG, SVG); None if unknown."""
    import struct

    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:2] == b"\xff\xd8":  # JPEG: walk the segments to the frame header (SOF0..SOF15 but 4, 8, 12)
        i = 2
        while i + 9 < len(data) and data[i] == 0xFF:
            marker, length = data[i + 1], struct.unpack(">H", data[i + 2 : i + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return width, height
            i += 2 + length
        return None
    if suffix == ".svg":
        return _svg_size(data[:4096].decode("utf-8", errors="replace"))
    return None


def _svg_size(head: str) -> tuple[int, int] | None:
    tag = re.search(r"<svg\b[^>]*>", head, re.DOTALL)
    if not tag:
        return None
    attrs = dict(re.findall(r'([\w:-]+)\s*=\s*"([^"]*)"', tag.group(0)))
    sizes = []
    for name in ("width", "height"):
        match = SVG_LENGTH.fullmatch(attrs.get(name, ""))
        sizes.append(float(match.group(1)) * CSS_PX[match.group(2)] if match else None)
    if None in sizes and "viewBox" in attrs:
        box = [float(v) for v in re.split(r"[\s,]+", attrs["viewBox"].strip()) if v]
        if len(box) == 4 and box[2] > 0 and box[3] > 0:
            sizes = [box[2], box[3]] if sizes == [None, None] else sizes
            if sizes[0] is None:
                sizes[0] = sizes[1] * box[2] / box[3]
            if sizes[1] is None:
                sizes[1] = sizes[0] * box[3] / box[2]
    if None in sizes:
        return None
    return round(sizes[0]), round(sizes[1])


SVG_TEXT = re.compile(r"<text\b([^>]*)>([^<]+)</text>")


def svg_title(data: bytes, height: float | None) -> str:
    """What an SVG figure shows, for its alt text: its own <title>, else the centred, unrotated line(s)
    of text nearest its top in a font larger than its smallest (the tick labels): matplotlib writes a
    figure's or its axes' titles so. "" when neither is there (text drawn as paths, only tick labels)."""
    body = re.sub(r"<metadata\b.*?</metadata>", "", data.decode("utf-8", errors="replace"), flags=re.DOTALL)
    if own := re.search(r"<title\b[^>]*>([^<]+)</title>", body):  # matplotlib's own dc:title is gone above
        return html.unescape(own.group(1)).strip()
    texts = []
    for attrs, words in SVG_TEXT.findall(body):
        size, y = re.search(r"font-size:\s*([0-9.]+)", attrs), re.search(r'\sy="([-0-9.]+)"', attrs)
        if size and y:
            centred = "text-anchor: middle" in attrs and not re.search(r"rotate\((?!-?0[ )])", attrs)
            texts.append((float(size.group(1)), float(y.group(1)), html.unescape(words).strip(), centred))
    if not texts:
        return ""
    smallest = min(size for size, *_ in texts)
    top = (height or 0) * 0.15  # a title sits at the top; a larger label lower down is an axis's
    titles = [(y, words) for size, y, words, centred in texts if centred and size > smallest
              and y <= top and re.search(r"[A-Za-z]", words)]  # fmt: skip
    if not titles:
        return ""
    first = min(y for y, _ in titles)
    return "; ".join(words for y, words in titles if y - first < 1)


def read_head(path: Path, chars: int) -> tuple[str, str]:
    """The first `chars` characters and what is left unread ("" when nothing): never the whole of a
    large file in memory."""
    size = path.stat().st_size
    with path.open(encoding="utf-8", errors="replace") as f:
        text = f.read(chars)
        rest = f.read(1)
    if not rest:
        return text, ""
    return text, f"{human_size(max(0, size - len(text.encode())))} more"


def read_tail(path: Path, chars: int) -> tuple[str, str]:
    """The last `chars` characters and what comes before them ("" when nothing), reading only the end."""
    size = path.stat().st_size
    with path.open("rb") as f:
        f.seek(max(0, size - 4 * chars))
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    if size <= 4 * chars and len(text) <= chars:
        return text, ""
    shown = text[-chars:]
    return shown, f"the first {human_size(max(0, size - len(shown.encode())))}"


# Terminal control sequences (ECMA-48): OSC (a title, a hyperlink) ended by BEL or ST; CSI (colours,
# cursor moves, erase); two-byte escapes and charset selection. Then C0 controls but tab and newline.
TERMINAL_CODES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[@-Z\\-_]?"
)
CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def terminal_text(text: str) -> str:
    """What a terminal would leave readable: escapes removed, a line rewritten with \\r (a progress
    bar) reduced to its last state, CRLF as LF, other control characters dropped."""
    if "\x1b" not in text and "\r" not in text and not CONTROLS.search(text):
        return text
    text = TERMINAL_CODES.sub("", text).replace("\r\n", "\n")
    lines = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n")]
    return CONTROLS.sub("", "\n".join(lines))


def split_tail(text: str, keep: int = TAIL_LINES) -> dict[str, Any]:
    """Long output: the last `keep` lines to show and the earlier ones to fold above them."""
    lines = text.splitlines(keepends=True)
    if len(lines) <= max(keep, FOLD_OUTPUT_LINES):  # folding a handful of lines is not worth a click
        return {"head": "", "tail": text, "head_lines": 0, "lines": len(lines)}
    return {
        "head": "".join(lines[:-keep]),
        "tail": "".join(lines[-keep:]),
        "head_lines": len(lines) - keep,
        "lines": len(lines),
    }


def _csvtable(path: Path, delimiter: str) -> dict[str, Any]:
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f, delimiter=delimiter)
        header = next(reader, [])
        rows, total = [], 0
        for row in reader:
            total += 1
            if total <= MAX_TABLE_ROWS:
                rows.append([shown(v) for v in row])
    return table(header, rows, total)


def _jsonl_view(path: Path) -> dict[str, Any]:
    records, total, bad = [], 0, []
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            total += 1
            if total > MAX_RECORDS:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                total -= 1
                bad.append(f"line {number}: {err.msg}")
    note = f"{len(bad)} line(s) are not JSON ({'; '.join(bad[:3])})" if bad else ""
    flat = [_flatten(r) if isinstance(r, dict) else {"value": r} for r in records[:MAX_TABLE_ROWS]]
    columns = list(dict.fromkeys(c for r in flat for c in r))  # insertion-ordered union
    full = table(columns, [[shown(r.get(c)) for c in columns] for r in flat], total, note)
    if records and all(isinstance(r, dict) and RESULT_KEYS <= r.keys() for r in records):
        return {"kind": "results", "full": full, **results(records, total)}
    return {"kind": "table", **full}


def _flatten(record: dict, prefix: str = "") -> dict[str, Any]:
    """One level of nesting becomes dotted columns (correctness.max_abs); deeper stays JSON."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict) and not prefix:
            flat.update(_flatten(value, f"{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# ---- values ----


def parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def when(value: Any) -> str:
    moment = parse_time(value)
    if moment is None:
        return str(value or "")
    suffix = " UTC" if moment.utcoffset() is not None and not moment.utcoffset() else ""
    return moment.strftime("%Y-%m-%d %H:%M") + suffix


def before(a: Any, b: Any) -> bool:
    ta, tb = parse_time(a), parse_time(b)
    try:
        return bool(ta and tb and ta < tb)
    except TypeError:  # one naive, one aware: cannot say
        return False


def duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return ""
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def took(started: Any, finished: Any) -> str:
    a, b = parse_time(started), parse_time(finished)
    try:
        return duration((b - a).total_seconds()) if a and b and b >= a else ""
    except TypeError:  # one naive, one aware
        return ""


def software(machine: dict) -> str:
    """torch · CUDA · driver · Python: the versions that decide which kernels exist."""
    names = {"torch": "torch", "cuda": "CUDA", "driver": "driver", "python": "Python"}
    parts = [f"{name} {machine[key]}" for key, name in names.items() if machine.get(key)]
    return " · ".join(parts)


def gpu_text(machine: dict) -> str:
    gpu = machine.get("gpu")
    if not gpu:
        return "no GPU" + (f" ({machine['cpu']})" if machine.get("cpu") else "")
    count = machine.get("gpu_count") or 1
    return f"{gpu} ×{count}" if count > 1 else str(gpu)
