"""The grading uids: leased to one grader at a time, and emptied after each run.

Why a uid per run (root only): RLIMIT_NPROC counts the processes of a uid and
is not enforced for root, and a process that calls setsid() leaves every
process group and session; its uid is the one thing it cannot leave.  So each
concurrent run gets a uid of its own, 61000 + n (no /etc/passwd entry needed),
leased across processes (`UidLease`), and after the run `kill(-1, SIGKILL)` as
that uid, repeated until none is left, ends a fork bomb or a detached port
squatter as surely as a hanging kernel (`kill_all`); what the uid left in the
folders every user may write (`shared_writable`: /tmp, /run/lock and the like)
goes too (`remove_files_of`).

Without root every run shares the grader's uid: clean-up kills by session and
by a marker in the environment (ENV_MARK) -- a process that leaves the
session and clears its environment escapes.  sandbox.isolation_note() says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Iterator

import psutil

from ...errors import LabError

# LABKIT_FIRST_GRADING_UID moves the range: graders in containers that share one kernel and
# no user namespace share its uids (a kill(-1) as a uid from the host's PID namespace reaches
# that uid's processes in every container; RLIMIT_NPROC counts them all), so each needs its own.
FIRST_GRADING_UID = int(os.environ.get("LABKIT_FIRST_GRADING_UID") or 61000)
ENV_MARK = "LABKIT_SANDBOX_TOKEN"  # set in every sandboxed process's environment


class UidLease:
    """`count` grading uids reserved for this process (root only).

    Two graders at once (two courses, or a test suite beside a real batch)
    must never share a uid: the clean-up kills every process of the uid.  A
    uid is ours while we hold an flock on /tmp/labkit-grade-uid-<uid>.lock;
    processes a crashed grader left under it are killed when it is leased.  The
    files stay (empty, one per uid ever leased), as cpu_leases' do: a grader that
    removed its file on leaving could do so while another waits on it, and a third
    would then lock a new file of the same name, so two would hold one uid."""

    LOCKS = Path("/tmp")
    SPAN = 1000

    def __init__(self, count: int):
        self.uids: list[int] = []
        self._locks = []
        uid = FIRST_GRADING_UID
        while len(self.uids) < count:
            if uid >= FIRST_GRADING_UID + self.SPAN:
                self.close()
                raise LabError(f"no free grading uid in {FIRST_GRADING_UID}..{uid - 1}",
                               "wait for the other graders to finish, or use fewer --jobs")
            lock = self.lock_if_free(uid)
            if lock is None:
                uid += 1
                continue
            kill_all(uid, "", None)
            self.uids.append(uid)
            self._locks.append(lock)
            uid += 1

    @classmethod
    def lock_if_free(cls, uid: int):
        """The locked file of `uid`, or None while another grader holds it.  Its last holder
        removes it; one who opened it just before that holds a removed file, so the lock
        counts only if the path still names the file we locked."""
        path = cls.LOCKS / f"labkit-grade-uid-{uid}.lock"
        while True:
            lock = open(path, "a")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()
                return None
            try:
                if os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino:
                    return lock
            except FileNotFoundError:
                pass
            lock.close()  # removed under us: lock the file that is there now

    def close(self) -> None:
        for lock in self._locks:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock.name)  # while still locked: no file is left in /tmp
            lock.close()  # closing releases the flock
        self._locks = []


# ---------------------------------------------------------------------------
# a run's processes and files, ended


def processes_of(uid: int | None, token: str, session: int | None) -> list[psutil.Process]:
    """Every live process of the run: by uid when it has its own, else by session or marker."""
    found = []
    for proc in psutil.process_iter(["uids", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if uid is not None:
                if proc.info["uids"].real == uid:
                    found.append(proc)
            elif proc.pid != os.getpid() and (
                    (session is not None and os.getsid(proc.pid) == session)
                    or proc.environ().get(ENV_MARK) == token):
                found.append(proc)
        except (psutil.Error, ProcessLookupError, PermissionError):
            pass
    return found


def kill_all(uid: int | None, token: str, session: int | None, deadline_s: float = 10.0) -> int:
    """Kill every process of the run; return how many there were.

    As root, kill(-1) as the run's uid signals all of that uid's processes in
    one pass of the kernel, so a fork bomb cannot outrun it; repeated until
    psutil finds none (a process in the middle of fork may escape one pass)."""
    first = processes_of(uid, token, session)
    count = len(first)
    stop = time.monotonic() + deadline_s
    left = first
    while left and time.monotonic() < stop:
        if uid is not None:
            subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        for proc in left:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=0.5)
        left = processes_of(uid, token, session)
    if uid is not None:
        # Killed children of killed parents are zombies until init reaps them, and
        # zombies still count against the uid's RLIMIT_NPROC for the next run.
        while time.monotonic() < stop and any(
                p.info["uids"] and p.info["uids"].real == uid
                for p in psutil.process_iter(["uids"])):
            time.sleep(0.1)
    if left:
        raise LabError(f"{len(left)} process(es) of a graded notebook survived SIGKILL: "
                       f"{', '.join(str(p.pid) for p in left[:10])}",
                       "stop them by hand (kill -9 PID) before grading on")
    return count


def shared_writable(top: str = "/", depth: int = 2) -> tuple[str, ...]:
    """The folders every user may write (mode o+w), `depth` levels down from `top` at most, no
    link followed: where a run without a root of its own (a container's grader: no namespaces)
    can keep files outside its working directory.  /tmp, /var/tmp and /dev/shm, and where the
    image has them /run/lock (Debian's and Ubuntu's: /var/lock links to it), /dev/mqueue
    (Docker's) and the like; /proc and /sys are not looked into."""
    found, level = [], [top]
    for _ in range(depth):
        deeper = []
        for folder in level:
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.path in ("/proc", "/sys") or not entry.is_dir(follow_symlinks=False):
                        continue
                    if entry.stat(follow_symlinks=False).st_mode & 0o002:
                        found.append(entry.path)  # what lies below it is its own
                        continue
                except OSError:
                    continue
                deeper.append(entry.path)
        level = deeper
    return tuple(found)


def entries_of(uid: int, places: tuple[str, ...], depth: int = 3) -> Iterator[os.DirEntry]:
    """What `uid` keeps in `places`, folders every user may write: its own entries there, and
    the same in the folders there that every user may write (as /tmp/.X11-unix), `depth`
    levels down; never inside another user's folder (in a sticky /tmp a uid can make entries
    only of its own, and a machine's /tmp can hold millions of files)."""
    for place in places:
        try:
            entries = list(os.scandir(place))
        except OSError:
            continue
        for entry in entries:
            try:
                found = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if found.st_uid == uid:
                yield entry
            elif stat.S_ISDIR(found.st_mode) and found.st_mode & 0o002 and depth > 1:
                yield from entries_of(uid, (entry.path,), depth - 1)


def remove_files_of(uid: int, places: tuple[str, ...]) -> None:
    """What a run's uid left outside its working directory, in `places` (shared_writable's
    folders; root only)."""
    for entry in entries_of(uid, places):
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
