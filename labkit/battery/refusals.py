"""What this host refuses a server, said before a case runs: a case it cannot run is "not
measurable here", never the server's failure.

Two refusals are known.  An ASan build reserves terabytes of address space at start, which
an address-space limit (`ulimit -v`) forbids; and io_uring may be switched off for
everyone, root included (kernel.io_uring_disabled = 2, Linux 6.6 and later), for all but
processes with CAP_SYS_ADMIN and the members of the group kernel.io_uring_group names (= 1;
that group is -1 by default, none: io_uring_allowed), or by a seccomp profile (Docker 25.0
and later refuses io_uring_setup with EPERM), where a correct io_uring server cannot even
start."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
from pathlib import Path

IO_URING_SETUP = 425  # on x86-64, arm64 and riscv: the numbering Linux 5.1 gave new system calls on most architectures


def room_for_asan() -> list[str] | str:
    """The launch prefix that gives an ASan build room for its shadow memory (terabytes,
    reserved at start, not used), or why there is none: an address-space limit whose hard
    value this process cannot raise (grading without a cgroup; `ulimit -v`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return []
    if hard == resource.RLIM_INFINITY:
        return ["prlimit", "--as=unlimited:", "--"]
    return (f"not measurable here: an ASan build reserves terabytes of address space at start, and this "
            f"process may use at most {hard >> 20:,} MiB (RLIMIT_AS, `ulimit -v`). Run it where the limit is "
            "unlimited; a grader gives it room where a cgroup bounds the run's memory (the run's own, when grading "
            "as root with cgroups; or the container's memory limit, as on Gradescope and PrairieLearn)")


def uses_io_uring(binary: Path) -> bool:
    """Whether the server calls io_uring: liburing's entry points, or the raw system call's
    name, among the names the binary links to."""
    return _links_io_uring(str(binary), binary.stat().st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _links_io_uring(path: str, _mtime_ns: int) -> bool:
    data = Path(path).read_bytes()
    return b"io_uring_queue_init" in data or b"io_uring_setup" in data


def _sysctl(name: str) -> str | None:
    path = Path("/proc/sys") / name
    try:
        return path.read_text().strip()
    except OSError:
        return None


def io_uring_disabled_meaning(setting: str | None, group: str | None) -> str:
    """What kernel.io_uring_disabled = `setting` refuses, with kernel.io_uring_group = `group`
    (io_uring_allowed in io_uring/io_uring.c, Linux 6.6): 2, everyone; 1, all but a process
    with CAP_SYS_ADMIN or in that group (-1, the default, names no group)."""
    if setting == "2":
        return "kernel.io_uring_disabled is 2: io_uring is refused to everyone, root included"
    if setting == "1":
        who = ("no group may (kernel.io_uring_group is -1, its default)" if group in (None, "-1") else
               f"and members of group {group} (kernel.io_uring_group)")
        return f"kernel.io_uring_disabled is 1: only a process with CAP_SYS_ADMIN may use io_uring, {who}"
    return f"kernel.io_uring_disabled is {setting}"


def io_uring_refused() -> str | None:
    """Why a server of this process's (its children's) may not use io_uring here, or None.
    Asked of the kernel itself: io_uring_setup with one entry, which a seccomp profile or the
    sysctl refuses just as it would the server's."""
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    fd = libc.syscall(IO_URING_SETUP, 1, params)
    if fd >= 0:
        os.close(fd)
        return None
    err = ctypes.get_errno()
    setting, group = (_sysctl(f"kernel/io_uring_{name}") for name in ("disabled", "group"))
    why = (io_uring_disabled_meaning(setting, group) if setting not in (None, "0") else
           "the kernel has no io_uring (built without it)" if err == errno.ENOSYS else
           "a seccomp profile forbids it (a container's)")
    return (f"not measurable here: this host refuses io_uring (io_uring_setup failed with "
            f"{errno.errorcode.get(err, err)}: {why}), and this server uses it. Run it where io_uring is "
            "allowed (`sysctl kernel.io_uring_disabled=0` as root, or a container without that seccomp rule)")
