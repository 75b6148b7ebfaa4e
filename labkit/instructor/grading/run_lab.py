"""The lab a graded run works in: a copy of the instructor's, whose C sources are the
students' edition's.

A run's outputs go back to its student (the executed notebook is in the feedback zip,
labkit.instructor.lms.returns), and a notebook can print any file its run can read.  So
the notebook's run gets every C file under csrc/ as `labkit release` writes it: each
solution replaced by its stub (release.strip_solutions), the capstone's reference server
among them.

Its programs stay the instructor's builds.  The run measures them whichever exercises this
student finished, and it grades one notebook: the student's functions from the other
notebooks are not at hand to build them from.  For make to find those programs up to date,
a stubbed file keeps its original's modification time; and since the /proc parser's cffi
module is named after procstat.c's contents, build/cffi/aliases.json names the module the
stubbed file stands for (procstat.module reads it).  What a run can still read of a solution
is its machine code, in those programs.

The checks' process gets the instructor's lab as it is (`stubbed=False`): its hidden checks
compare with the lab's own parser, and of what it reads only the checks' messages (the
instructor's words) reach the student.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ... import paths, procstat
from ..release import edition as release

# What a run needs of the lab: the package, the C sources and a copy of the build (times
# kept, so make only recompiles what changed).
LAB_PARTS = ("labkit", "csrc", "Makefile", "data/seeds")
BUILD_PARTS = ("bin", "obj", "cffi")


def copy(lab: Path, stubbed: bool = True) -> None:
    """Make `lab` a copy of the instructor's lab and build; with `stubbed`, its C sources
    are the edition's (see above)."""
    for part in LAB_PARTS:
        source = paths.ROOT / part
        target = lab / part
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for part in BUILD_PARTS:
        if (paths.BUILD / part).is_dir():
            shutil.copytree(paths.BUILD / part, lab / "build" / part, symlinks=True)
    if stubbed:
        _stub_sources(lab / "csrc")
        _alias_procstat(lab)


def _stub_sources(csrc: Path) -> None:
    for path in sorted(csrc.rglob("*.[ch]")):
        if path.is_symlink() or not path.is_file():
            continue
        text = path.read_text()
        stub, solutions = release.strip_solutions(text, str(path.relative_to(csrc.parent)))
        if solutions:
            times = os.stat(path)
            path.write_text(stub)
            os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))  # the built objects stay up to date


def _alias_procstat(lab: Path) -> None:
    """build/cffi/aliases.json: the stubbed procstat.c's module name -> the instructor's module."""
    source = procstat.procstat_source()
    relative = source.relative_to(paths.CSRC)
    flags = procstat.procstat_flags()
    built = procstat.procstat_module_name(source.read_bytes(), source.with_suffix(".h").read_bytes(), flags)
    copied = lab / "csrc" / relative
    stubbed = procstat.procstat_module_name(copied.read_bytes(), copied.with_suffix(".h").read_bytes(), flags)
    cffi = lab / "build" / "cffi"
    if stubbed != built and cffi.is_dir():
        (cffi / procstat.MODULE_ALIASES).write_text(json.dumps({stubbed: built}) + "\n")
