"""perf stat, and what to do when this machine cannot give us perf stat.

One module per job:
  parse    `perf stat -x,` output -> {event: value}, NaN for anything perf
           could not measure (never 0), and the event names;
  probe    which events this machine counts, and why the others are missing;
  attach   perf attached to a running server (and its worker tree) or wrapped
           around a client, started through labkit.launcher; /proc fallback;
  derived  the ratios the course plots, and getrusage as perf-style counters;
  stacks   perf record's cpu-clock samples of a running server, folded (flame graphs).
Everything a notebook needs is importable from here: `from labkit import perf`.

What perf_event_paranoid really allows a user without root or CAP_PERFMON
(measured on Debian 12 / kernel 6.x, and from the kernel's documentation):
  -1  as 0, and raw tracepoints too (perf's mlock limit is also lifted)
   0  own processes and whole CPUs (perf stat -a), kernel included; no raw
      tracepoints
   1  own processes, kernel part included; not whole CPUs.  Sampled kernel
      frames get names only where kernel.kptr_restrict is 0 as well (stacks)
   2  own processes, user-space part only: perf retries every event with ":u"
      (exclude kernel).  task-clock still counts kernel time, but
      page-faults:u misses the faults the kernel takes while copying into the
      process's buffers (copy_to_user in read/recv), and context-switches:u
      and cpu-migrations:u read 0 however often the process switches, because
      those events fire inside the scheduler: we treat them as not measurable
      and take context switches from /proc.  Mainline default.
  3+  Debian and Ubuntu kernels carry a patch: no perf at all without root or
      CAP_PERFMON (Debian's default is 3; some Ubuntu releases ship 4).
No level, not even -1, lets a user count another user's process: that always
needs ptrace permission over it (PTRACE_MODE_READ_REALCREDS) or CAP_PERFMON.
Root (CAP_SYS_ADMIN; CAP_PERFMON is enough since Linux 5.8) is not limited by
any of these levels.
"""

from labkit.perf.attach import (PROC_NOTE, Attached, TreeCounters, attach, attach_tree, proc_snapshot,
                                read_output, wrap_command)
from labkit.perf.derived import derive, fill_missing, rusage_counters
from labkit.perf.parse import (ALIASES, DEFAULT_EVENTS, HARDWARE_EVENTS, KERNEL_ONLY_EVENTS, NAN, NOT_MEASURABLE,
                               READ_SYSCALLS,
                               SERVER_SYSCALLS, SOFTWARE_EVENTS, SYSCALL_EVENTS, WRITE_SYSCALLS, Reading,
                               canonical_event, parse_stat_csv, parse_stat_csv_detail)
from labkit.perf.probe import (HARDWARE_FIX, HARDWARE_NOTE, PARANOID_FIX, PerfProbe, classify_failure, countable,
                               install_fix, paranoid_meaning, probe, read_paranoid, syscall_tracepoints)
from labkit.perf.stacks import Profile, StackSampler, fold, sample_stacks

__all__ = [
    "ALIASES", "DEFAULT_EVENTS", "HARDWARE_EVENTS", "HARDWARE_FIX", "HARDWARE_NOTE", "KERNEL_ONLY_EVENTS",
    "NAN", "NOT_MEASURABLE", "PARANOID_FIX", "PROC_NOTE", "READ_SYSCALLS", "SERVER_SYSCALLS", "SOFTWARE_EVENTS",
    "SYSCALL_EVENTS",
    "WRITE_SYSCALLS", "Profile", "StackSampler", "fold", "sample_stacks",
    "Attached", "PerfProbe", "Reading",
    "TreeCounters", "attach", "attach_tree", "canonical_event", "classify_failure", "countable", "derive",
    "fill_missing", "install_fix", "paranoid_meaning", "parse_stat_csv", "parse_stat_csv_detail",
    "probe", "proc_snapshot", "read_output", "read_paranoid", "rusage_counters", "syscall_tracepoints",
    "wrap_command",
]
