"""doctor.py: the checks run, render, and --clean stops only real leftovers."""

import os
import shutil
import subprocess

import psutil
import pytest
from waits import wait_until

from labkit import doctor, orphans, paths, perf


def test_checks_run_and_report_renders():
    found = doctor.findings()
    names = [c.name for c in found]
    for expected in ("gcc", "make", "perf installed", "perf permitted", "perf events",
                     "CPUs for pinning", "open-file limit", "kernel", "chromium", "liburing",
                     "leftover processes"):
        assert expected in names
    assert all(c.status in ("ok", "warn", "fail") for c in found)
    assert all(c.fix for c in found if c.status == "fail")
    text = doctor.report(found)
    for check in found:
        assert check.name in text
    assert "to look at" in text
    page = doctor.to_html(found)
    assert page.count("<tr>") == len(found) + 1 and "<table>" in page
    # a screen reader names the table and each column: a caption, headers scoped to columns
    assert "<caption" in page and "to look at</caption>" in page and page.count("<th scope='col'") == 3


def test_report_shows_the_fix_of_each_problem():
    found = [doctor.Finding("perf installed", "warn", "perf is not installed", "sudo apt-get install linux-perf"),
             doctor.Finding("gcc", "ok", "gcc 12", "never shown")]
    text = doctor.report(found)
    assert "fix: sudo apt-get install linux-perf" in text and "never shown" not in text
    assert "<b>" not in doctor.to_html([doctor.Finding("x", "fail", "<b>", "a & b")])  # escaped


def test_missing_hardware_counters_are_a_warning_with_the_vm_explanation():
    found = perf.probe()
    check = doctor.find_events(found)
    if found.usable and "cycles" not in found.counted:
        assert check.status == "warn" and "virtual machine" in check.detail and "never as 0" in check.detail


def test_perf_missing_is_a_warning_with_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    check = doctor.find_perf_present(perf.probe(refresh=True))
    assert check.status == "warn" and "apt-get install" in check.fix


def test_one_cpu_is_a_warning(monkeypatch):
    from labkit import system
    monkeypatch.setattr(system, "usable_cpus", lambda: [0])
    assert doctor.find_cpus().status == "warn"


def test_low_open_file_limit_shows_the_limits_conf_fix(monkeypatch):
    from labkit import system
    monkeypatch.setattr(system, "nofile_limit", lambda: (1024, 4096))
    check = doctor.find_nofile()
    assert check.status == "warn" and "limits.d" in check.fix and "ulimit -n" in check.fix
    monkeypatch.setattr(system, "nofile_limit", lambda: (1024, 1048576))
    assert doctor.find_nofile().status == "ok"  # labkit raises the soft limit itself


@pytest.fixture
def fake_lab(tmp_path, monkeypatch):
    """A build/bin of a throw-away checkout holding a copy of `sleep` named like a server."""
    bin_dir = tmp_path / "build" / "bin"
    bin_dir.mkdir(parents=True)
    server = bin_dir / "threaded"
    shutil.copy(shutil.which("sleep"), server)
    monkeypatch.setattr(paths, "BIN", bin_dir)
    monkeypatch.setattr(paths, "SAN_BIN", tmp_path / "build" / "san" / "bin")
    monkeypatch.setattr(paths, "RUN_DIR", tmp_path / "build" / "run")
    started = []
    yield server, started
    for pid in started:  # whatever the test did not clean
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


def _start_orphan(argv: str) -> int:
    """Start a process whose parent exits at once, as after a crashed kernel; return its pid."""
    done = subprocess.run(["sh", "-c", f"{argv} >/dev/null 2>&1 & echo $!"], capture_output=True,
                          text=True, check=True)
    return int(done.stdout.strip())


@pytest.mark.timeout(30)
def test_clean_kills_leftover_servers_and_their_perf_but_not_live_ones(fake_lab):
    server, started = fake_lab
    orphan = _start_orphan(f"{server} 30")
    started.append(orphan)
    owned = subprocess.Popen([str(server), "30"])  # its owner (this test) is alive
    started.append(owned.pid)
    orphan_perf = None
    if shutil.which("perf") and perf.probe().usable:
        orphan_perf = _start_orphan(f"perf stat -o /dev/null -e task-clock -p {orphan}")
        started.append(orphan_perf)
    expected = {orphan, *([orphan_perf] if orphan_perf else [])}
    wait_until(lambda: expected <= {p.pid for p in orphans.find_orphans()}, within=3)
    leftovers = {p.pid for p in orphans.find_orphans()}
    assert orphan in leftovers and owned.pid not in leftovers
    if orphan_perf:
        assert orphan_perf in leftovers
    assert doctor.find_orphans().status == "warn"

    done = orphans.clean()
    assert any(str(orphan) in line for line in done)
    for pid in [orphan] + ([orphan_perf] if orphan_perf else []):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert owned.poll() is None  # the live one is untouched
    owned.kill()
    owned.wait()
    assert doctor.find_orphans().status == "ok"


def test_clean_removes_stale_pid_files_only(fake_lab, tmp_path):
    run_dir = paths.RUN_DIR
    run_dir.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (run_dir / f"{gone.pid}.json").write_text(f'{{"pid": {gone.pid}, "owner_pid": {gone.pid}}}')
    (run_dir / "mine.json").write_text(f'{{"pid": {os.getpid()}, "owner_pid": {os.getpid()}}}')
    done = orphans.clean()
    assert not (run_dir / f"{gone.pid}.json").exists() and (run_dir / "mine.json").exists()
    assert any("stale pid file" in line for line in done)


def test_missing_anchor_tools_are_a_warning_with_the_install_command(monkeypatch):
    real_which = doctor.shutil.which
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None if name == "iperf3" else real_which(name))
    check = doctor.find_anchors()
    assert check.status == doctor.WARN
    assert "iperf3 not found: no reference for the one-stream ceiling of uploads" in check.detail
    assert check.fix == "sudo apt-get install iperf3"
