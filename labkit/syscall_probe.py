"""Whether the system calls the lab needs get through here, each tried once for real, and,
when one does not, who refused it: a seccomp filter (a container's profile), a sysctl, a
missing capability, or the kernel itself.

    refusals()   one Refusal per call in CALLS that failed; [] when all got through

Invariants:
- The answer is the kernel's errno for a real call, never a guess from a version or a file.
- A probe leaves nothing behind: the io_uring and perf descriptors are closed at once, and
  unshare runs in a child process of its own (it would move this one to a new namespace).
- A refusal is blamed on seccomp only when this process runs under a filter and nothing the
  kernel says (io_uring_disabled, perf_event_paranoid, the user-namespace sysctls, the
  capabilities) explains it, and the process is not emulated: qemu-user (an arm64 image on an
  x86-64 host, through binfmt_misc) answers ENOSYS itself for a call it does not translate
  (qemu 7.2: io_uring_setup and perf_event_open, whatever the filter).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from labkit import confinement

PROC_SYS = Path("/proc/sys")
CPUINFO = Path("/proc/cpuinfo")
# A line only each architecture's kernel writes in /proc/cpuinfo (arch/x86/kernel/cpu/proc.c,
# arch/arm64/kernel/cpuinfo.c); qemu-user 7.2 passes the host kernel's file through.
CPUINFO_KEYS = {"x86_64": "vendor_id", "aarch64": "CPU implementer"}

# What each call is for in the lab, in the words labkit doctor prints.
CALLS = {
    "io_uring_setup": "uring server (io_uring_enter and io_uring_register come after this call)",
    "perf_event_open": "perf counters (perf stat) or stacks (perf record)",
    "unshare": "network namespaces (notebook 05)",
}
# Numbers of the calls glibc has no wrapper for (io_uring_setup is 425 on both: the numbering
# Linux 5.1 gave new system calls on most architectures).
NUMBERS = {"x86_64": {"io_uring_setup": 425, "perf_event_open": 298},
           "aarch64": {"io_uring_setup": 425, "perf_event_open": 241}}

PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK = 1, 1
PERF_ATTR_SIZE_VER0 = 64
DISABLED, EXCLUDE_KERNEL, EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
PERF_FLAG_FD_CLOEXEC = 1 << 3
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


@dataclass(frozen=True)
class Refusal:
    call: str     # a name of CALLS
    error: str    # the errno's name: EPERM, ENOSYS, EACCES, ...
    by: str       # "seccomp", or what else refused it, in words


def _sysctl(name: str) -> str | None:
    path = PROC_SYS / name.replace(".", "/")
    try:
        return path.read_text().strip()
    except OSError:
        return None


def emulated() -> bool:
    """Whether this process runs translated for another CPU: the kernel's /proc/cpuinfo is
    another architecture's than the one this process runs as (platform.machine())."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return False
    own = CPUINFO_KEYS.get(platform.machine())
    return own is not None and own not in text and any(key in text for key in CPUINFO_KEYS.values())


def _io_uring_setup() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    fd = libc.syscall(NUMBERS[platform.machine()]["io_uring_setup"], 1, params)
    if fd >= 0:
        os.close(fd)
        return 0
    return ctypes.get_errno()


def _perf_event_open() -> int:
    """A software counter (task-clock) of this process, user space only: what any user may
    open at kernel.perf_event_paranoid 2, the mainline default."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(PERF_ATTR_SIZE_VER0)  # struct perf_event_attr, zeroed
    ctypes.c_uint32.from_buffer(attr, 0).value = PERF_TYPE_SOFTWARE
    ctypes.c_uint32.from_buffer(attr, 4).value = PERF_ATTR_SIZE_VER0
    ctypes.c_uint64.from_buffer(attr, 8).value = PERF_COUNT_SW_TASK_CLOCK
    ctypes.c_uint64.from_buffer(attr, 40).value = DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV
    fd = libc.syscall(NUMBERS[platform.machine()]["perf_event_open"], attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC)
    if fd >= 0:
        os.close(fd)
        return 0
    return ctypes.get_errno()


# As the lab makes its namespaces: root unshares the network; a normal user does so inside a
# user namespace of its own (labkit.netlink).
_UNSHARE = ("import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); "
            f"flags = {CLONE_NEWNET} | (0 if os.geteuid() == 0 else {CLONE_NEWUSER}); "
            "sys.stdout.write(str(0 if libc.unshare(flags) == 0 else ctypes.get_errno()))")


def _unshare() -> int:
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _UNSHARE], capture_output=True, text=True, timeout=30)
    return int(done.stdout) if done.stdout.strip().isdigit() else errno.EIO


def _other_cause(call: str, err: int) -> str | None:
    """What besides seccomp explains `call` failing with `err`, or None."""
    if call == "io_uring_setup":
        disabled = _sysctl("kernel.io_uring_disabled")
        return f"kernel.io_uring_disabled is {disabled}" if disabled not in (None, "0") else None
    if call == "perf_event_open":
        if err == errno.EACCES:
            return f"kernel.perf_event_paranoid is {_sysctl('kernel.perf_event_paranoid')}"
        return None
    if os.geteuid() == 0:
        return None if confinement.capabilities()["CAP_SYS_ADMIN"] else "CAP_SYS_ADMIN is not held"
    for name, off in (("user.max_user_namespaces", "0"), ("kernel.unprivileged_userns_clone", "0"),
                      ("kernel.apparmor_restrict_unprivileged_userns", "1")):
        if _sysctl(name) == off:
            return f"{name} is {off}"
    return None


def refusals() -> list[Refusal]:
    """The calls of CALLS that fail here, each with its errno and who refused it."""
    if platform.machine() not in NUMBERS:
        return []
    mode = confinement.seccomp()
    filtered = mode is not None and mode.mode == "filter"
    translated = emulated()
    found = []
    for call, probe in (("io_uring_setup", _io_uring_setup), ("perf_event_open", _perf_event_open),
                        ("unshare", _unshare)):
        err = probe()
        if err == 0:
            continue
        other = _other_cause(call, err)
        if other is None and translated and err == errno.ENOSYS:
            other = f"the emulator ({platform.machine()} on another CPU's kernel: qemu-user does not translate it)"
        by = other or ("seccomp" if filtered else
                       "the kernel (built without it)" if err == errno.ENOSYS else "the kernel")
        found.append(Refusal(call, errno.errorcode.get(err, str(err)), by))
    return found
