"""The load generator's --reconnect (csrc/loadgen/events_reconnect.c): every exchange on
a new connection (connect, send, read the whole reply, close), the workload of
short connections a thundering-herd experiment needs.

The server here is a small Python one that records every connection it
accepts: when, the bytes it received, and whether the client closed it; plus
the lab's own servers as already built in build/bin/ (not rebuilt here: a
missing one skips its case).  The rows with san=True run the ASan + UBSan
build of loadgen.
"""

import statistics
import subprocess
import time

import pytest

import loadgenproc
from loadgenproc import SAN_MARKERS
from test_loadgen_breaking import lab_server, run
from threaded_server import ThreadPerConnection
from waits import wait_until
from labkit.bench import free_port

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

TOP_REPLY = b"1 20 10 init\n2 5 5 kthreadd\nEND\n"  # a valid `top` reply for k = 2


class Recorder(ThreadPerConnection):
    """A thread-per-connection server on 127.0.0.1 that records, for every
    connection in accept order, when it was accepted, the bytes it received
    and whether the client closed it (EOF).  `service`: "echo", "top" (a fixed
    two-line reply per request line), or "close" (closes each connection as
    soon as it is accepted, never replying)."""

    def __init__(self, service):
        self.service = service
        self.accepted, self.received, self.client_closed = [], [], []
        super().__init__()

    def admit(self, conn):
        self.accepted.append(time.monotonic())
        self.received.append(b"")
        self.client_closed.append(False)
        return None if self.service == "close" else len(self.accepted) - 1

    def serve(self, conn, index):
        pending = b""
        while chunk := conn.recv(65536):
            with self.lock:
                self.received[index] += chunk
            if self.service == "echo":
                conn.sendall(chunk)
            else:
                pending += chunk
                while b"\n" in pending:
                    _, _, pending = pending.partition(b"\n")
                    conn.sendall(TOP_REPLY)
        with self.lock:
            self.client_closed[index] = True

    def snapshot(self):
        """(accept times, bytes received, closed by the client), per connection,
        once the handler threads have seen every close."""
        def idle():
            with self.lock:
                return not any(t.is_alive() for t in self.threads)
        wait_until(idle, within=5)
        with self.lock:
            return list(self.accepted), list(self.received), list(self.client_closed)


@pytest.fixture
def recorder():
    started = []

    def start(service):
        started.append(Recorder(service))
        return started[-1]

    yield start
    for srv in started:
        srv.stop()


def assert_one_request_each(received, service, size=64):
    for i, data in enumerate(received):
        if service == "top":
            assert data == b"TOP 2\n", f"connection {i} received {data!r}"
        else:
            assert len(data) == size, f"connection {i} received {len(data)} bytes, not one {size}-byte request"


# ------------------------------------------------------------ closed loop

@pytest.mark.parametrize("service, threads, idle, san", [
    ("echo", 1, 0, False),
    ("top", 2, 0, True),
    ("echo", 2, 2, False),   # idle connections still connect before the gate
])
def test_closed_loop_makes_a_connection_per_exchange(recorder, service, threads, idle, san):
    srv = recorder(service)
    code, report, err, wall = run("--port", srv.port, "--clients", 3, "--requests", 4,
                                  "--service", service, "--threads", threads, "--idle", idle,
                                  "--reconnect", san=san)
    assert code == 0, err
    accepted, received, closed = srv.snapshot()
    assert len(accepted) == 12 + idle
    # The idle ones connect before the gate, so they are accepted first, and never speak.
    assert received[:idle] == [b""] * idle
    assert_one_request_each(received[idle:], service)
    assert all(closed[idle:]), "the client closes each connection after its reply (FIN)"
    assert report["reconnect"] is True
    assert report["connections_opened"] == 12
    assert report["requests_ok"] == 12 and report["requests_failed"] == 0
    assert report["requests_sent"] == 12
    assert report["connect_us"]["samples"] == 12 + idle   # one connect per exchange, and the idle ones
    assert (report["connections_ok"], report["connections_failed"], report["connections_lost"]) == (3, 0, 0)
    assert report["idle_connections_ok"] == idle
    assert report["errors"] == {}


def test_without_reconnect_one_connection_carries_every_exchange(recorder):
    srv = recorder("echo")
    code, report, err, _ = run("--port", srv.port, "--clients", 3, "--requests", 4, "--service", "echo")
    assert code == 0, err
    accepted, received, _ = srv.snapshot()
    assert len(accepted) == 3
    assert [len(data) for data in received] == [4 * 64] * 3
    assert report["reconnect"] is False
    assert report["connections_opened"] == 3 == report["connections_ok"]


# -------------------------------------------------------------- open loop

@pytest.mark.parametrize("threads, san", [(1, False), (2, True)])
def test_open_loop_opens_each_connection_when_its_exchange_falls_due(recorder, threads, san):
    srv = recorder("echo")
    code, report, err, _ = run("--port", srv.port, "--clients", 5, "--rate", 50, "--duration", 1,
                               "--service", "echo", "--threads", threads, "--reconnect", san=san)
    assert code == 0, err
    accepted, received, closed = srv.snapshot()
    assert report["requests_planned"] == 50
    assert len(accepted) == report["requests_ok"] == report["connections_opened"]
    assert report["requests_ok"] >= 45
    assert_one_request_each(received, "echo")
    assert all(closed)
    # One at a time, 1/rate apart, over the second: not all at the start gate.
    gaps = [b - a for a, b in zip(accepted, accepted[1:])]
    assert 0.010 <= statistics.median(gaps) <= 0.040, f"median gap {statistics.median(gaps):.4f} s"
    assert accepted[-1] - accepted[0] >= 0.7
    # The connect is part of the exchange: counted from the due time, the
    # latency includes it; the send-to-reply figure does not.
    assert report["latency_us"]["mean"] >= report["latency_uncorrected_us"]["mean"]
    assert report["connect_us"]["samples"] == report["connections_opened"]


# ------------------------------------------------------ the lab's servers

@pytest.mark.parametrize("model, service, load", [
    ("epoll", "echo", ["--clients", 4, "--requests", 5]),
    ("epoll", "echo", ["--clients", 4, "--rate", 200, "--duration", 0.5]),
    ("iterative", "top", ["--clients", 3, "--requests", 3]),
    ("iterative", "top", ["--clients", 3, "--rate", 40, "--duration", 0.5]),
])
def test_the_lab_servers_serve_a_reconnecting_load(model, service, load):
    with lab_server(model, service) as port:
        code, report, err, _ = run("--port", port, "--service", service, *load, "--reconnect")
    assert code == 0, err
    assert report["requests_ok"] == report["requests_planned"] == report["connections_opened"] > 0
    assert report["connections_failed"] == 0 and report["errors"] == {}


# -------------------------------------------------------------- refusals

@pytest.mark.parametrize("engine", [None, "threads"])
def test_reconnect_is_refused_with_the_threads_engine(engine):
    command = [str(loadgenproc.binary(False)), "--port", "9", "--clients", 1, "--requests", 1, "--reconnect"]
    if engine:
        command += ["--engine", engine]
    proc = subprocess.run([*map(str, command)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "--reconnect needs --engine events" in proc.stderr


def test_usage_describes_reconnect():
    proc = subprocess.run([str(loadgenproc.binary(False)), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert "--reconnect" in proc.stdout and "connections_opened" in proc.stdout


# --------------------------------------------------------------- failures

@pytest.mark.parametrize("case, load, san", [
    ("close", ["--clients", 3, "--requests", 4], True),
    ("close", ["--clients", 3, "--rate", 40, "--duration", 0.3], False),
    ("refused", ["--clients", 3, "--requests", 4], False),
    ("refused", ["--clients", 3, "--rate", 40, "--duration", 0.3], True),
])
def test_failed_exchanges_are_counted_by_name_and_the_run_goes_on(recorder, case, load, san):
    port = recorder("close").port if case == "close" else free_port()
    code, report, err, wall = run("--port", port, "--service", "echo", *load, "--timeout", 2,
                                  "--connect-timeout", 2, "--reconnect", san=san)
    assert code == 1, err
    assert wall < 10
    planned = report["requests_planned"]
    assert planned == 12
    # Every exchange was tried, each on its own connection, and failed alone.
    assert report["requests_ok"] == 0 and report["requests_failed"] == planned
    assert sum(report["errors"].values()) == planned, report["errors"]
    if case == "close":
        # Connected (the kernel completes the handshake), then the server closed.
        assert set(report["errors"]) <= {"EOF", "ECONNRESET", "EPIPE"}, report["errors"]
        assert report["connections_opened"] == planned == report["requests_sent"]
        assert report["connections_lost"] == 3 and report["connections_failed"] == 0
    else:
        assert report["errors"] == {"ECONNREFUSED": planned}
        assert report["connections_opened"] == 0 == report["requests_sent"]
        assert report["connections_failed"] == 3 and report["connections_lost"] == 0
    assert not any(mark in err for mark in SAN_MARKERS)
