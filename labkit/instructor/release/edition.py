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

The release is a whole tree, the students' edition: every file git tracks in the
lab's checkout, the notebooks released as above, every C file under csrc/ with
its marked regions replaced by their stubs (four of the C exercises' answers
are the lab's own functions: C_EXERCISES), without the instructor's material
(INSTRUCTOR_ONLY), with the students' README (students_readme) in place of the
instructor's, RELEASE.json naming the release, and a git repository of its own
(one commit per release) to push or serve with nbgitpuller.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ... import paths
from ...errors import LabError
from ...stubs.catalog import C_EXERCISES
from ...stubs.which_edition import LEFT_OUT_JSON, RELEASE_JSON, function_text, sha256
from ..basics.tags import HIDDEN_TAG
from . import readme as students_readme

_HIDDEN_CHECK = re.compile(r"\.check\([^)]*\bhidden\s*=\s*True")  # @ex.check("name", points=1, hidden=True)
DEFAULT_OUT = paths.WORK / "release"
RELEASE_MARK = ".labkit-release"  # a folder holding it may be replaced by the next release

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
            stub = []
            while i < len(lines) and _PY_STUB.match(lines[i]):  # a stub of several lines: one STUB each
                stub, i = [*stub, _PY_STUB.match(lines[i]).group(1)], i + 1
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
            named = f": {exercise}" if exercise else ""
            python = f'raise NotImplementedError("exercise{named}: write your solution here")'
            stub = ["return -1;"] if is_c else [python]
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
        if _HIDDEN_CHECK.search(cell.source):  # untagged, it would go to the students as a visible check
            raise LabError(f"{where} declares a check with hidden=True but is not tagged {HIDDEN_TAG!r}: "
                           "the release would hand it to the students",
                           f"add the tag {HIDDEN_TAG!r} to that cell (JupyterLab: the property inspector's "
                           "cell tags), then release again")
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


# ---------------------------------------------------------------------------
# the students' edition: a whole tree


# The instructor's own material: not in the edition.  Path in the lab -> why.
INSTRUCTOR_ONLY = {
    "tests/instructor/test_release.py": "checks the release against the instructor's solutions and hidden checks",
    "tests/instructor/test_grade.py": "grading: runs the instructor's notebooks and their hidden checks",
    "tests/exercises/test_facts.py": "grades notebook 00's checks, its hidden one among them, on a student's own facts",
    "tests/instructor/test_grade_attacks.py": "grading's sandbox, run on the instructor's notebooks and hidden checks",
    "tests/instructor/test_grade_dask.py": "grading on a cluster, run on the instructor's notebooks and hidden checks",
    "tests/instructor/test_cluster_security.py": "the grading cluster's security, with test_grade_dask's cluster",
    "tests/exercises/test_exercises.py":
        "checks the C exercises' checks with the lab's own answers and with variants of them (the lingering close's "
        "among them)",
    "tests/exercises/test_capstone.py":
        "checks the capstone's battery with the template's reference solution (the answer) and a variant of it with "
        "a classic bug",
    "tests/instructor/test_capstone_grading.py":
        "grades notebook 07 with a variant of the template's reference solution (the answer) with a classic bug",
    "tests/instructor/test_sandbox_memory.py":
        "the grading sandbox's memory limits, run as root grades them (a judge under a grading uid)",
    "tests/capstone_servers.py": "the template's reference solution (the answer) and a variant of it with a "
                                 "classic bug, for the two tests above",
    "tests/instructor/test_lms.py":
        "grades a class collected from LMS downloads: students made of the instructor's notebook with its solutions",
    "tests/instructor/test_autograder.py":
        "packs the instructor's notebooks for Gradescope and PrairieLearn and grades with hidden checks in their "
        "layouts",
    "tests/instructor/test_platforms.py":
        "grades the instructor's notebook 01 with its solutions and hidden checks in the platforms' reproduced "
        "containers",
    "tests/platform_image.py": "the same, in images built from a fresh Debian root (run apart)",
}


# Tests the edition keeps but its `make test` leaves out: they need the notebooks' answers
# (the instructor's notebooks pass every check), which only a student's own notebook holds.
NEEDS_NOTEBOOK_ANSWERS = {
    "tests/notebooks/test_notebooks.py::test_05_*": "needs notebook 05's answers: it asserts the notebook scores 12/12",
    "tests/notebooks/test_notebooks.py::test_07_*":
        "needs a server of the student's own in csrc/servers/mine.c: it asserts that server passes the battery and "
        "is measured beside the lab's",
    "tests/notebooks/test_browser.py::test_a_student_runs_the_notebook_in_a_browser[[]*":
        "needs the notebook's answers: an unsolved check prints a FAIL line too long for the page's checks",
}


def exercise_entries(stubbed_text) -> list[dict]:
    """tests/edition_left_out.json's "exercises": each C exercise as C_EXERCISES declares it,
    with the sha256 of its stub as the edition's csrc/ holds it (`stubbed_text(source)`: that
    file's text), which still_stubbed() compares with."""
    return [{"label": e.label, "notebook": e.notebook, "function": e.function, "source": e.source, "uses": e.uses,
             "tests": list(e.tests), "stub_sha256": sha256(function_text(stubbed_text(e.source), e.function).encode())}
            for e in C_EXERCISES]


def _git(args: list[str], cwd: Path, env: dict | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise LabError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()[-400:]}",
                       "run labkit release from the lab's git checkout, with git installed")
    return done.stdout


def tracked_files(root: Path) -> list[str]:
    """Every file git tracks in the lab's checkout (as the working tree has it)."""
    return [name for name in _git(["ls-files", "-z"], root).split("\0") if name]


def _clear(out: Path) -> None:
    """Empty `out` for a new release: only an earlier release (its mark) is ever wiped;
    its .git stays, so the next release is one more commit on the same history."""
    if not out.exists() or not any(out.iterdir()):
        return
    if not (out / RELEASE_MARK).is_file():  # never wipe a folder we did not write
        raise LabError(f"{out} exists and is not an earlier release",
                       "choose an empty or new folder with --out, or remove that one yourself")
    for entry in out.iterdir():  # a stale file from an older release must not ship
        if entry.name == ".git" and entry.is_dir() and not entry.is_symlink():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _commit(out: Path, info: dict) -> None:
    """The edition as a git repository: one commit per release, on branch main."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="labkit release", GIT_AUTHOR_EMAIL="labkit-release@localhost",
               GIT_COMMITTER_NAME="labkit release", GIT_COMMITTER_EMAIL="labkit-release@localhost")
    if not (out / ".git").is_dir():
        _git(["init", "-q"], out, env)
        _git(["symbolic-ref", "HEAD", "refs/heads/main"], out, env)
    exclude = out / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    if RELEASE_MARK not in (exclude.read_text() if exclude.is_file() else "").split("\n"):
        with open(exclude, "a") as lines:
            lines.write(f"\n{RELEASE_MARK}\n")
    _git(["add", "-A"], out, env)
    _git(["-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty", "-m",
          f"Students' edition, release {info['release']} ({info['date']})\n\n"
          f"Made by labkit release from the lab's commit {info['lab_commit']}"
          f"{' (with uncommitted changes)' if info['lab_tree_dirty'] else ''}."], out, env)


def release(out: Path | str | None = None, notebooks: Path | str | None = None) -> list[Path]:
    """Write the students' edition under `out`: every file git tracks in the lab, the
    notebooks released, C solutions replaced by stubs, without INSTRUCTOR_ONLY, with
    RELEASE.json and tests/edition_left_out.json; a git repository.  The files written."""
    import nbformat

    out = Path(out or DEFAULT_OUT).resolve()
    root = paths.ROOT
    source_dir = Path(notebooks or paths.NOTEBOOKS)
    sources = sorted(source_dir.glob("*.ipynb"))
    if not sources:
        raise LabError(f"no notebooks in {source_dir}", "run labkit release from the lab's checkout")
    if out == root or out in root.parents:
        raise LabError(f"{out} holds the lab itself", "choose a folder outside the lab's checkout with --out")
    # Everything is checked and made before anything is written: a marker error leaves no half release.
    digests = {path.name: sha256(path.read_bytes()) for path in sources}
    info = {"release": sha256("".join(f"{name} {digest}\n" for name, digest in digests.items()).encode())[:12],
            "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
            "lab_commit": _git(["rev-parse", "HEAD"], root).strip(),
            "lab_tree_dirty": bool(_git(["status", "--porcelain", "--untracked-files=no"], root).strip()),
            "notebooks": {f"notebooks/{name}": digest for name, digest in digests.items()}}
    files: dict[str, bytes] = {}
    executable, links = set(), {}
    for name in tracked_files(root):
        path = root / name
        if name in INSTRUCTOR_ONLY or (name.startswith("notebooks/") and name.endswith(".ipynb")):
            continue  # the notebooks are released below, from source_dir
        if path.is_symlink():
            links[name] = os.readlink(path)
            continue
        if not path.is_file():
            continue  # tracked, but deleted in the working tree
        data = path.read_bytes()
        if name.startswith("csrc/") and path.suffix in (".c", ".h"):
            data = strip_solutions(data.decode(), name)[0].encode()
        files[name] = data
        if os.stat(path).st_mode & 0o111:
            executable.add(name)
    for path in sources:
        nb = release_notebook(nbformat.read(path, as_version=4), path.stem)[0]
        nb.metadata.setdefault("labkit", {})["release"] = {"release": info["release"],
                                                           "sha256": digests[path.name]}
        text = nbformat.writes(nb)
        files[f"notebooks/{path.name}"] = (text if text.endswith("\n") else text + "\n").encode()
    exercises = exercise_entries(lambda source: files[f"csrc/{source}"].decode())
    files[LEFT_OUT_JSON] = (json.dumps({"removed": dict(INSTRUCTOR_ONLY), "answers": dict(NEEDS_NOTEBOOK_ANSWERS),
                                        "exercises": exercises}, indent=2) + "\n").encode()
    files[RELEASE_JSON] = (json.dumps(info, indent=2) + "\n").encode()
    files["README.md"] = students_readme.render(files[students_readme.TEMPLATE].decode()).encode()

    _clear(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / RELEASE_MARK).write_text("written by labkit release; the whole folder is replaced by the next one\n")
    written = []
    for name, data in sorted(files.items()):
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if name in executable:
            target.chmod(0o755)
        written.append(target)
    for name, link in sorted(links.items()):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link, out / name)
        written.append(out / name)
    _commit(out, info)
    untracked = [name for name in _git(["ls-files", "--others", "--exclude-standard", "-z"], root).split("\0")
                 if name]
    if untracked:  # a new module the notebooks import would be missing: say so
        print(f"warning: {len(untracked)} file(s) git does not track are not in the edition (git add them to "
              f"ship them): {', '.join(untracked[:10])}{' ...' if len(untracked) > 10 else ''}", file=sys.stderr)
    return written


# ---------------------------------------------------------------------------
# grading: a submission from another release


def other_release(submitted, instructor_bytes: bytes) -> str | None:
    """Why the submitted notebook (an nbformat node) was not made from the release of the
    instructor's notebook (its bytes) that grades it, or None when it was (or says nothing)."""
    made = submitted.get("metadata", {}).get("labkit", {}).get("release")
    if not isinstance(made, dict) or made.get("sha256") == sha256(instructor_bytes):
        return None
    return (f"made from release {str(made.get('release'))[:12]!r}, whose copy of this notebook differs from the "
            "instructor's notebook it is graded with (its checks may differ)")


def warn_other_releases(tasks, instructor_bytes: dict[str, bytes]) -> list[str]:
    """Print a warning (stderr) for each task's submission made from another release;
    the warnings.  Grading goes on: this only says so."""
    from ..basics.submissions import Refused, read_notebook

    warnings = []
    for task in tasks:
        if task.submitted is None:
            continue
        try:
            why = other_release(read_notebook(task.submitted), instructor_bytes[task.notebook])
        except Refused:
            continue  # grading says why it cannot read it
        if why:
            warnings.append(f"warning: {task.student}/{task.notebook}.ipynb was {why}")
            print(warnings[-1], file=sys.stderr)
    return warnings
