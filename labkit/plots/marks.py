"""How a point is marked, the same in every figure of it: hollow where it failed a self-check
(labkit.verdicts) bearing on the figure's metric, greyed and hollow where the load generator
was the limit (checked_marks); a point never run, because it waits for an unsolved exercise,
a grey hourglass named "not measurable", never a failed cross (add_unmeasurable,
add_unmeasurable_bars)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .style import SATURATED_GREY, UNMEASURED_GREY, escape, wrap


def checked_marks(saturated, flagged, shape: str, colour: str, size: int = 8) -> dict:
    """The marks of a series of points, by the one rule every figure of a point follows: a
    point where the load generator was the limit is greyed out and hollow (it measured
    itself); one that failed another self-check (labkit.verdicts) bearing on the figure's
    metric is hollow, its reasons in the hover and the check's title under the chart."""
    return dict(size=size, symbol=[f"{shape}-open" if s or f else shape for s, f in zip(saturated, flagged)],
                color=[SATURATED_GREY if s else colour for s in saturated])



UNMEASURED = "not measurable"  # the name of a figure's trace of points never run (alt_text reads it)


def below_the_data(fig: go.Figure, summary: pd.DataFrame) -> float:
    """A height under every measured point of `summary` (its medians), where a point with no
    value of its own is drawn: a bit lower on a linear axis, a factor lower on a log one."""
    measured = summary["median"].dropna()
    low, high = (float(measured.min()), float(measured.max())) if not measured.empty else (0.0, 1.0)
    if fig.layout.yaxis.type == "log" and low > 0:
        return low / 1.6
    return low - 0.08 * ((high - low) or abs(low) or 1.0)


def add_unmeasurable(fig: go.Figure, summary: pd.DataFrame, x: str, row=None, col=None,
                     x_noun: str = "clients") -> None:
    """Draw every point never run, because it waits for an unsolved exercise (summarize's
    `waiting`), as a grey hourglass below the measured points, "not measurable", with the
    exercise's sentence in the hover: never as a failure, which it is not."""
    waiting = summary[(summary["waiting"] > 0) & summary["median"].isna()]
    if waiting.empty:
        return
    below = below_the_data(fig, summary)
    fig.add_trace(go.Scatter(
        x=waiting[x], y=[below] * len(waiting), mode="markers+text", name=UNMEASURED,
        text=[UNMEASURED] * len(waiting), textposition="middle right", textfont=dict(color=UNMEASURED_GREY),
        marker=dict(symbol="hourglass", size=12, color=UNMEASURED_GREY),
        customdata=waiting.assign(text=[wrap(escape(t), 90) for t in waiting["waits"]])[
            ["model", "waiting", "text"]].to_numpy(),
        hovertemplate=("<b>NOT MEASURABLE</b>: %{customdata[0]} @ %{x} " + x_noun + "<br>"
                       "%{customdata[1]} repeat(s) never run<br>%{customdata[2]}<extra></extra>"),
    ), row=row, col=col)


def add_unmeasurable_bars(fig: go.Figure, waiting: pd.DataFrame, summary: pd.DataFrame, log_y: bool) -> None:
    """metric_by_point's points never run: a grey hourglass at 0 (on a log axis below the lowest
    bar), one legend entry, the exercise's sentence in the hover."""
    lowest = summary["median"].min()
    y = lowest / 1.6 if log_y and lowest > 0 else 0.0
    for model, marks in waiting.groupby("model", sort=False):
        fig.add_trace(go.Scatter(
            x=marks["point"], y=[y] * len(marks), mode="markers", name=UNMEASURED, legendgroup=UNMEASURED,
            showlegend=model == waiting["model"].iloc[0], offsetgroup=model,
            marker=dict(symbol="hourglass", size=12, color=UNMEASURED_GREY),
            customdata=marks[["model", "text"]].to_numpy(),
            hovertemplate="<b>NOT MEASURABLE</b>: %{customdata[0]} @ %{x}<br>%{customdata[1]}<extra></extra>",
        ))
    fig.update_layout(scattermode="group")
