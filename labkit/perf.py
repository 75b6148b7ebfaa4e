"""perf stat, and what to do when this machine cannot give us perf stat.

Four jobs, in this order in the file:
  * parse `perf stat -x,` output into {event: value}, with NaN for anything
    perf could not measure (never 0: a VM's missing `cycles` is not "no cycles");
  * probe() once which events this machine counts, and why the others are missing;
  * attach() perf to a running server (or fall back to /proc), and wrap_command()
    a client so perf runs it;
  * derive() the ratios the course plots (IPC, branch-miss rate, CPUs utilized).

What perf_event_paranoid really allows a user without root or CAP_PERFMON
(measured on Debian 12 / kernel 6.x, and from the kernel's documentation):
  -1  everything, for everyone (also CPU-wide counting, raw tracepoints)
   0  own processes and whole CPUs, kernel included; no raw tracepoints
   1  own processes, kernel part included; not whole CPUs
   2  own processes, user-space part only: perf retries every event with ":u"
      (exclude kernel).  task-clock still counts kernel time and page-faults
      still count, but context-switches:u and cpu-migrations:u read 0 however
      often the process switches, because those events fire inside the
      scheduler: we treat them as not measurable and take context switches
      from /proc.  Mainline default.
  3+  Debian and Ubuntu kernels carry a patch: no perf at all without root or
      CAP_PERFMON (Debian's default is 3; some Ubuntu releases ship 4).
Root (CAP_SYS_ADMIN / CAP_PERFMON) is not limited by any of these levels.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import LabError

SOFTWARE_EVENTS = ["task-clock", "context-switches", "cpu-migrations", "page-faults"]
HARDWARE_EVENTS = ["cycles", "instructions", "branches", "branch-misses", "cache-misses"]
DEFAULT_EVENTS = SOFTWARE_EVENTS + HARDWARE_EVENTS

NAN = float("nan")

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

def _perf_env() -> dict:
    return {**os.environ, "LC_ALL": "C"}  # a decimal comma would break the -x, columns


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


def _complete(values: dict[str, float], events) -> dict[str, float]:
    """Every requested event present, NaN where nothing was measured."""
    return {event: values.get(event, NAN) for event in events}


# ---------------------------------------------------------------------------
# Ratios
# ---------------------------------------------------------------------------

def _ratio(numerator, denominator, scale: float = 1.0) -> float:
    try:
        numerator, denominator = float(numerator), float(denominator)
    except (TypeError, ValueError):
        return NAN
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return NAN
    return scale * numerator / denominator


def derive(values: dict, elapsed_s: float | None = None) -> dict:
    """`values` plus ipc, branch-miss-rate (%) and cpus-utilized; NaN when an input is missing."""
    out = dict(values)
    out["ipc"] = _ratio(values.get("instructions"), values.get("cycles"))
    out["branch-miss-rate"] = _ratio(values.get("branch-misses"), values.get("branches"), 100.0)
    out["cpus-utilized"] = _ratio(values.get("task-clock"),
                                  None if elapsed_s is None else elapsed_s * 1000.0)
    return out


def rusage_counters(rusage: dict) -> dict[str, float]:
    """The load generator's getrusage() summary as perf-style counters (the client side
    when perf is not usable); events getrusage cannot know are NaN."""
    if not isinstance(rusage, dict):
        raise LabError(f"rusage must be the load generator's JSON object, got {type(rusage).__name__}",
                       "pass the 'rusage' object of loadgen's JSON summary")

    def total(*keys) -> float:
        try:
            return sum(float(rusage[k]) for k in keys)
        except (KeyError, TypeError, ValueError):
            return NAN

    values = {
        "task-clock": total("user_s", "sys_s") * 1000.0,
        "context-switches": total("voluntary_ctxt_switches", "involuntary_ctxt_switches"),
        "page-faults": total("minor_faults", "major_faults"),
    }
    return _complete(values, DEFAULT_EVENTS)


def fill_missing(counters: dict[str, float], fallback: dict[str, float]) -> dict[str, float]:
    """`counters` with its NaN values taken from `fallback` where that has a number.

    For the client under paranoid 2: perf cannot count its context switches,
    the load generator's getrusage can (fallback = rusage_counters(...))."""
    return {event: fallback.get(event, NAN) if math.isnan(value) else value
            for event, value in counters.items()}


# ---------------------------------------------------------------------------
# What this machine can count
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PerfProbe:
    path: str | None          # the perf executable, None if not installed
    usable: bool              # perf can count at least task-clock for us
    paranoid: int | None      # kernel.perf_event_paranoid
    version: str | None       # "6.1.187"
    counted: tuple[str, ...]  # events that gave numbers
    unsupported: tuple[str, ...]
    problem: str              # "" when nothing is missing
    fix: str
    user_only: bool = False   # perf fell back to ":u" (paranoid 2, not root)


def read_paranoid() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip())
    except (OSError, ValueError):
        return None


def paranoid_meaning(level: int | None) -> str:
    """What kernel.perf_event_paranoid = level allows a user without root."""
    if level is None:
        return "no /proc/sys/kernel/perf_event_paranoid: this kernel has no perf events"
    if level <= -1:
        return "everything is allowed to every user"
    if level == 0:
        return "users may count their own processes and whole CPUs, kernel included"
    if level == 1:
        return "users may count their own processes, kernel part included"
    if level == 2:
        return ("users may count only the user-space part of their own processes "
                "(perf adds ':u'); context switches and CPU migrations are then not "
                "measurable with perf")
    return ("Debian/Ubuntu kernels: users may not use perf at all "
            "(only root or CAP_PERFMON may)")


PARANOID_FIX = ("sudo sysctl kernel.perf_event_paranoid=1   (until reboot; to keep it: "
                "echo 'kernel.perf_event_paranoid = 1' | sudo tee /etc/sysctl.d/60-perf.conf; "
                "in a container, set it on the host)")


def install_fix() -> str:
    """The command that installs perf on this distribution (Debian first unless Ubuntu)."""
    debian = "sudo apt-get install linux-perf"
    ubuntu = "sudo apt-get install linux-tools-$(uname -r) linux-tools-generic"
    try:
        os_release = Path("/etc/os-release").read_text().lower()
    except OSError:
        os_release = ""
    if "ubuntu" in os_release:
        return f"{ubuntu}   (Debian: {debian})"
    if "fedora" in os_release or "rhel" in os_release:
        return "sudo dnf install perf"
    return f"{debian}   (Ubuntu: {ubuntu})"


HARDWARE_NOTE = ("no hardware counters (cycles, instructions, branches, cache-misses): "
                 "usual in a virtual machine, whose hypervisor does not pass the CPU's "
                 "performance-monitoring unit through")
HARDWARE_FIX = ("nothing to fix for the lab (software counters and /proc still work); "
                "for hardware counters use bare metal, or enable the virtual PMU "
                "(KVM/QEMU: -cpu host; VMware: 'Virtualize CPU performance counters')")


def classify_failure(stderr: str, paranoid: int | None) -> tuple[str, str]:
    """(problem, fix) for a `perf stat` that exited with an error."""
    text = stderr.lower()
    if "not found for kernel" in text:  # Ubuntu's /usr/bin/perf wrapper without linux-tools-<kernel>
        return ("perf is installed, but not for the running kernel",
                "sudo apt-get install linux-tools-$(uname -r) linux-tools-generic")
    if any(s in text for s in ("perf_event_paranoid", "permission", "access to performance monitoring",
                                "not permitted", "no permission")):
        return (f"perf is not permitted to count for this user "
                f"(kernel.perf_event_paranoid = {paranoid}: {paranoid_meaning(paranoid)})",
                f"{PARANOID_FIX}; 2 is enough for user-space counters of your own processes")
    if "function not implemented" in text or ("no such file" in text and "perf_event" in text):
        return ("this kernel has no perf events (CONFIG_PERF_EVENTS is off, or WSL1)",
                "use a kernel with perf events; the lab falls back to /proc meanwhile")
    first = stderr.strip().splitlines()[0] if stderr.strip() else "no message"
    return f"perf stat failed: {first}", "run `perf stat true` in a terminal to see perf's own message"


def _run_probe_stat(perf: str, events: list[str]) -> tuple[int, str, str]:
    """(returncode, -o output, stderr) of `perf stat -e events true`."""
    with tempfile.TemporaryDirectory(prefix="labkit-probe-") as tmp:
        out = Path(tmp) / "stat.csv"
        cmd = [perf, "stat", "-x,", "--no-big-num", "-o", str(out), "-e", ",".join(events), "true"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=_perf_env())
        except subprocess.TimeoutExpired:
            return -1, "", "perf stat true did not finish within 30 s"
        except OSError as e:
            return -1, "", str(e)
        return done.returncode, out.read_text() if out.exists() else "", done.stderr


def _probe_now() -> PerfProbe:
    paranoid = read_paranoid()
    path = shutil.which("perf")
    if os.environ.get("LABKIT_NO_PERF") == "1":
        return PerfProbe(path, False, paranoid, None, (), tuple(DEFAULT_EVENTS),
                         "LABKIT_NO_PERF=1 is set, so counters come from /proc",
                         "unset LABKIT_NO_PERF to use perf")
    if path is None:
        return PerfProbe(None, False, paranoid, None, (), tuple(DEFAULT_EVENTS),
                         "perf is not installed", install_fix())

    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=10, env=_perf_env())
        said = done.stdout + done.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        said = str(e)
    version_match = re.search(r"perf version (\S+)", said)
    version = version_match.group(1) if version_match else None
    if version is None:
        problem, fix = classify_failure(said, paranoid)
        return PerfProbe(path, False, paranoid, None, (), tuple(DEFAULT_EVENTS), problem, fix)

    rc, output, stderr = _run_probe_stat(path, DEFAULT_EVENTS)
    if rc != 0 and "permission" not in stderr.lower():
        # An old perf may not know one of the events: try the software ones alone.
        rc, output, stderr = _run_probe_stat(path, SOFTWARE_EVENTS)
    if rc != 0:
        problem, fix = classify_failure(stderr, paranoid)
        return PerfProbe(path, False, paranoid, version, (), tuple(DEFAULT_EVENTS), problem, fix)

    readings = parse_stat_csv_detail(output)
    counted = tuple(e for e in DEFAULT_EVENTS if e in readings and readings[e].measured)
    unsupported = tuple(e for e in DEFAULT_EVENTS if e not in counted)
    user_only = any(canonical_event(r.raw_name)[2] == "u" for r in readings.values())
    problems, fixes = [], []
    if user_only:
        problems.append(f"perf counts only user space for this user (kernel.perf_event_paranoid = "
                        f"{paranoid}): context switches come from /proc, CPU migrations are not measured")
        fixes.append(PARANOID_FIX)
    if not set(HARDWARE_EVENTS) & set(counted):
        problems.append(HARDWARE_NOTE)
        fixes.append(HARDWARE_FIX)
    usable = "task-clock" in counted
    if not usable:
        problems.append("perf gave no task-clock, so the lab uses /proc")
    return PerfProbe(path, usable, paranoid, version, counted, unsupported,
                     "; ".join(problems), "; ".join(fixes), user_only)


_probes: dict[tuple, PerfProbe] = {}


def probe(refresh: bool = False) -> PerfProbe:
    """What perf can count here; cached (per PATH and LABKIT_NO_PERF), refresh=True re-runs it."""
    key = (os.environ.get("PATH"), os.environ.get("LABKIT_NO_PERF"))
    if refresh or key not in _probes:
        _probes[key] = _probe_now()
    return _probes[key]


def _countable(events, found: PerfProbe) -> tuple[list[str], list[str]]:
    """(events perf can count here, events it cannot) among the requested ones."""
    requested = list(events) if events is not None else list(DEFAULT_EVENTS)
    can = [e for e in requested if e in found.counted]
    return can, [e for e in requested if e not in can]


# ---------------------------------------------------------------------------
# Running perf
# ---------------------------------------------------------------------------

def wrap_command(cmd: list[str], output: Path, events=None) -> list[str]:
    """`perf stat ... -o output -- cmd`, or cmd unchanged when perf is not usable here.

    The command runs with LC_ALL=C (perf's CSV must have decimal points).
    """
    found = probe()
    can, _ = _countable(events, found)
    if not found.usable or not can:
        return list(cmd)
    return ["env", "LC_ALL=C", found.path, "stat", "-x,", "--no-big-num", "-o", str(output),
            "-e", ",".join(can), "--", *cmd]


def read_output(output: Path, events=None) -> dict[str, float]:
    """The counters perf wrote to `output` (see wrap_command); NaN for every event not
    measured, and all NaN when there is no file (perf was not usable)."""
    requested = list(events) if events is not None else list(DEFAULT_EVENTS)
    try:
        text = Path(output).read_text()
    except FileNotFoundError:
        return _complete({}, requested)
    return _complete(parse_stat_csv(text), requested)


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child before exec: the kernel kills perf if our thread dies."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


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
             "events not measurable")


class Attached:
    """perf stat attached to a running process; on exit, .counters holds what it counted.

        with perf.attach(server.pid) as counting:
            run_the_clients()
        counting.counters   # {event: value}, every requested event, NaN = not measurable
        counting.source     # "perf" or "proc"
        counting.note       # what was not measurable, in words

    Threads the process creates after attaching are counted (perf's counters are
    inherited by new threads; tested in tests/test_perf.py).  Note that the
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
        self.counters: dict[str, float] = _complete({}, self.events)
        self.readings: dict[str, Reading] = {}
        self.source = "proc"
        self.note = ""
        self.attach_seconds: float | None = None
        self._perf: subprocess.Popen | None = None
        self._output: Path | None = None
        self._before: dict | None = None
        self._notes: list[str] = []

    # -- starting ------------------------------------------------------------
    def start(self) -> "Attached":
        if not os.path.exists(f"/proc/{self.pid}"):
            raise LabError(f"process {self.pid} does not exist, so perf cannot attach to it",
                           "start the server first and pass its pid")
        found = self.found or probe()
        can, _ = _countable(self.events, found)
        self._notes = []
        if found.usable and can:
            self._start_perf(found, can)
        elif not found.usable and found.problem:
            self._notes.append(f"perf not used ({found.problem})")
        self._before = proc_snapshot(self.pid)
        return self

    def _start_perf(self, found: PerfProbe, events: list[str]) -> None:
        fd, name = tempfile.mkstemp(prefix="labkit-perf-", suffix=".csv")
        os.close(fd)
        self._output = Path(name)
        cmd = [found.path, "stat", "-x,", "--no-big-num", "-o", name,
               "-e", ",".join(events), "-p", str(self.pid)]
        started = time.monotonic()
        self._perf = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, env=_perf_env(),
                                      start_new_session=True,
                                      preexec_fn=functools.partial(_die_with_parent, os.getpid()))
        # perf opens one descriptor per event and per thread that exists now;
        # threads created later inherit the counters without new descriptors.
        threads_before = _thread_count(self.pid)
        deadline = started + self.attach_timeout
        while time.monotonic() < deadline:
            if self._perf.poll() is not None:
                break
            wanted = len(events) * min(threads_before, _thread_count(self.pid))
            if _perf_event_fds(self._perf.pid) >= wanted and _waiting_for_events(self._perf.pid):
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
        if perf.poll() is None:
            perf.send_signal(signal.SIGINT)
        try:
            _, stderr = perf.communicate(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            perf.kill()
            _, stderr = perf.communicate()
            self._notes.append(f"perf did not stop within {self.stop_timeout:.0f} s and was killed")
        return stderr or ""

    def _forget_output(self) -> None:
        if self._output is not None:
            self._output.unlink(missing_ok=True)
            self._output = None

    def stop(self) -> dict[str, float]:
        after = proc_snapshot(self.pid)
        proc_values = _difference(self._before, after)
        if self.source == "perf":
            self._stop_perf()
            text = self._output.read_text() if self._output and self._output.exists() else ""
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
        self.counters = _complete(values, self.events)
        missing = [e for e, v in self.counters.items() if math.isnan(v)]
        if missing:
            self._notes.append(f"not measurable here: {', '.join(missing)}")
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
