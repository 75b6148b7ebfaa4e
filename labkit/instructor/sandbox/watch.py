"""Watching one graded run from outside until it ends or is stopped: its time, its disk, its
memory, and whether it is a fork bomb (Crowding says how one is told from a notebook that
runs the threaded server at 2,000 clients).  labkit.instructor.sandbox.outside starts the run and
calls watch(); `limits` is its sandbox.Limits."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

from ..basics.outcomes import DISK_FULL, FINISHED, FORK_BOMB, MEMORY, TIMEOUT
from .uids import entries_of, processes_of

MIB = 1024 * 1024


def tree_bytes(top: Path) -> int:
    """Bytes allocated under `top` (sparse files count what they really use)."""
    total = 0
    for folder, _, files in os.walk(top):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass  # removed while we walked
    return total


def held_deleted_bytes(processes) -> int:
    """Bytes allocated to files the run's processes hold open after deleting them (a
    walk of the disk no longer finds them; their blocks are freed only when closed).  Root
    reads another uid's descriptors only with CAP_SYS_PTRACE (ptrace_may_access): in a
    container with Docker's default capabilities it reads none, and counts 0."""
    seen, total = set(), 0
    for proc in processes:
        folder = f"/proc/{proc.pid}/fd"
        try:
            descriptors = os.listdir(folder)
        except OSError:
            continue  # gone
        for fd in descriptors:
            try:
                found = os.stat(os.path.join(folder, fd))  # the open file itself
            except OSError:
                continue
            key = (found.st_dev, found.st_ino)
            if found.st_nlink == 0 and key not in seen and stat.S_ISREG(found.st_mode):
                seen.add(key)
                total += found.st_blocks * 512
    return total


def disk_used(workdir: Path, uid: int | None, token: str, shared: tuple[str, ...]) -> int:
    """What a run holds on disk: its working directory, the files its uid owns in the places
    it shares with the machine (`shared`: /tmp and the like, where it has no private ones),
    and the files its processes hold open after deleting them."""
    used = tree_bytes(workdir)
    if uid is not None:
        for entry in entries_of(uid, shared):
            try:
                used += tree_bytes(Path(entry.path)) if entry.is_dir(follow_symlinks=False) \
                    else entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                pass  # removed meanwhile
    return used + held_deleted_bytes(processes_of(uid, token, None))


class Crowding:
    """What the watch saw of a run's processes and threads: the most at once, and
    whether it stayed crowded -- near its limit, or refused forks at it (the cgroup
    counts those) -- for over a second.  A fork bomb is one of two things: a run that
    stays crowded, or a run that ran out of memory with more than a quarter of its
    limit running (a forked kernel costs about 1.2 MiB, so a bomb's memory runs out
    near 2,500 of them, before a limit of 4096 can refuse a fork).  Notebooks 02 and
    07 reach about 2,100 at once without a bomb: the threaded server at 2,000 clients
    runs a thread for each."""

    def __init__(self, limits, who: str = "the notebook"):
        self.limits, self.most, self.refused, self.who = limits, 0, 0, who  # who: what the run is, in messages
        self.since: float | None = None

    def saw(self, count: int, refused: int, now: float) -> bool:
        """Count `count` tasks and `refused` forks so far; True once crowded for a second."""
        self.most = max(self.most, count)
        refusing, self.refused = refused > self.refused, max(refused, self.refused)
        if count >= 0.8 * self.limits.processes or refusing:
            self.since = self.since if self.since is not None else now
            return now - self.since > 1.0
        self.since = None
        return False

    def bomb(self, what: str, over_memory: bool = False) -> tuple[str, str]:
        memory = (f" and used all of its {self.limits.run_memory_bytes // MIB} MiB of memory"
                  if over_memory else "")
        return FORK_BOMB, (f"{self.who} kept {self.most} {what} running (limit {self.limits.processes})"
                             f"{memory}: a fork bomb? it was stopped")

    def over_memory(self, what: str) -> tuple[str, str]:
        """Why a run that lost a process to its memory limit was stopped."""
        if self.most > self.limits.processes // 4:
            return self.bomb(what, over_memory=True)
        return MEMORY, (f"the run used more than its {self.limits.run_memory_bytes // MIB} MiB of memory (all "
                          "its processes together): the kernel killed one of them, and the run was stopped")


TASKS = "processes and threads"


def watch(inside: subprocess.Popen, workdir: Path, limits, uid: int | None,
          token: str, started: float, cgroup=None, crowding: Crowding | None = None,
          shared: tuple[str, ...] = ()) -> tuple[str, str]:
    """Wait for the inside process, stopping it on timeout, a full disk (disk_used: `shared`
    names the places it writes beside the machine's own files), a fork bomb, or the
    first process its cgroup's memory limit made the kernel kill (what is left of a
    run that lost a process to memory proves nothing, and holds a slot meanwhile)."""
    crowding = crowding or Crowding(limits)
    next_disk_check = 0.0
    while True:
        try:
            inside.wait(timeout=0.5)
            return FINISHED, ""
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        over_time = now - started > limits.timeout_s
        if uid is not None:
            # The process limit holds, but hundreds of spinning processes would
            # starve the other runs until the timeout: stop a bomb early.  With a
            # cgroup, its count says it in one read (a scan of /proc under a bomb's
            # load can take longer than the run's time limit).  Looked at before the
            # time limit: a run crowded when its time runs out was a bomb, seen late
            # because it starved this loop too.
            if cgroup is not None:
                count, refused, what = cgroup.tasks(), cgroup.refused_forks(), TASKS
            else:
                count, refused, what = len(processes_of(uid, token, None)), 0, "processes"
            if crowding.saw(count, refused, now) or (over_time and crowding.since is not None):
                return crowding.bomb(what)
        if cgroup is not None and cgroup.oom_kills():
            return crowding.over_memory(TASKS)
        if over_time:
            return TIMEOUT, f"{crowding.who} ran over the {limits.timeout_s:g} s time limit and was stopped"
        if now >= next_disk_check:
            next_disk_check = now + 2.0
            used = disk_used(workdir, uid, token, shared)
            if used > limits.disk_bytes:
                where = "its working directory" + (f", {', '.join(shared)}" if shared and uid is not None else "")
                return DISK_FULL, (f"{crowding.who} kept {used // MIB} MiB on disk ({where}, and files it "
                                     f"deleted but held open), over its limit of {limits.disk_bytes // MIB} MiB, "
                                     "and was stopped")
