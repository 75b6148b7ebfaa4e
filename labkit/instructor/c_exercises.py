"""The C exercises: a function the student wrote in a notebook cell, compiled in
place of the lab's own (the instructor's csrc/ is never edited) and checked against the real thing.

  procstat_parse     compiled with cffi beside the lab's procstat.c, loaded in a
                     process of its own, and checked against the lab's parser and psutil;
  ev_poll            the poll backend's event dispatch, built into a scratch copy
                     of the poll server, which is then run against the echo protocol;
  close_connection   a lingering close, built into a scratch threaded server and
                     sent more than it announced;
  fill_iovec         the writev array, built into a scratch load generator that
                     uploads to an independent server checking every byte.
A compile error raises BuildError with gcc's own message, naming the student's cell.

In a students' edition (labkit release) three of these functions are stubs in csrc/
(their answers are the lab's own code): once a visible check passes, adopt() puts the
student's function there, and the lab's programs run it from then on.

Over 500 lines for one job, the checks of the lab's four C exercises (one section
each), because they share the scratch builds, the adoption into an edition and the
processes the student's code runs in, and every notebook, released ones included,
calls them as c_exercises.check_*.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from .. import build, launcher, paths, procs
from ..csource import find_function, replace_function
from ..errors import BuildError

SCRATCH = paths.WORK / "exercises"  # scratch builds of students' C; csrc/ is never touched


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


def adopt(source: Path, function: str, code: str) -> None:
    """In a students' edition, put the student's `function` (`code`, whose visible check
    just passed) into csrc/`source`, in place of the released stub or an earlier version:
    the servers, the load generator and build.procstat() run it from now on (make and the
    cffi build notice the change).  In the instructor's checkout: nothing (csrc/ is never
    touched there)."""
    from . import release

    if release.edition() is None:
        return
    path = paths.own_sources() / source  # in a shared install, the user's own copy (made now)
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    found = find_function(lines, function)
    if found is None:
        return  # the file no longer has the function: leave it to the student
    start, end = found
    new = "".join(lines[:start]) + code.strip("\n") + "\n" + "".join(lines[end + 1:])
    if new != text:
        path.write_text(new)
        print(f"your {function}() is now in csrc/{source}: the lab's programs run it from now on")


# ---------------------------------------------------------------------------
# exercise: procstat_parse, compiled with cffi and run in a process of its own


def procstat_parse_module(code: str) -> tuple[str, Path]:
    """(module name, path) of the cffi module of the lab's procstat.c with the student's
    procstat_parse, compiled the way build.procstat() compiles the real one (same
    flags, same cdef); a compile error raises BuildError with gcc's own message."""
    import importlib.machinery

    real_source = build.procstat_source()
    flags = build.procstat_flags()
    name = f"_procstat_ex_{_digest(code, real_source.read_text(), ' '.join(flags))}"
    scratch = SCRATCH / "procstat_parse"
    target = scratch / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    with _locked(scratch):
        if not target.is_file():
            source = scratch / f"{name}.c"
            source.write_text(replace_function(real_source.read_text(), "procstat_parse", code,
                                               "your procstat_parse cell", real_source))
            try:
                build.compile_procstat(name, source, real_source.with_suffix(".h"), flags, target)
            except BuildError as failed:
                raise BuildError("your procstat_parse() does not compile (gcc's message below)", failed.output,
                                 "read the first error (your procstat_parse cell:LINE: error: ...), fix that "
                                 "line in the cell, and run the cell and its checks again") from None
    return name, target


def parse_lines(code: str, lines: list[str], timeout: float = 10.0) -> list[dict | None]:
    """The student's procstat_parse on each line, run in a process of its own: a crash
    or an endless loop in it is the check's failure, and nothing it does can reach
    the process that judges it."""
    name, target = procstat_parse_module(code)
    child = launcher.spawn([sys.executable, "-c", "from labkit.instructor.c_exercises import _parse_main; "
                            "_parse_main()", name, str(target)], "exercise", None,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = launcher.run_to_end(child, timeout, input=json.dumps(lines).encode())
    except subprocess.TimeoutExpired:
        raise AssertionError(f"your procstat_parse did not return within {timeout:g} s "
                             "(an endless loop? check how it walks the line)") from None
    status = child.popen.returncode
    if status != 0:
        raise AssertionError(f"your procstat_parse crashed: the process running it {launcher.how_it_ended(status)} "
                             "(reading past the end of the line? a NULL pointer?)\n"
                             + err.decode(errors="replace")[-800:])
    return json.loads(out)


def _parse_main() -> None:
    """In the parsing process: load the module, parse the JSON list of lines on stdin."""
    import importlib.machinery
    import importlib.util

    name, target = sys.argv[1], sys.argv[2]
    loader = importlib.machinery.ExtensionFileLoader(name, target)
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, target, loader=loader))
    loader.exec_module(module)
    results = []
    for line in json.loads(sys.stdin.read()):
        raw = line.encode("utf-8", "surrogateescape")
        entry = module.ffi.new("struct proc_cpu *")
        ok = module.lib.procstat_parse(raw, len(raw), entry) == 0
        results.append(build.proc_cpu_dict(module.ffi, entry[0]) if ok else None)
    print(json.dumps(results))


def stat_line(pid: int, name: str, utime: int, stime: int, state: str = "S") -> str:
    """A /proc/PID/stat line as the kernel writes it (52 fields), for tests and checks."""
    middle = [state, "1", str(pid), str(pid), "0", "-1", "4194560", "120", "0", "3", "0"]
    tail = ["0", "0", "20", "0", "1", "0", "4242", "10000000", "200"] + ["0"] * 33
    return f"{pid} ({name}) {' '.join(middle)} {utime} {stime} {' '.join(tail)}\n"


PROCSTAT_NAME_MAX = 64  # csrc/services/procstat.h


def stat_entry(pid: int, name: str, utime: int, stime: int, state: str = "S") -> dict:
    """What a correct parser gives for stat_line(pid, name, utime, stime): the name's
    non-printable bytes as '?', cut to PROCSTAT_NAME_MAX - 1 bytes."""
    shown = "".join(chr(b) if 0x20 <= b < 0x7f else "?" for b in name.encode())[:PROCSTAT_NAME_MAX - 1]
    return {"pid": pid, "utime": utime, "stime": stime, "name": shown}


# Visible: names that break a split on spaces or a stop at the first ')'.
PROCSTAT_CASES = [(1, "systemd", 300, 200), (4321, "tmux: server", 1234, 56),
                  (1234, "evil) (name x", 17, 4, "R"), (77, ") (", 5, 6)]
PROCSTAT_LINES = [stat_line(*case) for case in PROCSTAT_CASES]


def check_procstat_parse(code: str, lines=None) -> None:
    """Assert that the student's procstat_parse gives what a correct parser gives: on the
    visible PROCSTAT_LINES, the values they were made from (known without any parser: in a
    students' edition the lab's own procstat_parse is this exercise's stub); on other
    `lines` (the hidden checks, run in the instructor's checkout), the lab's parser.
    In an edition, a passing check on the visible lines adopt()s the student's function."""
    from . import release

    if lines is None:
        lines, expected = PROCSTAT_LINES, [stat_entry(*case) for case in PROCSTAT_CASES]
    elif release.edition() is not None:
        raise AssertionError("in a students' edition the lab's procstat_parse is the exercise itself, so it "
                             "cannot judge other lines: call check_procstat_parse(code) without lines")
    else:
        expected = [build.parse_stat_line(line) for line in lines]
    for line, yours, lab in zip(lines, parse_lines(code, lines), expected):
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
    if lines is PROCSTAT_LINES:
        adopt(Path("services") / "procstat.c", "procstat_parse", code)


def check_procstat_live(code: str, name: str = "evil) (name x") -> None:
    """Parse the stat line of a live process named `name` and compare with psutil."""
    import psutil

    procstat_parse_module(code)  # a compile error first, before a process is started
    child = launcher.spawn([sys.executable, "-c",
                            f"open('/proc/self/comm', 'w').write({name!r})\n"
                            "import sys, time; print('named', flush=True); time.sleep(60)"],
                           "exercise", None, stdout=subprocess.PIPE, text=True)
    try:
        child.popen.stdout.readline()  # renamed: /proc now shows the new name
        proc, ticks = psutil.Process(child.pid), os.sysconf("SC_CLK_TCK")
        for _ in range(3):  # the child may still be on its way into read(): read until it holds still
            line = Path(f"/proc/{child.pid}/stat").read_text()
            expected = {"pid": child.pid, "name": proc.name()}
            times = proc.cpu_times()
            if Path(f"/proc/{child.pid}/stat").read_text() == line:
                break
            time.sleep(0.1)
    finally:
        launcher.stop_child(child, timeout=0.2, signum=signal.SIGKILL)
    yours = parse_lines(code, [line])[0]
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
    key = _digest(model, *(f"{path}\0{text}" for path, text in sorted(files.items())),
                  *(p.read_text() for p in sorted(paths.CSRC.rglob("*.[ch]")) if p.relative_to(paths.CSRC) not in files))
    scratch = SCRATCH / (f"{name}-{key}" + ("-san" if sanitize else ""))
    binary = scratch / "build" / ("san/bin" if sanitize else "bin") / model
    built = scratch / "built"
    with _locked(scratch):
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
        result = build.make(["-s", "--no-print-directory", *(["SAN=1"] if sanitize else []), str(binary)],
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


def build_poll_server(code: str) -> Path:
    """The poll server built with the student's ev_poll(); its path."""
    return build_with(POLL_MODEL, POLL_BACKEND, "ev_poll", code)


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


_NO_REPLY_HINT = (
    "hint: after poll() returns, every pollfd whose revents has POLLIN (or POLLERR/POLLHUP) must go "
    "into fired[] with EV_READABLE, every one with POLLOUT with EV_WRITABLE, and ev_poll must "
    "return how many entries it filled")


# A loop whose dispatch drops a ready descriptor spins: poll() returns at once (the
# descriptor is still ready: poll is level-triggered) and nothing is served.  A server
# that answers nothing for SPIN_WINDOW_S while using at least SPIN_SHARE of a CPU is
# that loop; one that waits in poll() uses next to none.
SPIN_WINDOW_S = 1.0
SPIN_SHARE = 0.25


def _exchange(sock: socket.socket, payload: bytes, what: str, server: ScratchServer, timeout: float) -> None:
    """Send `payload` (from a thread, so a large one cannot deadlock) and read it back;
    fail at `timeout`, or as soon as the server is seen spinning without answering."""
    def send():
        try:
            sock.sendall(payload)
        except OSError:
            pass  # the reading side below says what went wrong

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    got = bytearray()
    deadline = time.monotonic() + timeout
    quiet_since, cpu_then = time.monotonic(), server.cpu_s()
    while len(got) < len(payload):
        now = time.monotonic()
        if now >= deadline:
            raise AssertionError(f"{what}: sent {len(payload)} bytes, got {len(got)} back within {timeout:g} s"
                                 f"{server.died()}\n{_NO_REPLY_HINT}")
        sock.settimeout(max(0.01, min(deadline - now, SPIN_WINDOW_S / 4)))
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, TimeoutError):
            quiet = time.monotonic() - quiet_since
            cpu_now = server.cpu_s()
            if quiet >= SPIN_WINDOW_S and None not in (cpu_then, cpu_now):
                if cpu_now - cpu_then >= SPIN_SHARE * quiet:
                    raise AssertionError(
                        f"{what}: sent {len(payload)} bytes, got {len(got)} back, and for {quiet:.1f} s the "
                        f"server answered nothing while it used {cpu_now - cpu_then:.1f} s of CPU: its loop "
                        "spins. poll() returns at once because a descriptor is ready, and the loop does "
                        "nothing with it (it is not in fired[] with the event it is ready for)"
                        f"\n{_NO_REPLY_HINT}") from None
                quiet_since, cpu_then = time.monotonic(), cpu_now
            continue
        if not chunk:
            raise AssertionError(f"{what}: the server closed the connection after echoing {len(got)} of "
                                 f"{len(payload)} bytes{server.died()}\n{_NO_REPLY_HINT}")
        got += chunk
        quiet_since, cpu_then = time.monotonic(), server.cpu_s()
    assert bytes(got) == payload, f"{what}: the echo came back different from what was sent"
    sender.join(timeout)


def check_poll_server(code: str, clients: int = 3, big: int = 1 << 20, timeout: float = 5.0) -> None:
    """Build the poll server with the student's ev_poll and check it serves echo:
    `clients` connections (the first stays silent until the end) each echoed, one
    of them `big` bytes (more than the server buffers: it must wait for writable)."""
    binary = build_poll_server(code)
    server = ScratchServer(binary, "poll (your ev_poll)", "echo")
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
    adopt(POLL_BACKEND, "ev_poll", code)


# ---------------------------------------------------------------------------
# exercise: close_connection, a lingering close in csrc/common/blocking.c


LINGER_MODEL = "threaded"
LINGER_SOURCE = Path("common") / "blocking.c"


def build_lingering_server(code: str) -> Path:
    """The threaded server built with the student's close_connection(); its path."""
    return build_with(LINGER_MODEL, LINGER_SOURCE, "close_connection", code)


def check_lingering_close(code: str, tries: int = 5, extra: int = 256 * 1024, silent_after: bool = False,
                          timeout: float = 5.0) -> None:
    """Build the threaded server with the student's close_connection and check that a
    client sending more than it announced gets the ERR line and a clean end of file
    (no ECONNRESET), `tries` times; that an ordinary upload still gets its OK; and, with
    `silent_after`, that a client which neither sends nor closes after the ERR cannot
    hold the connection for ever (the linger is bounded)."""
    from labkit import failures

    binary = build_lingering_server(code)
    server = ScratchServer(binary, "threaded (your close_connection)", "sink")
    try:
        for attempt in range(1, tries + 1):
            saw = failures.send_more_than_announced(server.port, extra=extra, timeout=timeout)
            assert not saw["error"], (
                f"try {attempt}: the client got {saw['error']} in {saw['where']}() after receiving "
                f"{saw['received']!r}{server.died()}\nhint: before close(), shutdown(fd, SHUT_WR) so the reply "
                "leaves with a FIN, then read and discard what the client still sends until read() returns 0")
            assert b"ERR " in saw["received"], (
                f"try {attempt}: the client read {saw['received']!r} and then end of file, but no ERR line")
        reply = failures.upload_once(server.port, timeout=timeout)
        assert reply.startswith(f"OK {failures.PROBE_BYTES} "), (
            f"an ordinary upload after the lingering closes got {reply!r}, not OK{server.died()}")
        if silent_after:
            _check_linger_is_bounded(server, timeout)
    finally:
        server.stop()


def _server_holds(pid: int, client: tuple) -> bool:
    """Whether process `pid` still has a socket connected to the `client` address."""
    import psutil

    try:
        return any(c.raddr and (c.raddr.ip, c.raddr.port) == client[:2]
                   for c in psutil.Process(pid).net_connections(kind="tcp"))
    except psutil.NoSuchProcess:
        return False


def _check_linger_is_bounded(server: ScratchServer, timeout: float) -> None:
    """Clients that get ERR and then neither close nor stop: one silent, one sending a
    byte every half second (each read then returns within any per-read timeout, so only a
    bound on the whole linger ends it).  The server must close each connection by itself
    within `timeout` (a linger with no bound holds a thread, and its descriptor, for as
    long as the client likes).  Watched from the server's side: whether it still holds a
    socket connected to this client."""
    pid = server.server.pid
    for trickle in (False, True):
        with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
            sock.sendall(b"GET / HTTP/1.0\n")  # an unknown verb: ERR, and the linger begins
            got = sock.recv(4096)
            assert got.startswith(b"ERR "), f"the client got {got!r} instead of an ERR line"
            deadline = time.monotonic() + timeout
            next_byte = time.monotonic()
            while _server_holds(pid, sock.getsockname()):
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"after ERR the server kept a {'client sending a byte every 0.5 s' if trickle else 'silent client'}"
                        f" connected for more than {timeout:g} s: bound the whole linger with a deadline (say 2 s from "
                        "the shutdown, the receive timeout set to what is left before each read), not each read: a "
                        "client that trickles bytes defeats a per-read timeout")
                if trickle and time.monotonic() >= next_byte:
                    try:
                        sock.send(b"x")
                    except OSError:
                        break  # the server closed: what we wanted
                    next_byte += 0.5
                time.sleep(0.05)


# ---------------------------------------------------------------------------
# exercise: fill_iovec, the writev array of the load generator's write strategies


IOVEC_SOURCE = Path("loadgen") / "strategies.c"


def build_iovec_loadgen(code: str) -> Path:
    """The load generator built with the student's fill_iovec(); its path."""
    return build_with("loadgen", IOVEC_SOURCE, "fill_iovec", code)


class _CheckingSink:
    """An independent sink for one connection that checks every body byte: repetition
    after repetition, buffer b is `bufsize` bytes of 'a' + b % 26 (what the load
    generator writes).  Replies "OK <n> <reads>" as the lab's servers do."""

    def __init__(self, nbufs: int, bufsize: int):
        self.repetition = b"".join(bytes([ord("a") + b % 26]) * bufsize for b in range(nbufs))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.problem = ""
        self.bodies = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(20)
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(20)
            data = b""
            try:
                while True:
                    while b"\n" not in data:
                        if (len(data) >= 3 and not data.startswith(b"PUT")) or len(data) > 1024:
                            self.problem = (f"no request line: the bytes began {data[:16]!r}; 'PUT <n>' must "
                                            "come first (the head, when head_len > 0)")
                            return
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        data += chunk
                    line, data = data.split(b"\n", 1)
                    words = line.split()
                    if len(words) != 2 or words[0] != b"PUT" or not words[1].isdigit():
                        self.problem = f"the request line was {line[:60]!r}, not 'PUT <n>'"
                        return
                    size = int(words[1])
                    while len(data) < size:
                        chunk = conn.recv(65536)
                        if not chunk:
                            self.problem = f"the body ended after {len(data)} of {size} bytes"
                            return
                        data += chunk
                    body, data = data[:size], data[size:]
                    expected = self.repetition * (size // len(self.repetition))
                    if body != expected:
                        at = next(i for i, (a, b) in enumerate(zip(body, expected)) if a != b) \
                            if len(body) == len(expected) else min(len(body), len(expected))
                        self.problem = (f"body byte {at} (repetition {at // len(self.repetition)}, offset "
                                        f"{at % len(self.repetition)} in it) is {body[at:at + 8]!r}, expected "
                                        f"{expected[at:at + 8]!r}")
                        return
                    self.bodies += 1
                    conn.sendall(b"OK %d 1\n" % size)
            except OSError as failure:
                self.problem = f"the connection failed: {failure}"

    def close(self) -> None:
        self.thread.join(timeout=25)
        self.listener.close()


def check_fill_iovec(code: str, shape: tuple[int, int] = (3, 5), repetitions: int = 4, requests: int = 2,
                     timeout: float = 20.0) -> None:
    """Build the load generator with the student's fill_iovec and run `--strategy writev`
    against an independent server that checks every byte: the request line first, then each
    repetition's buffers in order; one writev() per repetition."""
    binary = build_iovec_loadgen(code)
    nbufs, bufsize = shape
    sink = _CheckingSink(nbufs, bufsize)
    argv = [str(binary), "--port", str(sink.port), "--service", "sink", "--clients", "1",
            "--requests", str(requests), "--strategy", "writev", "--nbufs", str(nbufs), "--bufsize", str(bufsize),
            "--repetitions", str(repetitions), "--timeout", "2"]
    child = launcher.spawn(argv, "client", None, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = launcher.run_to_end(child, timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"your load generator ran longer than {timeout:g} s") from None
    finally:
        sink.close()
    said = stderr.decode("utf-8", "replace").strip()
    assert not sink.problem, (f"with {nbufs} buffers of {bufsize} bytes: {sink.problem}\nhint: the request "
                              "line goes first only when head_len > 0, then every buffer in order, each "
                              "`size` bytes; return how many entries you filled")
    status = child.popen.returncode
    assert status == 0 and sink.bodies == requests, (
        f"the upload did not complete ({sink.bodies} of {requests} bodies arrived, exit status {status}): "
        f"{said[-400:]}\nhint: if nothing arrived, fill_iovec returned 0 entries: fill one per buffer "
        "(and one for the request line when head_len > 0) and return how many")
    summary = json.loads(stdout)
    assert summary["write_calls_per_repetition"] == 1, \
        f"{summary['write_calls_per_repetition']} writev calls per repetition: expected exactly one"
    adopt(IOVEC_SOURCE, "fill_iovec", code)
