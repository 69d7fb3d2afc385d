"""The machinery every non-kernel row type shares: a dataclass that reads from and writes to one flat
JSON object, with its status (and pass, where it has one) parsed into the shared vocabularies.

A field declared with `metadata=OMIT_IF_NONE` is left out of the JSON while it is None (a failed step never
measured it), so rows written before the types existed read back and write out unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from attnbench.rows.vocab import Pass, Status

OMIT_IF_NONE = {"omit_if_none": True}  # field metadata: written only when it has a value


@dataclass
class Row:
    """Subclasses declare their JSON keys as fields, in the order they are written. A field named
    `pass_` is the JSON key "pass" (a Python keyword)."""

    KEY_OF_FIELD: ClassVar[dict[str, str]] = {"pass_": "pass"}

    def __post_init__(self):
        if hasattr(self, "status"):
            self.status = Status.parse(self.status)
        if hasattr(self, "pass_"):
            self.pass_ = Pass.parse(self.pass_)

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_if_none"):
                continue
            if f.name == "status":  # parsed again: a field may be set after construction
                value = Status.parse(value).value
            elif f.name == "pass_":
                value = Pass.parse(value).value
            out[self.KEY_OF_FIELD.get(f.name, f.name)] = value
        return out

    @classmethod
    def from_dict(cls, row: dict[str, Any]):
        names = {cls.KEY_OF_FIELD.get(f.name, f.name): f.name for f in fields(cls)}
        unknown = sorted(set(row) - set(names))
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields: {unknown}")
        return cls(**{names[key]: value for key, value in row.items()})
