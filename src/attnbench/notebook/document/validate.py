"""A JSON object checked against a dataclass's annotations: the typed records of store.py.

Covers what the records use: str, int, float (an int is a number too; a bool is neither), None,
unions, list[X], dict[str, X], Any, other dataclass instances, and enums (the value must be one of
the allowed members). Fields missing from the object take their defaults; fields the dataclass does
not have are ignored, so a record written by a newer engine still loads.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from enum import Enum
from typing import Any

from attnbench.notebook.document.model import clip


class FieldError(ValueError):
    """What is wrong, naming the field and its value: 'status is 'x': expected one of ok, failed'."""


def from_json(cls, data: Any, *, choices: dict[str, frozenset] | None = None, where: str = ""):
    """`cls(**data)` once every field conforms to its annotation; FieldError otherwise. `choices`
    narrows an enum field to some of its members; `where` prefixes field names ('cells.a.')."""
    if not isinstance(data, dict):
        raise FieldError(f"{where.rstrip('.') or 'the file'} is {shown(data)}: expected a JSON object")
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise FieldError(f"{where}{f.name} is missing")
            continue
        value, hint = data[f.name], hints[f.name]
        if isinstance(hint, type) and issubclass(hint, Enum):
            allowed = (choices or {}).get(f.name) or frozenset(hint)
            if not isinstance(value, str) or value not in {member.value for member in allowed}:
                names = ", ".join(sorted(str(member.value) for member in allowed))
                raise FieldError(f"{where}{f.name} is {shown(value)}: expected one of {names}")
            value = hint(value)
        elif not _conforms(value, hint):
            raise FieldError(f"{where}{f.name} is {shown(value)}: expected {_type_name(hint)}")
        values[f.name] = value
    return cls(**values)


def shown(value: Any) -> str:
    """A value as it appears in the file (a string quoted as Python does), clipped."""
    return clip(repr(value) if isinstance(value, str) else json.dumps(value, default=str))


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _conforms(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, h) for h in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_conforms(v, args[1]) for v in value.values())
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    names = {str: "a string", int: "an integer", float: "a number", type(None): "null"}
    if hint in names:
        return names[hint]
    kinds = {list: "a list", dict: "an object"}
    return kinds.get(typing.get_origin(hint), getattr(hint, "__name__", str(hint)))
