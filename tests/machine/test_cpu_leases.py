"""CPU leases: two lab users' sweeps on one machine get CPUs of their own while there are
enough, and share them (saying so) when there are not; a lease is an flock the kernel holds
(/proc/locks shows it) and drops when its holder dies; any user can lease a CPU whose lock
file another user made; a sweep records in each row the CPUs it shared and the CPU quota."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from labkit import cpu_leases, experiments, launcher, row, sweep
from labkit.cpu_leases import CpuLease
from labkit.params import cpu_text


@pytest.fixture(autouse=True)
def locks(monkeypatch):
    """Leases in a folder of this test's own (the real sweeps of other tests lease /tmp's),
    sticky and open to every user as /tmp is, where another user can reach it."""
    folder = Path(tempfile.mkdtemp(prefix="labkit-test-leases-", dir="/tmp"))
    folder.chmod(0o1777)
    monkeypatch.setattr(cpu_leases, "LOCKS", folder)
    monkeypatch.setenv("LABKIT_CPU_LEASES", str(folder))
    yield folder
    shutil.rmtree(folder)


def flocks_on(path: Path) -> list[str]:
    """The kernel's own list of FLOCKs on `path` (/proc/locks: inode as major:minor:inode)."""
    st = os.stat(path)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return [line for line in Path("/proc/locks").read_text().splitlines() if "FLOCK" in line and inode in line]


@pytest.mark.parametrize("usable, second, shared", [
    (list(range(8)), ([2], [3]), []),      # a big machine: the second sweep gets CPUs of its own
    ([0, 1], ([0], [1]), [0, 1]),          # two CPUs: the second shares both, and says so
    ([0, 1, 2], ([2], [0]), [0]),          # three: one of its own (the server's), one shared
])
def test_a_second_sweep_gets_cpus_of_its_own_or_shares_and_says_so(usable, second, shared):
    with CpuLease.take(usable) as first:
        assert (first.pinning.server_cpus, first.pinning.client_cpus, first.shared) == ([0], [1], [])
        with CpuLease.take(usable) as other:
            assert (other.pinning.server_cpus, other.pinning.client_cpus) == second
            assert other.shared == shared
            if shared:
                assert f"{'CPU' if len(shared) == 1 else 'CPUs'} {', '.join(map(str, shared))} " in other.pinning.note
                assert f"of the {len(usable)} usable CPUs are leased by others" in other.pinning.note
            else:
                assert other.pinning.note == ""
    with CpuLease.take(usable) as again:  # both closed: the first CPUs are free again
        assert again.held == [0, 1] and again.shared == []


def test_a_lease_is_the_kernels_flock_and_goes_with_its_holder(locks):
    child = subprocess.Popen([sys.executable, "-c", "from labkit.cpu_leases import CpuLease\n"
                              "lease = CpuLease.take([0, 1])\nprint(lease.held, flush=True)\n"
                              "import time; time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "[0, 1]"
        assert len(flocks_on(locks / "labkit-cpu-0.lock")) == 1  # the kernel's account of it
        with CpuLease.take([0, 1]) as mine:
            assert mine.held == [] and mine.shared == [0, 1]
    finally:
        child.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the flock itself
        child.wait()
    assert flocks_on(locks / "labkit-cpu-0.lock") == []
    with CpuLease.take([0, 1]) as mine:
        assert mine.held == [0, 1]


@pytest.mark.skipif(os.geteuid() != 0, reason="running as another user needs root")
def test_another_user_leases_a_cpu_whose_lock_file_root_made(locks):
    CpuLease.take([0, 1]).close()  # root makes the files
    assert oct((locks / "labkit-cpu-0.lock").stat().st_mode & 0o777) == "0o444"
    with CpuLease.take([0, 1]):
        held = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c",
                               "from labkit.cpu_leases import CpuLease; print(CpuLease.take([0, 1, 2, 3]).held)"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(Path(cpu_leases.__file__).parents[1])})
    assert held.returncode == 0, held.stderr
    assert held.stdout.strip() == "[2, 3]"


def test_a_sweep_leases_the_machines_cpus_and_records_what_it_shared(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sweep, "_environment", lambda: {})
    monkeypatch.setattr(launcher, "live_children", lambda: [])
    plan = experiments.resolve("proc_top", "quick", models=["iterative"], clients=[3], repeats=1,
                               placement="same_host")
    assert plan.pinning.from_machine and plan.with_values(repeats=2).pinning.from_machine
    # the control panel gives the CPUs back as its text fields hold them: still the machine's
    machines = {name: cpu_text(plan.values[name]) for name in ("server_cpus", "client_cpus")}
    assert plan.with_values(**machines).pinning.from_machine
    seen = []

    def fake(run):
        seen.append(run.pinning)
        return {"status": "ok", "elapsed_s": 1.0, "schema": row.SCHEMA}

    usable = sorted(os.sched_getaffinity(0))
    with CpuLease.take(usable):  # another lab run holds the machine's CPUs
        frame = sweep.run(plan, results=tmp_path / "r.jsonl", measure=fake, progress=False)
    if len(usable) >= 2:
        assert frame["cpus_shared"].tolist() == [usable[:2]]
        assert "also leased by another lab run" in frame["pinning_note"].iloc[0]
        assert "also leased by another lab run" in capsys.readouterr().out
    assert seen[0].server_cpus == [usable[0]]
    assert "cpu_quota" in frame.columns  # None here: no quota (tests/machine/test_confinement.py reads one)
    chosen = plan.with_values(server_cpus=[usable[-1]], client_cpus=[usable[0]])  # not the machine's
    assert not chosen.pinning.from_machine  # CPUs the student chose are not leased
    with CpuLease.take(usable):
        frame = sweep.run(chosen, results=tmp_path / "r2.jsonl", measure=fake, progress=False)
    assert frame["cpus_shared"].tolist() == [[]]
