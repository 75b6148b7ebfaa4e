"""The requests a client sends to a loopback port, each with the time the kernel stamped it as it
left the client: a test's view of a schedule that no reader's lateness can move.

A server stamps a request when it reads it, and a server thread held off its CPU reads the
requests that queued meanwhile microseconds apart.  An AF_PACKET socket on lo gets a copy of
every segment as it is transmitted (dev_queue_xmit_nit in net/core/dev.c, in the sending
thread's own system call), stamped there (net_timestamp_set) once any socket has asked for
timestamps (SO_TIMESTAMPNS, here); the copy waits in the packet socket's queue with its stamp,
however late it is read.  Only the outgoing copies are kept (lo also shows each segment as
received), only TCP to the port (a classic BPF filter, so that other tests' loopback traffic
is not copied at all), and each sequence number once (a retransmission is the same bytes).

Needs CAP_NET_RAW (root): entering a Capture says so otherwise.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
import termios
import threading
import time

ETH_P_ALL = 0x0003  # every packet, as sent (PACKET_OUTGOING) and as received
ETH_P_IP = 0x0800
PACKET_OUTGOING = 4
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35  # SO_TIMESTAMPNS_OLD: a struct timespec of two longs


def _tcp_to_port(port: int) -> list[tuple[int, int, int, int]]:
    """A classic BPF program over a packet from its network header (SOCK_DGRAM): accept an
    unfragmented IPv4 TCP segment whose destination port is `port`, drop anything else."""
    return [
        (0x20, 0, 0, 0xFFFFF000),  # A = the packet's protocol (SKF_AD_OFF + SKF_AD_PROTOCOL)
        (0x15, 0, 8, ETH_P_IP),    # IPv4? else drop
        (0x30, 0, 0, 9),           # A = the IP header's protocol (its byte 9)
        (0x15, 0, 6, 6),           # TCP? else drop
        (0x28, 0, 0, 6),           # A = flags and fragment offset
        (0x45, 4, 0, 0x1FFF),      # a fragment after the first? drop
        (0xB1, 0, 0, 0),           # X = the IP header's length (4 x its low nibble)
        (0x48, 0, 0, 2),           # A = the TCP header's destination port
        (0x15, 0, 1, port),        # the port? accept, else drop
        (0x06, 0, 0, 0xFFFF),      # accept (up to 64 KiB of it)
        (0x06, 0, 0, 0),           # drop
    ]


class Capture:
    """Requests to `port` over lo, from any number of connections, as (seconds, request
    line) in the order they were sent; a line cut across segments is joined.  Use as a
    context manager around the client."""

    def __init__(self, port: int):
        self.port = port
        self.sent: list[tuple[float, bytes]] = []
        self._seen: set[tuple[int, int]] = set()  # (the client's port, a sequence number)
        self._pending: dict[int, bytes] = {}  # by the client's port: a line begun, not ended
        self.unstamped = 0  # segments the kernel had not stamped (read while timestamps came on)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def __enter__(self) -> Capture:
        try:
            # protocol 0: no packet is queued until the filter is on and bind() names one
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0)
        except PermissionError as denied:
            raise PermissionError(f"{denied}: capturing loopback traffic needs CAP_NET_RAW; run the tests as "
                                  "root") from denied
        program = _tcp_to_port(self.port)
        filters = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *op) for op in program))
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER,
                        struct.pack("HL", len(program), ctypes.addressof(filters)))
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind(("lo", ETH_P_ALL))
        sock.settimeout(0.1)
        self._sock = sock
        # Turning timestamps on may take effect a moment later (net_enable_timestamp defers
        # it to a work queue): until then a packet is stamped when it is read.
        time.sleep(0.1)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        while not self._stop.is_set() or self._queued():
            try:
                data, ancillary, _, address = self._sock.recvmsg(65536, socket.CMSG_SPACE(16))
            except TimeoutError:
                continue
            if address[2] != PACKET_OUTGOING:
                continue
            stamp = next((struct.unpack("qq", cdata[:16]) for level, kind, cdata in ancillary
                          if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS), None)
            if stamp is None:
                self.unstamped += 1
                continue
            self._segment(data, stamp[0] + stamp[1] / 1e9)

    def _queued(self) -> bool:
        return struct.unpack("i", fcntl.ioctl(self._sock, termios.FIONREAD, b"\0" * 4))[0] > 0

    def _segment(self, packet: bytes, when: float) -> None:
        ip_header = (packet[0] & 0x0F) * 4
        total = struct.unpack("!H", packet[2:4])[0]
        tcp = packet[ip_header:total]
        client, sequence = struct.unpack("!H", tcp[0:2])[0], struct.unpack("!I", tcp[4:8])[0]
        payload = tcp[(tcp[12] >> 4) * 4:]
        if not payload or (client, sequence) in self._seen:
            return
        self._seen.add((client, sequence))
        *lines, self._pending[client] = (self._pending.get(client, b"") + payload).split(b"\n")
        self.sent += [(when, line) for line in lines]

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sock.close()

    def times(self) -> list[float]:
        """When each request left, as the kernel stamped it."""
        assert not self.unstamped, f"{self.unstamped} segments came without the kernel's time stamp"
        return [when for when, _ in self.sent]
