"""How the site shows a file or a value: images embedded, CSV/TSV/JSONL as tables, Markdown, text, times.

Pure functions; render.py decides where things go on the page. Numbers in tables are rounded
for reading; the exact value is the cell's tooltip and the file itself is a download link. A JSONL of
attnbench result rows (README: results.jsonl) gets a curated view: the measured rows with the columns
a kernel engineer compares, the providers that did not run grouped with their reason, and every
column of every row folded below.
"""

from __future__ import annotations

import base64
import csv
import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

MAX_TABLE_ROWS = 200  # rows shown per table; the full file is a download link
MAX_RECORDS = 20_000  # JSONL lines read for the curated view (beyond: counted, not read)
MAX_EMBED_BYTES = 8 * 2**20  # larger images are linked, not embedded
MAX_TEXT_CHARS = 100_000  # stdout/stderr/text artifacts: the tail is shown, the full file linked
TAIL_LINES = 30  # long stdout: the last lines are shown, the earlier ones folded above them
FOLD_OUTPUT_LINES = 45  # ...when it has more lines than this
FOLD_TEXT_LINES = 15  # text artifacts longer than this are folded
LONG_VALUE = 60  # table values longer than this are cut with an ellipsis (whole value in the tooltip)
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp", ".svg": "image/svg+xml"}  # fmt: skip
TEXT_SUFFIXES = {".txt", ".log", ".json", ".yaml", ".yml", ".toml", ".py", ".sh", ".cfg", ".ini"}
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
MEASURE = re.compile(r"[+-]?(\d[\d,]*\.?\d*|\.\d+)([eE][+-]?\d+)?\s*(%|x|×|ms|s|[KMGT]i?B)?")  # 95.2%, 1.82x


class Shown(NamedTuple):
    """One table cell as displayed."""

    text: str
    title: str = ""  # the exact value when `text` is rounded, or the whole of a cut value
    css: str = ""  # "num" right-aligns; "good"/"bad" colour a verdict; "long" cuts with an ellipsis


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
    elif suffix in (".csv", ".tsv"):
        view.update(kind="table", **_csv_table(src, "\t" if suffix == ".tsv" else ","))
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


# ---- tables ----


def shown(value: Any) -> Shown:
    """A CSV string or a JSON value as a table cell: long numbers rounded to 4 digits, long text cut."""
    if value is None:
        return Shown("")
    if isinstance(value, (bool, dict, list)):  # as JSON writes them: true, not True
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value) if not isinstance(value, float) else repr(value)
    if NUMBER.fullmatch(text):
        mantissa = re.split("[eE]", text)[0]
        digits = mantissa.lstrip("+-").replace(".", "").lstrip("0")
        if ("." in text or "e" in text.lower()) and len(digits) > 6:
            return Shown(format(float(text), "#.4g"), text, "num")  # '#': 17.00, not 17
        return Shown(text, "", "num")
    if len(text) > LONG_VALUE:
        return Shown(text, text, "long")
    return Shown(text)


def _table(columns: list[str], rows: list[list[Shown]], total: int, note: str = "", titles=None) -> dict:
    """A table for the template; a column of numbers is right-aligned, its header too."""
    numeric = [
        any(row[i].text for row in rows) and all(row[i].css == "num" for row in rows if row[i].text)
        for i in range(len(columns))
    ]
    titles = titles or [""] * len(columns)
    return {
        "columns": [
            {"name": c, "title": t, "css": "num" if n else ""} for c, t, n in zip(columns, titles, numeric)
        ],
        "rows": rows,
        "total": total,
        "note": note,
    }


def _csv_table(path: Path, delimiter: str) -> dict[str, Any]:
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f, delimiter=delimiter)
        header = next(reader, [])
        rows, total = [], 0
        for row in reader:
            total += 1
            if total <= MAX_TABLE_ROWS:
                rows.append([shown(v) for v in row])
    return _table(header, rows, total)


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
    full = _table(columns, [[shown(r.get(c)) for c in columns] for r in flat], total, note)
    if records and all(isinstance(r, dict) and RESULT_KEYS <= r.keys() for r in records):
        return {"kind": "results", "full": full, **_results(records, total)}
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


# ---- the curated view of benchmark result rows (README: results.jsonl) ----

RESULT_KEYS = {"provider", "status", "pass", "ms_median"}
NOT_MEASURED = ("unavailable", "unsupported")  # grouped by provider and reason instead of one row per shape
# A row's keys that say what was measured and how it went; every other top-level key describes the
# workload (shape columns where they vary, constants where they do not), in the order rows give them.
NOT_WORKLOAD = {"provider", "family", "status", "pass", "reason", "ms_median", "ms_p20", "ms_p80", "reps",
                "tflops", "mfu", "peak_mem_bytes", "setup_ms", "timer", "max_abs", "mean_abs", "rel_l2",
                "ok", "env", "extra"}  # fmt: skip


def _workload_columns(records: list[dict]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(k for r in records for k in r if k not in NOT_WORKLOAD))


def _results(records: list[dict], total: int) -> dict[str, Any]:
    measured = [r for r in records if r.get("status") not in NOT_MEASURED]
    WORKLOAD = _workload_columns(records)
    varying = [c for c in WORKLOAD if len({json.dumps(r.get(c)) for r in measured}) > 1]
    constants = [
        f"{c} {_plain(measured[0][c])}"
        for c in (*WORKLOAD, "timer")
        if c not in varying and measured and measured[0].get(c) is not None
    ]
    # Self-attention sweeps have seqlen_q = seqlen_k in every row: one column says both.
    one_seq = {"seqlen_q", "seqlen_k"} <= set(varying) and all(
        r["seqlen_q"] == r["seqlen_k"] for r in measured
    )
    shape = [
        ("seqlen", "seqlen_q = seqlen_k", lambda r: shown(r.get("seqlen_q")))
        if one_seq and c == "seqlen_q"
        else (c, "", lambda r, c=c: shown(r.get(c)))
        for c in varying
        if not (one_seq and c == "seqlen_k")
    ]
    columns = [
        ("provider", "", lambda r: shown(r.get("provider"))),
        ("pass", "", lambda r: shown(r.get("pass"))),
        *shape,
        *METRICS,
    ]
    rows = [[get(r) for _, _, get in columns] for r in measured[:MAX_TABLE_ROWS]]
    groups: dict[tuple, dict[str, Any]] = {}
    for r in records:
        if r.get("status") in NOT_MEASURED:
            key = (r.get("provider"), r.get("status"), r.get("reason") or "")
            group = groups.setdefault(
                key, {"provider": key[0], "status": key[1], "reason": key[2], "rows": 0, "passes": {}}
            )
            group["rows"] += 1
            group["passes"][r.get("pass")] = None
    for group in groups.values():
        group["passes"] = ", ".join(str(p) for p in group["passes"])
    note = f"Read the first {MAX_RECORDS} of {total} lines." if total > MAX_RECORDS else ""
    cpu_timer = any(r.get("timer") == "perf_counter" for r in measured)
    table = _table([n for n, _, _ in columns], rows, len(measured), note, [t for _, t, _ in columns])
    return {
        "measured": table,
        "constants": constants,
        "not_measured": list(groups.values()),
        "cpu_timer": cpu_timer,
    }


def _plain(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)


def _number(key: str, fmt: Callable[[float], str], css: str = "num") -> Callable[[dict], Shown]:
    def get(record: dict) -> Shown:
        value = record.get(key) if not key.startswith("extra.") else (record.get("extra") or {}).get(key[6:])
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return shown(value)
        return Shown(fmt(value), repr(value), css)

    return get


def _spread(record: dict) -> Shown:
    """(p80 - p20) / median: the run-to-run noise of the timing, as a percentage."""
    p20, p80, median = record.get("ms_p20"), record.get("ms_p80"), record.get("ms_median")
    if not all(isinstance(v, (int, float)) for v in (p20, p80, median)) or not median:
        return Shown("")
    return Shown(f"{(p80 - p20) / median:.1%}", f"p20 {p20:.4g} ms, p80 {p80:.4g} ms", "num")


def _ok(record: dict) -> Shown:
    ok = record.get("ok")
    tolerance = (record.get("extra") or {}).get("tolerance") or {}
    limits = ", ".join(f"{k} ≤ {v}" for k, v in tolerance.items() if k != "name")
    title = f"tolerance {tolerance.get('name', '?')}: {limits}" if tolerance else ""
    if ok is None:
        return Shown("", title)
    return Shown("✓" if ok else "✗ no", title, "good" if ok else "bad")


def _status(record: dict) -> Shown:
    status = str(record.get("status"))
    return Shown(status, "", "good" if status == "ok" else "bad")


def _reason(record: dict) -> Shown:
    text = record.get("reason") or (record.get("extra") or {}).get("note") or ""
    return shown(text)


def _ms(v: float) -> str:
    return f"{v:.4f}" if v < 100 else f"{v:.1f}"


METRICS: list[tuple[str, str, Callable[[dict], Shown]]] = [
    ("status", "", _status),
    ("ms", "median time per call (CUDA events, cold L2)", _number("ms_median", _ms)),
    ("spread", "(p80 − p20) / median of the repetitions", _spread),
    (
        "TFLOP/s",
        "exact FLOPs / median time",
        _number("tflops", lambda v: f"{v:.1f}" if v >= 10 else f"{v:.3g}"),
    ),
    ("MFU", "against the bf16 matmul peak measured in the same run", _number("mfu", lambda v: f"{v:.1%}")),
    (
        "peak mem",
        "peak device memory of the timed calls, inputs included",
        _number("peak_mem_bytes", lambda v: human_size(int(v))),
    ),
    (
        "setup ms",
        "compile, autotune, mask construction and first call: never timed",
        _number("setup_ms", lambda v: f"{v:.1f}" if v < 100 else f"{v:,.0f}"),
    ),
    (
        "rel_l2",
        "relative L2 error against the fp32 reference (backward: worst of out, dq, dk, dv)",
        _number("rel_l2", lambda v: f"{v:.1e}"),
    ),
    ("ok", "within the tolerance (hover a cell for it)", _ok),
    ("reps", "timed repetitions", _number("reps", str)),
    ("reason / note", "", _reason),
]


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


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
