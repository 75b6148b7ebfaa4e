"""`labkit autograder gradescope --out autograder.zip` and `labkit autograder prairielearn
--out DIR`: the instructor's lab packed for a platform's grader.

Inside, the lab as the instructor's checkout tracks it (solutions and hidden checks too:
the platform's grader needs them, and only it reads the package; students get the students'
edition), autograder.json (the notebooks graded, the profile, the time each may take), and
the platform's own entry points:

  Gradescope (zip; specs.md): setup.sh, run once as root when Gradescope builds the image
  (the lab's system packages, its venv, its C build), and run_autograder, run per submission.
  PrairieLearn (folder): a Dockerfile for the grading image (the lab in /lab, built), the
  entrypoint /lab/run-grader, and info-external-grading.json, the externalGradingOptions to
  put in each question's info.json (networking off, the longest timeout PrairieLearn allows).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import zipfile
from pathlib import Path

from .run import CONFIG

PL_TIMEOUT_S = 600  # PrairieLearn's most (docs/externalGrading.md)
GRADESCOPE_TIMEOUT_S = 600  # Gradescope's default autograder timeout (an assignment's settings may raise it)

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
    from ..release.edition import _tracked

    return [name for name in _tracked(root) if (root / name).is_file()]


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
    from ... import paths
    from ...errors import LabError

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise LabError(f"{out} is not empty", "give a new folder (or remove this one's files first)")
    lab = out / "lab"
    for name in _lab_files(paths.ROOT):
        (lab / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paths.ROOT / name, lab / name)
    per_notebook = min(float(timeout_s), PL_TIMEOUT_S)
    (lab / CONFIG).write_text(json.dumps(_config(notebooks, per_notebook, show_hidden, PL_TIMEOUT_S), indent=1) + "\n")
    (lab / "run-grader").write_text(PL_ENTRYPOINT)
    os.chmod(lab / "run-grader", 0o755)
    (out / "Dockerfile").write_text(PL_DOCKERFILE)
    (out / "info-external-grading.json").write_text(json.dumps({"externalGradingOptions": {
        "enabled": True, "image": "YOUR-REGISTRY/labkit-grader", "entrypoint": "/lab/run-grader",
        "timeout": PL_TIMEOUT_S, "enableNetworking": False}}, indent=1) + "\n")
    return out
