"""csrc/Makefile, driven: the one C build recipe, run by labkit.build (the programs),
labkit.procstat (the parser's flags and source) and labkit.scratch (a student's build).

Only the standard library: `python3 -m labkit build` runs before the lab's venv exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from . import paths
from .errors import BuildError, LabError


def require_tools() -> None:
    missing = [tool for tool in ("make", "gcc") if shutil.which(tool) is None]
    if missing:
        raise LabError(
            f"{' and '.join(missing)} not found: the lab compiles its C servers on this machine",
            "install the compiler tools: sudo apt-get install build-essential",
        )


def make(args: list[str], csrc: Path, build_dir: Path) -> subprocess.CompletedProcess:
    """Run make in `csrc`, stdout and stderr in one stream so messages keep their order."""
    require_tools()
    if not (csrc / "Makefile").is_file():
        raise LabError(f"no Makefile in {csrc}", "run labkit from a complete checkout of the lab (installed "
                       "apart from it, e.g. by pip install ., set LABKIT_ROOT to the lab's folder)")
    return subprocess.run(
        ["make", "-C", str(csrc), f"BUILD={build_dir}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )


def make_print(variable: str) -> str:
    """A variable of csrc/Makefile, as `make print-VARIABLE` prints it for the lab's tree."""
    result = make(["-s", f"print-{variable}"], paths.CSRC, paths.BUILD)
    if result.returncode != 0:
        raise BuildError(f"`make print-{variable}` failed", result.stdout)
    return result.stdout.strip()
