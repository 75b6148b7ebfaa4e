"""What walls a graded run stands behind, beyond its uid and its rlimits (root only).

  * A cgroup of its own (v2, or v1's memory and pids controllers): memory and
    processes are limited for the run as a whole, not per process, and the
    kernel's OOM kills in it are counted, so a run that ran out of memory is
    told apart from one that crashed.  Where the cpu controller is there, the
    run is one entity to the scheduler as well: a fork bomb's thousands of
    spinning processes share one group's weight, and the machine's other work
    (the other runs being graded, the grader) keeps its CPU; a run alone on the
    machine still uses every CPU (a weight is no cap).  Linux's autogroup makes
    each session one entity already, where it is on, but a bomb whose children
    each call setsid() escapes it: 30 such spinners left a process beside them
    on one CPU a 31st of it, in their cgroup a half.
  * A mount and PID namespace of its own (`unshare`), and in it a root of its
    own (`chroot`) that holds only the system's folders (read-only), the
    Python environment (read-only) and its own working directory: no
    instructor notebook, submission, output folder or other checkout of the
    lab exists there, wherever they lie on the machine.  A private /proc, so
    it sees no other run's processes or command lines; private tmpfs on /tmp,
    /var/tmp and /dev/shm, gone with the run.
  * Its uid is taken only after all that, by `setpriv`, with no capabilities
    and no supplementary groups.

Where a wall cannot be built (not root, no unshare, no writable cgroup),
`describe()` says which, and the run goes on with what there is.
"""

from __future__ import annotations

import os
import shlex
import signal
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # where the tools that build the walls are, whatever the run's PATH
# What a run's root holds of the machine's, read-only (a link, like /bin -> usr/bin, stays a link).
SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt")


class Cgroup:
    """One run's cgroup: v2 (memory.max, pids.max) or v1 (memory, pids controllers)."""

    def __init__(self, paths: dict[str, Path], version: int):
        self.paths = paths  # controller -> folder ("memory", "pids"; v2: both the same folder)
        self.version = version

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> "Cgroup | None":
        """A new cgroup with these limits, or None where this machine lets us make none."""
        name = f"labkit-grade-{uuid.uuid4().hex[:12]}"
        v2 = CGROUP_ROOT / "cgroup.controllers"
        try:
            if v2.is_file() and {"memory", "pids"} <= set(v2.read_text().split()):
                folder = CGROUP_ROOT / name
                folder.mkdir()
                group = cls({"memory": folder, "pids": folder}, 2)
                (folder / "memory.max").write_text(str(memory_bytes))
                if (folder / "memory.swap.max").exists():  # no swapping past the limit either
                    (folder / "memory.swap.max").write_text("0")
                (folder / "pids.max").write_text(str(processes))
                _enable_cpu_v2()
                return group
            if all((CGROUP_ROOT / controller / "cgroup.procs").is_file() for controller in ("memory", "pids")):
                paths = {"memory": CGROUP_ROOT / "memory" / name, "pids": CGROUP_ROOT / "pids" / name}
                if (CGROUP_ROOT / "cpu" / "cgroup.procs").is_file():
                    paths["cpu"] = CGROUP_ROOT / "cpu" / name
                group = cls(paths, 1)
                for folder in group.paths.values():
                    folder.mkdir()
                (group.paths["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
                (group.paths["pids"] / "pids.max").write_text(str(processes))
                return group
        except OSError:
            if "group" in locals():
                group.remove()
            return None
        return None

    def cpu_group(self) -> bool:
        """Whether the run is one entity to the scheduler (the cpu controller is on its cgroup)."""
        if self.version == 1:
            return "cpu" in self.paths
        try:
            return "cpu" in (self.paths["pids"] / "cgroup.controllers").read_text().split()
        except OSError:
            return False

    def procs_files(self) -> list[Path]:
        return list(dict.fromkeys(folder / "cgroup.procs" for folder in self.paths.values()))

    def tasks(self) -> int:
        """The processes and threads in this cgroup now (pids.current, v1 and v2 alike): one
        read, cheap even when a fork bomb keeps every CPU busy, where a scan of /proc over
        its processes is not."""
        try:
            return int((self.paths["pids"] / "pids.current").read_text())
        except (OSError, ValueError):
            return 0

    def refused_forks(self) -> int:
        """How many forks and new threads this cgroup's pids.max refused so far ("max" in
        pids.events, v1 and v2 alike; 0 where the kernel has no pids.events)."""
        return _counter(self.paths["pids"] / "pids.events", "max")

    def oom_kills(self) -> int:
        """How many processes the kernel killed in this cgroup for want of memory (cgroup v1
        counts them in memory.oom_control from Linux 4.13 on; before that, 0: its
        memory.failcnt counts every time the limit was reached, reclaim included, not kills)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _counter(self.paths["memory"] / name, "oom_kill")

    def refuse_forks(self) -> None:
        """Refuse every new process and thread from now on (pids.max may be set below
        pids.current), so that a bomb cannot replace what the clean-up kills."""
        try:
            (self.paths["pids"] / "pids.max").write_text("0")
        except OSError:
            pass

    def remove(self) -> None:
        for folder in self.paths.values():
            try:
                folder.rmdir()  # empty once every process of the run is gone
            except OSError:
                pass


def _enable_cpu_v2() -> None:
    """Turn the cpu controller on for the root's children (cgroup v2), where it is available
    and not yet on (systemd usually has it on already); where it cannot be, runs go without."""
    subtree = CGROUP_ROOT / "cgroup.subtree_control"
    try:
        if "cpu" in (CGROUP_ROOT / "cgroup.controllers").read_text().split() and \
                "cpu" not in subtree.read_text().split():
            subtree.write_text("+cpu")
    except OSError:
        pass


def end_namespace(unshare_pid: int) -> None:
    """Kill the process that is PID 1 of the run's PID namespace (unshare's one child): the
    kernel then kills every other process in the namespace at once (zap_pid_ns_processes),
    where a scan of /proc and a kill() each can fall behind a bomb's thousands of spinning
    processes.  unshare's --kill-child cannot do it: the parent-death signal it sets is
    cleared when setpriv changes the effective uid (commit_creds), so killing unshare leaves
    its child running."""
    try:
        with open(f"/proc/{unshare_pid}/task/{unshare_pid}/children") as children:
            init = [int(pid) for pid in children.read().split()]
    except (OSError, ValueError):
        return
    for pid in init:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def container_oom_kills() -> int | None:
    """The OOM kills the kernel counted in the cgroup this process is in, where it can be read
    (a container's own, which Docker shows read-only: v2's memory.events at the cgroup
    namespace's root, v1's memory.oom_control in the memory controller's folder), else None.
    A run that cannot have a cgroup of its own tells a memory kill by it."""
    for path, key in ((CGROUP_ROOT / "memory.events", "oom_kill"),
                      (CGROUP_ROOT / "memory" / "memory.oom_control", "oom_kill")):
        try:
            if key in path.read_text():
                return _counter(path, key)
        except OSError:
            continue
    return None


def container_memory_max() -> int | None:
    """The memory limit of the cgroup this process is in, in bytes, where it can be read (a
    container's own, which Docker shows read-only: v2's memory.max at the cgroup namespace's
    root, v1's memory.limit_in_bytes in the memory controller's folder); None where there is
    none (a machine's root cgroup has no memory.max; v1's root says 2^63 less a page)."""
    for path in (CGROUP_ROOT / "memory.max", CGROUP_ROOT / "memory" / "memory.limit_in_bytes"):
        try:
            value = path.read_text().strip()
        except OSError:
            continue
        if value == "max" or not value.isdigit() or int(value) >= 1 << 62:
            return None
        return int(value)
    return None


def container_pids_left(reserve: int) -> int | None:
    """How many more processes and threads the cgroup this process is in allows, less
    `reserve` (a container's own pids limit, which Docker shows read-only: v2's pids.max at the
    cgroup namespace's root, v1's in the pids controller's folder); None where there is no limit
    to read.  A run that cannot have a cgroup of its own is held under it, so the grader keeps
    `reserve` for its own threads and processes when the run forks all it may."""
    for folder in (CGROUP_ROOT, CGROUP_ROOT / "pids"):
        try:
            most = (folder / "pids.max").read_text().strip()
            current = int((folder / "pids.current").read_text())
        except (OSError, ValueError):
            continue
        return None if most == "max" else max(1, int(most) - current - reserve)
    return None


def _counter(path: Path, key: str) -> int:
    """The value of `key` in a cgroup's flat-keyed file ("key value" lines); 0 if absent."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


@dataclass
class Walls:
    """The prefix that puts one command behind the walls, and what it built."""

    uid: int | None
    binds: list[Path] = field(default_factory=list)  # what the run sees besides the system: venv, workdir
    root: Path | None = None                         # an empty folder of root's, the run's "/"
    cgroup: Cgroup | None = None
    namespaces: bool = False
    cwd: Path | None = None

    def prefix(self) -> list[str]:
        """`unshare ... sh -c '<join cgroup; build the root>; exec chroot ... setpriv ... "$@"'`, or []."""
        if self.uid is None:
            return []
        steps = [f"echo $$ > {shlex.quote(str(path))}" for path in (self.cgroup.procs_files() if self.cgroup else [])]
        drop = (f"setpriv --reuid {self.uid} --regid {self.uid} --clear-groups --inh-caps=-all "
                "--bounding-set=-all --")
        if self.namespaces and self.root is not None:
            steps += self._root_steps()
            where = shlex.quote(str(self.cwd or "/"))
            chroot = shutil.which("chroot", path=SYSTEM_PATH) or "chroot"
            steps.append(f"exec {chroot} {shlex.quote(str(self.root))} {drop} "
                         f"sh -c 'cd {where} && exec \"$@\"' labkit-run \"$@\"")
        else:
            steps.append(f'exec {drop} "$@"')
        shell = ["sh", "-c", " && ".join(steps), "labkit-walls"]
        # The death signal: if the grader is killed (kill -9, a cluster worker lost mid-task),
        # unshare dies with it.  Its --kill-child does not reach the run, whose parent-death
        # signal setpriv's change of uid clears (end_namespace says so): what the run left is
        # killed when its uid is leased again (uids.UidLease).
        dies_with_grader = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
        if self.namespaces:
            return [*dies_with_grader, "unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
                    "--propagation", "private", "--", *shell]
        return [*dies_with_grader, *shell]

    def _root_steps(self) -> list[str]:
        root = self.root
        steps = []

        def inside(path) -> str:
            return shlex.quote(str(root / str(path).lstrip("/")))

        for name in SYSTEM:
            place = Path("/") / name
            if place.is_symlink():
                steps.append(f"ln -s {shlex.quote(os.readlink(place))} {inside(place)}")
            elif place.is_dir():
                steps.append(f"mkdir -p {inside(place)} && mount --rbind {place} {inside(place)} && "
                             f"mount -o remount,bind,ro {inside(place)}")
        steps += [f"mkdir -p {inside('/dev')} && mount --rbind /dev {inside('/dev')}",
                  f"mkdir -p {inside('/sys')} && mount --rbind /sys {inside('/sys')}",
                  f"mkdir -p {inside('/proc')} && mount -t proc proc {inside('/proc')}"]
        steps += [f"mkdir -p {inside(place)} && mount -t tmpfs -o size=256m,mode=1777,nosuid,nodev tmpfs "
                  f"{inside(place)}" for place in PRIVATE_TMP]
        for path in dict.fromkeys(self.binds):
            if not path.is_dir() or str(path).startswith(tuple(f"/{name}/" for name in SYSTEM)):
                continue  # already there with the system's folders
            steps.append(f"mkdir -p {inside(path)} && mount --bind {shlex.quote(str(path))} {inside(path)}")
        return steps

    def describe(self) -> str:
        built = []
        if self.cgroup is None:
            built.append("no cgroup (memory is limited per process only)")
        else:
            built.append("a cgroup of its own (memory and processes limited for the run as a whole"
                         + ("; one entity to the scheduler, however many processes it runs)" if self.cgroup.cpu_group()
                            else "; no cpu controller: a fork bomb's processes each take a task's share of the CPU)"))
        built.append("namespaces and a root of its own (private /proc and /tmp; of the machine's files only "
                     "the system's, the Python environment and its working directory)"
                     if self.namespaces else "no namespaces (other runs' processes are visible in /proc, and "
                     "every file other users may read is readable)")
        return "; ".join(built)


def namespaces_work() -> bool:
    """Whether `unshare` can make mount and PID namespaces here (root, not forbidden by a container)."""
    if os.geteuid() != 0 or None in (shutil.which(tool, path=SYSTEM_PATH) for tool in ("unshare", "setpriv", "chroot")):
        return False
    import subprocess

    try:
        done = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--propagation",
                               "private", "--", "sh", "-c", "mount -t tmpfs tmpfs /tmp && test -d /proc/1"],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
