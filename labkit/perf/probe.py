"""What this machine's perf can count, and why the rest is missing (with the fix)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from labkit.perf.parse import (DEFAULT_EVENTS, HARDWARE_EVENTS, SOFTWARE_EVENTS, canonical_event,
                               parse_stat_csv_detail)


def perf_env() -> dict:
    return {**os.environ, "LC_ALL": "C"}  # a decimal comma would break the -x, columns


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
    """What kernel.perf_event_paranoid = level allows a user without root or CAP_PERFMON.
    At every level, counting another user's process needs ptrace permission over it
    (PTRACE_MODE_READ_REALCREDS) or CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8)."""
    if level is None:
        return "no /proc/sys/kernel/perf_event_paranoid: this kernel has no perf events"
    if level <= -1:
        return ("users may count their own processes and whole CPUs (perf stat -a), kernel included, "
                "and use raw tracepoints; another user's process still needs ptrace permission "
                "over it or CAP_PERFMON")
    if level == 0:
        return ("users may count their own processes and whole CPUs (perf stat -a), kernel included; "
                "not another user's process")
    if level == 1:
        return "users may count their own processes, kernel part included, but not whole CPUs"
    if level == 2:
        return ("users may count only the user-space part of their own processes "
                "(perf adds ':u'); context switches and CPU migrations are then not "
                "measurable with perf, and page-faults:u misses the faults the kernel takes "
                "while copying into the process's buffers (in read, recv)")
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
                 "common in a virtual machine whose hypervisor gives it no virtual "
                 "performance-monitoring unit (PMU)")
HARDWARE_FIX = ("nothing to fix for the lab (software counters and /proc still work); "
                "for hardware counters use bare metal, or enable the virtual PMU "
                "(KVM/QEMU: -cpu host; VMware: 'Virtualize CPU performance counters'; "
                "in a cloud, an instance type that exposes one)")


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
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=perf_env())
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
                              timeout=10, env=perf_env())
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


_tracepoints: dict[tuple, tuple[str, ...]] = {}


def tracepoints_counted(events, found: PerfProbe) -> tuple[str, ...]:
    """Which of the tracepoint `events` ("syscalls:sys_enter_write") perf counts here:
    they need root or a readable tracefs, whatever perf_event_paranoid says.  Probed
    once per set of events (cached like probe())."""
    wanted = tuple(e for e in events if ":" in e)
    if not wanted or not found.usable:
        return ()
    key = (found.path, wanted)
    if key not in _tracepoints:
        rc, output, _ = _run_probe_stat(found.path, list(wanted))
        readings = parse_stat_csv_detail(output) if rc == 0 else {}
        _tracepoints[key] = tuple(e for e in wanted if e in readings and readings[e].measured)
    return _tracepoints[key]


TRACEFS_PLACES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
ANY_SYSCALL_TRACEPOINT = "syscalls:sys_enter_read"


def _tracefs() -> str | None:
    """Where tracefs shows the syscall tracepoints, if it is mounted and readable."""
    return next((root for root in TRACEFS_PLACES if os.path.isdir(f"{root}/events/syscalls")), None)


_asked_perf_to_mount: set = set()


def _tracefs_after_perf_mounts_it(found: PerfProbe) -> str | None:
    """A freshly booted machine may have no tracefs mounted.  perf, asked for a tracepoint
    as root, mounts it at /sys/kernel/tracing itself (tracing_path_mount, in the kernel's
    tools/lib/api/fs/tracing_path.c), so ask it once rather than call the tracepoints
    unmeasurable until something else happens to run perf.  Without root perf cannot
    mount it, and this finds nothing."""
    if found.path not in _asked_perf_to_mount:
        _asked_perf_to_mount.add(found.path)
        _run_probe_stat(found.path, [ANY_SYSCALL_TRACEPOINT])
    return _tracefs()


def syscall_tracepoints(names) -> tuple[list[str], str]:
    """perf's tracepoints for the system calls `names` that this kernel has and perf counts
    here ("syscalls:sys_enter_epoll_wait"), and why none are, if none are."""
    found = probe()
    if not found.usable:
        return [], f"perf is not usable here ({found.problem})"
    tracefs = _tracefs() or _tracefs_after_perf_mounts_it(found)
    if tracefs is None:
        return [], ("the kernel's syscall tracepoints cannot be read (tracefs is not mounted, or not readable "
                    "for this user): sudo mount -t tracefs nodev /sys/kernel/tracing, and for a user "
                    "other than root also sudo chmod go+rx /sys/kernel/tracing (until reboot); "
                    "or run the lab as root, whose perf mounts it itself")
    existing = [f"syscalls:sys_enter_{name}" for name in names
                if os.path.isdir(f"{tracefs}/events/syscalls/sys_enter_{name}")]
    counted = list(tracepoints_counted(existing, found))
    if not counted:
        return [], ("perf may not count the syscall tracepoints here (they need root, or "
                    "sudo sysctl kernel.perf_event_paranoid=-1 and a readable tracefs)")
    return counted, ""


def countable(events, found: PerfProbe) -> tuple[list[str], list[str]]:
    """(events perf can count here, events it cannot) among the requested ones."""
    requested = list(events) if events is not None else list(DEFAULT_EVENTS)
    tracepoints = tracepoints_counted(requested, found)
    can = [e for e in requested if e in found.counted or e in tracepoints]
    return can, [e for e in requested if e not in can]
