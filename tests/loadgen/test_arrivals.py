"""The open loop's arrivals (csrc/loadgen/arrivals.c) and the spin service's declared
service times (exchange.c), seen from a server that is not the lab's own: a Python
server that answers each request and keeps the time it asks for.

Counts are exact (every request of rate x duration arrives once, and is sent once).  When
each request was sent is read off the wire (tests/wire_capture.py: the kernel stamps each
segment as the generator transmits it), not from the server's reads: a server thread held
off its CPU reads the requests that queued meanwhile microseconds apart (on a busy machine,
gaps of 15 to 35 us in a row at 500/s, and an interquartile range of the Poisson gaps of
2.07 times their median, where exponential gaps have 1.58).
The requests go over ten connections: a connection holds one exchange at a time, so a
reply the server is late with holds back that connection's next request (over one, the
second request of the run left up to 13 ms late on a quiet machine, behind the server
thread's start, and up to 174 ms with the CPUs busy); over ten, each sends every 20 ms on
average.  What the machine cannot move is checked: that the schedule is the process it names
(its counts in windows of 5 ms have a variance over their mean, the index of dispersion, of
1 for Poisson arrivals, and 2 or 3 in each window for even ones) and that the generator keeps
to it (half the requests leave within 1 ms of their due time).  The spin service itself (the
server answers after the time asked) is in test_protocol, for every model, and that it stays
runnable all that time, here, for epoll."""

import math
import statistics
import threading
import time
from pathlib import Path

import pytest

import serverproc
from labkit import schedule as schedule_module
from serverproc import Client
import loadgenproc
from loadgenproc import Loadgen
from test_loadgen import read_line, server  # noqa: F401 (fixture)
from wire_capture import Capture

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

RATE, DURATION = 500, 2.0  # 1,000 requests, 2 ms apart on average
CLIENTS = 10  # each connection's next request 20 ms after its last, on average


class Stamps:
    """What the server saw: each request's arrival time and the microseconds it asked for."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen: list[tuple[float, int]] = []

    def serve(self, conn):
        pending = b""
        while True:
            line, pending = read_line(conn, pending)
            if line is None:
                return
            with self.lock:
                self.seen.append((time.monotonic(), int(line.split()[1])))
            conn.sendall(b"OK %s\n" % line.split()[1])

    def spins(self) -> list[int]:
        return sorted(us for _, us in self.seen)


def offered(server, arrivals: str, *extra, seed: int = 1) -> tuple[dict, Stamps, Capture]:
    """The generator's report, what the server read, and what the generator sent (the wire)."""
    stamps = Stamps()
    srv = server(stamps.serve)
    with Capture(srv.port) as wire:
        code, report, err = loadgenproc.run(Loadgen(loadgenproc.binary(), "events"), "--port", srv.port,
                                            "--clients", CLIENTS, "--service", "spin", "--rate", RATE,
                                            "--duration", DURATION, "--arrivals", arrivals, "--seed", seed, *extra)
    assert code == 0, err
    return report, stamps, wire


def cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values)


WINDOW = 0.005  # s: 2.5 requests in each on average, 400 windows


def schedule(arrivals: str, seed: int = 1) -> list[float]:
    """When each of the run's requests is due, in seconds from its start, computed from the
    recipe csrc/loadgen/arrivals.c states, not from its code (labkit.schedule)."""
    return schedule_module.due_times_s(arrivals, RATE, round(RATE * DURATION), seed)


def test_schedule_is_monotonic_and_seeded():
    """labkit.schedule's recipe: even gaps exact to the ns, Poisson gaps of the mean asked (2,000
    gaps: the mean's sd is 2.2%), the same seed the same schedule; the generator's own schedule
    is held against it in test_loadgen_batches (the count due in the measured window)."""
    assert schedule_module.due_times_ns("even", 1000, 5) == [0, 1_000_000, 2_000_000, 3_000_000, 4_000_000]
    due = schedule_module.due_times_ns("poisson", 1000, 2001, 3)
    assert due[0] == 0 and due == sorted(due) and all(isinstance(at, int) for at in due)
    assert due[-1] / 2000 == pytest.approx(1e6, rel=0.1)
    assert schedule_module.due_times_ns("poisson", 1000, 2001, 3) == due != schedule_module.due_times_ns(
        "poisson", 1000, 2001, 4)
    assert schedule_module.due_times_s("poisson", 1000, 2001, 3) == [at / 1e9 for at in due]
    with pytest.raises(ValueError, match="arrivals"):
        schedule_module.due_times_ns("bursty", 1000, 5)


def dispersion(times: list[float]) -> float:
    """The arrivals' counts in the whole windows of WINDOW s from the first arrival to the
    last: their variance over their mean.  Not to DURATION: the generator plans rate x
    duration arrivals, so a Poisson schedule ends wherever its 1,000th gap does (2 s, give or
    take 63 ms), and windows past its end would count as empty."""
    counts = [0] * int((times[-1] - times[0]) / WINDOW)
    for t in times:
        window = int((t - times[0]) / WINDOW)
        if window < len(counts):
            counts[window] += 1
    return statistics.pvariance(counts) / statistics.fmean(counts)


@pytest.mark.parametrize("arrivals", ["poisson", "even"])
def test_arrivals_reach_the_server_as_the_process_they_name(server, arrivals):
    """The schedule for seed 1 is the process it names, and the generator keeps to it: the
    n-th request sent is the n-th due, and half of them leave within 1 ms of their time (its
    timer's granularity; events.c).  Whether the rest leave on time is the machine's load,
    not the generator's: a generator held off its CPU sends what fell due meanwhile at
    once: on a busy machine the counts' index of dispersion on the wire reads as much as
    1.69 where the schedule's is 1.08."""
    report, stamps, wire = offered(server, arrivals)
    assert report["arrivals"] == arrivals and report["mode"] == "open"
    assert len(stamps.seen) == report["requests_ok"] == RATE * DURATION  # every request, once
    assert [line for _, line in wire.sent] == [b"SPIN 0"] * round(RATE * DURATION)  # and sent once
    due = schedule(arrivals)
    gaps = [b - a for a, b in zip(due, due[1:])]
    assert statistics.fmean(gaps) == pytest.approx(1 / RATE, rel=0.1)  # the same mean rate either way
    if arrivals == "poisson":
        # Poisson counts' index over 400 windows: 1, give or take sqrt(2 / 399) = 0.07
        assert 0.8 <= dispersion(due) <= 1.3, dispersion(due)
        below = sum(gap < statistics.fmean(gaps) * math.log(2) for gap in gaps) / len(gaps)
        assert 0.45 <= below <= 0.55, below  # exponential: P(gap < mean x ln 2) = 1/2, the median
    else:
        assert max(gaps) - min(gaps) < 1e-9 and dispersion(due) <= 0.15  # 2 or 3 in each window
    # Each request's delay after its due time, the earliest-sent one's taken as on time
    # (a schedule other than this one drifts tens of ms from it within a few hundred requests)
    offsets = [sent - at for sent, at in zip(wire.times(), due)]
    late_ms = sorted((offset - min(offsets)) * 1000 for offset in offsets)
    assert statistics.median(late_ms) <= 1.0, (
        f"{arrivals}: half of the requests left {statistics.median(late_ms):.2f} ms or more after their due time "
        f"(90th percentile {late_ms[len(late_ms) * 9 // 10]:.2f} ms)")


def test_a_closed_loop_has_no_arrivals_to_speak_of(server):
    stamps = Stamps()
    srv = server(stamps.serve)
    code, report, err = loadgenproc.run(Loadgen(loadgenproc.binary(), "events"), "--port", srv.port, "--clients", 2,
                                        "--requests", 3, "--service", "spin")
    assert code == 0, err
    assert report["arrivals"] is None and report["mode"] == "closed"
    assert stamps.spins() == [0] * 6  # --spin-us defaults to 0: the loop's own cost


def asked(server, *extra, seed: int = 1) -> list[int]:
    """The service times 10 connections x 100 requests asked for (a closed loop: at once)."""
    stamps = Stamps()
    srv = server(stamps.serve)
    code, _, err = loadgenproc.run(Loadgen(loadgenproc.binary(), "events"), "--port", srv.port, "--clients", 10,
                                   "--requests", 100, "--service", "spin", "--seed", seed, *extra)
    assert code == 0, err
    return stamps.spins()


def test_service_times_are_drawn_as_declared_and_the_seed_repeats_them(server):
    assert asked(server, "--spin-us", 300) == [300] * 1000
    spins = asked(server, "--spin-us", 300, "--spin-dist", "exp", seed=7)
    assert statistics.fmean(spins) == pytest.approx(300, rel=0.08)  # 1,000 draws: the mean's sd is 3%
    assert 0.9 <= cv(spins) <= 1.1
    assert asked(server, "--spin-us", 300, "--spin-dist", "exp", seed=7) == spins
    assert asked(server, "--spin-us", 300, "--spin-dist", "exp", seed=8) != spins


def runnable_ns(pid: int) -> int:
    """The time the process's threads spent on a CPU or waiting in a run queue for one, from
    the kernel's scheduler statistics (/proc/PID/task/TID/schedstat: on-CPU ns, run-queue ns,
    slices): all of its time but what it spent asleep."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        on_cpu, waiting, _ = (int(field) for field in (task / "schedstat").read_text().split())
        total += on_cpu + waiting
    return total


def test_the_spin_service_keeps_the_servers_cpu_busy_for_the_time_asked():
    """epoll (one thread): ten requests of 20 ms, pipelined, keep the server runnable for 200 ms
    -- on a CPU or waiting for one, never asleep (the kernel's schedstat) -- and the last reply
    comes no sooner.  How much of that it spent on a CPU is the machine's load (a nice-19
    spinner on every CPU leaves it as little as 150 ms of 200), so that is not asserted."""
    with serverproc.running("epoll", service="spin") as srv, Client(srv.port) as client:
        before, started = runnable_ns(srv.proc.pid), time.monotonic()
        client.send(b"SPIN 20000\n" * 10)
        assert [client.line() for _ in range(10)] == [b"OK 20000"] * 10
        wall = time.monotonic() - started
        runnable = (runnable_ns(srv.proc.pid) - before) / 1e9
    assert wall >= 0.2
    assert runnable >= 0.2 * 0.95, f"the server was runnable {runnable * 1000:.0f} ms of 200 ms of spinning"


def test_point_has_intervals_and_floor():
    """measure.point through ground_truth.measure_floor (SPIN 0, Poisson, 500/s): the row's
    percentiles each lie in their interval where the run's batches give one (labkit.batches),
    and where they do not, the interval is NaN and a verdict says why; the loop's own cost and
    the time outside the queue are measured, not zero."""
    from labkit import ground_truth
    from labkit.procs import Pinning

    floor = ground_truth.measure_floor(Pinning.resolve(None, None, allow_overlap=True), duration=1.0)
    row = floor.row
    assert row["status"] == "ok", row["error"]
    assert floor.measured and floor.overhead_us > 0 and floor.floor_us > 0, floor.why
    assert row["requests_ok"] == ground_truth.FLOOR_RATE * 1.0
    assert row["lat_effective_samples"] > 0
    for p in ("p50", "p99", "p999"):
        if row[f"lat_{p}_confidence"] == row[f"lat_{p}_confidence"]:
            assert row[f"lat_{p}_low_us"] <= row[f"lat_{p}_us"] <= row[f"lat_{p}_high_us"], p
        else:
            assert row[f"lat_{p}_low_us"] != row[f"lat_{p}_low_us"] and f"too_few_for_{p}" in row["verdicts"], p
    assert "too_few_for_p999" in row["verdicts"]  # p99.9 of ~800 requests: never enough
