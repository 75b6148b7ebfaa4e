"""The events engine's --threads N (csrc/loadgen/events.c): N event loops, each with its
own connections, one summary.  Two threads must make exactly the exchanges and bytes
one thread makes, their histograms must add up to the summary's, an open loop must
keep its total rate, and the default is one loop per CPU the process may run on.
LOADGEN_SAN=1 runs these against the ASan + UBSan build too."""

import os

import pytest

import loadgenproc
import serverproc
from loadgenproc import Loadgen

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)


def loadgen_events():
    return Loadgen(loadgenproc.binary(), "events")


def _both(loadgen, port, *args):
    reports = {}
    for threads in (1, 2):
        code, reports[threads], err = loadgenproc.run(loadgen, "--port", port, "--threads", threads, *args)
        assert code == 0, err
        assert reports[threads]["threads"] == threads
    return reports[1], reports[2]


def test_two_threads_match_one():
    """Two threads make exactly the exchanges and bytes one thread makes."""
    with serverproc.running("epoll", "echo") as srv:
        one, two = _both(loadgen_events(), srv.port, "--clients", 41, "--requests", 30, "--service", "echo",
                         "--size", 20000, "--vary", "log", "--seed", 7, "--idle", 9)
    for key in ("requests_ok", "requests_planned", "connections_ok", "body_bytes_ok", "idle_connections_ok"):
        assert one[key] == two[key], key
    assert two["requests_ok"] == 41 * 30 and two["idle_connections_ok"] == 9 and two["errors"] == {}
    # the connections are dealt out: 21 and 20, each thread its share of the exchanges
    assert sorted(part["connections_ok"] for part in two["per_thread"]) == [20, 21]
    assert sorted(part["requests_ok"] for part in two["per_thread"]) == [20 * 30, 21 * 30]


def test_uploads_over_threads_deliver_every_byte():
    with serverproc.running("epoll", "sink") as srv:
        one, two = _both(loadgen_events(), srv.port, "--clients", 6, "--requests", 2, "--service", "sink",
                         "--size", 1 << 20)
    assert one["body_bytes_ok"] == two["body_bytes_ok"] == 12 << 20
    assert one["sink_server_reads_mean"] > 0 and two["sink_server_reads_mean"] > 0


def test_summary_histogram_sums_threads():
    """The summary histogram is the sum of the threads and its percentiles follow."""
    with serverproc.running("epoll", "echo") as srv:
        code, report, err = loadgenproc.run(loadgen_events(), "--port", srv.port, "--threads", 3, "--clients", 30,
                                            "--requests", 200, "--service", "echo")
    assert code == 0, err
    merged = {}
    for part in report["per_thread"]:
        for high_us, count in part["histogram"]:
            merged[high_us] = merged.get(high_us, 0) + count
    assert merged == {high_us: count for high_us, count in report["histogram"]}
    buckets = sorted(merged.items())
    total = sum(merged.values())
    assert total == report["latency_us"]["samples"] == 6000
    for name, p in (("p50", 50), ("p90", 90), ("p99", 99)):
        rank, seen = -(-p * total // 100), 0  # nearest rank
        for high_us, count in buckets:
            seen += count
            if seen >= rank:
                break
        # the summary reports the middle of the bucket the rank falls in: within its width
        assert high_us * (1 - 2 * report["percentile_precision"]) <= report["latency_us"][name] <= high_us, name


def test_an_open_loop_keeps_its_total_rate_over_threads():
    with serverproc.running("epoll", "echo") as srv:
        code, report, err = loadgenproc.run(loadgen_events(), "--port", srv.port, "--threads", 2, "--clients", 8,
                                            "--rate", 3000, "--duration", 2, "--service", "echo")
    assert code == 0, err
    assert report["requests_ok"] == report["requests_planned"] == 6000
    assert abs(report["throughput_rps"] - 3000) <= 0.05 * 3000
    # each thread sent its connections' share: 4 of the 8
    assert [part["requests_ok"] for part in report["per_thread"]] == [3000, 3000]


def test_warmup_by_count_is_counted_once_for_all_threads():
    with serverproc.running("epoll", "echo") as srv:
        code, report, err = loadgenproc.run(loadgen_events(), "--port", srv.port, "--threads", 2, "--clients", 10,
                                            "--requests", 50, "--warmup", 120, "--service", "echo")
    assert code == 0, err
    assert report["warmup"]["excluded"] == 120
    assert report["latency_us"]["samples"] == 500 - 120


def test_threads_default_to_cpus():
    """Threads default to the cpus it may run on and never more than connections."""
    cpus = len(os.sched_getaffinity(0))
    with serverproc.running("epoll", "echo") as srv:
        code, report, err = loadgenproc.run(loadgen_events(), "--port", srv.port, "--clients", 50, "--requests", 2,
                                            "--service", "echo")
        assert code == 0, err
        assert report["threads"] == min(cpus, 50)
        code, report, err = loadgenproc.run(loadgen_events(), "--port", srv.port, "--clients", 50, "--requests", 2,
                                            "--service", "echo", preexec_fn=lambda: os.sched_setaffinity(0, {0}))
        assert code == 0, err
        assert report["threads"] == 1  # pinned to one CPU: one loop
        code, report, err = loadgenproc.run(loadgen_events(), "--port", srv.port, "--clients", 1, "--requests", 2,
                                            "--service", "echo", "--threads", 8)
        assert code == 0, err
        assert report["threads"] == 1 and len(report["per_thread"]) == 1  # one connection: one loop


@pytest.mark.parametrize("args, complaint", [
    (["--threads", 2], "--threads needs --engine events"),
    (["--engine", "events", "--threads", 0], "--threads '0'"),
    (["--engine", "events", "--threads", 5000], "--threads '5000'"),
])
def test_bad_thread_counts_exit_2_with_a_message(args, complaint):
    code, report, err = loadgenproc.run(loadgenproc.binary(), "--port", 9, "--clients", 2, "--requests", 1, *args)
    assert (code, report) == (2, None)
    assert complaint in err
