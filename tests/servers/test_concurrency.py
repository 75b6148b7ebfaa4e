"""How the models differ under concurrency, and how they survive running out
of descriptors.  Every load here is bounded in count and time."""

import time

import pytest

import loadgenproc
import serverproc
from serverproc import Client
from waits import wait_for

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

BUILDS = [False, True]
BUILD_IDS = ["normal", "san"]


CONCURRENT_MODELS = [m for m in serverproc.MODELS if m != "iterative"]


@pytest.mark.parametrize("san", BUILDS, ids=BUILD_IDS)
@pytest.mark.parametrize("model", CONCURRENT_MODELS)
def test_a_silent_client_does_not_block_the_others(model, san):
    with serverproc.running(model, san=san) as server:
        with Client(server.port) as silent, Client(server.port) as second:
            assert len(silent.top(b"TOP 1\n")) == 1
            silent.send(b"TOP")  # ... and then nothing more
            second.sock.settimeout(0.5)
            assert len(second.top(b"TOP 2\n")) == 2


@pytest.mark.parametrize("san", BUILDS, ids=BUILD_IDS)
def test_iterative_serves_one_client_at_a_time(san):
    with serverproc.running("iterative", san=san) as server:
        silent = Client(server.port)
        assert len(silent.top(b"TOP 1\n")) == 1  # the server is now busy with this client
        with Client(server.port) as second:
            second.send(b"TOP 2\n")
            second.sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                second.sock.recv(1)  # queued behind the silent client: no reply
            started = time.monotonic()
            silent.close()
            second.sock.settimeout(2)
            assert len(second.top(b"")) == 2  # served as soon as the first one left
            assert time.monotonic() - started < 1


def outcome(client: Client) -> str:
    """'served' if the echo server answers this client, 'shed' if it closed it."""
    try:
        client.send(b"ping\n")
        return "served" if client.line() == b"ping" else "shed"
    except (ConnectionResetError, BrokenPipeError):
        return "shed"


def late_client_served(port) -> bool:
    """Whether a client that connects now is served (not shed)."""
    with Client(port) as late:
        return outcome(late) == "served"


@pytest.mark.parametrize("san", BUILDS, ids=BUILD_IDS)
@pytest.mark.parametrize("model", [m for m in ["threaded", "select", "poll", "epoll", "epoll_et", "uring", "busypoll"]
                                   if m in serverproc.MODELS])
def test_out_of_descriptors_sheds_the_excess_and_keeps_serving(model, san):
    with serverproc.running(model, service="echo", san=san, fd_limit=32) as server:
        clients = [Client(server.port, timeout=3) for _ in range(60)]
        outcomes = [outcome(c) for c in clients]
        served = [c for c, o in zip(clients, outcomes) if o == "served"]
        # 32 descriptors, a few of them the server's own: the rest are connections.
        assert 15 <= len(served) <= 29, outcomes
        assert outcomes.count("shed") == 60 - len(served)
        assert "out of file descriptors" in server.stderr()
        for client in served:  # the connections it kept are still served
            assert outcome(client) == "served"
        for client in clients:
            client.close()
        # descriptors are free again once the server has seen the closes: a late client is served
        wait_for(lambda: late_client_served(server.port), within=3, what="a late client served")


@pytest.mark.parametrize("san", BUILDS, ids=BUILD_IDS)
def test_aio_out_of_descriptors_sheds_the_excess_and_keeps_serving(san):
    """aio gets the same test with fewer connections: it holds a pool thread in read()
    for every silent connection, and glibc's pool has 20 (test_failures.py shows the
    stall), so the connections it keeps must stay below that."""
    with serverproc.running("aio", service="echo", san=san, fd_limit=16) as server:
        clients = [Client(server.port, timeout=3) for _ in range(24)]
        outcomes = [outcome(c) for c in clients]
        served = [c for c, o in zip(clients, outcomes) if o == "served"]
        assert 4 <= len(served) <= 13, outcomes
        assert outcomes.count("shed") == 24 - len(served)
        assert "out of file descriptors" in server.stderr()
        for client in served:
            assert outcome(client) == "served"
        for client in clients:
            client.close()
        wait_for(lambda: late_client_served(server.port), within=3, what="a late client served")


@pytest.mark.parametrize("san", BUILDS, ids=BUILD_IDS)
def test_select_refuses_descriptors_beyond_fd_setsize(san):
    """select() can only watch descriptors below FD_SETSIZE (1024): beyond that
    the server must close the connection with a clear message, never FD_SET it."""
    count = 1060
    with serverproc.running("select", service="echo", san=san) as server:
        clients = []
        try:
            for _ in range(count):
                clients.append(Client(server.port, timeout=3))
            # The server's own descriptors come first, so the last ones are refused.
            assert all(outcome(c) == "shed" for c in clients[-20:])
            assert all(outcome(c) == "served" for c in clients[:10] + clients[990:1000])
            assert "FD_SETSIZE" in server.stderr()
        finally:
            for client in clients:
                client.close()
        with Client(server.port) as late:
            assert outcome(late) == "served"


@pytest.mark.parametrize("san", BUILDS, ids=BUILD_IDS)
@pytest.mark.parametrize("model", [m for m in ["poll", "epoll", "epoll_et", "epoll_workers", "uring"]
                                   if m in serverproc.MODELS])
def test_2000_connections_through_loadgen_without_a_failure(model, san):
    """Past select's FD_SETSIZE: 2,000 concurrent echo clients (the load
    generator's thread-per-connection engine), 3 exchanges each."""
    with serverproc.running(model, service="echo", san=san) as server:
        report = loadgenproc.ok(loadgenproc.binary(), "--port", server.port, "--service", "echo",
                                "--clients", 2000, "--requests", 3, "--timeout", 20)
        assert (report["connections_ok"], report["connections_failed"], report["connections_lost"]) \
            == (2000, 0, 0)
        assert (report["requests_ok"], report["requests_failed"]) == (6000, 0)
