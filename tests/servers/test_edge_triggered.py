"""The edge-triggered epoll model (epoll_et): with EPOLLET a socket is
reported when new data arrives, not while bytes stay unread, so the loop must
drain it (bytes left behind get no event until the peer sends more); these tests
fail if it ever leaves bytes behind (checked: they fail when the loop
forgets readiness after one read).  Normal and ASan/UBSan builds."""

import os
import socket
import threading

import pytest

import serverproc
from serverproc import Client

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

BUILDS = pytest.mark.parametrize("san", [False, True], ids=["normal", "san"])
MIB = 1 << 20


def echo_burst(port: int, payload: bytes, half_close: bool) -> bytes:
    """Send payload in one go from a thread while reading here; return what came back."""
    with Client(port, timeout=10) as client:
        def send_all():
            client.sock.sendall(payload)
            if half_close:
                client.sock.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send_all)
        sender.start()
        received = bytearray()
        while len(received) < len(payload):
            chunk = client.sock.recv(1 << 16)
            if not chunk:
                break
            received += chunk
        sender.join(10)
        assert not sender.is_alive(), "the server stopped reading the burst"
        if half_close:
            assert client.closed_by_server(), "the server did not close after echoing everything"
        return bytes(received)


@BUILDS
@pytest.mark.parametrize("half_close", [False, True], ids=["open", "half-closed"])
def test_a_1mib_burst_comes_back_intact(san, half_close):
    payload = os.urandom(MIB)
    with serverproc.running("epoll_et", service="echo", san=san) as server:
        received = echo_burst(server.port, payload, half_close)
        assert len(received) == len(payload)
        assert received == payload


@BUILDS
def test_bursts_from_several_clients_at_once(san):
    payloads = [os.urandom(MIB // 4) for _ in range(4)]
    results = [None] * len(payloads)
    with serverproc.running("epoll_et", service="echo", san=san) as server:
        def run(i):
            results[i] = echo_burst(server.port, payloads[i], half_close=False)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(payloads))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
    assert results == payloads
