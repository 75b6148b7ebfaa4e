"""Whether the server's CPUs were the server's own while the client ran: what else ran on
them, how long the server's threads waited for them, and what the hypervisor took.

    with cpu_sharing.Watch(server.pid, server_cpus, client_cpus) as sharing:
        ...run the load...
    sharing.fill(row)
    cpu_sharing.reason(row)  # "" or "server's CPU shared: other tasks ran 412 ms of ..."

Invariants: every figure is a difference of two reads of /proc, one as the client's run
starts and one as it ends (server_cpu_window_s apart); a figure that could not be read is
NaN, never 0; reason() speaks only of measured figures and is "" when none is measured.

  server_cpu_others_ms  on the server's CPUs, their busy time less the server's own CPU
      time: what other tasks, and interrupts that came while no server thread ran, took
      there.  Busy is the window less idle, iowait and steal of those CPUs (/proc/stat's
      cpuN lines; on a kernel with NO_HZ, as here, idle and iowait come from the exact
      idle clock, get_cpu_idle_time_us, whereas user and system are 4 ms ticks sampled
      at HZ=250: a process alone on a CPU, busy 390 ms of a 1 s window by its own
      utime + stime, read 350 ms of ticks and 391 ms by the idle clock).  The server's
      own time is utime + stime of its processes, each read from /proc/PID/stat, plus
      cutime + cstime (the children they waited for); a process's utime + stime includes
      its threads that ended.  This kernel has no
      CONFIG_IRQ_TIME_ACCOUNTING (/proc/config.gz): an interrupt or a softirq taken
      while a server thread ran is charged to that thread (its sum_exec_runtime, which
      its utime + stime add up to), so it is not "others"; one taken while the CPU ran
      something else, and softirqs deferred to ksoftirqd, are.  With IRQ time accounting
      on, every interrupt's time is taken out of the tasks and counts as others.  Each
      value in /proc is in USER_HZ ticks (10 ms), read twice: a quiet CPU reads within a
      few tens of ms of zero, either side of it.  NaN when the server's CPUs are not
      known, when the load generator may run on one of them (then its time is there
      too), when /proc/stat has no line for one, or when the server was gone at the end.
  server_run_delay_ms   the time the server's threads (its processes' and its
      children's) spent runnable, waiting for a CPU: run_delay in
      /proc/PID/task/TID/schedstat, summed.  A thread that started during the run counts
      from its start; one that ended during the run takes its wait with it (the kernel
      keeps no total of ended threads' run_delay), so that part is lost.  It counts a
      wait behind any task, the server's own other threads included, so on its own it
      does not say that another task was there.  NaN
      when the server was gone at the end, or the kernel counts nothing (no
      CONFIG_SCHED_INFO: schedstat reads "0 0 0").
  server_cpu_steal_ms   steal of the server's CPUs (/proc/stat): time a hypervisor ran
      something else while they had work.  NaN when /proc/stat has no line for one.
  server_cpu_window_s   the wall time between the two reads.

reason() says the CPU was shared when others took OTHERS_SHARE of the server's CPU time
in the window, or steal took STEAL_SHARE of it (each FLOOR_MS at least), or, where others
is not measurable, the server's threads waited WAIT_SHARE of the window.  Others decides
where it is measured: the wait alone misses a neighbour (a thread-per-connection server
beside a spinner waited 0-858 ms while the spinner took over half its CPU).  A `nice -n 19`
spinner is no polite neighbour here: the lab starts the server in a session of its own
(launcher: start_new_session) and with autogroup on (kernel.sched_autogroup_enabled = 1)
nice ranks a thread only within its own session's group (sched(7)), so the two groups
share the CPU as equals (two spinners on one CPU, nice 0 and nice 19, ran 0.76 s and
0.01 s of 2 s in one session, 0.51 s and 0.50 s in two).
Evidence (2 cores, a busy KVM guest; measure.point, server on one CPU, client on the other;
epoll + spin 200 us exp/Poisson and fixed/even at utilisation 0.5, 2 s; threaded + top at
1,000/s, 1 s; with the spinner also 0.5 s runs as the quick profile): in 22 runs where perf's sched_switch
trace saw under 100 ms of unrelated tasks on the server's CPU, others read -38 to 104 ms,
at most 5.3% of the window, the wait at most 2.2%, steal at most 12.5%: the rule fired in
none; in 66 runs with the spinner, others read 52-88% of the window: it fired in all 66.
"""

from __future__ import annotations

import math
import os
import time

from . import busy_machine

NAN = float("nan")
OTHERS_SHARE = 0.15  # other tasks ran 15% of the server's CPU time in the window, or more
STEAL_SHARE = 0.15   # the hypervisor took 15% of it, or more
WAIT_SHARE = 0.10    # the server's threads waited 10% of the window for a CPU, or more
# ... and others or steal 100 ms at least: what five counters in 10 ms ticks, each read twice,
# can make up (50 ms), and the lab's own work on that CPU (perf saw up to 71 ms in a 2 s run)
FLOOR_MS = 100.0
COLUMNS = ("server_cpu_others_ms", "server_run_delay_ms", "server_cpu_steal_ms", "server_cpu_window_s")
_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
_IDLE, _IOWAIT, _STEAL = 3, 4, 7  # in a cpuN line of /proc/stat, after the name


def cpu_lines(cpus) -> dict[int, tuple[int, int]]:
    """{cpu: (idle + iowait, steal)} in USER_HZ ticks for each of `cpus` /proc/stat lists."""
    wanted, found = {f"cpu{cpu}": cpu for cpu in cpus}, {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] in wanted:
                    values = [int(v) for v in fields[1:]]
                    steal = values[_STEAL] if len(values) > _STEAL else 0
                    found[wanted[fields[0]]] = (values[_IDLE] + values[_IOWAIT], steal)
    except (OSError, ValueError, IndexError):
        return {}
    return found


def tree_cpu_ticks(pid: int) -> float:
    """utime + stime + cutime + cstime (USER_HZ ticks) summed over `pid` and its descendants
    now; NaN when `pid` itself cannot be read."""
    total = 0.0
    for each in busy_machine.tree(pid):
        try:
            with open(f"/proc/{each}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
        except (OSError, ValueError, IndexError):
            if each == pid:
                return NAN
    return total


class Watch:
    """Reads, as the client's run starts and as it ends, what `pid`'s CPUs did (see the
    module's doc).  `cpus`: the CPUs the server may run on; `client_cpus`: the load
    generator's (None: not pinned, so it may run anywhere)."""

    def __init__(self, pid: int, cpus, client_cpus=None):
        self.pid, self.cpus = pid, sorted(cpus or [])
        every = os.sched_getaffinity(0) if client_cpus is None else client_cpus
        self.overlap = bool(set(self.cpus) & set(every))
        self.start = self.end = None

    def _read(self) -> dict:
        threads = busy_machine.schedstats(self.pid)
        server = tree_cpu_ticks(self.pid)
        lines, now = cpu_lines(self.cpus), time.monotonic()
        return {"threads": threads, "server": server, "lines": lines, "time": now}

    def __enter__(self) -> "Watch":
        self.start = self._read()
        return self

    def __exit__(self, *exc) -> None:
        self.end = self._read()

    def fill(self, row: dict) -> None:
        """The row's COLUMNS."""
        row.update(dict.fromkeys(COLUMNS, NAN))
        if self.start is None or self.end is None:
            return
        start, end = self.start, self.end
        window = end["time"] - start["time"]
        row["server_cpu_window_s"] = window
        row["server_run_delay_ms"] = _waited_ms(start["threads"], end["threads"])
        if not self.cpus or any(cpu not in part["lines"] for part in (start, end) for cpu in self.cpus):
            return
        idle = sum(end["lines"][cpu][0] - start["lines"][cpu][0] for cpu in self.cpus) * _TICK_MS
        steal = sum(end["lines"][cpu][1] - start["lines"][cpu][1] for cpu in self.cpus) * _TICK_MS
        row["server_cpu_steal_ms"] = steal
        if self.overlap:
            return
        busy = window * 1000 * len(self.cpus) - idle - steal
        row["server_cpu_others_ms"] = busy - (end["server"] - start["server"]) * _TICK_MS  # NaN stays NaN


def _waited_ms(start: dict, end: dict) -> float:
    """run_delay gained over the window by the threads alive at its end (a new one from 0)."""
    if not end or not any(ran for ran, _ in end.values()):
        return NAN  # the server is gone, or the kernel counts nothing (no CONFIG_SCHED_INFO)
    waited = sum(max(0, delay - start.get(task, (0, 0))[1]) for task, (_, delay) in end.items())
    return waited / 1e6


def reason(row: dict) -> str:
    """"" when the server's CPUs were its own (or nothing was measured); else a sentence that
    starts "server's CPU shared: " and gives the measured figures."""
    window = _number(row.get("server_cpu_window_s"))
    cpus = list(row.get("server_cpus") or [])
    if not window > 0:
        return ""
    capacity_ms = window * 1000 * (len(cpus) or 1)
    others, waited = _number(row.get("server_cpu_others_ms")), _number(row.get("server_run_delay_ms"))
    steal = _number(row.get("server_cpu_steal_ms"))
    shared = (others >= max(OTHERS_SHARE * capacity_ms, FLOOR_MS) or steal >= max(STEAL_SHARE * capacity_ms, FLOOR_MS)
              or (math.isnan(others) and waited >= WAIT_SHARE * window * 1000))
    if not shared:
        return ""
    where = (f"CPU {cpus[0]}" if len(cpus) == 1 else f"CPUs {', '.join(map(str, cpus))}") if cpus else \
        "the server's CPUs"
    run = f" of the {window:.2f} s run on {where}"  # said once, in the first figure
    parts = []
    if not math.isnan(others):
        parts.append(f"other tasks ran {max(others, 0):,.0f} ms{run} ({max(others, 0) / capacity_ms:.0%})")
    if not math.isnan(waited):
        during = "" if parts else f" in the {window:.2f} s run on {where}"
        parts.append(f"the server's threads waited {waited:,.0f} ms for a CPU{during}")
    if not math.isnan(steal):
        share = f" ({steal / capacity_ms:.0%})" if steal > 0 else ""
        parts.append(f"steal {steal:,.0f} ms{'' if parts else run}{share}")
    return "server's CPU shared: " + "; ".join(parts)


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return NAN
