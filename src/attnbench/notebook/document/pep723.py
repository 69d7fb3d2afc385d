"""PEP 723 inline script metadata inside a cell body: find, parse and check the `# /// script` block."""

from __future__ import annotations

import re
import tomllib
from typing import Any

# The reference regex of PEP 723.
PEP723_RE = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
PEP723_KEYS = ("dependencies", "requires-python", "tool")


class ScriptMetadataError(ValueError):
    """A bad `# /// script` block; `line` is 0-based within the cell body."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line
        self.message = message


def split_script_metadata(body: str) -> tuple[str, dict[str, Any]]:
    """(body without its `# /// script` block, the block's checked metadata); ({} without a block)."""
    matches = [m for m in PEP723_RE.finditer(body) if m.group("type") == "script"]
    spans = [(body.count("\n", 0, m.start()), body.count("\n", 0, m.end())) for m in matches]
    lines = body.split("\n")
    for index, text in enumerate(lines):
        if text == "# /// script" and not any(first <= index <= last for first, last in spans):
            if lines[index + 1 : index + 2] == ["# ///"]:
                raise ScriptMetadataError(index, "empty '# /// script' block (PEP 723 needs content)")
            raise ScriptMetadataError(
                index, "'# /// script' block is never closed by a '# ///' line "
                "(every line inside it must start with '#')",
            )  # fmt: skip
    if not matches:
        return body, {}
    if len(matches) > 1:
        raise ScriptMetadataError(spans[1][0], "more than one '# /// script' block in the cell")
    match, opening = matches[0], spans[0][0]
    # As in the PEP's reference reader: drop the leading '# ' (or '#') of every line.
    content = "".join(
        text[2:] if text.startswith("# ") else text[1:]
        for text in match.group("content").splitlines(keepends=True)
    )
    try:
        meta = tomllib.loads(content)
    except tomllib.TOMLDecodeError as e:
        # tomllib (3.11) has no lineno attribute: the position is only in the message.
        found = re.search(r"\s*\(at line (\d+), column (\d+)\)", str(e))
        reason = str(e)[: found.start()] + f" (column {found.group(2)})" if found else str(e)
        line = opening + int(found.group(1)) if found else spans[0][1]  # "at end of document"
        raise ScriptMetadataError(line, f"malformed PEP 723 block (TOML): {reason}") from None
    _check(meta, opening, content)
    after = match.end() + 1 if body[match.end() : match.end() + 1] == "\n" else match.end()
    return body[: match.start()] + body[after:], meta


def requirement_problem(requirement: str) -> str | None:
    """Why `requirement` is not a PEP 508 dependency, or None when it is one."""
    from packaging.requirements import InvalidRequirement, Requirement  # lazy: keeps import time low

    try:
        Requirement(requirement)
    except InvalidRequirement as e:
        return str(e).splitlines()[0]
    return None


def _check(meta: dict[str, Any], opening: int, content: str) -> None:
    def line_of(key: str) -> int:
        for index, text in enumerate(content.split("\n"), start=1):
            if re.match(rf"""\s*\[?\s*["']?{re.escape(key)}\b""", text):
                return opening + index
        return opening

    for key in meta:
        if key not in PEP723_KEYS:
            known = ", ".join(PEP723_KEYS)
            raise ScriptMetadataError(
                line_of(key), f"unknown key {key!r} in the PEP 723 block; known: {known}"
            )
    deps = meta.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(dep, str) for dep in deps):
        raise ScriptMetadataError(
            line_of("dependencies"), f"PEP 723 'dependencies' must be a list of strings, got {deps!r}"
        )
    for dep in deps:
        if problem := requirement_problem(dep):
            raise ScriptMetadataError(line_of("dependencies"), f"bad PEP 723 dependency {dep!r}: {problem}")
    requires = meta.get("requires-python")
    if requires is not None:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet  # lazy, as above

        if not isinstance(requires, str):
            raise ScriptMetadataError(
                line_of("requires-python"), f"PEP 723 'requires-python' must be a string, got {requires!r}"
            )
        try:
            SpecifierSet(requires)
        except InvalidSpecifier:
            raise ScriptMetadataError(
                line_of("requires-python"), f"bad PEP 723 requires-python {requires!r}"
            ) from None
    if not isinstance(meta.get("tool", {}), dict):
        raise ScriptMetadataError(line_of("tool"), "PEP 723 'tool' must be a table ([tool.NAME])")
