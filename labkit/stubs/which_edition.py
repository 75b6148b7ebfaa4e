"""Which edition this tree is, read from the tree itself: the instructor's checkout, or a
students' edition (labkit release wrote RELEASE.json at its root and, in
tests/edition_left_out.json, what it left out and the sha256 of each C exercise's stub).

  edition()        RELEASE.json of a tree, None in the instructor's checkout;
  still_stubbed()  the C exercises whose function in csrc/ is still the released stub;
  left_out()       the tests an edition leaves out, and why (tests/conftest.py reads it);
  adopt()          a student's C function, its visible check passed, put into csrc/;
  written_in()     a student's C function as their notebook holds it (my_<function> = r"..." ).
The functions of a student's earlier notebooks are adopted at grading, each if its visible check
passes there, by labkit.exercises.c_exercises.adopt_earlier: the checks are the exercises' room.

Making an edition is the instructor's (labkit.instructor.release.edition); reading one is
everyone's, the notebooks' checks first.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

from .. import paths
from ..csource import find_function
from ..errors import LabError
from .catalog import C_EXERCISES, CExercise

RELEASE_JSON = "RELEASE.json"  # at the edition's root: which release it is
LEFT_OUT_JSON = "tests/edition_left_out.json"  # in the edition: the tests it leaves out, and why (tests/conftest.py)


def edition(root: Path | str | None = None) -> dict | None:
    """RELEASE.json of `root` (default: the tree labkit runs from) when it is a students'
    edition; None in the instructor's checkout."""
    try:
        return json.loads((Path(root or paths.ROOT) / RELEASE_JSON).read_text())
    except (OSError, ValueError):
        return None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def function_text(text: str, function: str) -> str:
    lines = text.split("\n")
    found = find_function(lines, function)
    if found is None:
        raise LabError(f"no function {function}() in the C source of exercise {function}",
                       "keep C_EXERCISES in labkit/stubs/catalog.py in step with csrc/")
    return "\n".join(lines[found[0]:found[1] + 1])


def exercise_state(exercise: CExercise, root: Path | str | None = None) -> str:
    """The sha256 of `exercise`'s function as csrc/ holds it now (the edition's stub, or the
    student's own once it is in place): the csrc/ of the tree at `root`, or else the one
    this user's programs are built from (a shared install's user: their own copy)."""
    csrc = Path(root) / "csrc" if root else paths.CSRC
    text = (csrc / exercise.source).read_text()
    return sha256(function_text(text, exercise.function).encode())


def still_stubbed(root: Path | str | None = None) -> list[CExercise]:
    """The C exercises whose function in the edition at `root` (default: this tree) is still
    the released stub (or is gone: nothing that runs it can work either); [] in the
    instructor's checkout.  Each as C_EXERCISES declares it, what needs it included."""
    path = Path(root or paths.ROOT) / LEFT_OUT_JSON
    if not path.is_file():
        return []
    declared = {exercise.label: exercise for exercise in C_EXERCISES}
    stubbed = []
    for entry in json.loads(path.read_text()).get("exercises", []):
        exercise = declared.get(entry["label"]) or CExercise(
            entry["label"], entry["notebook"], entry["function"], entry["source"], entry["uses"], tuple(entry["tests"]))
        try:
            still_stub = exercise_state(exercise, root) == entry["stub_sha256"]
        except (OSError, LabError):
            still_stub = True
        if still_stub:
            stubbed.append(exercise)
    return stubbed


def left_out(root: Path | str | None = None) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """What the edition at `root` (default: this tree) leaves out of its tests: the files
    not in it {path: why}, and [(node id pattern, why)] for the tests that need the notebooks'
    answers and those of every C exercise whose function in csrc/ is still the released stub;
    ({}, []) in the instructor's checkout."""
    path = Path(root or paths.ROOT) / LEFT_OUT_JSON
    if not path.is_file():
        return {}, []
    listed = json.loads(path.read_text())
    waiting = list(listed.get("answers", {}).items())
    for exercise in still_stubbed(root):
        why = (f"needs exercise {exercise.label} ({exercise.function}, notebook {exercise.notebook}): "
               f"csrc/{exercise.source} still has the stub, run by {exercise.uses}")
        waiting += [(pattern, why) for pattern in exercise.tests]
    return dict(listed.get("removed", {})), waiting


def adopt(source: Path, function: str, code: str) -> None:
    """In a students' edition, put the student's `function` (`code`, whose visible check
    just passed) into csrc/`source`, in place of the released stub or an earlier version:
    the servers, the load generator and build.procstat() run it from now on (make and the
    cffi build notice the change).  In the instructor's checkout: nothing (csrc/ is never
    touched there)."""
    if edition() is None:
        return
    path = paths.own_sources() / source  # in a shared install, the user's own copy (made now)
    text = path.read_text()
    new = with_function(text, function, code)
    if new is None or new == text:
        return  # the file no longer has the function (leave it to the student), or has this one
    try:
        path.write_text(new)
    except PermissionError:  # a grader's checks: root put the run's adopted functions in, read-only
        print(f"csrc/{source} is read-only here: your {function}() is not put into it")
        return
    print(f"your {function}() is now in csrc/{source}: the lab's programs run it from now on")


def with_function(text: str, function: str, code: str) -> str | None:
    """The C source `text` with `function`'s definition replaced by `code`; None if `text`
    has no definition of it."""
    lines = text.splitlines(keepends=True)
    found = find_function(lines, function)
    if found is None:
        return None
    start, end = found
    return "".join(lines[:start]) + code.strip("\n") + "\n" + "".join(lines[end + 1:])


def function_in(text: str, function: str) -> str | None:
    """`function`'s definition as the C source `text` has it; None if it has none."""
    lines = text.splitlines(keepends=True)
    found = find_function(lines, function)
    return None if found is None else "".join(lines[found[0]:found[1] + 1])


def written_in(nb, function: str) -> str | None:
    """The C of `function` as the notebook `nb` (an nbformat node) assigns it to
    my_<function>, a string literal in a code cell (the last such cell); None if no cell does."""
    found = None
    for cell in nb.cells:
        if cell.cell_type != "code" or f"my_{function}" not in cell.source:
            continue
        try:
            tree = ast.parse(cell.source)
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == f"my_{function}"
                                                     for t in node.targets)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                found = node.value.value
    return found
