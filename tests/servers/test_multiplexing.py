"""Experiment 2 (notebook 02): echo_scale and idle_conns, their points measured
against real servers on 127.0.0.1 (small sizes), the failures they must report,
and seed 003's table checked against the report."""

import os
import re
import signal
import threading
import time
from pathlib import Path

import measuring
import psutil
import pytest

from labkit import experiments, launcher, paths, procs, seeds, sweep
from labkit.errors import LabError

REPORTS = Path(os.environ.get("LABKIT_SEED_REPORTS", paths.ROOT.parent / "shared" / "seeds"))
CPUS = sorted(os.sched_getaffinity(0))
PINS = {"server_cpus": [CPUS[0]], "client_cpus": [CPUS[-1]]}

pytestmark = [pytest.mark.measuring, pytest.mark.timeout(120)]


# --- seed 003 -----------------------------------------------------------------------


def test_003_matches_the_reports_observations_table():
    found = sorted(REPORTS.glob("003_*.txt"))
    if not found:
        pytest.skip(f"seed report 003 not found under {REPORTS} (set LABKIT_SEED_REPORTS)")
    header = None
    rows = []
    for line in found[0].read_text().splitlines():
        cells = [cell.strip() for cell in line.split("\t")]
        if cells[1:] == ["Epoll", "Multithread", "Select"]:
            header = cells[1:]
        match = re.fullmatch(r"(\d+) Clients / (\d+) Exchanges", cells[0])
        if header and match and len(cells) == 4:
            rows.append((int(match[1]), int(match[2]), cells[1:]))
    assert header and len(rows) == 4, "expected the 4-row Observations table"

    table = seeds.table("003")
    assert len(table) == 4 * 3
    models = {"Epoll": "epoll", "Multithread": "threaded", "Select": "select"}
    for clients, exchanges, printed_cells in rows:
        for label, printed in zip(header, printed_cells):
            cell = table[(table.model == models[label]) & (table.clients == clients)
                         & (table.exchanges == exchanges)]
            assert len(cell) == 1, (label, clients, exchanges)
            assert cell["seed_label"].iloc[0] == label
            assert cell["printed"].iloc[0] == printed
            assert cell["value"].iloc[0] == float(printed)


def test_003_wide_is_laid_out_like_the_report():
    wide = seeds.wide("003", "response_time_s")
    assert list(wide.index) == [(5000, 200), (5000, 300), (10000, 200), (10000, 300)]
    assert wide.loc[(10000, 300), "epoll"] == 0.007262


# --- the experiments' parameters ---------------------------------------------------


def test_echo_scale_profiles_follow_seed_003():
    full = experiments.resolve("echo_scale")
    assert full["clients"] == [5000, 10000] and full["exchanges"] == [200, 300]
    assert full["service"] == "echo" and full["engine"] == "events" and full["repeats"] >= 3
    assert {"threaded", "select", "select_fork", "epoll", "epoll_workers", "poll"} <= set(full["models"])
    assert "iterative" not in full["models"]
    points = full.grid()
    assert len(points) == len(full["models"]) * 2 * 2
    assert {(p["clients"], p["exchanges"]) for p in points} == {(5000, 200), (5000, 300), (10000, 200), (10000, 300)}

    quick = experiments.resolve("echo_scale", "quick")
    assert len(quick.points()) <= 12


def test_idle_conns_sweeps_idle_connections_for_the_readiness_models():
    full = experiments.resolve("idle_conns")
    assert full["models"] == ["select", "poll", "epoll"]
    assert full["idle"] == [0, 500, 1000, 2000, 5000, 10000]
    assert {p["idle"] for p in full.grid()} == set(full["idle"])
    assert all(p["rate"] and p["duration"] for p in full.grid())
    assert experiments.resolve("idle_conns", "quick")["idle"] == [0, 1000]


@pytest.mark.parametrize("name, given, says", [
    ("idle_conns", {"idle": [-1]}, "below 0"),
    ("idle_conns", {"warmup": "1.5"}, "warmup must be"),
    ("idle_conns", {"rate": 0}, "rate must be above 0"),
    ("echo_scale", {"exchanges": [0]}, "below 1"),
    ("echo_scale", {"size": 0}, "size must be at least 1"),
    ("echo_scale", {"idle": [5]}, "no parameter idle"),
])
def test_bad_parameters_are_refused_with_a_fix(name, given, says):
    with pytest.raises(LabError) as caught:
        experiments.resolve(name, **given)
    assert says in caught.value.what and caught.value.fix


def test_too_many_idle_connections_are_refused_up_front_with_what_fits():
    hard = __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)[1]
    with pytest.raises(LabError) as caught:
        experiments.resolve("idle_conns", clients=[100], idle=[hard])
    assert "idle connections" in caught.value.what
    assert f"use at most {hard - procs.FD_MARGIN - 100} idle connections" in caught.value.fix


# --- points against real servers ----------------------------------------------------


def test_echo_scale_point_measures(built_bin):
    """Echo scale point measures latency losses and server cost per request."""
    row = measuring.point("epoll", clients=300, requests=20, service="echo", engine="events", size=64,
                        **PINS)
    assert row["status"] == "ok", row["error"]
    assert row["requests_ok"] == 300 * 20 and row["lost_connections"] == 0
    assert 0 < row["lat_p50_us"] <= row["lat_p99_us"] <= row["lat_max_us"]
    assert row["throughput_rps"] > 0
    # Server CPU per request is task-clock / requests: measured, so above zero, and bounded.
    assert 0 < row["server_cpu_us_per_request"] < 10_000
    assert row["server_cpu_us_per_request"] == pytest.approx(row["server_task-clock"] * 1000 / 6000)


def test_worker_model_counts_every_worker_process(built_bin):
    row = measuring.point("epoll_workers", clients=200, requests=50, service="echo", engine="events",
                        workers=2, **PINS)
    assert row["status"] == "ok", row["error"]
    assert row["workers"] == 2
    # The supervisor only waits: the work is in its workers, which perf must count too.
    assert row["server_task-clock"] > 1.0
    assert "summed over 3 processes" in row["counters_note"]


def test_idle_point_holds_idle_connections_beside_an_open_loop(built_bin):
    row = measuring.point("poll", clients=20, requests=1, service="echo", engine="events", rate=1000,
                        duration=0.5, warmup="0.1s", idle=300, **PINS)
    assert row["status"] == "ok", row["error"]
    assert row["idle"] == 300 and row["idle_failed"] == 0
    assert 300 <= row["requests_ok"] <= 700  # about rate x duration
    assert row["lat_uncorrected_p99_us"] <= row["lat_p99_us"] * 1.01


def test_select_past_fd_setsize_fails(built_bin):
    """Select past fd setsize is a failed point quoting the servers refusal."""
    row = measuring.point("select", clients=20, requests=1, service="echo", engine="events", rate=500,
                        duration=0.5, warmup="0.1s", idle=1100, **PINS)
    assert row["status"] == "failed"
    assert "FD_SETSIZE" in row["error"] and "the server reported: select: descriptor" in row["error"]
    assert row["idle_failed"] > 0 and row["lost_connections"] >= row["idle_failed"]
    assert row["requests_ok"] > 0  # the active connections were still served


def _kill_one_worker(model: str, after_s: float, killed: list) -> None:
    """SIGKILL one worker process of the running `model` server, once it has workers."""
    deadline = time.monotonic() + after_s + 10
    time.sleep(after_s)  # the kill comes this far into the run: the subject, not a wait
    while time.monotonic() < deadline and not killed:
        for proc in psutil.Process().children(recursive=True):
            try:
                parent = proc.parent()
                if proc.name() == model and parent is not None and parent.name() == model:
                    proc.send_signal(signal.SIGKILL)
                    killed.append(proc.pid)
                    return
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)


def test_a_worker_killed_mid_run_fails_the_point_and_the_sweep_goes_on(built_bin, tmp_path):
    params = experiments.resolve("echo_scale", "quick", models=["epoll_workers", "epoll"], clients=[400],
                                 exchanges=[400], workers=2, repeats=1, **PINS)
    killed = []
    killer = threading.Thread(target=_kill_one_worker, args=("epoll_workers", 0.3, killed))
    killer.start()
    started = time.monotonic()
    frame = sweep.run(params, results=tmp_path / "echo.jsonl", progress=False)
    killer.join()
    assert killed, "no worker was found to kill"
    assert time.monotonic() - started < 90
    rows = {row["model"]: row for row in frame.to_dict("records")}
    assert rows["epoll_workers"]["status"] == "failed"
    assert f"worker {killed[0]}" in rows["epoll_workers"]["error"]  # the supervisor's own report
    assert rows["epoll"]["status"] == "ok", rows["epoll"]["error"]  # the sweep went on
    assert launcher.live_children() == []
    assert not [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
