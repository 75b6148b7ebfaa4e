"""A notebook run never leaves a server, client or perf process behind.

These tests run notebook 01 through papermill -- the path instructors use --
with a sweep long enough to be caught mid-measurement, then end the run the
two brutal ways: papermill killed with SIGKILL, and papermill's own execution
timeout.  Afterwards no lab process may be alive and no port may stay bound.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from labkit import netlink, paths

NOTEBOOK = paths.NOTEBOOKS / "01_proc_service.ipynb"
PAPERMILL = Path(sys.executable).with_name("papermill")

pytestmark = pytest.mark.slow


def test_the_notebook_is_there():
    assert NOTEBOOK.exists(), f"{NOTEBOOK} is missing: restore it (git checkout -- notebooks/)"


def lab_processes(marker: str) -> list[psutil.Process]:
    """Servers, load generators and perf processes of this run: every process
    the run's kernel starts inherits its environment, marker included."""
    found = []
    for proc in psutil.process_iter(["exe", "cmdline", "status"]):
        info = proc.info
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue  # already dead: a zombie holds no port
        exe = info["exe"] or ""
        argv = info["cmdline"] or []
        from_build = exe.startswith(str(paths.BUILD))
        is_perf = bool(argv) and os.path.basename(argv[0]) == "perf"
        if (from_build or is_perf) and _environ(proc).get("LABKIT_RESULTS") == marker:
            found.append(proc)
    return found


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


def wait_until(predicate, timeout: float, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def port_is_free(port: int) -> bool:
    """A new server could listen there (as servers do, with SO_REUSEADDR:
    the run's closed connections may linger in TIME_WAIT, holding nothing)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def start_long_run(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """Notebook 01 with a sweep that takes minutes, made of long points, so
    that a server is certainly running (and perf attached) when the run is cut."""
    workdir = tmp_path / "nb"
    workdir.mkdir()
    shutil.copy(NOTEBOOK, workdir / NOTEBOOK.name)
    marker = str(tmp_path / "results.jsonl")
    env = dict(os.environ, LABKIT_RESULTS=marker)
    cmd = [
        str(PAPERMILL), NOTEBOOK.name, "out.ipynb", "-k", "labkit",
        "-p", "profile", "quick", "-p", "repeats", "50", "-p", "requests", "400",
        "-y", "{models: [threaded], clients: [50]}", *extra,
    ]
    run = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, start_new_session=True)
    return run, marker


def assert_nothing_left(marker: str, ports: set[int], namespaces_before: set[str]):
    all_gone = wait_until(lambda: not lab_processes(marker), timeout=10)
    alive = lab_processes(marker)
    for proc in alive:  # never leave them for the next test, even when failing
        proc.kill()
    assert all_gone, f"processes outlived the run: {[p.info for p in alive]}"
    for port in ports:
        assert wait_until(lambda: port_is_free(port), timeout=5), f"port {port} still bound"
    # 01's quick run crosses a link: its namespaces go with the run, however it ended
    new = lambda: set(netlink.lab_namespaces()) - namespaces_before  # noqa: E731
    assert wait_until(lambda: not new(), timeout=5), f"network namespaces outlived the run: {sorted(new())}"


def test_papermill_killed_mid_sweep_leaves_nothing(tmp_path):
    namespaces_before = set(netlink.lab_namespaces())
    run, marker = start_long_run(tmp_path)
    try:
        servers = wait_until(lambda: [p for p in lab_processes(marker)
                                      if (p.info["exe"] or "").startswith(str(paths.BIN))],
                             timeout=90)
        assert servers, "the sweep never started a server: " + run.stderr.read1().decode()
        time.sleep(1.0)  # well inside the measurement of a point
        ports = listening_ports(lab_processes(marker))
        kernels = [c for c in psutil.Process(run.pid).children(recursive=True)
                   if "ipykernel" in " ".join(_cmdline(c))]
        run.kill()  # papermill alone: its kernel must notice and take the lab down
        run.wait(5)
        assert_nothing_left(marker, ports, namespaces_before)
        assert wait_until(lambda: not any(_alive(k) for k in kernels), timeout=10)
    finally:
        os.killpg(run.pid, signal.SIGKILL) if run.poll() is None else None


def test_papermill_timeout_leaves_nothing(tmp_path):
    namespaces_before = set(netlink.lab_namespaces())
    run, marker = start_long_run(tmp_path, "--execution-timeout", "20")
    try:
        _, stderr = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode != 0, "the run should have timed out"
    assert b"timed out" in stderr.lower() or b"timeout" in stderr.lower(), stderr[-2000:]
    assert_nothing_left(marker, set(), namespaces_before)
