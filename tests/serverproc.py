"""Start one of the lab's C servers for a test, and check that it stops cleanly.

The lab's own launcher is labkit.procs; these tests drive the binaries
directly, so a bug in either shows up on its own.

    with serverproc.running("select", service="echo", san=True) as server:
        sock = socket.create_connection(("127.0.0.1", server.port))

On leaving the block the server gets SIGTERM and must exit with status 0
within 1 s; a sanitizer build must also have reported nothing.  Client is a
small independent line-oriented client for talking to it.
"""

import contextlib
import fcntl
import functools
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

import waits
from labkit import busy_machine

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"


def _models_make_builds() -> set[str]:
    """The models csrc/Makefile builds here (uring only where liburing is)."""
    result = subprocess.run(["make", "--no-print-directory", "-s", "-C", str(ROOT / "csrc"),
                             "print-MODELS"], capture_output=True, text=True, timeout=30)
    return set(result.stdout.split())


_BUILT = _models_make_builds()  # asked once: a make per model cost every pytest process 1.3 s
MODELS = [model for model in ("iterative", "threaded", "select", "poll", "epoll", "epoll_et",
                              "select_fork", "epoll_workers", "epoll_reuseport", "pool", "fork", "prefork", "uring",
                              "busypoll", "aio")
          if model in _BUILT]
# Models that take --workers N; the tests give them a fixed count, so that
# they behave the same on a 1-CPU machine as on this one.
WORKER_MODELS = ["select_fork", "epoll_workers", "epoll_reuseport", "pool", "prefork"]
# Worker models whose workers are processes (pool's are threads).
PROCESS_WORKER_MODELS = ["select_fork", "epoll_workers", "epoll_reuseport", "prefork"]
TEST_WORKERS = 3
# Make every sanitizer finding fatal and visible, leaks included.
SAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=66",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=67",
}
SAN_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


@functools.cache
def bin_dir(san: bool = False, target: str = "servers") -> Path:
    """Build the servers (or another make target: "loadgen") once per test run
    and return the directory holding them."""
    BUILD.mkdir(exist_ok=True)
    command = ["make", "--no-print-directory", "-C", str(ROOT / "csrc"), f"BUILD={BUILD}", target]
    if san:
        command.append("SAN=1")
    # The same lock as tests/conftest.py: two builds must not write one tree at once.
    with open(BUILD / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    return BUILD / "san" / "bin" if san else BUILD / "bin"


@dataclass
class Server:
    model: str
    port: int
    proc: subprocess.Popen
    stderr_path: Path
    printed: bytearray = field(default_factory=bytearray)

    def stderr(self) -> str:
        """What the server has written to stderr so far."""
        return self.stderr_path.read_text(errors="replace")

    def stdout_lines(self) -> list[str]:
        """The lines the server printed on stdout after `listening`, so far (--expect's reports)."""
        fd = self.proc.stdout.fileno()
        os.set_blocking(fd, False)
        try:
            while chunk := os.read(fd, 65536):
                self.printed += chunk
        except BlockingIOError:
            pass
        return self.printed.decode(errors="replace").splitlines()


def _read_listening_line(proc: subprocess.Popen, timeout: float) -> int:
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError(f"server printed nothing within {timeout} s")
    line = proc.stdout.readline().decode()
    words = line.split()
    if len(words) != 2 or words[0] != "listening" or not words[1].isdigit():
        raise AssertionError(f"expected 'listening <port>', got {line!r}")
    return int(words[1])


@contextlib.contextmanager
def running(model: str, service: str = "top", san: bool = False, args=(), fd_limit: int | None = None,
            workers: int | None = TEST_WORKERS):
    """A running server on 127.0.0.1 and a free port; stopped and checked on exit.

    A worker model gets --workers `workers` unless args say otherwise
    (None: no flag, the model's default)."""
    import resource  # only where it is used: the child's limit

    def limit_fds():
        if fd_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

    binary = bin_dir(san) / model
    if model in WORKER_MODELS and workers is not None and "--workers" not in args:
        args = ("--workers", str(workers), *args)
    env = dict(os.environ, **SAN_ENV) if san else None
    with tempfile.TemporaryDirectory() as tmp:
        stderr_path = Path(tmp) / "stderr"
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen([str(binary), "--port", "0", "--service", service, *args],
                                    stdout=subprocess.PIPE, stderr=err, env=env,
                                    preexec_fn=limit_fds, start_new_session=True)
        try:
            server = Server(model, _read_listening_line(proc, timeout=10), proc, stderr_path)
            yield server
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            proc.stdout.close()
        stop_and_check(server)


def children(server: Server) -> list[psutil.Process]:
    """The server's child processes (workers, connection processes) now."""
    try:
        return psutil.Process(server.proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def still_running(proc: psutil.Process) -> bool:
    """False for a process that is gone or a zombie (dead, waiting for init to
    reap it: e.g. LeakSanitizer's helper when its process was stopped)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_and_check(server: Server) -> None:
    """SIGTERM must end the server and every process it started with status 0
    within 1 s (not counting time a busy machine held them back: labkit.busy_machine),
    with nothing from a sanitizer."""
    proc = server.proc
    if proc.poll() is not None:
        raise AssertionError(f"{server.model} died during the test (status {proc.returncode}):\n"
                             f"{server.stderr()}")
    before = children(server)
    deadline = time.monotonic() + 1.0
    proc.send_signal(signal.SIGTERM)
    status = waits.exit_status(proc, within=1.0)  # a busy machine's delays not counted
    if status is None:
        where = waits.where_they_sleep(proc.pid)  # before the kill: what each process was doing
        proc.kill()
        proc.wait()
        raise AssertionError(f"{server.model} did not exit within 1 s of SIGTERM (not counting time it waited "
                             f"for a CPU); its processes then:\n{where}")
    left = [child for child in before if still_running(child)]
    if left:  # the rest of the second, and more while a busy machine holds them back
        def gone(seconds):
            nonlocal left
            waits.wait_until(lambda: not any(still_running(c) for c in left), seconds, every=0.02)
            left = [c for c in left if still_running(c)]
            return not left

        busy_machine.patiently(gone, left[0].pid, max(0.05, deadline - time.monotonic()), cap=10.0)
    for child in left:
        child.kill()
    assert not left, f"{server.model}: processes left after SIGTERM: {left}"
    stderr = server.stderr()
    found = [m for m in SAN_MARKERS if m in stderr]
    assert not found, f"{server.model}: sanitizer report:\n{stderr}"
    assert status == 0, f"{server.model} exited with {status} after SIGTERM:\n{stderr}"


# ---- the client side ----

TOP_LINE = re.compile(rb"^(\d+) (\d+) (\d+) (.*)$")
TIMEOUT = 5.0


class Client:
    """One connection to 127.0.0.1:port, read line by line, every wait bounded."""

    def __init__(self, port: int, timeout: float = TIMEOUT):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> bytes:
        """The next line, without its newline; b"" once the server closed."""
        return self.reader.readline().rstrip(b"\n")

    def top(self, request: bytes = b"TOP\n") -> list[tuple[int, int, int, bytes]]:
        """Send one TOP request (b"": read the next reply) and return its
        (pid, utime, stime, name) rows."""
        if request:
            self.send(request)
        rows = []
        while (line := self.line()) != b"END":
            match = TOP_LINE.match(line)
            assert match, f"not a TOP line: {line!r}"
            pid, utime, stime, name = match.groups()
            rows.append((int(pid), int(utime), int(stime), name))
        return rows

    def closed_by_server(self) -> bool:
        """True if the server has closed this connection (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def reset(self) -> None:
        """Close abruptly: SO_LINGER 0 makes close() send RST instead of FIN."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close()

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
