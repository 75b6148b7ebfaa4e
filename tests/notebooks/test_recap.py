"""labkit.recap: the notebooks' closing "What you measured" table. A missing number is
said to be missing, with its reason, never shown as 0 or NaN."""

import math

import numpy as np
import pandas as pd
import pytest

from labkit import recap
from labkit.exercises import checks

DF = pd.DataFrame([
    # model, clients, status, elapsed_s, server_cycles
    ("iterative", 10, "ok", 0.030, None),
    ("iterative", 10, "ok", 0.034, None),
    ("iterative", 50, "ok", 0.150, None),
    ("select", 10, "ok", 0.012, None),
    ("select", 50, "failed", None, None),
    ("threaded", 50, "ok", 0.050, 1.5e9),
], columns=["model", "clients", "status", "elapsed_s", "server_cycles"])


@pytest.mark.parametrize("column, where, expected", [
    ("elapsed_s", {"model": "iterative", "clients": 10}, 0.032),       # the median of two repeats
    ("elapsed_s", {"model": "iterative", "clients": 50}, 0.150),
    ("elapsed_s", {"model": ["iterative", "select"], "clients": 10}, 0.030),  # a list of values
    ("elapsed_s", {"model": "select", "clients": 50}, "failed"),       # only a failed repeat
    ("elapsed_s", {"model": "poll"}, "not in this run's grid"),        # never measured
    ("server_cycles", {"model": "iterative"}, "not measurable"),       # counted as missing
    ("server_cycles", {"model": "threaded"}, 1.5e9),
    ("lat_p99_us", {}, "no lat_p99_us"),                              # no such column
    ("elapsed_s", {"placement": "namespaces"}, "no placement"),       # no such axis
])
def test_median_is_a_number_or_says_why_not(column, where, expected):
    got = recap.median(DF, column, **where)
    if isinstance(expected, str):
        assert isinstance(got, recap.Missing) and expected in got.why, got
    else:
        assert got == pytest.approx(expected)


@pytest.mark.parametrize("df", [None, DF.iloc[0:0]])
def test_median_of_nothing_is_missing(df):
    assert isinstance(recap.median(df, "elapsed_s"), recap.Missing)


MISSING = recap.Missing("the point failed")


@pytest.mark.parametrize("function, a, b, expected", [
    (recap.ratio, 0.15, 0.05, 3.0),
    (recap.ratio, 0.15, 0, "divisor is 0"),
    (recap.ratio, MISSING, 0.05, "the point failed"),
    (recap.ratio, 0.15, MISSING, "the point failed"),
    (recap.ratio, float("nan"), 0.05, "no value"),
    (recap.ratio, None, 0.05, "no value"),
    (recap.ratio, np.float64(6.0), np.int64(3), 2.0),
    (recap.difference, 42.5, 2.5, 40.0),
    (recap.difference, 42.5, MISSING, "the point failed"),
    (recap.difference, "fast", 1, "not a number"),
    (recap.scaled, 40_000, 1 / 1000, 40.0),
    (recap.scaled, MISSING, 1 / 1000, "the point failed"),
])
def test_arithmetic_keeps_the_reason_a_number_is_missing(function, a, b, expected):
    got = function(a, b)
    if isinstance(expected, str):
        assert isinstance(got, recap.Missing) and expected in got.why, got
    else:
        assert got == pytest.approx(expected) and isinstance(got, float)


@pytest.mark.parametrize("value, unit, why, expected", [
    (0.0345, "s", None, "0.035 s"),
    (148.24, "ms", None, "148.2 ms"),
    (20160.0, "", None, "20,160"),
    (3.0, "x", None, "3 x"),
    (0, "segments", None, "0 segments"),            # a measured zero is a zero
    (0.00169, "s", None, "0.00169 s"),
    (None, "s", None, "not measured (no value in this run)"),
    (float("nan"), "s", None, "not measured (no value in this run)"),
    (pd.NA, "s", None, "not measured (no value in this run)"),
    (np.nan, "s", "cycles need hardware counters", "not measured (cycles need hardware counters)"),
    (recap.Missing("the point failed"), "s", None, "not measured (the point failed)"),
    (recap.Missing("the point failed"), "s", "the link could not be made", "not measured (the link could not be made)"),
    (float("inf"), "s", None, "not measured (not a finite number)"),
    ("3/3 points", "", None, "3/3 points"),
])
def test_a_cell_shows_the_number_or_not_measured_never_zero_or_nan(value, unit, why, expected):
    assert recap.shown(value, unit, why) == expected


def test_table_has_every_goal():
    """The table has every goal its number and the seed where there is one."""
    rows = [
        recap.Row("1. serialisation", "iterative over select at 50 clients", 2.96, "x", seed=1.02),
        ("2. counters", "server cycles at 50 clients", recap.Missing("no hardware counters"), "count"),
        recap.Row("3. a | in a goal", "elapsed", float("nan"), "s", seed=0.082, why="the point failed"),
        recap.Row("4. code", "exercise 1.2's checks", "4/4 points"),
    ]
    text = recap.markdown(rows, seed_label="seed 000")
    lines = text.splitlines()
    assert lines[0] == "| Learning goal | Your number: what it is | Yours (this run) | seed 000 (their machine) |"
    assert len(lines) == 2 + len(rows)
    assert "| 2.960 x | 1.020 x |" in lines[2]
    assert "not measured (no hardware counters) | — |" in lines[3]
    assert "3. a \\| in a goal" in lines[4] and "not measured (the point failed) | 0.082 s |" in lines[4]
    assert lines[5].endswith("| 4/4 points | — |")
    assert "nan" not in text.lower() and "| 0 " not in text
    table = recap.frame(rows, seed_label="seed 000")
    assert list(table["Yours (this run)"]) == ["2.960 x", "not measured (no hardware counters)",
                                               "not measured (the point failed)", "4/4 points"]
    assert "not measured (the point failed)" in recap.show(rows).data


def test_no_seed_column_when_no_row_has_a_seed_figure():
    text = recap.markdown([("1. goal", "what", 1.5, "s")])
    assert text.splitlines()[0] == "| Learning goal | Your number: what it is | Yours (this run) |"


SEED = pd.DataFrame([("iterative", 50, "elapsed_s", 0.082), ("threaded", 50, "elapsed_s", 0.081),
                     ("iterative", 50, "cycles", None)], columns=["model", "clients", "metric", "value"])


@pytest.mark.parametrize("metric, where, expected", [
    ("elapsed_s", {"model": "iterative", "clients": 50}, 0.082),
    ("elapsed_s", {"clients": 50}, None),          # two values: not one figure
    ("elapsed_s", {"model": "select"}, None),       # not in the seed
    ("cycles", {"model": "iterative"}, None),       # the seed printed none
])
def test_seed_value_is_one_figure_or_none(metric, where, expected):
    got = recap.seed_value(SEED, metric, **where)
    assert got == expected if expected is None else got == pytest.approx(expected)


def test_points_of_checks_that_ran_and_missing_before(monkeypatch):
    monkeypatch.delenv(checks.CHECKS_FILE_ENV, raising=False)  # no gradebook record from a test
    ex = checks.Checker(notebook="test_recap")
    assert isinstance(recap.points(ex, "a"), recap.Missing)
    ex.run("a", lambda: None, points=3)
    ex.run("b", lambda: math.sqrt(-1), points=1)  # fails: no points
    assert recap.points(ex, "a", "b") == "3/4 points"


REPEATED = pd.DataFrame([("select", 50, "ok", 0.030), ("select", 50, "ok", 0.036), ("select", 50, "ok", 0.033),
                         ("poll", 50, "ok", 0.040), ("poll", 50, "failed", None)],
                        columns=["model", "clients", "status", "elapsed_s"])


@pytest.mark.parametrize("where, expected", [
    ({"model": "select"}, 100 * 0.006 / 0.033),   # (max - min) / median, percent
    ({"model": "poll"}, "1 repeat here"),          # one success: no spread
    ({"model": "epoll"}, "not in this run's grid"),
])
def test_spread_needs_two_repeats(where, expected):
    got = recap.spread(REPEATED, "elapsed_s", **where)
    if isinstance(expected, str):
        assert isinstance(got, recap.Missing) and expected in got.why, got
    else:
        assert got == pytest.approx(expected)


@pytest.mark.parametrize("axes, given, expected", [
    (("placement",), {"clients": 50}, {"clients": 50}),                           # not varied: not chosen
    (("link_delay_ms",), {}, {"link_delay_ms": 20}),                                # varied: its largest
    (("link_delay_ms", "nowhere"), {"link_delay_ms": 0}, {"link_delay_ms": 0}),    # given wins; unknown axis
])
def test_point_fixes_the_axes_a_run_varied(axes, given, expected):
    df = pd.DataFrame({"placement": ["namespaces"] * 3, "link_delay_ms": [0, 5, 20], "clients": [50] * 3})
    assert recap.point(df, axes, **given) == expected


def test_lost_connections_count_the_failed_points_too():
    df = pd.DataFrame([("select", "failed", 976), ("select", "failed", 980), ("epoll", "ok", 0)],
                      columns=["model", "status", "lost_connections"])
    assert isinstance(recap.median(df, "lost_connections", model="select"), recap.Missing)
    assert recap.median(df, "lost_connections", include_failed=True, model="select") == 978
    assert recap.median(df, "lost_connections", include_failed=True, model="epoll") == 0  # a measured 0


def test_a_failed_point_says_what_failed():
    df = pd.DataFrame([("select", 1000, "failed", None, "the server said: descriptor 1024 is too high for select()  "
                        "(FD_SETSIZE)\n" + "x" * 300)],
                      columns=["model", "idle", "status", "server_cpu_us_per_request", "error"])
    got = recap.median(df, "server_cpu_us_per_request", model="select", idle=1000)
    assert got.why.startswith("the point model = select, idle = 1000 failed: the server said: descriptor 1024 is too "
                              "high for select() (FD_SETSIZE) xxx")
    assert len(got.why) < 200 and got.why.endswith("…")


def test_a_median_says_how_sure_it_is_in_its_cell():
    df = pd.DataFrame({"model": ["epoll"] * 3, "status": ["ok"] * 3, "throughput_rps": [900.0, 1000.0, 1300.0],
                       "lat_p99_us": [50.0, float("nan"), float("nan")]})
    three = recap.median(df, "throughput_rps")
    assert three == 1000.0 and (three.low, three.high) == (900.0, 1300.0)
    assert recap.shown(three, "req/s") == "1,000 req/s (900 to 1,300: 75% interval of the median of 3 runs)"
    one = df.iloc[:1].assign(lat_p99_low_us=45.0, lat_p99_high_us=58.0, lat_p99_confidence=0.96)
    assert recap.shown(recap.median(one, "lat_p99_us"), "µs") == \
        "50 µs (45 to 58: 96% interval from the run's own batches)"
    assert recap.shown(recap.median(df.iloc[:1], "throughput_rps"), "req/s") == "900 req/s"  # one run, no interval
    assert recap.ratio(three, 2.0) == 500.0  # arithmetic as a float's


def test_measured_number_kept_if_unanswered():
    """A number the lab measured is not not measured when only the exercise is unanswered."""
    lab = recap.median(DF, "elapsed_s", model="iterative", clients=10)
    cell = recap.shown(recap.answered(None, lab, "6.1"), "s")  # the stub's littles_ratio = None
    assert cell.startswith("0.032 s") and "measured by the lab; your exercise 6.1 is unanswered" in cell, cell
    assert "not measured" not in cell
    assert recap.answered(1.02, lab, "6.1") == 1.02  # the student's own number, when there is one
    nothing = recap.answered(None, recap.median(DF, "elapsed_s", model="poll"), "6.1")
    assert str(nothing).startswith("not measured (the point model = poll is not in this run's grid")


def test_shared_cpu_number_is_marked():
    """A number measured on cpus another lab run shared is marked and the table says so."""
    df = DF.assign(cpus_shared=[[1], [], [], [], [], []])
    shared = recap.median(df, "elapsed_s", model="iterative", clients=10)
    quiet = recap.median(df, "elapsed_s", model="select", clients=10)
    table = recap.markdown([("1. a goal", "iterative, 10 clients", shared, "s"),
                            ("", "iterative over select", recap.ratio(shared, quiet), "x"),
                            ("", "select, 10 clients", quiet, "s")])
    lines = table.splitlines()
    assert lines[2].endswith(f"{recap.SHARED_MARK} |") and lines[3].endswith(f"{recap.SHARED_MARK} |")
    assert recap.SHARED_MARK not in lines[4]  # a point no other run shared
    assert lines[-1] == (f"{recap.SHARED_MARK} measured while another lab run shared the CPUs: 1 of 2 runs shared "
                         "CPU 1 with another lab run on this machine: their times include that run's work.")
    assert recap.SHARED_MARK not in recap.markdown([("1. a goal", "select", quiet, "s")])
