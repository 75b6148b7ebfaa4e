"""labkit.busy_machine: a late process is called stuck only when it neither ran nor waited for a
CPU; one that works, or waits its turn, is given its bound again, up to a cap."""

import os
import signal
import subprocess
import sys
import time

from labkit import busy_machine
import waits

SPIN = [sys.executable, "-c", "while True: pass"]
SLEEP = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"]
# ignores SIGTERM while it spins for 1.5 s, then exits 3 (wall time: however busy the machine)
SPIN_THEN_EXIT = [sys.executable, "-c", """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
start = time.monotonic()
while time.monotonic() - start < 1.5: pass
raise SystemExit(3)
"""]
# ignores SIGTERM and sleeps
DEAF = [sys.executable, "-c", """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""]


def started(argv, cpus=None):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    if "ready" in argv[-1]:
        assert proc.stdout.readline() == b"ready\n"
    return proc


def stopped(*procs):
    for proc in procs:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_sleeping_process_is_not_held_back_a_spinning_one_is(monkeypatch):
    # The process's own numbers only: a busy host's steal says "held back" of any process, and
    # a sleeper that has printed "ready" may still wait for a CPU
    # on its way into sleep() (a busy machine's): asked once it is asleep.
    monkeypatch.setattr(busy_machine, "_steal_ns", lambda: 0)
    sleeper, spinner = started(SLEEP), started(SPIN)
    try:
        waits.settled(lambda: [busy_machine._schedstat(task) for task in busy_machine._tasks(sleeper.pid)], quiet=0.2)
        assert not busy_machine.held_back(sleeper.pid)
        assert busy_machine.held_back(spinner.pid)
    finally:
        stopped(sleeper, spinner)


def test_a_process_in_uninterruptible_sleep_is_held_back_not_stuck(monkeypatch):
    # A thread in "D" waits on the machine (a server freeing its memory as it exits),
    # not on its own input; made so here by the state read, since no portable way makes a D sleep.
    monkeypatch.setattr(busy_machine, "_steal_ns", lambda: 0)
    sleeper = started(SLEEP)
    try:
        waits.settled(lambda: [busy_machine._schedstat(task) for task in busy_machine._tasks(sleeper.pid)], quiet=0.2)
        assert {busy_machine._state(task) for task in busy_machine._tasks(sleeper.pid)} == {"S"}
        assert not busy_machine.held_back(sleeper.pid)
        monkeypatch.setattr(busy_machine, "_state", lambda task: "D")
        assert busy_machine.held_back(sleeper.pid)
    finally:
        stopped(sleeper)


def test_shared_cpu_wait_is_counted():
    """Two spinners pinned to one CPU: each waits on the run queue about half the time, which
    /proc/PID/task/TID/schedstat's second field counts (CONFIG_SCHED_INFO)."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    first, second = started(SPIN, [cpu]), started(SPIN, [cpu])
    try:
        task = f"/proc/{first.pid}/task/{first.pid}"
        ran0, waited0 = busy_machine._schedstat(task)
        time.sleep(0.5)  # the window measured
        ran, waited = busy_machine._schedstat(task)
        assert waited - waited0 > 50_000_000, (ran - ran0, waited - waited0)  # > 50 ms of 500 waiting
    finally:
        stopped(first, second)


def test_the_threads_of_a_process_and_of_its_children_are_watched():
    parent = started([sys.executable, "-c", "import subprocess, sys, time; "
                      "subprocess.Popen([sys.executable, '-c', 'while True: pass']); print('ready', flush=True); "
                      "time.sleep(60)"])
    try:
        tasks = busy_machine._tasks(parent.pid)
        assert len({task.split("/")[2] for task in tasks}) == 2, tasks  # the parent and its spinning child
        assert busy_machine.held_back(parent.pid)  # the parent sleeps; its child runs
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        stopped(parent)


def test_child_ending_in_window_counts():
    """A parent waiting for a child that ends within the window (a fork server's connection
    process finishing its exit): the child's schedstat is gone with it, and the
    parent only slept, yet the tree was at work.  The child here sleeps, so only its ending
    can say so."""
    parent = started([sys.executable, "-c", "import subprocess, sys, time; "
                      "child = subprocess.Popen(['sleep', '0.2']); print('ready', flush=True); child.wait(); "
                      "time.sleep(60)"])
    try:
        assert len({task.split("/")[2] for task in busy_machine._tasks(parent.pid)}) == 2  # the sleep is there
        assert busy_machine.held_back(parent.pid, window=0.5)
        assert len({task.split("/")[2] for task in busy_machine._tasks(parent.pid)}) == 1  # and ended in it
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        stopped(parent)


def test_a_stuck_process_is_called_stuck_after_its_bound_and_one_window():
    deaf = started(DEAF)
    try:
        deaf.send_signal(signal.SIGTERM)
        start = time.monotonic()
        assert waits.exit_status(deaf, within=0.5, cap=10.0) is None
        assert time.monotonic() - start < 0.5 + 2 * busy_machine.WINDOW + 2.0  # not the cap
    finally:
        stopped(deaf)


def test_a_working_process_is_waited_for_past_its_bound_up_to_the_cap():
    busy = started(SPIN_THEN_EXIT)
    try:
        busy.send_signal(signal.SIGTERM)
        assert waits.exit_status(busy, within=0.5, cap=30.0) == 3  # 1.5 s of its CPU: past 0.5 s
    finally:
        stopped(busy)
    busy = started(SPIN_THEN_EXIT)
    try:
        start = time.monotonic()
        assert waits.exit_status(busy, within=0.2, cap=0.6) is None  # the cap holds
        assert time.monotonic() - start < 0.6 + busy_machine.WINDOW + 2.0
    finally:
        stopped(busy)


# A server that answers its first line late: after 2.5 s computing, or 5 s asleep (wall time,
# however busy the machine: the client waits 1 s, and again while the server is held back).
LATE_SERVER = """
import socket, sys, time
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
conn.recv(100)
start = time.monotonic()
if sys.argv[1] == "computes":
    while time.monotonic() - start < 2.5: pass
else:
    time.sleep(5)
conn.sendall(b"late\\n")
time.sleep(5)
"""


def test_battery_waits_for_computing_server():
    """The batterys client waits again for a server that computes not for one that sleeps."""
    from labkit.battery import client
    from labkit.battery.cases import Size

    for how, answered in (("computes", True), ("sleeps", False)):
        server = subprocess.Popen([sys.executable, "-c", LATE_SERVER, how], stdout=subprocess.PIPE)
        try:
            port = int(server.stdout.readline())
            with client.watching(port, server.pid), client.connect(port, Size(timeout=1.0)) as sock:
                sock.sendall(b"hello\n")
                if answered:
                    assert client.Lines(sock).line("the late line") == b"late"
                else:  # called stuck after one wait and one window: long before its line
                    try:
                        client.Lines(sock).line("the late line")
                    except client.CaseFailed as failure:
                        assert "nothing more came within 1 s (got" in str(failure), str(failure)
                    else:
                        raise AssertionError("a sleeping server's late line was waited for")
        finally:
            stopped(server)
