"""The one place labkit starts processes: servers, the load generator, perf, benches.

Every child started through spawn():
  * is pinned with sched_setaffinity in the child before exec, so it runs on
    its CPUs from its first instruction;
  * lives in its own session (and so its own process group), so stopping it
    stops whatever it forked too;
  * gets PR_SET_PDEATHSIG(SIGKILL): if the Python kernel is killed with -9,
    the kernel's death kills the child as well;
  * is recorded in a registry and in a pid file under build/run/ (role, argv,
    owner, start time), so `labkit doctor --clean` finds what a crash left
    behind; both go when it stops.
  * runs behind the launch prefix, if one is given (a command that execs the
    rest, e.g. `ip netns exec NAME` or `setpriv --pdeathsig KILL`).
Normal exit (atexit) and SIGTERM stop everything still registered.

The kernel delivers the death signal when the THREAD that started the child
ends, not the process: start a child from the thread that outlives it (a
widget running a sweep in a background thread keeps that thread until the
sweep is over).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import paths

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: a forked child should not load libraries

_registry: dict[int, "Child"] = {}
_registry_lock = threading.Lock()
_handlers_installed = False


def _child_setup(cpus: list[int] | None, parent_pid: int):
    """The function Popen runs in the child between fork and exec."""

    def setup() -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


@dataclass
class Child:
    """A process labkit started, as the registry and the pid file know it."""

    popen: subprocess.Popen
    role: str
    pid_file: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def exit_status(self, within: float = 0.0) -> int | None:
        """Its exit status once it has ended (waiting up to `within` s for that), else None."""
        try:
            return self.popen.wait(timeout=within) if within > 0 else self.popen.poll()
        except subprocess.TimeoutExpired:
            return None

    def exit_status_unless_stuck(self, within: float, cap: float = 10.0) -> int | None:
        """Its exit status once it has ended, waiting up to `within` s, and again while it is
        held back by a busy machine rather than stuck (busy_machine.patiently), up to `cap` s."""
        from . import busy_machine

        return busy_machine.exit_status(self.popen, within, cap)

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)  # pgid == pid: each child leads its own session
        except ProcessLookupError:
            pass

    def forget(self) -> None:
        with _registry_lock:
            _registry.pop(self.pid, None)
        self.pid_file.unlink(missing_ok=True)


def how_it_ended(status: int) -> str:
    """'exited with status N' or 'was killed by signal N', for a Popen's returncode."""
    return f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"


def death_signal_prefix() -> list[str]:
    """A prefix that gives the program it runs its own death signal (setpriv,
    util-linux): for a grandchild such as the load generator under perf, whose
    parent is perf, not us.  Empty where setpriv is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def spawn(argv: list[str], role: str, cpus: list[int] | None = None, prefix: list[str] = (),
          **popen_args) -> Child:
    """Start `prefix + argv` pinned to `cpus`, in its own session, with the death
    signal, registered for clean-up: every process labkit starts goes through here."""
    _install_handlers()
    command = [*prefix, *argv]
    popen_args.setdefault("stdin", subprocess.DEVNULL)
    with _interrupts_kept() as lost:
        popen = subprocess.Popen(
            command,
            start_new_session=True,
            preexec_fn=_child_setup(cpus, os.getpid()),
            **popen_args,
        )
        child = Child(popen, role, paths.RUN_DIR / f"{popen.pid}.json")
        with _registry_lock:
            _registry[popen.pid] = child  # first: from here on stop_all() and atexit cover it
    try:
        if lost:
            raise lost[0]
        paths.RUN_DIR.mkdir(parents=True, exist_ok=True)
        child.pid_file.write_text(json.dumps({
            "pid": popen.pid,
            "pgid": popen.pid,
            "role": role,
            "argv": command,
            "owner_pid": os.getpid(),
            "started": time.time(),
        }))
    except BaseException:
        stop_child(child, timeout=0.2)
        raise
    return child


class _SigintWrapped:
    """For a block, the main thread's SIGINT handler (when it is Python's, callable) replaced
    by self._handle, which sees the handler it replaced as self.previous; restored after.
    Only the main thread runs signal handlers: elsewhere, nothing is replaced."""

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if callable(previous):
                self.previous = previous
                signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        raise NotImplementedError

    def __exit__(self, kind, error, traceback) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


class _interrupts_kept(_SigintWrapped):
    """Around a fork with preexec_fn and the child's registration: a Ctrl-C here is
    kept, not raised, and spawn() raises it once the child is registered.  Raised, it
    was lost twice over: inside Python's at-fork hooks (logging's lock release among
    them) Python prints it as "Exception ignored" and drops it; and inside Popen after
    the fork (waiting for the child's exec) Popen's constructor gives up its object
    while the child runs on, untracked (a sweep interrupted 0.15 s in, on a busy
    machine, left its iterative server running)."""

    def __enter__(self) -> list[BaseException]:
        self.lost: list[BaseException] = []
        super().__enter__()
        return self.lost

    def _handle(self, signum, frame):
        try:
            self.previous(signum, frame)
        except BaseException as error:  # noqa: BLE001  kept, and raised once the block ends
            self.lost.append(error)

    def __exit__(self, kind, error, traceback) -> None:
        super().__exit__(kind, error, traceback)
        if error is not None and self.lost:
            raise self.lost[0]  # the Ctrl-C, not what failed while it waited, is the caller's news


class InterruptsNoted(_SigintWrapped):
    """A Ctrl-C a loop sees even where Python drops its KeyboardInterrupt: raised while a
    weakref callback or a __del__ of the garbage collector runs, it is printed as "Exception
    ignored" and lost (a Ctrl-C 0.45 s into a sweep can let it run to its end).  The handler
    notes each Ctrl-C, then does what the handler before it did (raise KeyboardInterrupt);
    check(), between steps of the loop, raises a noted one."""

    seen = False

    def _handle(self, signum, frame):
        self.seen = True
        self.previous(signum, frame)

    def check(self) -> None:
        if self.seen:
            raise KeyboardInterrupt


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_child(child: Child, timeout: float, signum: int = signal.SIGTERM) -> tuple[int, bool]:
    """`signum` (SIGTERM; perf wants SIGINT to write its counts), wait up to
    `timeout` (more while a busy machine holds the child back, up to 5 s: labkit.busy_machine),
    then SIGKILL the group. Returns (exit code, had to kill)."""
    popen = child.popen
    killed = False
    if popen.poll() is None:
        try:
            popen.send_signal(signum)
        except ProcessLookupError:
            pass
        if child.exit_status_unless_stuck(timeout, cap=max(timeout, 5.0)) is None:
            child.kill_group()
            killed = True
            popen.wait()
    # Whatever the leader forked and left behind in its group goes too.
    if group_alive(child.pid):
        child.kill_group()
    child.forget()
    return popen.returncode, killed


def run_to_end(child: Child, timeout: float, input=None) -> tuple[bytes, bytes]:
    """Wait for `child` to finish (its stdout and stderr), given `input` on its stdin;
    past `timeout` its group is killed and TimeoutExpired raised; on any exception
    (KeyboardInterrupt included) its group is killed first.  It is forgotten either way."""
    try:
        return child.popen.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill_group()
        child.popen.communicate()
        raise
    except BaseException:
        child.kill_group()
        child.popen.wait()
        raise
    finally:
        if child.popen.poll() is not None:
            if group_alive(child.pid):
                child.kill_group()  # anything it forked goes with it
            child.forget()


def stop_all(keep=()) -> None:
    """Stop every process labkit started in this Python process, except the pids in `keep`."""
    with _registry_lock:
        children = [child for pid, child in _registry.items() if pid not in keep]
    for child in children:
        stop_child(child, timeout=1.0, signum=signal.SIGINT if child.role == "perf" else signal.SIGTERM)


def live_children() -> list[int]:
    """Pids of the children this process started that are still running."""
    with _registry_lock:
        children = list(_registry.values())
    return [child.pid for child in children if child.alive()]


def _on_sigterm(previous):
    def handler(signum, frame):
        stop_all()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    return handler


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    atexit.register(stop_all)
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)
        if previous not in (signal.SIG_IGN,):
            signal.signal(signal.SIGTERM, _on_sigterm(previous))
    _handlers_installed = True
