"""Where the time goes: perf record's cpu-clock samples of a running server, folded.

    with perf.sample_stacks([server.pid]) as sampling:
        run_the_clients()
    sampling.profile.stacks    # {"epoll;main;server_main;loop_serve;write;...;tcp_sendmsg_[k]": 41, ...}
    sampling.profile.scope     # "kernel and user stacks" or why only user stacks
    sampling.profile.note      # why there are none, if there are none

cpu-clock is a software event, so it samples where hardware counters are missing (a VM).
perf walks each sample's stack by frame pointers: the lab's programs are built with
-fno-omit-frame-pointer (csrc/Makefile), the kernel has its own unwinder, and a libc
built without frame pointers shows its system-call wrapper with its caller beside it.
cpu-clock -F 999 is a timer of the sampled tasks' own: it runs only while one of them is on
a CPU, so a task is sampled about 999 times per second of its CPU time (each thread its
own), not per wall-clock second, and a task that sleeps is not sampled at all.

Kernel frames need two things.  perf may sample the kernel where perf_event_paranoid is 1
or less, or as root.  perf can name what it sampled only if it may read the kernel's
addresses in /proc/kallsyms (kallsyms_show_value): a user without CAP_SYSLOG where
kernel.kptr_restrict is 0 and perf_event_paranoid 1 or less, root where kptr_restrict is
0 or 1, nobody at 2 (Ubuntu sets 1).  Where either is missing only user frames are sampled
(cpu-clock:u), and `scope` says which and why (scope_for); a run whose kernel frames came
back unnamed all the same says so too (named_scope).

Stacks are folded as flame graphs take them (Brendan Gregg's stackcollapse-perf): the
process name, then the frames from the outermost to the leaf, joined by ";", kernel
frames marked "_[k]", and the number of samples that had exactly that stack.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from labkit import launcher
from labkit.perf.probe import perf_env, probe, read_paranoid

KERNEL_AND_USER = "kernel and user stacks"
USER_ONLY = "user stacks only"

FREQUENCY_HZ = 999  # not 1000: a sampler in step with the kernel's tick sees only what runs on it
READY_TIMEOUT_S = 10.0  # perf record opening its events, mapping the processes: 0.2-0.4 s beside a busy suite
MOST_STACKS = 500   # the rest is folded into one "(other stacks)" entry: rows stay small
OTHER = "(other stacks)"
UNKNOWN = "[unknown]"  # a frame perf could not name (no symbol, or a broken frame-pointer chain)
UNNAMED_KERNEL = "[unknown]_[k]"  # a kernel address perf could not name (its addresses hidden from it)
KERNEL_HALF = 1 << 63  # on 64-bit machines the kernel's addresses are the upper half


@dataclass
class Profile:
    """Folded stacks of one run, and what they could see."""

    stacks: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    scope: str = ""           # KERNEL_AND_USER, or USER_ONLY and why (scope_for)
    frequency_hz: int = FREQUENCY_HZ
    note: str = ""            # why there are no samples, if there are none


def read_kptr_restrict() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/kptr_restrict").read_text().strip())
    except (OSError, ValueError):
        return None


def scope_for(paranoid: int | None, kptr_restrict: int | None, root: bool) -> tuple[bool, str]:
    """(whether to sample the kernel, what the stacks will hold): KERNEL_AND_USER, or
    "USER_ONLY: the reason; the fix" (a chart's title is what precedes "; ").  Sampling the
    kernel needs paranoid <= 1 or root; naming its frames needs kptr_restrict 0 and paranoid
    <= 1 for a user, kptr_restrict <= 1 for root (kallsyms_show_value).  An unreadable
    kptr_restrict counts as 0, and named_scope checks what came back."""
    kptr = kptr_restrict or 0
    sampled = root or (paranoid is not None and paranoid <= 1)
    named = kptr <= 1 if root else kptr == 0
    if sampled and named:
        return True, KERNEL_AND_USER
    if not sampled:
        fix = "sudo sysctl kernel.perf_event_paranoid=1" + (" kernel.kptr_restrict=0" if kptr else "")
        return False, (f"{USER_ONLY}: perf_event_paranoid is {paranoid}, so the kernel's frames are not "
                       f"sampled; {fix} shows them")
    fix = ("at 2 they are hidden even from root: sudo sysctl kernel.kptr_restrict=1 shows them to root" if root
           else "sudo sysctl kernel.kptr_restrict=0 shows them, to every user of this machine")
    return False, f"{USER_ONLY}: the kernel's addresses are hidden (kernel.kptr_restrict = {kptr}); {fix}"


def named_scope(scope: str, stacks: dict[str, int]) -> str:
    """`scope` as the samples bear it out: where the kernel was sampled but perf named none
    of its frames (its addresses hidden after all), the stacks say so."""
    frames = {frame for stack in stacks for frame in stack.split(";")}
    named = any(frame.endswith("_[k]") and frame != UNNAMED_KERNEL for frame in frames)
    if scope == KERNEL_AND_USER and UNNAMED_KERNEL in frames and not named:
        return (f"{KERNEL_AND_USER}, the kernel's frames unnamed; perf could not read the kernel's "
                "addresses in /proc/kallsyms (kernel.kptr_restrict)")
    return scope


def fold(script: str) -> Counter:
    """`perf script -F comm,ip,sym,dso` output -> {folded stack: samples}.

    Each sample is its process name on a line, then one line per frame, the leaf first
    ("    ffffffff8202787e __tcp_transmit_skb ([kernel.kallsyms])"), then a blank line."""
    folded: Counter = Counter()
    comm, frames = None, []

    def flush():
        if comm is not None:
            path = [frame for i, frame in enumerate(reversed(frames))  # a run of unknowns is one
                    if not (frame in (UNKNOWN, UNNAMED_KERNEL) and i and frames[-i] == frame)]
            folded[";".join([comm, *path])] += 1

    for line in script.splitlines():
        if not line.strip():
            flush()
            comm, frames = None, []
        elif not line[0].isspace():
            flush()
            comm, frames = line.split()[0], []
        else:
            frames.append(_frame(line.strip()))
    flush()
    return folded


def _frame(line: str) -> str:
    """One frame line -> its name: the symbol, "_[k]" for the kernel's, "[dso]" when unknown,
    UNNAMED_KERNEL for a kernel address perf could not name."""
    parts = line.split(" ", 1)
    rest = parts[1] if len(parts) > 1 else ""
    symbol, _, dso = rest.rpartition(" (")
    dso = dso.rstrip(")")
    try:
        kernel = dso.startswith("[kernel") or int(parts[0], 16) >= KERNEL_HALF
    except ValueError:
        kernel = False
    if not symbol or symbol == UNKNOWN:
        return UNNAMED_KERNEL if kernel else UNKNOWN if dso in ("", UNKNOWN) else f"[{Path(dso).name}]"
    symbol = symbol.split("+0x")[0]
    return f"{symbol}_[k]" if kernel else symbol


def _trimmed(folded: Counter) -> dict[str, int]:
    if len(folded) <= MOST_STACKS:
        return dict(folded.most_common())
    kept = dict(folded.most_common(MOST_STACKS))
    kept[OTHER] = sum(folded.values()) - sum(kept.values())
    return kept


class StackSampler:
    """perf record of running processes (a server and its workers), as a context manager;
    on exit .profile holds their folded stacks.  perf starts through the launcher (its
    own session, the death signal, a pid file); its data goes to a temporary directory
    removed on exit."""

    def __init__(self, pids, frequency_hz: int = FREQUENCY_HZ):
        self.pids = [int(pid) for pid in pids]
        self.frequency_hz = frequency_hz
        self.profile = Profile(frequency_hz=frequency_hz)
        self._perf = None
        self._dir = None

    def __enter__(self) -> "StackSampler":
        found = probe()
        if not found.usable:
            self.profile.note = f"perf is not usable here ({found.problem})"
            return self
        paranoid = read_paranoid()
        if paranoid is not None and paranoid > 2 and os.geteuid() != 0:
            self.profile.note = (f"perf_event_paranoid is {paranoid}: no sampling at all for a normal user "
                                 "(sudo sysctl kernel.perf_event_paranoid=1 allows it)")
            return self
        kernel, self.profile.scope = scope_for(paranoid, read_kptr_restrict(), os.geteuid() == 0)
        self._dir = tempfile.mkdtemp(prefix="labkit-stacks-")
        cmd = [found.path, "record", "--quiet", "-F", str(self.frequency_hz), "-e",
               "cpu-clock" if kernel else "cpu-clock:u", "-g", "-p", ",".join(map(str, self.pids)),
               "-o", str(Path(self._dir) / "perf.data")]
        self._perf = launcher.spawn(cmd, "perf", None, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, env=perf_env())
        self._wait_until_sampling()
        return self

    def _wait_until_sampling(self) -> None:
        """Return once perf record has opened its events and waits for samples (as
        attach.Attached waits for perf stat): a load started sooner could run, on a busy
        machine, while perf still reads the processes' maps, and leave no sample at all.
        Past READY_TIMEOUT_S the run goes on, its note saying so."""
        from labkit.perf.attach import perf_is_ready

        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self._perf.alive():
            if perf_is_ready(self._perf.pid, 1):
                return
            time.sleep(0.005)
        if self._perf.alive():
            self.profile.note = f"perf record was not sampling within {READY_TIMEOUT_S:g} s of its start"

    def interrupt(self) -> None:
        """Tell perf record to stop sampling and write its data, without waiting (see
        attach.Attached.interrupt); __exit__ collects it."""
        if self._perf is not None and self._perf.alive():
            self._perf.popen.send_signal(signal.SIGINT)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self._perf is not None:
                launcher.stop_child(self._perf, 10.0, signal.SIGINT)  # it writes its data on SIGINT
                said = self._perf.popen.stderr.read() if self._perf.popen.stderr else ""
                if exc_type is None:
                    self._read(said)
        finally:
            if self._dir:
                shutil.rmtree(self._dir, ignore_errors=True)

    def _read(self, said: str) -> None:
        data = Path(self._dir) / "perf.data"
        if not data.exists():
            self.profile.note = f"perf record wrote nothing ({said.strip()[-300:] or 'no message'})"
            return
        found = probe()
        child = launcher.spawn([found.path, "script", "-F", "comm,ip,sym,dso", "-i", str(data)], "perf", None,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=perf_env())
        stdout, stderr = launcher.run_to_end(child, 120)
        folded = fold(stdout.decode("utf-8", "replace"))
        self.profile.stacks = _trimmed(folded)
        self.profile.scope = named_scope(self.profile.scope, folded)
        self.profile.samples = sum(folded.values())
        if not self.profile.samples:
            self.profile.note = ("no samples: the server did not run on a CPU while it was sampled"
                                 if child.popen.returncode == 0 else
                                 f"perf script failed: {stderr.decode('utf-8', 'replace').strip()[-300:]}")


def sample_stacks(pids, frequency_hz: int = FREQUENCY_HZ) -> StackSampler:
    """perf record's cpu-clock samples of `pids`, folded (see StackSampler)."""
    return StackSampler(pids, frequency_hz)
