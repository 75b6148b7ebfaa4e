"""The figure check (labkit.figure_check) flags what misleads a reader and passes what does
not: each row a figure and the words its problem must contain ("" for none)."""

import math

import plotly.graph_objects as go
import pytest

from labkit import figure_check, plots


def bars_on_log():
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 1000], name="epoll"))
    return fig.update_yaxes(type="log")


def hline_on_log():  # what add_hline did with iperf3's ceiling on a log axis
    fig = go.Figure(go.Scatter(x=[1, 10, 100], y=[0.5, 3, 9], name="epoll")).update_yaxes(type="log")
    return fig.add_hline(y=12.58, annotation_text="iperf3")


def reference_on_log():
    fig = go.Figure(go.Scatter(x=[1, 10, 100], y=[0.5, 3, 9], name="epoll")).update_yaxes(type="log")
    return plots.reference_line(fig, 12.58, "iperf3")


def long_title():
    return go.Figure(go.Scatter(x=[1], y=[1])).update_layout(title="system calls per repetition " * 5)


def many_traces():
    fig = go.Figure()
    for i in range(12):
        fig.add_scatter(x=[1, 2], y=[i, i + 1], name=f"model {i}")
    return fig


def coinciding(**second_style):
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[10, 20, 30], name="epoll", mode="lines"))
    return fig.add_scatter(x=[1, 2, 3], y=[10.01, 20.02, 30.0], name="poll", mode="lines", **second_style)


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
    ("a range that leaves data out", range_leaves_data_out, "leaves data out"),
    ("bars on a linear axis", lambda: go.Figure(go.Bar(x=["a", "b"], y=[1, 3])), ""),
]


@pytest.mark.parametrize("name, make, says", CASES, ids=[c[0] for c in CASES])
def test_the_check_flags_what_misleads_and_passes_what_does_not(name, make, says):
    found = figure_check.problems(make())
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
                       .add_hline(y=12.58).to_json())
    assert isinstance(hline["data"][0]["y"], dict)  # a typed array: decoded, not skipped
    assert any("far outside the data" in p for p in figure_check.problems(hline))
    assert any("bars on a log axis" in p for p in figure_check.problems(stored))
    assert math.isclose(len(figure_check.problems(stored)), len(figure_check.problems(bars_on_log())))
    assert [p for p in figure_check.problems(stored) if "log" in p]
