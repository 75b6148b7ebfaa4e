"""The servers' /proc parser, called from Python: csrc/services/procstat.c compiled with cffi
into an in-process module, with the servers' own CFLAGS (from csrc/Makefile), so a notebook
can hold it beside psutil and an exercise can test a student's version of it.

The boundary is declared once, here: _PROCSTAT_CDEF is what Python may call of procstat.h.
labkit.build keeps the names notebooks have always called (build.procstat(),
build.top_processes(), build.parse_stat_line()).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sysconfig
import tempfile
from pathlib import Path

from . import makefile, paths
from .errors import BuildError, LabError

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


def procstat_flags() -> list[str]:
    """The servers' CFLAGS (from csrc/Makefile), fit for an in-process cffi build."""
    flags = shlex.split(makefile.make_print("CFLAGS"))
    return [f for f in flags if not f.startswith(_CFFI_DROPPED_FLAG_PREFIXES)]


def procstat_source() -> Path:
    """csrc/services/procstat.c, as the Makefile names it."""
    source = Path(makefile.make_print("PROCSTAT_SRC"))
    if not source.is_absolute():
        source = paths.CSRC / source
    if not source.is_file():
        raise LabError(f"procstat source {source} not found", "check `make -C csrc print-PROCSTAT_SRC`")
    return source


_module = None


def procstat_module_name(source: bytes, header: bytes, flags: list[str]) -> str:
    """The cffi module's name for these procstat.[ch] contents and flags (a digest of them)."""
    digest = hashlib.sha256()
    for part in (source, header, " ".join(flags).encode(), _PROCSTAT_CDEF.encode()):
        digest.update(part)
    return f"_procstat_{digest.hexdigest()[:16]}"


def module():
    """The cffi module (`.ffi`, `.lib`) compiled from the servers' procstat.c.

    Rebuilt only when procstat.[ch] or the flags change: their hash is part of
    the module name, so an edited parser gets a fresh module even in a running
    kernel (a loaded extension module cannot be reloaded).
    """
    global _module
    source = procstat_source()
    header = source.with_suffix(".h")
    flags = procstat_flags()
    name, shared_object = module_file(source, flags, paths.CFFI_DIR)
    if _module is not None and _module.__name__ == name:
        return _module

    installed = paths.INSTALL_BUILD / "cffi" / shared_object.name  # the same parser, built by the install
    if not shared_object.is_file() and installed.is_file():
        shared_object = installed
    if not shared_object.is_file():
        compile_procstat(name, source, header, flags, shared_object)
    loader = importlib.machinery.ExtensionFileLoader(name, str(shared_object))
    spec = importlib.util.spec_from_file_location(name, shared_object, loader=loader)
    loaded = importlib.util.module_from_spec(spec)
    loader.exec_module(loaded)
    _module = loaded
    return loaded


def module_file(source: Path, flags: list[str], folder: Path) -> tuple[str, Path]:
    """The cffi module's name for procstat.c `source` (and its .h) built with `flags`, and its
    file in `folder`."""
    name = procstat_module_name(source.read_bytes(), source.with_suffix(".h").read_bytes(), flags)
    return name, folder / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"


def compile_procstat(name: str, source: Path, header: Path, flags: list[str], target: Path,
                     csrc: Path | None = None) -> None:
    # cffi writes the glue C file; gcc is called here directly (not through
    # setuptools) so a compile error reaches the student as gcc printed it.
    import cffi

    makefile.require_tools()
    ffi = cffi.FFI()
    ffi.cdef(_PROCSTAT_CDEF)
    ffi.set_source(name, f'#include "{header.name}"', compiler_verbose=0)
    target.parent.mkdir(parents=True, exist_ok=True)
    # The glue and the object under names of this compile's own: two processes that find the
    # module missing at once (two graders started together) each build theirs, and the
    # second rename replaces the first's identical file.  With shared names, one's rename
    # would take the other's file away mid-build (a FileNotFoundError).
    handle, glue = tempfile.mkstemp(dir=target.parent, prefix=f"{name}_cffi_", suffix=".c")
    os.close(handle)
    handle, partial = tempfile.mkstemp(dir=target.parent, prefix=f"{target.name}.", suffix=".tmp")
    os.close(handle)
    glue, partial = Path(glue), Path(partial)
    try:
        ffi.emit_c_code(str(glue))
        command = [
            "gcc", *flags, "-fPIC", "-shared",
            f"-I{sysconfig.get_paths()['include']}", f"-I{header.parent}", f"-I{csrc or paths.CSRC}",
            str(glue), str(source), "-o", str(partial),
        ]
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
        if result.returncode != 0:
            raise BuildError(
                f"compiling {source.name} for Python (cffi) failed",
                result.stdout,
                f"fix the error in {source} and run the cell again",
            )
        partial.chmod(0o755)  # as gcc makes a shared object (mkstemp's file is 0600)
        partial.replace(target)  # atomic: another process never imports half a file
    finally:
        glue.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)


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
    built = module()
    entries = built.ffi.new("struct proc_cpu[]", k)
    found = built.lib.procstat_top(entries, k)
    if found < 0:
        raise LabError("procstat_top could not read /proc", "check that /proc is mounted and readable")
    return [proc_cpu_dict(built.ffi, entries[i]) for i in range(found)]


def parse_stat_line(line: str) -> dict | None:
    """Parse one /proc/PID/stat line with the servers' C parser; None if malformed."""
    built = module()
    raw = line.encode("utf-8", "surrogateescape")
    entry = built.ffi.new("struct proc_cpu *")
    if built.lib.procstat_parse(raw, len(raw), entry) != 0:
        return None
    return proc_cpu_dict(built.ffi, entry[0])
