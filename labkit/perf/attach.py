"""Counting a process: perf stat attached to a running server (its whole worker
tree too), perf stat wrapped around a client, and /proc when perf cannot count.

perf is started through labkit.launcher like every other process: its own
session, the death signal, a pid file (role "perf") that `labkit doctor
--clean` reads after a crash.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from labkit import launcher
from labkit.errors import LabError
from labkit.perf.parse import (DEFAULT_EVENTS, NAN, NOT_MEASURABLE, SOFTWARE_EVENTS, Reading, complete, parse_stat_csv,
                               parse_stat_csv_detail)
from labkit.perf.probe import PerfProbe, countable, perf_env, probe


def _log_to(output) -> list[str]:
    """perf stat's flags that send its counts to `output`: a path (-o), or an open file
    (--log-fd; the process started must be given the descriptor with pass_fds)."""
    return ["--log-fd", str(output.fileno())] if hasattr(output, "fileno") else ["-o", str(output)]


def _read_log(output) -> str:
    if hasattr(output, "fileno"):
        fd = output.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")
    try:
        return Path(output).read_text()
    except FileNotFoundError:
        return ""


def wrap_command(cmd: list[str], output, events=None) -> list[str]:
    """`perf stat ... -- cmd` writing its counts to `output`, or cmd unchanged when perf
    is not usable here.  `output` is a path, or an open file: an unlinked one
    (tempfile.TemporaryFile) leaves nothing on disk even when its owner is killed.

    The command runs with LC_ALL=C (perf's CSV must have decimal points).
    """
    found = probe()
    can, _ = countable(events, found)
    if not found.usable or not can:
        return list(cmd)
    return ["env", "LC_ALL=C", found.path, "stat", "-x,", "--no-big-num", *_log_to(output),
            "-e", ",".join(can), "--", *cmd]


def read_output(output, events=None) -> dict[str, float]:
    """The counters perf wrote to `output` (see wrap_command); NaN for every event not
    measured, and all NaN when there is nothing (perf was not usable)."""
    requested = list(events) if events is not None else list(DEFAULT_EVENTS)
    return complete(parse_stat_csv(_read_log(output)), requested)


def _perf_event_fds(pid: int) -> int:
    """How many perf_event descriptors process `pid` holds (one per event and thread)."""
    count = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]":
                    count += 1
            except OSError:
                pass
    except OSError:
        pass
    return count


def _waiting_for_events(pid: int) -> bool:
    """perf stat sleeps in poll() once its counters are open and enabled."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read().strip()
    except (OSError, IndexError):
        return False
    if wchan in ("", "0"):  # kernels that hide wchan: sleeping is the best sign we have
        return state == "S"
    # perf 6.x waits in poll(); older versions in nanosleep() or pause()
    return state == "S" and any(w in wchan for w in ("poll", "nanosleep", "sigsuspend", "pause"))


def perf_is_ready(perf_pid: int, descriptors: int) -> bool:
    """Whether perf (stat or record) holds at least `descriptors` perf_event descriptors and
    sleeps waiting for events: its counters or samplers are open and enabled."""
    return _perf_event_fds(perf_pid) >= descriptors and _waiting_for_events(perf_pid)


def _thread_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 1


# --- the /proc fallback -----------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_snapshot(pid: int) -> dict[str, float] | None:
    """CPU time, faults and context switches of a whole process, from /proc; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            after_name = f.read().rpartition(")")[2].split()
        # Fields counted from 1 in proc(5); after_name[0] is field 3 (state).
        minflt, majflt = int(after_name[10 - 3]), int(after_name[12 - 3])
        utime, stime = int(after_name[14 - 3]), int(after_name[15 - 3])
    except (OSError, IndexError, ValueError):
        return None
    switches = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tasks = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        switches += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass  # a thread that exits while we read
    return {
        "task-clock": (utime + stime) * 1000.0 / CLOCK_TICKS,
        "page-faults": float(minflt + majflt),
        "context-switches": float(switches),
    }


def _difference(before: dict | None, after: dict | None) -> dict[str, float]:
    if before is None or after is None:
        return {}
    return {k: after[k] - before[k] for k in before}


PROC_NOTE = ("counters from /proc: task-clock from utime+stime (resolution {tick:.0f} ms), "
             "page-faults from minflt+majflt, context-switches summed over the threads alive "
             "at the end (threads that exited lose theirs); cpu-migrations and hardware "
             "events not measurable on this machine")


class Attached:
    """perf stat attached to a running process; on exit, .counters holds what it counted.

        with perf.attach(server.pid) as counting:
            run_the_clients()
        counting.counters   # {event: value}, every requested event, NaN = not measurable
        counting.seconds    # how long it counted (the server's CPUs utilized divide by it)
        counting.source     # "perf" or "proc"
        counting.note       # what was not measurable, in words

    Threads the process creates after attaching are counted (perf's counters are
    inherited by new threads; tested in tests/measurement/test_perf.py).  Note that the
    kernel's death signal follows the THREAD that started perf: attach from the
    thread that lives as long as the measurement.
    """

    def __init__(self, pid: int, events=None, probe: PerfProbe | None = None,
                 attach_timeout: float = 5.0, stop_timeout: float = 5.0):
        self.pid = int(pid)
        self.events = list(events) if events is not None else list(DEFAULT_EVENTS)
        self.found = probe
        self.attach_timeout = attach_timeout
        self.stop_timeout = stop_timeout
        self.counters: dict[str, float] = complete({}, self.events)
        self.readings: dict[str, Reading] = {}
        self.source = "proc"
        self.note = ""
        self.attach_seconds: float | None = None
        self.seconds = NAN  # how long it counted: perf's "CPUs utilized" is task-clock over this
        self._since: float | None = None
        self._until: float | None = None  # when interrupt() told perf to stop
        self._perf: launcher.Child | None = None
        self._output = None  # the unlinked file perf writes its counts to
        self._before: dict | None = None
        self._notes: list[str] = []

    # -- starting ------------------------------------------------------------
    def start(self) -> "Attached":
        if not os.path.exists(f"/proc/{self.pid}"):
            raise LabError(f"process {self.pid} does not exist, so perf cannot attach to it",
                           "start the server first and pass its pid")
        found = self.found or probe()
        can, _ = countable(self.events, found)
        self._notes = []
        self._since = time.monotonic()  # perf counts from its start to its stop: the window is that
        self._until = None
        if found.usable and can:
            self._start_perf(found, can)
        elif not found.usable and found.problem:
            self._notes.append(f"perf not used ({found.problem})")
        self._before = proc_snapshot(self.pid)
        return self

    def _start_perf(self, found: PerfProbe, events: list[str]) -> None:
        # An unlinked file: nothing is left on disk even when our process is killed.
        self._output = tempfile.TemporaryFile(prefix="labkit-perf-")
        cmd = [found.path, "stat", "-x,", "--no-big-num", *_log_to(self._output),
               "-e", ",".join(events), "-p", str(self.pid)]
        started = time.monotonic()
        self._perf = launcher.spawn(cmd, "perf", None, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, env=perf_env(), pass_fds=(self._output.fileno(),))
        # perf opens one descriptor per event and per thread that exists now;
        # threads created later inherit the counters without new descriptors.
        threads_before = _thread_count(self.pid)
        deadline = started + self.attach_timeout
        while time.monotonic() < deadline:
            if not self._perf.alive():
                break
            wanted = len(events) * min(threads_before, _thread_count(self.pid))
            if perf_is_ready(self._perf.pid, wanted):
                self.attach_seconds = time.monotonic() - started
                self.source = "perf"
                return
            time.sleep(0.002)
        # perf exited or never got ready: stop it and count from /proc instead.
        stderr = self._stop_perf()
        self._forget_output()
        if not os.path.exists(f"/proc/{self.pid}"):
            raise LabError(f"process {self.pid} exited before perf could attach",
                           "check that the server stays up (run it by hand to see its errors)")
        why = stderr.strip().splitlines()[0] if stderr.strip() else \
            f"not attached within {self.attach_timeout:.0f} s"
        self._notes.append(f"perf could not attach ({why}); counters from /proc")

    # -- stopping ------------------------------------------------------------
    def _stop_perf(self) -> str:
        """SIGINT perf (it then writes its counts), bounded; returns its stderr."""
        perf, self._perf = self._perf, None
        if perf is None:
            return ""
        _, killed = launcher.stop_child(perf, self.stop_timeout, signal.SIGINT)
        if killed:
            self._notes.append(f"perf did not stop within {self.stop_timeout:.0f} s and was killed")
        return perf.popen.stderr.read() if perf.popen.stderr else ""

    def interrupt(self) -> None:
        """Tell perf to stop counting now, without waiting for it: stop() then collects
        its counts.  perf closes its events before it exits, and closing a tracepoint
        event waits for the kernel to unregister it (40-50 ms each here, 1 s for the 25
        system calls counted by name): perfs interrupted together close theirs at once."""
        if self._perf is not None and self._until is None and self._perf.alive():  # once
            self._until = time.monotonic()
            self._perf.popen.send_signal(signal.SIGINT)

    def _forget_output(self) -> None:
        if self._output is not None:
            self._output.close()
            self._output = None

    def stop(self) -> dict[str, float]:
        after = proc_snapshot(self.pid)
        proc_values = _difference(self._before, after)
        if self.source == "perf":
            self._stop_perf()
        if self._since is not None:
            self.seconds = (self._until or time.monotonic()) - self._since
        if self.source == "perf":
            text = _read_log(self._output) if self._output else ""
            self._forget_output()
            self.readings = parse_stat_csv_detail(text)
            values = {e: r.value for e, r in self.readings.items()}
            self._fill_idle(values)
            if "context-switches" in self.events and math.isnan(values.get("context-switches", NAN)) \
                    and "context-switches" in proc_values:
                values["context-switches"] = proc_values["context-switches"]
                self._notes.append("context-switches from /proc (perf counts only user space here)")
            multiplexed = [f"{e} {r.percent_running:.0f}%" for e, r in self.readings.items()
                           if r.measured and r.percent_running < 99.5]
            if multiplexed:
                self._notes.append("multiplexed, scaled by perf: " + ", ".join(multiplexed))
        else:
            values = proc_values
            if values:
                self._notes.append(PROC_NOTE.format(tick=1000.0 / CLOCK_TICKS))
            else:
                self._notes.append(f"process {self.pid} exited before the end: /proc could not be read")
        self.counters = complete(values, self.events)
        missing = [e for e, v in self.counters.items() if math.isnan(v)]
        if missing:
            self._notes.append(f"{NOT_MEASURABLE}: {', '.join(missing)}")
        self.note = "; ".join(self._notes)
        return self.counters

    def _fill_idle(self, values: dict[str, float]) -> None:
        """perf prints <not counted> with run time 0 for a software event when the
        process never ran while attached: that is a true 0, not a missing counter."""
        idle = [e for e, r in self.readings.items()
                if e in SOFTWARE_EVENTS and r.status == "not counted" and r.runtime == 0]
        for event in idle:
            values[event] = 0.0
        if idle:
            self._notes.append("the process did not run while perf was attached "
                               f"(perf: <not counted>): {', '.join(idle)} = 0")

    def close(self) -> None:
        """Stop perf without reading counters (used on errors)."""
        self._stop_perf()
        self._forget_output()

    def __enter__(self) -> "Attached":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.stop()
        else:
            self.close()


def attach(pid: int, events=None, probe: PerfProbe | None = None) -> Attached:
    """perf stat on a running process, as a context manager (see Attached)."""
    return Attached(pid, events, probe)


class TreeCounters:
    """perf attached to a server and to every process it has already forked (the
    worker models' workers), counted as one: perf -p follows a process's new
    threads and children, not the processes that existed before it attached.

        with perf.attach_tree(server.pid, events) as counting:
            run_the_clients()
        counting.counters, counting.source, counting.note   # as Attached's
    """

    def __init__(self, pid: int, events=None):
        self.pid = pid
        self.events = list(events) if events is not None else list(DEFAULT_EVENTS)
        self.counters: dict = {}
        self.seconds = NAN
        self.note = ""
        self.source = ""
        self._stack = contextlib.ExitStack()
        self._parts: list[Attached] = []

    def __enter__(self) -> "TreeCounters":
        import psutil

        try:
            forked = [child.pid for child in psutil.Process(self.pid).children(recursive=True)]
        except psutil.Error:
            forked = []
        with self._stack:
            for pid in [self.pid, *forked]:
                try:
                    self._parts.append(self._stack.enter_context(attach(pid, self.events)))
                except LabError:
                    if pid == self.pid:
                        raise  # the server itself is gone
                    # a worker that ended before perf attached is simply not counted
            self._stack = self._stack.pop_all()
        return self

    def interrupt(self) -> None:
        """Interrupt every part's perf (Attached.interrupt); __exit__ collects them."""
        for part in self._parts:
            part.interrupt()

    def __exit__(self, *exc) -> None:
        self.interrupt()
        self._stack.close()
        parts = [part for part in self._parts if part.counters]
        if not parts:
            return
        self.counters = {event: sum(NAN if part.counters.get(event) is None else float(part.counters[event])
                                    for part in parts) for event in parts[0].counters}
        self.seconds = max(part.seconds for part in parts)
        notes = [part.note for part in parts if part.note]
        if len(parts) > 1:
            # The supervisor only waits for its workers: that it "did not run" is expected.
            notes = [part.note for part in parts
                     if part.note and not (part.pid == self.pid and "did not run" in part.note)]
        self.note = "; ".join(dict.fromkeys(notes))
        if len(parts) > 1:
            self.note = (f"server counters summed over {len(parts)} processes (the server and its workers)"
                         + (f"; {self.note}" if self.note else ""))
        sources = {part.source for part in parts}
        self.source = sources.pop() if len(sources) == 1 else "+".join(sorted(sources))


def attach_tree(pid: int, events=None) -> TreeCounters:
    """perf stat on a running process and the processes it has forked, summed (see TreeCounters)."""
    return TreeCounters(pid, events)
