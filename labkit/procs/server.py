"""A server model, run: its spec (model, service, workers, flags) turned into an argv in one
place, started pinned through labkit.launcher, ready once it prints `listening <port>`, its
stdout drained and its stderr kept whole."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .. import build, launcher
from ..errors import ServerFailed
from .argv import flag_words
from .limits import check_port_free, port_in_use
from .pinning import check_cpus


_takes_workers: dict[Path, bool] = {}


def has_workers(model: str, sanitize: bool = False) -> bool:
    """Whether `model` takes --workers (its --help says so)."""
    return takes_workers(build.binary(model, sanitize=sanitize))


def takes_workers(executable: Path) -> bool:
    """Whether the server program `executable` takes --workers (its --help says so)."""
    if executable not in _takes_workers:
        usage = subprocess.run([str(executable), "--help"], capture_output=True, text=True, timeout=5)
        _takes_workers[executable] = "--workers" in usage.stdout + usage.stderr
    return _takes_workers[executable]


@dataclass(frozen=True)
class ServerSpec:
    """Which server to run and with what flags: `build/bin/<model> --port P
    --service S [--workers N] [--<flag> <value> ...]`."""

    model: str
    service: str = "top"
    workers: int | None = None  # None: the model's default (one per usable CPU); ignored by models without
    flags: dict = field(default_factory=dict)  # any other server flag: {"nodelay": True, "strategy": "writev"}
    sanitize: bool = False

    def argv(self, port: int) -> list[str]:
        argv = [str(build.binary(self.model, sanitize=self.sanitize)), "--port", str(port),
                "--service", self.service]
        if self.workers is not None and has_workers(self.model, self.sanitize):
            argv += ["--workers", str(self.workers)]
        for flag, value in self.flags.items():
            argv += flag_words(flag, value)
        return argv


class Server:
    """A running server model, pinned, ready to accept connections."""

    def __init__(self, child: launcher.Child, spec: ServerSpec, port: int, argv, stderr_file):
        self._child = child
        self._stderr = stderr_file
        self._stdout_tail = bytearray()
        self._drainer: threading.Thread | None = None  # reads stdout all along (start_server)
        self.spec = spec
        self.model = spec.model
        self.service = spec.service
        self.pid = child.pid
        self.port = port
        self.cpus: list[int] | None = None
        self.argv = argv
        self.returncode: int | None = None
        self.note = ""

    def alive(self) -> bool:
        return self._child.alive()

    def exit_status(self, within: float = 0.0) -> int | None:
        """Its exit status once it has ended on its own (waiting up to `within` s), else None."""
        return self._child.exit_status(within)

    def exit_status_unless_stuck(self, within: float, cap: float = 10.0) -> int | None:
        """Its exit status once it has ended on its own: up to `within` s of waiting, more while
        a busy machine holds it back (launcher.Child.exit_status_unless_stuck), else None."""
        return self._child.exit_status_unless_stuck(within, cap)

    def thread_count(self) -> int:
        """Threads of the server process now (/proc/PID/task), 0 once it is gone."""
        try:
            return len(os.listdir(f"/proc/{self.pid}/task"))
        except OSError:
            return 0

    def stdout_text(self) -> str:
        """What the server printed on stdout after `listening` (its last 64 KiB)."""
        return bytes(self._stdout_tail).decode("utf-8", "replace")

    def stdout_after_stop(self, within: float = 1.0) -> str:
        """Everything it printed on stdout, its last words included (what its processes
        report as they stop): waits up to `within` for the pipe's end once it is stopped."""
        if self.returncode is not None and self._drainer is not None:
            self._drainer.join(within)
        return self.stdout_text()

    def stderr_text(self) -> str:
        """Everything the server wrote to stderr so far."""
        fd = self._stderr.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")

    def stop(self, timeout: float = 1.0, signum: int = signal.SIGTERM) -> int:
        """`signum` (SIGTERM), wait up to `timeout`, then SIGKILL the group; the exit code."""
        if self.returncode is not None:  # already stopped
            return self.returncode
        self.returncode, killed = launcher.stop_child(self._child, timeout, signum)
        if killed:
            self.note = f"{self.model} (pid {self.pid}) ignored SIGTERM for {timeout:g} s; its process group was killed"
            warnings.warn(self.note, RuntimeWarning, stacklevel=2)
        return self.returncode

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited {self._child.popen.returncode}"
        return f"<Server {self.model} service={self.service} pid={self.pid} port={self.port} cpus={self.cpus} {state}>"


def read_ready_line(popen: subprocess.Popen, timeout: float) -> bytes:
    """Read the first stdout line, giving up at `timeout` or when the process exits."""
    line = bytearray()
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(popen.stdout, selectors.EVENT_READ)
        while b"\n" not in line:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                break
            chunk = os.read(popen.stdout.fileno(), 4096)
            if not chunk:
                break  # EOF: the server closed stdout or exited
            line += chunk
    return bytes(line)


def _drain(pipe, sink: bytearray, limit: int = 64 * 1024) -> None:
    """Keep reading a child's stdout so a chatty server never blocks on a full pipe."""
    for chunk in iter(lambda: os.read(pipe.fileno(), 4096), b""):
        sink += chunk
        del sink[:-limit]
    pipe.close()


def start_server(spec: ServerSpec | str, service: str | None = None, cpus=None, port: int = 0,
                 workers: int | None = None, sanitize: bool = False, ready_timeout: float = 5.0,
                 prefix: list[str] = ()) -> Server:
    """Start a server pinned to `cpus`; return once it prints `listening <port>`.

    `spec` is a ServerSpec, or a model name with `service` and `workers` (by
    hand in a notebook: start_server("select", service="echo"))."""
    if not isinstance(spec, ServerSpec):
        spec = ServerSpec(spec, service or "top", workers, sanitize=sanitize)
    cpus = check_cpus(cpus)
    if port:
        check_port_free(port)
    argv = spec.argv(port)
    # stderr goes to an unlinked file, read with pread: a sanitizer report of
    # any size is kept, and the server never blocks on a pipe nobody reads.
    stderr_file = tempfile.TemporaryFile(prefix=f"labkit-{spec.model}-")
    child = launcher.spawn(argv, "server", cpus, prefix=prefix, stdout=subprocess.PIPE, stderr=stderr_file)
    server = Server(child, spec, port, argv, stderr_file)
    try:
        line = read_ready_line(child.popen, ready_timeout)
        words = line.decode("utf-8", "replace").split()
        if len(words) == 2 and words[0] == "listening" and words[1].isdigit() and line.endswith(b"\n"):
            server.port = int(words[1])
        else:
            _start_failed(server, line, ready_timeout)
        server.cpus = sorted(os.sched_getaffinity(server.pid))
    except BaseException:
        server.stop(timeout=0.2)
        raise
    server._drainer = threading.Thread(target=_drain, args=(child.popen.stdout, server._stdout_tail), daemon=True)
    server._drainer.start()
    return server


def _start_failed(server: Server, line: bytes, ready_timeout: float):
    alive = server.alive()
    server.stop(timeout=0.2)
    stderr = server.stderr_text().strip()
    if server.port and "in use" in stderr.lower():
        raise port_in_use(server.port)
    if alive and not line:
        what = f"{server.model} did not print `listening <port>` within {ready_timeout:g} s"
    elif not line:
        what = f"{server.model} exited with status {server.returncode} before it was ready"
    else:
        what = f"{server.model} printed {line[:200]!r} instead of `listening <port>`"
    raise ServerFailed(
        f"{what}\n--- its stderr ---\n{stderr or '(empty)'}",
        "read the server's message above; rebuild with labkit.build.build() after fixing the C code",
    )
