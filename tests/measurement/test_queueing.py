"""labkit.what_breaks: the knee and Little's law, on frames whose answers are known."""

import math

import pandas as pd
import pytest

from labkit import what_breaks


def frame(points):
    """(model, rate, completed_rps, lat_mean_us, inflight_mean, status) per row."""
    return pd.DataFrame(points, columns=["model", "rate", "completed_rps", "lat_mean_us", "inflight_mean", "status"])


@pytest.mark.parametrize("completed, knee, kept_up", [
    ([250, 1000, 1990, 2000], 4000, 2000),    # 2000 of 4000: behind at 4000
    ([250, 1000, 1800, 2000], 2000, 1000),    # 1800 of 2000 is 10% short: the knee is 2000
    ([250, 1000, 1905, 3900], math.nan, 4000),  # 1905 of 2000 is within 5%: kept up with all
    ([230, 1000, 2000, 4000], 250, math.nan),   # 8% short at the first rate: kept up with none
])
def test_the_knee_is_the_first_rate_more_than_5_percent_short(completed, knee, kept_up):
    rates = [250, 1000, 2000, 4000]
    df = frame([("epoll", r, c, 500, 0.1, "ok") for r, c in zip(rates, completed)])
    found = what_breaks.knees(df).set_index("model").loc["epoll"]
    for value, expected in ((found["knee_rps"], knee), (found["kept_up_rps"], kept_up)):
        assert (math.isnan(value) and math.isnan(expected)) or value == expected
    assert found["best_completed_rps"] == max(completed)


def test_failed_points_do_not_count_and_medians_are_over_repeats():
    df = frame([("threaded", 1000, 1000, 400, 0.4, "ok"), ("threaded", 1000, 990, 600, 0.6, "ok"),
                ("threaded", 1000, 10, 9e6, 90, "failed"), ("threaded", 1000, 1010, 500, 0.5, "ok")])
    law = what_breaks.littles_law(df).iloc[0]
    assert law["completed_rps"] == 1000 and law["lat_mean_us"] == 500 and law["inflight_sampled"] == 0.5
    assert law["rate_x_latency"] == pytest.approx(0.5) and law["ratio"] == pytest.approx(1.0)
    assert not law["past_knee"]


def test_littles_law_marks_the_points_past_each_models_knee():
    df = frame([("epoll", 1000, 1000, 1000, 1.0, "ok"), ("epoll", 4000, 2000, 500_000, 2500, "ok"),
                ("threaded", 1000, 1000, 2000, 2.1, "ok"), ("threaded", 4000, 3990, 3000, 12, "ok")])
    law = what_breaks.littles_law(df).set_index(["model", "rate"])
    assert list(law["past_knee"]) == [False, True, False, False]
    assert law.loc[("epoll", 4000), "rate_x_latency"] == 1000
    assert law.loc[("threaded", 1000), "ratio"] == pytest.approx(1.05)


def test_the_latency_figure_marks_each_knee_on_a_log_axis():
    rows = []
    for rate, completed in ((250, 250), (1000, 1000), (2000, 1500)):
        rows.append({"model": "epoll", "rate": rate, "completed_rps": completed, "lat_mean_us": 300,
                     "inflight_mean": 0.1, "status": "ok", "lat_p50_us": 200, "lat_p99_us": 900,
                     "lat_p999_us": 2000, "client_saturated": False, "error": ""})
    fig = what_breaks.latency_vs_offered(pd.DataFrame(rows))
    assert [shape.x0 for shape in fig.layout.shapes] == [2000]  # data units; its label in log units:
    knees = [note.x for note in fig.layout.annotations if note.text == "knee: epoll"]
    assert knees == [pytest.approx(math.log10(2000))]
    assert fig.layout.xaxis.type == "log" and {t.name for t in fig.data} >= {"epoll p50", "epoll p99", "epoll p999"}


@pytest.mark.parametrize("linear, times", [
    (None, [1, 3, 7, 15]),           # no such setting: each timeout doubles the last (1 s, RFC 6298's first)
    (float("nan"), [1, 3, 7, 15]),
    (0, [1, 3, 7, 15]),
    (4, [1, 2, 3, 4, 5, 7, 11]),     # ip-sysctl: "1, 1, 1, 1, 1, 2, 4" with the default of 4
])
def test_a_dropped_syn_is_sent_again_at_these_times(linear, times):
    assert what_breaks.syn_retry_times(linear, len(times)) == times


@pytest.mark.parametrize("linear, syn_retries, retransmits, give_up", [
    # Linux 6.5+ defaults: Documentation/networking/ip-sysctl.rst, "67seconds ... 131seconds"
    (4, 6, (1, 2, 3, 4, 5, 7, 11, 19, 35, 67), 131),
    (None, 6, (1, 3, 7, 15, 31, 63), 127),  # before 6.5: "63seconds ... 127seconds"
    (0, 6, (1, 3, 7, 15, 31, 63), 127),
    (None, 8, (1, 3, 7, 15, 31, 63, 127, 247), 367),  # TCP_RTO_MAX caps a timeout at 120 s
    (4, 2, (1, 2, 3, 4, 5), 7),  # tcp_model_timeout(2) = 7 s ends it before the 6th resend
])
def test_the_syn_schedule_and_when_connect_gives_up(linear, syn_retries, retransmits, give_up):
    schedule = what_breaks.syn_schedule(linear, syn_retries)
    assert schedule.retransmits == retransmits and schedule.give_up_s == give_up


def test_03s_connect_timeout_and_06s_retry_times_come_from_one_function(monkeypatch):
    """notebook 03's "connection timed out" (labkit.failures) and notebook 06's connect-time
    plot (what_breaks.syn_retry_times, connect_times) both take the schedule from
    what_breaks.syn_schedule: replace it, and both change.  Pure: no server runs."""
    from pathlib import Path

    from labkit import failures

    made = what_breaks.SynSchedule(linear_timeouts=9, syn_retries=2, retransmits=(1.5, 4.25, 9.75), give_up_s=77.5)
    asked = []

    def fake(linear_timeouts, syn_retries=None):
        asked.append((linear_timeouts, syn_retries))
        return made

    monkeypatch.setattr(what_breaks, "syn_schedule", fake)
    why = failures.connect_timeout_why(1.0)
    assert made.describe() in why and "1.5, 4.25, 9.75 s" in why and "77.5 s" in why, why
    assert "127" not in why and "1, 2, 4" not in why
    assert what_breaks.syn_retry_times(4, 5) == [1.5, 4.25, 9.75]
    histogram = [[(900_000, 1_100_000, 3)]]
    df = pd.DataFrame({"model": ["threaded"], "backlog": [4], "connect_histogram": histogram,
                       "syn_linear_timeouts": [4.0]})
    fig = what_breaks.connect_times(df)
    assert [shape.x0 for shape in fig.layout.shapes] == [1.5, 4.25, 9.75]
    assert "1.5 s, 4.25 s, 9.75 s" in fig.layout.title.subtitle.text
    assert len(asked) == 3
    # and the notebooks call these, not a schedule of their own
    notebooks = Path(__file__).resolve().parents[2] / "notebooks"
    assert "what_breaks.syn_retry_times(" in (notebooks / "06_what_breaks_first.ipynb").read_text()
    assert "failures.connect_timeout(" in (notebooks / "03_uploads.ipynb").read_text()


def test_failed_point_on_log_axis():
    """A point whose every repeat failed sits below the measured ones: on the log axis this
    figure has, at a positive latency (a negative one would be drawn nowhere, leaving only
    "failed" in the legend, as it once did for mine's points in notebook 07)."""
    rows = pd.DataFrame([dict(model=m, rate=r, status=st, repeat=0, error=e, lat_p50_us=v, lat_p99_us=v,
                              lat_p999_us=v, completed_rps=r if st == "ok" else math.nan)
                         for m, r, st, v, e in (("epoll", 500, "ok", 700.0, ""), ("epoll", 3000, "ok", 9e5, ""),
                                                ("mine", 500, "failed", math.nan, "the server died"),
                                                ("mine", 3000, "failed", math.nan, "the server died"))])
    fig = what_breaks.latency_vs_offered(rows)
    assert fig.layout.yaxis.type == "log"
    [cross] = [t for t in fig.data if t.name == "failed"]
    assert list(cross.x) == [500, 3000] and all(0 < y < 700.0 for y in cross.y), list(cross.y)
