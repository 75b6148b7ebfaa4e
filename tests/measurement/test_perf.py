"""perf.py: parsing real and documented perf outputs, probing, attaching, the /proc fallback."""

import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from labkit import perf, busy_machine
from labkit.errors import LabError
from waits import wait_for

# make test runs these first, alone on the machine (tests/conftest.py): a spinner's share of a
# CPU is what some assert, and beside the parallel phase's loopback traffic (softirq work, which
# no nice value holds back) a spinner got 0.296 of a CPU where 0.3 was the least expected.
pytestmark = [pytest.mark.measuring, pytest.mark.quiet]

DATA = Path(__file__).parents[1] / "data" / "perf"  # tests/data/perf/
nan = math.isnan


def parse(name):
    return perf.parse_stat_csv((DATA / name).read_text())


def detail(name):
    return perf.parse_stat_csv_detail((DATA / name).read_text())


# --- parsing ----------------------------------------------------------------

def test_every_recorded_output_parses_to_the_requested_events():
    for path in DATA.glob("*.csv"):
        values = perf.parse_stat_csv(path.read_text())
        assert "task-clock" in values, path.name
        assert all(isinstance(v, float) for v in values.values()), path.name


def test_vm_as_root_counts_software_and_marks_hardware_missing():
    values = parse("debian12-vm-root.csv")
    assert values["task-clock"] == pytest.approx(156.41)
    assert values["context-switches"] == 191
    assert values["cpu-migrations"] == 6
    assert values["page-faults"] == 8521
    for event in perf.HARDWARE_EVENTS:
        assert nan(values[event]), event  # missing, never 0
    assert detail("debian12-vm-root.csv")["cycles"].status == "not supported"


def test_user_only_mode():
    """User only mode strips modifier and refuses the fake zero context switches."""
    values = parse("debian12-vm-user-paranoid2.csv")
    assert set(values) == set(perf.DEFAULT_EVENTS)  # ":u" stripped
    assert values["task-clock"] == pytest.approx(24.41)
    assert values["page-faults"] == 815
    # perf printed 0 for both, but with ":u" they cannot count: not measured
    assert nan(values["context-switches"]) and nan(values["cpu-migrations"])
    assert detail("debian12-vm-user-paranoid2.csv")["context-switches"].status == "user-only"


def test_not_counted_is_nan_in_the_parser():
    values = parse("debian12-vm-attach-idle.csv")
    assert all(nan(v) for v in values.values())
    reading = detail("debian12-vm-attach-idle.csv")["task-clock"]
    assert reading.status == "not counted" and reading.runtime == 0


def test_repeat_variance_column_is_skipped():
    readings = detail("debian12-vm-repeat3.csv")
    assert readings["task-clock"].value == pytest.approx(135.69)
    assert readings["task-clock"].runtime == 135689795
    assert readings["task-clock"].percent_running == 100
    assert readings["page-faults"].value == 8579
    assert nan(readings["cycles"].value)


def test_bare_metal_hardware_counters_and_derived_ratios():
    values = parse("written-baremetal-skylake.csv")
    assert values["cycles"] == 5612003911
    assert values["instructions"] == 10385741218
    assert values["cache-misses"] == 3120957
    derived = perf.derive(values, elapsed_s=1.5527)
    assert derived["ipc"] == pytest.approx(1.85, abs=0.005)
    assert derived["branch-miss-rate"] == pytest.approx(1.02, abs=0.005)
    assert derived["cpus-utilized"] == pytest.approx(0.987, abs=0.001)


def test_multiplexed_counters_keep_scaling():
    """Multiplexed counters keep perfs scaled value and their percentage."""
    readings = detail("written-multiplexed-user.csv")
    assert readings["cycles"].value == 2901338452
    assert readings["cycles"].percent_running == pytest.approx(66.50)
    assert readings["cache-misses"].percent_running == pytest.approx(50.34)
    assert readings["task-clock"].percent_running == 100
    assert nan(readings["context-switches"].value)  # 0 with ":u"
    assert len(readings) == 9  # the metric-only line is not an event


def test_hybrid_rows_add_unscaled_counts():
    readings = detail("written-hybrid-alderlake.csv")
    # atom: 300e6 scaled from 2% -> 6e6 really counted; core: 4e9 from 97% -> 3.88e9;
    # together they cover 99% of the time, so the sum is scaled once by 100/99.
    assert readings["cycles"].value == pytest.approx((6e6 + 3.88e9) / 0.99)
    assert readings["cycles"].percent_running == pytest.approx(99.0)
    assert readings["instructions"].value == 8e9  # atom row <not counted> adds nothing
    assert readings["branch-misses"].value == 16e6
    assert nan(readings["cache-misses"].value)
    assert readings["cache-misses"].status == "not supported"
    assert "cpu_core/cycles/" in readings["cycles"].raw_name


def test_hybrid_rows_with_user_modifier():
    values = parse("written-hybrid-user.csv")
    assert values["cycles"] == pytest.approx(60e6 + 100e6)
    assert nan(values["context-switches"])


def test_legacy_two_column_output_and_capitalised_names():
    values = parse("written-perf3-legacy.csv")
    assert values["task-clock"] == pytest.approx(12.345678)
    assert values["context-switches"] == 57
    assert values["cpu-migrations"] == 1
    assert nan(values["cycles"]) and nan(values["instructions"])


@pytest.mark.parametrize("raw, expected", [
    ("cycles", ("cycles", "", "")),
    ("cycles:u", ("cycles", "", "u")),
    ("task-clock:ukh", ("task-clock", "", "ukh")),
    ("cpu_core/cycles/", ("cycles", "cpu_core", "")),
    ("cpu_atom/branch-misses/u", ("branch-misses", "cpu_atom", "u")),
    ("cpu-cycles", ("cycles", "", "")),
    ("CPU-migrations", ("cpu-migrations", "", "")),
])
def test_canonical_event_names(raw, expected):
    assert perf.canonical_event(raw) == expected


def test_headers_comments_and_blank_lines_are_ignored():
    text = "# started on x\n\n Performance counter stats for process id '42':\n\n5,,page-faults,1,100.00,,\n"
    assert perf.parse_stat_csv(text) == {"page-faults": 5.0}


# --- derive -----------------------------------------------------------------

def test_derive_is_nan_safe():
    nothing = perf.derive({})
    assert nan(nothing["ipc"]) and nan(nothing["branch-miss-rate"]) and nan(nothing["cpus-utilized"])
    vm = perf.derive({"task-clock": 500.0, "cycles": math.nan, "instructions": math.nan,
                      "branches": math.nan, "branch-misses": math.nan}, elapsed_s=2.0)
    assert nan(vm["ipc"]) and nan(vm["branch-miss-rate"])
    assert vm["cpus-utilized"] == pytest.approx(0.25)
    assert nan(perf.derive({"cycles": 0.0, "instructions": 5.0})["ipc"])  # no division by zero
    assert nan(perf.derive({"task-clock": 10.0}, elapsed_s=0)["cpus-utilized"])
    assert nan(perf.derive({"task-clock": None}, elapsed_s=1)["cpus-utilized"])


def test_rusage_counters():
    values = perf.rusage_counters({"user_s": 0.25, "sys_s": 0.5, "voluntary_ctxt_switches": 10,
                                   "involuntary_ctxt_switches": 3, "minor_faults": 100,
                                   "major_faults": 1, "max_rss_kb": 4000})
    assert values["task-clock"] == pytest.approx(750.0)
    assert values["context-switches"] == 13
    assert values["page-faults"] == 101
    assert nan(values["cpu-migrations"]) and nan(values["cycles"])
    assert set(values) == set(perf.DEFAULT_EVENTS)
    assert nan(perf.rusage_counters({})["task-clock"])
    with pytest.raises(LabError):
        perf.rusage_counters("not a dict")


def test_fill_missing_takes_only_what_perf_could_not_count():
    from_perf = {"task-clock": 10.0, "context-switches": math.nan, "cycles": math.nan}
    from_rusage = {"task-clock": 20.0, "context-switches": 7.0, "cycles": math.nan}
    filled = perf.fill_missing(from_perf, from_rusage)
    assert filled["task-clock"] == 10.0 and filled["context-switches"] == 7.0 and nan(filled["cycles"])


# --- probe ------------------------------------------------------------------

needs_perf = pytest.mark.skipif(os.environ.get("LABKIT_NO_PERF") == "1" or not perf.probe().usable,
                                reason="perf is not usable on this machine")


def test_probe_without_perf_on_path_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    found = perf.probe(refresh=True)
    assert not found.usable and found.path is None
    assert "not installed" in found.problem
    assert "apt-get install linux-perf" in found.fix or "linux-tools" in found.fix
    assert found.counted == ()


def test_probe_respects_labkit_no_perf(monkeypatch):
    monkeypatch.setenv("LABKIT_NO_PERF", "1")
    found = perf.probe(refresh=True)
    assert not found.usable and "LABKIT_NO_PERF" in found.problem


@needs_perf
def test_probe_on_this_machine():
    found = perf.probe()
    assert found.version and found.path
    assert "task-clock" in found.counted
    assert set(found.counted) | set(found.unsupported) == set(perf.DEFAULT_EVENTS)
    if "cycles" in found.unsupported:
        assert "hardware counters" in found.problem


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None or perf.read_paranoid() != 2
                    or shutil.which("perf") is None, reason="needs root, runuser and paranoid 2")
def test_probe_as_an_ordinary_user_at_paranoid_2_sees_user_only_mode():
    code = "from labkit import perf; p = perf.probe(); print(p.user_only, p.usable, ' '.join(p.counted))"
    done = subprocess.run(["runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={Path(perf.__file__).parent.parent}",
                           "/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"nobody cannot run labkit here: {done.stderr.strip()[-200:]}")
    user_only, usable, counted = done.stdout.split(" ", 2)
    assert user_only == "True" and usable == "True"
    assert "task-clock" in counted.split() and "context-switches" not in counted.split()


def test_classify_failure_for_debian_paranoid_3():
    stderr = textwrap.dedent("""\
        Error:
        Access to performance monitoring and observability operations is limited.
        Consider adjusting /proc/sys/kernel/perf_event_paranoid setting to open
        access to performance monitoring and observability operations for processes
        without CAP_PERFMON, CAP_SYS_PTRACE or CAP_SYS_ADMIN Linux capability.
        perf_event_paranoid setting is 3:
    """)
    problem, fix = perf.classify_failure(stderr, 3)
    assert "not permitted" in problem and "= 3" in problem
    assert "sysctl kernel.perf_event_paranoid=1" in fix
    problem, fix = perf.classify_failure("WARNING: perf not found for kernel 6.8.0-40", None)
    assert "linux-tools-$(uname -r)" in fix


def test_paranoid_meaning_covers_every_level():
    # -1 is not "everything": another user's process still needs ptrace permission or CAP_PERFMON
    assert "ptrace" in perf.paranoid_meaning(-1) and "everything" not in perf.paranoid_meaning(-1)
    assert "whole CPUs" in perf.paranoid_meaning(0)
    assert "own processes" in perf.paranoid_meaning(1)
    assert "user-space" in perf.paranoid_meaning(2)
    assert "not use perf at all" in perf.paranoid_meaning(3)
    assert "not use perf at all" in perf.paranoid_meaning(4)


# --- attach -----------------------------------------------------------------

# A child that reports its start-up CPU time, waits for a line on stdin, runs
# `work`, reports its CPU time again, and stays alive until a second line (so it
# is still there when perf stops).
CHILD = textwrap.dedent("""\
    import sys, threading, time
    print(time.process_time(), flush=True)
    sys.stdin.readline()
    {work}
    print(time.process_time(), flush=True)
    sys.stdin.readline()
""")

BURN_AND_SLEEP = textwrap.dedent("""\
    def burn(seconds):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
    for _ in range(20):
        burn(0.01)
        time.sleep(0.002)      # voluntary context switches
""")

THREADS_AFTER_ATTACH = textwrap.dedent("""\
    def burn(seconds):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
    workers = [threading.Thread(target=burn, args=(0.25,)) for _ in range(2)]
    for w in workers: w.start()
    for w in workers: w.join()
""")

THREADS_STILL_RUNNING = textwrap.dedent("""\
    stop = False
    def spin():
        while not stop:
            pass
    start = time.process_time()
    workers = [threading.Thread(target=spin) for _ in range(2)]
    for w in workers: w.start()
    # 0.3 s of CPU time, not 0.4 s of wall time: a busy machine gave that wall time 0.09 s of CPU
    deadline = time.time() + 20
    while time.process_time() - start < 0.3 and time.time() < deadline:
        time.sleep(0.02)
    print(time.process_time(), flush=True)
    sys.stdin.readline()   # perf stops while the threads still spin
    stop = True
    for w in workers: w.join()
""")


class Child:
    def __init__(self, work):
        self.popen = subprocess.Popen([sys.executable, "-c", CHILD.format(work=work)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.startup_cpu_s = float(self.popen.stdout.readline())  # before perf attaches

    def go(self) -> float:
        """Start the work; return the child's own CPU seconds once it is done."""
        self.popen.stdin.write("\n")
        self.popen.stdin.flush()
        return float(self.popen.stdout.readline())

    def end(self):
        try:
            self.popen.stdin.write("\n\n")
            self.popen.stdin.flush()
        except BrokenPipeError:
            pass
        self.popen.wait(timeout=10)


@pytest.fixture
def child_factory():
    made = []

    def make(work):
        made.append(Child(work))
        return made[-1]

    yield make
    for child in made:
        if child.popen.poll() is None:
            child.popen.kill()
            child.popen.wait()


def perf_processes_watching(pid):
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline and os.path.basename(cmdline[0]) == "perf" and str(pid) in cmdline:
            found.append(proc)
    return found


@pytest.mark.timeout(60)
@pytest.mark.parametrize("source", ["perf", "proc"])
def test_attach_counts_a_busy_child(source, monkeypatch, child_factory):
    if source == "proc":
        monkeypatch.setenv("LABKIT_NO_PERF", "1")
    elif not perf.probe().usable:
        pytest.skip("perf is not usable here")
    child = child_factory(BURN_AND_SLEEP)
    stolen_ticks = busy_machine.steal_ticks()
    with perf.attach(child.popen.pid) as counting:
        cpu_s = child.go() - child.startup_cpu_s
    stolen_ticks = busy_machine.steal_ticks() - stolen_ticks
    assert counting.source == source
    values = counting.counters
    assert set(values) == set(perf.DEFAULT_EVENTS)
    assert values["task-clock"] >= 180  # it burned 200 ms of CPU while attached
    # No more than the child's own CPU time in the window: task-clock runs on local_clock()
    # (perf_clock() in kernel/events/core.c), and the child's CPU time on the run queue's
    # task clock, which leaves out what a hypervisor stole while the child was on a CPU
    # (update_rq_clock_task, with paravirtual steal accounting); so what the machine was
    # stolen in the window may be counted too (21.5 ms in a 209 ms burn on a virtual machine).
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    steal_ms = (stolen_ticks + 1) * tick_ms  # /proc/stat's sum rounds down: one tick more
    proc_tick_ms = tick_ms if source == "proc" else 0
    assert values["task-clock"] <= cpu_s * 1000 + 20 + proc_tick_ms + steal_ms
    assert values["context-switches"] >= 10  # 20 sleeps
    for event in perf.HARDWARE_EVENTS:
        if event not in perf.probe().counted:
            assert nan(values[event]) and event in counting.note
    if source == "proc":
        assert nan(values["cpu-migrations"]) and "/proc" in counting.note
    else:
        assert counting.attach_seconds is not None and counting.attach_seconds < 5
    child.end()
    assert perf_processes_watching(child.popen.pid) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("source", ["perf", "proc"])
def test_threads_created_after_attach_are_counted(source, monkeypatch, child_factory):
    if source == "proc":
        monkeypatch.setenv("LABKIT_NO_PERF", "1")
    elif not perf.probe().usable:
        pytest.skip("perf is not usable here")
    child = child_factory(THREADS_AFTER_ATTACH)
    with perf.attach(child.popen.pid) as counting:
        child.go()
    # The two threads burned 2 x 250 ms of their own CPU time after perf attached
    # and exited before perf stopped.
    assert counting.counters["task-clock"] >= 450
    child.end()


@needs_perf
@pytest.mark.timeout(60)
def test_threads_still_running_when_perf_stops_are_counted(child_factory):
    child = child_factory(THREADS_STILL_RUNNING)
    with perf.attach(child.popen.pid) as counting:
        spun_s = child.go() - child.startup_cpu_s  # threads spun 0.3 s of CPU time
    assert spun_s > 0.1
    assert counting.counters["task-clock"] >= spun_s * 1000 * 0.95
    child.end()
    assert perf_processes_watching(child.popen.pid) == []


THREADS_BEFORE_ATTACH = textwrap.dedent("""\
    import sys, threading, time
    go = threading.Event()
    def burn():
        go.wait()
        end = time.thread_time() + 0.1
        while time.thread_time() < end:
            pass
    workers = [threading.Thread(target=burn) for _ in range(3)]
    for w in workers: w.start()
    print("ready", flush=True)
    sys.stdin.readline()
    go.set()
    for w in workers: w.join()
    print("done", flush=True)
    sys.stdin.readline()
""")


@needs_perf
@pytest.mark.timeout(60)
def test_threads_that_exist_before_attach_are_counted():
    child = subprocess.Popen([sys.executable, "-c", THREADS_BEFORE_ATTACH], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        with perf.attach(child.pid) as counting:
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "done"
        assert counting.source == "perf"
        assert counting.counters["task-clock"] >= 280  # 3 threads x 100 ms
    finally:
        child.kill()
        child.wait()


@needs_perf
@pytest.mark.timeout(30)
def test_a_process_that_never_runs_reads_zero_not_missing():
    sleeper = subprocess.Popen(["sleep", "20"])
    try:
        asleep = psutil.Process(sleeper.pid)
        wait_for(lambda: asleep.name() == "sleep" and asleep.status() == psutil.STATUS_SLEEPING,
                 within=10, what="sleep 20 started and asleep")
        with perf.attach(sleeper.pid, events=perf.SOFTWARE_EVENTS) as counting:
            time.sleep(0.2)  # the window counted: the sleeper does not run in it
        assert counting.counters["task-clock"] == 0.0
        assert "did not run" in counting.note
    finally:
        sleeper.kill()
        sleeper.wait()


@needs_perf
@pytest.mark.timeout(30)
def test_attach_leaves_no_perf_behind_even_on_error(child_factory):
    child = child_factory("pass")
    wait_for(lambda: psutil.Process(child.popen.pid).status() == psutil.STATUS_SLEEPING,
             within=10, what="the child waiting on its stdin")
    with pytest.raises(RuntimeError):
        with perf.attach(child.popen.pid):
            assert perf_processes_watching(child.popen.pid), "perf should be running here"
            raise RuntimeError("the measured cell failed")
    assert perf_processes_watching(child.popen.pid) == []
    child.end()


def test_attach_to_a_missing_process_is_a_lab_error():
    dead = subprocess.Popen(["true"])
    dead.wait()
    with pytest.raises(LabError, match="does not exist"):
        perf.attach(dead.pid).start()


# --- wrapping a command -----------------------------------------------------

@needs_perf
@pytest.mark.timeout(30)
def test_wrap_command_and_read_output(tmp_path):
    output = tmp_path / "client.csv"
    work = ("import time\nfor _ in range(10): time.sleep(0.002)\n"
            "end=time.process_time()+0.05\nwhile time.process_time()<end: pass")
    cmd = perf.wrap_command([sys.executable, "-c", work], output)
    assert "--" in cmd and cmd[-3:] == [sys.executable, "-c", work]
    subprocess.run(cmd, check=True, timeout=20)
    values = perf.read_output(output)
    assert set(values) == set(perf.DEFAULT_EVENTS)
    assert values["task-clock"] >= 40
    assert values["page-faults"] > 0


def test_wrap_command_unchanged_without_perf(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_NO_PERF", "1")
    cmd = ["./loadgen", "--port", "1"]
    assert perf.wrap_command(cmd, tmp_path / "x.csv") == cmd
    values = perf.read_output(tmp_path / "x.csv")  # perf never wrote it
    assert set(values) == set(perf.DEFAULT_EVENTS) and all(nan(v) for v in values.values())


@pytest.mark.parametrize("source", ["perf", "proc"])
def test_a_spinning_process_uses_one_cpu_over_the_time_counted(source, monkeypatch):
    """counting.seconds is the window the counters cover: a process that spins through
    all of it used one CPU there (a busy-polling server measured against the client's
    shorter run read 300 CPUs on a 2-CPU machine)."""
    if source == "proc":
        monkeypatch.setenv("LABKIT_NO_PERF", "1")
    elif not perf.probe().usable:
        pytest.fail("perf is not usable here: run the tests as root, or see labkit doctor", pytrace=False)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # past the interpreter's start (a few tens of ms of CPU), into the loop
        wait_for(lambda: sum(psutil.Process(spinner.pid).cpu_times()[:2]) > 0.1, within=30,
                 what="the spinner spinning")
        with perf.attach(spinner.pid, ["task-clock"]) as counting:
            time.sleep(1.0)  # the window counted
    finally:
        spinner.kill()
        spinner.wait()
    assert 0.95 < counting.seconds < 3.0
    used = perf.derive(counting.counters, counting.seconds)["cpus-utilized"]
    # at most the one CPU it spins on (a window taken too short read 1.6, and 333 for a server);
    # less where other work shares the CPUs
    assert 0.3 < used < 1.05
