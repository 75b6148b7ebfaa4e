"""labkit.cpu_sharing: what else ran on the server's CPUs while the client ran, held against
psutil's reading of the same processes and CPUs; and the sentence a row's figures make.

The suite shares its CPUs with other tests, so a real run here may always have been shared:
no test asserts that one was not.  The bounds below hold however busy the machine is."""

import math
import os
import subprocess
import sys

import psutil
import pytest

from labkit import cpu_sharing, row as rows

NAN = float("nan")
# Each figure in /proc is in USER_HZ ticks (10 ms), each read twice: busy time takes three
# per CPU from /proc/stat (idle, iowait, steal) and the server's time one per value read.
SLOP_MS = 6 * 1000 / os.sysconf("SC_CLK_TCK")

# Sent a line, spins until its own CPU time reaches 0.3 s, says so, then sleeps: its CPU
# time is read while it is still there.
SPINNER = [sys.executable, "-c", """
import sys, time
print("ready", flush=True)
sys.stdin.readline()
start = time.thread_time()
while time.thread_time() < start + 0.3:
    pass
print("spun", flush=True)
time.sleep(60)
"""]
# A lightly loaded server: on each line it is sent, a thread spins 0.1 s of CPU and ends,
# then a child process spins 0.1 s and is reaped; both are gone when the run ends.
SERVER = [sys.executable, "-c", """
import os, sys, threading, time

def spin(seconds):
    while time.thread_time() < seconds:
        pass

print("ready", flush=True)
for line in sys.stdin:
    worker = threading.Thread(target=spin, args=(0.1,))
    worker.start()
    worker.join()
    child = os.fork()
    if child == 0:
        spin(0.1)
        os._exit(0)
    os.waitpid(child, 0)
    print("done", flush=True)
"""]


def started(argv, cpu):
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, [cpu]))
    assert proc.stdout.readline() == "ready\n"
    return proc


def cpu_ms(process: psutil.Process) -> float:
    """utime + stime of the process and of the children it reaped, as psutil reads them."""
    times = process.cpu_times()
    return 1000 * (times.user + times.system + times.children_user + times.children_system)


def test_other_tasks_is_busy_less_server():
    """Other tasks are the cpus busy time less the servers own ended threads and children included."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    server, spinner = started(SERVER, cpu), started(SPINNER, cpu)
    try:
        watched, spinning = psutil.Process(server.pid), psutil.Process(spinner.pid)
        server0, spinner0 = cpu_ms(watched), cpu_ms(spinning)
        with cpu_sharing.Watch(server.pid, [cpu], client_cpus=[]) as sharing:
            for proc in (server, spinner):
                proc.stdin.write("go\n")
                proc.stdin.flush()
            assert server.stdout.readline() == "done\n"
            assert spinner.stdout.readline() == "spun\n"
        served, spun = cpu_ms(watched) - server0, cpu_ms(spinning) - spinner0
        row = {}
        sharing.fill(row)
    finally:
        for proc in (server, spinner):
            proc.kill()
            proc.wait()
    assert served >= 200 - SLOP_MS and spun >= 300 - SLOP_MS, (served, spun)  # what they were made to do
    window_ms = row["server_cpu_window_s"] * 1000
    others = row["server_cpu_others_ms"]
    # the spinner ran on that CPU, and is not the server: all of it is others' ...
    assert others >= spun - SLOP_MS, (others, spun, row)
    # ... and the server's own time, its ended thread and reaped child included, is not
    assert others <= window_ms - served + SLOP_MS, (others, window_ms, served, row)
    assert row["server_run_delay_ms"] >= 0 and row["server_cpu_steal_ms"] >= 0, row


def test_others_not_measurable():
    """Others are not measurable where the load generator may run or the server is gone."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    server = started(SERVER, cpu)
    try:
        with cpu_sharing.Watch(server.pid, [cpu], client_cpus=None) as sharing:  # not pinned: anywhere
            pass
        row = {}
        sharing.fill(row)
        assert math.isnan(row["server_cpu_others_ms"]) and row["server_cpu_steal_ms"] >= 0, row
        assert row["server_cpu_window_s"] > 0 and row["server_run_delay_ms"] >= 0, row
        with cpu_sharing.Watch(server.pid, [cpu], client_cpus=[]) as sharing:
            server.kill()
            server.wait()
        row = {}
        sharing.fill(row)
        assert math.isnan(row["server_cpu_others_ms"]) and math.isnan(row["server_run_delay_ms"]), row
    finally:
        server.kill()
        server.wait()
    row = {}
    cpu_sharing.Watch(server.pid, [cpu]).fill(row)  # never entered: nothing was read
    assert all(math.isnan(row[column]) for column in cpu_sharing.COLUMNS), row


def test_every_row_has_the_columns_not_measured_until_measured():
    assert all(math.isnan(rows.MEASURED[column]) for column in cpu_sharing.COLUMNS)


QUIET = {"server_cpus": [0], "server_cpu_window_s": 2.0, "server_cpu_others_ms": 31.0,
         "server_run_delay_ms": 12.0, "server_cpu_steal_ms": 0.0}


@pytest.mark.parametrize("given, says", [
    ({}, ""),
    (QUIET, ""),
    ({**QUIET, "server_cpu_others_ms": -12.0}, ""),  # a quiet CPU within the ticks' resolution
    ({**QUIET, "server_cpu_others_ms": 824.0, "server_run_delay_ms": 9.4},
     "server's CPU shared: other tasks ran 824 ms of the 2.00 s run on CPU 0 (41%); "
     "the server's threads waited 9 ms for a CPU; steal 0 ms"),
    ({**QUIET, "server_cpu_steal_ms": 400.0},
     "server's CPU shared: other tasks ran 31 ms of the 2.00 s run on CPU 0 (2%); "
     "the server's threads waited 12 ms for a CPU; steal 400 ms (20%)"),
    ({**QUIET, "server_cpus": [0, 1], "server_cpu_others_ms": 300.0}, ""),  # 300 of 4,000 ms
    ({**QUIET, "server_cpu_others_ms": 250.0}, ""),  # 12%
    ({**QUIET, "server_cpu_window_s": 0.6, "server_cpu_others_ms": 95.0}, ""),  # 16%, but under 100 ms
    ({**QUIET, "server_cpu_window_s": 0.6, "server_cpu_others_ms": 300.0},
     "server's CPU shared: other tasks ran 300 ms of the 0.60 s run on CPU 0 (50%); "
     "the server's threads waited 12 ms for a CPU; steal 0 ms"),
    ({**QUIET, "server_cpus": [0, 1], "server_cpu_others_ms": 900.0, "server_cpu_steal_ms": NAN},
     "server's CPU shared: other tasks ran 900 ms of the 2.00 s run on CPUs 0, 1 (22%); "
     "the server's threads waited 12 ms for a CPU"),
    # the load generator on the server's CPU: others not measurable, the wait says it
    ({**QUIET, "server_cpu_others_ms": NAN, "server_run_delay_ms": 700.0},
     "server's CPU shared: the server's threads waited 700 ms for a CPU in the 2.00 s run on CPU 0; steal 0 ms"),
    ({**QUIET, "server_cpu_others_ms": NAN, "server_run_delay_ms": NAN, "server_cpu_steal_ms": 400.0},
     "server's CPU shared: steal 400 ms of the 2.00 s run on CPU 0 (20%)"),
    ({**QUIET, "server_cpu_others_ms": NAN, "server_run_delay_ms": 20.0}, ""),
    # a multi-threaded server's threads wait for each other: where others is measured, it decides
    ({**QUIET, "server_run_delay_ms": 1500.0}, ""),
    ({**QUIET, "server_cpu_others_ms": NAN, "server_run_delay_ms": NAN, "server_cpu_steal_ms": NAN}, ""),
    ({**QUIET, "server_cpu_window_s": NAN, "server_cpu_others_ms": 824.0}, ""),
    ({**QUIET, "server_cpu_window_s": None, "server_cpu_others_ms": None}, ""),
])
def test_the_reason_names_what_was_measured_and_nothing_else(given, says):
    assert cpu_sharing.reason(given) == says


@pytest.mark.measuring
def test_spinner_on_servers_cpu_is_reported(built_bin):
    """A planted fault through measure.point: a `nice -n 19` spinner pinned to the server's CPU
    beside a light load (spin 200 us at 500/s: a tenth of the CPU)."""
    from labkit import measure
    from labkit.procs import LoadSpec, Pinning, ServerSpec

    pinning = Pinning.resolve(None, None, allow_overlap=True)
    load = LoadSpec(4, 1, "spin", {"rate": 500, "duration": 1, "spin-us": 200, "engine": "events"}, timeout=10)
    spinner = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"],
                               preexec_fn=lambda: os.sched_setaffinity(0, pinning.server_cpus))
    try:
        row = measure.point(measure.Run(ServerSpec("epoll", "spin"), load, pinning))
    finally:
        spinner.kill()
        spinner.wait()
    assert row["status"] == "ok", row["error"]
    assert row["server_cpu_window_s"] >= 1 and row["server_run_delay_ms"] >= 0, row
    if not set(row["server_cpus"]) & set(row["client_cpus"]):
        # the spinner had what the server left: most of the window
        assert row["server_cpu_others_ms"] >= 0.5 * row["server_cpu_window_s"] * 1000, row
    assert cpu_sharing.reason(row).startswith("server's CPU shared: "), row
