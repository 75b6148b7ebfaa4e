"""Build the C programs (make) and the in-process procstat module (cffi).

There is one C build recipe, csrc/Makefile; this module only drives it, so
`make -C csrc` in a terminal and `labkit.build.build()` in a notebook always
produce the same binaries.  The procstat module compiles the servers' own
/proc parser with the same CFLAGS, so a notebook can compare it with psutil.

Only the standard library is imported at module level: `python3 -m labkit
build` must work with the system python3, before the lab's venv exists.
"""

from __future__ import annotations

import hashlib
import json
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sysconfig
from pathlib import Path

from . import paths
from .errors import BuildError, LabError

LOADGEN = "loadgen"
DELAY_LINE = "delayline"  # csrc/link/delayline.c, run by labkit.netlink between two namespaces

# Flags that turn warnings in cffi's generated glue code into errors, or that
# would need a sanitizer runtime inside the Python process.
_CFFI_DROPPED_FLAG_PREFIXES = ("-Werror", "-fsanitize", "-pedantic-errors")

# cdef for cffi: the declarations of csrc/services/procstat.h that Python uses.
_PROCSTAT_CDEF = """
#define PROCSTAT_NAME_MAX ...
struct proc_cpu { int pid; unsigned long long utime, stime; char name[...]; ...; };
int procstat_parse(const char *line, size_t len, struct proc_cpu *out);
int procstat_top(struct proc_cpu *out, int k);
"""


def _require_tools() -> None:
    missing = [tool for tool in ("make", "gcc") if shutil.which(tool) is None]
    if missing:
        raise LabError(
            f"{' and '.join(missing)} not found: the lab compiles its C servers on this machine",
            "install the compiler tools: sudo apt-get install build-essential",
        )


def make(args: list[str], csrc: Path, build_dir: Path) -> subprocess.CompletedProcess:
    """Run make in `csrc`, stdout and stderr in one stream so messages keep their order."""
    _require_tools()
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


# ---------------------------------------------------------------------------
# procstat through cffi


def _make_print(variable: str) -> str:
    result = make(["-s", f"print-{variable}"], paths.CSRC, paths.BUILD)
    if result.returncode != 0:
        raise BuildError(f"`make print-{variable}` failed", result.stdout)
    return result.stdout.strip()


def procstat_flags() -> list[str]:
    """The servers' CFLAGS (from csrc/Makefile), fit for an in-process cffi build."""
    flags = shlex.split(_make_print("CFLAGS"))
    return [f for f in flags if not f.startswith(_CFFI_DROPPED_FLAG_PREFIXES)]


def procstat_source() -> Path:
    """csrc/services/procstat.c, as the Makefile names it."""
    source = Path(_make_print("PROCSTAT_SRC"))
    if not source.is_absolute():
        source = paths.CSRC / source
    if not source.is_file():
        raise LabError(f"procstat source {source} not found", "check `make -C csrc print-PROCSTAT_SRC`")
    return source


_procstat_module = None
MODULE_ALIASES = "aliases.json"  # in the installed build's cffi/: {a source's module name: the module built}


def procstat_module_name(source: bytes, header: bytes, flags: list[str]) -> str:
    """The cffi module's name for these procstat.[ch] contents and flags (a digest of them)."""
    digest = hashlib.sha256()
    for part in (source, header, " ".join(flags).encode(), _PROCSTAT_CDEF.encode()):
        digest.update(part)
    return f"_procstat_{digest.hexdigest()[:16]}"


def _module_aliases() -> dict[str, str]:
    """Which built module a source stands for, where the two differ: only in a graded run,
    whose procstat.c holds the exercise's stub and whose module is the instructor's
    (labkit.instructor.run_lab writes the file)."""
    try:
        return json.loads((paths.INSTALL_BUILD / "cffi" / MODULE_ALIASES).read_text())
    except (OSError, ValueError):
        return {}


def procstat():
    """The cffi module (`.ffi`, `.lib`) compiled from the servers' procstat.c.

    Rebuilt only when procstat.[ch] or the flags change: their hash is part of
    the module name, so an edited parser gets a fresh module even in a running
    kernel (a loaded extension module cannot be reloaded).
    """
    global _procstat_module
    source = procstat_source()
    header = source.with_suffix(".h")
    flags = procstat_flags()
    name = procstat_module_name(source.read_bytes(), header.read_bytes(), flags)
    name = _module_aliases().get(name, name)
    if _procstat_module is not None and _procstat_module.__name__ == name:
        return _procstat_module

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    shared_object = paths.CFFI_DIR / f"{name}{suffix}"
    installed = paths.INSTALL_BUILD / "cffi" / shared_object.name  # the same parser, built by the install
    if not shared_object.is_file() and installed.is_file():
        shared_object = installed
    if not shared_object.is_file():
        compile_procstat(name, source, header, flags, shared_object)
    loader = importlib.machinery.ExtensionFileLoader(name, str(shared_object))
    spec = importlib.util.spec_from_file_location(name, shared_object, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    _procstat_module = module
    return module


def compile_procstat(name: str, source: Path, header: Path, flags: list[str], target: Path) -> None:
    # cffi writes the glue C file; gcc is called here directly (not through
    # setuptools) so a compile error reaches the student as gcc printed it.
    import cffi

    _require_tools()
    ffi = cffi.FFI()
    ffi.cdef(_PROCSTAT_CDEF)
    ffi.set_source(name, f'#include "{header.name}"', compiler_verbose=0)
    target.parent.mkdir(parents=True, exist_ok=True)
    glue = target.parent / f"{name}_cffi.c"
    ffi.emit_c_code(str(glue))
    partial = target.with_name(target.name + ".tmp")
    command = [
        "gcc", *flags, "-fPIC", "-shared",
        f"-I{sysconfig.get_paths()['include']}", f"-I{header.parent}", f"-I{paths.CSRC}",
        str(glue), str(source), "-o", str(partial),
    ]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(
            f"compiling {source.name} for Python (cffi) failed",
            result.stdout,
            f"fix the error in {source} and run the cell again",
        )
    partial.replace(target)  # atomic: another process never imports half a file


def proc_cpu_dict(ffi, entry) -> dict:
    """One `struct proc_cpu` from the C side as a dict (pid, utime, stime, name)."""
    return {
        "pid": entry.pid,
        "utime": entry.utime,
        "stime": entry.stime,
        "name": ffi.string(entry.name).decode("utf-8", "replace"),
    }


def top_processes(k: int = 5) -> list[dict]:
    """The k processes with the most CPU time, as the servers' C code sees them."""
    if k < 1:
        raise LabError(f"k must be at least 1, got {k}", "ask for the top 1 or more processes")
    module = procstat()
    entries = module.ffi.new("struct proc_cpu[]", k)
    found = module.lib.procstat_top(entries, k)
    if found < 0:
        raise LabError("procstat_top could not read /proc", "check that /proc is mounted and readable")
    return [proc_cpu_dict(module.ffi, entries[i]) for i in range(found)]


def parse_stat_line(line: str) -> dict | None:
    """Parse one /proc/PID/stat line with the servers' C parser; None if malformed."""
    module = procstat()
    raw = line.encode("utf-8", "surrogateescape")
    entry = module.ffi.new("struct proc_cpu *")
    if module.lib.procstat_parse(raw, len(raw), entry) != 0:
        return None
    return proc_cpu_dict(module.ffi, entry[0])
