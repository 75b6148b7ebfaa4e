"""The load generator's event-driven engine (csrc/loadgen/events*.c, docs/loadgen-events.md): many
connections in one process, open loop with coordinated omission corrected,
warm-up, idle connections, lost connections, and the histogram behind its
percentiles.

Everything runs on 127.0.0.1 and is bounded in time and count.  The failure
cases both engines share (refused, reset, timeouts, bad replies, too many
open files) are in test_loadgen.py, which runs every test with both engines.
LOADGEN_SAN=1 runs these against the ASan + UBSan build too.
"""

import contextlib
import json
import math
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import loadgenproc
import serverproc
from labkit import paths
from loadgenproc import RUN_TIMEOUT, Loadgen
from test_loadgen import ScriptedServer, serve_echo, server  # noqa: F401 (fixture)

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)


@pytest.fixture(scope="module")
def loadgen():
    return Loadgen(loadgenproc.binary(), "events")


# ------------------------------------------------- a single-threaded server

# An echo server in its own process: one thread, selectors (epoll), so it
# holds 10,000 connections, and so a stall stops every connection at once.
# argv: stall_after_requests stall_seconds lifetime_seconds close_silent_seconds
# (64-byte requests; a connection silent that long after its accept is closed).
EVENT_ECHO_SERVER = textwrap.dedent("""
    import resource, selectors, socket, sys, time
    stall_after, stall_s, lifetime, close_silent = map(float, sys.argv[1:5])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sel = selectors.DefaultSelector()
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    listener.setblocking(False)
    sel.register(listener, selectors.EVENT_READ)
    print("listening", listener.getsockname()[1], flush=True)
    received, stalled, end = 0, False, time.monotonic() + lifetime
    silent = {}  # connection -> when it was accepted, until it speaks
    while time.monotonic() < end:
        if close_silent:
            for conn, since in list(silent.items()):
                if time.monotonic() - since > close_silent:
                    del silent[conn]
                    sel.unregister(conn)
                    conn.close()
        for key, _ in sel.select(0.05):
            if key.fileobj is listener:
                for _ in range(256):
                    try:
                        conn, _ = listener.accept()
                    except (BlockingIOError, ConnectionAbortedError):
                        break
                    conn.setblocking(False)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sel.register(conn, selectors.EVENT_READ)
                    silent[conn] = time.monotonic()
                continue
            silent.pop(key.fileobj, None)
            try:
                data = key.fileobj.recv(65536)
            except ConnectionError:
                data = b""
            if not data:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                continue
            received += len(data)
            if stall_after and not stalled and received >= 64 * stall_after:
                stalled = True
                time.sleep(stall_s)  # the whole server stops: a GC pause, a page fault storm
            key.fileobj.sendall(data)
""")


@contextlib.contextmanager
def event_echo_server(stall_after=0, stall_s=0.0, lifetime=60, close_silent=0.0):
    proc = subprocess.Popen([sys.executable, "-c", EVENT_ECHO_SERVER, str(stall_after),
                             str(stall_s), str(lifetime), str(close_silent)],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert line[:1] == ["listening"], f"the test server printed {line!r}"
        yield int(line[1])
    finally:
        proc.kill()
        proc.wait(timeout=5)
        proc.stdout.close()


# ------------------------------------------------------------------ tests

@pytest.mark.parametrize("model", ["threaded", "epoll"])
def test_two_thousand_echo_connections_without_a_failure(loadgen, model):
    with serverproc.running(model, "echo") as srv:
        code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 2000,
                                            "--requests", 5, "--service", "echo", "--size", 256,
                                            "--timeout", 20)
    assert code == 0, err
    assert (report["connections_ok"], report["connections_failed"]) == (2000, 0)
    assert (report["requests_ok"], report["requests_failed"]) == (10_000, 0)
    assert report["errors"] == {}
    assert report["latency_us"]["samples"] == 10_000
    assert sum(count for _, count in report["histogram"]) == 10_000


def descriptors_of(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return 0


def test_ten_thousand_idle_connections_held_beside_an_active_load(loadgen):
    idle, active = 10_000, 10
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < idle + 200:
        pytest.skip("the hard open-file limit is below 10,200 on this machine")
    with event_echo_server() as port:
        proc = subprocess.Popen([*loadgen.argv(), "--port", str(port), "--clients", str(active),
                                 "--idle", str(idle), "--rate", "200", "--duration", "2",
                                 "--service", "echo", "--connect-timeout", "10"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        most_fds, deadline = 0, time.monotonic() + RUN_TIMEOUT
        try:
            while proc.poll() is None:
                assert time.monotonic() < deadline, "the run did not end in time"
                most_fds = max(most_fds, descriptors_of(proc.pid))
                time.sleep(0.05)
            out, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    report = json.loads(out)
    assert proc.returncode == 0, err
    assert most_fds >= idle + active, f"at most {most_fds} descriptors were open at once"
    assert (report["idle_connections"], report["idle_connections_ok"],
            report["idle_connections_failed"]) == (idle, idle, 0)
    assert (report["connections_ok"], report["requests_ok"]) == (active, 400)
    assert report["errors"] == {}


def test_open_loop_shows_the_stall_that_closed_measurement_hides(loadgen):
    """Coordinated omission.  At 1,000 requests/s over 10 connections the
    server stops for 200 ms once.  Measured from the send, only the 10
    requests in flight saw the stall (0.5% of them: p99 hides it); measured
    from when each request was due, the ~200 that should have been sent
    during the stall waited too (10%: p99 shows it)."""
    with event_echo_server(stall_after=800, stall_s=0.2) as port:
        code, report, err = loadgenproc.run(loadgen, "--port", port, "--clients", 10,
                                            "--rate", 1000, "--duration", 2, "--service", "echo")
    assert code == 0, err
    assert report["mode"] == "open" and report["rate_rps"] == 1000
    assert report["requests_ok"] == report["requests_planned"] == 2000
    corrected, uncorrected = report["latency_us"], report["latency_uncorrected_us"]
    assert corrected["samples"] == uncorrected["samples"] == 2000
    assert uncorrected["max"] >= 150_000, "the stall never happened: the test proved nothing"
    assert corrected["p99"] >= 100_000, f"corrected p99 {corrected['p99']} us misses the stall"
    assert uncorrected["p99"] < 50_000, f"uncorrected p99 {uncorrected['p99']} us"
    assert corrected["max"] >= uncorrected["max"]


def test_warmup_by_count_is_excluded(loadgen, server):
    srv = server(serve_echo)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 4,
                                        "--requests", 50, "--service", "echo", "--warmup", 30)
    assert code == 0, err
    assert report["requests_ok"] == 200
    assert report["warmup"] == {"seconds": None, "requests": 30, "excluded": 30}
    assert report["latency_us"]["samples"] == report["latency_uncorrected_us"]["samples"] == 170
    assert sum(count for _, count in report["histogram"]) == 170


def test_warmup_by_time_excludes_what_was_due_in_it(loadgen, server):
    """Open loop: exchange g is due at g / rate, so at 500/s the first 0.4 s
    hold exactly exchanges 0..199."""
    srv = server(serve_echo)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 5,
                                        "--rate", 500, "--duration", 1, "--service", "echo",
                                        "--warmup", "0.4s")
    assert code == 0, err
    assert report["requests_ok"] == 500
    assert (report["requests_per_client"], report["duration_s"]) == (None, 1)
    assert report["warmup"] == {"seconds": 0.4, "requests": None, "excluded": 200}
    assert report["latency_us"]["samples"] == 300
    # the halves (and the 20 batches) divide what the warm-up leaves: exchanges 200..349 and 350..499
    assert [sum(count for _, count in half) for half in report["histogram_halves"]] == [150, 150]
    assert [count for count, _ in report["latency_batches"]] == [15] * 20


def test_lost_connections_are_counted_and_the_others_go_on(loadgen, server):
    """Every second connection is reset by the server when its 4th request
    arrives; the other connections finish all their exchanges."""
    accepted = []
    lock = threading.Lock()

    def serve_then_reset_every_second(conn):
        with lock:
            accepted.append(conn)
            doomed = len(accepted) % 2 == 0
        for answered in range(5):
            data = b""
            while len(data) < 64:
                chunk = conn.recv(64 - len(data))
                if not chunk:
                    return
                data += chunk
            if doomed and answered == 3:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                return
            conn.sendall(data)

    srv = server(serve_then_reset_every_second)
    code, report, _ = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 10,
                                      "--requests", 5, "--service", "echo", "--timeout", 5)
    assert code == 1
    assert report["errors"] == {"ECONNRESET": 5}
    assert (report["connections_ok"], report["connections_lost"]) == (10, 5)
    assert (report["requests_ok"], report["requests_failed"]) == (5 * 5 + 5 * 3, 10)


def test_idle_connections_closed_by_the_server_are_counted(loadgen):
    """A server that closes every connection silent for 0.5 s: the idle ones
    are lost, counted apart and by name; the active ones go on."""
    with event_echo_server(close_silent=0.5) as port:
        code, report, _ = loadgenproc.run(loadgen, "--port", port, "--clients", 2, "--idle", 5,
                                          "--rate", 20, "--duration", 1.5, "--service", "echo")
    assert code == 1
    assert (report["idle_connections_ok"], report["idle_connections_failed"]) == (0, 5)
    assert report["errors"] == {"EOF": 5}
    assert (report["requests_ok"], report["requests_failed"], report["connections_lost"]) == (30, 0, 0)


def test_both_engines_print_the_same_keys(server):
    srv = server(serve_echo)
    binary, reports = loadgenproc.binary(), {}
    for engine in ("threads", "events"):
        code, reports[engine], err = loadgenproc.run(Loadgen(binary, engine), "--port", srv.port,
                                                     "--clients", 3, "--requests", 4,
                                                     "--service", "echo")
        assert code == 0, err
    threads, events = reports["threads"], reports["events"]
    assert threads.keys() == events.keys()
    for nested in ("latency_us", "latency_uncorrected_us", "warmup", "rusage"):
        assert threads[nested].keys() == events[nested].keys()
    assert (threads["latency_source"], events["latency_source"]) == ("exact", "histogram")
    assert threads["percentile_precision"] == 0 < events["percentile_precision"] <= 0.01


@pytest.mark.parametrize("args, complaint", [
    (["--engine", "fibers"], "--engine 'fibers'"),
    (["--rate", 100], "--rate needs --engine events"),
    (["--idle", 10], "--idle needs --engine events"),
    (["--warmup", "1s"], "--warmup needs --engine events"),
    (["--engine", "events", "--rate", 0], "--rate '0'"),
    (["--engine", "events", "--duration", 1], "--duration and --requests"),
    (["--engine", "events", "--warmup", "1.5"], "seconds need an 's'"),
    (["--engine", "events", "--idle", -1], "--idle '-1'"),
    (["--engine", "events", "--rate", 100, "--arrivals", "bursty"], "--arrivals 'bursty': expected even or poisson"),
    (["--engine", "events", "--rate", 1000, "--clients", 3, "--requests", 10_000_000, "--arrivals", "poisson"],
     "at most 20000000 requests"),
])
def test_bad_event_arguments_exit_2_with_a_message(args, complaint):
    code, report, err = loadgenproc.run(loadgenproc.binary(), "--port", 9, "--clients", 2,
                                        "--requests", 1, *args)
    assert (code, report) == (2, None)
    assert complaint in err


def test_duration_needs_a_rate():
    code, _, err = loadgenproc.run(loadgenproc.binary(), "--engine", "events", "--port", 9,
                                   "--clients", 2, "--duration", 1)
    assert code == 2 and "--duration needs --rate" in err


def test_refuses_more_idle_connections_than_open_files_allow(loadgen, server):
    def low_nofile():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    srv = server(serve_echo)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 2,
                                        "--requests", 1, "--idle", 500, preexec_fn=low_nofile)
    assert (code, report) == (2, None)
    assert srv.accepted == 0, "it refused before connecting anything"
    assert "connections (clients + idle) fit" in err


# ------------------------------------------------------------ the histogram

HISTOGRAM_PROBE = r"""
#include "loadgen/histogram.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Reads values (one per line), prints the count, max and the percentiles
 * asked for on the command line; then checks every bucket's bounds. */
int main(int argc, char **argv)
{
    static struct histogram h;
    hist_init(&h);
    uint64_t v;
    while (scanf("%" SCNu64, &v) == 1)
        hist_record(&h, v);
    printf("%" PRIu64 " %" PRIu64 "\n", h.total, h.max);
    for (int i = 1; i < argc; i++)
        printf("%" PRIu64 "\n", hist_percentile(&h, atof(argv[i])));
    for (size_t b = 0; b + 1 < HIST_BUCKETS; b++) {
        uint64_t low = hist_bucket_low(b), high = hist_bucket_high(b);
        if (hist_bucket(low) != b || hist_bucket(high) != b || hist_bucket_low(b + 1) != high + 1
            || (double)(high - low) > (double)low / 128.0) {
            printf("bad bucket %zu: %" PRIu64 "..%" PRIu64 "\n", b, low, high);
            return 1;
        }
    }
    return 0;
}
"""

PERCENTILES = [1, 10, 50, 90, 99, 99.9, 99.99, 100]


@pytest.fixture(scope="module")
def histogram_probe(tmp_path_factory):
    """A tiny program over csrc/loadgen/histogram.c, built with the lab's
    flags (and the sanitizers with LOADGEN_SAN=1)."""
    tmp = tmp_path_factory.mktemp("histogram")
    (tmp / "probe.c").write_text(HISTOGRAM_PROBE)
    flags = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror"]
    if os.environ.get("LOADGEN_SAN") == "1":
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    built = subprocess.run(["cc", *flags, f"-I{paths.CSRC}", "-o", str(tmp / "probe"),
                            str(tmp / "probe.c"), str(paths.CSRC / "loadgen" / "histogram.c"),
                            "-lm"], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return tmp / "probe"


def nearest_rank(sorted_values, p):
    return sorted_values[max(1, math.ceil(p / 100 * len(sorted_values))) - 1]


@pytest.mark.parametrize("distribution", ["lognormal", "bimodal", "small"])
def test_histogram_percentiles_agree_with_exact_ones(histogram_probe, distribution):
    rng = random.Random(8)
    if distribution == "lognormal":    # latencies around 50 us with a long tail, in ns
        values = [int(rng.lognormvariate(math.log(50_000), 1.0)) for _ in range(200_000)]
    elif distribution == "bimodal":    # fast hits and 200 ms stalls
        values = [rng.randint(20_000, 80_000) if rng.random() < 0.97
                  else rng.randint(190_000_000, 210_000_000) for _ in range(100_000)]
    else:                              # below 256 ns every value has a bucket of its own
        values = [rng.randint(0, 300) for _ in range(10_000)]
    proc = subprocess.run([str(histogram_probe), *map(str, PERCENTILES)],
                          input="\n".join(map(str, values)), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.split("\n")
    total, biggest = map(int, lines[0].split())
    assert (total, biggest) == (len(values), max(values))
    exact = sorted(values)
    for p, reported in zip(PERCENTILES, map(int, lines[1:])):
        truth = nearest_rank(exact, p)
        # The stated precision: 1/256 of the value (the report says 0.0039).
        assert abs(reported - truth) <= truth / 256 + 0.5, (p, reported, truth)
        if truth < 256:
            assert reported == truth
