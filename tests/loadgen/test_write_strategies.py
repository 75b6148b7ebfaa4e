"""The load generator's write strategies (seed 004): every byte arrives, the reads the
server reports match an independent count, the write-family system calls are exactly
what each strategy promises (counted by perf's syscall tracepoints, not by the lab),
and Nagle's algorithm meets delayed ACK when TCP_NODELAY is off."""

import json
import socket
import subprocess
import threading

import pytest

import loadgenproc
import serverproc

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

STRATEGIES = ["many", "writev", "single", "msg_more", "cork"]
WRITE_FAMILY = ["write", "writev", "sendto", "sendmsg"]


def loadgen_argv(port: int, *args: str) -> list[str]:
    """One client of the sink service on `port`: loadgenproc.ok runs it, perf wraps it."""
    return [str(loadgenproc.binary()), "--port", str(port), "--service", "sink", "--clients", "1", *args]


class CountingSink:
    """An independent sink server (not the lab's C): one connection, PUT bodies read with
    recv(16 KiB), counting the recv calls that delivered body bytes and the bytes."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.bodies: list[tuple[int, int]] = []  # (bytes received, reads) per PUT
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        with conn:
            pending = b""
            while True:
                while b"\n" not in pending:
                    chunk = conn.recv(16384)
                    if not chunk:
                        return
                    pending += chunk
                line, pending = pending.split(b"\n", 1)
                size = int(line.split()[1])
                got, reads = len(pending[:size]), 1 if pending[:size] else 0
                pending = pending[size:]
                while got < size:
                    chunk = conn.recv(min(16384, size - got))
                    assert chunk, "the client closed mid-body"
                    got += len(chunk)
                    reads += 1
                self.bodies.append((got, reads))
                conn.sendall(b"OK %d %d\n" % (got, reads))

    def close(self):
        self.thread.join(timeout=10)
        self.listener.close()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_byte_arrives_and_the_reported_reads_are_the_servers_own(strategy):
    sink = CountingSink()
    try:
        report = loadgenproc.ok(*loadgen_argv(sink.port, "--requests", "2", "--strategy", strategy, "--nbufs", "15",
                                              "--bufsize", "100", "--repetitions", "2000"))
    finally:
        sink.close()
    assert sink.bodies and all(got == 2000 * 15 * 100 for got, _ in sink.bodies)
    assert report["requests_ok"] == 2 and report["body_bytes_ok"] == 2 * 2000 * 1500
    assert report["server_reads_per_repetition"] == pytest.approx(sum(r for _, r in sink.bodies) / 4000)


def _perf_write_calls(argv: list[str]) -> tuple[int, dict]:
    """perf stat's count of write-family system calls made by argv, and its JSON summary."""
    events = ",".join(f"syscalls:sys_enter_{call}" for call in WRITE_FAMILY)
    done = subprocess.run(["perf", "stat", "-x", ",", "-e", events, "--", *argv], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    counts = [line.split(",") for line in done.stderr.splitlines() if "syscalls:sys_enter_" in line]
    assert len(counts) == len(WRITE_FAMILY) and all(c[0].isdigit() for c in counts), (
        f"perf could not count the syscall tracepoints here:\n{done.stderr[-800:]}")
    return sum(int(c[0]) for c in counts), json.loads(done.stdout)


@pytest.mark.parametrize("strategy, per_repetition", [("many", 15), ("writev", 1), ("single", 1),
                                                      ("msg_more", 15), ("cork", 15)])
def test_write_calls_per_repetition_are_exact_by_perfs_count(strategy, per_repetition):
    with serverproc.running("threaded", service="sink") as server:
        counted, report = _perf_write_calls(loadgen_argv(server.port, "--requests", "2", "--strategy", strategy,
                                                         "--nbufs", "15", "--bufsize", "100",
                                                         "--repetitions", "1000"))
    assert report["write_calls"] == per_repetition * 2 * 1000
    assert report["write_calls_per_repetition"] == per_repetition
    # perf saw every one of them, the request lines written apart, and the report's own
    # few writes to stdout and stderr: nothing else.
    extra = counted - report["write_calls"] - report["head_write_calls"]
    assert 0 <= extra <= 4, (counted, report["write_calls"], report["head_write_calls"])


@pytest.mark.parametrize("strategy, nodelay, slow", [("many", "off", True), ("many", "on", False),
                                                     ("single", "off", False), ("writev", "off", False)])
def test_nagle_meets_delayed_ack_only_for_two_writes_without_nodelay(strategy, nodelay, slow):
    """write-write-read: the body waits for the ACK of the request line (Nagle), which the
    server delays (~40 ms on Linux) because it has nothing to say yet."""
    with serverproc.running("threaded", service="sink") as server:
        report = loadgenproc.ok(*loadgen_argv(server.port, "--requests", "6", "--strategy", strategy, "--nbufs", "1",
                                              "--bufsize", "100", "--nodelay", nodelay))
    p50_ms = report["latency_us"]["p50"] / 1000
    if slow:
        assert p50_ms >= 30, p50_ms
    else:
        assert p50_ms < 5, p50_ms


@pytest.mark.parametrize("args, says", [
    (["--strategy", "often", "--nbufs", "1", "--bufsize", "1"], "expected many, writev, single, msg_more or cork"),
    (["--strategy", "many", "--nbufs", "1024", "--bufsize", "2000"], "over the 1048576-byte cap"),
    (["--strategy", "many", "--nbufs", "15", "--bufsize", "100", "--repetitions", "0"],
     "--repetitions '0': expected a whole number from 1"),
    (["--strategy", "many"], "--strategy needs --nbufs N and --bufsize B"),
    (["--nbufs", "15", "--bufsize", "100"], "add --strategy"),
    (["--strategy", "many", "--nbufs", "2", "--bufsize", "2", "--engine", "events"], "drop --engine events"),
    (["--nodelay", "maybe"], "--nodelay 'maybe': expected on or off"),
])
def test_bad_strategy_arguments_are_refused_clearly(args, says):
    done = subprocess.run(loadgen_argv(9, "--requests", "1", *args), capture_output=True, text=True, timeout=5)
    assert done.returncode == 2 and says in done.stderr, done.stderr


@pytest.mark.parametrize("given, says", [
    ({"shape": "1024x2048"}, "outside the load generator's caps"),
    ({"shape": "15-100"}, "is not N buffers x B bytes"),
    ({"repetitions": 0}, "repetitions must be at least 1"),
    ({"strategy": "many, often"}, "unknown value 'often' for strategy"),
    ({"nodelay": "maybe"}, "unknown value 'maybe' for nodelay"),
])
def test_the_experiment_refuses_bad_parameters_saying_what_to_give(given, says):
    from labkit import experiments
    from labkit.errors import LabError

    with pytest.raises(LabError) as refused:
        experiments.resolve("write_strategies", "quick", **given)
    assert says in refused.value.what and refused.value.fix
