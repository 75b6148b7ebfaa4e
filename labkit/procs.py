"""Servers and the load generator: what to run (a spec), running it pinned, reading it back.

A ServerSpec (model, service, workers, any extra flags) and a LoadSpec (the
load generator's flags) are each turned into an argv in one place, here; an
experiment builds them from a grid point, `measure.point` runs them.  Every
process starts through labkit.launcher (pinning, death signal, pid file,
launch prefix); nothing outlives its owner.
"""

from __future__ import annotations

import errno
import json
import math
import os
import resource
import selectors
import socket
import subprocess
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import build, launcher, system
from .errors import ClientFailed, LabError, ServerFailed

# Room for the load generator's own descriptors (stdio, perf, epoll...) above one per client.
FD_MARGIN = 32
# How long past its own --timeout the client may run before it is killed.
CLIENT_WALL_MARGIN_S = 10.0
# Bodies move at least this fast, even through a busy-polling server on one shared CPU.
PESSIMISTIC_BYTES_PER_S = 50e6


def _flag_words(flag: str, value) -> list[str]:
    """`--flag value`; True is the bare `--flag`; None and False are left out."""
    if value is None or value is False:
        return []
    if value is True:
        return [f"--{flag}"]
    if isinstance(value, float):
        return [f"--{flag}", exact(value)]
    return [f"--{flag}", str(value)]


def exact(number: float) -> str:
    """A float as argv gives it to C's strtod, exactly: a whole number as an integer ("100",
    which strtol reads too), any other as repr's shortest round-trip form ("0.1", "1e-07").
    `:g` kept six digits: 1234567.0 went to the generator as 1.23457e+06."""
    number = float(number)  # numpy's float64 reprs as np.float64(...)
    if number.is_integer() and abs(number) < 2 ** 53:
        return str(int(number))
    return repr(number)


# ---------------------------------------------------------------------------
# pinning


@dataclass(frozen=True)
class Pinning:
    """The CPUs the server and the client run on, and what to say about them."""

    server_cpus: list[int] | None = None  # None: not pinned
    client_cpus: list[int] | None = None
    note: str = ""
    from_machine: bool = False  # neither side's CPUs were chosen: a sweep leases its own (cpu_leases)

    @classmethod
    def resolve(cls, server_cpus=None, client_cpus=None, allow_overlap: bool = False) -> "Pinning":
        """Disjoint CPUs from the machine (system.default_pinning) where not given;
        given ones are checked.  Overlap is refused where two CPUs exist, unless
        allowed (then it is noted)."""
        default_server, default_client, note = system.default_pinning()
        server = sorted(system.check_cpus(server_cpus)) if server_cpus is not None else default_server
        client = sorted(system.check_cpus(client_cpus)) if client_cpus is not None else default_client
        shared = sorted(set(server) & set(client))
        if shared and len(system.usable_cpus()) > 1:
            if not allow_overlap:
                raise LabError(f"server CPUs {server} and client CPUs {client} overlap on {shared}",
                               "pin the server and the client to different CPUs, "
                               "e.g. server_cpus=[0], client_cpus=[1]")
            note = note or f"server CPUs {server} and client CPUs {client} overlap, so the results mix both"
        elif shared:
            note = note or ("only one CPU: server and client share it, so the client's work "
                            "is counted against the server's time")
        return cls(server, client, note, from_machine=server_cpus is None and client_cpus is None)


def _check_cpus(cpus) -> list[int] | None:
    if cpus is None:
        return None
    if isinstance(cpus, int):
        cpus = [cpus]
    return sorted(system.check_cpus(list(cpus)))


# ---------------------------------------------------------------------------
# checks made before starting anything


def _port_owner(port: int) -> str:
    import psutil

    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid:
                    try:
                        return f"{psutil.Process(conn.pid).name()} (pid {conn.pid})"
                    except psutil.Error:
                        return f"pid {conn.pid}"
                return "a process this user cannot see"
    except psutil.AccessDenied:
        pass
    return "another process"


def _port_in_use(port: int) -> LabError:
    return LabError(f"port {port} is in use by {_port_owner(port)}",
                    "use port=0 to let the system choose a free port, or stop that process")


def _check_port_free(port: int) -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Servers set SO_REUSEADDR too, so a TIME_WAIT leftover is not "busy".
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("0.0.0.0", port))
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        raise _port_in_use(port) from None
    finally:
        probe.close()


def open_files_problem(clients: int, idle: int, limit: int) -> LabError | None:
    """The LabError for `clients` + `idle` connections under an open-file `limit`
    (saying how many would fit), or None when they fit."""
    want = clients + idle + FD_MARGIN
    if limit == resource.RLIM_INFINITY or want <= limit:
        return None
    fits = max(limit - FD_MARGIN, 0)
    raise_it = ", or raise the limit (`ulimit -n` before starting Jupyter, or /etc/security/limits.conf)"
    if idle:
        return LabError(f"{clients} clients + {idle} idle connections need about {want} open files, "
                        f"but the limit is {limit}",
                        f"use at most {max(fits - clients, 0)} idle connections beside {clients} clients" + raise_it)
    return LabError(f"{clients} clients need about {want} open files, but the limit is {limit}",
                    f"use at most {fits} clients" + raise_it)


def ensure_nofile(clients: int, idle: int = 0) -> None:
    """Raise the soft open-file limit for `clients` + `idle` connections (children
    inherit it), or refuse them, saying how many would fit."""
    problem = open_files_problem(clients, idle, system.raise_nofile(clients + idle + FD_MARGIN))
    if problem:
        raise problem


# ---------------------------------------------------------------------------
# servers


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
            argv += _flag_words(flag, value)
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

    def stop(self, timeout: float = 1.0) -> int:
        """SIGTERM, wait up to `timeout`, then SIGKILL the group; the exit code."""
        if self.returncode is not None:  # already stopped
            return self.returncode
        self.returncode, killed = launcher.stop_child(self._child, timeout)
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
    cpus = _check_cpus(cpus)
    if port:
        _check_port_free(port)
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
        raise _port_in_use(server.port)
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


# ---------------------------------------------------------------------------
# the load generator


@dataclass(frozen=True)
class LoadSpec:
    """What the load generator does: `loadgen --clients N --service S --timeout T
    [--requests R] [--<option> <value> ...]`, and how to read what it prints."""

    clients: int
    requests: int = 1  # per connection; an open loop (a `duration` option) runs for its duration instead
    service: str = "top"
    options: dict = field(default_factory=dict)  # loadgen's other flags: k, size, engine, rate, duration, warmup, idle
    timeout: float = 60.0  # bounds each exchange inside loadgen
    sanitize: bool = False

    @property
    def idle(self) -> int:
        return int(self.options.get("idle") or 0)

    def check(self) -> None:
        if self.clients < 1 or self.requests < 1:
            raise LabError(f"clients and requests must be at least 1 (got {self.clients}, {self.requests})",
                           "use 1 or more clients, each sending 1 or more requests")

    def argv(self, port: int, host: str = "127.0.0.1") -> list[str]:
        argv = [str(build.binary(build.LOADGEN, sanitize=self.sanitize)), "--port", str(port),
                "--host", host, "--clients", str(self.clients), "--service", self.service,
                "--timeout", exact(self.timeout)]
        if self.options.get("duration") is None:
            argv += ["--requests", str(self.requests)]
        for flag, value in self.options.items():
            argv += _flag_words(flag, value)
        return argv

    def wall_limit(self) -> float:
        """How long the whole run may take: the open loop's duration, or for a closed
        loop the exchanges at a pessimistic 1,000 per second and their bodies at
        50 MB/s, plus connecting and one exchange timeout."""
        connecting = (self.clients + self.idle) / 1000.0
        duration = self.options.get("duration")
        if duration:
            return float(duration) + connecting + self.timeout
        exchanges = self.clients * self.requests
        body_bytes = exchanges * int(self.options.get("size") or 0) if self.service != "top" else 0
        return exchanges / 1000.0 + body_bytes / PESSIMISTIC_BYTES_PER_S + connecting + self.timeout

    @staticmethod
    def summary(stdout: bytes, stderr: str, returncode: int) -> dict:
        """loadgen's one JSON object; a LabError when it refused its arguments (every point
        would), ClientFailed when it ended without one (this run broke down)."""
        if returncode == 2:
            raise LabError(f"the load generator refused its arguments: {stderr.strip()}",
                           "check the client parameters (clients, requests, service, k, size)")
        try:
            summary = json.loads(stdout)
            if not isinstance(summary, dict):
                raise ValueError("not a JSON object")
            return summary
        except ValueError:
            raise ClientFailed(
                f"the load generator exited with status {returncode} without its JSON summary\n"
                f"--- its stderr ---\n{stderr.strip()[-2000:] or '(empty)'}",
                "read the message above; a crash here is a bug in csrc/loadgen",
            ) from None


@dataclass
class ClientRun:
    """One run of the load generator."""

    summary: dict
    counters: dict
    counters_source: str  # "perf", or "rusage" when perf could not count
    cpus: list[int] | None
    returncode: int
    stderr: str
    wall_s: float
    note: str = field(default="")


def run_load(load: LoadSpec, port: int, cpus=None, events=None, host: str = "127.0.0.1",
             prefix: list[str] = ()) -> ClientRun:
    """Run the load generator pinned to `cpus` under `perf stat` (its counters, or
    getrusage's without perf) against `host:port`.

    Past load.wall_limit() + CLIENT_WALL_MARGIN_S the client's process group is
    killed and ClientFailed raised (as it is when the generator ends without its
    summary); arguments it refuses are a plain LabError."""
    from . import perf

    load.check()
    cpus = _check_cpus(cpus)
    ensure_nofile(load.clients, load.idle)
    # Under perf, loadgen is perf's child, not ours: it gets its own death signal.
    command = launcher.death_signal_prefix() + load.argv(port, host)
    wall_limit = load.wall_limit() + CLIENT_WALL_MARGIN_S
    # perf's counts go to an unlinked file: nothing is left on disk even if we are killed.
    with tempfile.TemporaryFile(prefix="labkit-client-perf-") as perf_output:
        wrapped = perf.wrap_command(command, perf_output, events)
        under_perf = wrapped != command
        started = time.monotonic()
        child = launcher.spawn(wrapped, "client", cpus, prefix=prefix, pass_fds=(perf_output.fileno(),),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            used_cpus = sorted(os.sched_getaffinity(child.pid))  # read back: what it really got
        except OSError:  # already finished
            used_cpus = cpus
        try:
            stdout, stderr = launcher.run_to_end(child, wall_limit)
        except subprocess.TimeoutExpired:
            raise ClientFailed(
                f"the load generator ran longer than {wall_limit:g} s and was killed",
                "give it a larger timeout, or fewer clients or requests",
            ) from None
        wall_s = time.monotonic() - started
        stderr_text = stderr.decode("utf-8", "replace")
        summary = LoadSpec.summary(stdout, stderr_text, child.popen.returncode)
        note = ""
        if under_perf:
            counted = perf.read_output(perf_output, events)
            # Where perf could not count (context switches at paranoid 2), getrusage can.
            counters = perf.fill_missing(counted, perf.rusage_counters(summary["rusage"]))
            source = "perf"
            filled = [e for e in counters if not math.isnan(counters[e]) and math.isnan(counted[e])]
            if filled:
                note = f"client {', '.join(filled)} from the load generator's getrusage (perf could not count them)"
        else:
            counters = perf.rusage_counters(summary["rusage"])
            source = "rusage"
            note = "perf could not count the client; its counters come from the load generator's getrusage"
    return ClientRun(summary, counters, source, used_cpus, child.popen.returncode, stderr_text, wall_s, note)
