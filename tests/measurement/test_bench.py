"""labkit.bench in tiny configurations: each bench runs and prints well-formed
figures.  No timing is asserted: how fast this machine is is not a test."""

import math
import os
import re
import shutil
import socket

import pandas as pd
import pytest

from labkit import bench, build, figure_lint, launcher
from labkit.errors import LabError

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

# Real output of `sockperf ping-pong --tcp --full-rtt -m 64` (sockperf 3.7, Debian 12).
SOCKPERF_FULL_RTT = """\
sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m
sockperf: [Total Run] RunTime=2.000 sec; Warm up time=400 msec; SentMessages=17675; ReceivedMessages=17674
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=1.552 sec; SentMessages=13720; ReceivedMessages=13720
sockperf: \x1b[2;35m====> avg-rtt=113.063 (std-dev=398.982)\x1b[0m
sockperf: Summary: Round trip is 113.063 usec
sockperf: \x1b[2;35mTotal 13720 observations\x1b[0m; each percentile contains 137.20 observations
sockperf: ---> <MAX> observation = 7976.202
sockperf: ---> percentile 99.999 = 7976.202
sockperf: ---> percentile 99.000 = 2670.629
sockperf: ---> percentile 90.000 =   85.028
sockperf: ---> percentile 50.000 =   63.237
sockperf: ---> <MIN> observation =   18.774
"""


def test_parse_sockperf_reads_full_round_trips():
    figures = bench.parse_sockperf(SOCKPERF_FULL_RTT)
    assert figures == {"p50_us": 63.237, "p99_us": 2670.629, "avg_us": 113.063, "observations": 13720}


def test_parse_sockperf_refuses_one_way_latency_and_garbage():
    one_way = SOCKPERF_FULL_RTT.replace("avg-rtt", "avg-latency")
    with pytest.raises(LabError, match="--full-rtt"):
        bench.parse_sockperf(one_way)
    with pytest.raises(LabError, match="no round-trip summary"):
        bench.parse_sockperf("sockperf: ERROR: connection refused")


def test_missing_sockperf_says_how_to_install(monkeypatch, built_bin):
    monkeypatch.setattr(bench.sockperf, "find_sockperf", lambda: None)
    with pytest.raises(LabError) as raised:
        bench.rtt(rounds=1, exchanges=50, seconds=1)
    assert "sockperf is not installed" in raised.value.what
    assert "apt-get install sockperf" in raised.value.fix


def test_cli_rtt_without_sockperf_prints_the_labs_figure_alone(monkeypatch, capsys, built_bin):
    from labkit import cli

    monkeypatch.setattr(bench.sockperf, "find_sockperf", lambda: None)
    assert cli.main(["bench", "rtt", "--rounds", "1", "--exchanges", "100"]) == 0
    out, err = capsys.readouterr()
    assert "apt-get install sockperf" in err
    assert re.search(r"^  lab +\d+\.\d +\d+\.\d", out, re.M)
    assert "ratio lab/sockperf" not in out
    assert "sockperf is not installed: no ratio" in out


@pytest.mark.skipif(shutil.which("sockperf") is None, reason="sockperf is not installed (apt-get install sockperf)")
def test_rtt_against_sockperf_prints_both_and_their_ratio(built_bin):
    result = bench.rtt(rounds=2, exchanges=200, seconds=1)
    assert len(result["lab"]) == len(result["sockperf"]) == 2
    for tool in ("lab", "sockperf"):
        assert 0 < result[f"{tool}_p50_us"] <= result[f"{tool}_p99_us"] < 1e6
    assert result["ratio"] == pytest.approx(result["lab_p50_us"] / result["sockperf_p50_us"])
    assert result["verdict"] in ("PASS", "MISS")
    assert result["server_cpus"] and result["client_cpus"]
    text = bench.format_rtt(result)
    assert re.search(r"^ratio lab/sockperf: p50 \d+\.\d{3}, p99 \d+\.\d{3}  target both <= 1\.15: (PASS|MISS)$",
                     text, re.M)
    assert result["p99_ratio"] == pytest.approx(result["lab_p99_us"] / result["sockperf_p99_us"])
    assert "kernel" in text and "pinning" in text


def test_throughput_has_a_row_per_model_and_stores_the_sweeps_rows(tmp_path, monkeypatch, built_bin):
    from labkit import store

    monkeypatch.setattr(bench.common, "RESULTS_DIR", tmp_path)
    frame = bench.throughput(clients=4, requests=20)
    assert sorted(frame["model"]) == build.models()
    assert (frame["error"] == "").all(), frame[frame["error"] != ""][["model", "error"]]
    assert (frame["throughput_rps"] > 0).all()
    assert (frame["lat_p50_us"] <= frame["lat_p99_us"]).all()
    # CPU per request: a measured non-negative number, or NaN (never a made-up 0 for "missing").
    for value in frame["server_cpu_us_per_request"]:
        assert math.isnan(value) or value >= 0
    # measure.point's rows, stored the way sweeps store theirs
    saved = store.load(frame.attrs["saved_to"])
    assert list(saved["model"]) == list(frame["model"])
    assert {"env_kernel", "env_cpu_model", "server_cpus", "client_cpus", "counters_source"} <= set(saved.columns)
    text = bench.format_throughput(frame)
    for model in build.models():
        assert re.search(rf"^ *{model} +[\d,]+\.\d", text, re.M), model


def test_throughput_refuses_an_unknown_model():
    with pytest.raises(LabError, match="unknown model"):
        bench.throughput(models=["nonesuch"], save=False)


def test_events_rows_per_backend_and_select_refuses_past_fd_setsize(tmp_path, monkeypatch, built_bin):
    monkeypatch.setattr(bench.common, "RESULTS_DIR", tmp_path)
    frame = bench.events(descriptors=(10, 2000), writes=50, runs=3)
    assert sorted(frame["backend"].unique()) == sorted(bench.BACKENDS)
    assert len(frame) == 2 * len(bench.BACKENDS)
    measured = frame[~((frame["backend"] == "select") & (frame["descriptors"] == 2000))]
    assert (measured["ns_per_poll"] > 0).all() and (measured["ns_per_event"] > 0).all()
    # the median of 3 runs lies between the slowest and the fastest: [min, max], a 75% interval
    assert (measured["ns_per_poll_low"] <= measured["ns_per_poll"]).all()
    assert (measured["ns_per_poll"] <= measured["ns_per_poll_high"]).all()
    assert set(measured["ns_per_poll_interval"]) == {"75% interval of the median of 3 runs"}
    refused = frame[(frame["backend"] == "select") & (frame["descriptors"] == 2000)].iloc[0]
    assert math.isnan(refused["ns_per_poll"])
    assert "select can watch descriptors below 1024 only" in refused["note"]
    text = bench.format_events(frame)
    assert re.search(r"^2000 +refused +[\d,]+\.\d\d +[\d,]+\.\d\d$", text, re.M)


def test_ev_bench_counts_every_event_of_the_chain(built_bin):
    import json
    import subprocess

    done = subprocess.run([str(built_bin / "ev_bench_epoll"), "--descriptors", "50", "--active", "5",
                           "--writes", "100", "--runs", "2"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["events"] == 2 * (5 + 100)  # the timed runs: A initial events + W chained ones each
    assert figures["backend"] == "epoll"


def test_ev_bench_refuses_bad_arguments(built_bin):
    import subprocess

    done = subprocess.run([str(built_bin / "ev_bench_poll"), "--descriptors", "5", "--active", "9"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "--active 9 is more than --descriptors 5" in done.stderr


def test_upload_bench_measures_each_model_beside_iperf3(built_bin):
    result = bench.upload(models=("epoll", "busypoll"), size=1 << 20, uploads=5, rounds=2, seconds=1)
    assert len(result["iperf3"]) == 2 and all(rate > 0 for rate in result["iperf3"])
    assert set(result["gbit_s"]) == {"epoll", "busypoll"} and all(r > 0 for r in result["gbit_s"].values())
    assert result["ratio"] == pytest.approx(result["gbit_s"][result["best"]] / result["iperf3_gbit_s"])
    text = bench.format_upload(result)
    assert "iperf3" in text and "x iperf3" in text and "target >= 0.90x" in text and result["verdict"] in text
    assert launcher.live_children() == []


@pytest.mark.parametrize("probe, connections", [(True, 1), (False, 0)])
def test_waiting_for_an_anchor_to_listen_connects_to_it_only_when_asked(probe, connections):
    """iperf3 counts a probe connection as a test and resets whoever connects while it reopens
    its listener: its server is waited for by `ss`, with no connection, the count here exact."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        sleeper = launcher.spawn(["sleep", "30"], "server")
        try:
            bench.common.wait_listening(listener.getsockname()[1], sleeper, probe=probe)
        finally:
            launcher.stop_child(sleeper, timeout=1.0)
        listener.settimeout(0.2)
        accepted = []
        try:
            while True:
                accepted.append(listener.accept()[0])
        except (TimeoutError, socket.timeout):
            pass
        for conn in accepted:
            conn.close()
    assert len(accepted) == connections


def test_iperf3_anchor_rounds_and_cleanup(built_bin):
    """The iperf3 anchor serves rounds back to back and leaves no server."""
    with bench.Iperf3Server(cpus=None) as anchor:
        rates = [anchor.rate(None, seconds=1) for _ in range(3)]
        assert anchor.child is None
    assert all(rate > 0 for rate in rates)
    assert launcher.live_children() == []


def test_upload_bench_without_iperf3_says_how_to_install(monkeypatch, built_bin):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(LabError) as raised:
        bench.iperf3_ceiling()
    assert "iperf3 is not installed" in raised.value.what and "apt-get install iperf3" in raised.value.fix


def test_upload_bench_refuses_an_unknown_model(built_bin):
    with pytest.raises(LabError, match="unknown model"):
        bench.upload(models=("nope",))


def test_scaling_plan_gives_generator_enough_cpus():
    """Scaling plan gives the generator at least as many cpus as the server."""
    plan = bench.scaling_plan([1, 2, 4, 8, 16], list(range(16)))
    assert [(w, len(s), len(c)) for w, s, c in plan] == [(1, 1, 15), (2, 2, 14), (4, 4, 12), (8, 8, 8)]
    assert plan[1][1] == [0, 1] and plan[1][2][0] == 2  # CPUs of their own, never shared
    with pytest.raises(LabError) as refused:
        bench.scaling_plan([2], [0, 1])
    assert "2 CPU(s)" in refused.value.what and "2 CPUs per worker" in refused.value.fix


def test_scaling_runs_and_prints_the_ratio(built_bin):
    """Scaling runs the worker counts this machine holds and prints the ratio."""
    result = bench.scaling(workers=(1, 2, 4), clients=40, requests=100, rounds=1)
    cpus = len(os.sched_getaffinity(0))
    assert [p["workers"] for p in result["points"]] == [w for w in (1, 2, 4) if 2 * w <= cpus]
    first = result["points"][0]
    assert first["ratio"] == pytest.approx(1.0) and first["throughput_rps"] > 0
    assert first["generator_threads"] == min(len(first["client_cpus"]), 40)
    assert 0 < first["generator_busiest"] <= 1.05
    text = bench.format_scaling(result)
    assert re.search(r"^ +1 +\d+ +[\d,]+ +1\.00 +0\.7 +\d+%  (PASS|MISS|generator-bound)$", text, re.M)
    with pytest.raises(LabError, match="not a model with a worker count"):
        bench.scaling(model="epoll")


def test_event_cost_names_refusals_not_zeros():
    """Event cost draws each backend and names a refusal instead of a zero."""
    nan = float("nan")
    frame = pd.DataFrame({
        "backend": ["select", "select", "poll", "poll", "epoll", "epoll"],
        "descriptors": [100, 2000] * 3, "active": 1, "writes": 10,
        "ns_per_poll": [1000.0, nan, 900.0, 9000.0, 500.0, 600.0], "ns_per_event": nan, "note": "",
    })
    fig = bench.event_cost(frame)
    by_name = {trace.name: trace for trace in fig.data}
    assert set(by_name) == {"select", "poll", "epoll"}
    assert list(by_name["select"].x) == [100]  # the refused size is not drawn at all
    assert list(by_name["poll"].y) == [0.9, 9.0]  # ns -> µs
    assert "select at 2,000" in fig.layout.title.subtitle.text
    # rows saved before each run was kept: no whiskers, and the hover says why
    assert by_name["poll"].customdata[0][0] == "no interval (saved before its runs were kept)"
    assert figure_lint.problems(fig) == []


def test_event_cost_draws_the_median_of_the_runs_with_its_interval():
    frame = pd.DataFrame({
        "backend": ["poll", "poll"], "descriptors": [100, 1000], "active": 1, "writes": 10,
        "ns_per_poll": [900.0, 9000.0], "ns_per_event": 1.0, "note": "",
        **pd.DataFrame([bench.ev_bench.median_interval_columns(runs) for runs in
                        ([800.0, 850.0, 900.0, 950.0, 1000.0], [9000.0])]).to_dict("list"),
    })
    fig = bench.event_cost(frame)
    poll = fig.data[0]
    assert [round(v, 9) for v in (*poll.error_y.array, *poll.error_y.arrayminus)] == [0.1, 0.0, 0.1, 0.0]
    assert [c[0] for c in poll.customdata] == ["94% interval of the median of 5 runs: 0.80 - 1.00 µs",
                                               "one run, no interval"]
    assert "whiskers: 94% interval of the median of 5 runs" in fig.layout.title.subtitle.text
    assert figure_lint.problems(fig) == []


def test_failed_backend_gets_its_message(tmp_path, monkeypatch, built_bin):
    """A students' edition whose poll backend is still exercise 1.2's stub: ev_bench_poll
    exits with the stub's message; poll's rows say so, select and epoll are measured."""
    broken = tmp_path / "bin"
    broken.mkdir()
    for program in built_bin.iterdir():
        (broken / program.name).symlink_to(program)
    (broken / "ev_bench_poll").unlink()
    (broken / "ev_bench_poll").write_text("#!/bin/sh\necho 'ev_poll is still the stub of exercise 1.2' >&2\nexit 1\n")
    (broken / "ev_bench_poll").chmod(0o755)
    monkeypatch.setattr(bench.ev_bench.build, "build", lambda *args, **kwargs: broken)
    frame = bench.events(descriptors=(10, 100), writes=50, runs=1, save=False)
    poll = frame[frame["backend"] == "poll"]
    assert list(poll["status"]) == ["failed", "failed"] and poll["ns_per_poll"].isna().all()
    assert all("still the stub of exercise 1.2" in note for note in poll["note"])
    others = frame[frame["backend"] != "poll"]
    assert (others["status"] == "ok").all() and (others["ns_per_poll"] > 0).all()
    text = bench.format_events(frame)
    assert re.search(r"^100 +[\d,]+\.\d\d +failed +[\d,]+\.\d\d$", text, re.M), text
    assert text.count("still the stub of exercise 1.2") == 1  # the message once, not once per size
    fig = bench.event_cost(frame)
    assert list(next(t for t in fig.data if t.name == "poll").x) == []
    assert "failed, not drawn (see its note): poll" in fig.layout.title.subtitle.text
    assert "refused" not in fig.layout.title.subtitle.text


def test_replications_count_covering_runs():
    """coverage() on rows as measure.point writes them: two of three runs give a p50 interval,
    one of those holds the median of all three; a run without one is not counted against it."""
    rows = [{"status": "ok", "lat_p50_us": 100.0, "lat_p50_low_us": 95.0, "lat_p50_high_us": 105.0,
             "lat_p50_confidence": 0.95, "verdicts": {}},
            {"status": "ok", "lat_p50_us": 110.0, "lat_p50_low_us": 108.0, "lat_p50_high_us": 112.0,
             "lat_p50_confidence": 0.95, "verdicts": {"cpu_shared": "server's CPU shared: ..."}},
            {"status": "ok", "lat_p50_us": 104.0, "lat_p50_low_us": float("nan"), "lat_p50_high_us": float("nan"),
             "lat_p50_confidence": float("nan"), "verdicts": {}},
            {"status": "failed", "lat_p50_us": float("nan")}]
    found = bench.replications.coverage(rows, "lat_p50_us")
    assert (found["runs"], found["given"], found["held"], found["median"], found["shared"]) == (3, 2, 1, 104.0, 1)


def test_replications_prints_the_table(tmp_path, monkeypatch, built_bin):
    """Replications runs one point with a seed each and prints the table."""
    monkeypatch.setattr(bench.common, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(bench.replications, "results_file", lambda name, env: tmp_path / f"{name}.jsonl")
    result = bench.replications.replicate(replications=2, duration=1.0)
    assert [row["seed"] for row in result["runs"]] == [1, 2]
    assert all(row["status"] == "ok" and row["rate"] == result["rate"] for row in result["runs"]), \
        [row["error"] for row in result["runs"]]
    text = bench.replications.format_replications(result)
    assert "2 replications of 1 s, each its own seed" in text and "lat_p99_us" in text
    assert len((tmp_path / "replications.jsonl").read_text().splitlines()) == 2
