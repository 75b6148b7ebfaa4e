"""The wire protocol of every server model, in the normal and the sanitizer build.

Each test starts its own server (tests/serverproc.py), talks to it with an
independent Python client, and on the way out checks that SIGTERM ends the
server with status 0 within 1 s and that ASan/UBSan reported nothing.
"""

import os
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

import serverproc
from serverproc import Client

KINDS = [(model, san) for san in (False, True) for model in serverproc.MODELS]


@pytest.fixture(params=KINDS, ids=[f"{m}-san" if san else m for m, san in KINDS])
def kind(request):
    """(model, san): which binary the test drives."""
    return request.param


def start(kind, service="top", **options):
    model, san = kind
    return serverproc.running(model, service=service, san=san, **options)


def assert_ranked(rows):
    """Most CPU first; equal CPU time: lower pid first."""
    keys = [(-(utime + stime), pid) for pid, utime, stime, _ in rows]
    assert keys == sorted(keys), f"rows not ranked by utime+stime: {rows}"


def shown_name(raw: bytes) -> bytes:
    """A process name as the protocol shows it: non-printable bytes become '?'."""
    return bytes(c if 0x20 <= c < 0x7F else ord("?") for c in raw)


# ---- top ----

def test_top_default_k_is_two_ranked_rows(kind):
    with start(kind) as server, Client(server.port) as client:
        rows = client.top(b"TOP\n")
        assert len(rows) == 2
        assert all(pid > 0 and utime >= 0 and stime >= 0 and name for pid, utime, stime, name in rows)
        assert_ranked(rows)


def test_top_k_and_crlf(kind):
    with start(kind) as server, Client(server.port) as client:
        assert len(client.top(b"TOP 5\n")) == 5
        assert len(client.top(b"TOP 3\r\n")) == 3


def user_process_names() -> dict[int, bytes]:
    """pid -> name as shown, for every user-space process (kernel threads
    such as kworkers rename themselves as they work)."""
    names = {}
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if not cmdline.read():
                    continue
            with open(f"/proc/{pid}/comm", "rb") as comm:
                names[pid] = shown_name(comm.read().rstrip(b"\n"))
        except (FileNotFoundError, ProcessLookupError):
            pass  # gone already
    return names


def test_top_1000_lists_every_process_with_its_real_name(kind):
    with start(kind) as server, Client(server.port) as client:
        before = user_process_names()
        rows = client.top(b"TOP 1000\n")
        after = user_process_names()
    assert 3 <= len(rows) <= 1000
    assert_ranked(rows)
    assert len({pid for pid, *_ in rows}) == len(rows), "a process listed twice"
    assert server.proc.pid in {pid for pid, *_ in rows} and os.getpid() in {pid for pid, *_ in rows}
    # Processes that kept their name throughout (others exec'd meanwhile).
    stable = {pid: name for pid, name in before.items() if after.get(pid) == name}
    shown = {pid: name for pid, _, _, name in rows if pid in stable}
    assert len(shown) >= 3
    assert shown == {pid: stable[pid] for pid in shown}


def test_several_requests_on_one_connection_and_pipelined(kind):
    with start(kind) as server, Client(server.port) as client:
        for k in (1, 4, 2):
            assert len(client.top(f"TOP {k}\n".encode())) == k
        # Three requests in one segment: three replies, in order.
        client.send(b"TOP 1\nTOP 2\nTOP 3\n")
        for k in (1, 2, 3):
            assert len(client.top(b"")) == k


@pytest.fixture
def named_processes():
    """Two sleeping children named 'x) (y z' and 'bad\\x01name' (via PR_SET_NAME)."""
    names = [b"x) (y z", b"bad\x01name"]
    code = ("import ctypes, sys, time\n"
            "ctypes.CDLL(None).prctl(15, bytes.fromhex(sys.argv[1]), 0, 0, 0)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    children = [subprocess.Popen([sys.executable, "-c", code, name.hex()], stdout=subprocess.PIPE)
                for name in names]
    try:
        for child in children:
            assert child.stdout.readline() == b"ready\n"
        yield {child.pid: name for child, name in zip(children, names)}
    finally:
        for child in children:
            child.kill()
            child.wait()
            child.stdout.close()


def test_names_with_spaces_parentheses_and_control_bytes(kind, named_processes):
    with start(kind) as server, Client(server.port) as client:
        rows = {pid: name for pid, _, _, name in client.top(b"TOP 1000\n")}
    for pid, raw in named_processes.items():
        assert rows.get(pid) == shown_name(raw), f"pid {pid}: {rows.get(pid)!r}"
    assert b"bad?name" in rows.values() and b"x) (y z" in rows.values()


BAD_REQUESTS = {
    "k0": b"TOP 0\n",
    "k1001": b"TOP 1001\n",
    "k-abc": b"TOP abc\n",
    "k-trailing": b"TOP 5 6\n",
    "unknown-verb": b"FOO\n",
    "lowercase": b"top 2\n",
    "empty-line": b"\n",
    "long-line": b"TOP " + b"9" * 1100,  # over 1 KiB, no newline
}


@pytest.mark.parametrize("request_bytes", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
def test_bad_request_gets_err_and_only_that_connection_closes(kind, request_bytes):
    model, _ = kind
    with start(kind) as server:
        # The iterative model serves one connection at a time: the other
        # client can only be served after this one is over.
        other = None if model == "iterative" else Client(server.port)
        if other:
            assert len(other.top(b"TOP 1\n")) == 1
        with Client(server.port) as bad:
            bad.send(request_bytes)
            reply = bad.line()
            assert reply.startswith(b"ERR "), reply
            assert bad.closed_by_server()
        other = other or Client(server.port)
        with other:
            assert len(other.top(b"TOP 2\n")) == 2


def test_good_request_before_a_bad_one_is_answered(kind):
    with start(kind) as server, Client(server.port) as client:
        client.send(b"TOP 1\nNOPE\n")
        assert len(client.top(b"")) == 1
        assert client.line().startswith(b"ERR ")
        assert client.closed_by_server()


def test_abrupt_resets_do_not_disturb_the_server(kind):
    with start(kind) as server:
        for i in range(10):
            client = Client(server.port)
            if i % 3 == 0:
                client.send(b"TOP")          # mid-request
            elif i % 3 == 1:
                client.send(b"TOP 1000\n")   # reset while the reply is being written
            else:
                client.send(b"TOP 1\n" * 50)
            client.reset()
        with Client(server.port) as client:
            assert len(client.top(b"TOP 3\n")) == 3


def test_request_then_half_close_gets_the_whole_reply(kind):
    """What `printf 'TOP 3\\nTOP 1\\n' | nc 127.0.0.1 PORT` does."""
    with start(kind) as server, Client(server.port) as client:
        client.send(b"TOP 3\nTOP 1\nTOP")  # the unfinished last request gets no reply
        client.sock.shutdown(socket.SHUT_WR)
        assert len(client.top(b"")) == 3
        assert len(client.top(b"")) == 1
        assert client.closed_by_server()


def test_client_that_never_reads_cannot_grow_the_server(kind):
    """Requests pile up in the kernel's buffers, not in the server's memory."""
    model, san = kind
    with start(kind) as server:
        rss_before = psutil.Process(server.proc.pid).memory_info().rss
        hog = socket.create_connection(("127.0.0.1", server.port))
        hog.setblocking(False)
        request, sent, deadline = b"TOP 1000\n" * 1000, 0, time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                sent += hog.send(request)
            except BlockingIOError:
                time.sleep(0.05)
                try:
                    sent += hog.send(request)
                except BlockingIOError:
                    break  # the server stopped reading us: the point of the test
        assert time.monotonic() < deadline, "the server kept reading a client that never reads"
        assert sent < 64 << 20
        growth = psutil.Process(server.proc.pid).memory_info().rss - rss_before
        assert growth < (64 << 20 if san else 8 << 20), f"server grew by {growth} bytes"
        if model != "iterative":  # iterative is stuck writing to the hog: its lesson
            with Client(server.port) as other:
                assert len(other.top(b"TOP 2\n")) == 2
        hog.close()


def test_sigterm_with_clients_connected(kind):
    with start(kind) as server:
        clients = [Client(server.port) for _ in range(3)]
        assert len(clients[0].top(b"TOP 1\n")) == 1
        clients[1].send(b"TOP")  # half a request
        time.sleep(0.1)
        # leaving the block: SIGTERM, status 0 within 1 s (checked by serverproc)
    for client in clients:
        client.close()


# ---- echo ----

def test_echo_returns_every_byte_in_order(kind):
    payload = os.urandom(300_000)
    with start(kind, service="echo") as server, Client(server.port) as client:
        # Send from a thread while reading here: neither side may block the other.
        sender = threading.Thread(target=client.send, args=(payload,))
        sender.start()
        received = bytearray()
        while len(received) < len(payload):
            chunk = client.sock.recv(65536)
            assert chunk, "server closed early"
            received += chunk
        sender.join(5)
        assert bytes(received) == payload
        client.sock.shutdown(socket.SHUT_WR)
        assert client.closed_by_server()


# ---- sink ----

def test_sink_counts_bytes_and_reads_repeatably(kind):
    with start(kind, service="sink") as server, Client(server.port) as client:
        body = os.urandom(200_000)
        for _ in range(2):
            client.send(b"PUT %d\n" % len(body))
            client.send(body)
            verb, size, reads = client.line().split()
            assert (verb, int(size)) == (b"OK", len(body))
            assert 1 <= int(reads) <= len(body)
        client.send(b"PUT 0\n")
        assert client.line() == b"OK 0 0"
        client.send(b"PUT 5\r\nhello")
        assert client.line() == b"OK 5 1"


@pytest.mark.parametrize("request_bytes", [b"PUT abc\n", b"PUT -1\n", b"PUT\n", b"GET 5\n",
                                           b"PUT 99999999999999999999\n"])
def test_sink_bad_put_gets_err(kind, request_bytes):
    with start(kind, service="sink") as server, Client(server.port) as client:
        client.send(request_bytes)
        assert client.line().startswith(b"ERR ")
        assert client.closed_by_server()


# ---- spin ----

BAD_SPINS = [b"SPIN\n", b"SPIN -1\n", b"SPIN 1000001\n", b"SPIN 1 2\n", b"SPIN x\n", b"PUT 5\n"]


def test_spin_answers_each_request_after_its_time_and_refuses_bad_ones(kind):
    with start(kind, service="spin") as server:
        with Client(server.port) as client:
            started = time.monotonic()
            client.send(b"SPIN 20000\nSPIN 0\r\nSPIN 30000\n")  # pipelined, in one segment
            assert [client.line() for _ in range(3)] == [b"OK 20000", b"OK 0", b"OK 30000"]
            assert time.monotonic() - started >= 0.05
        for bad in BAD_SPINS:  # one connection each (the iterative model serves one at a time)
            with Client(server.port) as client:
                client.send(bad)
                assert client.line().startswith(b"ERR "), bad
                assert client.closed_by_server(), bad
        with Client(server.port) as client:
            client.send(b"SPIN 1\n")
            assert client.line() == b"OK 1"


# ---- the command line ----

@pytest.mark.parametrize("model", [m for m in serverproc.MODELS if m not in serverproc.WORKER_MODELS])
@pytest.mark.parametrize("args, says", [
    (["--workers", "4"], "--workers is not supported"),
    (["--service", "nope"], "unknown service 'nope'"),
    (["--port", "70000"], "--port needs a number"),
    (["--bogus"], "unknown option '--bogus'"),
])
def test_bad_flags_are_refused_clearly(model, args, says):
    result = subprocess.run([str(serverproc.bin_dir() / model), *args], capture_output=True,
                            text=True, timeout=5)
    assert result.returncode == 2
    assert says in result.stderr and "--help" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("model", serverproc.MODELS)
def test_help(model):
    result = subprocess.run([str(serverproc.bin_dir() / model), "--help"], capture_output=True,
                            text=True, timeout=5)
    assert result.returncode == 0 and "--service" in result.stdout


def test_port_in_use_is_reported():
    with serverproc.running("select") as server:
        result = subprocess.run([str(serverproc.bin_dir() / "iterative"), "--port", str(server.port)],
                                capture_output=True, text=True, timeout=5)
    assert result.returncode != 0
    assert "cannot listen" in result.stderr and "Address already in use" in result.stderr
