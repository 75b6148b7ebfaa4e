""""What breaks first": the load generator's misbehaving connections (--bad),
connect times (SYN retransmissions behind a full accept queue), exchanges in
flight (Little's law) and an open loop far beyond what the server can do.

The servers are small Python ones written here, which record what they
receive, and the lab's binaries already in build/bin/ (not rebuilt here: a
missing one skips its case).  Each feature runs at least once against the
ASan + UBSan build of loadgen (the rows with san=True).
"""

import contextlib
import json
import resource
import socket
import struct
import subprocess
import time

import pytest

import loadgenproc
import waits
from labkit import kernel_view, paths
from labkit.bench import free_port
from loadgenproc import RUN_TIMEOUT, Loadgen
from threaded_server import ThreadPerConnection

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

# --------------------------------------------------------------- the binary

def run(*args, san=False, timeout=RUN_TIMEOUT):
    """loadgenproc.run with the events engine; (exit code, JSON, stderr, wall seconds)."""
    began = time.monotonic()
    code, report, stderr = loadgenproc.run(Loadgen(loadgenproc.binary(san), "events"), *args, timeout=timeout)
    return code, report, stderr, time.monotonic() - began


# ------------------------------------------------------- the test servers

class Recorder(ThreadPerConnection):
    """A thread-per-connection server on 127.0.0.1 that records, for every
    connection in accept order, each chunk it received and when, and answers
    as `service` says: "echo", "top" (a fixed two-line reply per request line),
    "none" (reads, never answers).  `delay` seconds before each echo; `hold`
    seconds from the first request received during which no echo is sent.
    With accept_every, it accepts one connection that often, from a listen
    backlog of `backlog` (the accept queue case)."""

    def __init__(self, service="echo", backlog=128, accept_every=0.0, delay=0.0, accept_after=0.0, hold=0.0):
        self.service, self.delay, self.hold, self.first = service, delay, hold, None
        self.chunks = []   # per connection, in accept order: [(monotonic time, bytes), ...]
        super().__init__(backlog=backlog, accept_after=accept_after, accept_every=accept_every)

    def admit(self, conn):
        self.chunks.append([])
        return len(self.chunks) - 1

    def serve(self, conn, index):
        pending = b""
        while chunk := conn.recv(65536):
            with self.lock:
                self.chunks[index].append((time.monotonic(), chunk))
                self.first = self.first or time.monotonic()
            if self.service == "echo":
                if self.delay:
                    time.sleep(self.delay)
                if self.hold:  # the subject: replies held back, a backlog built
                    time.sleep(max(0.0, self.first + self.hold - time.monotonic()))
                conn.sendall(chunk)
            elif self.service == "top":
                pending += chunk
                while b"\n" in pending:
                    _, _, pending = pending.partition(b"\n")
                    conn.sendall(b"1 20 10 init\n2 5 5 kthreadd\nEND\n")

    def received(self, index):
        with self.lock:
            return b"".join(data for _, data in self.chunks[index])


@pytest.fixture
def recorder():
    started = []

    def start(**kwargs):
        started.append(Recorder(**kwargs))
        return started[-1]

    yield start
    for srv in started:
        srv.stop()


@contextlib.contextmanager
def lab_server(model, service, *flags):
    """One of the lab's servers as already built in build/bin/ (not rebuilt:
    another change may be under way in its sources)."""
    binary = paths.BIN / model
    if not binary.exists():
        pytest.skip(f"build/bin/{model} is not built")
    proc = subprocess.Popen([str(binary), "--service", service, "--port", "0", *map(str, flags)],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert line[:1] == ["listening"], f"{model} printed {line!r}"
        yield int(line[1])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        proc.stdout.close()


# -------------------------------------------------- misbehaving connections

ACTIVE = ["--clients", 3, "--rate", 60, "--duration", 2]


@pytest.mark.parametrize("kind, service, interval, san", [
    ("silent", "echo", 1.0, True),
    ("silent", "top", 1.0, False),
    ("slow", "echo", 0.25, True),
    ("drip", "echo", 0.25, False),
    ("drip", "top", 0.25, True),
])
def test_each_kind_of_bad_connection_does_what_it_says(recorder, kind, service, interval, san):
    bad = 2
    srv = recorder(service=service)
    code, report, err, _ = run("--port", srv.port, *ACTIVE, "--service", service, "--size", 4096,
                               "--bad", bad, "--bad-kind", kind, "--bad-interval", interval, san=san)
    waits.settled(lambda: [len(chunks) for chunks in srv.chunks])  # the server's threads record the last bytes
    # The active connections are served (a thread per connection) and the bad
    # ones never fail the run: they are all still open at the end.
    assert code == 0, err
    assert (report["requests_ok"], report["connections_failed"], report["connections_lost"]) == (120, 0, 0)
    b = report["bad"]
    assert (b["kind"], b["connections"], b["interval_s"]) == (kind, bad, interval)
    assert (b["open_at_end"], b["closed_by_server"], b["failed_to_connect"], b["errors"]) == (bad, 0, 0, {})
    # Bad connections are accepted first (see the order test); what each sent:
    sent_by_bad = [srv.received(i) for i in range(bad)]
    seen = sum(len(data) for data in sent_by_bad)
    assert 0 < seen <= b["bytes_sent"]
    request = b"TOP 2\n" if service == "top" else None
    if request:
        assert all(request.startswith(data[:6]) or data.startswith(request) for data in sent_by_bad)
    ticks = 2.0 / interval + 2  # the gate .. the active ones done, ticks on start + k x interval
    if kind == "silent":
        assert b["bytes_received"] == 0
        assert b["bytes_sent"] > 100_000, "it writes while the socket takes it"
    elif kind == "slow":
        assert 0 < b["bytes_received"] <= bad * 1024 * ticks
        assert b["bytes_sent"] > 100_000
    else:  # drip: one byte per interval, each arriving on its own
        assert bad * (ticks - 4) <= b["bytes_sent"] <= bad * ticks
        assert seen >= b["bytes_sent"] - bad
        for i in range(bad):
            times = [t for t, data in srv.chunks[i] for _ in data]
            assert all(len(data) == 1 for _, data in srv.chunks[i]), "one byte per segment"
            gaps = sorted(b - a for a, b in zip(times, times[1:]))
            assert gaps and interval * 0.5 <= gaps[len(gaps) // 2] <= interval * 2, gaps
        if service == "echo":  # every byte echoed back and read
            assert b["bytes_received"] >= b["bytes_sent"] - bad


def test_bad_connections_connect_before_the_active_ones(recorder):
    """The server's accept order: every bad connection, then the active ones
    (told apart by their first bytes: a dripped 'T' alone, or a whole 'TOP 2')."""
    bad, clients = 4, 6
    srv = recorder(service="top")
    code, report, err, _ = run("--port", srv.port, "--clients", clients, "--requests", 3,
                               "--threads", 2, "--bad", bad, "--bad-kind", "drip",
                               "--bad-interval", 5, san=True)
    assert code == 0, err
    waits.wait_for(lambda: len(srv.chunks) == bad + clients and all(srv.chunks), what="every connection's first bytes")
    firsts = [srv.chunks[i][0][1] for i in range(bad + clients)]
    assert firsts == [b"T"] * bad + [b"TOP 2\n"] * clients


def test_bad_connections_closed_counted_apart():
    """The server closes the first bad connection (FIN) and resets the second
    (RST) at their first byte: closed_by_server, named EOF and ECONNRESET under
    "bad", and the run, whose active connections were served, still succeeds."""

    class Closer(Recorder):
        def serve(self, conn, index):
            if index >= 2:
                return super().serve(conn, index)
            conn.recv(1)
            if index == 1:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    srv = Closer(service="echo")
    try:
        code, report, err, _ = run("--port", srv.port, *ACTIVE, "--service", "echo", "--bad", 2,
                                   "--bad-kind", "drip", "--bad-interval", 0.2, san=True)
    finally:
        srv.stop()
    assert code == 0, err
    assert report["errors"] == {} and report["requests_ok"] == 120
    b = report["bad"]
    assert (b["open_at_end"], b["closed_by_server"], b["failed_to_connect"]) == (0, 2, 0)
    assert b["errors"] == {"EOF": 1, "ECONNRESET": 1}


def test_bad_connections_that_cannot_connect_are_counted_apart():
    """Nothing listens: the bad connects are refused, counted under "bad",
    and the active ones fail as usual (exit 1)."""
    port = free_port()
    code, report, _, _ = run("--port", port, "--clients", 2, "--requests", 1, "--bad", 3)
    assert code == 1 and report["connections_failed"] == 2
    b = report["bad"]
    assert (b["open_at_end"], b["closed_by_server"], b["failed_to_connect"]) == (0, 0, 3)
    assert b["errors"] == {"ECONNREFUSED": 3} and report["errors"] == {"ECONNREFUSED": 2}
    assert report["connect_us"]["samples"] == 0 and report["connect_us"]["p50"] is None


@pytest.mark.parametrize("model, flags, stuck", [
    ("threaded", [], False),
    ("pool", ["--workers", 6], False),
    ("pool", ["--workers", 2], True),
    ("iterative", [], True),
])
def test_drip_against_thread_per_connection_pool_and_iterative_servers(model, flags, stuck):
    """Slowloris: two connections drip 'TOP 2' a byte every 2 s.  A thread per
    connection, or a pool with workers to spare, still serves the active
    clients; the iterative server is stuck on the first bad one, and a pool of
    two on the two of them, so the active ones time out (lost, ETIMEDOUT) and
    the run still ends in bounded time."""
    timeout = 1.5
    with lab_server(model, "top", *flags) as port:
        code, report, err, wall = run("--port", port, "--clients", 4, "--requests", 5,
                                      "--service", "top", "--timeout", timeout,
                                      "--bad", 2, "--bad-kind", "drip", "--bad-interval", 2)
    b = report["bad"]
    assert b["failed_to_connect"] == 0 and b["open_at_end"] + b["closed_by_server"] == 2
    if stuck:
        assert code == 1
        assert (report["requests_ok"], report["connections_lost"]) == (0, 4)
        assert report["errors"] == {"ETIMEDOUT": 4}
        assert report["requests_sent"] == 4 and report["requests_not_sent"] == 16
        assert wall < timeout + 3
    else:
        assert code == 0, err
        assert report["requests_ok"] == 20 and report["errors"] == {}


def test_bad_flags_are_refused_where_they_do_not_apply():
    for args, complaint in [
        (["--bad", 2], "--bad needs --engine events"),
        (["--bad-kind", "drip"], "--bad-kind needs --engine events"),
        (["--engine", "events", "--bad-kind", "loud"], "--bad-kind 'loud'"),
        (["--engine", "events", "--bad-interval", 0], "--bad-interval '0'"),
        (["--engine", "events", "--bad", -1], "--bad '-1'"),
    ]:
        proc = subprocess.run([str(loadgenproc.binary(False)), "--port", "9", "--clients", "2",
                               "--requests", "1", *map(str, args)], capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)
        assert (proc.returncode, proc.stdout) == (2, ""), args
        assert complaint in proc.stderr, (args, proc.stderr)


def test_refuses_more_bad_connections_than_open_files_allow(recorder):
    def low_nofile():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    srv = recorder(service="echo")
    proc = subprocess.run([str(loadgenproc.binary(False)), "--engine", "events", "--port", str(srv.port),
                           "--clients", "2", "--requests", "1", "--bad", "500"], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT, preexec_fn=low_nofile)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "connections (clients + bad) fit" in proc.stderr
    assert srv.chunks == [], "it refused before connecting anything"


def test_bad_key_null_and_help_agrees(recorder):
    """Without bad connections the key is null and help and describe agree."""
    srv = recorder(service="echo")
    code, report, err, _ = run("--port", srv.port, "--clients", 2, "--requests", 2, "--service", "echo")
    assert code == 0, err
    assert report["bad"] is None
    helptext = subprocess.run([str(loadgenproc.binary(False)), "--help"], capture_output=True, text=True).stdout
    described = json.loads(subprocess.run([str(loadgenproc.binary(False)), "--describe"], capture_output=True,
                                          text=True).stdout)
    for flag in ("--bad ", "--bad-kind", "--bad-interval"):
        assert flag in helptext
    assert described["flags"]["bad"] == {"min": 0, "max": described["flags"]["clients"]["max"]}
    assert described["bad_kinds"] == ["silent", "slow", "drip"]
    assert described["connect_burst_limit"] == report["connect_burst_limit"] == 512
    assert described["inflight_interval_ms"] == report["inflight"]["interval_ms"] == 10


# ------------------------------------------------------------ connect times

@pytest.mark.parametrize("engine, san, accept_every, accept_after, over", [
    ("events", True, 0.3, 0.0, "1s"),
    ("threads", False, 0.3, 0.0, "1s"),
    ("events", False, 0.0, 2.5, "3s"),
    ("threads", False, 0.0, 2.5, "3s"),
])
def test_a_full_accept_queue_shows_as_whole_second_connects(recorder, engine, san, accept_every,
                                                          accept_after, over):
    """A listener with backlog 1 and 20 connects at once: two fit in the accept
    queue, the kernel drops the other SYNs (ListenOverflows) and the clients
    retransmit them after TCP_TIMEOUT_INIT (1 s), then 1 s later each
    (tcp_syn_linear_timeouts, Linux >= 6.5) or 2 s later (exponential backoff
    before it): connect times cluster at whole seconds.  Accepting one every
    0.3 s lets them in at the first retransmission (1 s); accepting nothing
    for 2.5 s, at the one 3 s after the connect, which the default
    --connect-timeout of 5 s still waits for."""
    before = kernel_view.tcp_ext()["ListenOverflows"]  # this network namespace's
    srv = recorder(service="echo", backlog=1, accept_every=accept_every, accept_after=accept_after)
    _, report, _ = loadgenproc.run(Loadgen(loadgenproc.binary(san), engine), "--port", srv.port,
                                   "--clients", 20, "--requests", 0)
    after = kernel_view.tcp_ext()["ListenOverflows"]
    c, histogram = report["connect_us"], report["connect_histogram"]
    assert c["samples"] == report["connections_ok"] and c["samples"] + report["connections_failed"] == 20
    assert sum(count for _, _, count in histogram) == c["samples"]
    assert all(low <= high < low * 1.01 + 1 for low, high, _ in histogram)
    assert after > before, "the kernel counted no listen overflow"
    assert report["connects_over_1s"] > 0, histogram
    assert report["connects_over_1s"] == sum(n for low, _, n in histogram if low >= 900_000)
    assert report["connects_over_3s"] == sum(n for low, _, n in histogram if low >= 2_900_000)
    if over == "3s":
        assert report["connects_over_3s"] > 0, histogram
    # Every slow connect is a whole number of SYN retransmission timeouts.
    for low, high, count in histogram:
        if low >= 900_000:
            assert abs(low / 1e6 - round(low / 1e6)) < 0.2, histogram
    assert report["connect_burst_limit"] == (512 if engine == "events" else None)


def test_connect_times_of_a_prompt_server_are_short(recorder):
    srv = recorder(service="echo")
    code, report, err, _ = run("--port", srv.port, "--clients", 5, "--requests", 1, "--service", "echo",
                               "--idle", 3, "--bad", 2)
    assert code == 0, err
    c = report["connect_us"]
    assert c["samples"] == 10  # active, idle and bad
    assert 0 < c["p50"] <= c["p90"] <= c["p99"] <= c["max"] < 500_000
    assert report["connects_over_1s"] == report["connects_over_3s"] == 0


# ------------------------------------------------------------ Little's law

def little(report):
    return report["completed_rps"] * report["latency_us"]["mean"] / 1e6


def test_littles_law_counts_only_what_the_latencies_measure(recorder):
    """A server that holds its replies for the first 0.3 s leaves the 250 exchanges of a 0.25 s
    warm-up in flight after it: the latencies leave them out, so the in-flight count does too
    (counted, they made the mean 28.7 against completed_rps x the latency mean's 4.4), and Little's
    law holds.  Notebook 06's threaded server, started with a backlog at its warm-up's end, read 1.76."""
    srv = recorder(service="echo", hold=0.3)
    code, report, err, _ = run("--port", srv.port, "--clients", 50, "--rate", 1000, "--duration", 1,
                               "--service", "echo", "--arrivals", "even", "--warmup", "0.25s")
    assert code == 0, err
    assert report["warmup"]["excluded"] == 250 and report["requests_ok"] == 1000, report["warmup"]
    assert report["inflight"]["mean"] == pytest.approx(little(report), rel=0.25), (report["inflight"], little(report))


@pytest.mark.parametrize("threads, san", [(1, False), (2, True)])
def test_littles_law_holds_below_saturation(recorder, threads, san):
    """2000 requests/s over 50 connections for 2 s, to a server that answers
    each after 5 ms: about 10 exchanges in flight.  The mean of the 10 ms
    samples agrees with completed_rps x mean latency within 15%, however late a busy machine
    delivers the plan (Little's law holds for any arrival pattern)."""
    srv = recorder(service="echo", delay=0.005)
    code, report, err, _ = run("--port", srv.port, "--clients", 50, "--rate", 2000, "--duration", 2,
                               "--service", "echo", "--threads", threads, san=san)
    assert code == 0, err
    flight = report["inflight"]
    # sampled every 10 ms by each event loop while the run lasts, never more often: as many
    # samples as the run's length allows (201 over 2.01 s here; a busy machine's run lasts
    # longer: 627 with a spinner on each CPU), a few more for its first and last moments
    assert flight["interval_ms"] == 10 and 1 <= flight["samples"] <= threads * (report["elapsed_s"] * 100 + 5)
    assert flight["max_exact"] == (threads == 1)
    # each reply comes 5 ms after its request or later: at least completed_rps x 5 ms in flight
    assert flight["max"] >= flight["mean"] >= 0.85 * report["completed_rps"] * 0.005
    # every planned exchange answered, and completed_rps is what it says it is (a busy machine
    # may deliver the plan a little late or in a burst: 2,000/s is the plan, not a guarantee)
    assert report["requests_ok"] == report["requests_planned"] == 4000, report
    measured = report["requests_ok"] - report["warmup"]["excluded"]
    assert report["completed_rps"] == pytest.approx(measured / report["measured_window_s"], rel=1e-4)
    assert flight["mean"] == pytest.approx(little(report), rel=0.15)
    # the plan's 4,000 exchanges in 20 batches of 200 (g x 20 / 4,000), whatever thread
    # answered each: the threads' batches add up, and so do their sums to the run's mean
    batches = report["latency_batches"]
    samples = report["latency_us"]["samples"]
    assert sum(count for count, _ in batches) == samples and len(batches) == 20
    if samples == report["requests_planned"] == 4000:
        assert [count for count, _ in batches] == [200] * 20
    assert sum(count * mean for count, mean in batches) / samples == \
        pytest.approx(report["latency_us"]["mean"], abs=0.01)


def test_inflight_is_sampled_not_derived_from_latencies(recorder):
    """Exchanges that never complete have no latency, but they are in flight
    while they wait: one connection of ten to a server that never answers it
    holds ~20 exchanges due (rate/clients per s, queued behind the first) for
    its 1 s timeout.  The sampled mean exceeds completed_rps x latency by
    about that much; a mean computed from the latencies could not."""

    class Deaf(Recorder):
        def serve(self, conn, index):
            if index == 0:
                self.stopping.wait(30)  # the first connection gets nothing back
                conn.close()
                return
            super().serve(conn, index)

    srv = Deaf(service="echo")
    try:
        code, report, err, _ = run("--port", srv.port, "--clients", 10, "--rate", 200, "--duration", 2,
                                   "--service", "echo", "--timeout", 1, "--threads", 1)
    finally:
        srv.stop()
    assert code == 1 and report["errors"] == {"ETIMEDOUT": 1}
    # The deaf connection: 20 exchanges due per second, all unanswered for 1 s:
    # on average ~10 in flight over that second, ~5 over the 2 s run.
    excess = report["inflight"]["mean"] - little(report)
    assert 2 < excess < 10, (report["inflight"], little(report))


# -------------------------------------------------- beyond saturation

@pytest.mark.parametrize("model, san", [("iterative", False), ("threaded", True)])
def test_an_open_loop_far_beyond_saturation_ends_in_bounded_time(model, san):
    """500,000 requests/s for 1 s: the run still ends by the last due time +
    --timeout, and says what happened to every planned exchange."""
    duration, timeout = 1, 2
    with lab_server(model, "echo") as port:
        code, report, err, wall = run("--port", port, "--clients", 10, "--rate", 500_000,
                                      "--duration", duration, "--timeout", timeout,
                                      "--service", "echo", "--threads", 1, san=san)
    assert code == 1
    assert wall < duration + timeout + 3
    assert report["elapsed_s"] < duration + timeout + 1
    assert report["run_deadline_s"] == pytest.approx(duration + timeout, abs=0.01)
    planned, ok = report["requests_planned"], report["requests_ok"]
    assert planned == 500_000 and 0 < ok < planned
    assert report["requests_failed"] == planned - ok
    assert report["requests_sent"] + report["requests_not_sent"] == planned
    assert report["requests_not_sent"] > planned / 4
    # Sent and never answered: each such connection was lost with ETIMEDOUT.
    assert report["errors"] == {"ETIMEDOUT": report["connections_lost"]}
    assert report["requests_sent"] - ok == report["connections_lost"]
    # Corrected latency counts the backlog; the send-to-reply figure hides it.
    assert report["latency_us"]["max"] > 300_000
    assert report["latency_us"]["mean"] > 20 * report["latency_uncorrected_us"]["mean"]
    assert report["inflight"]["max"] > 1000
    assert report["connections_lost"] > 0
    if model == "iterative":  # one connection at a time: a served one does all its 50,000
        assert ok % 50_000 == 0 or report["ended_at_deadline"]
