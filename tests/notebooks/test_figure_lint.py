"""The figure check (labkit.figure_lint) flags what misleads a reader and passes what does
not: each row a figure and the words its problem must contain ("" for none)."""

import math

import plotly.graph_objects as go
import pytest

from labkit import experiments, figure_lint, plots


def bars_on_log():
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 1000], name="epoll"))
    return fig.update_yaxes(type="log")


def hline_on_log():  # what add_hline did with iperf3's ceiling on a log axis
    fig = go.Figure(go.Scatter(x=[1, 10, 100], y=[0.5, 3, 9], name="epoll")).update_yaxes(type="log")
    return fig.add_hline(y=12.58, annotation_text="iperf3")


def reference_on_log():
    fig = go.Figure(go.Scatter(x=[1, 10, 100], y=[0.5, 3, 9], name="epoll", mode="lines")).update_yaxes(type="log")
    return plots.reference_line(fig, 12.58, "iperf3")


def long_title():
    return go.Figure(go.Scatter(x=[1], y=[1])).update_layout(title="system calls per repetition " * 5)


def many_traces():
    fig = go.Figure()
    for i in range(12):
        fig.add_scatter(x=[1, 2], y=[i, i + 1], name=f"model {i}", mode="lines")
    return fig


def coinciding(**second_style):
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[10, 20, 30], name="epoll", mode="lines"))
    return fig.add_scatter(x=[1, 2, 3], y=[10.01, 20.02, 30.0], name="poll", mode="lines", **second_style)


def marks(**style):
    """Two measured points of one model, as marks."""
    return go.Figure(go.Scatter(x=[1, 2], y=[3, 4], mode="markers", name="epoll", **style))


WHISKERS = dict(type="data", array=[0.2, 0.3])


def range_leaves_data_out():
    return go.Figure(go.Scatter(x=[1, 2], y=[5, 50])).update_yaxes(range=[0, 10])


CASES = [
    ("bars on a log axis", bars_on_log, "bars on a log axis"),
    ("add_hline on a log axis", hline_on_log, "far outside the data"),
    ("reference_line on a log axis", reference_on_log, ""),
    ("a title wider than the figure", long_title, "wider than the figure"),
    ("a legend of 12 entries", many_traces, "12 entries"),
    ("two lines that coincide, drawn alike", coinciding, "coincide"),
    ("two lines that coincide, dashes apart", lambda: coinciding(line=dict(dash="dot")), ""),
    # two theory lines with no point (all past utilisation 1: a busy machine) draw nothing to hide
    ("two lines of no point, drawn alike", lambda: go.Figure(go.Scatter(x=[1, 2], y=[None, None], mode="lines"))
     .add_scatter(x=[1, 2], y=[None, None], mode="lines"), ""),
    ("a range that leaves data out", range_leaves_data_out, "leaves data out"),
    ("bars on a linear axis", lambda: go.Figure(go.Bar(x=["a", "b"], y=[1, 3], error_y=WHISKERS)), ""),
    ("a legend of 12 entries under the plot", lambda: many_traces().update_layout(legend_orientation="h"), ""),
    ("a y title taller than the plot", lambda: go.Figure(go.Scatter(x=[1], y=[1])).update_layout(
        yaxis_title="server read system calls per repetition (median)"), "taller than the plot"),
    ("a y title broken in two", lambda: go.Figure(go.Scatter(x=[1], y=[1], mode="lines")).update_layout(
        yaxis_title="server read system calls<br>per repetition (median)"), ""),
    # measured points say how sure they are, or why they cannot
    ("marks without whiskers", marks, "without their interval"),
    ("bars without whiskers", lambda: go.Figure(go.Bar(x=["a", "b"], y=[1, 3], name="epoll")),
     "without their interval"),
    ("marks with whiskers", lambda: marks(error_y=WHISKERS), ""),
    ("marks whose whiskers are hidden", lambda: marks(error_y=dict(WHISKERS, visible=False)), "without their interval"),
    ("marks of a figure that says why none", lambda: marks().update_layout(
        title=dict(text="t", subtitle=dict(text="no interval: the seed report prints none"))), ""),
    ("marks whose hover says why none", lambda: marks(hovertemplate="%{y} (exact counts)"), ""),
    ("a figure that names a failure does not excuse marks", lambda: marks().update_layout(
        title=dict(text="t", subtitle=dict(text="failed here (not drawn): select"))), "without their interval"),
    ("the marks of the failed points", lambda: marks().update_traces(name="failed"), ""),
    ("a theory's line", lambda: marks().update_traces(mode="lines"), ""),
]


def one_model_many_settings():
    """One model, two placements x three delays: six lines (05 §4 drew them one colour, six dashes)."""
    import pandas as pd

    rows = [dict(experiment="uploads", model="threaded", clients=1, size=size, placement=placement,
                 link_delay_ms=delay, repeat=0, status="ok", transfer_s=size / 1e9 * (1 + delay))
            for size in (102400, 1048576, 10485760) for placement in ("same_host", "other_host")
            for delay in (0, 5, 50)]
    df = pd.DataFrame(rows)
    df.attrs["experiment"] = experiments.get("uploads")  # as labkit.sweep's frames declare it
    return plots.metric_vs(df, "transfer_s", x="size")


def test_one_models_lines_and_legend():
    """One model's lines take a colour and a shape each and the long legend goes under."""
    fig = one_model_many_settings()
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(lines) == 6
    assert len({t.line.color for t in lines}) == 6 and {t.line.dash for t in lines} == {"solid"}
    assert len({t.marker.symbol[0] for t in lines}) == 6
    assert fig.layout.legend.title.text == "threaded: placement, one-way delay (ms)"
    assert {t.name for t in lines} >= {"other_host, 5", "same_host, 0"}
    assert figure_lint.problems(fig) == []
    many = plots.metric_vs(pd_rows_of_many_models(), "elapsed_s")
    assert len(many.data) > plots.LEGEND_BESIDE_MOST and many.layout.legend.orientation == "h"
    assert figure_lint.problems(many) == []


def pd_rows_of_many_models():
    import pandas as pd

    models = ["iterative", "threaded", "select", "poll", "epoll", "uring", "fork", "pool", "aio"]
    df = pd.DataFrame([dict(experiment="proc_top", model=m, clients=c, repeat=0, status="ok",
                            elapsed_s=0.01 * c * (i + 1)) for i, m in enumerate(models) for c in (1, 10)])
    df.attrs["experiment"] = experiments.get("proc_top")
    return df


@pytest.mark.parametrize("name, make, says", CASES, ids=[c[0] for c in CASES])
def test_the_check_flags_what_misleads_and_passes_what_does_not(name, make, says):
    found = figure_lint.problems(make())
    if says:
        assert any(says in problem for problem in found), (name, found)
    else:
        assert found == [], (name, found)


def test_it_reads_a_figure_as_a_notebook_stores_it():
    """Executed notebooks keep figures as JSON (application/vnd.plotly.v1+json): the same check."""
    import json

    import numpy as np

    stored = json.loads(go.Figure(go.Bar(x=["a", "b"], y=np.array([1.0, 1000.0]))).update_yaxes(type="log").to_json())
    hline = json.loads(go.Figure(go.Scatter(x=np.array([1, 10]), y=np.array([0.5, 9.0]))).update_yaxes(type="log")
                       .add_hline(y=12.58, annotation_text="iperf3").to_json())  # the label: at 10^12.58
    assert isinstance(hline["data"][0]["y"], dict)  # a typed array: decoded, not skipped
    assert any("far outside the data" in p for p in figure_lint.problems(hline))
    assert any("bars on a log axis" in p for p in figure_lint.problems(stored))
    assert math.isclose(len(figure_lint.problems(stored)), len(figure_lint.problems(bars_on_log())))
    assert [p for p in figure_lint.problems(stored) if "log" in p]
