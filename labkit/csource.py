"""The lab's C sources as a notebook shows and exercises them.

One function finder serves both: the viewer (show_source: a function as
highlighted code with its file and line numbers, read from csrc/ as it is now)
and the C exercises (replace_function: a student's version in place of the
lab's own, in a scratch copy; csrc/ is never edited).  The lab's style puts a
definition's return type and name at the start of a line and its closing
brace alone in column 0.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from . import paths
from .errors import LabError


def find_function(lines: list[str], name: str) -> tuple[int, int] | None:
    """(first, last) index of the definition of `name` in `lines`, or None: a line at
    column 0 that names `name(` and does not end with ';', to the first line that is
    '}' alone."""
    header = re.compile(rf"^[A-Za-z_][\w \t\*]*\b{re.escape(name)}\s*\(")
    for start, line in enumerate(lines):
        if header.match(line) and not line.rstrip().endswith(";"):
            for end in range(start, len(lines)):
                if lines[end].rstrip() == "}":
                    return start, end
            return None
    return None


def _read(relative_path: str) -> str:
    path = paths.CSRC / relative_path
    if not path.is_file():
        raise LabError(f"{path} does not exist", "restore it from git: git checkout -- csrc/")
    return path.read_text()


def c_function(relative_path: str, name: str) -> tuple[int, int, str]:
    """(first line, last line, text) of the C function `name` in csrc/<relative_path>."""
    lines = _read(relative_path).splitlines()
    found = find_function(lines, name)
    if found is None:
        raise LabError(f"no function {name}() in {paths.CSRC / relative_path}",
                       f"look at the file: less {paths.CSRC / relative_path}")
    start, end = found
    return start + 1, end + 1, "\n".join(lines[start:end + 1])


def replace_function(c_text: str, name: str, new_code: str, label: str, original: Path) -> str:
    """`c_text` with the definition of `name` replaced by `new_code`.

    `#line` makes gcc name the student's cell (`label`) and its own line numbers
    in any message, and the lab's file after it."""
    lines = c_text.splitlines(keepends=True)
    found = find_function(lines, name)
    if found is None:
        raise LabError(f"could not find the definition of {name}() to replace",
                       "check that the lab's C file still defines it (type and name at a line start)")
    if not re.search(rf"\b{re.escape(name)}\s*\(", new_code):
        raise LabError(f"your code does not define {name}()",
                       f"keep the first line of the function, `... {name}(...)`, in the cell")
    start, end = found
    resume = f'#line {end + 2} "{original}"\n'  # messages after the function name the lab's file
    return "".join(lines[:start]) + f'#line 1 "{label}"\n' + new_code.rstrip() + "\n" + resume \
        + "".join(lines[end + 1:])


def show_source(relative_path: str, *functions: str) -> None:
    """Display C functions from csrc/ as highlighted code, with file and line numbers."""
    from IPython.display import Markdown, display

    for name in functions:
        first, last, text = c_function(relative_path, name)
        display(Markdown(f"`csrc/{relative_path}`, lines {first}-{last}:\n```c\n{text}\n```"))


def show_diff(old_path: str, new_path: str, context: int = 2) -> None:
    """Display `diff -u csrc/<old_path> csrc/<new_path>`, read from the files as they are now."""
    from IPython.display import Markdown, display

    texts = [_read(relative).splitlines() for relative in (old_path, new_path)]
    lines = difflib.unified_diff(*texts, f"csrc/{old_path}", f"csrc/{new_path}", n=context, lineterm="")
    display(Markdown("```diff\n" + "\n".join(lines) + "\n```"))


def show_function_diff(old: str, new: str, context: int = 3) -> None:
    """Display the diff of two functions, each named "path:function"
    ("loop/loop.c:serve_client", "servers/busypoll.c:poll_conn"): two models, only the lesson."""
    from IPython.display import Markdown, display

    texts, names = [], []
    for spec in (old, new):
        relative, _, name = spec.partition(":")
        if not name:
            raise LabError(f"{spec!r} names no function", 'name it as "path:function", e.g. "loop/loop.c:serve_client"')
        first, _, text = c_function(relative, name)
        texts.append(text.splitlines())
        names.append(f"csrc/{relative}:{first} {name}()")
    lines = difflib.unified_diff(*texts, *names, n=context, lineterm="")
    display(Markdown("```diff\n" + "\n".join(lines) + "\n```"))


def show_file(relative_path: str) -> None:
    """Display a whole (short) file of csrc/ as highlighted C."""
    from IPython.display import Markdown, display

    display(Markdown(f"`csrc/{relative_path}`:\n```c\n{_read(relative_path)}\n```"))
