"""scripts/first-in-line.sh, which make test runs the serial phase with: the command runs in
a cgroup of its own with the largest CPU weight, and so does every process it starts, in a
session of its own too; its exit status is the command's; the cgroup is gone afterwards.
What it is for, a CPU given first to the command, is measured in make test's time, not here."""

import os
import subprocess
from pathlib import Path

import pytest

from labkit import paths

SCRIPT = paths.ROOT / "scripts" / "first-in-line.sh"
CGROUP = Path("/sys/fs/cgroup")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a cgroup of its own needs root")


def cpu_cgroup(listing: str) -> str:
    """The cgroup the cpu controller applies to, in a /proc/PID/cgroup listing (v1's cpu
    hierarchy, or v2's one)."""
    for line in listing.splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") or controllers == "":
            return path
    raise AssertionError(f"no cpu cgroup in {listing}")


def test_the_command_and_what_it_starts_in_a_session_of_its_own_run_at_the_largest_weight():
    assert subprocess.run(["bash", str(SCRIPT), "--check"]).returncode == 0, "make test would not overlap the phases"
    # the command starts a child in a new session (as the tests' servers do), and both report
    probe = ('import os, subprocess, sys\n'
             'child = subprocess.run(["cat", "/proc/self/cgroup"], start_new_session=True, capture_output=True,'
             ' text=True).stdout\n'
             'print(open("/proc/self/cgroup").read() + "--\\n" + child)\n'
             'sys.exit(7)')
    done = subprocess.run(["bash", str(SCRIPT), "python3", "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 7, done.stderr  # the command's own exit status
    own, child = done.stdout.split("--\n")
    groups = set()
    for listing in (own, child):
        path = cpu_cgroup(listing)
        assert path.rsplit("/", 1)[-1].startswith("labkit-test-first-"), listing
        groups.add(path)
    assert len(groups) == 1, groups  # the child in its session stayed in the command's cgroup
    folder = (CGROUP / "cpu" if (CGROUP / "cpu" / "cpu.shares").exists() else CGROUP) / groups.pop().lstrip("/")
    assert not folder.exists(), f"{folder} outlived its command"
    # this test's own process is where it was
    assert not cpu_cgroup(Path("/proc/self/cgroup").read_text()).rsplit("/", 1)[-1].startswith("labkit-test-first-")


def test_the_weight_is_the_largest_the_kernel_takes():
    # the command reads its own cgroup's weight (the folder is gone once it ends)
    probe = "\n".join([
        "import pathlib",
        "line = next(l for l in open('/proc/self/cgroup').read().splitlines() if 'cpu' in l.split(':')[1].split(',')"
        " or l.split(':')[1] == '')",
        "path = line.split(':', 2)[2].lstrip('/')",
        "v1 = pathlib.Path('/sys/fs/cgroup/cpu', path, 'cpu.shares')",
        "print((v1 if v1.exists() else pathlib.Path('/sys/fs/cgroup', path, 'cpu.weight')).read_text())"])
    done = subprocess.run(["bash", str(SCRIPT), "python3", "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # cgroup v1's MAX_SHARES (1 << 18) or v2's CGROUP_WEIGHT_MAX
    assert int(done.stdout) in (262144, 10000), done.stdout
