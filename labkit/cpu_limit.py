"""How the lab tells a student's endless loop from a busy machine: by the CPU time the
student's code used, never by the wall clock alone.

    limit(seconds)       in the child, before the student's code runs: RLIMIT_CPU, so that
                         the kernel stops it once it has used `seconds` of CPU (SIGXCPU at
                         the soft limit, SIGKILL a second later: setrlimit(2))
    spent(returncode)    the child was stopped by that limit's SIGXCPU
    wall(seconds)        the wall-clock backstop for a child that waits rather than loops

Why: a bound of wall time fails a correct parser on a machine where for tens of seconds
nothing runs (a sampler at normal priority misses its 2 s wake-ups; the CPU time /proc/stat
counts busy goes to no process, as when a virtual machine's host takes its CPUs away) while
the parser, which needs 0.3 CPU-s, waits.  CPU
time is what an endless loop spends and a busy machine does not: the kernel counts a task's
run time, not the time it waited for a CPU (and, in a guest built with steal-time
accounting, CONFIG_PARAVIRT_TIME_ACCOUNTING, not the time the host took the CPU away).
Code that waits (sleep, a blocking read) uses no CPU; the wall-clock backstop,
wall(seconds), stops it.
"""

from __future__ import annotations

import signal

WALL_FACTOR = 12  # the backstop: 10 CPU-s of budget may wait two minutes for its CPUs


def limit(seconds: float) -> None:
    """Called in the child before the student's code: past `seconds` of CPU time the
    kernel sends SIGXCPU, and SIGKILL one second later (a handler cannot keep it alive).
    No core file: SIGXCPU's default action dumps one."""
    import math
    import resource

    soft = max(1, math.ceil(seconds))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))


def spent(returncode: int | None) -> bool:
    """Whether a child that ended with `returncode` (Popen's: -N for signal N) was stopped
    by limit()'s SIGXCPU.  A SIGKILL is not taken for it: the hard limit sends one only to
    code that handled SIGXCPU, and the out-of-memory killer sends the same signal."""
    return returncode == -signal.SIGXCPU


def wall(seconds: float) -> float:
    """The wall-clock time a child with `seconds` of CPU budget is given before it is
    taken to be waiting on something that will not come."""
    return seconds * WALL_FACTOR
