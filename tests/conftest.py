"""Fixtures every test file may use: the C build (once per run) and a check
that no test leaves a process behind; and the suite's three phases.

`make test` runs each test once, in three phases: quiet, then serial and parallel side by
side (the serial phase first in line for the CPUs: the Makefile says how).  `--phase quiet`
runs the tests marked `quiet` alone on the machine: the notebooks' quick runs whose
measured figures their tests read, and which other tests read too (tests/quickrun.py
shares each run through LABKIT_TEST_RUN, which make sets for all three and removes after
them), and the exact counts another test's traffic or perf could change.  `--phase
serial` runs the other tests marked `measuring` one at a time (their figures are what
they assert: latencies, counts, a verdict), among them those of the quick runs make
makes first in line before the parallel phase starts (quickrun.MADE_FIRST_IN_LINE).
`--phase parallel` runs every other test on pytest-xdist's workers, a file's tests on one
worker (--dist loadfile: pytest makes a fixture shared by a file's tests once per worker,
and a graded class takes a minute to make)."""

import fcntl
import fnmatch
import os
import re
import resource
import subprocess

import psutil
import pytest

from labkit import paths, busy_machine


@pytest.fixture(scope="session")
def built_bin():
    """build/bin/ after `make build` ran once for this test run.

    A file lock keeps pytest-xdist workers from compiling over each other."""
    paths.BUILD.mkdir(exist_ok=True)
    with open(paths.BUILD / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(["make", "--no-print-directory", "build"], cwd=paths.ROOT,
                                capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        pytest.fail(f"`make build` failed:\n{result.stdout}{result.stderr}", pytrace=False)
    return paths.BIN


def _live_descendants():
    """This process's descendants that still run (zombies hold no port or CPU)."""
    live = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                live.add(proc)
        except psutil.NoSuchProcess:
            pass
    return live


def _a_browsers_helper(proc, before) -> bool:
    """Whether `proc` was started by a Chromium that ran before the test (a module fixture's,
    tests/notebooks/test_browser.py): Chromium starts helpers when it likes (its OnDeviceModelService
    utility may start mid-test), and they end with the browser.
    A process the test started, or a kernel's server under JupyterLab, has no Chromium above it."""
    try:
        for parent in proc.parents():
            if parent in before:
                return "chromium" in parent.name()
    except psutil.NoSuchProcess:
        pass
    return False


@pytest.fixture(autouse=True)
def no_leftover_processes():
    """Fail a test that leaves a server, client or perf process running.

    Processes already running before the test (started by session- or
    module-scoped fixtures) are not counted; the leftovers are killed so the
    next test starts clean."""
    before = _live_descendants()
    yield
    leftovers = {proc for proc in _live_descendants() - before if not _a_browsers_helper(proc, before)}
    if not leftovers:
        return
    still_running = list(leftovers)

    def finished(seconds: float) -> bool:  # let stopping ones finish
        nonlocal still_running
        _, still_running = psutil.wait_procs(still_running, timeout=seconds)
        return not still_running

    # 2 s, and more while a busy machine holds the first one back (run_delay: an exiting kernel
    # was seen still there after 2 s, its command line already gone with its memory)
    if busy_machine.patiently(finished, still_running[0].pid, 2.0, cap=10.0):
        return
    described = []
    for proc in still_running:
        try:
            described.append(f"pid {proc.pid}: {' '.join(proc.cmdline()) or proc.name()}")
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    if described:
        pytest.fail("the test left processes running (now killed):\n  " + "\n  ".join(described),
                    pytrace=False)


# ---------------------------------------------------------------------------
# the CPU time each test used, for scripts/slowest.py


def _cpu_s() -> float:
    """CPU seconds of this process and of every descendant it (or they) reaped."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    item.labkit_cpu_start = _cpu_s()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The parallel phase keeps two CPUs busy, so its wall time is the CPU its tests use over
    two: each test's CPU time (setup to teardown, its processes included once they are
    reaped; a module's fixture counts in the test that made it) goes into the JUnit report,
    where scripts/slowest.py sums it by file."""
    if call.when == "teardown" and hasattr(item, "labkit_cpu_start"):
        item.user_properties.append(("cpu_s", round(_cpu_s() - item.labkit_cpu_start, 2)))
    yield


# ---------------------------------------------------------------------------
# the two phases


def pytest_addoption(parser):
    parser.addoption("--phase", choices=("all", "quiet", "serial", "parallel"), default="all",
                     help="quiet: only the tests marked quiet; serial: the other tests marked measuring; "
                          "parallel: all others (for xdist's workers); all (the default): every test")


def pytest_configure(config):
    # Ctrl-C as a student's terminal sends it, however the suite was started: a shell without job
    # control starts `make test &` with SIGINT ignored (POSIX, for asynchronous lists), Python then
    # installs no KeyboardInterrupt handler, and the tests of what Ctrl-C stops failed (7 of them,
    # `nohup bash -c 'make test' &`).  .ci/run's `timeout` hands its command a default SIGINT.
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # One folder of shared notebook runs for this pytest run and its xdist workers (which
    # inherit the environment), unless make gave one to both phases.
    if not hasattr(config, "workerinput") and "LABKIT_TEST_RUN" not in os.environ:
        import uuid

        os.environ["LABKIT_TEST_RUN"] = uuid.uuid4().hex[:12]
        config.labkit_own_test_run = True
    if config.pluginmanager.hasplugin("xdist"):  # its hooks are known only where it is loaded
        config.pluginmanager.register(_GroupScheduling(), "labkit-group-scheduling")


def pytest_sessionfinish(session):
    if getattr(session.config, "labkit_own_test_run", False):
        from quickrun import remove_shared_folder

        remove_shared_folder()


def _phase_of(item) -> str:
    if item.get_closest_marker("quiet") is not None:
        return "quiet"
    return "serial" if item.get_closest_marker("measuring") is not None else "parallel"


def _in_this_phase(config, items) -> None:
    phase = config.getoption("--phase")
    if phase == "all":
        return
    kept = [item for item in items if _phase_of(item) == phase]
    if len(kept) < len(items):
        kept_ids = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
        items[:] = kept


# The parallel phase's longest groups (group_of, below), handed out longest first: seconds
# each takes on one of 4 workers in a make test on 2 cores (the bundles of BY_NOTEBOOK summed
# from their notebooks' groups; the whole phase is about 2,500 worker-seconds in 650 s).  pytest-xdist hands out groups
# (pytest_xdist_make_scheduler, below) in collection order: a file's tests are one group, since
# they share the fixtures the file makes once; make test turns off xdist's reordering by test
# count, which put the one-test files last (the capstone's grading then began five minutes in
# and ended the phase alone), and in collection order 07's release test, one of the longest,
# began late and ended the phase.  Longest first is the classic rule for keeping workers
# equally busy (LPT); a group missing here only runs later, so a stale table costs time, never
# a test.
GROUP_SECONDS = {
    "test_grade_attacks.py": 205, "test_capstone_grading.py": 201, "test_release.py::07": 182,
    "test_release.py::00 04 05 06 *": 145, "test_release.py::01 02 03": 138, "test_grade_dask.py": 137,
    "test_capstone.py": 131, "test_battery.py": 123, "test_browser.py::05 07": 118, "test_browser.py::02 06": 114,
    "test_browser.py::00 01 *": 105, "test_browser.py::03 04": 107, "test_server_limits.py": 107,
    "test_autograder.py": 99, "test_grade.py": 93, "test_protocol.py": 80, "test_hub.py": 48,
    "test_export.py": 44, "test_exercises.py": 42, "test_cli.py": 41,
}
# Files whose tests each take a notebook, handed out in bundles of notebooks (a notebook by
# its number; `*`: the file's tests that take none) rather than as one group (one file's chain
# of eight notebooks took 426 s on one worker, most of the phase, while the others had
# finished) or a notebook at a time (each group makes the file's module fixtures again on its
# worker: a JupyterLab and a Chromium, 7.5 CPU-s; an edition, 6 CPU-s, and its C build for
# 01-03, which run in the edition).  Bundled by the seconds each notebook's tests take (a make
# test on 2 cores: release 07 182, 02 73, 03 35, 01 30, `*` 79; browser 03 75, 01 70,
# 07 68, 06 58, 02 56, 05 50, 04 32, 00 20).  A notebook in no bundle is a group of its own.
BY_NOTEBOOK = {
    "test_release.py": ("07", "01 02 03", "00 04 05 06 *"),
    "test_browser.py": ("03 04", "00 01 *", "05 07", "02 06"),
}
NOTEBOOK_IN_ID = re.compile(r"\[.*?(\d\d)_[a-z_]+")


def group_of(nodeid: str) -> str:
    """The xdist group of a test: its file, or its file and bundle of notebooks (BY_NOTEBOOK)."""
    file = nodeid.split("::", 1)[0]
    bundles = BY_NOTEBOOK.get(file.rsplit("/", 1)[-1])
    if bundles is None:
        return file
    notebook = NOTEBOOK_IN_ID.search(nodeid)
    number = notebook.group(1) if notebook else "*"
    return f"{file}::{next((bundle for bundle in bundles if number in bundle.split()), number)}"


def _longest_groups_first(config, items) -> None:
    """Order the parallel phase's tests by group (group_of), the groups of GROUP_SECONDS
    first, longest first.  Each xdist worker is handed two groups at once, so the first round
    gives each worker one long group and one short one: a worker never holds two long ones
    while another is idle."""
    if config.getoption("--phase") != "parallel":
        return
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    by_group: dict[str, list] = {}
    for item in items:
        by_group.setdefault(group_of(item.nodeid), []).append(item)

    def seconds(group: str) -> int:
        file, _, notebook = group.partition("::")
        name = file.rsplit("/", 1)[-1] + (f"::{notebook}" if notebook else "")
        return GROUP_SECONDS.get(name, 0)

    longest = sorted((g for g in by_group if seconds(g)), key=seconds, reverse=True)
    others = [g for g in by_group if not seconds(g)]
    order = longest[:workers] + others[:workers] + longest[workers:] + others[workers:]
    items[:] = [item for name in order for item in by_group[name]]


# ---------------------------------------------------------------------------
# a students' edition (labkit release): the tests that wait for an exercise's answer


class _GroupScheduling:
    """A plugin for the parallel phase only (pytest_configure registers it where xdist runs):
    xdist's loadfile scheduling, a group (group_of) in place of a file.  xdist's own loadgroup
    cannot do it with pytest 9, whose test ids no longer take the group xdist 3.8 appends."""

    @staticmethod
    def pytest_xdist_make_scheduler(config, log):
        from xdist.scheduler import LoadScopeScheduling

        class ByGroup(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return group_of(nodeid)

        return ByGroup(config, log)


def pytest_collection_modifyitems(config, items):
    """Keep this phase's tests (above), longest groups first in the parallel phase; in an
    edition, leave out the tests of every C exercise whose function in csrc/ is still the
    stub (they run once the student's own is there); nothing in the instructor's checkout
    (no tests/edition_left_out.json)."""
    _in_this_phase(config, items)
    _longest_groups_first(config, items)
    _leave_out_what_waits_for_an_answer(config, items)


def _leave_out_what_waits_for_an_answer(config, items) -> None:
    from labkit.stubs import which_edition as editions

    removed, waiting = editions.left_out()
    config.labkit_left_out = (removed, {})
    if not waiting:
        return
    kept, deselected = [], []
    for item in items:
        why = next((why for pattern, why in waiting if fnmatch.fnmatchcase(item.nodeid, pattern)), None)
        if why is None:
            kept.append(item)
        else:
            deselected.append(item)
            config.labkit_left_out[1].setdefault(why, []).append(item.nodeid)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    removed, waiting = getattr(config, "labkit_left_out", ({}, {}))
    if not removed and not waiting:
        return
    terminalreporter.section("left out of this students' edition")
    for path, why in removed.items():
        terminalreporter.write_line(f"{path}: not in the edition ({why})")
    for why, nodeids in waiting.items():
        terminalreporter.write_line(f"{len(nodeids)} test(s) left out, {why}:")
        for nodeid in nodeids:
            terminalreporter.write_line(f"    {nodeid}")
