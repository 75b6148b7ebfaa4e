"""A program of the lab built with someone's C in place of the lab's own, and run.

The C exercises build a student's function into a scratch copy of csrc/ (the instructor's
csrc/ is never edited), and the battery and the capstone build a student's whole server
the same way: scratch_build makes the copy and runs make in it, build_with puts one
function into a copy, and ScratchServer runs what was built the way procs runs the lab's
servers.  The copies live under SCRATCH, one per text, shared under a lock by parallel
graders.
"""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import tempfile
import shutil
import signal
import warnings
from pathlib import Path

from . import launcher, makefile, paths, procs
from .csource import replace_function
from .errors import BuildError

SCRATCH = paths.WORK / "exercises"  # scratch builds of students' C; csrc/ is never touched


def digest(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def locked(directory: Path):
    """An exclusive lock on `directory` (parallel grading builds the same code at once)."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = open(directory / ".lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def scratch_build(name: str, model: str, files: dict[Path, str], sanitize: bool = False,
                  parts=("obj",)) -> tuple[Path, str | None]:
    """Program `model` built in a scratch copy of csrc/ whose `files` (paths under csrc/ ->
    text) replace the lab's: (its path, None), or (its path, make's output) when it failed.

    The copy is named after what it is built from, and the kind of build (so the same text
    is built once, and parallel graders share it under a lock); only `files` differ in it.
    The lab's built `parts` of that kind come along ("san" for an ASan build, the others for
    a plain one), their times kept, so make compiles only what the files change (csrc/ is
    never touched).  A copied part may hold the lab's own `model` binary, built from other
    text: the copy is taken as built only once make has run in it (its `built` stamp)."""
    unchanged = (p.read_text() for p in sorted(paths.CSRC.rglob("*.[ch]")) if p.relative_to(paths.CSRC) not in files)
    key = digest(model, *(f"{path}\0{text}" for path, text in sorted(files.items())), *unchanged)
    scratch = SCRATCH / (f"{name}-{key}" + ("-san" if sanitize else ""))
    binary = scratch / "build" / ("san/bin" if sanitize else "bin") / model
    built = scratch / "built"
    with locked(scratch):
        if built.is_file() and binary.is_file():
            return binary, None
        built.unlink(missing_ok=True)
        csrc = scratch / "csrc"
        shutil.rmtree(csrc, ignore_errors=True)  # a copy cut short by a kill is never built from
        ours = tuple(part for part in parts if (part == "san") == sanitize and (paths.BUILD / part).is_dir())
        paths.copy_built_tree(paths.CSRC, paths.BUILD, csrc, scratch / "build", parts=ours)
        binary.unlink(missing_ok=True)  # the lab's, if a part held one: never linked from these files
        for path, text in files.items():
            (csrc / path).write_text(text)
        result = makefile.make(["-s", "--no-print-directory", *(["SAN=1"] if sanitize else []), str(binary)],
                            csrc, scratch / "build")
        if result.returncode == 0:
            built.write_text("")
    return binary, (result.stdout if result.returncode != 0 else None)


def build_with(model: str, source: Path, function: str, code: str) -> Path:
    """Server `model` built with the student's `function` in place of the one in
    csrc/`source` (scratch_build); the binary's path.  A compile error raises BuildError
    carrying gcc's own message, naming the student's cell."""
    cell = f"your {function} cell"
    text = replace_function((paths.CSRC / source).read_text(), function, code, cell, paths.CSRC / source)
    binary, failed = scratch_build(function, model, {Path(source): text})
    if failed is not None:
        raise BuildError(f"your {function}() does not compile (gcc's message below)", failed,
                         f"read the first error ({cell}:LINE: error: ...), fix that "
                         "line in the cell, and run the cell and its checks again")
    return binary


class ScratchServer:
    """A server built with a student's function, run the way procs runs the lab's
    servers (own process group, death signal, registered for clean-up)."""

    def __init__(self, binary: Path, label: str, service: str, ready_timeout: float = 5.0, args=(),
                 prefix=(), env: dict | None = None):
        argv = [str(binary), "--port", "0", "--service", service, *args]
        self._stderr = tempfile.TemporaryFile(prefix="labkit-ex-server-")
        child = launcher.spawn(argv, "server", None, prefix=list(prefix), stdout=subprocess.PIPE,
                               stderr=self._stderr, env=env)
        self.server = procs.Server(child, procs.ServerSpec(label, service), 0, argv, self._stderr)
        line = procs.read_ready_line(child.popen, ready_timeout).decode("utf-8", "replace").split()
        if len(line) != 2 or line[0] != "listening" or not line[1].isdigit():
            self.stop()
            raise AssertionError(f"the {label} server did not print `listening <port>` within "
                                 f"{ready_timeout:g} s{self.died()}")
        self.port = int(line[1])
        self.server.port = self.port

    @property
    def pid(self) -> int:
        return self.server._child.popen.pid

    def cpu_s(self) -> float | None:
        """CPU seconds the server has used so far (None once it is gone)."""
        import psutil

        try:
            used = psutil.Process(self.server._child.popen.pid).cpu_times()
        except psutil.Error:
            return None
        return used.user + used.system

    def died(self) -> str:
        """'; the server exited with status N: <its stderr>' once it has ended, else '' (to end a message)."""
        code = self.server.exit_status()
        if code is None:
            return ""
        stderr = self.server.stderr_text().strip()
        return f"; the server {launcher.how_it_ended(code)}" + (f":\n{stderr[-1500:]}" if stderr else "")

    def stdout_after_stop(self) -> str:
        """What it printed on stdout after `listening`, once stopped (its last words)."""
        pipe = self.server._child.popen.stdout
        return pipe.read().decode("utf-8", "replace") if self.server.returncode is not None else ""

    def stop(self) -> None:
        # A broken function may keep the server from stopping on SIGTERM (a dispatch
        # that never reports the stop pipe), so the group is killed after a short
        # wait; that is expected here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self.server.stop(timeout=0.5)

    def kill(self) -> None:
        """SIGKILL now: for a server a check has seen spinning.  Its loop never reads the
        stop pipe, and a stop's patience (while it runs it is "held back": labkit.busy_machine) would
        let it burn a CPU for 5 s more: 10 CPU-s per graded notebook 01, before this."""
        self.server.stop(timeout=0.5, signum=signal.SIGKILL)
