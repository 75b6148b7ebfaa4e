"""The lab a graded run works in: a copy of the instructor's labkit with the students'
edition's C sources, and programs built from those sources, never the instructor's.

A run's outputs go back to its student (the executed notebook is in the feedback zip,
labkit.instructor.lms.returns), and a notebook can print any file its run can read,
machine code included (`objdump -d` prints a program's instructions).  So nothing a run
can read holds a solution in any form:

  * its csrc/ is the edition's: each solution replaced by its stub (release.strip_solutions),
    the capstone's reference server among them;
  * its programs (build/bin, build/obj) and the /proc parser's cffi module are built from
    those stubbed sources.  That build is the same for every run of a grading, so it is made
    once (`base`, a few seconds), kept under the grader's build/graded/ by the digest of
    the sources it was built from, and each run gets a copy (make's dependency files pointed
    at the copy, so make finds it up to date);
  * the lab is marked as an edition (RELEASE.json, tests/edition_left_out.json), so that in
    the run, as on the student's own machine, a C exercise whose visible check passes puts the
    student's function into the run's csrc/ (labkit.stubs.which_edition.adopt), and the programs
    are rebuilt from it when next used: in the run, by the run's uid, never by root (a student's
    C can `#include` any file the compiler can read, and the compiler's messages quote it).
    The exercises of the student's earlier notebooks are adopted the same way before the
    notebook starts (labkit.instructor.sandbox.inside, `adopt_earlier`), each only if its
    visible check passes there.

Students with the same functions share nothing but the stubbed base: a build of a student's
C happens inside that student's run, so no run can plant a program another run will use.

The checks' process (labkit.instructor.grading.judge) gets the same stubbed lab: the student's
C runs in it too, as the checks build it, and whatever that C reads can reach the student (a
check's message quotes what the program printed).  Into its csrc/, read-only to it, root puts
the functions the run adopted (`adopted`: each C exercise's function as the run's csrc/ had it
when the notebook ended, the student's own or the stub), so the checks run the lab the run ran.
The instructor's sources and build are never copied into a graded run's or a check's lab
(`stubbed=False` is for the instructor's own tools).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

from ... import makefile, paths, procstat
from ...errors import LabError
from ...stubs import which_edition as editions
from ..release import edition as release

# What a run needs of the lab besides the C: the package, the seeds' tables.
LAB_PARTS = ("labkit", "data/seeds")
BUILD_PARTS = ("bin", "obj", "cffi")  # of the instructor's build: the checks' process only
GRADED = "graded"  # under the grader's build/ (paths.WORK): the stubbed bases, by digest
RUN_RELEASE = {"release": "graded-run", "note": "a graded run's lab: the edition's C, built from it"}


def copy(lab: Path, stubbed: bool = True) -> None:
    """Make `lab` a copy of the instructor's lab; with `stubbed` (a student's run), its C
    sources and programs are the edition's (see above), else the instructor's own."""
    for part in (*LAB_PARTS, "Makefile"):
        _copy_part(paths.ROOT / part, lab / part)
    if stubbed:
        built = base()
        paths.copy_built_tree(built / "csrc", built / "build", lab / "csrc", lab / "build", parts=("obj", "bin"))
        shutil.copytree(built / "build" / "cffi", lab / "build" / "cffi")
        for name in (editions.RELEASE_JSON, editions.LEFT_OUT_JSON):
            (lab / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(built / name, lab / name)
        return
    _copy_part(paths.ROOT / "csrc", lab / "csrc")
    for part in BUILD_PARTS:
        if (paths.BUILD / part).is_dir():
            shutil.copytree(paths.BUILD / part, lab / "build" / part, symlinks=True)


def adopted(run_lab: Path) -> dict[str, bytes]:
    """The run's adopted functions, as the files of the stubbed base with each one in place of
    its stub (csrc/... -> contents), for the checks' lab.  Read from the run's csrc/, which
    the run's uid could change: only each exercise's function is taken from it (a file that
    is a link, too large, or lost the function gives nothing), the rest of each file is the
    base's."""
    from ..basics.submissions import Refused, read_regular
    from ...stubs.catalog import C_EXERCISES

    built, files = base(), {}
    for exercise in C_EXERCISES:
        relative = f"csrc/{exercise.source}"
        try:
            theirs = read_regular(run_lab / relative, limit=1 << 20, what=relative).decode("utf-8", "surrogateescape")
        except Refused:
            continue
        code = editions.function_in(theirs, exercise.function)
        text = files.get(relative, (built / relative).read_bytes()).decode("utf-8", "surrogateescape")
        new = editions.with_function(text, exercise.function, code) if code else None
        if new is not None and new != text:
            files[relative] = new.encode("utf-8", "surrogateescape")
    return files


def _copy_part(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    elif source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def stubbed_sources() -> dict[str, str]:
    """Every C file of the instructor's csrc/ as the edition has it, by path under csrc/."""
    found = {}
    for path in sorted(paths.ROOT.joinpath("csrc").rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        relative = str(path.relative_to(paths.ROOT / "csrc"))
        text = path.read_text(errors="surrogateescape")
        found[relative] = release.strip_solutions(text, f"csrc/{relative}")[0] if path.suffix in (".c", ".h") \
            else text
    return found


def base() -> Path:
    """The stubbed lab every run of a grading copies: csrc/ as the edition has it, built
    (build/bin, build/obj, build/cffi), and marked as an edition.  Made once per set of
    sources and kept (build/graded/<digest>); a grading beside this one waits for it."""
    sources = stubbed_sources()
    digest = hashlib.sha256()
    for name, text in sources.items():
        digest.update(f"{name}\0{text}\0".encode(errors="surrogateescape"))
    digest.update((paths.ROOT / "Makefile").read_bytes())
    folder = paths.WORK / GRADED / digest.hexdigest()[:16]  # the grader's own build folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "built").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            _make_base(folder, sources)
            (folder / "built").write_text("")
    return folder


def _make_base(folder: Path, sources: dict[str, str]) -> None:
    csrc, build = folder / "csrc", folder / "build"
    for name, text in sources.items():
        target = csrc / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, errors="surrogateescape")
        original = paths.ROOT / "csrc" / name
        if os.access(original, os.X_OK):
            target.chmod(0o755)
    made = makefile.make(["--no-print-directory", "all"], csrc, build)
    if made.returncode != 0:
        raise LabError(f"the edition's C sources did not build for grading:\n{made.stdout[-3000:]}",
                       "make the students' edition build (labkit release; make build in it), then grade again")
    source = csrc / "services" / "procstat.c"
    flags = procstat.procstat_flags()
    name, target = procstat.module_file(source, flags, build / "cffi")
    procstat.compile_procstat(name, source, source.with_suffix(".h"), flags, target, csrc=csrc)
    exercises = release.exercise_entries(sources.__getitem__)
    (folder / editions.LEFT_OUT_JSON).parent.mkdir(parents=True, exist_ok=True)
    (folder / editions.LEFT_OUT_JSON).write_text(json.dumps({"exercises": exercises}, indent=2) + "\n")
    (folder / editions.RELEASE_JSON).write_text(json.dumps(RUN_RELEASE, indent=2) + "\n")
