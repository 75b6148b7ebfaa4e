"""Start and stop pinned servers, run the pinned client; nothing outlives its owner.

Every child labkit starts:
  * is pinned with sched_setaffinity in the child before exec, so it runs on
    its CPUs from its first instruction;
  * lives in its own session (and so its own process group), so stopping it
    stops whatever it forked too;
  * gets PR_SET_PDEATHSIG(SIGKILL): if the Python kernel is killed with -9,
    the kernel's death kills the child as well;
  * is recorded in a module registry and in a pid file under build/run/
    (for `labkit doctor --clean` after a crash), both removed when it stops.
Normal exit (atexit) and SIGTERM stop everything still registered.

The kernel delivers the death signal when the THREAD that started the child
ends, not the process: start a child from the thread that outlives it (a
widget running a sweep in a background thread keeps that thread until the
sweep is over).
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import json
import os
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import build, paths
from .errors import LabError, ServerFailed

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: a forked child should not load libraries

# Room for the load generator's own descriptors (stdio, perf, epoll...) above one per client.
FD_MARGIN = 32
# How long past its own --timeout the client may run before it is killed.
CLIENT_WALL_MARGIN_S = 10.0

_registry: dict[int, "Child"] = {}
_registry_lock = threading.Lock()
_handlers_installed = False


# ---------------------------------------------------------------------------
# children: launch, register, kill


def _child_setup(cpus: list[int] | None, parent_pid: int):
    """The function Popen runs in the child between fork and exec."""

    def setup() -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


@dataclass
class Child:
    """A process labkit started, as the registry and the pid file know it."""

    popen: subprocess.Popen
    role: str
    pid_file: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)  # pgid == pid: each child leads its own session
        except ProcessLookupError:
            pass

    def forget(self) -> None:
        with _registry_lock:
            _registry.pop(self.pid, None)
        self.pid_file.unlink(missing_ok=True)


def spawn(argv: list[str], role: str, cpus: list[int] | None, **popen_args) -> Child:
    """Start `argv` pinned to `cpus`, in its own session, with the death signal,
    registered for clean-up: every process labkit starts goes through here."""
    _install_handlers()
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_child_setup(cpus, os.getpid()),
        **popen_args,
    )
    child = Child(popen, role, paths.RUN_DIR / f"{popen.pid}.json")
    with _registry_lock:
        _registry[popen.pid] = child  # first: from here on stop_all() and atexit cover it
    try:
        paths.RUN_DIR.mkdir(parents=True, exist_ok=True)
        child.pid_file.write_text(json.dumps({
            "pid": popen.pid,
            "pgid": popen.pid,
            "role": role,
            "argv": argv,
            "owner_pid": os.getpid(),
            "started": time.time(),
        }))
    except BaseException:
        stop_child(child, timeout=0.2)
        raise
    return child


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_child(child: Child, timeout: float) -> tuple[int, bool]:
    """SIGTERM, wait, then SIGKILL the group. Returns (exit code, had to kill)."""
    popen = child.popen
    killed = False
    if popen.poll() is None:
        try:
            popen.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill_group()
            killed = True
            popen.wait()
    # Whatever the leader forked and left behind in its group goes too.
    if _group_alive(child.pid):
        child.kill_group()
    child.forget()
    return popen.returncode, killed


def stop_all(keep=()) -> None:
    """Stop every process labkit started in this Python process, except the pids in `keep`."""
    with _registry_lock:
        children = [child for pid, child in _registry.items() if pid not in keep]
    for child in children:
        stop_child(child, timeout=1.0)


def live_children() -> list[int]:
    """Pids of the children this process started that are still running."""
    with _registry_lock:
        children = list(_registry.values())
    return [child.pid for child in children if child.popen.poll() is None]


def _on_sigterm(previous):
    def handler(signum, frame):
        stop_all()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    return handler


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    atexit.register(stop_all)
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)
        if previous not in (signal.SIG_IGN,):
            signal.signal(signal.SIGTERM, _on_sigterm(previous))
    _handlers_installed = True


# ---------------------------------------------------------------------------
# checks made before starting anything


def _check_cpus(cpus) -> list[int] | None:
    if cpus is None:
        return None
    if isinstance(cpus, int):
        cpus = [cpus]
    from . import system

    system.check_cpus(list(cpus))
    return sorted(int(cpu) for cpu in cpus)


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


def _check_port_free(port: int) -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Servers set SO_REUSEADDR too, so a TIME_WAIT leftover is not "busy".
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("0.0.0.0", port))
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        raise LabError(
            f"port {port} is in use by {_port_owner(port)}",
            "use port=0 to let the system choose a free port, or stop that process",
        ) from None
    finally:
        probe.close()


def ensure_nofile(clients: int, idle: int = 0) -> None:
    """Refuse a client count (active + idle connections) the open-file limit cannot
    hold, after trying to raise it; the message says how many would fit."""
    from . import system

    want = clients + idle + FD_MARGIN
    limit = system.raise_nofile(want)  # never lowers it; children inherit the new limit
    if limit != resource.RLIM_INFINITY and limit < want:
        fits = max(limit - FD_MARGIN, 0)
        if idle:
            what = f"{clients} clients + {idle} idle connections need about {want} open files, but the limit is {limit}"
            fix = f"use at most {fits} connections in all (at most {max(fits - clients, 0)} idle beside {clients} clients)"
        else:
            what = f"{clients} clients need about {want} open files, but the limit is {limit}"
            fix = f"use at most {fits} clients"
        raise LabError(what, fix + ", or raise the limit "
                       "(`ulimit -n` before starting Jupyter, or /etc/security/limits.conf)")


# ---------------------------------------------------------------------------
# servers


class Server:
    """A running server model, pinned, ready to accept connections."""

    def __init__(self, child: Child, model: str, service: str, port: int, cpus, argv, stderr_file):
        self._child = child
        self._stderr = stderr_file
        self._stdout_tail = bytearray()
        self.model = model
        self.service = service
        self.pid = child.pid
        self.port = port
        self.cpus = cpus
        self.argv = argv
        self.returncode: int | None = None
        self.note = ""

    def alive(self) -> bool:
        return self._child.popen.poll() is None

    def stderr_text(self) -> str:
        """Everything the server wrote to stderr so far."""
        fd = self._stderr.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")

    def stop(self, timeout: float = 1.0) -> int:
        """SIGTERM, wait up to `timeout`, then SIGKILL the group; the exit code."""
        if self.returncode is not None:  # already stopped
            return self.returncode
        self.returncode, killed = stop_child(self._child, timeout)
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


_has_workers: dict[Path, bool] = {}


def has_workers(model: str, sanitize: bool = False) -> bool:
    """Whether `model` takes --workers (its --help says so)."""
    executable = build.binary(model, sanitize=sanitize)
    if executable not in _has_workers:
        usage = subprocess.run([str(executable), "--help"], capture_output=True, text=True, timeout=5)
        _has_workers[executable] = "--workers" in usage.stdout + usage.stderr
    return _has_workers[executable]


def start_server(model: str, service: str = "top", cpus=None, port: int = 0, workers: int | None = None,
                 sanitize: bool = False, ready_timeout: float = 5.0) -> Server:
    """Start `model` pinned to `cpus`; return once it prints `listening <port>`."""
    executable = build.binary(model, sanitize=sanitize)
    cpus = _check_cpus(cpus)
    if port:
        _check_port_free(port)
    argv = [str(executable), "--port", str(port), "--service", service]
    if workers is not None:
        argv += ["--workers", str(workers)]
    # stderr goes to an unlinked file, read with pread: a sanitizer report of
    # any size is kept, and the server never blocks on a pipe nobody reads.
    stderr_file = tempfile.TemporaryFile(prefix=f"labkit-{model}-", dir=None)
    child = spawn(argv, "server", cpus, stdout=subprocess.PIPE, stderr=stderr_file)
    server = Server(child, model, service, port, None, argv, stderr_file)
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
    threading.Thread(target=_drain, args=(child.popen.stdout, server._stdout_tail), daemon=True).start()
    return server


def _start_failed(server: Server, line: bytes, ready_timeout: float):
    alive = server.alive()
    server.stop(timeout=0.2)
    stderr = server.stderr_text().strip()
    if server.port and "in use" in stderr.lower():
        raise LabError(
            f"port {server.port} is in use by {_port_owner(server.port)}",
            "use port=0 to let the system choose a free port, or stop that process",
        )
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
# the client


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


def _loadgen_argv(port, clients, requests, service, k, size, timeout, host, sanitize, load) -> list[str]:
    argv = [str(build.binary(build.LOADGEN, sanitize=sanitize)),
            "--port", str(port), "--clients", str(clients), "--service", service, "--k", str(k),
            "--timeout", f"{timeout:g}"]
    if load.get("duration") is None:  # an open loop runs for its duration instead
        argv += ["--requests", str(requests)]
    if size is not None:
        argv += ["--size", str(size)]
    for flag, value in load.items():
        if value is not None:
            argv += [f"--{flag}", f"{value:g}" if isinstance(value, float) else str(value)]
    return argv + ["--host", host]


def _with_death_signal(command: list[str]) -> list[str]:
    """Under perf, loadgen is perf's child, not ours: give it its own death signal
    (setpriv, util-linux) so a killed kernel takes it down with perf."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *command] if setpriv else command


def run_client(port: int, clients: int, requests: int, service: str = "top", k: int = 2, size=None,
               cpus=None, timeout: float = 30.0, events=None, sanitize: bool = False,
               host: str = "127.0.0.1", engine: str | None = None, rate: float | None = None,
               duration: float | None = None, warmup: str | None = None, idle: int = 0,
               wall_timeout: float | None = None) -> ClientRun:
    """Run loadgen pinned to `cpus` under `perf stat` (its counters, or getrusage's without perf).

    `timeout` bounds each exchange inside loadgen; `wall_timeout` (default
    `timeout`) bounds the whole run from here: past wall_timeout +
    CLIENT_WALL_MARGIN_S the client's process group is killed and LabError
    raised.  `engine`, `rate`, `duration`, `warmup` and `idle` are loadgen's
    flags of the same names (None: loadgen's default; `idle` connections are
    held open and silent beside the active ones).
    """
    from . import perf

    if clients < 1 or requests < 1:
        raise LabError(f"clients and requests must be at least 1 (got {clients}, {requests})",
                       "use 1 or more clients, each sending 1 or more requests")
    cpus = _check_cpus(cpus)
    ensure_nofile(clients, idle)
    load = {"engine": engine, "rate": rate, "duration": duration, "warmup": warmup, "idle": idle or None}
    command = _with_death_signal(_loadgen_argv(port, clients, requests, service, k, size, timeout, host,
                                               sanitize, load))
    wall_limit = (wall_timeout or timeout) + CLIENT_WALL_MARGIN_S
    with tempfile.TemporaryDirectory(prefix="labkit-client-") as scratch:
        perf_output = Path(scratch) / "perf.csv"
        wrapped = perf.wrap_command(command, perf_output, events)
        under_perf = wrapped != command
        started = time.monotonic()
        child = spawn(wrapped, "client", cpus, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            used_cpus = sorted(os.sched_getaffinity(child.pid))  # read back: what it really got
        except OSError:  # already finished
            used_cpus = cpus
        try:
            stdout, stderr = child.popen.communicate(timeout=wall_limit)
        except subprocess.TimeoutExpired:
            child.kill_group()
            child.popen.communicate()
            raise LabError(
                f"the load generator ran longer than {wall_limit:g} s and was killed",
                "give it a larger timeout, or fewer clients or requests",
            ) from None
        except BaseException:  # KeyboardInterrupt included: nothing may survive the cell
            child.kill_group()
            child.popen.wait()
            raise
        finally:
            if child.popen.poll() is not None:
                if _group_alive(child.pid):
                    child.kill_group()
                child.forget()
        wall_s = time.monotonic() - started
        stderr_text = stderr.decode("utf-8", "replace")
        summary = _parse_summary(stdout, stderr_text, child.popen.returncode)
        note = ""
        if under_perf:
            counted = perf.read_output(perf_output, events)
            # Where perf could not count (context switches at paranoid 2), getrusage can.
            counters = perf.fill_missing(counted, perf.rusage_counters(summary["rusage"]))
            source = "perf"
            filled = [e for e in counters if counters[e] == counters[e] and counted[e] != counted[e]]
            if filled:
                note = f"client {', '.join(filled)} from the load generator's getrusage (perf could not count them)"
        else:
            counters = perf.rusage_counters(summary["rusage"])
            source = "rusage"
            note = "perf could not count the client; its counters come from the load generator's getrusage"
    return ClientRun(summary, counters, source, used_cpus, child.popen.returncode, stderr_text, wall_s, note)


def _parse_summary(stdout: bytes, stderr: str, returncode: int) -> dict:
    if returncode == 2:
        raise LabError(f"the load generator refused its arguments: {stderr.strip()}",
                       "check the client parameters (clients, requests, service, k, size)")
    try:
        summary = json.loads(stdout)
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
        return summary
    except ValueError:
        raise LabError(
            f"the load generator exited with status {returncode} without its JSON summary\n"
            f"--- its stderr ---\n{stderr.strip()[-2000:] or '(empty)'}",
            "read the message above; a crash here is a bug in csrc/loadgen",
        ) from None
