"""Exercise 6.2 (notebook 06): the event loop's idle timeout, shed_idle() in
csrc/loop/loop.c, built into a scratch epoll server (labkit.scratch.build_with) and checked
from outside, with plain sockets:

  * a client that connects and says nothing is closed by the server between the
    timeout and the timeout plus one sweep (plus slack for a busy machine);
  * a client that talks (an echo byte every third of the timeout) is never closed;
  * (hidden) a client that sends a MiB and reads nothing, so that its output is stuck,
    is closed too: idle means nothing moved either way;
  * the server's own count, the `shed_idle=` of the line it prints as it stops, is the
    number of connections it closed.
In a students' edition the visible check's pass puts the function into csrc/loop/loop.c
(edition.adopt), and every loop model sheds with it from then on.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from .. import server_counters
from ..scratch import ScratchServer, build_with
from ..stubs.which_edition import adopt

SHED_MODEL = "epoll"
SHED_SOURCE = Path("loop") / "loop.c"
SWEEPS_PER_TIMEOUT = 4  # the loop looks for idle connections every timeout / 4 (loop.c)

_HINT = ("hint: walk the slots below l->fd_end; a slot whose session is not NULL is a connection; close it "
         "with close_conn() when now - last_active_ns >= l->idle_ns, and count it in "
         "server_counters.shed_idle")


def build_shedding_server(code: str) -> Path:
    """The epoll server built with the student's shed_idle(); its path."""
    return build_with(SHED_MODEL, SHED_SOURCE, "shed_idle", code)


def _closed_at(sock: socket.socket, began: float, until: float) -> float | None:
    """Seconds from `began` to the server's close of `sock` (end of file or a reset), or None
    if it stayed open until `until` (a monotonic time)."""
    while time.monotonic() < until:
        sock.settimeout(max(0.01, until - time.monotonic()))
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - began
        except (socket.timeout, TimeoutError):
            return None
        except ConnectionResetError:
            return time.monotonic() - began
    return None


class _Talker(threading.Thread):
    """A client that echoes one byte every `every` seconds until told to stop; what went wrong."""

    def __init__(self, port: int, every: float):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.every, self.problem, self.stopped = every, "", threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                self.sock.sendall(b"x")
                if self.sock.recv(1) != b"x":
                    self.problem = "the server closed a client that sent a byte every " \
                                   f"{self.every:.2g} s: it was not idle"
                    return
            except OSError as failure:
                self.problem = f"a client that kept talking got {type(failure).__name__}: it was not idle"
                return


def check_shed_idle(code: str, timeout_s: float = 1.0, silent: int = 1, talkers: int = 1, stuck: int = 0,
                    slack_s: float = 0.75) -> None:
    """Build the epoll server with the student's shed_idle, run it with --idle-timeout
    `timeout_s`, and check what the module's doc says: `silent` clients and `stuck` ones
    (a MiB sent, nothing read) closed on time, `talkers` left alone, the count exact."""
    binary = build_shedding_server(code)
    server = ScratchServer(binary, "epoll (your shed_idle)", "echo", args=("--idle-timeout", f"{timeout_s:g}"))
    chatting, quiet = [], []
    try:
        began = time.monotonic()
        quiet = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(silent + stuck)]
        for sock in quiet[silent:]:
            sock.setblocking(False)
            try:
                sock.send(bytes(1 << 20))  # as much as the kernel takes: the server's echo then sticks
            except BlockingIOError:
                pass
            sock.setblocking(True)
        chatting = [_Talker(server.port, timeout_s / 3) for _ in range(talkers)]
        for talker in chatting:
            talker.start()
        latest = timeout_s * (1 + 1 / SWEEPS_PER_TIMEOUT) + slack_s
        for number, sock in enumerate(quiet):
            what = "a client that sent nothing" if number < silent else "a client that read nothing back"
            at = _closed_at(sock, began, began + latest)
            assert at is not None, (f"{what} was still open {latest:.2g} s after it connected, with "
                                    f"--idle-timeout {timeout_s:g}{server.died()}\n{_HINT}")
            assert at >= 0.9 * timeout_s, (f"{what} was closed after {at:.2g} s, before the {timeout_s:g} s "
                                           f"it may stay idle\n{_HINT}")
        for talker in chatting:
            talker.stopped.set()
            talker.join(5)
            assert not talker.problem, f"{talker.problem}{server.died()}\n{_HINT}"
    finally:
        for talker in chatting:
            talker.stopped.set()
        server.stop()
        for sock in quiet + [talker.sock for talker in chatting]:
            sock.close()
    reports = server_counters.parse(server.stdout_after_stop())
    shed = sum(report.get("shed_idle", 0) for report in reports)
    assert reports and shed == silent + stuck, (
        f"the server says it shed {shed if reports else 'nothing (no counters line)'} connection(s); it closed "
        f"{silent + stuck}: add 1 to server_counters.shed_idle for each connection shed_idle() closes")
    adopt(SHED_SOURCE, "shed_idle", code)
