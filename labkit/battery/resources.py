"""The battery's resource cases: what a server uses, not only what it answers.

A server can answer every request right and still be what takes a machine down: a loop
that never sleeps burns a CPU while its clients think; a descriptor or a session kept
for every closed connection runs the process out of descriptors or memory after a day
of traffic.  None of that changes a byte on the wire, so the protocol cases cannot see
it.  These cases look at the server from outside, in /proc (through psutil), over its
whole process tree (workers, and the children of a fork-per-connection design):

- idle: clients connected and silent; the tree's CPU time over a second or more;
- back-pressure: an echo client that sends and reads nothing until the server stops taking
  its input (its output to that client full), then half-closes (its EOF queued behind the
  input the server does not take, so the server does not see it) and still reads nothing;
  the tree's CPU time over a second or more, at each of the two waits;
- descriptors: connections come and go through every kind of close (KINDS), then the
  tree holds as many descriptors as before them, for each service;
- memory: rounds of the same traffic; the tree's resident memory grows in none of them.

Invariants: every measurement is taken after a warm-up of the same traffic (a design
may open a descriptor or grow a pool at its first connections, which is no leak), and
compared with a bound stated here with its reason; every wait is bounded (Size.timeout).
The descriptor cases run under ASan and UBSan too (SANITIZED), so each worker serves
many connections of every kind there, and a use after free on a worker's later
connections is reported by the sanitizer."""

from __future__ import annotations

import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

import psutil

from .. import kernel_view
from .cases import Case
from .client import CaseFailed, Lines, connect, read_exactly, reset, said_by

# Near zero, for a server whose clients are all silent: it should wait in the kernel
# (epoll_wait, poll, accept, read) until one speaks.  A timer it keeps (an idle-timeout
# sweep once a second) costs microseconds a wake-up, so 5% of one CPU -- 50 ms of work
# a second, thousands of wake-ups -- is far more than any timer needs, and far less than
# a loop that never sleeps (100% of a CPU, or the share a busy machine leaves it).
IDLE_CPU_SHARE = 0.05
# Resident memory may move a little between two rounds of the same traffic (a page of
# malloc's bookkeeping, a thread stack touched deeper); a session kept per connection
# (its input buffer alone is a page or more once used) grows it by megabytes.
MEMORY_GROWTH_BYTES = 1 << 20
WARM_UP_SHARE = 0.25  # the warm-up round: this share of Size.churn connections
SETTLE_S = 2.0        # descriptors whose count has not moved for this long are kept, not closing


class Usage:
    """What the server's process tree uses, read from /proc each time it is asked."""

    def __init__(self, pid: int):
        self.root = psutil.Process(pid)

    def _each(self, read: Callable[[psutil.Process], object]) -> list:
        """read(process) for the server and every descendant still there to be read (a
        child may end between the listing and the reading)."""
        try:
            tree = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            return []
        values = []
        for proc in tree:
            try:
                values.append(read(proc))
            except (psutil.Error, OSError):
                pass
        return values

    def cpu_s(self) -> float:
        """CPU seconds of the tree, every thread, and the children it has already reaped."""
        def used(proc):
            t = proc.cpu_times()
            return t.user + t.system + t.children_user + t.children_system
        return sum(self._each(used))

    def descriptors(self) -> list[str]:
        """What each open descriptor of the tree refers to: "socket:[123]", a path, ..."""
        return [target for targets in self._each(lambda proc: _fd_targets(proc.pid)) for target in targets]

    def rss(self) -> float:
        """Resident bytes of the tree (kernel_view's reading, checked against `ps` there)."""
        return kernel_view.tree_rss(self.root.pid)


def _fd_targets(pid: int) -> list[str]:
    import os

    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass  # closed while we listed
    return targets


# ---- the traffic: one service's requests, and every kind of close


@dataclass(frozen=True)
class Traffic:
    request: bytes          # one whole request
    partial: bytes          # a request cut short
    flood: bytes            # requests whose replies (or a body) the connection is reset in the middle of
    bad: bytes | None       # a request that gets ERR (echo has none)
    answer: Callable        # answer(sock, what): read the reply to `request`, or raise CaseFailed


def _echoed(sock: socket.socket, what: str) -> None:
    if read_exactly(sock, 6, what) != b"hello\n":
        raise CaseFailed(f"{what}: the echo of b'hello\\n' came back different")


def _ok(sock: socket.socket, what: str) -> None:
    reply = Lines(sock).line(what).split()
    if reply[:2] != [b"OK", b"5"]:
        raise CaseFailed(f"{what}: got {b' '.join(reply)!r}, expected OK 5")


TRAFFIC = {
    "top": Traffic(b"TOP 2\n", b"TOP", b"TOP 1000\n" * 20, b"HELLO\n", lambda sock, what: Lines(sock).top(2, what)),
    "echo": Traffic(b"hello\n", b"hel", b"x" * 200_000, None, _echoed),
    "sink": Traffic(b"PUT 5\nhello", b"PUT 100\nabc", b"PUT 1000000\n" + b"x" * 5000, b"PUT x\n", _ok),
}


# The memory case's traffic: echo, each request a whole input buffer (16 KiB, SESSION_IN_CAP),
# so a session kept holds tens of KiB of touched memory (its input, and its output grown to
# match), not a page: a leak on one path of seven (say, after resets only) still grows the
# server by megabytes a round.
_BLOCK = bytes(range(256)) * 64


def _echoed_block(sock: socket.socket, what: str) -> None:
    if read_exactly(sock, len(_BLOCK), what) != _BLOCK:
        raise CaseFailed(f"{what}: the echo of {len(_BLOCK):,} bytes came back different")


MEMORY_TRAFFIC = Traffic(_BLOCK, _BLOCK[:8192], b"x" * 200_000, None, _echoed_block)


def _closed_by_the_server(sock: socket.socket, after: str) -> None:
    """The server must close once it is done (after the client's EOF, after an ERR)."""
    try:
        while sock.recv(65536):
            pass
    except (socket.timeout, TimeoutError):
        raise CaseFailed(f"{after}, the server kept the connection open for {sock.gettimeout():g} s: once "
                         "session_done() says so, close it (and free its session)") from None
    except ConnectionResetError:
        pass  # closed, with unread bytes of ours: a reset


def _answered(sock, traffic):
    sock.sendall(traffic.request)
    traffic.answer(sock, "a reply, before the client closed")


def _half_closed(sock, traffic):
    sock.sendall(traffic.request)
    sock.shutdown(socket.SHUT_WR)
    traffic.answer(sock, "the reply to a request followed by the client's EOF")
    _closed_by_the_server(sock, "after the client's EOF and the reply")


def _closed_mid_request(sock, traffic):
    sock.sendall(traffic.partial)


def _reset_mid_traffic(sock, traffic):
    sock.sendall(traffic.flood)
    time.sleep(0.005)  # the server has begun on it


def _bad_request(sock, traffic):
    sock.sendall(traffic.bad)
    reply = Lines(sock).line("the reply to a bad request")
    if not reply.startswith(b"ERR "):
        raise CaseFailed(f"a bad request got {reply[:80]!r}, expected a line starting ERR")
    _closed_by_the_server(sock, "after its ERR")


# name: (what the client does, whether it resets at the end)
KINDS: dict[str, tuple[Callable, bool]] = {
    "answered, then closed": (_answered, False),
    "EOF after a request": (_half_closed, False),
    "closed mid-request": (_closed_mid_request, False),
    "reset mid-traffic": (_reset_mid_traffic, True),
    "bad request (ERR)": (_bad_request, False),
    "closed at once": (lambda sock, traffic: None, False),
    "reset at once": (lambda sock, traffic: None, True),
}


def kinds_for(traffic: Traffic) -> list[str]:
    return [name for name in KINDS if name != "bad request (ERR)" or traffic.bad is not None]


def come_and_go(port: int, size, traffic: Traffic, count: int) -> None:
    """`count` connections, size.churn_threads at a time, each one of kinds_for(traffic) in
    a shuffled cycle (so each worker of a round-robin design gets every kind): every one
    must behave as its kind says, or the case fails naming the kind."""
    kinds = kinds_for(traffic)
    problems: list[str] = []

    def client(number: int, share: int) -> None:
        rng = random.Random(number)
        order: list[str] = []
        for _ in range(share):
            if not order:
                order = rng.sample(kinds, len(kinds))
            kind = order.pop()
            run, resets = KINDS[kind]
            try:
                sock = connect(port, size)
                try:
                    run(sock, traffic)
                finally:
                    reset(sock) if resets else sock.close()
            except (OSError, CaseFailed) as failure:
                problems.append(f"{kind}: {said_by(failure)}")
                return

    threads = [threading.Thread(target=client, args=(n, count // size.churn_threads), daemon=True)
               for n in range(size.churn_threads)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 4 * size.timeout + count * 0.01
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if problems or any(thread.is_alive() for thread in threads):
        raise CaseFailed(f"{len(problems)} of {size.churn_threads} clients making {count:,} connections "
                         f"({', '.join(kinds)}) stopped: " + ("; ".join(problems[:3]) if problems else
                                                              "still waiting at the deadline"))


def _settled(usage: Usage, most: int, timeout: float) -> list[str]:
    """The tree's descriptors once there are at most `most`, or once their count has not
    moved for SETTLE_S (what is held then is kept), or at `timeout`: a server closes a
    connection when it next hears of it, a moment after the client's close."""
    deadline = time.monotonic() + timeout
    held = usage.descriptors()
    still_since = time.monotonic()
    while len(held) > most and time.monotonic() < min(deadline, still_since + SETTLE_S):
        time.sleep(0.05)
        now = usage.descriptors()
        if len(now) != len(held):
            still_since = time.monotonic()
        held = now
    return held


def _warm_up(port, size, traffic: Traffic, usage: Usage, count: int | None = None) -> list[str]:
    """`count` connections (a share of size.churn: WARM_UP_SHARE) before anything is
    measured, then the tree's descriptors: a design may open a descriptor or grow a pool at
    its first connections, which is no leak."""
    come_and_go(port, size, traffic, count or max(size.churn_threads, int(size.churn * WARM_UP_SHARE)))
    time.sleep(0.2)
    return usage.descriptors()


# ---- the cases


def idle_clients_use_no_cpu(port, size, server):
    """One client makes an exchange and stays, then the rest connect and say nothing (one
    of them half a request): over size.idle_seconds the server's tree may use at most
    IDLE_CPU_SHARE of one CPU."""
    usage = Usage(server.pid)
    socks = []
    try:
        first = connect(port, size)
        socks.append(first)
        first.sendall(b"TOP 1\n")
        Lines(first).top(1, "the reply to TOP 1 (then the client stays, silent)")
        for number in range(size.idle_clients - 1):
            socks.append(connect(port, size))
            if number == 0:
                socks[-1].sendall(b"TOP")
        time.sleep(0.3)  # accepted and handed over
        before, started = usage.cpu_s(), time.monotonic()
        time.sleep(size.idle_seconds)
        used, elapsed = usage.cpu_s() - before, time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
    if used > IDLE_CPU_SHARE * elapsed:
        raise CaseFailed(f"with {size.idle_clients} clients connected and silent (one after an exchange, one "
                         f"halfway through a request), the server used {used:.2f} s of CPU in {elapsed:.1f} s "
                         f"({100 * used / elapsed:.0f}% of one CPU; a server that waits in the kernel uses "
                         f"under {100 * IDLE_CPU_SHARE:.0f}%): it never sleeps while nothing happens")
    return (f"{used:.2f} s of CPU in {elapsed:.1f} s with {size.idle_clients} silent clients "
            f"({100 * used / elapsed:.0f}% of one CPU; read in the kernel's 10 ms ticks)")


STALLED_S = 0.5  # back-pressure: no byte taken for this long, the server has stopped reading


def _fill(sock: socket.socket, timeout: float) -> int:
    """Send on the non-blocking `sock` until the server has taken nothing for STALLED_S (its
    input and the kernel's buffers both ways full); the bytes sent.  A server that takes
    input for `timeout` without end keeps no bound on its output: that fails."""
    block, sent, stalled = b"x" * 65536, 0, None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            sent += sock.send(block)
            stalled = None
        except BlockingIOError:
            stalled = stalled or time.monotonic()
            if time.monotonic() - stalled >= STALLED_S:
                return sent
            time.sleep(0.01)
    raise CaseFailed(f"a client that reads nothing sent {sent:,} bytes in {timeout:g} s and the server took them "
                     "all: it keeps no bound on what it holds for a client (its output, or its input)")


def waits_under_back_pressure(port, size, server):
    """An echo client sends and never reads: once the server stops taking its input (its
    output to the client is full, and the kernel's buffers both ways), its tree may use at
    most IDLE_CPU_SHARE of one CPU over size.idle_seconds; then again after the client
    half-closes (its EOF queued in the client's own send queue, behind what the server does not
    take: the server does not see it)."""
    usage = Usage(server.pid)
    sock = connect(port, size)
    waits = []
    try:
        sock.setblocking(False)
        sent = _fill(sock, 4 * size.timeout)
        for when in ("its input full", "its half-close queued behind that input"):
            if waits:
                sock.shutdown(socket.SHUT_WR)
                time.sleep(0.2)
            before, started = usage.cpu_s(), time.monotonic()
            time.sleep(size.idle_seconds)
            used, elapsed = usage.cpu_s() - before, time.monotonic() - started
            if used > IDLE_CPU_SHARE * elapsed:
                raise CaseFailed(f"an echo client sent {sent:,} bytes and read nothing; with {when}, the server "
                                 f"used {used:.2f} s of CPU in {elapsed:.1f} s ({100 * used / elapsed:.0f}% of one "
                                 f"CPU; a server that waits in the kernel uses under {100 * IDLE_CPU_SHARE:.0f}%): "
                                 "it keeps asking for what it cannot take or cannot send")
            waits.append(f"{used:.2f} s of CPU in {elapsed:.1f} s with {when}")
    finally:
        sock.close()
    return f"a client that read nothing ({sent:,} bytes sent): " + "; ".join(waits)


def descriptors_come_back(service: str):
    def run(port, size, server):
        usage = Usage(server.pid)
        before = _warm_up(port, size, TRAFFIC[service], usage)
        come_and_go(port, size, TRAFFIC[service], size.churn)
        after = _settled(usage, len(before), size.timeout)
        if len(after) > len(before):
            extra = _counted(after, before)
            raise CaseFailed(f"after {size.churn:,} {service} connections came and went "
                             f"({', '.join(kinds_for(TRAFFIC[service]))}), the server holds {len(after)} descriptors, "
                             f"{len(after) - len(before)} more than before them ({len(before)}); the extra ones "
                             f"in /proc/{server.pid}/fd (and its children's): {extra}")
        return f"{len(after)} descriptors after {size.churn:,} connections came and went, {len(before)} before them"
    run.__name__ = f"{service}_descriptors_come_back"
    return run


def _counted(after: list[str], before: list[str]) -> str:
    """What the extra descriptors are, counted by kind: "socket x 400, anon_inode:[eventpoll] x 2"."""
    from collections import Counter

    def kind(target: str) -> str:
        return target.split(":[")[0] if target.startswith("socket:[") else target

    extra = Counter(map(kind, after)) - Counter(map(kind, before))
    return ", ".join(f"{name} x {count}" for name, count in extra.most_common(4))


def memory_comes_back(port, size, server):
    """A warm-up round of size.memory_churn echo connections (MEMORY_TRAFFIC), then two more
    rounds of the same: a server that keeps something of each connection grows by more than
    MEMORY_GROWTH_BYTES in each round.  One round alone could grow once where the server, slowed by a busy machine,
    held more connections at once than in the warm-up (freed memory stays in the process);
    that peak is reused in the next round, and a leak is not."""
    usage = Usage(server.pid)
    held = _warm_up(port, size, MEMORY_TRAFFIC, usage, size.memory_churn)
    grown = []
    for _ in range(2):
        before = usage.rss()
        come_and_go(port, size, MEMORY_TRAFFIC, size.memory_churn)
        _settled(usage, len(held), size.timeout)
        grown.append(usage.rss() - before)
    if min(grown) > MEMORY_GROWTH_BYTES:
        raise CaseFailed(f"in each of two rounds of {size.memory_churn:,} echo connections coming and going "
                         f"({', '.join(kinds_for(MEMORY_TRAFFIC))}; {len(_BLOCK) >> 10} KiB echoed where a "
                         "request was sent), after a warm-up round of the same, the server's resident memory (its "
                         f"processes' RSS) grew: by {grown[0] / 2**20:.1f} MiB, then by {grown[1] / 2**20:.1f} MiB "
                         f"({sum(grown) / (2 * size.memory_churn):,.0f} bytes a connection; more than "
                         f"{MEMORY_GROWTH_BYTES >> 20} MiB a round is no noise): something of each closed connection "
                         "is kept")
    return (f"resident memory {before / 2**20:.1f} MiB; each round of {size.memory_churn:,} connections moved it "
            f"by {grown[0] / 2**10:+.0f} KiB, then {grown[1] / 2**10:+.0f} KiB (in 4 KiB pages)")


_DESCRIPTORS_FIX = (
    "close(fd) on every path that ends a connection: after the client's close or EOF once session_done() "
    "says so, on EOF mid-request, on a reset (ECONNRESET, EPIPE, EPOLLERR/EPOLLHUP), after an ERR; and close "
    "what else you opened for it (a pipe, an eventfd, a forked child's copy of the socket in the parent). "
    "Built with ASan, a heap-use-after-free here is a connection's memory used after it was freed: a pointer "
    "a worker kept, or a later event of a connection closed earlier in the same batch")

CASES = [
    Case("idle clients: no CPU while they say nothing", "resources", "top", idle_clients_use_no_cpu,
         "wait in the kernel until something happens: epoll_wait, poll or select with no timeout (-1), or your "
         "nearest timer's, never 0; a blocking accept or read. Watch EPOLLOUT (POLLOUT) only while output is "
         "pending: a connected socket is writable almost always, so a level-triggered loop that always asks "
         "wakes at once, for ever. After EOF stop watching EPOLLIN (a socket at EOF stays readable)",
         server="watched"),
    Case("echo: no CPU while a client that reads nothing holds the server back", "resources", "echo",
         waits_under_back_pressure,
         "watch EPOLLIN (POLLIN) only while the session takes input (session_read_buf offers room): with the "
         "input full a level-triggered loop that still asks is woken at once, for ever, to read nothing; after "
         "EOF stop watching EPOLLIN; watch EPOLLOUT only while output is pending, and then wait for it",
         server="watched"),
    *(Case(f"{service}: descriptors back after connections come and go", "resources", service,
           descriptors_come_back(service), _DESCRIPTORS_FIX, server="watched") for service in TRAFFIC),
    Case("memory back after connections come and go", "resources", "echo", memory_comes_back,
         "session_free() and free() everything a connection held, on every path that closes it (the same "
         "paths as close(fd)); a list or table of connections drops its entry when the connection ends",
         server="watched"),
]
# Run under ASan and UBSan too: each worker serves many connections, through every kind of close.
SANITIZED = tuple(case.name for case in CASES if "descriptors back" in case.name)
