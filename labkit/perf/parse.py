"""Parsing `perf stat -x, --no-big-num` output into {event: value}.

NaN for anything perf could not measure, never 0: a VM's missing `cycles` is
not "no cycles".  Also the event vocabulary every other perf module uses.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

SOFTWARE_EVENTS = ["task-clock", "context-switches", "cpu-migrations", "page-faults"]
HARDWARE_EVENTS = ["cycles", "instructions", "branches", "branch-misses", "cache-misses"]
DEFAULT_EVENTS = SOFTWARE_EVENTS + HARDWARE_EVENTS
# System calls counted by perf's tracepoints (root, or a tracefs the user may read): exact
# counts of what a program asked the kernel, independent of the program's own bookkeeping.
WRITE_SYSCALLS = ["syscalls:sys_enter_write", "syscalls:sys_enter_writev", "syscalls:sys_enter_sendto",
                  "syscalls:sys_enter_sendmsg"]
READ_SYSCALLS = ["syscalls:sys_enter_read", "syscalls:sys_enter_readv", "syscalls:sys_enter_recvfrom",
                 "syscalls:sys_enter_recvmsg"]
SYSCALL_EVENTS = WRITE_SYSCALLS + READ_SYSCALLS
# "Where the time goes": the system calls a server model makes, counted by name.  Each
# model's lesson is in one of them: select, poll and epoll_wait per wake-up, futex and
# clone for threads, io_uring_enter for io_uring, read/write per message.
SERVER_SYSCALLS = ["read", "write", "readv", "writev", "recvfrom", "sendto", "recvmsg", "sendmsg", "accept",
                   "accept4", "close", "select", "pselect6", "poll", "ppoll", "epoll_wait", "epoll_pwait",
                   "epoll_ctl", "io_uring_enter", "futex", "clone", "clone3", "sched_yield", "nanosleep",
                   "clock_nanosleep"]

NAN = float("nan")
# The lab's one word, in every table, note and plot, for a measurement it could not
# take (always with the reason beside it); perf's own "<not supported>" and
# "<not counted>" appear only where perf is quoted.
UNMEASURABLE = "not measurable"
NOT_MEASURABLE = f"{UNMEASURABLE} on this machine"

# Events that fire inside the scheduler, with kernel registers: counted with
# ":u" (kernel excluded) they always read 0, so that 0 means "not measured".
KERNEL_ONLY_EVENTS = {"context-switches", "cpu-migrations"}

# Older perf versions and users' own command lines spell some events differently.
ALIASES = {
    "cpu-cycles": "cycles",
    "cs": "context-switches",
    "migrations": "cpu-migrations",
    "faults": "page-faults",
}



# ---------------------------------------------------------------------------
# Parsing `perf stat -x, --no-big-num` output
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    """One event as perf reported it."""
    event: str              # canonical name: "cycles", not "cpu_core/cycles/u"
    value: float            # NaN when not measurable
    status: str             # "counted", "not counted", "not supported", "user-only"
    percent_running: float  # share of the time the counter ran (< 100: multiplexed), NaN if absent
    runtime: float          # perf's run time of the counter (ns), NaN if absent
    unit: str = ""
    raw_name: str = ""      # as perf printed it

    @property
    def measured(self) -> bool:
        return not math.isnan(self.value)


_NOT_MEASURED = {"<not supported>": "not supported", "<not counted>": "not counted"}
_MODIFIERS = re.compile(r":([a-zA-Z]+)$")                        # cycles:u, task-clock:ukh
_PMU_EVENT = re.compile(r"^([\w.-]+)/([^/=]+)/([a-zA-Z]*)$")     # cpu_core/cycles/u


def canonical_event(raw: str) -> tuple[str, str, str]:
    """'cpu_core/cycles/u' -> ('cycles', 'cpu_core', 'u');  'cycles:u' -> ('cycles', '', 'u')."""
    name, pmu, mods = raw.strip(), "", ""
    pmu_form = _PMU_EVENT.match(name)
    if pmu_form:
        pmu, name, mods = pmu_form.groups()
    else:
        modified = _MODIFIERS.search(name)
        if modified:
            mods, name = modified.group(1), name[: modified.start()]
    name = name.lower()
    return ALIASES.get(name, name), pmu, mods


def _number(field: str) -> float:
    try:
        return float(field)
    except ValueError:
        return NAN


def _parse_line(line: str) -> Reading | None:
    """One counter line, or None for headers, comments and metric-only lines.

    Columns (perf-stat(1), CSV FORMAT): value, unit, event, [variance with -r],
    run time, percent running, [metric value, metric unit].  perf before 4.x
    printed only "value,event".
    """
    fields = [f.strip() for f in line.split(",")]
    value_field = fields[0]
    status = _NOT_MEASURED.get(value_field, "counted")
    value = _number(value_field) if status == "counted" else NAN
    if status == "counted" and math.isnan(value):
        return None  # "# started on", "Performance counter stats for", ",,,,,1.2,insn per cycle"
    if len(fields) == 2:
        unit, raw_name, rest = "", fields[1], []
    elif len(fields) >= 3:
        unit, raw_name, rest = fields[1], fields[2], fields[3:]
    else:
        return None
    if not raw_name:
        return None
    if rest and rest[0].endswith("%"):  # variance column of `perf stat -r N`
        rest = rest[1:]
    runtime = _number(rest[0]) if rest else NAN
    percent = _number(rest[1]) if len(rest) > 1 else NAN

    event, _pmu, mods = canonical_event(raw_name)
    if status == "counted" and event in KERNEL_ONLY_EVENTS and "u" in mods and "k" not in mods:
        status, value = "user-only", NAN
    return Reading(event, value, status, percent, runtime, unit, raw_name)


def _merge_hybrid(readings: list[Reading]) -> Reading:
    """One event counted by several PMUs (Intel hybrid: cpu_core and cpu_atom).

    Each PMU counts only while the process runs on its kind of core, and perf
    scales each row up by 1/percent-running as if it had run all the time, which
    inflates a row counted 2% of the time fifty-fold.  So we add the UNSCALED
    counts (value x percent / 100); their percents add up to the share of time
    any PMU counted, and only if that is below 100% (real multiplexing) do we
    scale the sum once.
    """
    counted = [r for r in readings if r.status == "counted"]
    first = readings[0]
    if not counted:
        status = "not supported" if all(r.status == "not supported" for r in readings) else first.status
        return Reading(first.event, NAN, status, 0.0, 0.0, first.unit, "+".join(r.raw_name for r in readings))
    unscaled, coverage = 0.0, 0.0
    for r in counted:
        percent = 100.0 if math.isnan(r.percent_running) else r.percent_running
        unscaled += r.value * percent / 100.0
        coverage += percent
    coverage = min(coverage, 100.0)
    value = unscaled * 100.0 / coverage if coverage > 0 else NAN
    runtime = sum(0.0 if math.isnan(r.runtime) else r.runtime for r in counted)
    return Reading(first.event, value, "counted", coverage, runtime, first.unit,
                   "+".join(r.raw_name for r in readings))


def parse_stat_csv_detail(text: str) -> dict[str, Reading]:
    """Every event in perf's -x, output, with its status and percent running."""
    by_event: dict[str, list[Reading]] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        reading = _parse_line(line)
        if reading is not None:
            by_event.setdefault(reading.event, []).append(reading)
    merged = {}
    for event, readings in by_event.items():
        pmus = {canonical_event(r.raw_name)[1] for r in readings}
        # Same event from several PMUs: hybrid CPU.  The same event listed
        # twice on one PMU (a user's -e cycles,cycles): keep the first.
        merged[event] = _merge_hybrid(readings) if len(pmus) > 1 else readings[0]
    return merged


def parse_stat_csv(text: str) -> dict[str, float]:
    """{event: value} from `perf stat -x, --no-big-num` output; task-clock in msec.

    `<not supported>`, `<not counted>` and kernel-only events read in user-only
    mode are NaN.  Modifiers (":u") and PMU prefixes ("cpu_core/../") are
    stripped; hybrid rows are merged (see _merge_hybrid).
    """
    return {event: r.value for event, r in parse_stat_csv_detail(text).items()}


def complete(values: dict[str, float], events) -> dict[str, float]:
    """Every requested event present, NaN where nothing was measured."""
    return {event: values.get(event, NAN) for event in events}
