"""labkit.procs: real servers and the real load generator, on loopback, bounded."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
from waits import port_is_free, wait_for

from labkit import build, launcher, paths, procs
from labkit.bench import free_port
from labkit.errors import ClientFailed, LabError, ServerFailed

pytestmark = [pytest.mark.measuring, pytest.mark.timeout(120)]

TWO_CPUS = len(os.sched_getaffinity(0)) >= 2
SERVER_CPU = sorted(os.sched_getaffinity(0))[0]
CLIENT_CPU = sorted(os.sched_getaffinity(0))[-1]


def _top(conn: socket.socket, k: int) -> list[str]:
    conn.sendall(f"TOP {k}\n".encode())
    reply = b""
    while not reply.endswith(b"END\n"):
        chunk = conn.recv(4096)
        assert chunk, f"server closed before END: {reply!r}"
        reply += chunk
    return reply.decode().splitlines()


def _ask_top(port: int, k: int = 2) -> list[str]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        return _top(conn, k)


@pytest.fixture(autouse=True)
def _nothing_left():
    yield
    launcher.stop_all()
    assert launcher.live_children() == []


@pytest.mark.parametrize("model", build.models())
def test_each_model_starts_pinned_answers_and_stops(model):
    server = procs.start_server(model, cpus=[SERVER_CPU])
    try:
        assert server.port > 0 and server.alive()
        assert server.cpus == [SERVER_CPU]
        assert os.sched_getaffinity(server.pid) == {SERVER_CPU}
        assert (paths.RUN_DIR / f"{server.pid}.json").exists()
        assert server.pid in launcher.live_children()
        # Threads the server creates later inherit the pinning: read while the connection is
        # open, since the thread a threaded server made for it ends with it (listing the threads
        # after the close may list one that ends before it is read)
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
            lines = _top(conn, k=3)
            assert lines[-1] == "END" and len(lines) == 4
            threads = psutil.Process(server.pid).threads()
            for thread in threads:
                assert os.sched_getaffinity(thread.id) == {SERVER_CPU}
        if model == "threaded":
            assert len(threads) >= 2, threads  # the connection's own thread was among them
    finally:
        code = server.stop()
    assert code == 0, server.stderr_text()
    assert not server.alive()
    assert not (paths.RUN_DIR / f"{server.pid}.json").exists()
    assert launcher.live_children() == []
    assert port_is_free(server.port, "0.0.0.0")


def test_explicit_port_in_use_names_its_owner():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(LabError) as caught:
            procs.start_server("iterative", port=port)
    finally:
        holder.close()
    assert f"port {port} is in use" in caught.value.what
    assert str(os.getpid()) in caught.value.what  # psutil finds this test's socket
    assert "port=0" in caught.value.fix
    assert launcher.live_children() == []


def test_explicit_free_port_is_used():
    port = free_port()
    with procs.start_server("select", port=port) as server:
        assert server.port == port
        assert _ask_top(port)[-1] == "END"
    assert not server.alive()


def test_a_cpu_that_does_not_exist_is_refused_before_starting():
    with pytest.raises(LabError) as caught:
        procs.start_server("iterative", cpus=[4096])
    assert "4096" in caught.value.what
    assert launcher.live_children() == []


def test_a_server_that_refuses_its_arguments_raises_with_its_stderr():
    with pytest.raises(ServerFailed) as caught:
        procs.start_server("iterative", service="no-such-service")
    assert "no-such-service" in caught.value.what  # the server's own message
    assert launcher.live_children() == []


def test_stop_kills_the_group_of_a_process_that_ignores_sigterm():
    # A real process group that ignores SIGTERM: the shell and its sleeping child.
    child = launcher.spawn(["sh", "-c", "trap '' TERM; sleep 30 & wait"], "test", None)
    def both():
        group = [p for p in psutil.process_iter() if _pgid(p.pid) == child.pid]
        return group if len(group) >= 2 else None

    group = wait_for(both, what="the shell and its sleeping child in one group")
    started = time.monotonic()
    code, killed = launcher.stop_child(child, timeout=0.3)
    assert killed and code == -signal.SIGKILL
    assert time.monotonic() - started < 2
    psutil.wait_procs(group, timeout=2)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in group)


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


# --- the client -----------------------------------------------------------------


@pytest.mark.parametrize("no_perf", ["0", "1"])
def test_client_runs_pinned_and_counts(monkeypatch, no_perf):
    monkeypatch.setenv("LABKIT_NO_PERF", no_perf)
    with procs.start_server("threaded", cpus=[SERVER_CPU]) as server:
        run = procs.run_load(procs.LoadSpec(8, 3, timeout=10), server.port, cpus=[CLIENT_CPU])
    summary = run.summary
    assert run.returncode == 0, run.stderr
    assert summary["requests_ok"] == 24 and summary["connections_failed"] == 0
    assert summary["latency_us"]["samples"] == 24
    assert run.cpus == [CLIENT_CPU]
    assert 0 < run.wall_s < 10
    assert run.counters["task-clock"] > 0
    if no_perf == "1":
        assert run.counters_source == "rusage" and "getrusage" in run.note
        assert run.counters["task-clock"] == pytest.approx(
            (summary["rusage"]["user_s"] + summary["rusage"]["sys_s"]) * 1000)
    else:
        assert run.counters_source == "perf"
    assert run.counters["cycles"] != 0  # NaN here (no hardware counters) or a real count, never 0


def test_client_against_a_closed_port_reports_refused_connections():
    port = free_port()
    run = procs.run_load(procs.LoadSpec(3, 1, timeout=5), port)
    assert run.returncode == 1
    assert run.summary["connections_failed"] == 3
    assert run.summary["errors"].get("ECONNREFUSED") == 3


def _silent_listener():
    """A real listening socket that accepts (in the backlog) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    return listener


def test_client_past_its_wall_clock_bound_is_killed(monkeypatch):
    monkeypatch.setattr(procs.load, "CLIENT_WALL_MARGIN_S", -2.5)  # bound = timeout - 2.5 s = 0.5 s
    listener = _silent_listener()
    try:
        started = time.monotonic()
        with pytest.raises(ClientFailed) as caught:  # this run's failure, not the parameters'
            procs.run_load(procs.LoadSpec(2, 1, timeout=3), listener.getsockname()[1])
        assert time.monotonic() - started < 2.5
    finally:
        listener.close()
    assert "was killed" in caught.value.what
    assert launcher.live_children() == []
    assert not [p for p in psutil.Process().children(recursive=True) if p.name() in ("loadgen", "perf")]


def test_keyboard_interrupt_during_the_client_stops_it_and_propagates():
    listener = _silent_listener()
    interrupt = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    interrupt.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            procs.run_load(procs.LoadSpec(2, 1, timeout=20), listener.getsockname()[1])
    finally:
        interrupt.cancel()
        listener.close()
    assert launcher.live_children() == []
    psutil.wait_procs(psutil.Process().children(recursive=True), timeout=2)
    assert not [p for p in psutil.Process().children(recursive=True)
                if p.status() != psutil.STATUS_ZOMBIE]


def test_too_many_clients_refused():
    # A child Python with a hard limit of 200 open files: 1000 clients cannot fit.
    """Too many clients for the open file limit are refused naming what fits."""
    script = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (150, 200))\n"
        "from labkit import procs\n"
        "from labkit.errors import LabError\n"
        "try:\n"
        "    procs.run_load(procs.LoadSpec(1000, 1), 1)\n"
        "except LabError as e:\n"
        "    print(e.what); print(e.fix)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=paths.ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(paths.ROOT)})
    assert "1000 clients need about" in done.stdout, done.stderr
    assert f"use at most {200 - procs.FD_MARGIN} clients" in done.stdout


def test_ensure_nofile_raises_the_soft_limit_for_children():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, soft + 100) - procs.FD_MARGIN if hard != resource.RLIM_INFINITY else soft + 100
    procs.ensure_nofile(want)
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= min(want + procs.FD_MARGIN, hard)


@pytest.mark.parametrize("value, words", [
    (1234567.0, ["--rate", "1234567"]),     # :g made it 1.23457e+06
    (0.1, ["--rate", "0.1"]),
    (1e-07, ["--rate", "1e-07"]),
    (2.5e20, ["--rate", "2.5e+20"]),
    (123456.789, ["--rate", "123456.789"]),
    (True, ["--rate"]), (False, []), (None, []), (7, ["--rate", "7"]),
])
def test_values_go_to_argv_exactly(value, words):
    import numpy as np

    assert procs.argv.flag_words("rate", value) == words
    if isinstance(value, float):
        assert procs.argv.flag_words("rate", np.float64(value)) == words  # not np.float64(...)
        assert float(words[1]) == value  # what strtod reads back
