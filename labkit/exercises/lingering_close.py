"""Exercise 3.1 (notebook 03): close_connection, a lingering close in
csrc/common/blocking.c, built into a scratch threaded server and sent more than it
announced: the client must read the ERR line and a clean end of file, never a reset, and
(hidden) a client that neither sends nor closes cannot hold the linger for ever.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from ..scratch import ScratchServer, build_with


LINGER_MODEL = "threaded"
LINGER_SOURCE = Path("common") / "blocking.c"


def build_lingering_server(code: str) -> Path:
    """The threaded server built with the student's close_connection(); its path."""
    return build_with(LINGER_MODEL, LINGER_SOURCE, "close_connection", code)


def check_lingering_close(code: str, tries: int = 5, extra: int = 256 * 1024, silent_after: bool = False,
                          timeout: float = 5.0) -> None:
    """Build the threaded server with the student's close_connection and check that a
    client sending more than it announced gets the ERR line and a clean end of file
    (no ECONNRESET), `tries` times; that an ordinary upload still gets its OK; and, with
    `silent_after`, that a client which neither sends nor closes after the ERR cannot
    hold the connection for ever (the linger is bounded)."""
    from labkit import failures

    binary = build_lingering_server(code)
    server = ScratchServer(binary, "threaded (your close_connection)", "sink")
    try:
        for attempt in range(1, tries + 1):
            saw = failures.send_more_than_announced(server.port, extra=extra, timeout=timeout)
            assert not saw["error"], (
                f"try {attempt}: the client got {saw['error']} in {saw['where']}() after receiving "
                f"{saw['received']!r}{server.died()}\nhint: before close(), shutdown(fd, SHUT_WR) so the reply "
                "leaves with a FIN, then read and discard what the client still sends until read() returns 0")
            assert b"ERR " in saw["received"], (
                f"try {attempt}: the client read {saw['received']!r} and then end of file, but no ERR line")
        reply = failures.upload_once(server.port, timeout=timeout)
        assert reply.startswith(f"OK {failures.PROBE_BYTES} "), (
            f"an ordinary upload after the lingering closes got {reply!r}, not OK{server.died()}")
        if silent_after:
            _check_linger_is_bounded(server, timeout)
    finally:
        server.stop()


def _server_holds(pid: int, client: tuple) -> bool:
    """Whether process `pid` still has a socket connected to the `client` address."""
    import psutil

    try:
        return any(c.raddr and (c.raddr.ip, c.raddr.port) == client[:2]
                   for c in psutil.Process(pid).net_connections(kind="tcp"))
    except psutil.NoSuchProcess:
        return False


TRICKLE_S = 0.2  # a byte this often: any per-read timeout over it (a second, say) is never reached


def _trickle(sock: socket.socket, stop: threading.Event) -> None:
    """Send a byte every TRICKLE_S until `stop`, or until the server has closed."""
    while not stop.wait(TRICKLE_S):
        try:
            sock.send(b"x")
        except OSError:
            return  # the server closed: what the check waits for


def _check_linger_is_bounded(server: ScratchServer, timeout: float) -> None:
    """Clients that get ERR and then neither close nor stop: one silent, one sending a
    byte every TRICKLE_S (each read then returns within any per-read timeout, so only a
    bound on the whole linger ends it).  The server must close each connection by itself
    within `timeout` (a linger with no bound holds a thread, and its descriptor, for as
    long as the client likes).  Watched from the server's side: whether it still holds a
    socket connected to this client.  The bytes go from a thread of their own, on time
    however slowly a busy machine answers the watching (its reads of /proc): a byte late
    past the per-read timeout would let a per-read bound pass."""
    pid = server.server.pid
    for trickle in (False, True):
        with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
            sock.sendall(b"GET / HTTP/1.0\n")  # an unknown verb: ERR, and the linger begins
            got = sock.recv(4096)
            assert got.startswith(b"ERR "), f"the client got {got!r} instead of an ERR line"
            deadline = time.monotonic() + timeout
            stop = threading.Event()
            sender = threading.Thread(target=_trickle, args=(sock, stop), daemon=True) if trickle else None
            if sender:
                sender.start()
            try:
                while _server_holds(pid, sock.getsockname()):
                    if time.monotonic() > deadline:
                        raise AssertionError(
                            f"after ERR the server kept a "
                            f"{f'client sending a byte every {TRICKLE_S:g} s' if trickle else 'silent client'}"
                            f" connected for more than {timeout:g} s: bound the whole linger with a deadline "
                            "(say 2 s from the shutdown, the receive timeout set to what is left before each "
                            "read), not each read: a client that trickles bytes defeats a per-read timeout")
                    time.sleep(0.05)
            finally:
                stop.set()
                if sender:
                    sender.join()
