"""Machine facts: which CPUs we may pin to, the open-file limit, what we run on.

`environment()` is attached to every result row, so that a figure can always
say on which kernel, CPU and commit it was measured, and which perf events
were really counted.
"""

from __future__ import annotations

import datetime
import functools
import os
import platform
import resource
import shutil
import socket
import subprocess

from labkit import __version__, paths
from labkit.errors import LabError


# --- CPUs -------------------------------------------------------------------

def usable_cpus() -> list[int]:
    """The CPUs this process may run on (cgroups and taskset can hide some)."""
    return sorted(os.sched_getaffinity(0))


def check_cpus(cpus) -> list[int]:
    """Return `cpus` as a list of ints, or raise LabError naming the usable CPUs."""
    usable = usable_cpus()
    try:
        wanted = [int(c) for c in cpus]
    except (TypeError, ValueError):
        raise LabError(f"CPU list {cpus!r} is not a list of CPU numbers",
                       f"give CPU numbers from the usable ones: {usable}") from None
    if not wanted:
        raise LabError("no CPU given", f"give at least one of the usable CPUs: {usable}")
    missing = [c for c in wanted if c not in usable]
    if missing:
        raise LabError(f"CPU {', '.join(map(str, missing))} is not usable on this machine",
                       f"choose among the usable CPUs: {usable}")
    return wanted


def default_pinning() -> tuple[list[int], list[int], str]:
    """(server_cpus, client_cpus, note): disjoint CPUs when there are two or more."""
    cpus = usable_cpus()
    if len(cpus) >= 2:
        return [cpus[0]], [cpus[1]], ""
    only = cpus[0]
    return [only], [only], (f"only one CPU: server and client both run on CPU {only}, "
                            "so the results mix both")


# --- open files -------------------------------------------------------------

def nofile_limit() -> tuple[int, int]:
    """(soft, hard) limit on open files of this process (and of its children)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def raise_nofile(want: int) -> int:
    """Raise the soft open-file limit toward min(want, hard); return the new soft limit.

    Never lowers it.  Children started afterwards (servers, loadgen) inherit it.
    """
    soft, hard = nofile_limit()
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


# --- what we run on ---------------------------------------------------------

@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo (x86 and most ARM kernels)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def kernel() -> str:
    return platform.release()


@functools.lru_cache(maxsize=None)
def compiler() -> str | None:
    """First line of `gcc --version`, or None when gcc is not installed."""
    if shutil.which("gcc") is None:
        return None
    out = _run(["gcc", "--version"])
    return out.splitlines()[0].strip() if out else None


@functools.lru_cache(maxsize=None)
def git_commit() -> str | None:
    """Short hash of the lab's checkout, with "+dirty" when files were modified."""
    head = _run(["git", "-C", str(paths.ROOT), "rev-parse", "--short", "HEAD"])
    if not head:
        return None
    changes = _run(["git", "-C", str(paths.ROOT), "status", "--porcelain",
                    "--untracked-files=no"])
    return head.strip() + ("+dirty" if changes and changes.strip() else "")


def _run(cmd: list[str]) -> str | None:
    """stdout of a short command, or None if it is missing or fails."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


# --- the environment stored with every result row ---------------------------

@functools.lru_cache(maxsize=None)
def _static_environment() -> dict:
    from labkit import perf  # perf imports system; import late to avoid a cycle

    probe = perf.probe()
    return {
        "kernel": kernel(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "labkit_version": __version__,
        "labkit_commit": git_commit(),
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "compiler": compiler(),
        "perf_version": probe.version,
        "perf_paranoid": probe.paranoid,
        "perf_events_counted": list(probe.counted),
        "perf_events_unsupported": list(probe.unsupported),
        "counters_source": "perf" if probe.usable else "proc",
    }


def environment(refresh: bool = False) -> dict:
    """Flat, JSON-serialisable facts about this machine and this run.

    The expensive parts (perf probe, git, gcc) are computed once per process;
    pass refresh=True after changing the machine (e.g. perf_event_paranoid).
    """
    if refresh:
        from labkit import perf
        perf.probe(refresh=True)
        _static_environment.cache_clear()
        git_commit.cache_clear()
        compiler.cache_clear()
    env = dict(_static_environment())
    env["usable_cpus"] = usable_cpus()
    env["nofile_soft"] = nofile_limit()[0]
    env["timestamp"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return env
