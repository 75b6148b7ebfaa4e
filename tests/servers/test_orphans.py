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
from pathlib import Path

import psutil
import pytest

import waits
from labkit import orphans, paths

pytestmark = [pytest.mark.measuring, pytest.mark.timeout(120)]

PERF_USABLE = subprocess.run(
    [sys.executable, "-c", "from labkit import perf; print(perf.probe().usable)"],
    cwd=paths.ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(paths.ROOT)},
).stdout.strip() == "True"



def _named(pid: int) -> str | None:
    """The process's name now (after its exec), None once it is gone."""
    try:
        return psutil.Process(pid).name()
    except psutil.NoSuchProcess:
        return None

def _kernel(body: str, tmpdir: Path | None = None) -> subprocess.Popen:
    """Start a Python program that uses labkit; it reports pids as one JSON line.
    With `tmpdir`, its temporary files go there (TMPDIR), so a test can see what it left."""
    program = "import json, os, sys, time\nfrom labkit import procs, perf\n" + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT), **({"TMPDIR": str(tmpdir)} if tmpdir else {})}
    return subprocess.Popen([sys.executable, "-c", program], cwd=paths.ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


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
    alive = list(pids)

    def gone():
        alive[:] = [pid for pid in alive if _running(pid)]
        return not alive
    waits.wait_until(gone, within)
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


def test_kill_9_of_the_kernel_kills_the_server_and_perf(tmp_path):
    kernel = _kernel(SERVER_WITH_PERF, tmp_path)
    report = _report(kernel)
    if PERF_USABLE:
        assert report["perf"], "perf should be attached on this machine"
    assert _running(report["server"])
    os.kill(kernel.pid, signal.SIGKILL)
    kernel.wait()
    pids = [report["server"], *report["perf"]]
    assert _all_gone(pids) == []
    assert waits.port_is_free(report["port"], "0.0.0.0")
    for pid in pids:  # perf too is started through the launcher: its pid file is left for doctor --clean
        assert (paths.RUN_DIR / f"{pid}.json").exists(), pid
    if report["perf"]:
        record = json.loads((paths.RUN_DIR / f"{report['perf'][0]}.json").read_text())
        assert record["role"] == "perf" and record["owner_pid"] == kernel.pid
    assert list(tmp_path.iterdir()) == []  # perf wrote to an unlinked file: nothing left on disk
    _forget_pid_files(pids)


def test_kill_9_during_a_client_run_kills_perf_and_the_load_generator(tmp_path):
    kernel = _kernel("""
        import socket, threading, psutil
        silent = socket.socket(); silent.bind(("127.0.0.1", 0)); silent.listen(16)
        def names(kids):
            named = {}
            for kid in kids:
                try:
                    named[kid.pid] = kid.name()
                except psutil.Error:
                    pass  # a short-lived child (perf's probe) that ended meanwhile
            return named
        def report():
            for _ in range(200):
                kids = names(psutil.Process().children(recursive=True))
                if "loadgen" in kids.values():
                    print(json.dumps({"children": list(kids), "names": list(kids.values())}), flush=True)
                    return
                time.sleep(0.02)
        threading.Thread(target=report, daemon=True).start()
        procs.run_load(procs.LoadSpec(4, 1, timeout=60), silent.getsockname()[1])
    """, tmp_path)
    report = _report(kernel)
    assert "loadgen" in report["names"]
    if PERF_USABLE:
        assert "perf" in report["names"]
    launched = [pid for pid in report["children"] if (paths.RUN_DIR / f"{pid}.json").exists()]
    assert launched, "the client was not started through the launcher (no pid file)"
    os.kill(kernel.pid, signal.SIGKILL)
    kernel.wait()
    assert _all_gone(report["children"]) == []
    assert list(tmp_path.iterdir()) == []  # perf wrote to an unlinked file: nothing left on disk
    _forget_pid_files(report["children"])


def test_doctor_clean_finds_a_perf_left_by_a_crash_through_its_pid_file(tmp_path):
    """A perf whose owner died without taking it along (its death signal lost) is
    found by its pid file alone: it watches a process that is no lab binary, so
    nothing in its command line says it is the lab's."""
    if not PERF_USABLE:
        pytest.fail("perf is not usable here, so a perf left behind cannot be made: "
                    "this test needs perf (apt-get install linux-perf)")
    watched = subprocess.Popen(["sleep", "60"])
    # perf started by a shell that exits at once: its parent is gone, as after a crash
    done = subprocess.run(["sh", "-c", f"perf stat -o /dev/null -e task-clock -p {watched.pid} "
                                       ">/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    perf_pid = int(done.stdout)
    try:
        waits.wait_for(lambda: _named(perf_pid) == "perf", what="perf, started by the shell")
        assert perf_pid not in {p.pid for p in orphans.find_orphans()}  # no pid file: not known as the lab's
        dead_owner = subprocess.Popen(["true"])
        dead_owner.wait()
        pid_file = paths.RUN_DIR / f"{perf_pid}.json"
        paths.RUN_DIR.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(json.dumps({"pid": perf_pid, "pgid": perf_pid, "role": "perf",
                                        "argv": ["perf", "stat", "-p", str(watched.pid)],
                                        "owner_pid": dead_owner.pid,
                                        "started": psutil.Process(perf_pid).create_time()}))
        assert perf_pid in {p.pid for p in orphans.find_orphans()}
        cleaned = orphans.clean()
        assert any(str(perf_pid) in line and line.startswith("killed") for line in cleaned), cleaned
        assert _all_gone([perf_pid]) == []
        assert not pid_file.exists()
        assert watched.poll() is None  # only what the lab started is touched
    finally:
        for pid in (perf_pid, watched.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        watched.wait()


def test_a_pid_file_whose_pid_was_reused_is_not_killed():
    """The pid file names when its process started: a pid the system gave to another
    program since is left alone."""

    stranger = subprocess.Popen(["sleep", "30"])
    dead_owner = subprocess.Popen(["true"])
    dead_owner.wait()
    pid_file = paths.RUN_DIR / f"{stranger.pid}.json"
    paths.RUN_DIR.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(json.dumps({"pid": stranger.pid, "role": "server", "owner_pid": dead_owner.pid,
                                    "started": psutil.Process(stranger.pid).create_time() - 3600}))
    try:
        assert stranger.pid not in {p.pid for p in orphans.find_orphans()}
    finally:
        pid_file.unlink(missing_ok=True)
        stranger.kill()
        stranger.wait()


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
    assert waits.port_is_free(report["port"], "0.0.0.0")
    assert not (paths.RUN_DIR / f"{report['server']}.json").exists()


def test_sigterm_to_the_kernel_stops_the_server_and_perf():
    kernel = _kernel(SERVER_WITH_PERF)
    report = _report(kernel)
    kernel.send_signal(signal.SIGTERM)
    assert kernel.wait(timeout=10) == -signal.SIGTERM  # the handler stops children, then dies by SIGTERM
    assert _all_gone([report["server"], *report["perf"]]) == []
    assert waits.port_is_free(report["port"], "0.0.0.0")
    assert not (paths.RUN_DIR / f"{report['server']}.json").exists()


# The end of both scripts below: spawn a server while a Ctrl-C lands, and say what is left.
SPAWN_INTERRUPTED = """
        try:
            launcher.spawn(["sleep", "30"], role="server")
            outcome = "not interrupted"
        except KeyboardInterrupt:
            outcome = "interrupted"
        children = [p.pid for p in __import__("psutil").Process().children() if p.status() != "zombie"]
        print(json.dumps({"outcome": outcome, "children": children,
                          "registered": launcher.live_children()}), flush=True)
"""


def _assert_interrupted_and_nothing_left(kernel) -> None:
    report = _report(kernel)
    kernel.wait(timeout=10)
    assert report == {"outcome": "interrupted", "children": [], "registered": []}


def test_a_ctrl_c_during_the_fork_is_not_lost_and_the_child_is_stopped():
    """Python runs its at-fork hooks (logging's lock release among them) around a
    fork with preexec_fn and drops an exception raised in one ("Exception
    ignored").  A Ctrl-C whose handler runs there must still interrupt."""
    kernel = _kernel("""
        import signal
        from labkit import launcher
        armed = [True]
        def ctrl_c_inside_the_hook():
            if armed[0]:
                armed[0] = False
                signal.raise_signal(signal.SIGINT)  # its handler runs here, inside the hook
        os.register_at_fork(after_in_parent=ctrl_c_inside_the_hook)
    """ + SPAWN_INTERRUPTED)
    _assert_interrupted_and_nothing_left(kernel)


def test_ctrl_c_during_popen_exec():
    """After the fork, Popen's constructor waits for the child's exec; a KeyboardInterrupt
    raised there leaves Popen without its object while the child runs on, untracked (a
    sweep interrupted 0.15 s in, on a busy machine, left its server running).  spawn()
    keeps the Ctrl-C until the child is registered, then stops it and raises."""
    kernel = _kernel("""
        import signal, subprocess, time
        from labkit import launcher
        real = subprocess.Popen
        def popen_interrupted_after_the_fork(*args, **kwargs):
            started = real(*args, **kwargs)
            signal.raise_signal(signal.SIGINT)  # its handler runs here: inside Popen, as it were
            time.sleep(0.01)
            return started
        launcher.subprocess.Popen = popen_interrupted_after_the_fork
    """ + SPAWN_INTERRUPTED)
    _assert_interrupted_and_nothing_left(kernel)
