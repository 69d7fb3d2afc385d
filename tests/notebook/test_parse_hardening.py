"""Bad notebooks and bad -p values that once ran silently wrong, hung or crashed: each is now a
NotebookError naming `path:line` (exit code 2 from the CLI), found before any cell starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import cell, notebook

from attnbench.notebook.document.model import MAX_ID_LENGTH, NotebookError, plain_data_problem
from attnbench.notebook.document.parse import parse_text

FENCE = "```"
PATH = Path("notebooks/t.md")


def error_of(*lines: str) -> NotebookError:
    """The error of parsing the notebook whose line N is argument N (1-based)."""
    with pytest.raises(NotebookError) as caught:
        parse_text("\n".join(lines) + "\n", PATH)
    return caught.value


def parse(*lines: str):
    return parse_text("\n".join(lines) + "\n", PATH)


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(text))


def assert_exit_2_and_nothing_ran(project, out, where: str, phrase: str) -> None:
    assert out.code == 2, out.err
    assert out.err.startswith(f"{where}: "), out.err
    assert phrase in out.err, out.err
    assert "Traceback" not in out.err
    assert not (project.root / "outputs").exists() and not (project.root / "cells").exists()


# --- ids that name one input, or no file ------------------------------------------------------------


@pytest.mark.parametrize("first, second", [("my-data", "my_data"), ("Data", "data"), ("a-b_c", "A_B-C")])
def test_ids_with_one_input_variable_are_refused_naming_both_cells(first, second):
    error = error_of(FENCE + f"python id={first}", "x = 1", FENCE, "", FENCE + f"python id={second}", FENCE)
    assert (error.path, error.line) == (PATH, 5)
    assert f"cell id {second!r} and cell id {first!r} at notebooks/t.md:1" in error.message
    name = first.upper().replace("-", "_")
    assert f"$UVNOTE_INPUT_{name}" in error.message and "rename one" in error.message


def test_colliding_ids_exit_2_before_any_cell_starts(project):
    path = project.write(
        "c.md", notebook(cell("id=my-data", "open('a', 'w')"), cell("id=my_data needs=my-data", "pass"))
    )
    out = project.run(path)
    assert_exit_2_and_nothing_ran(project, out, f"{path}:{line_of(path, '```python id=my_data')}", "my_data")


def test_an_id_too_long_for_a_file_name_is_refused():
    long_id = "x" * 300
    error = error_of("text", "", FENCE + f"python id={long_id}", FENCE)
    assert error.line == 3 and f"is 300 characters; at most {MAX_ID_LENGTH}" in error.message
    assert long_id not in str(error)  # the message stays readable
    assert error_of(FENCE + f"python id=a needs={long_id}", FENCE).line == 1
    assert parse(FENCE + f"python id={'y' * MAX_ID_LENGTH}", FENCE).cells[0].id == "y" * MAX_ID_LENGTH


def test_an_id_too_long_exits_2_and_writes_nothing(project):
    path = project.write("long.md", notebook(cell("id=ok", "pass"), cell("id=" + "z" * 300, "pass")))
    out = project.run(path)
    assert_exit_2_and_nothing_ran(
        project, out, f"{path}:{line_of(path, '```python id=zzz')}", "300 characters"
    )


# --- -p values of another type than the default -------------------------------------------------------

PARAMS = {"seq_lens": [4224, 4352], "scale": 0.5, "batch": 2, "fast": True, "profile": "smoke",
          "window": None, "heads": {"q": 32, "kv": 8}, "mixed": [1, "a"], "empty": []}  # fmt: skip


@pytest.mark.parametrize(
    "key, value, phrase",
    [
        ("seq_lens", 4224, "-p seq_lens=4224 is an int, but the default [4224, 4352] is a list"),
        ("seq_lens", [4224, "x"], 'has a string at [1] ("x"), where the default has an int (4224)'),
        ("batch", 2.5, "-p batch=2.5 is a float, but the default 2 is an int"),
        ("batch", True, "-p batch=true is a bool, but the default 2 is an int"),
        ("fast", 1, "-p fast=1 is an int, but the default true is a bool"),
        ("scale", "big", '-p scale="big" is a string, but the default 0.5 is a float'),
        ("profile", 3, 'is an int, but the default "smoke" is a string; quote it to pass a string'),
        ("profile", None, "-p profile=null is a null"),
        ("heads", {"q": "many"}, 'has a string at q ("many"), where the default has an int (32)'),
        ("heads", [32], "is a list, but the default"),
    ],
)
def test_an_override_of_another_type_names_param_default_and_value(key, value, phrase):
    path = Path("p.md")
    nb = parse_text(
        "---\nparams:\n"
        + "".join(f"  {k}: {v!r}\n" for k, v in PARAMS.items()).replace("None", "null")
        + "---\n",
        path,
    )
    with pytest.raises(NotebookError) as caught:
        nb.resolve_params({key: value})
    assert caught.value.line == 3 + list(PARAMS).index(key)  # the param's own line
    assert caught.value.message.startswith(f"param {key!r}: "), caught.value.message
    assert phrase in caught.value.message, caught.value.message


@pytest.mark.parametrize(
    "key, value",
    [
        ("seq_lens", [1024]),
        ("seq_lens", []),
        ("scale", 1),  # an int where a float is expected
        ("batch", 8),
        ("window", [1, "a"]),  # a null default takes anything
        ("heads", {"q": 16, "extra": "x"}),
        ("mixed", [None, 2.5]),  # the default's items differ: any items
        ("empty", ["a"]),
    ],
)
def test_an_override_of_the_default_type_is_accepted(key, value):
    nb = parse_text("---\nparams:\n" + "".join(f"  {k}: {v!r}\n" for k, v in PARAMS.items()).replace("None", "null") + "---\n", Path("p.md"))  # fmt: skip
    assert nb.resolve_params({key: value})[key] == value


def test_cli_override_of_another_type_exits_2_at_the_param_line(project):
    path = project.write("p.md", notebook(cell("id=a", "print(seq_lens)"), params={"seq_lens": [4224, 4352]}))
    out = project.run(path, "-p", "seq_lens=4224")
    where = f"{path}:{line_of(path, '  seq_lens:')}"
    assert_exit_2_and_nothing_ran(project, out, where, "param 'seq_lens': -p seq_lens=4224 is an int")


# --- YAML aliases: no hang, no RecursionError -----------------------------------------------------------


def _alias_bomb(levels: int) -> list[str]:
    lines = ["  l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"  l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, levels)]
    return ["---", "params:", *lines, "---"]


@pytest.mark.timeout(20)
def test_an_alias_bomb_in_a_param_default_is_refused_at_once():
    # 9**10 items once expanded: the old check walked all of them (hours); this one stops at the alias.
    error = error_of(*_alias_bomb(10))
    assert error.line == 4  # l1, the first param that repeats a list
    assert "param 'l1': default must be plain data" in error.message
    assert "the list at [1] appears more than once (a YAML alias *name" in error.message


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "yaml_value", ["&a [*a]", "&a {x: *a}", "&a [1, [2, *a]]"], ids=["list", "mapping", "nested"]
)
def test_a_recursive_alias_is_a_clear_error(yaml_value):
    error = error_of("---", "params:", "  ok: 1", f"  loop: {yaml_value}", "---")
    assert error.line == 4 and "appears more than once" in error.message


def test_plain_data_check_is_linear_and_refuses_shared_values():
    shared = [1]
    assert "appears more than once" in plain_data_problem({"a": shared, "b": shared})
    deep: list = []
    for _ in range(100_000):  # nesting far beyond Python's recursion limit
        deep = [deep]
    assert plain_data_problem(deep) is None
    assert plain_data_problem({"a": [1, {"b": float("nan")}]}) == "nan at a[1].b is not a finite number"


@pytest.mark.timeout(20)
def test_an_alias_bomb_given_with_p_is_refused(project):
    path = project.write("b.md", notebook(cell("id=a", "pass"), params={"x": None}))
    out = project.run(path, "-p", "x=[&a [1, 1, 1, 1, 1, 1, 1, 1], &b [*a, *a, *a, *a], [*b, *b, *b]]")
    assert_exit_2_and_nothing_ran(project, out, f"{path}:{line_of(path, '  x:')}", "appears more than once")


# --- every cell compiles before any runs --------------------------------------------------------------


def test_a_syntax_error_names_the_notebook_line():
    error = error_of(
        "# T",
        "",
        FENCE + "python id=a",
        "# /// script",
        '# dependencies = ["numpy"]',
        "# ///",
        "x = 1",
        "def f(:",
        FENCE,
    )
    assert (error.line, error.path) == (8, PATH)  # the bad line itself, PEP 723 block counted
    assert error.message.startswith("syntax error in cell 'a': invalid syntax (checked with Python 3.")


@pytest.mark.parametrize(
    "body, line",
    [(["print('x'"], 2), (["if True:", "pass"], 3), (["x = 1", "return x"], 3), (["yield = 3"], 2)],
    ids=["unclosed", "indentation", "return outside function", "keyword"],
)
def test_syntax_errors_found_by_the_compiler(body, line):
    assert error_of(FENCE + "python id=c", *body, FENCE).line == line


def test_a_cell_asking_for_another_python_is_not_compiled_here():
    old = parse(
        FENCE + "python id=old", "# /// script", '# requires-python = "<3"', "# ///", 'print "hi"', FENCE
    )
    assert old.cell("old").source == 'print "hi"\n'  # Python 2: this Python cannot judge it
    new = ["# /// script", '# requires-python = ">=3.12"', "# ///", "type Point = tuple[float, float]"]
    assert parse(FENCE + "python id=new", *new, FENCE).cell("new")  # compiled only on 3.12 and later


def test_a_syntax_error_in_a_later_cell_stops_the_run_before_the_first(project):
    path = project.write(
        "s.md",
        notebook(cell("id=first", "open('/dev/null', 'w')"), cell("id=broken", "x = 1\nprint(x))")),
    )
    out = project.run(path)
    assert_exit_2_and_nothing_ran(
        project, out, f"{path}:{line_of(path, '```python id=broken') + 2}", "syntax error in cell 'broken'"
    )


# --- empty notebooks, notebooks without cells, Python spelled otherwise --------------------------------


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("", "empty notebook: no text and no ```python cell"),
        ("\n\n  \n", "empty notebook"),
        ("#!/usr/bin/env -S uv run attnbench run\n---\ntitle: x\n---\n\n", "after its front matter"),
    ],
    ids=["empty file", "blank lines", "front matter only"],
)
def test_an_empty_notebook_exits_2_with_its_path(project, text, phrase):
    path = project.write("empty.md", text)
    out = project.run(path)
    assert_exit_2_and_nothing_ran(project, out, str(path), phrase)
    assert project.status(path).code == 2


def test_a_notebook_without_cells_says_so_and_runs_nothing(project):
    # uvnote's rule ("No Python code cells found", exit 0): a prose-only document is valid, not a run.
    path = project.write("prose.md", "# Notes\n\n```bash\nmake all\n```\n")
    out = project.run(path)
    assert out.code == 0 and f"{path}: no ```python cells: nothing to run" in out.err
    assert "0 cells" not in out.out + out.err and "python None" not in out.out + out.err
    assert not (project.root / "outputs").exists()
    other = project.write("other.md", notebook(cell("id=a", "print('ran')")))
    both = project.run(path, other)
    assert both.code == 0 and project.stdout("other", "a") == "ran\n"


@pytest.mark.parametrize("language", ["Python", "PYTHON", "py", "python3", "Py3", "{python}"])
def test_a_python_fence_spelled_otherwise_is_refused(language):
    error = error_of("text", "", FENCE + language + " id=a", "print(1)", FENCE)
    assert error.line == 3
    assert error.message.startswith(f"```{language} is not run: a cell is written ```python")


def test_other_languages_and_an_empty_python_fence_are_shown_only():
    notebook_ = parse(
        FENCE + "pycon", ">>> 1", FENCE, "", FENCE + "python", FENCE, FENCE + "pythonic", "x", FENCE
    )
    assert notebook_.cells == []
    assert [(b.kind, b.language) for b in notebook_.blocks] == [
        ("code", "pycon"),
        ("code", "python"),  # uvnote makes no cell of an empty fence either
        ("code", "pythonic"),
    ]


def test_a_long_value_is_clipped_alike_in_every_message(tmp_path):
    """Front matter, -p values and stored records name a bad value cut to 60 characters, '…' marking
    the cut, so a megabyte value never floods the terminal."""
    from attnbench.notebook.run import store
    from attnbench.notebook.run.records import RecordError

    long = "x" * 500
    theme = error_of("---", f"theme: {long}", "---").message
    assert theme.endswith(f"got str ('{'x' * 58}…)")
    typed = parse("---", "params:", "  size: 2", "---").resolve_params
    with pytest.raises(NotebookError) as wrong_type:
        typed({"size": long})
    assert f'-p size="{"x" * 58}… is a string' in wrong_type.value.message
    (tmp_path / "result.json").write_text(f'{{"cell": "a", "status": "{long}"}}')
    with pytest.raises(RecordError) as record:
        store.load_result(tmp_path)
    assert f"status is '{'x' * 58}…: expected one of" in str(record.value)
