"""Nothing labkit starts outlives its owner: normal exit, exception, SIGTERM, kill -9.

Each test runs a small Python program (the "kernel") that starts real
processes through labkit, then ends it the way a notebook kernel can end, and
checks that every server, load generator and perf process is gone within 2 s
and the port is free again.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from labkit import paths
from test_procs import _port_is_free

pytestmark = pytest.mark.timeout(120)

PERF_USABLE = subprocess.run(
    [sys.executable, "-c", "from labkit import perf; print(perf.probe().usable)"],
    cwd=paths.ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(paths.ROOT)},
).stdout.strip() == "True"


def _kernel(body: str) -> subprocess.Popen:
    """Start a Python program that uses labkit; it reports pids as one JSON line."""
    program = "import json, os, sys, time\nfrom labkit import procs, perf\n" + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", program], cwd=paths.ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(paths.ROOT)})


def _report(kernel: subprocess.Popen, timeout: float = 20) -> dict:
    """The kernel's JSON line (it has started everything it will start)."""
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(kernel.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            kernel.kill()
            pytest.fail(f"the kernel reported nothing within {timeout} s: {kernel.stderr.read()}")
    line = kernel.stdout.readline()
    if not line:
        kernel.wait()
        pytest.fail(f"the kernel exited ({kernel.returncode}) without reporting: {kernel.stderr.read()}")
    return json.loads(line)


def _all_gone(pids, within: float = 2.0) -> list[int]:
    """The pids still running (not zombies) after `within` seconds."""
    deadline = time.monotonic() + within
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _running(pid)]
        time.sleep(0.05)
    return alive


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _forget_pid_files(pids) -> None:
    """A killed kernel leaves its pid files (for `labkit doctor --clean`); tidy them here."""
    for pid in pids:
        (paths.RUN_DIR / f"{pid}.json").unlink(missing_ok=True)


SERVER_WITH_PERF = """
    server = procs.start_server("threaded")
    attached = perf.attach(server.pid).start()
    perf_pids = [p.pid for p in __import__("psutil").Process().children() if p.name() == "perf"]
    print(json.dumps({"server": server.pid, "port": server.port, "perf": perf_pids}), flush=True)
    time.sleep(60)
"""


def test_kill_9_of_the_kernel_kills_the_server_and_perf():
    kernel = _kernel(SERVER_WITH_PERF)
    report = _report(kernel)
    if PERF_USABLE:
        assert report["perf"], "perf should be attached on this machine"
    assert _running(report["server"])
    os.kill(kernel.pid, signal.SIGKILL)
    kernel.wait()
    pids = [report["server"], *report["perf"]]
    assert _all_gone(pids) == []
    assert _port_is_free(report["port"])
    assert (paths.RUN_DIR / f"{report['server']}.json").exists()  # left for doctor --clean
    _forget_pid_files(pids)


def test_kill_9_during_a_client_run_kills_perf_and_the_load_generator():
    kernel = _kernel("""
        import socket, threading, psutil
        silent = socket.socket(); silent.bind(("127.0.0.1", 0)); silent.listen(16)
        def report():
            for _ in range(200):
                kids = psutil.Process().children(recursive=True)
                if any(k.name() == "loadgen" for k in kids):
                    print(json.dumps({"children": [k.pid for k in kids],
                                      "names": [k.name() for k in kids]}), flush=True)
                    return
                time.sleep(0.02)
        threading.Thread(target=report, daemon=True).start()
        procs.run_load(procs.LoadSpec(4, 1, timeout=60), silent.getsockname()[1])
    """)
    report = _report(kernel)
    assert "loadgen" in report["names"]
    if PERF_USABLE:
        assert "perf" in report["names"]
    os.kill(kernel.pid, signal.SIGKILL)
    kernel.wait()
    assert _all_gone(report["children"]) == []
    _forget_pid_files(report["children"])


@pytest.mark.parametrize("ending, code", [
    ("sys.exit(0)", 0),                          # the kernel ends normally without stopping
    ("raise RuntimeError('a cell failed')", 1),  # an uncaught exception ends it
])
def test_normal_exit_and_exceptions_stop_everything(ending, code):
    kernel = _kernel(f"""
        server = procs.start_server("select")
        print(json.dumps({{"server": server.pid, "port": server.port}}), flush=True)
        {ending}
    """)
    report = _report(kernel)
    assert kernel.wait(timeout=10) == code
    assert _all_gone([report["server"]]) == []
    assert _port_is_free(report["port"])
    assert not (paths.RUN_DIR / f"{report['server']}.json").exists()


def test_sigterm_to_the_kernel_stops_the_server_and_perf():
    kernel = _kernel(SERVER_WITH_PERF)
    report = _report(kernel)
    kernel.send_signal(signal.SIGTERM)
    assert kernel.wait(timeout=10) == -signal.SIGTERM  # the handler stops children, then dies by SIGTERM
    assert _all_gone([report["server"], *report["perf"]]) == []
    assert _port_is_free(report["port"])
    assert not (paths.RUN_DIR / f"{report['server']}.json").exists()
