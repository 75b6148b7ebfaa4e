"""Graded exercises: checks a student runs in the notebook, and the C exercises.

A notebook makes one Checker and declares its checks with a decorator; the
check runs at once, prints PASS or FAIL with a helpful message, and, when the
environment variable LABKIT_CHECKS_FILE names a file (grading), appends one
JSON line per check to it:

    ex = Checker(notebook="01_proc_service")

    @ex.check("ratio_iterative", points=2)
    def _():
        assert abs(ratio - expected) < 0.01, "recompute the ratio from df"

A check never raises out of its cell: AssertionError -> "failed" (its text is
the message), any other exception -> "error", so one broken exercise does not
hide the others' results.

The C exercises compile a function the student wrote in a notebook cell in
place of the lab's own (never editing csrc/): procstat_parse through cffi, in
this process; ev_poll of the poll backend into a scratch build of the poll
server, which is then run against the echo protocol.
"""

from __future__ import annotations

import fcntl
import hashlib
import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import build, paths
from .errors import BuildError, LabError

CHECKS_FILE_ENV = "LABKIT_CHECKS_FILE"
PASSED, FAILED, ERROR = "passed", "failed", "error"
SCRATCH = paths.BUILD / "exercises"  # scratch builds of students' C; csrc/ is never touched


# ---------------------------------------------------------------------------
# checks


@dataclass
class CheckResult:
    notebook: str
    check: str
    points: float
    max_points: float
    status: str
    message: str
    hidden: bool
    extra: dict = field(default_factory=dict)

    def record(self) -> dict:
        return {"notebook": self.notebook, "check": self.check, "points": self.points,
                "max_points": self.max_points, "status": self.status, "message": self.message,
                "hidden": self.hidden, **self.extra}

    def line(self) -> str:
        mark = "PASS" if self.status == PASSED else "FAIL" if self.status == FAILED else "ERROR"
        kind = " (hidden)" if self.hidden else ""
        text = f"{mark} {self.check}{kind}: {self.points:g}/{self.max_points:g}"
        return text + (f" -- {self.message}" if self.message else "")

    # Jupyter shows the HTML; papermill's output and a terminal keep the text.
    def __repr__(self) -> str:
        return self.line()

    def _repr_html_(self) -> str:
        colour = {PASSED: "#1a7f37", FAILED: "#b35900"}.get(self.status, "#cf222e")
        mark = {PASSED: "✔ PASS", FAILED: "✘ FAIL"}.get(self.status, "⚠ ERROR")
        message = f"<pre style='margin:0.3em 0 0 1.5em;white-space:pre-wrap'>{html.escape(self.message)}</pre>" \
            if self.message else ""
        return (f"<div style='border-left:4px solid {colour};padding:0.2em 0.6em'>"
                f"<b style='color:{colour}'>{mark}</b> <code>{html.escape(self.check)}</code>"
                f"{' (hidden)' if self.hidden else ''}: {self.points:g}/{self.max_points:g} points{message}</div>")


def _show(result: CheckResult) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(result)
    else:
        print(result.line(), flush=True)


def _append_record(record: dict) -> None:
    target = os.environ.get(CHECKS_FILE_ENV)
    if not target:
        return
    # One write() per line in append mode: parallel writers never interleave a line.
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
        out.flush()
        os.fsync(out.fileno())


class Checker:
    """The checks of one notebook, and the points they gave."""

    def __init__(self, notebook: str):
        if not notebook or not isinstance(notebook, str):
            raise LabError("Checker needs the notebook's name", 'write Checker(notebook="01_proc_service")')
        self.notebook = notebook
        self.results: dict[str, CheckResult] = {}

    def check(self, name: str, points: float = 1, hidden: bool = False):
        """Decorator: run the function now as the check `name`, worth `points`."""
        if points < 0:
            raise LabError(f"check {name!r} has negative points ({points})", "give every check 0 or more points")

        def run(function) -> CheckResult:
            return self.run(name, function, points=points, hidden=hidden)

        return run

    def run(self, name: str, function, points: float = 1, hidden: bool = False, extra: dict | None = None):
        """Run `function` as the check `name`; show and record the result; never raise."""
        try:
            function()
        except AssertionError as failure:
            status, message = FAILED, str(failure) or "the check's condition does not hold"
        except Exception as problem:  # noqa: BLE001 -- a check must never stop the notebook
            status, message = ERROR, f"{type(problem).__name__}: {problem}"
            if not isinstance(problem, LabError):  # a LabError says all; others: where it happened
                message += "\n" + "".join(traceback.format_exception(problem)[-3:-1])
        else:
            status, message = PASSED, ""
        result = CheckResult(self.notebook, name, points if status == PASSED else 0, points, status,
                             message.rstrip(), hidden, extra or {})
        self.results[name] = result
        _append_record(result.record())
        _show(result)
        return result

    def answer(self, name: str, text, points: float = 1, min_words: int = 15, keywords=()):
        """A short reasoned answer: visibly checked for length and key words.

        Its content is graded by hand: the record carries the text ("answer")."""
        text = text if isinstance(text, str) else ""

        def visible():
            words = len(text.split())
            assert words >= min_words, (
                f"write your answer in the string (at least {min_words} words; you have {words}), "
                "citing numbers from your own plots and tables")
            missing = [k for k in keywords if k.lower() not in text.lower()]
            assert not missing, f"your answer should mention {', '.join(repr(k) for k in missing)}"

        return self.run(name, visible, points=points, extra={"answer": text})

    def summary(self) -> str:
        """Points so far, visible checks and hidden ones apart."""
        got = sum(r.points for r in self.results.values())
        most = sum(r.max_points for r in self.results.values())
        failing = [r.check for r in self.results.values() if r.status != PASSED]
        text = f"{self.notebook}: {got:g}/{most:g} points from {len(self.results)} checks"
        text += f"; not passed yet: {', '.join(failing)}" if failing else "; all passed"
        print(text)
        return text


# ---------------------------------------------------------------------------
# C: put a student's function in place of the lab's own


def replace_function(c_text: str, name: str, new_code: str, label: str, original: Path) -> str:
    """`c_text` with the definition of `name` replaced by `new_code`.

    The lab's style puts a definition's return type and name at the start of
    a line and its closing brace alone in column 0.  `#line` makes gcc name
    the student's cell (`label`) and its own line numbers in any message.
    """
    lines = c_text.splitlines(keepends=True)
    header = re.compile(rf"^[A-Za-z_][\w \t\*]*\b{re.escape(name)}\s*\(")
    start = next((i for i, line in enumerate(lines)
                  if header.match(line) and not line.rstrip().endswith(";")), None)
    end = next((i for i in range(start or 0, len(lines)) if lines[i].rstrip() == "}"), None) \
        if start is not None else None
    if start is None or end is None:
        raise LabError(f"could not find the definition of {name}() to replace",
                       "check that the lab's C file still defines it (type and name at a line start)")
    if not re.search(rf"\b{re.escape(name)}\s*\(", new_code):
        raise LabError(f"your code does not define {name}()",
                       f"keep the first line of the function, `... {name}(...)`, in the cell")
    resume = f'#line {end + 2} "{original}"\n'  # messages after the function name the lab's file
    return "".join(lines[:start]) + f'#line 1 "{label}"\n' + new_code.rstrip() + "\n" + resume \
        + "".join(lines[end + 1:])


def _digest(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def _locked(directory: Path):
    """An exclusive lock on `directory` (parallel grading builds the same code at once)."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = open(directory / ".lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


# ---------------------------------------------------------------------------
# exercise: procstat_parse, compiled in-process with cffi


_parse_modules: dict[str, object] = {}


def procstat_parse_module(code: str):
    """cffi module (`.ffi`, `.lib`) of the lab's procstat.c with the student's procstat_parse.

    Compiled the way build.procstat() compiles the real one (same flags, same
    cdef); a compile error raises BuildError with gcc's own message."""
    import importlib.machinery
    import importlib.util

    real_source = build.procstat_source()
    flags = build.procstat_flags()
    key = _digest(code, real_source.read_text(), " ".join(flags))
    if key in _parse_modules:
        return _parse_modules[key]
    name = f"_procstat_ex_{key}"
    scratch = SCRATCH / "procstat_parse"
    with _locked(scratch):
        source = scratch / f"{name}.c"
        source.write_text(replace_function(real_source.read_text(), "procstat_parse", code,
                                           "your procstat_parse cell", real_source))
        target = paths.CFFI_DIR / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
        if not target.is_file():
            try:
                build.compile_procstat(name, source, real_source.with_suffix(".h"), flags, target)
            except BuildError as failed:
                raise BuildError("your procstat_parse() does not compile (gcc's message below)", failed.output,
                                 "read the first error (your procstat_parse cell:LINE: error: ...), fix that "
                                 "line in the cell, and run the cell and its checks again") from None
    loader = importlib.machinery.ExtensionFileLoader(name, str(target))
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, target, loader=loader))
    loader.exec_module(module)
    _parse_modules[key] = module
    return module


def stat_line(pid: int, name: str, utime: int, stime: int, state: str = "S") -> str:
    """A /proc/PID/stat line as the kernel writes it (52 fields), for tests and checks."""
    middle = [state, "1", str(pid), str(pid), "0", "-1", "4194560", "120", "0", "3", "0"]
    tail = ["0", "0", "20", "0", "1", "0", "4242", "10000000", "200"] + ["0"] * 33
    return f"{pid} ({name}) {' '.join(middle)} {utime} {stime} {' '.join(tail)}\n"


# Visible: names that break a split on spaces or a stop at the first ')'.
PROCSTAT_LINES = [
    stat_line(1, "systemd", 300, 200),
    stat_line(4321, "tmux: server", 1234, 56),
    stat_line(1234, "evil) (name x", 17, 4, state="R"),
    stat_line(77, ") (", 5, 6),
]


def _parse_with(module, line: str) -> dict | None:
    raw = line.encode("utf-8", "surrogateescape")
    entry = module.ffi.new("struct proc_cpu *")
    if module.lib.procstat_parse(raw, len(raw), entry) != 0:
        return None
    return build.proc_cpu_dict(module.ffi, entry[0])


def check_procstat_parse(code: str, lines=None) -> None:
    """Assert that the student's procstat_parse agrees with the lab's parser on `lines`."""
    module = procstat_parse_module(code)
    for line in PROCSTAT_LINES if lines is None else lines:
        yours, lab = _parse_with(module, line), build.parse_stat_line(line)
        if yours == lab:
            continue
        shown = line if len(line) < 90 else line[:87] + "..."
        hint = ("a valid line must give 0 and fill *out" if yours is None else
                "a malformed line must return -1" if lab is None else
                "the name is everything between the FIRST '(' and the LAST ')'; utime and stime are "
                "the 12th and 13th fields after that ')'" if yours["name"] != lab["name"] else
                "count the fields after the LAST ')': state is the 1st, utime the 12th, stime the 13th")
        raise AssertionError(f"for the line {shown!r}\n  yours gives {yours}\n  the lab's parser gives {lab}\n"
                             f"hint: {hint}")


def check_procstat_live(code: str, name: str = "evil) (name x") -> None:
    """Parse the stat line of a live process named `name` and compare with psutil."""
    import psutil

    module = procstat_parse_module(code)
    child = subprocess.Popen([sys.executable, "-c",
                              f"open('/proc/self/comm', 'w').write({name!r})\n"
                              "import sys; print('named', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()  # renamed: /proc now shows the new name
        proc, ticks = psutil.Process(child.pid), os.sysconf("SC_CLK_TCK")
        for _ in range(3):  # the child may still be on its way into read(): read until it holds still
            line = Path(f"/proc/{child.pid}/stat").read_text()
            expected = {"pid": child.pid, "name": proc.name()}
            times = proc.cpu_times()
            if Path(f"/proc/{child.pid}/stat").read_text() == line:
                break
            time.sleep(0.1)
        yours = _parse_with(module, line)
    finally:
        child.kill()
        child.wait()
    assert yours is not None, f"your procstat_parse rejected a real line (it returned -1): {line[:80]!r}"
    got = {"pid": yours["pid"], "name": yours["name"]}
    assert got == expected, f"for a live process psutil says {expected}, yours says {got}"
    # psutil divides the same tick counts by the clock rate: compare in ticks.
    assert (yours["utime"], yours["stime"]) == (round(times.user * ticks), round(times.system * ticks)), \
        f"utime/stime: yours {yours['utime']}/{yours['stime']} ticks, psutil " \
        f"{round(times.user * ticks)}/{round(times.system * ticks)}"


# ---------------------------------------------------------------------------
# exercise: the poll backend's event dispatch, built into a scratch poll server


POLL_MODEL = "poll"
POLL_BACKEND = Path("loop") / "ev_poll.c"


def build_poll_server(code: str) -> Path:
    """The poll server built with the student's ev_poll(); its path.

    csrc/ is copied to a scratch directory named after the code (so the same
    code is built once, and parallel graders share it under a lock) and only
    the copy's loop/ev_poll.c is changed.  A compile error raises BuildError
    carrying gcc's own message, naming the student's cell."""
    key = _digest(code, *(p.read_text() for p in sorted(paths.CSRC.rglob("*.[ch]"))))
    scratch = SCRATCH / f"ev_poll-{key}"
    binary = scratch / "build" / "bin" / POLL_MODEL
    with _locked(scratch):
        if binary.is_file():
            return binary
        csrc = scratch / "csrc"
        shutil.rmtree(csrc, ignore_errors=True)
        shutil.copytree(paths.CSRC, csrc)
        backend = csrc / POLL_BACKEND
        backend.write_text(replace_function((paths.CSRC / POLL_BACKEND).read_text(), "ev_poll", code,
                                            "your ev_poll cell", paths.CSRC / POLL_BACKEND))
        result = build.make(["-s", "--no-print-directory", str(binary)], csrc, scratch / "build")
        if result.returncode != 0:
            raise BuildError("your ev_poll() does not compile (gcc's message below)", result.stdout,
                                   "read the first error (your ev_poll cell:LINE: error: ...), fix that "
                                   "line in the cell, and run the cell and its checks again")
    return binary


class _PollServer:
    """The scratch poll server, run the way procs runs the lab's servers
    (own process group, death signal, registered for clean-up)."""

    def __init__(self, binary: Path, ready_timeout: float = 5.0):
        from . import procs

        argv = [str(binary), "--port", "0", "--service", "echo"]
        self._stderr = tempfile.TemporaryFile(prefix="labkit-ex-poll-")
        child = procs.spawn(argv, "server", None, stdout=subprocess.PIPE, stderr=self._stderr)
        self.server = procs.Server(child, "poll (your ev_poll)", "echo", 0, None, argv, self._stderr)
        line = procs.read_ready_line(child.popen, ready_timeout).decode("utf-8", "replace").split()
        if len(line) != 2 or line[0] != "listening" or not line[1].isdigit():
            self.stop()
            raise AssertionError(f"your poll server did not print `listening <port>` within {ready_timeout:g} s"
                                 f"{self._died()}")
        self.port = int(line[1])
        self.server.port = self.port

    def _died(self) -> str:
        code = self.server._child.popen.poll()
        if code is None:
            return ""
        stderr = self.server.stderr_text().strip()
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return f"; the server {how}" + (f":\n{stderr[-1500:]}" if stderr else "")

    def stop(self) -> None:
        # A broken dispatch never reports the stop pipe: SIGTERM cannot end the
        # loop, so the group is killed after a short wait; that is expected here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self.server.stop(timeout=0.5)


_NO_REPLY_HINT = (
    "hint: after poll() returns, every pollfd whose revents has POLLIN (or POLLERR/POLLHUP) must go "
    "into fired[] with EV_READABLE, every one with POLLOUT with EV_WRITABLE, and ev_poll must "
    "return how many entries it filled")


def _exchange(sock: socket.socket, payload: bytes, what: str, server: _PollServer, timeout: float) -> None:
    """Send `payload` (from a thread, so a large one cannot deadlock) and read it back."""
    def send():
        try:
            sock.sendall(payload)
        except OSError:
            pass  # the reading side below says what went wrong

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    got = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while len(got) < len(payload):
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError(f"{what}: the server closed the connection after echoing {len(got)} of "
                                     f"{len(payload)} bytes{server._died()}\n{_NO_REPLY_HINT}")
            got += chunk
    except (socket.timeout, TimeoutError):
        raise AssertionError(f"{what}: sent {len(payload)} bytes, got {len(got)} back within {timeout:g} s"
                             f"{server._died()}\n{_NO_REPLY_HINT}") from None
    assert bytes(got) == payload, f"{what}: the echo came back different from what was sent"
    sender.join(timeout)


def check_poll_server(code: str, clients: int = 3, big: int = 1 << 20, timeout: float = 5.0) -> None:
    """Build the poll server with the student's ev_poll and check it serves echo:
    `clients` connections (the first stays silent until the end) each echoed, one
    of them `big` bytes (more than the server buffers: it must wait for writable)."""
    binary = build_poll_server(code)
    server = _PollServer(binary)
    connections = []
    try:
        for _ in range(clients):
            connections.append(socket.create_connection(("127.0.0.1", server.port), timeout=timeout))
        silent, talkers = connections[0], connections[1:]
        for i, conn in enumerate(talkers, start=1):
            _exchange(conn, f"hello from client {i}\n".encode(), f"client {i} (while client 0 stays silent)",
                      server, timeout)
        if big and talkers:
            _exchange(talkers[0], bytes(range(256)) * (big // 256), f"client 1, {big} bytes at once", server,
                      timeout)
        _exchange(silent, b"late but here\n", "client 0 (silent until now)", server, timeout)
    finally:
        for conn in connections:
            conn.close()
        server.stop()
