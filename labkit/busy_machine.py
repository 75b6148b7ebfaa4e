"""Whether a process that is late was held back by the machine, or by itself.

A bound such as "exits within 1 s of SIGTERM" or "answers within 5 s" is a promise about
the server's own work.  On a shared, busy machine the scheduler may keep the server off
every CPU for part of that time, and a bound of wall-clock time then fails a correct
server.  So a wait that runs out asks one more question before it calls the server stuck:
in the next moment (WINDOW), did any thread of the server, or of the processes it started,
run, wait on a run queue for a CPU, or end (its counts end with it), or is it in the kernel
in uninterruptible sleep ("D": waiting on the machine, a disk, memory reclaim, a kernel lock
other processes hold; a sanitized server that had exited on SIGTERM was seen there, freeing
its address space in unlink_file_vma_batch_process, past its 1 s on a busy machine)?  A
server blocked on a read, or on a lock of its own, or sleeping on a timer, does none of these
and is stuck; one that is computing, or is waiting its turn, is given the bound again, up to
a cap of wall-clock time.

The kernel counts both per thread: /proc/PID/task/TID/schedstat holds the nanoseconds the
thread has run and the nanoseconds it has spent runnable, waiting for a CPU (sum_exec_runtime
and run_delay, proc_pid_schedstat in fs/proc/base.c).  A kernel without sched_info
(CONFIG_SCHED_INFO) prints "0 0 0" there: nothing is then held back, and a bound is wall
time as before (tests/machine/test_busy_machine.py checks this machine counts the wait).  A hypervisor
that takes the CPUs away from the whole machine shows as steal time in /proc/stat instead,
and counts too.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable

WINDOW = 0.5        # s: how long a late process is watched before it is called stuck
HELD_NS = 1_000_000  # ns of running or of waiting for a CPU, in WINDOW, that say "held back, not stuck"


def tree(pid: int) -> list[int]:
    """`pid` and its descendants, now."""
    import psutil

    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return [pid]


def _tasks(pid: int) -> list[str]:
    """/proc paths of every thread of `pid` and of its descendants, now."""
    found = []
    for each in tree(pid):
        try:
            found += [f"/proc/{each}/task/{tid}" for tid in os.listdir(f"/proc/{each}/task")]
        except OSError:
            pass
    return found


def _schedstat(task: str) -> tuple[int, int]:
    try:
        with open(f"{task}/schedstat") as f:
            ran, waited, _ = f.read().split()
        return int(ran), int(waited)
    except (OSError, ValueError):
        return 0, 0


def schedstats(pid: int) -> dict[str, tuple[int, int]]:
    """{thread's /proc path: (ns it ran, ns it waited runnable for a CPU)} for every thread of
    `pid` and of its descendants, now ((0, 0) for one that ended as it was read)."""
    return {task: _schedstat(task) for task in _tasks(pid)}


def _state(task: str) -> str:
    """The thread's state letter (/proc/PID/task/TID/stat's third field: R, S, D, ...)."""
    try:
        with open(f"{task}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def steal_ticks() -> int:
    """Time the hypervisor took from this machine's CPUs so far, all CPUs together
    (/proc/stat's first line, its eighth value, in USER_HZ ticks; 0 on bare metal)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) if len(fields) > 8 else 0


def _steal_ns() -> int:
    """Time the hypervisor took from this machine's CPUs, per CPU (ns)."""
    return steal_ticks() * 1_000_000_000 // (os.sysconf("SC_CLK_TCK") * (os.cpu_count() or 1))


def held_back(pid: int, window: float = WINDOW) -> bool:
    """Whether, over the next `window` s, a thread of `pid` (or of its descendants) ran or
    waited for a CPU, or the machine was stolen from: the process is working or waiting its
    turn, not stuck.  False for a process that is gone."""
    before = schedstats(pid)
    steal = _steal_ns()
    time.sleep(window)
    if _steal_ns() - steal >= window * 1e9 / 10:  # the hypervisor took a tenth of the window or more
        return True
    after = _tasks(pid)
    if set(before) - set(after):  # a thread or child ended in the window: at work, its CPU gone with it
        return True
    if any(_state(task) == "D" for task in after):  # in the kernel, waiting on the machine
        return True
    for task in after:
        ran, waited = _schedstat(task)
        ran0, waited0 = before.get(task, (0, 0))
        if (ran - ran0) + (waited - waited0) >= HELD_NS:
            return True
    return False


def patiently(done: Callable[[float], bool], pid: int, within: float, cap: float) -> bool:
    """Wait for done(seconds) -- which itself waits up to `seconds` -- to say True: up to
    `within` s, and again each time the process `pid` turns out held back rather than stuck,
    up to `cap` s of wall-clock time in all.  Whether it was done."""
    start = time.monotonic()
    if done(within):
        return True
    while time.monotonic() - start < cap:
        if not held_back(pid):
            return done(0)
        if done(min(within, max(0.0, cap - (time.monotonic() - start)))):
            return True
    return False


def exit_status(popen: subprocess.Popen, within: float, cap: float = 10.0) -> int | None:
    """`popen`'s exit status once it has ended: up to `within` s of waiting, and again while
    it is held back rather than stuck (patiently), up to `cap` s; None if it has not."""
    def exited(seconds: float) -> bool:
        try:
            popen.wait(timeout=seconds) if seconds > 0 else popen.poll()
        except subprocess.TimeoutExpired:
            pass
        return popen.returncode is not None

    patiently(exited, popen.pid, within, cap)
    return popen.returncode
