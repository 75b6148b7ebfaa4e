"""Fixtures every test file may use: the C build (once per run) and a check
that no test leaves a process behind."""

import fcntl
import fnmatch
import subprocess

import psutil
import pytest

from labkit import paths


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


@pytest.fixture(autouse=True)
def no_leftover_processes():
    """Fail a test that leaves a server, client or perf process running.

    Processes already running before the test (started by session- or
    module-scoped fixtures) are not counted; the leftovers are killed so the
    next test starts clean."""
    before = _live_descendants()
    yield
    leftovers = _live_descendants() - before
    if not leftovers:
        return
    _, still_running = psutil.wait_procs(leftovers, timeout=2)  # let stopping ones finish
    if not still_running:
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
# a students' edition (labkit release): the tests that wait for an exercise's answer


def pytest_collection_modifyitems(config, items):
    """In an edition, leave out the tests of every C exercise whose function in csrc/ is
    still the stub (they run once the student's own is there); nothing in the instructor's
    checkout (no tests/edition_left_out.json)."""
    from labkit.instructor import release

    removed, waiting = release.left_out()
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
