"""The battery's client: plain sockets (never the lab's load generator), every wait bounded,
and a failure that says what the client saw.

A wait that runs out is a failure only if the server is stuck: while the server under test
(watching(port, pid)) is working or waiting for a CPU on a busy machine, the wait is given
again, up to MORE_WAITS times (labkit.busy_machine)."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import time

from .. import busy_machine

MORE_WAITS = 3  # a wait given again while the server is held back, at most
_watched: dict[int, int] = {}  # the port of each server under test -> its pid


@contextlib.contextmanager
def watching(port: int, pid: int):
    """While the case runs: the server listening on `port` is process `pid`."""
    _watched[port] = pid
    try:
        yield
    finally:
        _watched.pop(port, None)


def held_back(sock: socket.socket) -> bool:
    """Whether the server at the other end of `sock` is working or waiting for a CPU
    (busy_machine.held_back), rather than stuck."""
    try:
        pid = _watched.get(sock.getpeername()[1])
    except OSError:
        return False
    return pid is not None and busy_machine.held_back(pid)


def _more(waits: int) -> str:
    return f" (and {waits} more while the server was busy or waiting for a CPU)" if waits else ""


class CaseFailed(AssertionError):
    """A case's client saw something wrong; the message says what."""


def connect(port: int, size, small_buffers: bool = False) -> socket.socket:
    """A connection to 127.0.0.1:port, Nagle off, every wait bounded by `size.timeout`
    (a cases.Size)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if small_buffers:  # the server's buffers fill up first
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(size.timeout)
    sock.connect(("127.0.0.1", port))
    return sock


def reset(sock: socket.socket) -> None:
    """Close abruptly: SO_LINGER 0 makes close() send RST, not FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Progress:
    """When the server last sent anything to any of several clients (Lines(sock, progress)):
    a client that waited its timeout in vain while the server was answering others is
    queued behind them on a busy machine, not stuck."""

    def __init__(self):
        self.last = time.monotonic()

    def made(self) -> None:
        self.last = time.monotonic()

    def within(self, seconds: float) -> bool:
        return time.monotonic() - self.last < seconds


class Lines:
    """Lines read from one connection, each read bounded by the socket's timeout (with a
    Progress shared among clients: until the server has sent nothing to any of them for that
    long; the case bounds the whole)."""

    def __init__(self, sock: socket.socket, progress: Progress | None = None):
        self.sock, self.buffer, self.progress = sock, bytearray(), progress

    def line(self, what: str) -> bytes:
        more = 0
        while b"\n" not in self.buffer:
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, TimeoutError):
                if self.progress is not None and self.progress.within(self.sock.gettimeout()):
                    continue  # the server is answering the others: this one waits its turn
                if more < MORE_WAITS and held_back(self.sock):
                    more += 1
                    continue
                raise CaseFailed(f"waiting for {what}: nothing more came within {self.sock.gettimeout():g} s"
                                 f"{_more(more)} (got {bytes(self.buffer[:80])!r} so far)"
                                 + (" while the server sent nothing to any client" if self.progress else "")) from None
            except ConnectionResetError:
                raise CaseFailed(f"waiting for {what}: the server reset the connection") from None
            if not chunk:
                raise CaseFailed(f"waiting for {what}: the server closed the connection"
                                 + (f" after {bytes(self.buffer[:80])!r}" if self.buffer else ""))
            self.buffer += chunk
            if self.progress is not None:
                self.progress.made()
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        return line.rstrip(b"\r")

    def top(self, k: int, what: str) -> int:
        """Read one TOP reply of `k` rows (or of every process, when there are fewer): each
        `pid utime stime name`, then END."""
        rows = 0
        while (line := self.line(f"{what}: row {rows + 1} or END")) != b"END":
            words = line.split(b" ", 3)
            if len(words) != 4 or not all(w.isdigit() for w in words[:3]):
                raise CaseFailed(f"{what}: {line[:80]!r} is not a TOP row (`pid utime stime name`)"
                                 + (" -- is it part of another reply?" if line.startswith((b"OK", b"ERR")) else ""))
            rows += 1
        if rows != k and not (rows < k and rows in visible_processes()):
            raise CaseFailed(f"{what}: {rows} rows before END, expected {k}")
        return rows


def visible_processes() -> range:
    """How many processes the server can list now, give or take one coming or going: in a
    PID namespace of its own (grading) there may be fewer than a TOP request asks for, and
    a reply of all of them is then complete."""
    import os

    count = sum(name.isdigit() for name in os.listdir("/proc"))
    return range(max(1, count - 1), count + 2)


def read_exactly(sock: socket.socket, n: int, what: str) -> bytes:
    data, more = bytearray(), 0
    while len(data) < n:
        try:
            chunk = sock.recv(min(1 << 20, n - len(data)))
        except (socket.timeout, TimeoutError):
            if more < MORE_WAITS and held_back(sock):
                more += 1
                continue
            raise CaseFailed(f"{what}: {len(data)} of {n} bytes came back, then nothing for "
                             f"{sock.gettimeout():g} s{_more(more)}") from None
        if not chunk:
            raise CaseFailed(f"{what}: the server closed the connection after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def echo_difference(sent: bytes, got: bytes) -> str:
    """Where an echo differs from what was sent, and what that usually means."""
    at = next((i for i, (a, b) in enumerate(zip(sent, got)) if a != b), min(len(sent), len(got)))
    if at == len(got) < len(sent):
        return (f"the first {len(got):,} of {len(sent):,} bytes came back, then nothing: the rest was either "
                "dropped (a write() on a non-blocking socket may write fewer bytes than asked, or none with "
                "EAGAIN; reported as written, the rest is gone: report only what it wrote, session_did_write(n)) "
                "or is held unwritten (wait until the socket is writable again, then write the rest)")
    lost = sent.find(got[at:at + 64], at) if at < len(got) else -1
    if lost > at:
        return (f"the echo matches the first {at:,} bytes, then skips {lost - at:,} bytes that were sent: "
                "they were dropped on the way out. A write() on a non-blocking socket may write fewer bytes "
                "than asked, or none (EAGAIN), when the client is not reading: report only what it wrote "
                "(session_did_write(n)) and write the rest when the socket is writable again")
    return f"the echo differs from what was sent at byte {at:,} (of {len(sent):,})"


def kernel_buffering(sock: socket.socket) -> int:
    """The most bytes the kernel can hold between this client and a server on loopback that
    reads none of them: this socket's send and receive buffers (as getsockopt reports them)
    and the server's, which grow by themselves up to tcp_rmem's and tcp_wmem's third values
    (per network namespace; long 6 MiB and 4 MiB by default, 32 MiB and 4 MiB on a Linux 6.18
    machine this lab was tested on: read, never assumed)."""
    def most(name: str) -> int:
        with open(f"/proc/sys/net/ipv4/{name}") as values:
            return int(values.read().split()[2])
    return (most("tcp_rmem") + most("tcp_wmem") + sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            + sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))


def send_while_reading(sock: socket.socket, payload: bytes, timeout: float) -> tuple[int, bytes]:
    """Send `payload` without reading until the server stops taking bytes (everything full),
    then read while sending the rest: (bytes sent before the first read, what came back)."""
    sock.setblocking(False)
    sent, deadline = 0, time.monotonic() + timeout
    while sent < len(payload) and time.monotonic() < deadline:
        try:
            sent += sock.send(payload[sent:sent + 65536])
        except BlockingIOError:
            if not select.select([], [sock], [], 0.3)[1]:
                break  # the server took nothing for 0.3 s: its output is full and it stopped reading
    before_reading = sent
    received = bytearray()
    deadline = time.monotonic() + 4 * timeout + len(payload) / (50 << 20)
    quiet_until = time.monotonic() + timeout
    while len(received) < len(payload):
        now = time.monotonic()
        if now > deadline or now > quiet_until:
            break
        readable, writable, _ = select.select([sock], [sock] if sent < len(payload) else [], [], 0.5)
        if readable:
            try:
                chunk = sock.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
            quiet_until = time.monotonic() + timeout
        if writable:
            try:
                sent += sock.send(payload[sent:sent + 65536])
            except BlockingIOError:
                pass
            except OSError:
                break
    sock.setblocking(True)
    return before_reading, bytes(received)


def said_by(failure: BaseException) -> str:
    if isinstance(failure, OSError) and not isinstance(failure, CaseFailed):
        return f"the client's socket failed: {failure}"
    return str(failure) or type(failure).__name__
