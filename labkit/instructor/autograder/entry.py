"""Inside the platform's container, once per submission (`labkit autograder run PLATFORM`):
grade what the student handed in exactly as `labkit grade` grades a class of one, and write
the platform's results.json.

Invariants:
  * the grading is labkit.instructor.course.class_grades's own (the same sandbox, checks, points);
  * only files named as the package's graded notebooks (and csrc/exercises/) are taken from
    the submission, read without following links (basics.submissions), wherever the
    student's upload put them;
  * results.json is written by this process alone, after every graded run has ended, into
    a folder only root may write, by a rename: nothing the student's code did can change it;
  * what the container cannot do (labkit doctor's findings that are not ok) is named at the
    head of the results, and a check it made unmeasurable is 0 of 0, never failed;
  * the capstone's leaderboard (Gradescope's) is measured by the grader (leaderboard.py), never
    read from what the student's run exported;
  * on PrairieLearn the instructor's side of the lab comes from the course and is checked
    before anything is graded (package.assemble); where it cannot be, the result says why.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from . import leaderboard
from ..basics.submissions import CAPSTONE_NOTEBOOK, CAPSTONE_SERVER
from .platforms import (CONFIG, GRADESCOPE, PLATFORMS, PRAIRIELEARN, Platform, gradescope_results, not_gradable,
                        prairielearn_results)

# The platform kills a grading after platform_timeout_s (autograder.json; Gradescope's default
# and PrairieLearn's most are 10 minutes).  The notebooks are graded one after another, each
# notebook's run and its checks' within min(timeout_s, half of the time left), the whole
# within that less RESERVE_S (the grader's start, labkit doctor's probes, writing results)
# and, for the capstone on Gradescope, the leaderboard's LIMIT_S: results are always written
# before the platform's kill, and a notebook whose turn finds under MIN_NOTEBOOK_S left is
# not run, each of its checks saying why.
PLATFORM_TIMEOUT_S = 600.0
RESERVE_S = 60.0
MIN_NOTEBOOK_S = 20.0


def limits_here() -> list[str]:
    """labkit doctor's findings that are not ok, one line each: what this container cannot do."""
    try:
        from ... import doctor

        return [f"{c.name}: {c.detail}" for c in doctor.findings() if c.status != doctor.OK]
    except Exception as problem:  # noqa: BLE001 -- the results are written all the same
        return [f"labkit doctor could not run here ({type(problem).__name__}: {problem})"]


def _found(submitted: Path, relative: Path, folder: bool = False) -> Path | None:
    """The shallowest `relative` (a regular file, or a folder if `folder`) at any depth under
    `submitted`, wherever the student's upload put it; no link followed, none taken."""
    best = None
    for where, dirs, _ in os.walk(submitted, followlinks=False):
        candidate = Path(where, relative)
        parts = [Path(where, *relative.parts[:i + 1]) for i in range(len(relative.parts))]
        if any(part.is_symlink() for part in parts):
            continue
        if candidate.is_dir() if folder else candidate.is_file():
            depth = len(Path(where).relative_to(submitted).parts)
            if best is None or depth < best[0]:
                best = (depth, candidate)
    return best[1] if best else None


def _class_of_one(submitted: Path, notebooks: list[str], into: Path) -> list[str]:
    """Copy what grading reads of the submission (basics.submissions.handed_in) into a class
    of one student, `into`/submission/: the graded notebooks, the earlier notebooks whose C
    exercises a graded one adopts (the capstone's server is built with them), csrc/exercises/
    and the capstone's csrc/servers/mine.c.  Returns the graded notebooks found."""
    from ...stubs.catalog import C_EXERCISES
    from ..basics.submissions import EXERCISES_C

    student = into / "submission"
    student.mkdir(parents=True)
    earlier = sorted({exercise.notebook for exercise in C_EXERCISES} - set(notebooks))
    found = []
    for name in [*notebooks, *earlier]:
        path = _found(submitted, Path(f"{name}.ipynb"))
        if path is not None:
            shutil.copyfile(path, student / path.name, follow_symlinks=False)
            found += [name] if name in notebooks else []
    exercises = _found(submitted, EXERCISES_C, folder=True)
    if exercises is not None:
        shutil.copytree(exercises, student / EXERCISES_C, symlinks=True)
    server = _found(submitted, CAPSTONE_SERVER)
    if server is not None:
        (student / CAPSTONE_SERVER).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(server, student / CAPSTONE_SERVER, follow_symlinks=False)
    return found


def _notes(out: Path, notebook: str) -> list[str]:
    """How the notebook's run ended, as the grading's ledger says it (class_grades.Ledger)."""
    try:
        entries = [json.loads(line) for line in (out / "graded.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []
    return [f"{notebook}: {entry.get('note', '')}" for entry in entries if entry.get("notebook") == notebook][-1:]


def _not_run(instructor: Path, notebook: str, why: str) -> list[dict]:
    """Gradebook rows for a notebook not run: each check of its catalog, 0 points, `why`."""
    import nbformat

    from ..grading.check_cells import check_catalog
    from ..basics.outcomes import TIMEOUT

    catalog = check_catalog(nbformat.read(instructor / f"{notebook}.ipynb", as_version=4))
    return [{"student": "submission", "notebook": notebook, "check": spec.name, "points": 0.0,
             "max_points": float(spec.max_points), "status": TIMEOUT, "hidden": spec.hidden, "message": why}
            for spec in catalog]


def _written_answers(instructor: Path, notebooks: list[str]) -> set[tuple[str, str]]:
    """(notebook, check) of every written answer the instructor's notebooks ask for: marked by
    a person, whatever the student wrote (platforms: no test, answered or not)."""
    import nbformat

    from ..grading.check_cells import check_catalog

    return {(name, spec.name) for name in notebooks
            for spec in check_catalog(nbformat.read(instructor / f"{name}.ipynb", as_version=4)) if spec.by_hand}


def _earlier(student: Path) -> dict[str, str]:
    """The student's functions of the C exercises in the notebooks before the capstone's, as
    grading adopts them into a graded run (grading.grader), for the leaderboard's build."""
    from ..grading.grader import _earlier_functions
    from ..basics.submissions import handed_in

    notebook = student / f"{CAPSTONE_NOTEBOOK}.ipynb"
    return _earlier_functions(handed_in(notebook, CAPSTONE_NOTEBOOK), CAPSTONE_NOTEBOOK)


# What of the package's lab only the grader (root) may read: the instructor's notebooks (model
# answers, hidden checks), the C solutions (the reference capstone server among them), the
# instructor's tests, and build/: the programs, objects and cffi module compiled from those
# solutions, and the stubbed bases grading copies from (lab_copy).  A graded run works in a lab of
# its own, the edition's sources built (sandbox.lab_copy), and the checks' process in a copy only
# its uid's group may read (sandbox.prepare_checkdir); neither reads these in place.  Where the
# container allows no namespaces to hide them (Docker's default capabilities hold no
# CAP_SYS_ADMIN), their mode does.  What stays readable is what the students' edition holds too
# (labkit/, data/, the Makefile) and the Python environment (.venv) every run imports from.
PRIVATE = ("notebooks", "csrc", "tests", "build", CONFIG)


def protect(lab: Path) -> list[Path]:
    """Make PRIVATE's files and folders under `lab` root's alone (0700/0600); those changed."""
    changed = []
    for name in PRIVATE:
        top = lab / name
        if not top.exists() or top.is_symlink():
            continue
        for path in [top, *(top.rglob("*") if top.is_dir() else [])]:
            if path.is_symlink():
                continue
            path.chmod(0o700 if path.is_dir() or path.stat().st_mode & 0o100 else 0o600)
            changed.append(path)
    return changed


def write_results(platform: Platform, root: Path, results: dict) -> Path:
    """results.json in its place under `root`, by a rename from a file beside it; the folder
    made if need be (PrairieLearn does not make it), root's alone."""
    target = root / platform.results
    target.parent.mkdir(parents=True, exist_ok=True)
    target.parent.chmod(0o755)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".results-")
    with os.fdopen(handle, "w") as out:
        json.dump(results, out, indent=1)
    os.chmod(temporary, 0o644)
    os.replace(temporary, target)
    return target


def run(platform_name: str, root: Path | str = "/", lab: Path | str | None = None, private: bool = True) -> dict:
    """Grade the submission under `root` (the container's /; a test gives a folder) for
    `platform_name`, with the package's lab at `lab` (default: this labkit's checkout), its
    PRIVATE parts made root's alone first (`private`); write and return its results."""
    from ... import paths
    from ..course import class_grades

    platform, root = PLATFORMS[platform_name], Path(root)
    lab = Path(lab) if lab else paths.ROOT
    config = json.loads((lab / CONFIG).read_text()) if (lab / CONFIG).is_file() else {}
    if config.get("course"):  # PrairieLearn's public image: the instructor's side from the course
        from .package import assemble

        why = assemble(lab, root)
        if why:
            write_results(platform, root, not_gradable(platform, why))
            return not_gradable(platform, why)
    if private:
        protect(lab)
    instructor = lab / config.get("instructor_dir", "notebooks")
    notebooks = config.get("notebooks") or sorted(p.stem for p in instructor.glob("[0-9][0-9]_*.ipynb"))
    started = time.monotonic()
    submitted = root / platform.submission
    with tempfile.TemporaryDirectory(prefix="labkit-autograder-") as work:
        work = Path(work)
        found = _class_of_one(submitted, notebooks, work / "class") if submitted.is_dir() else []
        if not found:
            wanted = ", ".join(f"{name}.ipynb" for name in notebooks)
            results = not_gradable(platform, f"no notebook to grade was handed in: upload {wanted} "
                                             "(as the students' edition names them)")
            write_results(platform, root, results)
            return results
        server = work / "class" / "submission" / CAPSTONE_SERVER
        ranked = (platform is GRADESCOPE and CAPSTONE_NOTEBOOK in found and config.get("leaderboard", True)
                  and server.is_file())
        budget = (float(config.get("platform_timeout_s", PLATFORM_TIMEOUT_S)) - RESERVE_S
                  - (leaderboard.LIMIT_S if ranked else 0))
        rows, notes = [], []
        for name in found:  # one at a time, each within what is left of the platform's time
            timeout = min(float(config.get("timeout_s", 300)), (budget - (time.monotonic() - started)) / 2)
            if timeout < MIN_NOTEBOOK_S:
                rows += _not_run(instructor, name, f"not run: the grader's time on {platform.name} "
                                 f"({config.get('platform_timeout_s', PLATFORM_TIMEOUT_S):g} s) ran out before "
                                 "this notebook's turn (grade fewer notebooks per assignment, or raise the "
                                 "platform's timeout and autograder.json's platform_timeout_s)")
                continue
            frame, _ = class_grades.grade(work / "class", work / "out", instructor_dir=instructor, notebooks=[name],
                                   profile=config.get("profile", "quick"), timeout_s=timeout, progress=False)
            rows += frame.to_dict("records")
            notes += _notes(work / "out", name)
        written = _written_answers(instructor, found)
        for row in rows:
            row["by_hand"] = (row["notebook"], row["check"]) in written
        target = float(config.get("leaderboard_p99_us", leaderboard.TARGET_P99_US))
        rates = tuple(int(rate) for rate in config.get("leaderboard_rates", leaderboard.RATES))
        measured = leaderboard.run(server.read_text(errors="replace"), target, rates,
                                   _earlier(work / "class" / "submission")) if ranked else None
    limits = limits_here()
    missing = [n for n in notebooks if n not in found]
    preamble = "\n".join([f"graded by labkit: {', '.join(found)}"
                          + (f"; not handed in: {', '.join(missing)}" if missing else ""),
                          *notes,
                          *(["what this grader's container cannot do (checks that need it are not measurable here, "
                             "not failed):", *(f"  {line}" for line in limits)] if limits else [])])
    if measured is not None:
        preamble += "\n" + leaderboard.said(measured)
    seconds = time.monotonic() - started
    results = (prairielearn_results(rows, preamble, bool(config.get("show_hidden")))
               if platform is PRAIRIELEARN else gradescope_results(rows, preamble, seconds))
    if measured is not None and leaderboard.entries(measured):
        results["leaderboard"] = leaderboard.entries(measured)
    write_results(platform, root, results)
    return results
