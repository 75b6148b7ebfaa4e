"""Exercise 1.2 (notebook 01): ev_poll, the poll backend's event dispatch
(csrc/loop/ev_poll.c), built into a scratch copy of the poll server and run against the
echo protocol: clients served while another stays silent, a body larger than the server
buffers (it must wait for writable), and a loop that spins without answering caught by
the CPU it burns.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from ..scratch import ScratchServer, build_with
from ..stubs.which_edition import adopt

POLL_MODEL = "poll"
POLL_BACKEND = Path("loop") / "ev_poll.c"


def build_poll_server(code: str) -> Path:
    """The poll server built with the student's ev_poll(); its path."""
    return build_with(POLL_MODEL, POLL_BACKEND, "ev_poll", code)


_NO_REPLY_HINT = (
    "hint: after poll() returns, every pollfd whose revents has POLLIN (or POLLERR/POLLHUP) must go "
    "into fired[] with EV_READABLE, every one with POLLOUT with EV_WRITABLE, and ev_poll must "
    "return how many entries it filled")


# A loop whose dispatch drops a ready descriptor spins: poll() returns at once (the
# descriptor is still ready: poll is level-triggered) and nothing is served.  A server
# that answers nothing for SPIN_WINDOW_S while using at least SPIN_SHARE of a CPU is
# that loop; one that waits in poll() uses next to none.
SPIN_WINDOW_S = 1.0
SPIN_SHARE = 0.25


def _exchange(sock: socket.socket, payload: bytes, what: str, server: ScratchServer, timeout: float) -> None:
    """Send `payload` (from a thread, so a large one cannot deadlock) and read it back;
    fail at `timeout`, or as soon as the server is seen spinning without answering."""
    def send():
        try:
            sock.sendall(payload)
        except OSError:
            pass  # the reading side below says what went wrong

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    got = bytearray()
    deadline = time.monotonic() + timeout
    quiet_since, cpu_then = time.monotonic(), server.cpu_s()
    while len(got) < len(payload):
        now = time.monotonic()
        if now >= deadline:
            raise AssertionError(f"{what}: sent {len(payload)} bytes, got {len(got)} back within {timeout:g} s"
                                 f"{server.died()}\n{_NO_REPLY_HINT}")
        sock.settimeout(max(0.01, min(deadline - now, SPIN_WINDOW_S / 4)))
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, TimeoutError):
            quiet = time.monotonic() - quiet_since
            cpu_now = server.cpu_s()
            if quiet >= SPIN_WINDOW_S and None not in (cpu_then, cpu_now):
                if cpu_now - cpu_then >= SPIN_SHARE * quiet:
                    server.kill()
                    raise AssertionError(
                        f"{what}: sent {len(payload)} bytes, got {len(got)} back, and for {quiet:.1f} s the "
                        f"server answered nothing while it used {cpu_now - cpu_then:.1f} s of CPU: its loop "
                        "spins. poll() returns at once because a descriptor is ready, and the loop does "
                        "nothing with it (it is not in fired[] with the event it is ready for)"
                        f"\n{_NO_REPLY_HINT}") from None
                quiet_since, cpu_then = time.monotonic(), cpu_now
            continue
        if not chunk:
            raise AssertionError(f"{what}: the server closed the connection after echoing {len(got)} of "
                                 f"{len(payload)} bytes{server.died()}\n{_NO_REPLY_HINT}")
        got += chunk
        quiet_since, cpu_then = time.monotonic(), server.cpu_s()
    assert bytes(got) == payload, f"{what}: the echo came back different from what was sent"
    sender.join(timeout)


def check_poll_server(code: str, clients: int = 3, big: int = 1 << 20, timeout: float = 5.0) -> None:
    """Build the poll server with the student's ev_poll and check it serves echo:
    `clients` connections (the first stays silent until the end) each echoed, one
    of them `big` bytes (more than the server buffers: it must wait for writable)."""
    binary = build_poll_server(code)
    server = ScratchServer(binary, "poll (your ev_poll)", "echo")
    connections = []
    try:
        for _ in range(clients):
            connections.append(socket.create_connection(("127.0.0.1", server.port), timeout=timeout))
        silent, talkers = connections[0], connections[1:]
        for i, conn in enumerate(talkers, start=1):
            _exchange(conn, f"hello from client {i}\n".encode(), f"client {i} (while client 0 stays silent)",
                      server, timeout)
        if big and talkers:
            _exchange(talkers[0], bytes(range(256)) * (big // 256), f"client 1, {big} bytes at once", server,
                      timeout)
        _exchange(silent, b"late but here\n", "client 0 (silent until now)", server, timeout)
    finally:
        for conn in connections:
            conn.close()
        server.stop()
    adopt(POLL_BACKEND, "ev_poll", code)

