"""Waiting on a condition, never for a fixed time: the suite's one way to wait.

    wait_for(lambda: server.workers(), what="the workers")   # its truthy value, or AssertionError
    wait_until(lambda: port_is_free(port), within=5)          # its last value: the caller asserts

Each asks `condition()` every `every` seconds until it is truthy or `within` seconds have
passed, and once more at the end (a condition that came true during the last sleep counts).
    settled(lambda: len(server.chunks[0]), quiet=0.1)         # a value that stopped changing
    exit_status(proc, within=1.0)                             # a Popen's status, or None
    where_they_sleep(proc.pid)                                # what a stuck process's report says

The conditions several tests wait on live here too:
    port_is_free(port)                                        # a new server could listen there
A free port for a test's own server is labkit.bench.free_port.
"""

import socket
import subprocess
import time
from pathlib import Path

from labkit import busy_machine


def wait_until(condition, within: float, every: float = 0.05):
    """`condition()`'s first truthy value within `within` seconds, or its last value."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    return condition()


def wait_for(condition, within: float = 3.0, what: str = "the condition", every: float = 0.01):
    """`condition()`'s first truthy value within `within` seconds; AssertionError naming `what` if none."""
    value = wait_until(condition, within, every)
    if not value:
        raise AssertionError(f"{what}: not within {within:g} s")
    return value


def settled(read, quiet: float = 0.1, within: float = 5.0, every: float = 0.01):
    """`read()` once it has stayed the same for `quiet` seconds (a server that stopped
    sending, a counter that stopped moving); AssertionError if it still changes after `within`."""
    deadline = time.monotonic() + within
    value, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(every)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return value
    raise AssertionError(f"still changing after {within:g} s (last {value!r})")


def exit_status(proc: subprocess.Popen, within: float, cap: float = 10.0) -> int | None:
    """`proc`'s exit status once it has ended within `within` s, not counting time a busy
    machine held it back (labkit.busy_machine.exit_status: up to `cap` s in all); None if it has not."""
    return busy_machine.exit_status(proc, within, cap)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """A new server could listen on `host`:`port` (with SO_REUSEADDR, as the lab's servers
    bind: a closed connection lingering in TIME_WAIT holds nothing); "0.0.0.0" asks for
    every address at once."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def where_they_sleep(pid: int) -> str:
    """`pid`'s and its descendants' state, the kernel function each sleeps in and its signal
    masks (/proc/PID/status, /proc/PID/wchan), a line each: what a stuck server's report needs."""
    lines = []
    for each in busy_machine.tree(pid):
        try:
            status = dict(line.split(":\t", 1) for line in Path(f"/proc/{each}/status").read_text().splitlines()
                          if ":\t" in line)
            wchan = Path(f"/proc/{each}/wchan").read_text()
        except (FileNotFoundError, ProcessLookupError):
            lines.append(f"  pid {each}: gone")
            continue
        shown = " ".join(f"{key}={status.get(key, '?').strip()}"
                         for key in ("Name", "State", "PPid", "SigPnd", "ShdPnd", "SigBlk", "TracerPid"))
        lines.append(f"  pid {each}: {shown} wchan={wchan or '0'}")
    return "\n".join(lines)
