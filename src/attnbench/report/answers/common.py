"""What every answer shares: which rows count, how numbers are written, a key number."""

from __future__ import annotations

from collections.abc import Mapping

from attnbench.notebook.site import headline as page
from attnbench.report.peak_share import number as _num


def _good(row: Mapping) -> bool:
    from attnbench.report.peak_share import above_peak

    return (row.get("status") == "ok" and row.get("ok") is not False and _num(row.get("ms_median")) is not None
            and not above_peak(row))  # fmt: skip


def _pct(x: float) -> str:
    return f"{x:.1%}" if abs(x) < 0.1 else f"{x:.0%}"


def _first_of(names: list[str], shown: int = 3) -> str:
    """ "a, b, c and 2 more": the first `shown` names, and how many more there are."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _x(ratio: float) -> str:
    return f"{ratio:.2f}×"


def _fastest(rows: list[Mapping]) -> Mapping | None:
    return min(rows, key=lambda r: r["ms_median"]) if rows else None


def _number(key, name, value, unit, per="", detail="", higher=True) -> page.Number:
    return page.Number(key=key, name=name, value=value, unit=unit, per=per, detail=detail,
                       higher_is_better=higher)  # fmt: skip
