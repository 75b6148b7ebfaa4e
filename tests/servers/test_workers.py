"""The models with workers or child processes: select_fork, epoll_workers,
prefork (worker processes), pool (worker threads) and fork (a process per
connection).  Nothing they start may outlive them, a dead worker must not
hang the server, and each serves exactly as many clients at once as its
design says.  Every wait is bounded."""

import os
import signal
import subprocess
import time

import psutil
import pytest

import serverproc
from serverproc import Client
from waits import wait_for, wait_until

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

BUILDS = pytest.mark.parametrize("san", [False, True], ids=["normal", "san"])
PROCESS_MODELS = pytest.mark.parametrize("model", serverproc.PROCESS_WORKER_MODELS)


def live_children(pid: int) -> set[int]:
    """pids of the running (not zombie) children of pid."""
    live = set()
    for child in psutil.Process(pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                live.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return live


@BUILDS
@PROCESS_MODELS
def test_workers_start_serve_and_all_stop_on_sigterm(model, san):
    with serverproc.running(model, service="echo", san=san, args=("--workers", "3")) as server:
        workers = wait_for(lambda: len(live_children(server.proc.pid)) == 3
                           and live_children(server.proc.pid), what="3 workers")
        # A prefork worker serves one connection at a time; the loops serve many.
        clients = [Client(server.port) for _ in range(3 if model == "prefork" else 6)]
        for i, client in enumerate(clients):
            client.send(b"hello %d\n" % i)
            assert client.line() == b"hello %d" % i
        # leaving the block: SIGTERM; serverproc checks the parent exits 0 within
        # 1 s and that every child seen before the signal is gone by then.
    for client in clients:
        client.close()
    assert not any(serverproc.still_running(psutil.Process(pid)) for pid in workers
                   if psutil.pid_exists(pid))


@PROCESS_MODELS
def test_default_worker_count_is_the_usable_cpus(model):
    cpus = len(os.sched_getaffinity(0))
    with serverproc.running(model, workers=None) as server:
        wait_for(lambda: len(live_children(server.proc.pid)) == cpus,
                 what=f"{cpus} workers (one per usable CPU)")


@BUILDS
@PROCESS_MODELS
def test_a_killed_worker_is_reported_and_replaced(model, san):
    with serverproc.running(model, service="echo", san=san, args=("--workers", "2")) as server:
        before = wait_for(lambda: len(live_children(server.proc.pid)) == 2
                          and live_children(server.proc.pid), what="2 workers")
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: f"worker {victim} was killed by signal 9" in server.stderr(),
                 what="the parent reporting the dead worker")
        after = wait_for(lambda: len(live_children(server.proc.pid)) == 2
                         and live_children(server.proc.pid), what="a replacement worker")
        assert victim not in after
        for _ in range(4):  # still serving, whichever worker takes the connection
            with Client(server.port) as client:
                client.send(b"again\n")
                assert client.line() == b"again"


@PROCESS_MODELS
def test_workers_die_with_a_killed_parent(model):
    """PR_SET_PDEATHSIG: a SIGKILLed parent cannot forward SIGTERM, the kernel does."""
    proc = subprocess.Popen([str(serverproc.bin_dir() / model), "--port", "0", "--workers", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith(b"listening ")
        workers = [psutil.Process(pid) for pid in
                   wait_for(lambda: len(live_children(proc.pid)) == 3 and live_children(proc.pid),
                            what="3 workers")]
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    alive = workers

    def all_gone():
        alive[:] = [w for w in alive if serverproc.still_running(w)]
        return not alive
    wait_until(all_gone, within=1.0)
    for worker in alive:
        worker.kill()
    assert not alive, f"workers outlived their parent: {alive}"


@BUILDS
@pytest.mark.parametrize("model", ["pool", "prefork"])
def test_serves_exactly_n_clients_at_once(model, san):
    """2 workers: two silent clients hold both; a third waits (accepted into the
    queue, or in the listen backlog) and is served as soon as one leaves."""
    with serverproc.running(model, san=san, args=("--workers", "2")) as server:
        silent = [Client(server.port) for _ in range(2)]
        for client in silent:
            assert len(client.top(b"TOP 1\n")) == 1
        with Client(server.port) as third:
            third.send(b"TOP 2\n")
            third.sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                third.sock.recv(1)
            silent[0].close()
            third.sock.settimeout(2)
            assert len(third.top(b"")) == 2
        silent[1].close()


def test_pool_runs_a_fixed_number_of_threads():
    with serverproc.running("pool", args=("--workers", "5")) as server:
        threads = lambda: psutil.Process(server.proc.pid).num_threads()  # noqa: E731
        wait_for(lambda: threads() == 6, what="the acceptor and 5 pool threads")
        clients = [Client(server.port) for _ in range(20)]
        for client in clients[:5]:
            assert len(client.top(b"TOP 1\n")) == 1
        assert threads() == 6  # 20 connections made no new thread
        for client in clients:
            client.close()


@BUILDS
def test_fork_makes_a_process_per_connection_and_reaps_it(san):
    with serverproc.running("fork", service="echo", san=san) as server:
        clients = [Client(server.port) for _ in range(3)]
        for client in clients:
            client.send(b"x\n")
            assert client.line() == b"x"
        assert len(live_children(server.proc.pid)) == 3
        clients.pop().close()
        # Reaped, not left a zombie: the process is gone from the table.
        wait_for(lambda: len(psutil.Process(server.proc.pid).children()) == 2,
                 what="the ended connection's process reaped")
        # SIGTERM with two connections open: serverproc checks both processes go.
    for client in clients:
        client.close()


@pytest.mark.parametrize("model", serverproc.WORKER_MODELS)
def test_worker_count_must_be_positive(model):
    result = subprocess.run([str(serverproc.bin_dir() / model), "--workers", "0"],
                            capture_output=True, text=True, timeout=5)
    assert result.returncode == 2
    assert "--workers needs a number from 1 to 4096" in result.stderr


@pytest.mark.parametrize("model", serverproc.WORKER_MODELS)
def test_help_tells_the_default_worker_count(model):
    result = subprocess.run([str(serverproc.bin_dir() / model), "--help"], capture_output=True,
                            text=True, timeout=5)
    assert result.returncode == 0 and "one per usable CPU" in result.stdout


@PROCESS_MODELS
def test_workers_that_keep_dying_make_the_parent_give_up(model):
    """More deaths within a second than there are workers: a crash loop; the
    parent stops the rest and exits 1 instead of forking forever."""
    proc = subprocess.Popen([str(serverproc.bin_dir() / model), "--port", "0", "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith(b"listening ")
        killed = set()
        while proc.poll() is None and len(killed) < 6:
            for pid in live_children(proc.pid) - killed:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue  # gone since it was listed: the parent gave up and stopped it
                killed.add(pid)
            time.sleep(0.01)
        assert proc.wait(timeout=2) == 1
        assert b"workers keep dying, giving up" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def listener_events_in_epoll(pid: int, listen_port: int) -> list[int]:
    """For each epoll descriptor of process pid: the event mask it watches the
    listening socket with (from /proc/PID/fdinfo)."""
    listener_inode = None
    for conn in psutil.Process(pid).net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == listen_port:
            fd_path = f"/proc/{pid}/fd/{conn.fd}"
            listener_inode = os.stat(fd_path).st_ino
    assert listener_inode is not None
    masks = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:[eventpoll]":
            continue
        with open(f"/proc/{pid}/fdinfo/{fd}") as info:
            for line in info:
                # tfd:        3 events:       19 data: ... pos:0 ino:14044f sdev:f
                if line.startswith("tfd:") and \
                        int(line.split("ino:")[1].split()[0], 16) == listener_inode:
                    masks.append(int(line.split()[3], 16))
    return masks


def test_epoll_workers_share_the_listener_with_epollexclusive():
    epollexclusive = 1 << 28
    with serverproc.running("epoll_workers", args=("--workers", "2")) as server:
        workers = wait_for(lambda: len(live_children(server.proc.pid)) == 2
                           and live_children(server.proc.pid), what="2 workers")
        with Client(server.port) as client:  # the workers are in their loops
            assert len(client.top(b"TOP 1\n")) == 1
        for pid in workers:
            masks = listener_events_in_epoll(pid, server.port)
            assert len(masks) == 1 and masks[0] & epollexclusive, masks
