"""Seed 002's failure cases, each provoked on purpose: what the client saw, what the
server said, why, and proof that the server still serves afterwards.

    case = failures.fewer_clients("threaded")    # a FailureCase; a notebook shows it as a card
    case.client_errors                            # {"ECONNREFUSED": 20}: errno names, as loadgen counts them

The seed's report lists them under "Test cases covered" and "Issues Known":
connection refused, a server waiting for ever for clients that never come, a
second client batch beyond what the server expects, too many open files,
connection reset by peer when the server closes, connection timed out.  Each
function here runs the lab's own servers and load generator (the reset case
uses a plain Python socket, so what the kernel says is not filtered by the
lab's client) and returns a FailureCase; every process it starts is stopped
before it returns, whatever happens.
"""

from __future__ import annotations

import errno
import html
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field

from . import bench, kernel_view, procs, what_breaks
from .errors import LabError
from .procs import LoadSpec, Pinning, ServerSpec

PROBE_BYTES = 1024 * 1024  # the upload that proves a server still serves


@dataclass
class FailureCase:
    """One provoked failure: what was done, what each side saw, and why."""

    title: str
    provoked: str                    # what the cell did, in a sentence
    client_errors: dict = field(default_factory=dict)  # errno name -> count (loadgen's or the socket's)
    client_said: str = ""            # the client's own words (loadgen's summary line, or what recv gave)
    server_said: str = ""            # the server's stdout reports and stderr warnings
    why: str = ""
    still_serves: str = ""           # the reply to a fresh upload afterwards, or why there was none
    details: dict = field(default_factory=dict)

    def _repr_html_(self) -> str:
        def block(label: str, text: str, prose: bool = False) -> str:
            """Prose wraps at words; what a program printed keeps its lines."""
            if not text:
                return ""
            body = (f"<div style='margin:2px 0'>{html.escape(text)}</div>" if prose else
                    f"<pre style='margin:2px 0;white-space:pre-wrap;word-break:normal'>{html.escape(text)}</pre>")
            return f"<div style='margin:4px 0'><b>{label}</b>{body}</div>"

        errors = ", ".join(f"{name} x {count:,}" for name, count in self.client_errors.items()) or "none"
        seen = f"errors: {errors}" + ("\n" + self.client_said if self.client_said else "")
        return (f"<div style='border:1px solid #ccc;border-left:4px solid #D55E00;padding:6px 10px;margin:6px 0'>"
                f"<h4 style='margin:2px 0'>{html.escape(self.title)}</h4>"
                f"<div>{html.escape(self.provoked)}</div>"
                f"{block('the client saw', seen)}"
                f"{block('the server said', self.server_said or '(nothing)')}"
                f"{block('why', self.why, prose=True)}"
                f"{block('afterwards', self.still_serves)}</div>")

    def __str__(self) -> str:
        return "\n".join(f"{k}: {v}" for k, v in (
            ("case", self.title), ("provoked", self.provoked), ("client errors", self.client_errors),
            ("client said", self.client_said), ("server said", self.server_said), ("why", self.why),
            ("afterwards", self.still_serves)) if v != "")


# ---------------------------------------------------------------------------
# helpers


def upload_once(port: int, size: int = PROBE_BYTES, timeout: float = 10.0) -> str:
    """One upload with a plain Python socket (not the lab's client): the server's reply line."""
    body = bytes(size)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"PUT {size}\n".encode() + body)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(256)
            if not chunk:
                break
            reply += chunk
    return reply.decode("ascii", "replace").strip()


def _still_serves(server: procs.Server) -> str:
    try:
        reply = upload_once(server.port)
    except OSError as failure:
        return f"a fresh {PROBE_BYTES:,}-byte upload failed: {_errno_name(failure)}: the server does NOT serve"
    ok = reply == f"OK {PROBE_BYTES}" or reply.startswith(f"OK {PROBE_BYTES} ")
    return (f"a fresh {PROBE_BYTES:,}-byte upload got {reply!r}: "
            + ("the server still serves" if ok else "not the OK expected"))


def _errno_name(failure: OSError) -> str:
    return errno.errorcode.get(failure.errno or 0, type(failure).__name__)


def _summary_line(run: procs.ClientRun) -> str:
    lines = [line for line in run.stderr.splitlines() if line.startswith("loadgen:")]
    return lines[-1] if lines else run.stderr.strip()[-300:]


def _server_words(server: procs.Server) -> str:
    said = [line for line in server.stdout_text().splitlines() if line.strip()]
    said += [line for line in server.stderr_text().splitlines() if line.strip()]
    return "\n".join(dict.fromkeys(said))  # a warning repeated a hundred times is shown once


def _descriptors(server: procs.Server) -> int:
    """The server's open descriptors now (/proc/PID/fd)."""
    try:
        return len(os.listdir(f"/proc/{server.pid}/fd"))
    except OSError:
        return 0


def _wait_until(condition, within: float) -> bool:
    """Whether `condition()` holds within `within` seconds (asked every 20 ms)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _wait_for(server: procs.Server, text: str, within: float) -> bool:
    """Whether the server says `text` (a report on stdout, a warning on stderr) within the time."""
    return _wait_until(lambda: text in _server_words(server), within)


def _uploads(clients: int, size: int, connect_timeout: float = 5.0, timeout: float = 10.0) -> LoadSpec:
    return LoadSpec(clients, 1, "sink", {"size": size, "engine": "events", "connect-timeout": connect_timeout},
                    timeout=timeout)


def _load(load: LoadSpec, port: int, pinning: Pinning, prefix=()) -> procs.ClientRun:
    return procs.run_load(load, port, cpus=pinning.client_cpus, events=[], prefix=list(prefix))


# ---------------------------------------------------------------------------
# the cases


def no_server(clients: int = 20) -> FailureCase:
    """Clients and no server: every connect is refused at once."""
    pinning = Pinning.resolve()
    port = bench.free_port()  # free a moment ago, so nothing listens there
    run = _load(_uploads(clients, 1024), port, pinning)
    return FailureCase(
        title="1. No server",
        provoked=f"{clients} connections to port {port}, where nothing listens.",
        client_errors=run.summary["errors"], client_said=_summary_line(run),
        why=("With no listening socket on the port, the server's kernel answers each SYN with a RST, "
             "and connect() fails with ECONNREFUSED at once: no timeout, no retry. The seed's "
             "'server is up but connection refused' had the same cause: a client started before "
             "the server listened, or aimed at another port or address."),
        still_serves="(there is no server here: start one, and the same client succeeds)",
        details={"port": port})


def fewer_clients(model: str = "threaded", expect: int = 10, clients: int = 6,
                  expect_timeout: float = 2.0) -> FailureCase:
    """A server told to expect N connections that gets fewer."""
    if clients >= expect:
        raise LabError(f"clients ({clients}) must be fewer than expect ({expect}) to show this case",
                       "use e.g. expect=10, clients=6")
    pinning = Pinning.resolve()
    spec = ServerSpec(model, "sink", flags={"expect": expect, "expect-timeout": expect_timeout})
    with procs.start_server(spec, cpus=pinning.server_cpus) as server:
        run = _load(_uploads(clients, 100 * 1024), server.port, pinning)
        # The report's own line (stdout), not the warning that follows it on stderr: the two are
        # read apart, and on a busy machine the warning was read first, the report not yet.
        reported = _wait_for(server, "expect: batch 1: timed out", expect_timeout + 2)
        said = _server_words(server)
        after = _still_serves(server)
    return FailureCase(
        title="2. Fewer clients than the server expects",
        provoked=f"{model} --expect {expect} --expect-timeout {expect_timeout:g}, and only {clients} uploads.",
        client_errors=run.summary["errors"], client_said=_summary_line(run), server_said=said,
        why=("Every upload succeeded, yet the server cannot tell 'the rest are slow' from 'the rest "
             "never come'. Seed 002's servers waited for ever here and printed no time at all. A "
             "server that counts on a number of clients needs a deadline: this one reports what "
             f"arrived after {expect_timeout:g} s" + ("" if reported else " (its report did not come in time)")
             + " and goes on serving."),
        still_serves=after, details={"reported": reported})


def second_batch(model: str = "threaded", expect: int = 10, first: int = 4,
                 expect_timeout: float = 2.0) -> FailureCase:
    """A first client with `first` connections, then a second with `expect` more."""
    pinning = Pinning.resolve()
    spec = ServerSpec(model, "sink", flags={"expect": expect, "expect-timeout": expect_timeout})
    runs: dict[str, procs.ClientRun] = {}

    def client(name: str, count: int) -> None:
        runs[name] = _load(_uploads(count, 1024 * 1024), server.port, pinning)

    with procs.start_server(spec, cpus=pinning.server_cpus) as server:
        first_client = threading.Thread(target=client, args=("first", first))
        first_client.start()
        time.sleep(0.05)  # the first client's connections are in when the second starts
        client("second", expect)
        first_client.join()
        _wait_for(server, "expect: batch 2: timed out", expect_timeout + 2)
        said = _server_words(server)
        after = _still_serves(server)
    errors = {}
    for run in runs.values():
        for name, count in run.summary["errors"].items():
            errors[name] = errors.get(name, 0) + count
    return FailureCase(
        title="3. A second batch beyond what the server expects",
        provoked=(f"{model} --expect {expect}; a first client opens {first} connections, a second "
                  f"{expect} more: {first + expect} in all."),
        client_errors=errors,
        client_said="\n".join(f"{name} client: {_summary_line(run)}" for name, run in runs.items()),
        server_said=said,
        why=("The server counts connections, not clients: its first batch of "
             f"{expect} is the first client's {first} and {expect - first} of the second's; the second "
             f"client's other {first} make a batch that never fills. Seed 002's server exited after its "
             f"first {expect}, so those {first} found no server (refused, or reset if already "
             "accepted) and its time mixed two clients. Which connections land in which batch depends "
             "on timing: run it again and the split may differ."),
        still_serves=after)


def too_many_open_files(model: str = "threaded", clients: int = 200, limit: int = 100) -> FailureCase:
    """The open-file limit below the connections: the client refuses up front; the
    server, whose limit the lab lowers itself, sheds what it cannot hold."""
    if clients <= limit:
        raise LabError(f"clients ({clients}) must exceed limit ({limit}) to show this case",
                       "use e.g. clients=200, limit=100")
    pinning = Pinning.resolve()
    lowered = ["prlimit", f"--nofile={limit}:{limit}", "--"]
    try:
        _load(_uploads(clients, 1024), bench.free_port(), pinning, prefix=lowered)
        client_refusal = "(the client ran: it did not check its limit)"
    except LabError as refusal:
        client_refusal = refusal.what
    with procs.start_server(ServerSpec(model, "sink"), cpus=pinning.server_cpus, prefix=lowered) as server:
        # `limit` connections held open by this process fill the server first, whatever the
        # timing (1 KB uploads alone can finish and free their descriptors as fast as they
        # come, and the limit might never be reached); then the uploads arrive.
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(limit)]
        try:
            full = _wait_for(server, "shed a connection", within=5.0)
            run = _load(_uploads(clients - limit, 1024, timeout=5), server.port, pinning)
            said = _server_words(server) or ("(nothing: the server never reached its limit)" if not full else "")
        finally:
            for connection in held:
                connection.close()
        # A model serves the held connections' ends in its own time (aio's pool of threads, one
        # after another): ask once it has freed descriptors, or a fresh client is shed as well.
        _wait_until(lambda: _descriptors(server) < limit - 8, within=5.0)
        after = _still_serves(server)
    return FailureCase(
        title="4. Too many open files",
        provoked=(f"(a) the load generator with its open-file limit lowered to {limit} (prlimit), asked for "
                  f"{clients} connections; (b) the {model} server with its limit lowered to {limit}: "
                  f"{limit} connections held open and silent by the notebook, then {clients - limit} uploads."),
        client_errors=run.summary["errors"],
        client_said=f"(a) {client_refusal}\n(b) {_summary_line(run)}",
        server_said=said,
        why=("Each connection is a file descriptor, on both sides, and RLIMIT_NOFILE caps them per "
             "process. The seed's Python client hit EMFILE mid-run, so some uploads never started and "
             "the server waited for them for ever. The lab's client counts first and refuses with the "
             "number that fits. A server cannot refuse in advance: past its limit accept() fails with "
             "EMFILE, and if it just retried, the waiting connection would keep the listener ready and "
             "the loop would spin. The lab's servers keep one descriptor in reserve, free it, accept, "
             "and close at once (the spare-descriptor trick of libev and libuv): the client is told "
             "immediately (its connection closes or is reset) and everyone already connected is served. "
             f"The fix is a higher limit: ulimit -n {clients + 64} (or LimitNOFILE= for a service)."),
        still_serves=after, details={"limit": limit})


def reset_on_close(model: str = "threaded", announced: int = 10, extra: int = 256 * 1024) -> FailureCase:
    """The server closes a connection with bytes unread: the client gets a reset."""
    pinning = Pinning.resolve()
    with procs.start_server(ServerSpec(model, "sink"), cpus=pinning.server_cpus) as server:
        saw = send_more_than_announced(server.port, announced, extra)
        said = _server_words(server)
        after = _still_serves(server)
    errors = {saw["error"]: 1} if saw["error"] else {}
    return FailureCase(
        title="5. Connection reset by peer",
        provoked=(f"A plain socket sends 'PUT {announced}', {announced} bytes of body, then {extra:,} more bytes "
                  "with no newline (more than it announced), and reads the reply."),
        client_errors=errors,
        client_said=(f"received {saw['received']!r} before "
                     + (f"{saw['error']} ({saw['where']})" if saw["error"] else "a clean end of file")),
        server_said=said or "(nothing: a malformed request is the client's problem, answered with ERR)",
        why=("After the body, the extra bytes look like a request line longer than 1 KiB, so the server "
             "answers ERR and closes. But unread bytes were still in its receive buffer, and closing a "
             "socket with unread data makes the kernel send RST instead of FIN (RFC 1122, 4.2.2.13). "
             "Bytes in flight are lost, the client's next recv() or send() fails with ECONNRESET instead "
             "of reading an end of file, and if the RST overtakes the reply the client never sees the "
             "ERR at all. The seed saw this after 'complete data was read': "
             "its client had sent more than the server read. The fix on the server is the lingering "
             "close: shutdown(fd, SHUT_WR) so the reply goes out with a FIN, then read and discard "
             "until the client closes (bounded in time and bytes), then close()."),
        still_serves=after, details=saw)


def send_more_than_announced(port: int, announced: int = 10, extra: int = 256 * 1024,
                             timeout: float = 5.0) -> dict:
    """Send 'PUT announced', its body, then `extra` bytes without a newline; read the reply.
    Returns what came back before the connection ended and how it ended:
    {"received": bytes, "error": "ECONNRESET" or "", "where": "recv" or "send"}."""
    received, error, where = b"", "", ""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            where = "send"
            sock.sendall(f"PUT {announced}\n".encode() + b"x" * announced + b"y" * extra)
            where = "recv"
            time.sleep(0.2)  # let the server answer and close first
            while chunk := sock.recv(4096):
                received += chunk
        except OSError as failure:
            error = _errno_name(failure)
    return {"received": received, "error": error, "where": where if error else ""}


def connect_timeout(model: str = "threaded", connect_timeout: float = 1.0, beyond: int = 200) -> FailureCase:
    """A server that does not accept (stopped with SIGSTOP) and more connections than its
    accept queue holds (min(listen()'s backlog, net.core.somaxconn) + 1): the extra connects
    time out at the load generator's own connect deadline."""
    backlog = _somaxconn()
    clients = backlog + beyond
    pinning = Pinning.resolve()
    with procs.start_server(ServerSpec(model, "sink"), cpus=pinning.server_cpus) as server:
        os.kill(server.pid, signal.SIGSTOP)
        try:
            run = _load(_uploads(clients, 1024, connect_timeout=connect_timeout, timeout=1.0),
                        server.port, pinning)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        time.sleep(0.2)
        said = _server_words(server)
        after = _still_serves(server)
    summary = run.summary
    return FailureCase(
        title="6. Connection timed out",
        provoked=(f"The {model} server stopped (SIGSTOP: it accepts nothing), and {clients:,} connections "
                  f"with a {connect_timeout:g} s connect timeout; its accept queue holds min(listen()'s "
                  f"backlog, net.core.somaxconn = {backlog:,}) + 1."),
        client_errors=summary["errors"],
        client_said=(f"{_summary_line(run)}\nconnections failed: {summary['connections_failed']:,}, "
                     f"connected then lost: {summary['connections_lost']:,}"),
        server_said=said,
        why=connect_timeout_why(connect_timeout),
        still_serves=after, details={"backlog": backlog, "clients": clients})


def connect_timeout_why(connect_timeout: float, schedule: what_breaks.SynSchedule | None = None) -> str:
    """Case 6's explanation.  The SYN schedule is this kernel's, from
    labkit.what_breaks.syn_schedule(), the function notebook 06 marks its connect times with."""
    if schedule is None:
        schedule = what_breaks.syn_schedule(kernel_view.syn_linear_timeouts(), kernel_view.syn_retries())
    return ("The kernel completes handshakes for a listening socket by itself and queues them until "
            "the server calls accept(); the queue holds min(listen()'s backlog, net.core.somaxconn) + 1 "
            "connections (sk_acceptq_is_full() tests with '>'). Once it is full the kernel drops further "
            "SYNs, and each client sends its SYN again when its retransmission timeout expires. On this "
            f"kernel {schedule.describe()}. So the ETIMEDOUT here is the load generator's own "
            f"{connect_timeout:g} s connect deadline. With net.ipv4.tcp_abort_on_overflow = 0, the "
            "default, the server's kernel also drops the final ACK of a handshake it has no room to "
            "queue: that client's connect() has already succeeded, so it believes it is connected. "
            "The connections that did get into the queue were connected, but nobody read their "
            "uploads, so they timed out waiting for a reply (the load generator's deadline again). "
            "The seed saw this 'especially on different hosts', where the server was slower to "
            "accept. A busy server, not a broken network.")


def silent_clients(model: str = "aio", silent: int = 25, timeout: float = 2.0) -> FailureCase:
    """`silent` connections that send nothing, then one upload: a server whose reads
    each hold a thread (glibc's POSIX AIO pool) has none left for it."""
    pinning = Pinning.resolve()
    with procs.start_server(ServerSpec(model, "sink"), cpus=pinning.server_cpus) as server:
        threads_before = server.thread_count()
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(silent)]
        try:
            time.sleep(0.3)  # the server accepts them and asks to read each
            threads_during = server.thread_count()
            try:
                reply = upload_once(server.port, size=1024, timeout=timeout)
                stalled, saw = False, f"the upload got {reply!r} at once"
            except TimeoutError:
                stalled, saw = True, f"the upload got no reply within {timeout:g} s"
        finally:
            for conn in held:
                conn.close()
        time.sleep(0.2)
        after = _still_serves(server)
        said = _server_words(server)
    return FailureCase(
        title=f"Beyond the seed: {silent} silent clients and the {model} server",
        provoked=(f"{silent} connections to {model} that send nothing, then one 1 KiB upload with a "
                  f"{timeout:g} s timeout; then the silent ones close."),
        client_errors={"ETIMEDOUT": 1} if stalled else {},
        client_said=f"{saw}; the server had {threads_before} thread(s) before, {threads_during} with them",
        server_said=said,
        why=("glibc implements aio_read() with a pool of threads, each doing a plain blocking read() "
             "for one request (20 at most by default, aio_init()). A client that sends nothing holds "
             "one of them in read() until it speaks, so 20 silent clients take the whole pool and every "
             "other request waits in glibc's queue: the server looks asynchronous and is not. A "
             "readiness model (select, epoll) or io_uring waits for all of them in one call instead."
             if model == "aio" else
             "A readiness or thread-per-connection model does not spend anything on a silent client "
             "but a descriptor (and, for threads, a stack): the upload is served at once."),
        still_serves=after,
        details={"stalled": stalled, "threads_before": threads_before, "threads_during": threads_during})


def _somaxconn() -> int:
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 4096


CASES = (no_server, fewer_clients, second_batch, too_many_open_files, reset_on_close, connect_timeout,
         silent_clients)
