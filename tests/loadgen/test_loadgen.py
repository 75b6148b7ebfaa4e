"""The load generator (csrc/loadgen/loadgen.c) against small Python servers.

The servers here are written independently of the C services, from the wire
protocol in LAB.md, plus misbehaving ones (reset, silent, ERR, early close).
Everything runs on 127.0.0.1 and is bounded in time.

LOADGEN_SAN=1 runs the same tests against the ASan + UBSan build;
LOADGEN=/path/to/loadgen against a build of your own.
"""

import os
import re
import resource
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

import loadgenproc
from labkit.bench import free_port
from loadgenproc import ENGINES, Loadgen
from threaded_server import ThreadPerConnection
from waits import wait_for, wait_until

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)


# --------------------------------------------------------------- the binary

@pytest.fixture(scope="module", params=ENGINES)
def loadgen(request):
    """Every test in this file runs with both engines: they must agree on
    behaviour, failures and JSON keys."""
    return Loadgen(loadgenproc.binary(), request.param)


# ------------------------------------------------------- the test servers

def top_reply(k):
    """The top-k processes by utime+stime from /proc, as the `top` service
    answers them (LAB.md): '<pid> <utime> <stime> <name>' lines, then END."""
    rows = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue  # the process ended meanwhile
        name = stat[stat.index(b"(") + 1:stat.rindex(b")")]
        fields = stat[stat.rindex(b")") + 2:].split()
        utime, stime = int(fields[11]), int(fields[12])
        printable = bytes(c if 0x20 <= c <= 0x7e else ord("?") for c in name)
        rows.append((utime + stime, int(entry.name), utime, stime, printable))
    rows.sort(reverse=True)
    lines = [b"%d %d %d %s\n" % (pid, u, s, n) for _, pid, u, s, n in rows[:k]]
    return b"".join(lines) + b"END\n"


def read_line(conn, pending):
    """One b'...\\n' line from conn, with `pending` the bytes already read;
    returns (line, rest), or (None, b'') at end of file."""
    while b"\n" not in pending:
        chunk = conn.recv(4096)
        if not chunk:
            return None, b""
        pending += chunk
    line, _, rest = pending.partition(b"\n")
    return line, rest


def serve_top(conn):
    pending = b""
    while True:
        line, pending = read_line(conn, pending)
        if line is None:
            return
        k = int(line.split()[1]) if len(line.split()) > 1 else 2
        conn.sendall(top_reply(k))


def serve_echo(conn):
    while chunk := conn.recv(65536):
        conn.sendall(chunk)


def serve_sink(conn):
    pending = b""
    while True:
        line, pending = read_line(conn, pending)
        if line is None:
            return
        size = int(line.split()[1])
        received, reads = len(pending), 1 if pending else 0
        while received < size:
            chunk = conn.recv(min(65536, size - received))
            if not chunk:
                return
            received, reads = received + len(chunk), reads + 1
        pending = pending[size:] if len(pending) > size else b""
        conn.sendall(b"OK %d %d\n" % (size, reads))


def serve_spin(conn):
    """The spin service without the spinning: 'SPIN <us>' gets 'OK <us>' at once."""
    pending = b""
    while True:
        line, pending = read_line(conn, pending)
        if line is None:
            return
        conn.sendall(b"OK %s\n" % line.split()[1])


def serve_reset(conn):
    """Read the request, then reset the connection (RST, not FIN)."""
    conn.recv(4096)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def serve_silent(conn):
    """Read requests and never answer (until the server stops)."""
    while conn.recv(4096):
        pass


def serve_err(conn):
    conn.recv(4096)
    conn.sendall(b"ERR unknown verb\n")


def serve_close_early(conn):
    """Half an answer, then close."""
    conn.recv(4096)
    conn.sendall(b"1 5 5 init\n")


def serve_unsorted_top(conn):
    """A well-formed but wrong top reply: lowest CPU first."""
    conn.recv(4096)
    conn.sendall(b"7 1 1 low\n1 500 500 high\nEND\n")


class ScriptedServer(ThreadPerConnection):
    """A thread-per-connection server on 127.0.0.1 running `handler(conn)`.

    It also records how many connections it accepted, and how many client
    connects to it were still in progress when the first request arrived.
    stop() closes every socket and joins every thread."""

    def __init__(self, handler, backlog=128, accept_after=0.0):
        self.handler = handler
        self.accepted = 0
        self.connecting_at_first_request = None
        super().__init__(backlog=backlog, accept_after=accept_after)

    def admit(self, conn):
        self.accepted += 1
        return self.accepted - 1

    def serve(self, conn, index):
        # At the first request (peeked, not consumed): how many clients were still connecting?
        if conn.recv(1, socket.MSG_PEEK):
            with self.lock:
                if self.connecting_at_first_request is None:
                    self.connecting_at_first_request = clients_connecting(self.port)
        self.handler(conn)


@pytest.fixture
def server():
    """Start ScriptedServer(handler, ...) for the test; stopped afterwards."""
    started = []

    def start(handler, **kwargs):
        started.append(ScriptedServer(handler, **kwargs))
        return started[-1]

    yield start
    for srv in started:
        srv.stop()


def clients_connecting(port):
    """Client sockets to 127.0.0.1:port still in SYN_SENT, from /proc/net/tcp."""
    syn_sent = "02"
    sockets = set()  # their inodes: the kernel may list a socket twice while other tests' come and go
    with open("/proc/net/tcp") as table:
        next(table)  # the header
        for row in table:
            fields = row.split()
            if int(fields[2].split(":")[1], 16) == port and fields[3] == syn_sent:
                sockets.add(fields[9])
    return len(sockets)


# ------------------------------------------------------------------- tests

REPORT_KEYS = {"service", "clients", "requests_per_client", "connections_ok",
               "connections_failed", "requests_ok", "requests_failed", "elapsed_s",
               "throughput_rps", "latency_us", "errors", "rusage",
               # since the events engine, printed by both engines
               "engine", "mode", "rate_rps", "duration_s", "connections_lost",
               "idle_connections", "idle_connections_ok", "idle_connections_failed",
               "requests_planned", "warmup", "latency_source", "percentile_precision",
               "latency_uncorrected_us", "histogram", "histogram_halves", "latency_batches"}
LATENCY_KEYS = {"p50", "p90", "p99", "p999", "max", "mean", "samples"}
RUSAGE_KEYS = {"user_s", "sys_s", "voluntary_ctxt_switches", "involuntary_ctxt_switches",
               "minor_faults", "major_faults", "max_rss_kb"}


@pytest.mark.parametrize("service, handler, extra", [
    ("top", serve_top, ["--k", 5]),
    ("echo", serve_echo, ["--size", 100_000]),   # larger than one recv: interleaved I/O
    ("sink", serve_sink, ["--size", 300_000]),
    ("spin", serve_spin, ["--spin-us", 250, "--spin-dist", "exp"]),
])
def test_every_service_succeeds_with_full_report(loadgen, server, service, handler, extra):
    srv = server(handler)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 8,
                                        "--requests", 5, "--service", service, *extra)
    assert code == 0, err
    assert REPORT_KEYS <= report.keys()
    assert report["service"] == service
    assert (report["engine"], report["mode"], report["rate_rps"]) == (loadgen.engine, "closed", None)
    assert report["connections_lost"] == 0
    assert report["warmup"] == {"seconds": None, "requests": None, "excluded": 0}
    # Closed loop: the send is the intended start, so both figures agree.
    assert report["latency_uncorrected_us"] == report["latency_us"]
    assert sum(count for _, count in report["histogram"]) == 40
    # the first half of the plan (exchange j of client i is j x 8 + i of 40) and the second
    assert [sum(count for _, count in half) for half in report["histogram_halves"]] == [20, 20]
    # ... and in 20 batches of the plan, 2 exchanges each, whose means add up to the run's
    batches = report["latency_batches"]
    assert [count for count, _ in batches] == [2] * 20
    assert sum(count * mean for count, mean in batches) / 40 == pytest.approx(report["latency_us"]["mean"], abs=0.01)
    assert (report["clients"], report["requests_per_client"]) == (8, 5)
    assert (report["connections_ok"], report["connections_failed"]) == (8, 0)
    assert (report["requests_ok"], report["requests_failed"]) == (40, 0)
    assert report["errors"] == {}
    assert report["elapsed_s"] > 0
    assert report["throughput_rps"] == pytest.approx(40 / report["elapsed_s"], rel=1e-3)
    assert srv.accepted == 8
    lat = report["latency_us"]
    assert lat.keys() == LATENCY_KEYS
    assert lat["samples"] == 40
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert 0 < lat["mean"] <= lat["max"]
    # Every exchange happened inside the run, so no latency exceeds it.
    assert lat["max"] <= report["elapsed_s"] * 1e6
    assert report["rusage"].keys() == RUSAGE_KEYS
    assert report["rusage"]["user_s"] + report["rusage"]["sys_s"] > 0
    assert report["rusage"]["max_rss_kb"] > 0
    if service == "sink":
        assert report["sink_server_reads_mean"] >= 1
    if service == "spin":
        assert (report["spin_us"], report["spin_dist"], report["size_bytes"]) == (250, "exp", None)


def test_all_clients_connect_before_the_first_request(loadgen, server):
    """The start gate.  With a listen backlog of 1 and no accept() for 0.5 s,
    the kernel drops some SYNs and those clients only connect when they
    retry (about 1 s later).  When the first request arrives, no client may
    still be connecting."""
    srv = server(serve_echo, backlog=1, accept_after=0.5)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 6,
                                        "--requests", 2, "--service", "echo")
    assert code == 0, err
    assert report["requests_ok"] == 12
    assert report["elapsed_s"] > 0.9, "no SYN was retried: the test proved nothing"
    assert srv.connecting_at_first_request == 0, (
        f"{srv.connecting_at_first_request} clients were still connecting when the first "
        "request arrived: the start gate did not hold")


def test_connection_refused_is_counted(loadgen):
    code, report, _ = loadgenproc.run(loadgen, "--port", free_port(), "--clients", 4,
                                      "--requests", 3)
    assert code == 1
    assert report["errors"] == {"ECONNREFUSED": 4}
    assert (report["connections_ok"], report["connections_failed"]) == (0, 4)
    assert (report["requests_ok"], report["requests_failed"]) == (0, 12)
    assert report["latency_us"]["samples"] == 0
    assert all(report["latency_us"][p] is None
               for p in ("p50", "p90", "p99", "p999", "max", "mean"))


def test_reset_connections_are_counted(loadgen, server):
    srv = server(serve_reset)
    code, report, _ = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 3,
                                      "--requests", 2, "--timeout", 5)
    assert code == 1
    assert report["errors"] == {"ECONNRESET": 3}
    assert report["connections_ok"] == 3
    assert report["connections_lost"] == 3
    assert (report["requests_ok"], report["requests_failed"]) == (0, 6)


def test_silent_server_times_out_within_the_bound(loadgen, server):
    srv = server(serve_silent)
    started = time.monotonic()
    code, report, _ = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 3,
                                      "--requests", 2, "--timeout", 0.5)
    took = time.monotonic() - started
    assert code == 1
    assert report["errors"] == {"ETIMEDOUT": 3}
    assert report["requests_failed"] == 6
    assert 0.5 <= took < 3, f"a 0.5 s timeout took {took:.2f} s"
    assert 0.5 <= report["elapsed_s"] < 3


def test_connect_timeout_does_not_hold_the_others_hostage(loadgen, server):
    """A server that never accepts, with a backlog of 1: most SYNs are
    dropped, so those connects time out; the clients that did connect must
    not wait for them longer than the connect timeout."""
    srv = server(serve_silent, backlog=1, accept_after=60)
    started = time.monotonic()
    code, report, _ = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 6,
                                      "--requests", 1, "--connect-timeout", 0.5,
                                      "--timeout", 0.5)
    took = time.monotonic() - started
    assert code == 1
    assert report["errors"] == {"ETIMEDOUT": 6}  # at connect or awaiting the reply
    assert report["connections_failed"] >= 1
    assert report["connections_ok"] >= 1
    assert took < 3, f"0.5 s + 0.5 s of timeouts took {took:.2f} s"


def test_zero_requests_only_connects(loadgen, server):
    srv = server(serve_echo)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 5,
                                        "--requests", 0, "--service", "echo")
    assert code == 0, err
    assert (report["connections_ok"], report["requests_ok"], report["requests_failed"]) == (5, 0, 0)
    assert report["latency_us"]["samples"] == 0 and report["latency_us"]["p50"] is None


@pytest.mark.parametrize("handler, name", [
    (serve_err, "BADREPLY"),
    (serve_unsorted_top, "BADREPLY"),
    (serve_close_early, "EOF"),
])
def test_protocol_violations_are_named(loadgen, server, handler, name):
    srv = server(handler)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 2,
                                        "--requests", 2, "--timeout", 5)
    assert code == 1
    assert report["errors"] == {name: 2}
    assert report["requests_ok"] == 0
    if handler is serve_err:  # the first bad reply is quoted on stderr
        assert "bad reply: the server answered ERR: 'ERR unknown verb'" in err


def test_err_during_a_large_upload_is_a_bad_reply_not_epipe(loadgen, server):
    """The server answers ERR and closes while the body is still being sent:
    the ERR explains the failure, the broken pipe that follows does not."""
    srv = server(serve_err)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 2,
                                        "--requests", 1, "--service", "sink",
                                        "--size", 8_000_000, "--timeout", 5)
    assert code == 1
    assert report["errors"] == {"BADREPLY": 2}
    assert "ERR" in err


def test_garbled_echo_is_a_bad_reply(loadgen, server):
    def serve_garbled_echo(conn):
        data = conn.recv(65536)
        conn.sendall(bytes(reversed(data)))

    srv = server(serve_garbled_echo)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 1,
                                        "--requests", 1, "--service", "echo", "--size", 32)
    assert code == 1
    assert report["errors"] == {"BADREPLY": 1}
    assert "differ" in err


@pytest.mark.parametrize("args, complaint", [
    (["--clients", 2, "--requests", 1], "--port is required"),
    (["--port", "abc", "--clients", 2, "--requests", 1], "--port 'abc'"),
    (["--port", 9, "--clients", 0, "--requests", 1], "--clients '0'"),
    (["--port", 9, "--clients", 100001, "--requests", 1], "--clients '100001'"),
    (["--port", 9, "--clients", "3x", "--requests", 1], "--clients '3x'"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--service", "ftp"], "--service 'ftp'"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--k", 0], "--k '0'"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--k", 1001], "--k '1001'"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--timeout", "-1"], "--timeout '-1'"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--bogus"], "unknown option"),
    (["--port", 9, "--clients", 2], "--requests is required"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--spin-us", 10], "add --service spin"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--service", "spin", "--spin-us", 1000001], "--spin-us"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--service", "spin", "--spin-dist", "gamma"],
     "--spin-dist 'gamma': expected fixed or exp"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--arrivals", "poisson"], "add --rate"),
    (["--port", 9, "--clients", 2, "--requests", 1, "--host", "no.such.host.invalid"],
     "--host"),
])
def test_bad_arguments_exit_2_with_a_message(loadgen, args, complaint):
    code, report, err = loadgenproc.run(loadgen, *args)
    assert code == 2
    assert report is None, "no JSON for a run that never started"
    assert complaint in err


def test_refuses_more_clients_than_open_files_allow(loadgen, server):
    def low_nofile():
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    srv = server(serve_echo)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 200,
                                        "--requests", 1, "--service", "echo",
                                        preexec_fn=low_nofile)
    assert code == 2
    assert report is None
    assert srv.accepted == 0, "it refused before connecting anything"
    fits = int(re.search(r"at most (\d+) clients fit", err).group(1))
    assert 0 < fits < 48
    # The number it names is true: that many clients do run under that limit.
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", fits,
                                        "--requests", 1, "--service", "echo",
                                        preexec_fn=low_nofile)
    assert code == 0, err
    assert report["connections_ok"] == fits


def test_dies_with_its_parent(loadgen, server, tmp_path):
    """PR_SET_PDEATHSIG: a loadgen whose parent is killed does not run on."""
    srv = server(serve_silent)
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen(
        ["sh", "-c", f'"$0" "$@" & echo $! > {pid_file}; wait', *loadgen.argv(),
         "--port", str(srv.port), "--clients", "1", "--requests", "1", "--timeout", "30"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() and srv.accepted, within=10,
                 what="loadgen connected")
        child = int(pid_file.read_text())
    finally:
        parent.kill()
        parent.wait(timeout=5)

    def gone():
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False
    if not wait_until(gone, within=5):
        os.kill(child, signal.SIGKILL)
        pytest.fail("loadgen outlived its parent by 5 s")


def test_against_the_threaded_server(loadgen):
    """Integration with the lab's own server (built by `make build`)."""
    threaded = loadgen.path.parent / "threaded"
    assert threaded.exists(), f"{threaded} is missing: build it (make build) before the tests"
    proc = subprocess.Popen([str(threaded), "--port", "0", "--service", "top"],
                            stdout=subprocess.PIPE, text=True)
    try:
        ready = proc.stdout.readline().split()
        assert ready[:1] == ["listening"], f"threaded printed {ready!r}"
        code, report, err = loadgenproc.run(loadgen, "--port", ready[1], "--clients", 50,
                                            "--requests", 3, "--service", "top", "--k", 3)
        assert code == 0, err
        assert (report["requests_ok"], report["requests_failed"]) == (150, 0)
        assert report["errors"] == {}
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0, "threaded must exit 0 on SIGTERM"
        proc.stdout.close()
