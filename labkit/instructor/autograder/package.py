"""`labkit autograder gradescope --out autograder.zip` and `labkit autograder prairielearn
--out DIR`: the instructor's lab packed for a platform's grader.

Inside, the lab as the instructor's checkout tracks it (solutions and hidden checks too:
the platform's grader needs them; students get the students' edition; PrairieLearn's public
image holds only the edition, below), autograder.json (the notebooks graded, the profile, the time each may take), and
the platform's own entry points:

  Gradescope (zip; specs.md): setup.sh, run once as root when Gradescope builds the image
  (the lab's system packages, its venv, its C build), and run_autograder, run per submission.
  PrairieLearn (folder): a Dockerfile for the grading image (the lab in /lab, built), the
  entrypoint /lab/run-grader, and info-external-grading.json, the externalGradingOptions to
  put in each question's info.json (networking off, the longest timeout PrairieLearn allows).
  Its image is public, so it holds the students' edition and the tools; the instructor's
  side is serverFilesCourse/labkit-grader/, for the course's serverFilesCourse (below).

PrairieLearn's grader, with no answer in its image (PrairieLearn pulls it from a registry):
  * the image's lab is `labkit release`'s edition (every solution its stub, the hidden checks'
    cells dropped, INSTRUCTOR_ONLY left out), built there as students build it, and MANIFEST:
    the digest and mode of every file of the instructor's lab, nothing of their text;
  * serverFilesCourse/labkit-grader/ (COURSE) holds every file of the instructor's lab that the
    edition lacks or holds otherwise: the instructor's notebooks (model answers, hidden
    checks), the C solutions and the reference capstone server, the instructor's tests.
    PrairieLearn copies it into each grading job at /grade/serverFilesCourse/labkit-grader/
    when the question's externalGradingOptions name it ("serverFilesCourse": ["labkit-grader/"]);
  * at grading (assemble), before anything of the student's runs: /grade/serverFilesCourse is
    made root's alone; every file of MANIFEST, from the course's folder or (where the edition
    holds it the same) the image's lab, is checked against its digest, all of them before any
    is written; then the instructor's lab is put together in the image's lab (the course's
    files written, the edition's own files that the instructor's lab lacks removed) and its C
    rebuilt from the instructor's sources (make build), so the grading that follows is the
    Gradescope package's, on the same lab;
  * a course folder missing, a file missing or not the package's, a failed build: nothing is
    graded, and the reason, with what to do, is the result (PrairieLearn's "not gradable":
    no points given or lost, no attempt counted).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import zipfile
from pathlib import Path

from .platforms import CONFIG

PL_TIMEOUT_S = 600  # PrairieLearn's most (docs/externalGrading.md)
GRADESCOPE_TIMEOUT_S = 600  # Gradescope's default autograder timeout (an assignment's settings may raise it)
COURSE = "labkit-grader"  # the folder in the course's serverFilesCourse/
MOUNTED = Path("grade/serverFilesCourse")  # where PrairieLearn copies it, under the container's /
MANIFEST = "instructor-files.json"  # in the image's lab
EDITION_MARKS = (".git", ".labkit-release")  # the release's repository and mark: not the lab's
# PrairieLearn's grader hosts give a grading container 1,024 processes and threads
# (graderDockerPidsLimit in apps/grader-host/src/lib/config.ts, its default); the notebooks whose
# quick profile runs the threaded server, a thread per client, at more clients than that
# (echo_scale's quick profile: 2,000 clients, threaded among its models).
PL_PIDS = 1024
THREADS_AT_QUICK = {"02_multiplexing": 2000, "07_your_server": 2000}

GRADESCOPE_SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image: the lab's system
# packages (scripts/setup-system.sh), its Python environment and its C build (make setup build).
set -euo pipefail
cd /autograder/source/lab
bash scripts/setup-system.sh
make setup build
"""

GRADESCOPE_RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission, as root, in /autograder: labkit grades
# /autograder/submission and writes /autograder/results/results.json.
cd /autograder/source/lab
exec .venv/bin/python -m labkit autograder run gradescope --lab /autograder/source/lab
"""

PL_DOCKERFILE = """# The grading image for PrairieLearn's external grader: the lab in /lab, its system packages,
# Python environment and C build made at image build (the grading job has no network).
#   docker build -t YOUR-REGISTRY/labkit-grader .   then name it as "image" in info.json
# Debian 12, as the lab's Dockerfile.hub (it says why not Ubuntu: its perf is a wrapper that
# refuses any kernel but the image's); the system packages by the lab's own script, as there.
FROM debian:bookworm-slim
ENV LANG=C.UTF-8
COPY lab /lab
WORKDIR /lab
RUN bash scripts/setup-system.sh && rm -rf /var/lib/apt/lists/* \\
 && make setup build && chmod 0755 /lab/run-grader
"""

PL_ENTRYPOINT = """#!/usr/bin/env bash
# PrairieLearn's entrypoint: labkit grades /grade/student, writes /grade/results/results.json.
cd /lab
exec .venv/bin/python -m labkit autograder run prairielearn --lab /lab
"""


def _lab_files(root: Path) -> list[str]:
    from ..release.edition import tracked_files

    return [name for name in tracked_files(root) if (root / name).is_file()]


def _config(notebooks: list[str] | None, timeout_s: float, show_hidden: bool, platform_timeout_s: float) -> dict:
    from ... import paths
    from ..grading.check_cells import check_catalog
    import nbformat

    from ...errors import LabError

    graded = [p.stem for p in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
              if check_catalog(nbformat.read(p, as_version=4))]
    # a notebook named as a file (01_proc_service.ipynb) or a path is the notebook it names
    named = [Path(name).name.removesuffix(".ipynb") for name in notebooks or []]
    unknown = [name for name in named if name not in graded]
    if unknown:
        raise LabError(f"no checks to grade in {', '.join(unknown)}",
                       f"name notebooks with checks: {', '.join(graded)}")
    return {"notebooks": named or graded, "profile": "quick", "timeout_s": timeout_s,
            "platform_timeout_s": platform_timeout_s,
            "instructor_dir": "notebooks", "show_hidden": show_hidden}


def pids_note(notebooks: list[str]) -> str | None:
    """What to raise where a graded notebook's quick profile needs more threads than a
    PrairieLearn grading container may have (THREADS_AT_QUICK); None where all fit."""
    over = [name for name in notebooks if THREADS_AT_QUICK.get(name, 0) > PL_PIDS]
    if not over:
        return None
    return (f"note: {', '.join(over)} run the threaded server at {max(THREADS_AT_QUICK[n] for n in over):,} clients "
            f"(a thread each) in the quick profile, more than the {PL_PIDS:,} processes and threads PrairieLearn's "
            "grader hosts allow a grading (graderDockerPidsLimit): the server cannot start a thread for each "
            "client there.  Raise graderDockerPidsLimit to 4096 on your grader hosts, or grade "
            "these notebooks on Gradescope (no such limit by default); docs/autograders.md")


def gradescope(out: Path, notebooks: list[str] | None = None, timeout_s: float = 300,
               platform_timeout_s: float = GRADESCOPE_TIMEOUT_S) -> Path:
    """autograder.zip for Gradescope at `out`; `platform_timeout_s`: the assignment's autograder
    timeout as set on Gradescope (the grading ends its work before it: run.py)."""
    from ... import paths

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in (("setup.sh", GRADESCOPE_SETUP), ("run_autograder", GRADESCOPE_RUN)):
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | 0o755) << 16
            archive.writestr(info, text)
        for name in _lab_files(paths.ROOT):
            archive.write(paths.ROOT / name, f"lab/{name}")
        config = _config(notebooks, timeout_s, False, platform_timeout_s)
        archive.writestr(f"lab/{CONFIG}", json.dumps(config, indent=1) + "\n")
    return out


def prairielearn(out: Path, notebooks: list[str] | None = None, timeout_s: float = PL_TIMEOUT_S,
                 show_hidden: bool = False) -> Path:
    """The folder for PrairieLearn at `out` (refused if it holds anything)."""
    from ...errors import LabError

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise LabError(f"{out} is not empty", "give a new folder (or remove this one's files first)")
    config = _config(notebooks, min(float(timeout_s), PL_TIMEOUT_S), show_hidden, PL_TIMEOUT_S)
    lab = out / "lab"
    split(lab, out / "serverFilesCourse" / COURSE)  # the image: no answer (above)
    (lab / CONFIG).write_text(json.dumps({**config, "course": COURSE}, indent=1) + "\n")
    (lab / "run-grader").write_text(PL_ENTRYPOINT)
    os.chmod(lab / "run-grader", 0o755)
    (out / "Dockerfile").write_text(PL_DOCKERFILE)
    (out / "info-external-grading.json").write_text(json.dumps({"externalGradingOptions": {
        "enabled": True, "image": "YOUR-REGISTRY/labkit-grader", "entrypoint": "/lab/run-grader",
        "serverFilesCourse": [f"{COURSE}/"], "timeout": PL_TIMEOUT_S, "enableNetworking": False}},
        indent=1) + "\n")
    return out


# PrairieLearn's two parts: split when packed, put back together in its container (above)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _files(top: Path) -> dict[str, Path]:
    """Every file under `top` by its relative name, the release's own marks left out."""
    found = {}
    for path in sorted(top.rglob("*")):
        relative = path.relative_to(top)
        if relative.parts[0] in EDITION_MARKS or path.is_dir():
            continue
        found[relative.as_posix()] = path
    return found


def split(lab: Path, course: Path) -> dict:
    """The instructor's checkout split in two: the students' edition into `lab` (the image's),
    what else the instructor's lab holds into `course`; returns MANIFEST's content (also
    written into `lab`)."""
    from ... import paths
    from ..release import edition as release

    instructor = {name: paths.ROOT / name for name in _lab_files(paths.ROOT)}
    with tempfile.TemporaryDirectory(prefix="labkit-edition-") as made:
        release.release(Path(made) / "edition")
        edition = _files(Path(made) / "edition")
        for name, path in edition.items():
            (lab / name).parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                os.symlink(os.readlink(path), lab / name)
            else:
                shutil.copy2(path, lab / name)
        files = {}
        for name, path in instructor.items():
            data = path.read_bytes()
            files[name] = {"sha256": _digest(data), "executable": bool(path.stat().st_mode & 0o111)}
            if name not in edition or edition[name].read_bytes() != data:
                (course / name).parent.mkdir(parents=True, exist_ok=True)
                (course / name).write_bytes(data)
    manifest = {"course": COURSE, "files": files, "edition_only": sorted(set(edition) - set(instructor))}
    (lab / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _hide(folder: Path) -> str | None:
    """`folder` root's alone (0700), checked; the reason where it cannot be."""
    try:
        os.chown(folder, 0, 0, follow_symlinks=False)
        folder.chmod(0o700)
        if folder.stat().st_mode & 0o077 or folder.stat().st_uid != 0:
            return f"{folder} stays readable by others (mode {oct(folder.stat().st_mode & 0o777)})"
    except OSError as problem:
        return f"{folder} cannot be made root's alone ({problem})"
    return None


def assemble(lab: Path, root: Path) -> str | None:
    """The instructor's lab put together in `lab` (the image's) from the course's folder under
    `root` (the container's /), as the module says; None when done, else why not."""
    fix = (f"the instructor's side of the grader comes from the course: copy the package's "
           f"serverFilesCourse/{COURSE}/ into the course's serverFilesCourse/ and name it in the question's "
           f"externalGradingOptions (\"serverFilesCourse\": [\"{COURSE}/\"]), from the same `labkit autograder "
           f"prairielearn` as this image (docs/autograders.md)")
    manifest = json.loads((lab / MANIFEST).read_text())
    course = root / MOUNTED / manifest["course"]
    if not course.is_dir() or course.is_symlink():
        return f"the grader cannot grade: {course} is missing; {fix}"
    for folder in (root / MOUNTED, course):
        hidden = _hide(folder)
        if hidden:
            return f"the grader cannot grade: {hidden}; it holds the instructor's answers"
    wanted, problems = {}, []
    for name, entry in manifest["files"].items():
        source = course / name if (course / name).is_file() else lab / name
        try:
            data = source.read_bytes()
        except OSError:
            data = None
        if data is None or _digest(data) != entry["sha256"]:
            problems.append(name + (" missing" if data is None else " not the package's"))
        elif source.is_relative_to(course):
            wanted[name] = (data, entry["executable"])
    if problems:
        return (f"the grader cannot grade: the course's {COURSE}/ does not match this image ({len(problems)} "
                f"file(s): {', '.join(problems[:8])}{' ...' if len(problems) > 8 else ''}); {fix}")
    for name, (data, executable) in wanted.items():
        target = lab / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        target.write_bytes(data)
        target.chmod(0o755 if executable else 0o644)
    for name in manifest["edition_only"]:
        (lab / name).unlink(missing_ok=True)
    built = subprocess.run(["make", "build"], cwd=lab, capture_output=True, text=True)
    if built.returncode != 0:
        return f"the grader cannot grade: the instructor's C did not build ({built.stderr.strip()[-1500:]})"
    return None
