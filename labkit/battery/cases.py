"""The battery's cases: each a row of CASES, its group, the service it runs, what its
client does to a fresh server (run(port, size)), and what to fix when it fails.

Groups, in the order a server usually learns them (GROUPS).  The hidden variant of a case
(grading) is the same client with a harsher Size: more clients, more bytes, nastier
timings."""

from __future__ import annotations

import os
import random
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from .client import (CaseFailed, Lines, Progress, connect, echo_difference, kernel_buffering, read_exactly, reset,
                     said_by, send_while_reading)
from .spin_probe import SpinProbe, spins

GROUPS = {
    "protocol": "each service's requests, answered as the wire protocol says; a bad request gets ERR",
    "pipelining": "several requests in one segment, answered in order, then one more",
    "split": "requests cut at every byte, and sent a byte per segment",
    "slow_reader": "a client that sends a lot and reads nothing until the server's output is full",
    "resets": "clients that reset (RST) with replies queued or mid-request; the next one is served",
    "many_clients": "many connections at once, a silent one among them, every one answered",
    "out_of_descriptors": "more connections than descriptors (EMFILE): shed, not hung, and serving after",
    "sigterm": "SIGTERM with clients connected: exit status 0 within a second",
    "resources": "what the server uses: no CPU while its clients are silent; its descriptors and memory back "
                 "after connections come and go, through every kind of close",
    "sanitizers": "the protocol, pipelining, split and reset cases, and connections coming and going, again, "
                  "built with ASan and UBSan",
}


@dataclass(frozen=True)
class Size:
    """How hard a case pushes.  VISIBLE is the notebook's battery, HIDDEN grading's."""

    clients: int = 100            # many_clients: connections at once
    exchanges: int = 3            # many_clients: requests per connection
    echo_bytes: int = 16 << 20    # slow_reader: bytes sent to echo beyond what the kernel can hold
    top_requests: int = 400       # slow_reader: TOP 1000 requests sent before reading
    byte_pause: float = 0.002     # split: pause between one-byte segments
    jitter: bool = False          # split: random pauses (0-20 ms) instead of a fixed one
    resets: int = 1               # resets: clients that reset, one after another
    idle_over_limit: int = 40     # out_of_descriptors: idle connections beyond the descriptor limit
    idle_clients: int = 10        # resources: silent connections while the server's CPU is measured
    idle_seconds: float = 1.0     # resources: ... for this long
    churn: int = 120              # resources: connections that come and go, for the descriptors
    memory_churn: int = 300       # resources: ... for memory, a round (a warm-up, then two rounds)
    churn_threads: int = 4        # resources: ... this many at a time
    timeout: float = 5.0          # every single wait


VISIBLE = Size()
HIDDEN = Size(clients=300, exchanges=5, echo_bytes=48 << 20, top_requests=1000, jitter=True, resets=5,
              idle_over_limit=120, idle_clients=50, idle_seconds=2.5, churn=300, memory_churn=600, churn_threads=8,
              timeout=8.0)
FD_LIMIT = 64  # out_of_descriptors: the server's RLIMIT_NOFILE


@dataclass(frozen=True)
class Case:
    name: str
    group: str
    service: str
    run: Callable          # run(port, size[, server]) -> None; raises CaseFailed (or AssertionError)
    fix: str               # what to look at when it fails
    server: str = "plain"  # plain | fd_limit, watched (also handed the server) | sigterm




def top_answers_k_rows(port, size):
    with connect(port, size) as sock:
        lines = Lines(sock)
        sock.sendall(b"TOP 3\n")
        lines.top(3, "the reply to TOP 3")
        sock.sendall(b"TOP\n")
        lines.top(2, "the reply to TOP (k defaults to 2)")
        sock.sendall(b"TOP 5\r\n")
        lines.top(5, "the reply to TOP 5 ending in CRLF")


def echo_returns_every_byte(port, size):
    payload = bytes(range(256)) * 64
    with connect(port, size) as sock:
        sock.sendall(b"hello\n")
        got = read_exactly(sock, 6, "the echo of hello")
        if got != b"hello\n":
            raise CaseFailed(f"sent b'hello\\n', got back {got!r}")
        sock.sendall(payload)
        got = read_exactly(sock, len(payload), f"the echo of {len(payload):,} bytes")
        if got != payload:
            raise CaseFailed(echo_difference(payload, got))


def sink_counts_bytes(port, size):
    with connect(port, size) as sock:
        lines = Lines(sock)
        sock.sendall(b"PUT 5\nhello")
        reply = lines.line("the reply to PUT 5").split()
        if reply[:2] != [b"OK", b"5"] or len(reply) != 3 or not reply[2].isdigit():
            raise CaseFailed(f"PUT 5 and 5 bytes got {b' '.join(reply)!r}, expected b'OK 5 <reads>'")
        sock.sendall(b"PUT 0\n")
        reply = lines.line("the reply to PUT 0").split()
        if reply[:2] != [b"OK", b"0"]:
            raise CaseFailed(f"PUT 0 got {b' '.join(reply)!r}, expected b'OK 0 0'")


def bad_request_gets_err(port, size):
    with connect(port, size) as sock:
        sock.sendall(b"TOP 2\nHELLO\n")
        lines = Lines(sock)
        lines.top(2, "the reply to TOP 2 (sent before the bad request)")
        reply = lines.line("the reply to HELLO")
        if not reply.startswith(b"ERR "):
            raise CaseFailed(f"the bad request HELLO got {reply!r}, expected a line starting ERR")
        sock.settimeout(size.timeout)
        try:
            rest = sock.recv(100)
        except (socket.timeout, TimeoutError):
            raise CaseFailed("after the ERR line the server kept the connection open: close it") from None
        except ConnectionResetError:
            rest = b""
        if rest:
            raise CaseFailed(f"after the ERR line the server sent {rest!r}: after ERR, send nothing more and close")
    with connect(port, size) as other:
        other.sendall(b"TOP 1\n")
        Lines(other).top(1, "another client's TOP 1 after the bad request")


# ---- pipelining


def top_pipelined(port, size):
    with connect(port, size) as sock:
        lines = Lines(sock)
        sock.sendall(b"TOP 1\nTOP 2\nTOP 3\n")
        for k in (1, 2, 3):
            lines.top(k, f"reply {k} of 3 pipelined requests")
        sock.sendall(b"TOP 4\n")
        lines.top(4, "the request after a pipelined batch")


def echo_pipelined(port, size):
    with connect(port, size) as sock:
        sock.sendall(b"one\ntwo\nthree\n")
        got = read_exactly(sock, 14, "the echo of three lines in one segment")
        if got != b"one\ntwo\nthree\n":
            raise CaseFailed(f"three lines in one segment came back as {got!r}")
        sock.sendall(b"four")
        if read_exactly(sock, 4, "the echo after") != b"four":
            raise CaseFailed("the bytes after the batch came back different")


def sink_pipelined(port, size):
    with connect(port, size) as sock:
        lines = Lines(sock)
        sock.sendall(b"PUT 3\nabcPUT 2\nxy")
        first, second = lines.line("the reply to PUT 3").split()[:2], lines.line("the reply to PUT 2").split()[:2]
        if [first, second] != [[b"OK", b"3"], [b"OK", b"2"]]:
            raise CaseFailed(f"two PUTs with their bodies in one segment got {first} and {second}, "
                             "expected OK 3 and OK 2: a body's end is where the next request begins")
        sock.sendall(b"PUT 4\nwxyz")
        if lines.line("the reply to the PUT after").split()[:2] != [b"OK", b"4"]:
            raise CaseFailed("the PUT after a pipelined pair was not answered OK 4")


# ---- split


def _pause(size: Size, rng: random.Random) -> None:
    time.sleep(rng.uniform(0, 0.02) if size.jitter else size.byte_pause)


def top_split_everywhere(port, size):
    request, rng = b"TOP 3\r\n", random.Random(7)
    with connect(port, size) as sock:
        lines = Lines(sock)
        for cut in range(1, len(request)):
            sock.sendall(request[:cut])
            time.sleep(max(0.02, size.byte_pause))
            _pause(size, rng)
            sock.sendall(request[cut:])
            lines.top(3, f"TOP 3 sent in two segments cut after byte {cut}")


def sink_split_everywhere(port, size):
    request, rng = b"PUT 5\nhello", random.Random(8)
    with connect(port, size) as sock:
        lines = Lines(sock)
        for cut in range(1, len(request)):
            sock.sendall(request[:cut])
            time.sleep(0.02)
            _pause(size, rng)
            sock.sendall(request[cut:])
            reply = lines.line(f"the reply to PUT 5 cut after byte {cut}").split()
            if reply[:2] != [b"OK", b"5"]:
                raise CaseFailed(f"PUT 5 + body cut after byte {cut} got {b' '.join(reply)!r}, expected OK 5")


def one_byte_segments(port, size):
    rng = random.Random(9)
    with connect(port, size) as sock:
        lines = Lines(sock)
        for byte in b"TOP 2\nTOP 6\n":
            sock.sendall(bytes([byte]))
            _pause(size, rng)
        lines.top(2, "TOP 2 sent a byte per segment")
        lines.top(6, "TOP 6 sent a byte per segment, after it")


# ---- slow reader


def echo_slow_reader(port, size):
    with connect(port, size, small_buffers=True) as sock:
        kernel = kernel_buffering(sock)
        payload = os.urandom(kernel + size.echo_bytes)
        before, got = send_while_reading(sock, payload, size.timeout)
    if got != payload:
        raise CaseFailed(f"sent {len(payload):,} bytes to echo, reading none until the server stopped taking "
                         f"them (after {before:,}), then read while sending the rest: "
                         + echo_difference(payload, got))
    if before >= len(payload):
        raise CaseFailed(f"the server took all {len(payload):,} bytes from a client that read none, "
                         f"{size.echo_bytes:,} more than the kernel's buffers can hold ({kernel:,}): its "
                         "output has no bound (session_read_buf offers 0 bytes when the output is full; "
                         "stop reading that client until it drains)")


def top_slow_reader(port, size):
    with connect(port, size, small_buffers=True) as sock:
        sock.sendall(b"TOP 1000\n" * size.top_requests)
        time.sleep(0.5)  # the server fills its output, stops reading, and waits for us
        lines = Lines(sock)
        for i in range(size.top_requests):
            rows = 0
            while (line := lines.line(f"reply {i + 1} of {size.top_requests} (TOP 1000, read late)")) != b"END":
                words = line.split(b" ", 3)
                if len(words) != 4 or not all(w.isdigit() for w in words[:3]):
                    raise CaseFailed(f"reply {i + 1} of {size.top_requests}, read late: {line[:80]!r} is not a TOP "
                                     "row: bytes of the replies were lost or mixed when the client was slow")
                rows += 1
            if rows == 0:
                raise CaseFailed(f"reply {i + 1}: END with no rows")
        sock.sendall(b"TOP 2\n")
        lines.top(2, "a TOP 2 after all the late replies")


# ---- resets


def _served_after(port, size, what):
    with connect(port, size) as other:
        other.sendall(b"TOP 2\n")
        Lines(other).top(2, f"a new client's TOP 2 after {what}")


def top_reset_with_output_queued(port, size):
    for _ in range(size.resets):
        sock = connect(port, size)
        sock.sendall(b"TOP 1000\n" * 40)
        time.sleep(0.1)
        reset(sock)
    _served_after(port, size, "clients reset with megabytes of replies queued")


def echo_reset_with_output_queued(port, size):
    for _ in range(size.resets):
        sock = connect(port, size)
        sock.sendall(os.urandom(200_000))
        time.sleep(0.05)
        reset(sock)
    with connect(port, size) as other:
        other.sendall(b"still here")
        if read_exactly(other, 10, "a new client's echo after the resets") != b"still here":
            raise CaseFailed("a new client's echo came back wrong after the resets")


def sink_reset_mid_body(port, size):
    for _ in range(size.resets):
        sock = connect(port, size)
        sock.sendall(b"PUT 1000000\n" + b"x" * 5000)
        time.sleep(0.05)
        reset(sock)
    with connect(port, size) as other:
        other.sendall(b"PUT 3\nabc")
        reply = Lines(other).line("a new client's PUT 3 after the resets").split()
        if reply[:2] != [b"OK", b"3"]:
            raise CaseFailed(f"a new client's PUT 3 after the resets got {b' '.join(reply)!r}")


# ---- many clients


def many_clients_behind_a_silent_one(port, size):
    """A silent client connects first; then size.clients clients at once, each sending its
    requests one at a time and reading each reply.  A server may serve them in any order,
    some at a time (a pool), but the silent one must not stop it: a client fails when the
    server has sent nothing to any client for size.timeout (stuck), or when the case's
    4 x size.timeout are over (one starved).  A client waiting its turn behind the others
    while the server answers them is not failed: on a busy machine the reference server's
    100 x 3 /proc scans can take longer than one timeout."""
    problems = []
    progress = Progress()

    def client(number):
        try:
            with connect(port, size) as sock:
                lines = Lines(sock, progress)
                for exchange in range(size.exchanges):
                    k = 1 + (number + exchange) % 3
                    sock.sendall(f"TOP {k}\n".encode())
                    lines.top(k, f"client {number + 1}, request {exchange + 1}")
        except (OSError, CaseFailed) as failure:
            problems.append(said_by(failure))

    with connect(port, size):  # the silent client, connected first and for the whole case
        threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(size.clients)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 4 * size.timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    if problems or any(thread.is_alive() for thread in threads):
        stuck = sum(thread.is_alive() for thread in threads)
        raise CaseFailed(f"{len(problems) + stuck} of {size.clients} clients (connected after a silent one) "
                         f"were not served" + (f", e.g. {problems[0]}" if problems else
                                               f": {stuck} still waiting after {4 * size.timeout:g} s"))


def many_clients_echo_at_once(port, size):
    """Up to 64 threads, each echoing its own bytes at the same moment."""
    problems, count = [], min(size.clients, 64)
    start = threading.Barrier(count)

    def client(number):
        try:
            payload = f"client {number} ".encode() * 200
            with connect(port, size) as sock:
                try:
                    start.wait(timeout=size.timeout)
                except threading.BrokenBarrierError:
                    pass
                sock.sendall(payload)
                got = read_exactly(sock, len(payload), f"client {number}'s echo")
                if got != payload:
                    problems.append(f"client {number}: " + echo_difference(payload, got))
        except (OSError, CaseFailed) as failure:
            problems.append(f"client {number}: {said_by(failure)}")

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(4 * size.timeout)
    if problems:
        raise CaseFailed(f"{len(problems)} of {count} clients echoing at once failed, e.g. {problems[0]}")


# ---- out of descriptors


def sheds_when_out_of_descriptors(port, size, server):
    """The server may hold FD_LIMIT descriptors.  Idle connections beyond that fill every
    one, and five new clients ask TOP 1.  Each may be answered, refused (ERR) or closed; or
    left in the kernel's accept queue, if the server waits for a descriptor without
    spinning (a bounded design stops accepting).  accept() failing with EMFILE leaves the
    connection queued, so a loop that just tries again spins at 100% CPU: that fails (an
    io_uring accept re-submitted at once after -EMFILE spins the same way).
    Once the idle connections go, a new client must be served."""
    idle, outcomes = [], []
    try:
        for _ in range(FD_LIMIT + size.idle_over_limit):
            idle.append(connect(port, size))
        time.sleep(0.2)
        with SpinProbe() as probe:
            cpu_before, started = server.cpu_s(), time.monotonic()
            new = [connect(port, size) for _ in range(5)]
            for sock in new:
                sock.sendall(b"TOP 1\n")
            waiting, deadline = list(new), time.monotonic() + 2.0
            while waiting and time.monotonic() < deadline:
                for sock in select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))[0]:
                    try:
                        reply = sock.recv(64)
                        outcomes.append("closed" if not reply else "refused" if reply.startswith(b"ERR")
                                        else "answered")
                    except ConnectionResetError:
                        outcomes.append("closed")
                    waiting.remove(sock)
            outcomes += ["left waiting"] * len(waiting)
            cpu_after, elapsed = server.cpu_s(), time.monotonic() - started
        for sock in new:
            sock.close()
    finally:
        for sock in idle:
            sock.close()
    # Only a server that leaves clients queued can spin on them (one that shed or answered them
    # in no time used no CPU in no time, which is no verdict).
    spun = None not in (cpu_before, cpu_after) and spins(cpu_after - cpu_before, probe.got)
    if "left waiting" in outcomes and spun:
        raise CaseFailed(f"with every descriptor in use, the server used {cpu_after - cpu_before:.1f} s of CPU in "
                         f"{elapsed:.1f} s while 5 new clients waited (outcomes: {outcomes}), where a process "
                         f"that only spun beside it got {probe.got:.1f} s: it spins. accept() "
                         "fails with EMFILE and leaves the connection queued, so the listener stays ready and the "
                         "loop calls accept() again at once (or re-submits an io_uring accept that completed "
                         "with -EMFILE)")
    if server.died():
        raise CaseFailed("the server died when it ran out of descriptors")
    time.sleep(0.2)
    deadline = time.monotonic() + size.timeout
    while True:
        try:
            _served_after(port, size, f"the idle clients closed (while full, the new clients were: {outcomes})")
            return
        except (OSError, CaseFailed) as failure:
            if time.monotonic() > deadline:
                raise CaseFailed(f"after the idle clients closed, a new client was not served: {failure}") from None
            time.sleep(0.2)


# ---- SIGTERM (run by run_case itself: it needs the server)


def sigterm_with_clients(port, size):
    """Clients connected (one mid-request); the caller sends SIGTERM and checks the exit."""
    socks = [connect(port, size) for _ in range(5)]
    socks[0].sendall(b"TOP 1\n")
    Lines(socks[0]).top(1, "a TOP 1 before SIGTERM")
    socks[1].sendall(b"TOP")
    return socks


CASES = [
    Case("top: TOP k, TOP and CRLF", "protocol", "top", top_answers_k_rows,
         "a request is a line: find its end (LF or CRLF), answer it, keep the rest for the next one"),
    Case("echo: every byte back, in order", "protocol", "echo", echo_returns_every_byte,
         "echo writes back exactly what it read: check every read's count and every write's"),
    Case("sink: PUT n, then n bytes", "protocol", "sink", sink_counts_bytes,
         "a PUT's body is the n bytes after its line, however many reads they take"),
    Case("bad request: ERR, then close, others served", "protocol", "top", bad_request_gets_err,
         "after session_fail the session is done once its ERR is written: close that connection, only that one"),
    Case("top: pipelined, then another", "pipelining", "top", top_pipelined,
         "one read may carry several requests: consume them all (the session does), then write every reply"),
    Case("echo: pipelined, then more", "pipelining", "echo", echo_pipelined,
         "one read may carry several lines: pass all of them on, write everything the session offers"),
    Case("sink: two PUTs in one segment", "pipelining", "sink", sink_pipelined,
         "one read may hold a body's end and the next request: hand the session every byte read"),
    Case("top: cut at every byte", "split", "top", top_split_everywhere,
         "a request may arrive in pieces: never treat one read as one request; keep reading until the line ends"),
    Case("sink: cut at every byte", "split", "sink", sink_split_everywhere,
         "a request line and its body may arrive in any pieces: report every read to the session"),
    Case("top: one byte per segment", "split", "top", one_byte_segments,
         "each read may carry one byte: the session buffers the partial line; do not drop or reset it"),
    Case("echo: reads nothing until the output is full", "slow_reader", "echo", echo_slow_reader,
         "write() on a non-blocking socket may write fewer bytes than asked, or none (EAGAIN): report what it "
         "wrote with session_did_write(n), keep the rest, wait until writable; stop reading while "
         "session_read_buf offers 0 bytes"),
    Case("top: 1000-row replies read late", "slow_reader", "top", top_slow_reader,
         "replies bigger than the socket buffer go out in several writes: write from where the last one "
         "stopped, and only when the socket is writable"),
    Case("top: reset with replies queued", "resets", "top", top_reset_with_output_queued,
         "a write may fail with EPIPE or ECONNRESET, a read with ECONNRESET: close that connection and free "
         "its session; never exit (SIGPIPE is ignored for you)"),
    Case("echo: reset with bytes queued", "resets", "echo", echo_reset_with_output_queued,
         "on any error of one connection close only it and free what it held"),
    Case("sink: reset mid-body", "resets", "sink", sink_reset_mid_body,
         "a client may vanish mid-request: close and free the connection, keep serving"),
    Case("many clients, behind a silent one", "many_clients", "top", many_clients_behind_a_silent_one,
         "no client may hold the server: wait for readiness on every connection at once, or give each its own "
         "thread (or worker), and never block on one client's read or write"),
    Case("many clients echoing at once", "many_clients", "echo", many_clients_echo_at_once,
         "every connection needs its own state (session, buffers): nothing shared between clients unlocked"),
    Case("EMFILE: no spinning; serving after", "out_of_descriptors", "top", sheds_when_out_of_descriptors,
         "accept with server_accept(): when out of descriptors it accepts and closes the connection (the spare "
         "descriptor trick) instead of leaving it queued. With io_uring, an accept that completes with -EMFILE "
         "(a multishot one then ends: no IORING_CQE_F_MORE) must not be submitted again at once: call "
         "server_accept(listen_fd, true) on the non-blocking listener to shed, then re-arm (uring.c). And close "
         "every descriptor you no longer need",
         server="fd_limit"),
    Case("SIGTERM with clients connected", "sigterm", "top", sigterm_with_clients,
         "let server_main's handler end the process (exit 0), or watch server_stop_fd() in every loop and "
         "return from serve() promptly; never block SIGTERM", server="sigterm"),
]
SANITIZED_GROUPS = ("protocol", "pipelining", "split", "resets")


