"""`labkit release`: the students' copy of the instructor's notebooks.

The instructor's notebooks (notebooks/*.ipynb) hold the solutions between
marker lines; the release replaces each solution by its stub, drops the cells
tagged "hidden-check", clears outputs, and keeps every cell's id (grading puts
the hidden checks back by the id of the cell they follow).

Markers, each alone on its line (indentation kept):

    # BEGIN SOLUTION                   /* BEGIN SOLUTION */
    # STUB: ratio = None               /* STUB: return -1; */   (optional, right after BEGIN;
    ...solution...                     ...solution...            a C stub may span lines up to */)
    # END SOLUTION                     /* END SOLUTION */

Without a STUB line a Python solution becomes `raise NotImplementedError(...)`
and a C one `return -1;`.  A stub must run and fail its checks: a stub that
raises stops papermill, so notebooks give every Python solution a STUB.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..errors import LabError

HIDDEN_TAG = "hidden-check"
DEFAULT_OUT = paths.BUILD / "release"
RELEASE_MARK = ".labkit-release"  # a folder holding it may be replaced by the next release
EXERCISES_C = paths.CSRC / "exercises"  # C exercise files, released like cells when present

_BEGIN = re.compile(r"^(\s*)(?:#\s*BEGIN SOLUTION\s*|/\*\s*BEGIN SOLUTION\s*\*/\s*)$")
_END = re.compile(r"^\s*(?:#\s*END SOLUTION\s*|/\*\s*END SOLUTION\s*\*/\s*)$")
_PY_STUB = re.compile(r"^\s*#\s*STUB:\s?(.*)$")
_C_STUB = re.compile(r"^\s*/\*\s*STUB:\s?(.*)$")


@dataclass
class Solution:
    """One solution block: where it is, and the text it hides."""

    where: str
    text: str


def _c_stub(lines: list[str], i: int, where: str) -> tuple[list[str], int]:
    """The C stub starting at lines[i] (`/* STUB: ...`, up to `*/`); its lines and the next index."""
    collected, j = [_C_STUB.match(lines[i]).group(1)], i
    while "*/" not in collected[-1]:
        j += 1
        if j >= len(lines) or _END.match(lines[j]):
            raise LabError(f"{where}, line {i + 1}: the /* STUB: ... comment is never closed with */",
                           "end the stub with */ before /* END SOLUTION */")
        collected.append(lines[j])
    collected[-1] = collected[-1][:collected[-1].index("*/")].rstrip()
    return [part for part in collected if part.strip()], j + 1


def strip_solutions(source: str, where: str, exercise: str = "") -> tuple[str, list[Solution]]:
    """`source` with every solution block replaced by its stub, and the blocks removed.

    Raises LabError for a nested BEGIN, an END without BEGIN, or a BEGIN never
    ended, saying where (`where` names the notebook and cell)."""
    lines = source.split("\n")
    out, solutions, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        if _END.match(line):
            raise LabError(f"{where}, line {i + 1}: END SOLUTION without a BEGIN SOLUTION before it",
                           "add the BEGIN SOLUTION line where the solution starts, or remove this END")
        begin = _BEGIN.match(line)
        if not begin:
            out.append(line)
            i += 1
            continue
        indent, is_c, start = begin.group(1), "/*" in line, i
        i += 1
        stub = None
        if i < len(lines) and _PY_STUB.match(lines[i]) and not is_c:
            stub, i = [_PY_STUB.match(lines[i]).group(1)], i + 1
        elif i < len(lines) and _C_STUB.match(lines[i]) and is_c:
            stub, i = _c_stub(lines, i, where)
        body = []
        while i < len(lines) and not _END.match(lines[i]):
            if _BEGIN.match(lines[i]):
                raise LabError(f"{where}, line {i + 1}: BEGIN SOLUTION inside the solution begun on line "
                               f"{start + 1} (solutions cannot nest)",
                               f"close the first one with END SOLUTION before line {i + 1}")
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise LabError(f"{where}, line {start + 1}: BEGIN SOLUTION is never ended",
                           "add an END SOLUTION line (same comment style) after the solution")
        i += 1  # past END
        if stub is None:
            stub = ["return -1;"] if is_c else \
                [f'raise NotImplementedError("exercise{": " + exercise if exercise else ""}: write your solution here")']
        out += [indent + part.strip() if k == 0 or not part.startswith(indent) else part
                for k, part in enumerate(stub)]
        solutions.append(Solution(f"{where}, line {start + 1}", "\n".join(body)))
    return "\n".join(out), solutions


def release_notebook(nb, name: str):
    """The student version of notebook `nb` (an nbformat node, changed in place); its solutions."""
    solutions = []
    kept = []
    for index, cell in enumerate(nb.cells):
        if HIDDEN_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        where = f"{name} cell {index} (id {cell.get('id', '?')})"
        exercise = cell.get("metadata", {}).get("labkit", {}).get("exercise", "")
        cell.source, found = strip_solutions(cell.source, where, exercise)
        solutions += found
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        kept.append(cell)
    nb.cells = kept
    nb.metadata.pop("widgets", None)
    return nb, solutions


def hidden_check_names(nb) -> list[str]:
    """Names of the checks declared in `nb`'s hidden-check cells."""
    names = []
    for cell in nb.cells:
        if HIDDEN_TAG in cell.get("metadata", {}).get("tags", []):
            names += re.findall(r"""\.check\(\s*["']([^"']+)["']""", cell.source)
    return names


def release(out: Path | str | None = None, notebooks: Path | str | None = None) -> list[Path]:
    """Write the students' copy of every notebook (and csrc/exercises/) under `out`; the files written."""
    import nbformat

    out = Path(out or DEFAULT_OUT).resolve()
    source_dir = Path(notebooks or paths.NOTEBOOKS)
    sources = sorted(source_dir.glob("*.ipynb"))
    if not sources:
        raise LabError(f"no notebooks in {source_dir}", "run labkit release from the lab's checkout")
    # Everything is checked before anything is written: a marker error leaves no half release.
    released = []
    for path in sources:
        nb = nbformat.read(path, as_version=4)
        released.append((Path("notebooks") / path.name, release_notebook(nb, path.stem)[0]))
    c_files = []
    if EXERCISES_C.is_dir():
        for path in sorted(p for p in EXERCISES_C.rglob("*") if p.is_file()):
            text, _ = strip_solutions(path.read_text(), str(path.relative_to(paths.ROOT)))
            c_files.append((path.relative_to(paths.ROOT), text))
    if out.exists() and any(out.iterdir()):
        if not (out / RELEASE_MARK).is_file():  # never wipe a folder we did not write
            raise LabError(f"{out} exists and is not an earlier release",
                           "choose an empty or new folder with --out, or remove that one yourself")
        shutil.rmtree(out)  # a stale file from an older release must not ship
    out.mkdir(parents=True, exist_ok=True)
    (out / RELEASE_MARK).write_text("written by labkit release; the whole folder is replaced by the next one\n")
    written = []
    for relative, nb in released:
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    for relative, text in c_files:
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(target)
    return written
