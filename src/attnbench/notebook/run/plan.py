"""The cache key of every cell, and why a stored result is stale.

A cell's key hashes its source, resolved metadata, params, upstream keys and the digests of the
upstream artifacts it reads, the interpreter, the machine fingerprint, and the source index's hash of
the package parts it imports (sources.py). The graph it is computed over is graph.py's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from attnbench.notebook.document.model import Cell
from attnbench.notebook.run.records import CellResult

SOURCES_CHANGED = "attnbench sources changed"  # session.py names the parts that changed, where it can

# Bump when the materialised script's template changes in a way that changes what a cell does.
SCRIPT_FORMAT = 1


def _sha(value: Any) -> str:
    data = value if isinstance(value, bytes) else json.dumps(value, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class CacheKey:
    key: str
    parts: dict[str, Any]  # source, metadata, params, upstream, inputs, attnbench, env, machine

    def without_inputs(self) -> str:
        """The key as engines before artifact digests computed it (see stale_reasons)."""
        return _sha({k: v for k, v in self.parts.items() if k != "inputs"})


def cell_key(
    cell: Cell,
    params: dict[str, Any],
    upstream: dict[str, str],
    attnbench: str,
    env: dict[str, Any],
    machine: str,
    inputs: dict[str, str | None] | None = None,
) -> CacheKey:
    """The cache key of one cell. Every part is free of absolute paths and of the machine label.

    `upstream`: each need's key; `inputs`: the digest of each need's stored artifacts (None when it
    has no result), so a dependent is stale once its upstream cell wrote something else, even when
    the upstream's own key did not change (`run --cell bench`). A cell without needs has no `inputs`
    part, which keeps the keys of such cells what they were before inputs were keyed."""
    metadata = {
        "script": cell.metadata,  # dependencies, requires-python, [tool]
        "gpus": cell.gpus,
        "env": cell.env,
        "outputs": cell.outputs,
        "format": SCRIPT_FORMAT,
    }
    parts = {
        "source": _sha(cell.source.encode()),
        "metadata": _sha(metadata),
        "params": _sha(params),
        "upstream": dict(sorted(upstream.items())),
        "attnbench": attnbench,
        "env": env,
        "machine": machine,
    }
    if inputs:
        parts["inputs"] = dict(sorted(inputs.items()))
    return CacheKey(_sha(parts), parts)


def stale_reasons(
    stored: CellResult,
    current: CacheKey,
    params: dict[str, Any] | None = None,
    upstream_finished: dict[str, str | None] | None = None,
) -> list[str]:
    """Why a stored result no longer matches `current`; [] when it does.

    A result stored before inputs were keyed has no `inputs` part. It stays current while the rest
    of its key matches and every upstream result it read finished before it started (then it read
    those very artifacts); `upstream_finished` gives each need's stored `finished` (None: none)."""
    old, new = stored.key_parts, current.parts
    if stored.key == current.key:
        return []
    if "inputs" not in old and "inputs" in new and stored.key == current.without_inputs():
        later = [
            need
            for need, finished in sorted((upstream_finished or {}).items())
            if finished is None or _later(finished, stored.started)
        ]
        return [f"upstream {need} ran again after this result" for need in later]
    if not old:
        return ["no key parts stored"]
    reasons = []
    for part in ("source", "metadata"):
        if old.get(part) != new[part]:
            reasons.append(f"{'code' if part == 'source' else 'cell attributes/deps'} changed")
    if old.get("params") != new["params"]:
        was, now = stored.params, params or {}
        changed = (
            [k for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)] if params is not None else []
        )
        reasons.append("params changed" + (f": {', '.join(changed)}" if changed else ""))
    reasons += _upstream_reasons(old, new)
    if old.get("attnbench") != new["attnbench"]:
        reasons.append(SOURCES_CHANGED)
    if old.get("env") != new["env"]:
        was, now = old.get("env") or {}, new["env"]
        if was.get("kind") != now.get("kind"):  # another kind of env: its other fields do not compare
            was, now = {"kind": was.get("kind")}, {"kind": now.get("kind")}
        diffs = [
            f"{k} {was.get(k)} -> {now.get(k)}"
            for k in sorted(set(was) | set(now))
            if was.get(k) != now.get(k)
        ]
        reasons.append("environment changed" + (f" ({'; '.join(diffs)})" if diffs else ""))
    if old.get("machine") != new["machine"]:
        reasons.append("machine fingerprint changed")
    return reasons or ["key changed"]


def _upstream_reasons(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    # a stored key of another shape (hand-edited, or another engine's) differs in every upstream
    old_up = old.get("upstream") if isinstance(old.get("upstream"), dict) else {}
    old_in = old.get("inputs") if isinstance(old.get("inputs"), dict) else {}
    new_up, new_in = new["upstream"], new.get("inputs") or {}
    added = [need for need in new_up if need not in old_up]
    dropped = sorted(set(old_up) - set(new_up))
    reasons = [f"new need{'s' * (len(added) > 1)} {', '.join(added)}"] if added else []
    for need in (need for need in new_up if need in old_up):
        if old_up[need] != new_up[need]:
            reasons.append(f"upstream {need} changed")
        elif "inputs" in new and new_in.get(need) is None:
            reasons.append(f"upstream {need} has no stored result")
        elif "inputs" in old and old_in.get(need) != new_in.get(need):
            reasons.append(f"upstream {need} wrote different artifacts (it ran again)")
    if dropped:
        reasons.append(f"no longer needs {', '.join(dropped)}")
    return reasons


def _later(a: str, b: str) -> bool:
    """Is ISO time `a` after ISO time `b`? (Unreadable times count as later: not provably current.)"""
    from datetime import datetime

    try:
        return datetime.fromisoformat(a) > datetime.fromisoformat(b)
    except (TypeError, ValueError):
        return True
