"""Experiment 3's ground: every model takes uploads from an independent client, the
servers' --expect batches, the load generator's upload mode, and the uploads
experiment's parameters (sizes with units, the byte cap)."""

import math
import os
import socket
import struct
import subprocess
import threading
import time

import pytest

import loadgenproc
import serverproc
from labkit import experiments, params, seeds
from labkit.errors import LabError
from waits import wait_until

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

SESSION_IN_CAP = 16 * 1024  # csrc/services/session.h: one read takes at most this much
UPLOAD_MODELS = [m for m in serverproc.MODELS]


def upload(sock: socket.socket, size: int) -> tuple[int, int]:
    """PUT `size` bytes (sent from a thread, so a big body cannot deadlock); (n, reads) of the OK."""
    body = os.urandom(min(size, 1 << 16)) * (size // (1 << 16)) + os.urandom(size % (1 << 16))
    sender = threading.Thread(target=sock.sendall, args=(b"PUT %d\n" % size + body,))
    sender.start()
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = sock.recv(256)
        assert chunk, f"the server closed the connection after {reply!r}"
        reply += chunk
    sender.join()
    verb, n, reads = reply.split()
    assert verb == b"OK", reply
    return int(n), int(reads)


@pytest.mark.parametrize("model", UPLOAD_MODELS)
def test_every_model_takes_bodies_of_0_1_1mib_and_10mib(model):
    with serverproc.running(model, service="sink") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            for size in (0, 1, 1 << 20, 10 << 20):
                n, reads = upload(sock, size)
                assert n == size
                # One read takes at most the session's 16 KiB: an exact lower bound.
                assert math.ceil(size / SESSION_IN_CAP) <= reads <= size, (size, reads)


@pytest.mark.parametrize("model", UPLOAD_MODELS)
def test_pipelined_puts_on_one_connection_are_answered_in_order(model):
    with serverproc.running(model, service="sink") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sizes = [5, 0, 70_000, 1, 300_000]
            sock.sendall(b"".join(b"PUT %d\n" % s + b"z" * s for s in sizes))
            replies = b""
            while replies.count(b"\n") < len(sizes):
                chunk = sock.recv(4096)
                assert chunk, replies
                replies += chunk
            assert [int(line.split()[1]) for line in replies.splitlines()] == sizes


@pytest.mark.parametrize("model", UPLOAD_MODELS)
def test_a_body_cut_short_by_a_reset_leaves_the_server_serving_others(model):
    with serverproc.running(model, service="sink") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as other:
            cut = socket.create_connection(("127.0.0.1", server.port))
            cut.sendall(b"PUT 1048576\n" + b"h" * 300_000)
            cut.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            cut.close()  # linger 0: an RST in the middle of the body
            time.sleep(0.1)
            assert upload(other, 1 << 20) [0] == 1 << 20
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as late:
            assert upload(late, 1000)[0] == 1000


# ---------------------------------------------------------------------------
# --expect N --expect-timeout S


def _batch_lines(server, count: int, within: float = 5.0) -> list[str]:
    def reports():
        lines = [line for line in server.stdout_lines() if line.startswith("expect: ")]
        return lines if len(lines) >= count else None
    lines = wait_until(reports, within)
    if lines is None:
        raise AssertionError(f"fewer than {count} batch reports: {server.stdout_lines()}")
    return lines


@pytest.mark.parametrize("model", ["threaded", "busypoll", "aio", "select", "epoll"])
def test_expect_reports_each_batch_with_its_exact_bytes(model):
    with serverproc.running(model, service="sink", args=["--expect", "3", "--expect-timeout", "30"]) as server:
        for size in (100, 2000, 30_000):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                upload(sock, size)
        line = _batch_lines(server, 1)[0]
        head = len(b"PUT 100\n") + len(b"PUT 2000\n") + len(b"PUT 30000\n")
        assert line.startswith(f"expect: batch 1: 3 of 3 connections done, {32_100 + head} bytes in "), line
        assert line.endswith(" ms")


def test_a_short_batch_is_reported_at_its_deadline_and_the_server_goes_on():
    with serverproc.running("threaded", service="sink", args=["--expect", "5", "--expect-timeout", "0.5"]) as server:
        started = time.monotonic()
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                upload(sock, 10)
        line = _batch_lines(server, 1)[0]
        assert 0.4 < time.monotonic() - started < 3
        assert line.startswith("expect: batch 1: timed out after 0.5 s: "), line
        assert "2 of 5 connections arrived, 2 done" in line
        assert "fewer clients came than --expect said" in server.stderr()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            assert upload(sock, 10) == (10, 1)  # the next batch begins


@pytest.mark.parametrize("model", ["fork", "prefork", "select_fork", "epoll_workers"])
def test_models_serving_in_child_processes_refuse_expect(model):
    result = subprocess.run([str(serverproc.bin_dir() / model), "--expect", "3"], capture_output=True,
                            text=True, timeout=5)
    assert result.returncode == 2
    assert "serves in child processes" in result.stderr and "--help" in result.stderr


@pytest.mark.parametrize("args, says", [
    (["--expect", "0"], "--expect needs a connection count"),
    (["--expect-timeout", "5"], "--expect-timeout needs --expect N"),
    (["--expect", "3", "--expect-timeout", "soon"], "--expect-timeout needs seconds"),
])
def test_bad_expect_flags_are_refused(args, says):
    result = subprocess.run([str(serverproc.bin_dir() / "epoll"), *args], capture_output=True, text=True, timeout=5)
    assert result.returncode == 2 and says in result.stderr


# ---------------------------------------------------------------------------
# the load generator's uploads


def loadgen(port: int, *args: str) -> dict:
    """The report of a run against the sink service on `port` (loadgenproc.ok: exit 0)."""
    return loadgenproc.ok(loadgenproc.binary(), "--port", port, "--service", "sink", *args)


def test_loadgen_draws_the_same_sizes_from_the_same_seed_in_both_engines():
    with serverproc.running("epoll", service="sink") as server:
        runs = {(engine, seed): loadgen(server.port, "--clients", "20", "--requests", "1", "--size", "1048576",
                                        "--vary", "log", "--seed", str(seed), "--engine", engine)
                for engine in ("events", "threads") for seed in (1, 2)}
    bytes_of = {key: run["body_bytes_ok"] for key, run in runs.items()}
    assert bytes_of[("events", 1)] == bytes_of[("threads", 1)]
    assert bytes_of[("events", 2)] == bytes_of[("threads", 2)]
    assert bytes_of[("events", 1)] != bytes_of[("events", 2)]
    # 20 sizes, each from 1 KiB to 1 MiB
    assert 20 * 1024 <= bytes_of[("events", 1)] < 20 * 1048576
    assert runs[("events", 1)]["vary"] == "log" and runs[("events", 1)]["seed"] == 1


def test_loadgen_reports_transfer_time_and_goodput_of_the_bodies():
    with serverproc.running("epoll", service="sink") as server:
        run = loadgen(server.port, "--clients", "4", "--requests", "2", "--size", "100000", "--engine", "events")
    assert run["body_bytes_ok"] == 4 * 2 * 100000
    assert 0 < run["transfer_s"] <= run["elapsed_s"]
    assert run["goodput_gbit_s"] == pytest.approx(800000 * 8 / run["transfer_s"] / 1e9, rel=1e-6)
    assert run["sink_server_reads_mean"] >= math.ceil(100000 / SESSION_IN_CAP)


def test_loadgen_refuses_vary_for_top_and_an_unknown_rule():
    for args, says in ((["--service", "top", "--vary", "log"], "top requests have none"),
                       (["--service", "sink", "--vary", "gauss"], "expected none, uniform or log")):
        code, _, stderr = loadgenproc.run(loadgenproc.binary(), "--port", 9, "--clients", 1, "--requests", 1, *args,
                                          timeout=5)
        assert code == 2 and says in stderr


# ---------------------------------------------------------------------------
# the experiment's parameters


@pytest.mark.parametrize("given, says", [
    ("10", "has no unit"), ("10XB", "not a number with a unit"), ("MB", "has no number"),
    ("1.5B", "not a whole number of bytes"), ("300MB", "outside 1B to 256MB"),
])
def test_bad_size_is_refused(given, says):
    """A size without a unit or out of range is refused saying what to give."""
    with pytest.raises(LabError) as refused:
        experiments.resolve("uploads", "quick", size=given)
    assert says in refused.value.what and "10MB" in refused.value.fix


def test_sizes_read_with_their_units_and_are_written_back_the_same():
    assert params.Sizes().check("size", "1KB, 10kb 1.5MB,10MiB") == [1024, 10240, 1572864, 10485760]
    assert [params.size_text(s) for s in (1024, 1572864, 10485760, 1000)] == ["1KB", "1.5MB", "10MB", "1000B"]


def test_zero_connections_is_refused():
    with pytest.raises(LabError, match="connection count 0 is below 1"):
        experiments.resolve("uploads", "quick", clients=[0, 10])


def test_points_over_the_byte_cap_are_left_out_and_named():
    chosen = experiments.resolve("uploads", "full", models=["epoll"], clients=[1, 1000], size="1MB, 10MB",
                                 max_bytes="2GB")
    assert sorted((p["clients"], p["size"]) for p in chosen.grid()) == [
        (1, 1 << 20), (1, 10 << 20), (1000, 1 << 20)]
    [(point, why)] = chosen.left_out()
    assert (point["clients"], point["size"]) == (1000, 10 << 20)
    assert why == "1,000 x 10MB = 10000MB is over max_bytes 2GB"


def test_a_grid_with_every_point_over_the_cap_is_refused():
    with pytest.raises(LabError, match="every grid point is left out"):
        experiments.resolve("uploads", "full", clients=[10000], size="10MB", max_bytes="1GB")


def test_the_server_is_told_how_many_connections_to_expect():
    chosen = experiments.resolve("uploads", "quick")
    uploads = chosen.experiment
    point = chosen.grid()[-1]
    argv = uploads.server_spec(point).argv(0)
    assert argv[argv.index("--expect") + 1] == str(point["clients"])
    load = uploads.load_spec(point).argv(1234)
    assert load[load.index("--size") + 1] == str(point["size"]) and "--expect" not in load


def test_seed_002_numbers_transcribed():
    """Seed 002 numbers are transcribed and less than one is missing not zero."""
    table = seeds.table("002")
    one = table[(table["model"] == "aio") & (table["clients"] == 100) & (table["size"] == 10 << 20)
                & (table["placement"] == "same_host")]
    assert one["value"].tolist() == [0.571] and one["printed"].tolist() == ["571 ms"]
    tiny = table[(table["model"] == "busypoll") & (table["clients"] == 1) & (table["size"] == 1024)]
    assert tiny["value"].isna().all() and set(tiny["printed"]) == {"<1 ms"}
    assert set(table["model"]) == {"threaded", "busypoll", "aio", "select"}


def test_too_many_connections_refused():
    """More connections than the open file limit holds is refused before the run."""
    from labkit import system

    hard = system.nofile_limit()[1]
    with pytest.raises(LabError) as refused:
        experiments.resolve("uploads", "quick", clients=[1, hard + 10])
    assert "open" in refused.value.what and str(hard + 10) in refused.value.what.replace(",", "")
    assert refused.value.fix
