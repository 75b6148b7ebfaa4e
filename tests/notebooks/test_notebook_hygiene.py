"""A notebook run never leaves a server, client or perf process behind.

These tests run notebook 01 through papermill -- the path instructors use, here
as grading and export run it, its kernel on Unix sockets (labkit/execute.py)
-- with a sweep long enough to be caught mid-measurement, then end the run the
two brutal ways: papermill killed with SIGKILL, and papermill's own execution
timeout.  Each makes sure the end lands in the sweep (its server model and
load generator running), not in a cell before it; afterwards no lab process
may be alive and no port may stay bound.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from labkit import netlink, paths
from waits import port_is_free, wait_until

NOTEBOOK = paths.NOTEBOOKS / "01_proc_service.ipynb"
PAPERMILL = [sys.executable, "-m", "labkit.execute"]

pytestmark = pytest.mark.slow


def test_the_notebook_is_there():
    assert NOTEBOOK.exists(), f"{NOTEBOOK} is missing: restore it (git checkout -- notebooks/)"


def lab_processes(marker: str) -> list[psutil.Process]:
    """Servers, load generators and perf processes of this run: every process
    the run's kernel starts inherits its environment, marker included."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        info = proc.info
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue  # already dead: a zombie holds no port
        exe = info["exe"] = _exe(proc)
        argv = info["cmdline"] or []
        from_build = exe.startswith(str(paths.BUILD))
        is_perf = bool(argv) and os.path.basename(argv[0]) == "perf"
        if (from_build or is_perf) and _environ(proc).get("LABKIT_RESULTS") == marker:
            found.append(proc)
    return found


def _exe(proc: psutil.Process) -> str:
    """The program `proc` runs now, read afresh: psutil keeps the first exe() it read
    for a pid, the forking kernel's Python when a scan caught a child between its fork
    and its exec, and would call a server started then python3 for the rest of its life."""
    try:
        return os.readlink(f"/proc/{proc.pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return ""


def _environ(proc: psutil.Process) -> dict:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:  # gone, or a zombie: not a kernel we need to watch
        return []


def _alive(proc: psutil.Process) -> bool:
    """Running, and not a zombie waiting for a parent that is gone to reap it."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def listening_ports(procs: list[psutil.Process]) -> set[int]:
    ports = set()
    for proc in procs:
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    ports.add(conn.laddr.port)
        except psutil.Error:
            pass
    return ports


SWEPT_MODEL = "threaded"  # the one model the long run's sweep measures; the cells before it run select and poll


def start_long_run(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """Notebook 01 with a sweep that takes minutes, made of long points, so
    that a server is certainly running (and perf attached) when the run is cut.
    papermill's stderr goes to tmp_path/papermill.err (papermill_errors)."""
    workdir = tmp_path / "nb"
    workdir.mkdir()
    shutil.copy(NOTEBOOK, workdir / NOTEBOOK.name)
    marker = str(tmp_path / "results.jsonl")
    env = dict(os.environ, LABKIT_RESULTS=marker)
    cmd = [
        *PAPERMILL, NOTEBOOK.name, "out.ipynb", "-k", "labkit",
        "-p", "profile", "quick", "-p", "repeats", "50", "-p", "requests", "400",
        "-y", f"{{models: [{SWEPT_MODEL}], clients: [50]}}", *extra,
    ]
    with open(tmp_path / "papermill.err", "wb") as stderr:
        run = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL,
                               stderr=stderr, start_new_session=True)
    return run, marker


def papermill_errors(tmp_path: Path) -> bytes:
    return (tmp_path / "papermill.err").read_bytes()


def sweep_running(marker: str) -> list[psutil.Process]:
    """The run's processes while its sweep measures a point: the swept server model
    and the load generator both alive (perf, where there is one, starts before the
    load generator); empty before the sweep, and between two points."""
    procs = lab_processes(marker)
    return procs if {SWEPT_MODEL, "loadgen"} <= lab_programs(procs) else []


def lab_programs(procs: list[psutil.Process]) -> set[str]:
    """The names of the lab's programs (build/bin/) among `procs`."""
    return {os.path.basename(p.info["exe"] or "") for p in procs
            if (p.info["exe"] or "").startswith(str(paths.BIN))}


def assert_nothing_left(marker: str, ports: set[int], namespaces_before: set[str]):
    all_gone = wait_until(lambda: not lab_processes(marker), within=10)
    alive = lab_processes(marker)
    for proc in alive:  # never leave them for the next test, even when failing
        proc.kill()
    assert all_gone, f"processes outlived the run: {[p.info for p in alive]}"
    for port in ports:
        assert wait_until(lambda: port_is_free(port), within=5), f"port {port} still bound"
    # 01's quick run crosses a link: its namespaces go with the run, however it ended
    new = lambda: set(netlink.lab_namespaces()) - namespaces_before  # noqa: E731
    assert wait_until(lambda: not new(), within=5), f"network namespaces outlived the run: {sorted(new())}"


def test_papermill_killed_mid_sweep_leaves_nothing(tmp_path):
    namespaces_before = set(netlink.lab_namespaces())
    run, marker = start_long_run(tmp_path)
    try:
        # mid-measurement: the sweep's server and load generator are up (a server of a
        # check cell before the sweep is not enough)
        measuring = wait_until(lambda: sweep_running(marker), within=90)
        assert measuring, ("the sweep never measured a point: "
                           + papermill_errors(tmp_path).decode(errors="replace")[-3000:])
        ports = listening_ports(lab_processes(marker))
        kernels = [c for c in psutil.Process(run.pid).children(recursive=True)
                   if "ipykernel" in " ".join(_cmdline(c))]
        run.kill()  # papermill alone: its kernel must notice and take the lab down
        run.wait(5)
        assert_nothing_left(marker, ports, namespaces_before)
        assert wait_until(lambda: not any(_alive(k) for k in kernels), within=10)
    finally:
        os.killpg(run.pid, signal.SIGKILL) if run.poll() is None else None


# papermill's limit on each cell: longer than any cell before the sweep takes on a busy
# machine (the slowest, a check that compiles C, took at most 3 s under a load of 40 on
# 2 cores) and than the sweep takes to start its first point (at most 2.5 s), far shorter
# than the sweep.  The test fails, saying so, if the timeout came before the sweep measured.
CELL_TIMEOUT_S = 8


def test_papermill_timeout_leaves_nothing(tmp_path):
    namespaces_before = set(netlink.lab_namespaces())
    run, marker = start_long_run(tmp_path, "--execution-timeout", str(CELL_TIMEOUT_S))
    measured = False
    seen: set[str] = set()  # the run's programs seen alive, for the message
    try:
        deadline = time.monotonic() + 180
        while run.poll() is None and time.monotonic() < deadline:
            if not measured:
                programs = lab_programs(lab_processes(marker))
                seen |= programs
                measured = {SWEPT_MODEL, "loadgen"} <= programs
            time.sleep(0.1 if not measured else 0.5)
        run.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    stderr = papermill_errors(tmp_path)
    assert run.returncode != 0, "the run should have timed out"
    assert b"timed out" in stderr.lower() or b"timeout" in stderr.lower(), stderr[-2000:]
    # what timed out is the sweep's cell, while it measured
    assert b"panel.run()" in stderr, f"a cell before the sweep timed out: {stderr[-2000:]!r}"
    assert measured, f"the run timed out before its sweep measured a point (its programs seen: {sorted(seen)})"
    assert_nothing_left(marker, set(), namespaces_before)
