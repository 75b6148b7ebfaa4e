"""Build the C programs: the servers, the load generator, the delay line.

There is one C build recipe, csrc/Makefile (labkit.makefile runs it); this module only
drives it, so `make -C csrc` in a terminal and `labkit.build.build()` in a notebook always
produce the same binaries.  The servers' /proc parser, called from Python, is
labkit.procstat; its names here (build.procstat(), build.top_processes(),
build.parse_stat_line()) are the ones notebooks have always called.

Only the standard library is imported at module level: `python3 -m labkit
build` must work with the system python3, before the lab's venv exists.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from . import paths
from .errors import BuildError, LabError
from .makefile import make
from .procstat import module as procstat, parse_stat_line, top_processes  # noqa: F401 (the names notebooks call)

LOADGEN = "loadgen"
DELAY_LINE = "delayline"  # csrc/link/delayline.c, run by labkit.netlink between two namespaces

# What make last built in this process: (sanitize, csrc, build dir) -> the source tree's
# fingerprint then.  A make with nothing to do still reads the Makefile and every .d file
# (60 ms here), and a point asks for its binaries three times.
_built: dict[tuple, tuple] = {}


def _fingerprint(csrc: Path) -> tuple:
    """Every file and folder under `csrc` with its size and modification time (0.4 ms for
    the lab's 55 files): an edit, a new file or a removed one changes it."""
    seen = []
    for folder, _, files in os.walk(csrc):
        for name in [".", *files]:
            try:
                info = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            seen.append((folder, name, info.st_size, info.st_mtime_ns))
    return tuple(sorted(seen))


def build(sanitize: bool = False, csrc: Path | None = None, build_dir: Path | None = None,
          force: bool = False) -> Path:
    """Compile what changed; return the bin directory.

    make runs unless this process built the same tree into the same place and no file
    under `csrc` changed since (`force` runs it anyway).  Raises BuildError carrying
    make's and gcc's output exactly as printed.  `csrc` and `build_dir` default to the
    lab's tree (tests build copies).
    """
    csrc = Path(csrc or paths.CSRC).resolve()
    build_dir = Path(build_dir or paths.BUILD).resolve()
    bin_dir = build_dir / "san" / "bin" if sanitize else build_dir / "bin"
    key, before = (sanitize, csrc, build_dir), _fingerprint(csrc)
    if not force and _built.get(key) == before and bin_dir.is_dir():
        return bin_dir
    _built.pop(key, None)
    flags = ["SAN=1"] if sanitize else []
    result = make([*flags, "lab"], csrc, build_dir)
    if result.returncode == 0:
        _build_mine(flags, csrc, build_dir, bin_dir, key)
    if result.returncode != 0:
        fix = "read the first error above (file:line: error: ...), fix that line, and build again"
        if not os.access(build_dir if build_dir.exists() else build_dir.parent, os.W_OK):
            fix = (f"{build_dir} is not yours to write and its programs are older than their sources: "
                   f"ask whoever installed the lab in {paths.ROOT} to run `make build` there")
        raise BuildError(
            f"the C build failed ({'sanitizer ' if sanitize else ''}make exited {result.returncode})",
            result.stdout, fix)
    if _fingerprint(csrc) == before:  # nothing changed while make ran
        _built[key] = before
    return bin_dir


# The student's own model (labkit.capstone) is built apart: a server still being written must
# not stop the lab's programs from building.  Its last failure, by build key, is raised when
# it is asked for (binary()); its stale program is removed, so nothing measures an old version.
MINE = "mine"
_mine_failed: dict[tuple, BuildError] = {}


def _build_mine(flags: list[str], csrc: Path, build_dir: Path, bin_dir: Path, key: tuple) -> None:
    _mine_failed.pop(key, None)
    if not (csrc / "servers" / f"{MINE}.c").is_file():
        return
    result = make([*flags, MINE], csrc, build_dir)
    if result.returncode != 0:
        (bin_dir / MINE).unlink(missing_ok=True)
        _mine_failed[key] = BuildError(
            f"your server csrc/servers/{MINE}.c does not compile ({'sanitizer ' if flags else ''}make exited "
            f"{result.returncode}); the lab's own programs are built", result.stdout,
            f"read the first error ({MINE}.c:LINE: error: ...), fix that line, and build again")


def models(csrc: Path | None = None) -> list[str]:
    """Server models: one per csrc/servers/*.c, so a new model file appears by itself."""
    servers = Path(csrc or paths.CSRC) / "servers"
    return sorted(source.stem for source in servers.glob("*.c"))


def binary(name: str, sanitize: bool = False) -> Path:
    """Path of a built program (a server model, loadgen or the delay line), building it if needed."""
    known = models()
    if name not in (LOADGEN, DELAY_LINE) and name not in known:
        raise LabError(
            f"unknown program {name!r}",
            f"choose one of the server models: {', '.join(known) or '(none found in csrc/servers)'}"
            f" (or {LOADGEN!r} for the load generator, {DELAY_LINE!r} for the delay line)",
        )
    # A student who edited a server gets the edit compiled (build() sees the change).
    path = build(sanitize=sanitize) / name
    if not path.is_file() and name == MINE:
        failed = _mine_failed.get((sanitize, paths.CSRC.resolve(), paths.BUILD.resolve()))
        if failed is not None:
            raise failed
    if not path.is_file():  # removed since the last build: make it again
        path = build(sanitize=sanitize, force=True) / name
    if not path.is_file():
        raise LabError(
            f"make succeeded but did not produce {path}",
            f"check that csrc/Makefile builds {name!r}",
        )
    return path


def loadgen_limits() -> dict:
    """The load generator's limits as it declares them (`loadgen --describe`): per flag its
    "min" (or "above", exclusive) and "max", and repetition_bytes_max.  They are written once,
    in csrc/loadgen; labkit checks a value where it is typed against these."""
    global _LIMITS
    if _LIMITS is None:
        import json

        done = subprocess.run([str(binary(LOADGEN)), "--describe"], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise LabError(f"`loadgen --describe` failed (exit {done.returncode}): {done.stderr.strip()[-300:]}",
                           "rebuild the lab: make build")
        _LIMITS = json.loads(done.stdout)
    return _LIMITS


_LIMITS: dict | None = None
