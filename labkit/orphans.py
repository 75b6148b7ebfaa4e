"""Lab processes a crash left behind, found and stopped (`labkit doctor --clean`).

A leftover is a process running one of the lab's own programs (a server of build/bin,
or a perf attached to one) whose parent is gone, or one a pid file in RUN_DIR names
whose owner is gone.  A process of someone else's, or a perf attached to a process
that is not the lab's, is never one."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil

from labkit import netlink, paths

# Processes that adopt orphans: their child's real parent is gone.
SUBREAPERS = {"systemd", "init", "tini", "docker-init", "dumb-init"}


def _lab_binary_dirs() -> list[Path]:
    """The installed programs' folders and, where they differ, this user's own build's."""
    folders = [paths.BIN, paths.SAN_BIN, paths.INSTALL_BUILD / "bin", paths.INSTALL_BUILD / "san" / "bin"]
    return list(dict.fromkeys(folder.resolve() for folder in folders))


def _is_lab_binary(proc: psutil.Process) -> bool:
    """A process running one of THIS checkout's build/bin executables."""
    try:
        exe = Path(proc.exe()).resolve() if proc.exe() else None
    except (psutil.Error, OSError):
        return False
    return exe is not None and any(exe.parent == d for d in _lab_binary_dirs())


def _perf_target(proc: psutil.Process) -> int | None:
    """The pid a `perf stat -p PID` watches, or None."""
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return None
    if not cmdline or os.path.basename(cmdline[0]) != "perf" or "-p" not in cmdline:
        return None
    try:
        return int(cmdline[cmdline.index("-p") + 1].split(",")[0])
    except (IndexError, ValueError):
        return None


def _is_lab_perf(proc: psutil.Process) -> bool:
    """perf attached to a lab process, or perf running a lab binary (wrap_command)."""
    target = _perf_target(proc)
    if target is not None:
        try:
            return _is_lab_binary(psutil.Process(target))
        except psutil.Error:
            return False
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    if not cmdline or os.path.basename(cmdline[0]) != "perf":
        return False
    dirs = [str(d) for d in _lab_binary_dirs()]
    return any(arg.startswith(d + os.sep) for arg in cmdline for d in dirs)


def _parent_is_gone(proc: psutil.Process) -> bool:
    """True when the process (or its lab/perf parents) was adopted: its owner died."""
    try:
        parent = proc.parent()
        while parent is not None and (_is_lab_binary(parent) or _is_lab_perf(parent)
                                      or parent.name() == "setpriv"):
            parent = parent.parent()
        return parent is None or parent.pid == 1 or parent.name() in SUBREAPERS
    except psutil.Error:
        return False


def _pid_records() -> list[tuple[Path, dict]]:
    """The launcher's pid files (build/run/*.json) that can be read."""
    records = []
    for pid_file in sorted(paths.RUN_DIR.glob("*.json")) if paths.RUN_DIR.is_dir() else []:
        try:
            record = json.loads(pid_file.read_text())
            int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        records.append((pid_file, record))
    return records


def _recorded_orphans() -> list[psutil.Process]:
    """Processes the launcher recorded (server, client, perf...) whose owner is gone:
    the pid file names the process, its owner and when it started, so a pid the
    system has since given to another program is not taken for it."""
    found = []
    for _, record in _pid_records():
        owner = int(record.get("owner_pid") or 0)
        if owner and psutil.pid_exists(owner):
            continue
        try:
            proc = psutil.Process(int(record["pid"]))
            if abs(proc.create_time() - float(record.get("started", 0))) > 5.0:
                continue  # another process got that pid since
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, ValueError, TypeError):
            continue
    return found


def find_orphans() -> list[psutil.Process]:
    """Processes labkit started whose owner (a notebook kernel, a CLI run) is gone: those
    its pid files record, and lab binaries or perf runs on them found without one
    (a pid file removed by hand, an older labkit)."""
    found = {proc.pid: proc for proc in _recorded_orphans()}
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me or proc.pid in found:
            continue
        if (_is_lab_binary(proc) or _is_lab_perf(proc)) and _parent_is_gone(proc):
            found[proc.pid] = proc
    return list(found.values())


def describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid}: {' '.join(proc.cmdline())[:100]}"
    except psutil.Error:
        return f"pid {proc.pid}"


def clean() -> list[str]:
    """Kill leftover lab processes and remove their stale pid files; return what was done."""
    done = []
    orphans = find_orphans()
    for proc in orphans:
        description = describe(proc)
        try:
            proc.send_signal(signal.SIGKILL)
            done.append(f"killed {description}")
        except psutil.NoSuchProcess:
            pass
        except psutil.AccessDenied:
            done.append(f"could not kill {description}: not yours (try: sudo kill {proc.pid})")
    psutil.wait_procs(orphans, timeout=3)
    done += _remove_stale_pid_files()
    done += netlink.clean_leftovers()
    return done


def _remove_stale_pid_files() -> list[str]:
    """Pid files (build/run/*.json) of processes that no longer run and whose owner is gone."""
    removed = []
    for pid_file, record in _pid_records():
        pid, owner = int(record["pid"]), int(record.get("owner_pid") or 0)
        if not psutil.pid_exists(pid) and not (owner and psutil.pid_exists(owner)):
            pid_file.unlink(missing_ok=True)
            removed.append(f"removed stale pid file {pid_file.name}")
    return removed
