"""conftest.no_leftover_processes: what it counts as a test's leftover, and what not."""

import subprocess
import sys

import psutil
import pytest

from conftest import _a_browsers_helper, _live_descendants
from waits import wait_for

# A stand-in for a process a fixture started before the test: named NAME (prctl PR_SET_NAME,
# the name psutil reads from /proc/PID/stat), it starts a child when told to, on its stdin.
STAND_IN = """
import ctypes, subprocess, sys
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)
print("ready", flush=True)
sys.stdin.readline()
child = subprocess.Popen(["sleep", "30"])
print(child.pid, flush=True)
sys.stdin.readline()
child.kill()
"""


@pytest.mark.parametrize("name, a_helper", [
    ("chromium", True),      # Chromium's own helper: it ends with the browser
    ("jupyter-lab", False),  # what a kernel under JupyterLab starts is the test's
])
def test_only_what_a_running_browser_starts_is_not_the_tests(name, a_helper):
    fixture = subprocess.Popen([sys.executable, "-c", STAND_IN, name], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    own = None
    try:
        assert fixture.stdout.readline() == "ready\n"
        wait_for(lambda: psutil.Process(fixture.pid).name() == name, what="the stand-in's name")
        before = _live_descendants()
        fixture.stdin.write("go\n")
        fixture.stdin.flush()
        child = psutil.Process(int(fixture.stdout.readline()))
        own = subprocess.Popen(["sleep", "30"])
        assert {child.pid, own.pid} <= {proc.pid for proc in _live_descendants() - before}
        assert _a_browsers_helper(child, before) == a_helper
        assert not _a_browsers_helper(psutil.Process(own.pid), before)
    finally:
        if own is not None:
            own.kill()
            own.wait()
        fixture.stdin.close()
        fixture.wait(timeout=10)
