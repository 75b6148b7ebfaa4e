"""scripts/first-in-line.sh, which make test runs the serial phase with: the command runs in
a cgroup of its own with the largest CPU weight, and so does every process it starts, in a
session of its own too; its exit status is the command's; the cgroup is gone afterwards.
What it is for, a CPU given first to the command, is measured in make test's time, not here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import confinement, paths

SCRIPT = paths.ROOT / "scripts" / "first-in-line.sh"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a cgroup of its own needs root")

# The command: its cpu cgroup's folder, the weight written there, and the folder of a child
# it starts in a session of its own (as the tests' servers are started), then exit status 7.
PROBE = """
import json, subprocess, sys
from labkit.confinement import _cgroup_dirs

def cpu_folder(pid="self"):
    dirs = _cgroup_dirs(pid)
    return dirs.get("cpu") or dirs[""]

own = cpu_folder()
weight = own / "cpu.shares" if (own / "cpu.shares").exists() else own / "cpu.weight"
child = subprocess.Popen(["sleep", "30"], start_new_session=True)
try:
    print(json.dumps({"own": str(own), "weight": int(weight.read_text()), "child": str(cpu_folder(child.pid))}))
finally:
    child.kill()
    child.wait()
sys.exit(7)
"""


def cpu_folder(pid="self") -> Path:
    dirs = confinement._cgroup_dirs(pid)
    return dirs.get("cpu") or dirs[""]


def test_command_runs_at_largest_weight():
    """The command and what it starts in a session of its own run at the largest weight."""
    assert subprocess.run(["bash", str(SCRIPT), "--check"]).returncode == 0, "make test would not overlap the phases"
    done = subprocess.run(["bash", str(SCRIPT), sys.executable, "-c", PROBE], cwd=paths.ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 7, done.stderr  # the command's own exit status
    seen = json.loads(done.stdout)
    own = Path(seen["own"])
    assert own.name.startswith("labkit-test-first-"), seen
    assert seen["child"] == seen["own"], seen  # the child in its own session stayed in the command's cgroup
    assert seen["weight"] in (262144, 10000), seen  # cgroup v1's MAX_SHARES (1 << 18) or v2's CGROUP_WEIGHT_MAX
    assert not own.exists(), f"{own} outlived its command"
    assert not cpu_folder().name.startswith("labkit-test-first-")  # this test's process is where it was
