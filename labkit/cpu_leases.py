"""CPU leases: on a machine several lab users share (a JupyterHub on one node, local users),
two students' sweeps must not be pinned to the same CPUs, or each measures the other.

Every process sees the whole machine in its affinity mask there, so the default pinning alone
(the first two usable CPUs) would put every student on CPUs 0 and 1.  A sweep whose CPUs come
from the machine (the student chose none) leases them while it runs: an flock on
LOCKS/labkit-cpu-<n>.lock per CPU.  The kernel drops an flock when its holder's descriptor
closes, however the process ends, so no lease outlives its sweep and nothing needs cleaning
up.  Free CPUs are taken in order, the server's first; when fewer are free than the sweep
needs, it shares CPUs another lab run holds, and says so with how many of the usable CPUs
are leased.  Leases see the lab's runs only: other load on the machine does not show here.

The lock files are made read-only for everyone and opened read-only (flock needs no write
access), so any user can lease a CPU whose file another user made; they are never removed
(/tmp's sticky bit would keep another user's file anyway).
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from labkit import system
from labkit.procs import Pinning

LOCKS = Path(os.environ.get("LABKIT_CPU_LEASES") or "/tmp")


def _open(cpu: int) -> int:
    path = LOCKS / f"labkit-cpu-{cpu}.lock"
    while True:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            pass
        try:  # O_EXCL: never O_CREAT an existing file (fs.protected_regular refuses it in /tmp)
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
            os.fchmod(fd, 0o444)  # whatever the umask
            return fd
        except FileExistsError:
            continue  # made by someone else just now: open theirs


def _try_lock(cpu: int) -> int | None:
    """An fd holding `cpu`'s lease, or None while another lab run holds it."""
    fd = _open(cpu)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@dataclass
class CpuLease:
    """The CPUs a sweep runs on, `held` by this process's leases, and those `shared` with
    another lab run; `pinning` pins the server and the client to them."""

    pinning: Pinning
    held: list[int]
    shared: list[int]
    _fds: list[int] = field(default_factory=list, repr=False)

    @classmethod
    def take(cls, usable: list[int] | None = None) -> CpuLease:
        """A server CPU and a client CPU, free ones first (one CPU for both on a machine with one)."""
        usable = sorted(usable if usable is not None else system.usable_cpus())
        wanted = min(2, len(usable))
        held, fds, busy = [], [], []
        for cpu in usable:
            if len(held) == wanted:
                break
            fd = _try_lock(cpu)
            if fd is None:
                busy.append(cpu)
            else:
                held.append(cpu)
                fds.append(fd)
        # short of free CPUs, every usable one was tried: `busy` is all that others hold
        shared = busy[:wanted - len(held)]
        chosen = held + shared  # the server on a CPU of its own where there is one
        server, client = [chosen[0]], [chosen[-1]]
        note = ""
        if shared:
            note = (f"{'CPU' if len(shared) == 1 else 'CPUs'} {', '.join(map(str, shared))} "
                    f"{'is' if len(shared) == 1 else 'are'} also leased by "
                    f"another lab run on this machine ({len(busy)} of the {len(usable)} usable CPUs are "
                    "leased by others): this sweep shares them, so its times include that run's work")
        elif server == client:
            note = f"only one CPU: server and client both run on CPU {server[0]}, so the results mix both"
        return cls(Pinning(server, client, note), held, shared, fds)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)  # the flock goes with the descriptor
        self._fds.clear()

    def __enter__(self) -> CpuLease:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

