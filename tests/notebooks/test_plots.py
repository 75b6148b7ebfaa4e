"""labkit.plots on results shaped like labkit.sweep's rows (built here, values known)."""

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from labkit import experiments, netlink, plots, seeds
from labkit.errors import LabError

NO_HW = "cycles, instructions, branches, branch-misses, cache-misses: <not supported> (no hardware counters)"
HW_EVENTS = ("cycles", "instructions", "branches", "branch-misses", "cache-misses", "ipc")


def synthetic(models=("iterative", "threaded", "select"), clients=(3, 6, 10), repeats=3,
              hardware=False, failed=(), saturated=()):
    """Rows with sweep.run's schema.  A metric's value for repeat r is base * (r + 1), so
    the median is base * 2 and min/max are base and base * repeats.  `failed` lists
    (model, clients, repeat) to mark failed, `saturated` lists (model, clients)."""
    rows = []
    for m_index, model in enumerate(models):
        for c in clients:
            for r in range(repeats):
                ok = (model, c, r) not in failed
                scale = (m_index + 1) * c * (r + 1)
                row = dict(model=model, service="top", clients=c, requests=10, k=2, repeat=r,
                           status="ok" if ok else "failed",
                           error=None if ok else f"server {model} died (exit 1)",
                           elapsed_s=0.001 * scale if ok else math.nan,
                           lat_p50_us=10.0 * scale if ok else math.nan,
                           lat_p99_us=30.0 * scale if ok else math.nan,
                           throughput_rps=1000.0 / scale, client_saturated=(model, c) in saturated,
                           counters_source="perf", counters_note="" if hardware else NO_HW,
                           client_cpu_util=0.5)
                for side in ("server", "client"):
                    row[f"{side}_task-clock"] = 0.5 * scale if ok else math.nan
                    row[f"{side}_context-switches"] = float(scale) if ok else math.nan
                    row[f"{side}_cpu-migrations"] = 0.0
                    row[f"{side}_page-faults"] = 100.0 + scale
                    row[f"{side}_cpus-utilized"] = 0.25
                    for event in HW_EVENTS:
                        row[f"{side}_{event}"] = 1000.0 * scale if hardware and ok else math.nan
                rows.append(row)
    return pd.DataFrame(rows)


def of_experiment(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """`df` declaring its experiment, as labkit.sweep's frames do (its axes, their titles and values)."""
    df.attrs["experiment"] = experiments.get(name)
    return df


def _model_traces(fig):
    return {t.name: t for t in fig.data if t.name != "failed"}


def test_one_repeat_draws_runs_own_interval():
    """One repeats percentile is drawn with the runs own interval and says so."""
    df = synthetic(models=("epoll",), repeats=1)
    df["lat_p99_low_us"], df["lat_p99_high_us"] = df["lat_p99_us"] * 0.9, df["lat_p99_us"] * 1.2
    df["lat_p99_confidence"] = [0.96, 0.96, 0.61]
    line = _model_traces(plots.metric_vs(df, "lat_p99_us"))["epoll"]
    assert list(line.error_y.array) == pytest.approx(list(df["lat_p99_us"] * 0.2))
    assert list(line.error_y.arrayminus) == pytest.approx(list(df["lat_p99_us"] * 0.1))
    assert [row[2] for row in line.customdata] == ["96% interval from the run's own batches"] * 2 + [
        "61% interval from the run's own batches (too few samples for 95%)"]
    subtitle = plots.metric_vs(df, "lat_p99_us").layout.title.subtitle.text
    # each level said once, with how many whiskers have it and why levels differ (not "61-96%", levels mixed)
    assert ("whiskers: 96% interval from the run's own batches at 2 points; 61% interval from the run's own "
            "batches (too few samples for 95%) at 1 point (a level is what that point's runs or samples reach; "
            "the hover says each point's)") in subtitle.replace("<br>", " ")
    assert "61-96%" not in subtitle
    # a metric with no interval of its own, one repeat: no whisker, and the chart says so
    bare = plots.metric_vs(df, "server_context-switches")
    assert "whiskers: one run, no interval" in bare.layout.title.subtitle.text


def test_failed_check_point_is_hollow():
    """A point that failed a self check is hollow and the chart says why."""
    df = synthetic(models=("epoll",), repeats=1)
    df["verdicts"] = [{}, {"rate_not_reached": "offered rate not reached: completed 2,400/s of the 3,000/s offered"},
                      {"too_few_for_p999": "too few requests for p999: 50 bound it at 5%, not 95%"}]
    fig = plots.metric_vs(df, "lat_p99_us")
    line = _model_traces(fig)["epoll"]
    assert [symbol.endswith("-open") for symbol in line.marker.symbol] == [False, True, False]  # p99.9's not p99's
    subtitle = fig.layout.title.subtitle.text.replace("<br>", " ")
    assert ("hollow = offered rate not reached (1 point(s); each point's reasons in its hover and in the figure's "
            "text version)") in subtitle
    assert "hover for the numbers" not in subtitle  # a screen reader's text version has no hover
    assert "completed 2,400/s of the 3,000/s offered" in line.customdata[1][7]
    # the latency percentiles' chart too, each percentile hearing its own verdicts
    df["verdicts"] = [{}, {"not_steady": "not steady: p50 was 100-110 µs in the run's first half and ..."},
                      {"too_few_for_p999": "too few requests for p999: 50 bound it at 5%, not 95%"}]
    fig = plots.latency_vs(df.assign(lat_p999_us=df["lat_p99_us"] * 2), percentiles=("p50", "p999"))
    hollow = {trace.name: [symbol.endswith("-open") for symbol in trace.marker.symbol] for trace in fig.data}
    assert hollow == {"epoll p50": [False, True, False], "epoll p999": [False, True, True]}
    assert "hollow = not steady, too few requests for p999 (3 point(s)" in fig.layout.title.subtitle.text
    assert "whiskers: one run, no interval" in fig.layout.title.subtitle.text


def test_one_line_per_model_with_median_and_min_max_spread():
    fig = plots.metric_vs(synthetic(), "server_context-switches")
    traces = _model_traces(fig)
    assert set(traces) == {"iterative", "threaded", "select"}
    threaded = traces["threaded"]  # model index 1 -> scale 2 * c * (r + 1)
    assert list(threaded.x) == [3, 6, 10]
    assert list(threaded.y) == [2 * c * 2 for c in (3, 6, 10)]           # median of r+1 = 1,2,3
    assert list(threaded.error_y.array) == [2 * c * 1 for c in (3, 6, 10)]     # max - median
    assert list(threaded.error_y.arrayminus) == [2 * c * 1 for c in (3, 6, 10)]
    assert "median" in threaded.hovertemplate and "min-max" in threaded.hovertemplate
    assert {row[2] for row in threaded.customdata} == {"75% interval of the median of 3 runs"}  # [min, max] of 3
    assert "whiskers: 75% interval of the median of 3 runs" in fig.layout.title.subtitle.text
    assert not any(t.name == "failed" for t in fig.data)


def test_each_model_keeps_its_colour_in_every_figure():
    df = synthetic()
    for fig in (plots.metric_vs(df, "elapsed_s"),
                seeds.comparison(df, seeds.table("001"), "context-switches")):
        for trace in fig.data:
            if trace.name in plots.MODEL_COLORS:
                assert trace.line.color == plots.color(trace.name)
    assert len({plots.color(m) for m in ("iterative", "threaded", "select")}) == 3


def contrast_on_white(colour: str) -> float:
    """WCAG 2.1's contrast ratio of an sRGB colour against white (its definitions of relative
    luminance and contrast ratio, written here from the standard, not from labkit)."""
    def linear(byte: int) -> float:
        c = byte / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    digits = colour.lstrip("#")
    digits = "".join(d * 2 for d in digits) if len(digits) == 3 else digits
    r, g, b = (linear(int(digits[i:i + 2], 16)) for i in (0, 2, 4))
    return (1.0 + 0.05) / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05)


def test_every_mark_colour_stands_3_to_1_on_white_and_grey_text_4_5_to_1():
    """WCAG 2.1 1.4.11 (a mark a reader needs: 3:1 against the plot) and 1.4.3 (text: 4.5:1)."""
    from labkit import flame
    from labkit.plots import style

    marks = {**{f"model {m}": c for m, c in style.MODEL_COLORS.items()},
             **{f"series {i}": c for i, c in enumerate(style.SERIES_COLORS)},
             **{f"spare {i}": c for i, c in enumerate(style._SPARE_COLORS)},
             "saturated grey": style.SATURATED_GREY, "failed": style.FAILED_COLOR,
             "flame kernel": flame.KERNEL, "flame user": flame.USER, "flame root": flame.ROOT}
    assert {name: round(contrast_on_white(c), 2) for name, c in marks.items()
            if contrast_on_white(c) < style.MARK_CONTRAST} == {}
    assert contrast_on_white("#F0E442") < 1.5 and round(contrast_on_white("#0072B2"), 1) == 5.2  # the formula
    models = {m: c for m, c in style.MODEL_COLORS.items() if m != "pool"}  # pool: threadpool's other name
    assert len(set(models.values())) == len(models)
    from labkit.plots import tables

    assert contrast_on_white(tables.NOT_MEASURABLE_GREY) >= 4.5
    df = synthetic()
    df.loc[df["model"] == "select", "server_cpu-migrations"] = float("nan")  # one model's cells missing
    table = plots.counters_table(df, "server")
    html = plots.style_counters(table).to_html()
    assert f"color: {tables.NOT_MEASURABLE_GREY}" in html and "not measurable" in html


def test_failed_points_are_drawn_with_their_reason():
    # threaded @ 10: one repeat failed, two ok; select @ 6: every repeat failed.
    failed = [("threaded", 10, 1)] + [("select", 6, r) for r in range(3)]
    fig = plots.metric_vs(synthetic(failed=failed), "elapsed_s")
    crosses = [t for t in fig.data if t.name == "failed"]
    assert len(crosses) == 1
    cross = crosses[0]
    assert cross.marker.symbol == "x"
    points = {(row[0], x): row for row, x in zip(cross.customdata, cross.x)}
    assert set(points) == {("threaded", 10), ("select", 6)}
    assert "server threaded died" in points[("threaded", 10)][3]
    assert points[("select", 6)][1] == 3  # three failed repeats
    # select's line skips 6 clients (nothing measured) but keeps 3 and 10.
    assert list(_model_traces(fig)["select"].x) == [3, 10]
    # the wholly failed point sits below every measured one, marked, not on another model's point
    ys = dict(zip(((row[0], x) for row, x in zip(cross.customdata, cross.x)), cross.y))
    lowest = min(min(t.y) for t in _model_traces(fig).values())
    assert ys[("select", 6)] < lowest
    assert dict(zip(ys, cross.text)) == {("threaded", 10): "", ("select", 6): "failed"}


def test_unmeasurable_metric_says_why_instead_of_plotting_zero():
    fig = plots.metric_vs(synthetic(hardware=False), "server_cycles")
    assert _model_traces(fig) == {}
    text = " ".join(a.text for a in fig.layout.annotations).replace("<br>", " ")
    assert "not measurable on this machine" in text
    assert "&lt;not supported&gt;" in text
    for trace in fig.data:
        assert 0 not in list(trace.y or [])


WAITS = ("not measurable until exercise 1.1: the top service runs your procstat_parse() (csrc/services/procstat.c), "
         "which is still the stub. Solve exercise 1.1 in notebook 01_proc_service first.")


@pytest.mark.parametrize("draw", [lambda df: plots.metric_vs(df, "throughput_rps"),
                                  lambda df: plots.metric_vs(df, "server_task-clock"),
                                  lambda df: plots.latency_vs(df)], ids=["metric", "counter", "latency"])
def test_all_points_waiting_figure(draw):
    """Points that wait for an unsolved exercise were never run: the figure gives the
    exercise's sentence, not "every point failed" nor a counter's note."""
    df = synthetic(failed=[(m, c, r) for m in ("iterative", "threaded", "select") for c in (3, 6, 10)
                           for r in range(3)]).assign(error=WAITS, waiting_for_exercise="1.1")
    text = " ".join(a.text for a in draw(df).layout.annotations).replace("<br>", " ")
    assert "not measurable until exercise 1.1: the top service runs your procstat_parse()" in text, text
    assert "failed" not in text and "this machine" not in text, text


def test_partly_unmeasurable_metric_names_the_models_in_the_subtitle():
    df = synthetic(hardware=True)
    df.loc[df["model"] == "select", "server_cycles"] = math.nan
    fig = plots.metric_vs(df, "server_cycles")
    assert set(_model_traces(fig)) == {"iterative", "threaded"}
    assert "not measurable for select" in fig.layout.title.subtitle.text


def test_saturated_points_are_marked_and_warned_about():
    df = synthetic(saturated=[("select", 10)])
    fig = plots.metric_vs(df, "elapsed_s")
    symbols = list(_model_traces(fig)["select"].marker.symbol)
    # select's own shape at every point, open where the generator was the limit
    assert symbols[0] == symbols[1] in plots.SYMBOLS and symbols[2] == f"{symbols[0]}-open"
    shapes = {name: trace.marker.symbol[0] for name, trace in _model_traces(fig).items()}
    assert len(set(shapes.values())) == len(shapes)  # one shape per model
    colors = list(_model_traces(fig)["select"].marker.color)
    assert colors[-1] == plots.SATURATED_GREY and colors[0] == plots.color("select")  # greyed out: not the server
    assert "the load generator was the limit" in fig.layout.title.subtitle.text
    warning = plots.saturation_warning(df)
    assert "select @ 10 clients" in warning and "threaded" not in warning


def test_a_failed_point_is_never_called_saturated():
    """A point whose server refused every connection leaves the client busy reconnecting:
    its reason is its error, not the client's CPU, so the warning names measured points only."""
    df = synthetic(saturated=[("select", 10), ("threaded", 10)])
    df.loc[(df["model"] == "threaded") & (df["clients"] == 10), "status"] = "failed"
    warning = plots.saturation_warning(df)
    assert "select @ 10 clients" in warning and "threaded" not in warning
    df.loc[df["model"] == "select", "status"] = "failed"
    assert plots.saturation_warning(df) is None


@pytest.mark.parametrize("log_y", [False, True])
def test_a_saturated_point_is_hollow_and_grey_in_the_bars_too(log_y):
    """The warning points at hollow grey marks in every server's chart: metric_by_point's
    bars (an outline without fill) and its marks on a log axis (the open shape)."""
    df = synthetic(saturated=[("select", 10)])
    fig = plots.metric_by_point(df, "elapsed_s", log_y=log_y)
    select = next(trace for trace in fig.data if trace.name == "select")
    greyed = [label.endswith("10") for label in select.x]
    assert greyed.count(True) == 1
    colours = list(select.marker.line.color if not log_y else select.marker.color)
    assert colours == [plots.SATURATED_GREY if g else plots.color("select") for g in greyed]
    if log_y:
        assert [s.endswith("-open") for s in select.marker.symbol] == greyed
    else:
        assert [c == "rgba(0,0,0,0)" for c in select.marker.color] == greyed
    others = next(trace for trace in fig.data if trace.name == "threaded")
    assert plots.SATURATED_GREY not in list(others.marker.line.color if not log_y else others.marker.color)
    assert "hollow grey = the load generator was the limit" in fig.layout.title.subtitle.text
    assert "hollow grey" not in (plots.metric_by_point(synthetic(), "elapsed_s").layout.title.subtitle.text or "")
    assert plots.saturation_warning(synthetic()) is None
    # many saturated points: counted, four named, the rest left to the plot's grey marks
    every = synthetic(saturated=[(m, c) for m in ("iterative", "threaded", "select") for c in (3, 6, 10)])
    warning = plots.saturation_warning(every)
    assert "at 9 of 9 points: " in warning and "; and 5 more (hollow grey marks in the plots)" in warning
    assert warning.count(" @ ") == 4


def test_a_busy_sender_is_the_measurement_where_the_sender_is_the_subject():
    """Write strategies and Nagle measure the sender's own calls: one connection sending
    flat out keeps its CPU busy by design, so there is nothing to warn of, nor advise."""
    every = synthetic(saturated=[(m, c) for m in ("iterative", "threaded", "select") for c in (3, 6, 10)])
    note = experiments.get("write_strategies").saturation_warning(every)
    assert note.startswith("The sender kept its CPU busy at 9 of 9 points: ")
    assert "WARNING" not in note and "more CPUs" not in note and "grey" not in note
    assert experiments.get("write_strategies").client_is_subject and experiments.get("nagle").client_is_subject
    assert experiments.get("proc_top").saturation_warning(every).startswith("WARNING: the client saturated")
    assert not any(e.client_is_subject for name, e in experiments.catalogue().items()
                   if name not in ("write_strategies", "nagle"))


def test_latency_figure_has_p50_and_p99_per_model():
    fig = plots.latency_vs(synthetic())
    names = {t.name for t in fig.data}
    assert {"iterative p50", "iterative p99", "select p99"} <= names
    p99 = next(t for t in fig.data if t.name == "iterative p99")
    assert list(p99.y) == [30.0 * c * 2 for c in (3, 6, 10)]
    assert p99.line.dash == "dash"


def test_counters_table_has_medians_and_keeps_missing_counters_missing():
    table = plots.counters_table(synthetic(hardware=False), side="client")
    assert list(table.index.names) == ["model", "clients"]
    assert len(table) == 9
    assert table.loc[("threaded", 6), "task-clock (ms)"] == 0.5 * 2 * 6 * 2
    assert table.loc[("iterative", 3), "context switches"] == 3 * 2
    assert table["cycles"].isna().all() and table["instructions"].isna().all()
    html = plots.style_counters(table).to_html()
    # the counters supported for no point are one line of the caption, not six columns of it
    assert html.count("not measurable") == 1 and "not supported" not in html
    assert "not measurable on this machine: cycles, instructions, IPC (instructions per cycle), branches" in html
    assert "<th" in html and ">cycles<" not in html and "task-clock (ms)" in html
    # each median with its interval over the 3 repeats, said in the caption
    assert ">6<br><small>(3 - 9)</small><" in html
    assert "under each median, in brackets: 75% interval of the median of 3 runs" in html
    once = plots.style_counters(plots.counters_table(synthetic(hardware=False, repeats=1), side="client")).to_html()
    assert "one run per point, so no interval" in once and "<small>" not in once


def test_counters_table_with_hardware_counters():
    table = plots.counters_table(synthetic(hardware=True), side="server")
    assert table.loc[("select", 10), "cycles"] == 1000.0 * 3 * 10 * 2
    assert not table["cycles"].isna().any()
    assert "not measurable" not in plots.style_counters(table).to_html()


def test_bad_input_says_what_to_do():
    df = synthetic()
    with pytest.raises(LabError, match="no column"):
        plots.metric_vs(df, "server_nonsense")
    with pytest.raises(LabError) as err:
        plots.counters_table(df, side="both")
    assert "side='client'" in err.value.fix
    with pytest.raises(LabError):
        seeds.comparison(df, seeds.table("001"), "page-faults")
    with pytest.raises(LabError):
        plots.metric_vs(df.drop(columns=["status"]), "elapsed_s")


def test_failed_points_table():
    table = plots.failed_points(synthetic(failed=[("iterative", 3, 0)]))
    assert table.to_dict("records") == [
        {"model": "iterative", "clients": 3, "repeat": 0, "error": "server iterative died (exit 1)"}]
    assert np.all(plots.failed_points(synthetic()).shape == (0, 4))


def uploads_rows():
    """uploads-shaped rows: two models x 1 and 100 connections x two sizes."""
    rows = []
    for model in ("epoll", "aio"):
        for clients in (1, 100):
            for size in (102400, 10 << 20):
                rows.append(dict(experiment="uploads", model=model, clients=clients, size=size, repeat=0,
                                 status="ok", error="", goodput_gbit_s=clients * size / 1e9,
                                 server_batch_s=clients * size / 1e9, client_saturated=False,
                                 counters_note=""))
    return of_experiment(pd.DataFrame(rows), "uploads")


def test_a_size_axis_is_written_with_units_and_each_size_has_its_own_dash():
    df = uploads_rows()
    fig = plots.metric_vs(df, "goodput_gbit_s", x="size", log_x=True)
    assert list(fig.layout.xaxis.ticktext) == ["100KB", "10MB"] and fig.layout.xaxis.type == "log"
    assert fig.layout.yaxis.title.text == "goodput (Gbit/s)"
    by_clients = plots.metric_vs(df, "goodput_gbit_s", x="clients")
    dashes = {trace.name: trace.line.dash for trace in by_clients.data}
    assert dashes == {"aio, upload size 100KB": "solid", "aio, upload size 10MB": "dot",
                      "epoll, upload size 100KB": "solid", "epoll, upload size 10MB": "dot"}


def test_latency_histogram_sums_the_repeats_into_bins_per_decade():
    rows = [dict(model="threaded", strategy="many", nodelay="off", status="ok",
                 lat_histogram=[[41000.0, 3], [44000.0, 2]]),
            dict(model="threaded", strategy="many", nodelay="off", status="ok", lat_histogram=[[43000.0, 1]]),
            dict(model="threaded", strategy="single", nodelay="off", status="ok", lat_histogram=[[60.0, 6]]),
            dict(model="threaded", strategy="single", nodelay="on", status="failed", lat_histogram=[[60.0, 9]])]
    fig = plots.latency_histogram(pd.DataFrame(rows), per_decade=5)
    lines = {trace.name: dict(zip(trace.x, trace.y)) for trace in fig.data}
    assert set(lines) == {"strategy many, nodelay off", "strategy single, nodelay off"}  # failed rows left out
    many = lines["strategy many, nodelay off"]
    # 41 to 44 ms fall in one bin, (10^4.6, 10^4.8] µs = (39.8, 63.1] ms, drawn from its lower edge
    [(lower, count)] = [(x, y) for x, y in many.items() if y]
    assert count == 6 and lower == pytest.approx(10 ** 4.6)
    assert sum(lines["strategy single, nodelay off"].values()) == 6
    assert fig.layout.xaxis.type == "log"


def test_an_axis_takes_a_log_scale_where_the_values_span_decades():
    wide = pd.DataFrame([dict(model=m, clients=c, status="ok", lat_p99_us=v, repeat=0, error="")
                         for m, c, v in (("epoll", 10, 500.0), ("epoll", 100, 900.0), ("threaded", 10, 2e5),
                                         ("threaded", 100, 1e6))])
    narrow = wide.assign(lat_p99_us=[500.0, 700.0, 900.0, 1000.0])
    assert plots.spans_decades(wide, "lat_p99_us") and not plots.spans_decades(narrow, "lat_p99_us")
    assert plots.metric_by_point(wide, "lat_p99_us").layout.yaxis.type == "log"
    assert plots.metric_by_point(narrow, "lat_p99_us").layout.yaxis.type in (None, "linear")
    assert plots.metric_vs(wide, "lat_p99_us").layout.yaxis.type == "log"
    assert plots.metric_vs(wide, "lat_p99_us", log_y=False).layout.yaxis.type in (None, "linear")  # asked: kept


def test_bars_named_and_failed_on_log_axis():
    """Bars stand at their points named and a failed one shows on a log axis."""
    rows = pd.DataFrame([dict(model=m, clients=c, status=st, lat_p99_us=v, repeat=0, error=e)
                         for m, c, st, v, e in (("epoll", 500, "ok", 500.0, ""), ("epoll", 2000, "ok", 900.0, ""),
                                                ("threaded", 500, "ok", 2e5, ""),
                                                ("select", 2000, "failed", math.nan, "descriptor 1024"))])
    fig = plots.metric_by_point(rows, "lat_p99_us")
    # "500" and "2,000" name groups of bars; plotly would read them as numbers on a linear axis
    assert fig.layout.xaxis.type == "category" and fig.layout.yaxis.type == "log"
    [cross] = [t for t in fig.data if t.name == "failed"]
    assert list(cross.x) == ["2,000"] and 0 < cross.y[0] < 500.0  # below the lowest bar, not at log(0)


def test_log_axis_marks_per_model():
    """No bar stands on a log axis each model gets a mark of its own and one model is not per model."""
    wide = pd.DataFrame([dict(model=m, clients=c, status="ok", lat_p99_us=v, repeat=0, error="")
                         for m, c, v in (("epoll", 10, 500.0), ("epoll", 100, 900.0), ("threaded", 10, 2e5),
                                         ("threaded", 100, 1e6))])
    log = plots.metric_by_point(wide, "lat_p99_us")
    assert log.layout.yaxis.type == "log" and not [t for t in log.data if t.type == "bar"]
    assert [set(t.marker.symbol) for t in log.data] == [{"circle"}, {"square"}] and log.layout.scattermode == "group"
    linear = plots.metric_by_point(wide.assign(lat_p99_us=[500.0, 700.0, 900.0, 1000.0]), "lat_p99_us")
    assert {t.type for t in linear.data} == {"bar"}
    assert linear.layout.title.text == "latency p99 (µs) per model"
    one = plots.metric_by_point(wide[wide["model"] == "epoll"], "lat_p99_us")
    assert "per model" not in one.layout.title.text and "of epoll" in one.layout.title.text
    # against an axis too: one line has no legend, so the title names its model
    assert plots.metric_vs(wide[wide["model"] == "epoll"], "lat_p99_us").layout.title.text.endswith(" of epoll")
    assert not plots.metric_vs(wide, "lat_p99_us").layout.title.text.endswith(" of epoll")


@pytest.mark.parametrize("log_y", [False, True])
def test_a_reference_line_is_drawn_at_its_value_on_linear_and_log_axes(log_y):
    """plotly places a shape in data units on every axis, and an annotation on a log axis in log
    units (plotly.js#6194): add_hline's label at iperf3's 12.6 Gbit/s once stretched a goodput
    axis to 1T.  Checked where it counts, in the picture plotly draws (kaleido's SVG): the
    dashed line at the height of a marker at the same value, its label just above it."""
    import re

    fig = go.Figure(go.Scatter(x=[1, 10, 100], y=[0.5, 12.6, 9], mode="markers"))
    fig.update_yaxes(type="log" if log_y else "linear")
    plots.reference_line(fig, 12.6, "iperf3")
    fig.update_layout(margin=dict(l=50, r=50, t=50, b=50), showlegend=False)
    svg = fig.to_image(format="svg", width=600, height=400).decode()
    left, top = map(float, re.search(r'class="overplot"><g class="xy" transform="translate\(([\d.]+),([\d.]+)\)',
                                     svg).groups())
    marks = [float(y) + top for _, y in re.findall(r'class="point" transform="translate\(([\d.]+),([\d.]+)\)', svg)]
    line = float(re.search(r'<path data-index="0" fill-rule="evenodd" d="M[\d.]+,([\d.]+)L', svg).group(1))
    label = float(re.search(r'class="annotation-text-g" transform="rotate\(0,[\d.]+,([\d.]+)\)', svg).group(1))
    assert len(marks) == 3 and abs(line - marks[1]) <= 1.0, (line, marks)
    assert line - 20 <= label < line, (label, line)  # yanchor bottom: the text sits on the line


def test_counters_note_says_each_once():
    """The counters note says each remark once and lists what was missing once."""
    df = pd.DataFrame({"counters_note": [
        "perf ok; not measurable on this machine: cycles, instructions",
        "perf ok; not measurable on this machine: cycles, instructions, branches",
        "", None]})
    assert plots.counters_note(df) == ("counters note: perf ok; not measurable on this machine: "
                                       "cycles, instructions, branches")
    assert plots.counters_note(pd.DataFrame({"counters_note": ["", None]})) == \
        "counters note: every counter was measured"


def test_the_counters_table_writes_its_points_as_their_parameters_do():
    rows = [dict(experiment="uploads", model="epoll", clients=1, size=size, placement="same_host", link_delay_ms=0,
                 repeat=0, status="ok", **{"server_task-clock": 1.0}) for size in (102400, 10485760)]
    table = plots.counters_table(of_experiment(pd.DataFrame(rows), "uploads"))
    assert table.loc[("epoll", 10485760), "task-clock (ms)"] == 1.0  # the values stay
    # the axes with one value are said once, in the caption
    assert "(connections 1, placement same_host, one-way delay (ms) 0)" in table.attrs["caption"]
    html = plots.style_counters(table).to_html()
    assert ">100KB<" in html and ">10MB<" in html and "10485760" not in html
    # each axis headed by its parameter's label, as in every title and legend
    delays = [dict(rows[0], link_delay_ms=delay) for delay in (0, 5)]
    html = plots.style_counters(plots.counters_table(of_experiment(pd.DataFrame(delays), "uploads"))).to_html()
    assert ">one-way delay (ms)<" in html and "link_delay_ms" not in html


def test_a_log_axis_writes_its_minor_labels_whole():
    """0.05 under 0.1 read as "5" with plotly's default small digits."""
    fig = plots.metric_vs(synthetic(), "elapsed_s", log_y=True)
    assert fig.layout.yaxis.type == "log"
    assert fig.layout.template.layout.yaxis.minorloglabels == "complete"
    assert fig.layout.template.layout.xaxis.minorloglabels == "complete"


def test_topology_draws_a_box_per_namespace_joined_by_veths():
    ends = [{"namespace": "lk000001s", "role": "server",
             "interfaces": [{"name": "lk000001a", "address": "198.18.0.1/30", "qdisc": "tbf", "mtu": 1500}]},
            {"namespace": "lk000001m", "role": "delay line",
             "interfaces": [{"name": "lk000001x", "address": "no address", "qdisc": "noqueue", "mtu": 1500}]},
            {"namespace": "lk000001c", "role": "client",
             "interfaces": [{"name": "lk000001b", "address": "198.18.0.2/30", "qdisc": "tbf", "mtu": 1500}]}]
    fig = netlink.topology(ends, "tbf 1gbit, delay line 5ms")
    assert [shape.type for shape in fig.layout.shapes].count("rect") == 3
    assert [shape.type for shape in fig.layout.shapes].count("line") == 2
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert "198.18.0.1/30" in texts and "netns lk000001m" in texts and "qdisc tbf" in texts
    assert "delay line 5ms" in fig.layout.title.text


WHY_MISSING = [
    # statuses, errors, counters_note, metric -> why the figure has nothing for it
    (["failed", "failed"], ["the server did not start: port in use", ""], "perf: cycles not supported",
     "lat_p99_us", "every point failed: the server did not start: port in use"),
    (["failed", "failed"], ["refused", "reset"], "", "server_cs_per_request", "every point failed: refused; reset"),
    (["ok", "ok"], ["", ""], "perf: cycles not supported", "lat_p99_us", "no point that was measured has a value"),
    (["ok", "ok"], ["", ""], "perf: cycles not supported", "server_cycles_per_request", "perf: cycles not supported"),
]


@pytest.mark.parametrize("statuses, errors, note, metric, why", WHY_MISSING)
def test_a_missing_figure_says_its_own_cause(statuses, errors, note, metric, why):
    """A failed point's reason is its error, never a perf counter the machine lacks; a perf
    note explains only a perf counter's column."""
    df = pd.DataFrame({"model": ["epoll"] * 2, "clients": [1, 2], "status": statuses, "error": errors,
                       "counters_note": [note] * 2, metric: [float("nan")] * 2})
    assert plots.why_missing(df, metric).startswith(why)
    said = plots.style.not_measurable(plots.why_missing(df, metric))
    assert ("on this machine" in said) == (statuses[0] == "ok" and metric.startswith("server_"))


def test_every_figure_an_experiment_offers_has_an_axis_title_in_words():
    """A column name (served_fraction, connect_p99_us) is not an axis title: each metric an
    experiment's panel can draw has one in words, its unit where it has one."""
    from labkit import experiments

    offered = {figure.metric: name for name, experiment in experiments.catalogue().items()
               for figure in experiment.figures}
    raw = {metric: name for metric, name in offered.items() if "_" in plots.label(metric)}
    assert raw == {}, f"metrics with no axis title in labkit/plots/style.py: {raw}"
    for metric in offered:
        if metric.endswith("_us"):
            assert plots.label(metric).endswith("(µs)"), metric
        if "_kib_" in metric:
            assert "KiB" in plots.label(metric), metric


@pytest.mark.parametrize("workers, drawn", [((4,), go.Bar), ((2, 4), go.Scatter)])
def test_one_x_value_draws_bars(workers, drawn):
    """The herd's quick profile has one worker count: four models' markers at one x sat on
    each other; bars at that x stand apart.  Two or more values of x: lines, as declared."""
    df = synthetic(models=("select_fork", "epoll_workers", "prefork"), clients=(20,), repeats=1)
    df = pd.concat([df.assign(workers=w, server_cs_per_request=2.0 + w) for w in workers], ignore_index=True)
    df = df.assign(rate=500, placement="same_host", link_delay_ms=0)
    fig = experiments.get("herd").plot(of_experiment(df, "herd"), "server_cs_per_request")
    traces = _model_traces(fig)
    assert set(traces) == {"select_fork", "epoll_workers", "prefork"}
    assert {type(t) for t in traces.values()} == {drawn}
    assert fig.layout.yaxis.title.text.startswith("server context switches per")


def test_check_reasons_said_once():
    """A checks reasons are said once each wrapped not once per repeat on one line."""
    df = synthetic(models=("epoll",), clients=(3,), repeats=4)
    df["verdicts"] = [{"not_steady": f"not steady: p50 was {100 + r}-{110 + r} µs in the run's first half and "
                                     f"{150 + r}-{160 + r} µs in its second (95% intervals)"} for r in range(3)] + [{}]
    flags = plots.summarize(df, "lat_p99_us")["flags"].iloc[0]
    lines = flags.split("<br>")
    assert lines[0] == "not steady (3 of 4 runs):"  # the check's title once, with how many runs failed it
    assert flags.count("not steady") == 1 and flags.count("p50 was 100-110") == 1
    assert "and 1 more of the same kind" in lines[-1]  # the third reason counted, not said
    assert max(len(line) for line in lines) <= 80  # wrapped: no line across the figure


def _spin_rows(verdicts):
    """service_time rows, one run a point: (arrivals, rate) -> verdicts, as measure.point stores them."""
    rows = []
    for (arrivals, rate), judged in verdicts.items():
        rows.append(dict(model="epoll", service="spin", arrivals=arrivals, spin_dist="exp", spin_us=100, rate=rate,
                         clients=20, repeat=0, status="ok", error="", requests_ok=1000, lat_mean_us=200.0 + rate / 10,
                         lat_p99_us=900.0 + rate / 10, server_cpu_us_per_request=112.0, client_saturated=False,
                         verdicts=judged, cpus_shared=[]))
    return of_experiment(pd.DataFrame(rows), "service_time")


def test_theory_figure_hollow_like_panel():
    """The theory figure draws hollow what the panels figure of the same points draws hollow."""
    from labkit import ground_truth

    steady = "not steady: p50 was 100-110 µs in the run's first half and 150-160 µs in its second (95% intervals)"
    df = _spin_rows({("poisson", 2000): {}, ("poisson", 5000): {"not_steady": steady},
                     ("even", 2000): {"too_few_for_p999": "too few requests for p999: they bound it at 61%, not 95%"},
                     ("even", 5000): {"not_steady": steady}})
    panel = plots.metric_vs(df, "lat_mean_us", x="rate")
    in_panel = {(trace.name, x): symbol.endswith("-open")
                for trace in panel.data if trace.name != "failed" for x, symbol in zip(trace.x, trace.marker.symbol)}
    table = ground_truth.beside_theory(df, ground_truth.Floor(30.0, 100.0, {}))
    theory = ground_truth.figure(table, "mean")
    measured = [trace for trace in theory.data if trace.name.endswith("measured")]
    rates = {arrivals: list(part.sort_values("utilisation")["rate"]) for arrivals, part in table.groupby("arrivals")}
    in_theory = {(trace.name.split(" ")[0], rate): symbol.endswith("-open")
                 for trace in measured for rate, symbol in zip(rates[trace.name.split(" ")[0]], trace.marker.symbol)}
    assert sorted(in_theory.values()) == sorted(in_panel.values()) == [False, False, True, True]
    assert in_theory == {("poisson", 2000): False, ("poisson", 5000): True, ("even", 2000): False,
                         ("even", 5000): True}
    assert "hollow = not steady (2 point(s)" in theory.layout.title.subtitle.text
    assert "p50 was 100-110 µs" in ground_truth.describe(table, "mean")  # its text version says why


def test_points_never_run_not_failed():
    """Points never run are not measurable with their own mark never failed crosses."""
    waits = "not measurable until exercise 1.2: the poll model runs your poll loop, which is still the stub"
    df = synthetic(failed=[("select", c, r) for c in (3, 6, 10) for r in range(3)] + [("threaded", 10, 0)])
    df["waiting_for_exercise"] = ""
    never = df["model"] == "select"
    df.loc[never, "error"], df.loc[never, "waiting_for_exercise"] = waits, "1.2"
    for fig in (plots.metric_vs(df, "lat_p99_us"), plots.latency_vs(df),
                plots.metric_by_point(df, "lat_p99_us"), plots.metric_by_point(df, "lat_p99_us", log_y=True)):
        crosses = [t for t in fig.data if t.name == "failed"]
        assert [len(t.x) for t in crosses] == [1], [t.name for t in fig.data]  # threaded @ 10 alone failed
        unmeasured = [t for t in fig.data if t.name == "not measurable"]
        assert sum(len(t.x) for t in unmeasured) == 3 and all(t.marker.symbol == "hourglass" for t in unmeasured)
        assert sum(t.showlegend is not False for t in unmeasured) == 1  # one legend entry
        assert "exercise 1.2" in str(unmeasured[0].customdata[0][-1])
    assert list(plots.failed_points(df)["model"]) == ["threaded"]  # "1 point(s) failed", not 10
    assert len(plots.unmeasured_points(df)) == 9
    percentiles = plots.latency_percentiles(_all_percentiles(df), clients=10).layout.title.subtitle.text
    assert "not measurable here until an exercise is solved (not drawn): select" in percentiles
    assert "failed here (not drawn): threaded<br>" in percentiles  # its failed repeat, not select's


def _all_percentiles(df):
    return df.assign(lat_p90_us=df["lat_p99_us"] / 2, lat_p999_us=df["lat_p99_us"] * 2,
                     lat_max_us=df["lat_p99_us"] * 3)


def test_runs_on_cpus_another_lab_run_shared_say_so_on_every_figure():
    df = synthetic(models=("epoll",))
    df["cpus_shared"] = [[1] if c == 10 and r < 2 else [] for c, r in zip(df["clients"], df["repeat"])]
    said = "2 of 9 runs shared CPU 1 with another lab run on this machine: their times include that run's work"
    for fig in (plots.metric_vs(df, "lat_p99_us"), plots.latency_vs(df), plots.metric_by_point(df, "lat_p99_us")):
        assert said in fig.layout.title.subtitle.text.replace("<br>", " "), fig.layout.title.text
    at_10 = plots.latency_percentiles(_all_percentiles(df), clients=10).layout.title.subtitle.text  # that point's runs
    assert "2 of 3 runs shared CPU 1 with another lab run" in at_10.replace("<br>", " ")
    assert "shared" not in plots.metric_vs(synthetic(models=("epoll",)), "lat_p99_us").layout.title.subtitle.text


def test_a_mean_well_below_theory_is_explained_and_one_near_it_is_not():
    from labkit import ground_truth

    df = _spin_rows({("poisson", 2000): {}, ("poisson", 5000): {}})
    df["lat_mean_us"] = [260.0, 330.0]  # M/G/1 with a 12 µs loop: 258 and 340 µs
    near = ground_truth.beside_theory(df, ground_truth.Floor(12.0, 100.0, {}))
    assert ground_truth.departures(near) == []
    # the prediction fed a loop cost measured at a light load (40 µs) where the loop cost 12 µs under load
    df["lat_mean_us"] = [230.0, 300.0]
    table = ground_truth.beside_theory(df, ground_truth.Floor(40.0, 100.0, {}))
    assert table["mean_ratio"].min() <= ground_truth.BELOW_RATIO
    said = ground_truth.below_theory(table)
    rho = table["utilisation"].max()
    assert f"at utilisation {rho:.2f}" in said and "below the dashed line" in said
    assert "(40 µs); at this point the server spent 12 µs of CPU per request beyond the spin" in said
    assert said in ground_truth.departures(table)
