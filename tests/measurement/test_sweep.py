"""measure.point, experiments and sweep.run with real servers: rows as measured, resume, failures."""

import json
import math
import os
import signal
import time

import measuring
import psutil
import pytest

from labkit import build, experiments, launcher, measure, procs, store, sweep
from labkit.errors import ClientFailed, LabError

pytestmark = [pytest.mark.measuring, pytest.mark.timeout(240)]

CPUS = sorted(os.sched_getaffinity(0))


def small(**given):
    """A real proc_top grid, small enough for a test."""
    defaults = dict(models=["iterative", "select"], clients=[3], repeats=1)
    return experiments.resolve("proc_top", profile="quick", **{**defaults, **given})


class Counting:
    """measure.point, counting the points it really measures."""

    def __init__(self, before=None):
        self.calls = []
        self.before = before

    def __call__(self, run):
        point = {"model": run.server.model, "clients": run.load.clients}
        self.calls.append(point)
        if self.before:
            self.before(len(self.calls), point)
        return measure.point(run)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- one point --------------------------------------------------------------------


def test_point_row_has_every_field_and_the_pinning_used():
    row = measuring.point("threaded", clients=5, server_cpus=[CPUS[0]], client_cpus=[CPUS[-1]])
    assert row["status"] == "ok", row["error"]
    assert row["requests_ok"] == 5 and row["requests_failed"] == 0
    assert row["server_cpus"] == [CPUS[0]] and row["client_cpus"] == [CPUS[-1]]
    assert row["lat_p50_us"] <= row["lat_p99_us"] <= row["lat_max_us"]
    assert row["elapsed_s"] > 0 and row["throughput_rps"] > 0
    from labkit import perf

    for event in perf.DEFAULT_EVENTS:
        for side in ("server", "client"):
            value = row[f"{side}_{event}"]
            assert value is None or math.isnan(value) or value >= 0
    for side in ("server", "client"):
        assert f"{side}_ipc" in row and f"{side}_cpus-utilized" in row
    assert row["server_task-clock"] > 0  # the server did work: a top scan per request
    assert isinstance(row["client_saturated"], bool)
    assert 0 <= row["client_cpu_util"] < len(row["client_cpus"]) + 0.5


def test_a_point_says_how_much_of_the_generators_cpus_it_used():
    """The events engine runs one loop per client CPU (at most one per connection); the row
    says how many, how busy the busiest was, and saturated only if every one was busy."""
    row = measuring.point("epoll", clients=20, requests=50, service="echo", engine="events",
                          server_cpus=[CPUS[0]], client_cpus=[CPUS[-1]])
    assert row["status"] == "ok", row["error"]
    assert row["client_threads"] == 1 == row["client_cpus_usable"]  # one client CPU: one loop
    assert 0 < row["client_busiest_thread"] <= 1.05
    assert 0 <= row["client_cpu_wait"] <= 1.05  # the kernel's run_delay over the run
    assert row["client_saturated"] == (row["client_busiest_thread"] + row["client_cpu_wait"] >= measure.SATURATION)
    row = measuring.point("epoll", clients=20, requests=50, service="echo", engine="events", threads=2,
                          server_cpus=[CPUS[0]], client_cpus=[CPUS[-1]])
    assert row["client_threads"] == 2 and row["client_cpus_usable"] == 1  # two loops, one CPU to share
    row = measuring.point("threaded", clients=3, requests=5, service="echo")
    assert row["client_threads"] == 3 and math.isnan(row["client_busiest_thread"])


# The generator's CPU use is its CPU time over the wall time of the same window, for every
# engine and thread count: never above the CPUs it could use, however short the run (its start-up
# once counted against a 0.4 ms upload read 7.2 CPUs on one).  Whether it saturated is not
# asserted here: an open loop far past what one loop can send saturates only while the server
# keeps up, which a busy machine decides (when the server falls behind, the loop waits on full
# send buffers and is rightly not saturated).  The verdict is checked against the quantities it
# is computed from, here and in the table below, and with a server made slow on purpose.
CLIENT_CPU_CASES = [
    ("one tiny upload, threads engine", "epoll", dict(clients=1, requests=1, service="sink", size=102400)),
    ("one echo, events engine", "epoll", dict(clients=1, requests=1, service="echo", engine="events")),
    ("a few echoes, two event loops", "epoll", dict(clients=4, requests=2, service="echo", engine="events",
                                                     threads=2)),
    ("an open loop far past what one loop can send", "epoll",
     dict(clients=50, service="echo", engine="events", rate=300_000, duration=0.5)),
]


@pytest.mark.parametrize("name, model, load", CLIENT_CPU_CASES, ids=[c[0] for c in CLIENT_CPU_CASES])
def test_the_generators_cpu_use_is_measured_over_its_own_window(name, model, load):
    row = measuring.point(model, server_cpus=[CPUS[0]], client_cpus=[CPUS[-1]], **load)
    assert row["status"] == "ok", row["error"]
    assert 0 < row["client_cpu_util"] <= row["client_cpus_usable"] * 1.02, (
        f"{name}: {row['client_cpu_util']:.2f} CPUs used of {row['client_cpus_usable']} usable")
    busiest = row["client_busiest_thread"]
    wanted = busiest + row["client_cpu_wait"]  # an event loop running, or waiting for its CPU
    if math.isnan(busiest):  # the threads engine: its CPU use over the CPUs it could use
        assert row["client_saturated"] is measure.client_saturated([], row["client_cpu_util"],
                                                                   row["client_cpus_usable"])
    elif row["client_threads"] == 1:  # one event loop: its own share of the run decides
        assert row["client_saturated"] is (wanted >= measure.SATURATION), (busiest, wanted)
    else:  # every loop wanted its CPU all along, so the busiest one too
        assert not row["client_saturated"] or wanted >= measure.SATURATION, (busiest, wanted)


# (what the generator reported: each loop's busy fraction, or none for the threads engine;
#  each loop's share of the run spent waiting, runnable, for its CPU (None: not known);
#  CPUs used; CPUs usable; saturated?)
SATURATION_CASES = [
    ("one loop busy all along", [0.97], [0.01], 0.97, 1, True),
    ("one loop at the threshold", [measure.SATURATION], [0.0], 0.9, 1, True),
    ("one loop with time to spare", [0.6], [0.02], 0.6, 1, False),
    ("one loop sharing its CPU: running half, waiting half", [0.48], [0.47], 0.48, 1, True),
    ("one loop half idle, though it waited a little", [0.5], [0.1], 0.5, 1, False),
    ("one loop, its waiting not known: its CPU time alone decides", [0.5], [None], 0.5, 1, False),
    ("two loops, both busy", [0.95, 0.93], [0.0, 0.0], 1.88, 2, True),
    ("two loops, one idle half the time: it could have sent more", [0.99, 0.5], [0.0, 0.0], 1.49, 2, False),
    ("two loops, one starved of its CPU", [0.99, 0.3], [0.0, 0.68], 1.29, 2, True),
    ("threads engine filling its one CPU", [], [], 0.95, 1, True),
    ("threads engine filling half of two CPUs", [], [], 1.2, 2, False),
    ("threads engine, CPU use not measured", [], [], float("nan"), 1, False),
]


@pytest.mark.parametrize("name, busy, waiting, used, usable, saturated", SATURATION_CASES,
                         ids=[c[0] for c in SATURATION_CASES])
def test_the_saturation_verdict_follows_from_what_the_generator_reported(name, busy, waiting, used, usable,
                                                                        saturated):
    assert measure.client_saturated(busy, used, usable, waiting) is saturated


STARVERS = 9  # processes that spin on the generator's CPU, each in a session (an autogroup) of its own


def test_overdriven_generator_waits():
    """An open loop offered far more than one loop can send, its CPU shared with STARVERS
    spinning processes, each in a session of its own: a fair share leaves the generator a
    tenth of its CPU, so its CPU time alone would call it idle.  It waits, runnable, for that
    CPU (the kernel's run_delay, /proc/thread-self/schedstat) most of the rest, and the row's
    verdict follows from the two as the rule says (SATURATION_CASES above hold the rule).
    Whether the two reach SATURATION here depends on more than the generator: the rest of the
    run it is blocked, waiting for replies from a server on the one other CPU, which every
    unpinned process shares: 0.79 to 0.97 of the run wanted, run after run on a quiet machine
    (0.16 run + 0.65 waited beside a test run, with 4 spinners), so the test asks the
    measurement for most of the run and the verdict for consistency, not for the flag."""
    import subprocess

    spin = [subprocess.Popen(["taskset", "-c", str(CPUS[-1]), "sh", "-c", "while :; do :; done"],
                             start_new_session=True) for _ in range(STARVERS)]
    try:
        row = measuring.point("epoll", clients=50, service="echo", engine="events", threads=1,
                              rate=100_000, duration=0.3, server_cpus=[CPUS[0]], client_cpus=[CPUS[-1]])
    finally:
        for proc in spin:
            proc.kill()
            proc.wait()
    assert row["status"] == "ok", row["error"]
    busy, waited = row["client_busiest_thread"], row["client_cpu_wait"]
    assert busy < 0.5, busy  # CPU time alone: far from saturated
    assert waited > 2 * busy, (busy, waited)  # it waited for its CPU far longer than it ran
    assert busy + waited >= 0.7, (busy, waited)  # and wanted it most of the run
    assert row["client_saturated"] is (busy + waited >= measure.SATURATION), (busy, waited)
    if row["client_saturated"]:
        assert "waiting for their CPU" in row["verdicts"]["generator_saturated"], row["verdicts"]


def test_an_open_loop_against_a_server_made_slow_is_not_saturated(monkeypatch):
    """The server is stopped (SIGSTOP) for most of the run and then let go: the open loop's
    exchanges wait for it, so the loop has time to spare whatever else the machine runs,
    and the row must not blame the generator."""
    real_run_load = procs.run_load
    stopped_s = 0.8

    def stop_server_then_run(load, port, *args, **kwargs):
        server = next(psutil.Process(c.pid) for c in psutil.net_connections("tcp")
                      if c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid)
        server.suspend()
        import threading

        timer = threading.Timer(stopped_s, server.resume)
        timer.start()
        try:
            return real_run_load(load, port, *args, **kwargs)
        finally:
            timer.join()

    monkeypatch.setattr(procs, "run_load", stop_server_then_run)
    row = measuring.point("epoll", clients=10, service="echo", engine="events", rate=2000, duration=1.0,
                          server_cpus=[CPUS[0]], client_cpus=[CPUS[-1]])
    assert row["status"] == "ok", row["error"]
    assert row["client_busiest_thread"] < measure.SATURATION, row["client_busiest_thread"]
    assert row["client_saturated"] is False
    assert row["lat_max_us"] > stopped_s * 1e6 / 2  # the exchanges did wait for the stopped server


def test_point_without_perf_says_where_counters_came_from(monkeypatch):
    monkeypatch.setenv("LABKIT_NO_PERF", "1")
    row = measuring.point("select", clients=4)
    assert row["status"] == "ok", row["error"]
    assert row["counters_source"] == "server:proc client:rusage"
    assert "LABKIT_NO_PERF" in row["counters_note"]
    assert math.isnan(row["server_cycles"]) and math.isnan(row["client_cycles"])  # missing, not 0
    assert row["client_task-clock"] > 0


def test_server_killed_mid_run_gives_a_failed_row_with_the_reason(monkeypatch):
    real_run_load = procs.run_load

    def kill_server_then_run(load, port, *args, **kwargs):
        for conn in psutil.net_connections("tcp"):
            if conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                os.kill(conn.pid, signal.SIGKILL)
        return real_run_load(load, port, *args, **kwargs)

    monkeypatch.setattr(procs, "run_load", kill_server_then_run)
    row = measuring.point("iterative", clients=3)
    assert row["status"] == "failed"
    assert "the server died during the run" in row["error"] and "SIGKILL" in row["error"]
    assert launcher.live_children() == []


# How a client failure is taken, by its type: (what run_load raises, the server killed first,
# a failed row (True) or raised to the user (False)).
CLIENT_FAILURES = [
    ("the client broke down", ClientFailed("the load generator ran longer than 3 s and was killed"), False, True),
    ("refused arguments", LabError("the load generator refused its arguments: --bogus"), False, False),
    ("refused, but the server had died", LabError("the load generator refused its arguments"), True, True),
]


@pytest.mark.parametrize("name, failure, kill_server, becomes_a_row", CLIENT_FAILURES,
                         ids=[case[0] for case in CLIENT_FAILURES])
def test_a_client_failure_is_a_failed_row_or_the_users_error_by_its_type(monkeypatch, name, failure, kill_server,
                                                                         becomes_a_row):
    def failing(load, port, *args, **kwargs):
        if kill_server:
            for conn in psutil.net_connections("tcp"):
                if conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                    os.kill(conn.pid, signal.SIGKILL)
                    psutil.Process(conn.pid).wait(2)
        raise failure

    monkeypatch.setattr(procs, "run_load", failing)
    if not becomes_a_row:
        with pytest.raises(LabError, match="refused its arguments"):
            measuring.point("iterative", clients=2)
    else:
        row = measuring.point("iterative", clients=2)
        assert row["status"] == "failed" and f"the client failed: {failure.what}" in row["error"]
    assert launcher.live_children() == []


def _same(got, expected) -> bool:
    return (isinstance(expected, float) and math.isnan(expected) and math.isnan(got)) or got == expected


# The load generator's summary -> the row's columns, as labkit.row's one table says.
SUMMARIES = [
    ("nothing reported: every column not measured", {},
     {"elapsed_s": math.nan, "requests_ok": 0, "lat_p50_us": math.nan, "errors": {}, "lat_histogram": [],
      "client_threads": 1, "body_bytes_ok": 0}),
    ("0 s and 0 per second: none measured", {"elapsed_s": 0, "throughput_rps": 0},
     {"elapsed_s": math.nan, "throughput_rps": math.nan}),
    ("a key inside a key, null is not measured", {"latency_us": {"p50": 12, "p99": None}},
     {"lat_p50_us": 12.0, "lat_p99_us": math.nan, "lat_max_us": math.nan}),
    ("renamed columns", {"idle_connections_failed": 2, "sink_server_reads_mean": 3, "histogram": [(1, 2)],
                         "threads": 4, "latency_uncorrected_us": {"p99": 7}},
     {"idle_failed": 2, "server_reads_per_request": 3.0, "lat_histogram": [[1, 2]], "client_threads": 4,
      "lat_uncorrected_p99_us": 7.0}),
]


@pytest.mark.parametrize("name, summary, expected", SUMMARIES, ids=[case[0] for case in SUMMARIES])
def test_the_generators_summary_fills_the_rows_columns_from_one_table(name, summary, expected):
    from labkit import row as row_module

    got = row_module.from_summary(summary)
    assert set(got) <= set(row_module.MEASURED)  # the summary's columns are the row's
    assert {column: got[column] for column in expected if not _same(got[column], expected[column])} == {}


def test_a_bad_cpu_is_a_user_error_not_a_failed_row():
    with pytest.raises(LabError):
        measuring.point("iterative", clients=2, server_cpus=[4096])


# --- experiments ------------------------------------------------------------------


def test_profiles_and_given_values():
    full = experiments.resolve("proc_top")
    assert full["models"] == ["iterative", "threaded", "select"]
    assert full["clients"] == [10, 50, 100] and full["repeats"] == 3 and full["requests"] == 1
    quick = experiments.resolve("proc_top", "quick", clients=None, repeats=None)
    assert quick["repeats"] == 1 and quick["clients"] == [10, 50]
    seeds = experiments.resolve("proc_top", clients=[3, 6, 10], repeats=2)
    assert seeds["clients"] == [3, 6, 10] and seeds["repeats"] == 2
    if len(CPUS) >= 2:
        assert not set(full["server_cpus"]) & set(full["client_cpus"])
    points = full.grid()
    assert len(points) == 9 and {p["model"] for p in points} == set(full["models"])


@pytest.mark.parametrize("given, says", [
    ({"models": ["nosuch"]}, "unknown server model"),
    ({"clients": [0]}, "below 1"),
    ({"clients": [10**9]}, "outside what the load generator takes for --clients: from 1 to 100,000"),
    ({"repeats": 0}, "repeats must be at least 1"),
    ({"server_cpus": [4096]}, "not usable"),
    ({"bogus": 1}, "no parameter bogus"),
])
def test_bad_parameters_are_refused_with_a_fix(given, says):
    with pytest.raises(LabError) as caught:
        experiments.resolve("proc_top", **given)
    assert says in caught.value.what and caught.value.fix
    if "models" in given:
        for model in build.models():
            assert model in caught.value.fix


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs to overlap on purpose")
def test_overlapping_cpus_are_refused_when_there_are_two():
    with pytest.raises(LabError) as caught:
        experiments.resolve("proc_top", server_cpus=[CPUS[0]], client_cpus=[CPUS[0]])
    assert "overlap" in caught.value.what


# --- sweeps -----------------------------------------------------------------------


def test_rows_are_written_as_measured_and_resume_skips_them(tmp_path):
    results = tmp_path / "proc_top.jsonl"
    params = small(repeats=2)  # 2 models x 1 client count x 2 repeats = 4 points

    def stop_after_two(row):
        if len(_lines(results)) == 2:
            raise KeyboardInterrupt

    first = Counting()
    with pytest.raises(KeyboardInterrupt):
        sweep.run(params, results=results, measure=first, progress=False, on_point=stop_after_two)
    assert len(first.calls) == 2 and len(_lines(results)) == 2  # both rows on disk before the interrupt
    assert launcher.live_children() == []

    second = Counting()
    frame = sweep.run(params, results=results, measure=second, progress=False)
    assert len(second.calls) == 2  # only the two missing points
    assert len(frame) == 4 and set(frame["status"]) == {"ok"}
    assert frame["point_key"].is_unique
    assert sorted(frame["repeat"]) == [0, 0, 1, 1]
    assert len(set(frame["run_id"])) == 2
    assert "env_kernel" in frame.columns and "env_cores" in frame.columns

    third = Counting()
    sweep.run(params, results=results, measure=third, progress=False)
    assert third.calls == []  # everything already measured


def test_failed_points_are_kept_and_measured_again(tmp_path, monkeypatch):
    results = tmp_path / "r.jsonl"
    params = small()
    real_start = procs.start_server

    def first_server_dies(*args, **kwargs):
        server = real_start(*args, **kwargs)
        if not getattr(first_server_dies, "done", False):
            first_server_dies.done = True
            os.kill(server.pid, signal.SIGKILL)
        return server

    monkeypatch.setattr(procs, "start_server", first_server_dies)
    frame = sweep.run(params, results=results, progress=False)
    assert list(frame["status"]) == ["failed", "ok"]  # the sweep went on after the failure
    assert "died" in frame["error"][0]
    monkeypatch.setattr(procs, "start_server", real_start)

    again = Counting()
    frame = sweep.run(params, results=results, measure=again, progress=False)
    assert [c["model"] for c in again.calls] == ["iterative"]  # only the failed point
    assert list(frame["status"]) == ["ok", "ok"]  # newest row per point
    assert len(_lines(results)) == 3


def test_nan_survives_the_json_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_NO_PERF", "1")
    results = tmp_path / "r.jsonl"
    frame = sweep.run(small(models=["select"]), results=results, progress=False)
    raw = _lines(results)[0]
    assert raw["server_cycles"] is None and raw["server_ipc"] is None  # JSON null on disk
    assert "NaN" not in results.read_text()
    assert math.isnan(frame["server_cycles"][0])
    loaded = store.load(results)
    assert math.isnan(loaded["server_cycles"][0]) and math.isnan(loaded["client_cpu-migrations"][0])
    assert loaded["client_task-clock"][0] > 0


def test_progress_callable_sees_every_point(tmp_path):
    seen = []
    sweep.run(small(), results=tmp_path / "r.jsonl",
              progress=lambda done, total, row: seen.append((done, total, row["model"])))
    assert seen == [(1, 2, "iterative"), (2, 2, "select")]


def test_the_frame_holds_only_this_sweeps_points(tmp_path):
    results = tmp_path / "r.jsonl"
    sweep.run(small(models=["select"], clients=[2]), results=results, progress=False)
    frame = sweep.run(small(models=["select"], clients=[3]), results=results, progress=False)
    assert list(frame["clients"]) == [3]
    assert frame.attrs["experiment"] is experiments.get("proc_top")  # for the plots: its axes, its parameters
    assert frame[frame["status"] == "ok"].attrs["experiment"] is frame.attrs["experiment"]
    assert len(store.load(results)) == 2


def test_point_keys_are_stable_and_distinct():
    from labkit.plan import point_key

    plan = small(repeats=2)
    point = plan.grid()[0]
    assert point_key("proc_top", point, 0) == point_key("proc_top", dict(point), 0)
    assert point_key("proc_top", point, 0) != point_key("proc_top", point, 1)
    assert point_key("proc_top", point, 0) != point_key("proc_top", {**point, "clients": 4}, 0)
    # each run of the plan carries its key; the hash is the one results files were written with
    assert [run.key for run in plan.points()[:2]] == [point_key("proc_top", point, 0), point_key("proc_top", point, 1)]
    assert point_key("proc_top", {"model": "select", "clients": 3}, 0) == "31f5ec9aa1914356"


@pytest.mark.parametrize("delay", [0.15, 0.45, 0.8])
def test_ctrl_c_at_any_moment_of_a_sweep_leaves_nothing_running(tmp_path, delay):
    import threading

    import pandas  # noqa: F401  imported first: a Ctrl-C inside a first import is not the sweep's

    results = tmp_path / "r.jsonl"
    # 24 points (about 2 s here): every delay falls inside the sweep
    params = small(models=["iterative", "threaded", "select"], clients=[40], repeats=8)
    interrupt = threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT))
    interrupt.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sweep.run(params, results=results, progress=False)
    finally:
        interrupt.cancel()
    assert launcher.live_children() == []
    psutil.wait_procs(psutil.Process().children(recursive=True), timeout=2)
    assert [p.name() for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE] == []
    written = _lines(results) if results.exists() else []  # every line on disk is a whole row
    assert all(row["status"] in ("ok", "failed") for row in written)
    assert len(written) < 24


def test_dropped_ctrl_c_stops_sweep(tmp_path):
    """Python drops a KeyboardInterrupt raised while a weakref callback or a __del__ runs
    (printed as "Exception ignored"): here the point being measured swallows it the same way.
    The sweep must still stop before its next point, the row it was measuring kept."""
    results = tmp_path / "r.jsonl"

    def dropped(count, point):
        if count == 1:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # the handler runs here, in this frame
            except KeyboardInterrupt:
                pass  # dropped, as a garbage collector's callback drops it

    counting = Counting(before=dropped)
    with pytest.raises(KeyboardInterrupt):
        sweep.run(small(repeats=2), results=results, measure=counting, progress=False)
    assert len(counting.calls) == 1 and len(_lines(results)) == 1
    assert launcher.live_children() == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the sweep's handler is gone


@pytest.mark.parametrize("schemas, outcome", [
    ([None, None], "older"),          # rows from before the schema: version 1
    ([4, None], "older"),
    ([2, 4], "older"),                # version 2: the mean's interval took samples as independent
    ([3, 4], "older"),                # version 3: the percentiles' too, and every repeat seed 1
    ([4, 4], "fine"),
    ([5, 4], "newer"),
])
def test_rows_carry_their_schema(tmp_path, schemas, outcome):
    """Rows carry their schema and loading says what changed or refuses a newer one."""
    import warnings

    from labkit import row as row_module

    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"model": "select", "status": "ok", "client_cpu_util": 0.5,
                                        **({"schema": s} if s is not None else {})}) + "\n" for s in schemas))
    assert row_module.SCHEMA == 4 and row_module.MEASURED["schema"] == row_module.SCHEMA
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        if outcome == "newer":
            with pytest.raises(LabError, match="schema 5, written by a newer lab"):
                store.load(path)
            return
        frame = store.load(path)
    assert len(frame) == len(schemas)
    # The lab's own warnings: "always" also shows a ResourceWarning for a file an earlier test
    # left unclosed, whenever the garbage collector happens to run inside this window.
    messages = [str(w.message) for w in said if not issubclass(w.category, ResourceWarning)]
    if outcome == "older":  # what changed since the oldest row, each version's change said
        oldest = min(1 if v is None else v for v in schemas)
        assert len(messages) == 1 and "every latency interval comes from the run's batches" in messages[0]
        assert ("come from the means of 20 consecutive batches" in messages[0]) == (oldest < 3)
        assert ("client_cpu_util is the generator's CPU over its run's window" in messages[0]) == (None in schemas)
    else:
        assert messages == []


def test_a_point_whose_row_is_of_an_older_schema_is_measured_again(tmp_path):
    """Resuming counts a point as measured only when its row means what this lab's columns
    mean: a version-1 row's client_cpu_util is not the one a student is now shown."""
    import warnings

    results = tmp_path / "r.jsonl"
    params = small(models=["select"], clients=[2])
    first = sweep.run(params, results=results, progress=False)
    lines = _lines(results)
    for row in lines:
        row.pop("schema")  # as a lab before the schema wrote it
    results.write_text("".join(json.dumps(row) + "\n" for row in lines))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = sweep.run(params, results=results, progress=False)
    assert again.attrs["reused"] == 0 and len(_lines(results)) == 2 * len(first)
    assert list(again["schema"]) == [sweep.SCHEMA] * len(first)  # the frame holds the new rows only
