"""Plotly figures and counter tables for sweep results.

Every function takes the DataFrame that labkit.sweep returns (one row per
measured point and repeat) and shows medians over repeats with their min-max
spread, grouped by model and by the grid's axes (the experiment the rows name
says which; any column can be the x axis).  Two rules run through all of it:
  * a failed point is drawn (a cross, the reason in its hover), never dropped;
  * a counter that could not be measured is NaN and is said to be missing,
    never drawn or printed as 0.
Each model keeps one colour in every figure (MODEL_COLORS).
"""

from __future__ import annotations

import math
import textwrap

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.errors import LabError
from labkit.friendly import Note
from labkit.perf.parse import NOT_MEASURABLE

# One colour per model, everywhere (Okabe-Ito: distinguishable with colour-blindness).
MODEL_COLORS = {
    "iterative": "#E69F00",
    "threaded": "#0072B2",
    "select": "#009E73",
    "poll": "#CC79A7",
    "epoll": "#D55E00",
    "threadpool": "#56B4E9",
    "prefork": "#7F7F7F",
    "select_fork": "#F0E442",
    "epoll_et": "#882255",
    "epoll_workers": "#AA4499",
    "pool": "#56B4E9",
    "fork": "#332288",
    "uring": "#44AA99",
    "busypoll": "#000000",
    "aio": "#BCBD22",
}
_SPARE_COLORS = ["#8C564B", "#17BECF", "#9467BD", "#7F7F00"]
# A model's lines differ by dash when another axis (a size, say) varies.
_DASHES = ["solid", "dot", "dash", "dashdot", "longdash", "longdashdot"]
# One model's lines, when only the other axes vary, take a colour each (Okabe-Ito's, told apart
# by colour-blind readers too): six dashes of one colour were hard to tell apart.
_SERIES_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442"]
# A legend of more entries than this goes under the plot, in columns: in its column at the
# right it scrolled, and a model just ticked in the panel was out of view.
LEGEND_BESIDE_MOST = 7
# A y title of more characters than this is broken into lines: at 13 px it is about as tall
# as a 450 px figure's plot area.
Y_TITLE_MOST = 30
FAILED_COLOR = "#C00000"
# Marks that tell traces apart where colour alone would not (coinciding lines, log-axis dots).
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "triangle-down", "star", "hexagon")

TEMPLATE = go.layout.Template(layout=go.Layout(
    font=dict(family="DejaVu Sans, Arial, sans-serif", size=13),
    plot_bgcolor="white",
    # automargin: a title broken in two lines gets the room it needs; minorloglabels: a log axis
    # writes 0.05 and 0.2 whole (plotly's default wrote them "5" and "2" under 0.1)
    xaxis=dict(showgrid=True, gridcolor="#E5E5E5", zeroline=False, linecolor="#444", ticks="outside",
               automargin=True, minorloglabels="complete"),
    yaxis=dict(showgrid=True, gridcolor="#E5E5E5", zeroline=False, linecolor="#444", ticks="outside",
               automargin=True, minorloglabels="complete"),
    legend=dict(title=dict(text="server model")),
    hoverlabel=dict(align="left"),
    margin=dict(l=70, r=30, t=70, b=60),
))

# Human names for sweep columns; "server_"/"client_" prefixes are added by label().
_EVENT_LABELS = {
    "task-clock": "task-clock (ms)",
    "context-switches": "context switches",
    "cpu-migrations": "CPU migrations",
    "page-faults": "page faults",
    "cycles": "cycles",
    "instructions": "instructions",
    "branches": "branches",
    "branch-misses": "branch misses",
    "cache-misses": "cache misses",
    "ipc": "IPC (instructions per cycle)",
    "branch-miss-rate": "branch miss rate",
    "cpus-utilized": "CPUs utilized",
}
_COLUMN_LABELS = {
    "elapsed_s": "elapsed time (s)",
    "throughput_rps": "throughput (requests/s)",
    "lat_p50_us": "latency p50 (µs)",
    "lat_p90_us": "latency p90 (µs)",
    "lat_p99_us": "latency p99 (µs)",
    "lat_p999_us": "latency p99.9 (µs)",
    "lat_max_us": "latency max (µs)",
    "client_cpu_util": "client CPU utilization",
    "lost_connections": "lost connections",
    "server_cpu_us_per_request": "server CPU time per request (µs)",
    "server_cs_per_request": "server context switches per request",
    "lat_uncorrected_p99_us": "latency p99, uncorrected (µs)",
    "transfer_s": "upload time, first byte to last OK (s)",
    "goodput_gbit_s": "goodput (Gbit/s)",
    "server_batch_s": "server's time for the batch (s)",
    "server_cpu_ms_per_mb": "server CPU time per MB (ms)",
    "server_reads_per_request": "server reads per upload",
    "body_bytes_ok": "bytes uploaded",
    "send_s": "sending time (s)",
    "send_gbit_s": "Gbit/s while sending",
    "write_calls_per_repetition": "write calls per repetition (the client's count)",
    "client_write_syscalls_per_repetition": "client write-family system calls per repetition (perf)",
    "data_segments_per_repetition": "TCP segments sent per repetition",
    "server_reads_per_repetition": "server reads per repetition",
    "server_read_syscalls_per_repetition": "server read system calls per repetition (perf)",
}

# counters_table's columns, in the order of the seed reports' tables.
COUNTER_EVENTS = ["task-clock", "cpus-utilized", "context-switches", "cpu-migrations",
                  "page-faults", "cycles", "instructions", "ipc", "branches",
                  "branch-misses", "cache-misses"]


SATURATED_GREY = "#9e9e9e"


def color(model: str) -> str:
    """The colour `model` has in every figure."""
    if model in MODEL_COLORS:
        return MODEL_COLORS[model]
    return _SPARE_COLORS[sum(map(ord, model)) % len(_SPARE_COLORS)]


def readable(value: float) -> str:
    """A number as a person reads it: 20,160 and 0.0083, never 2.016e+04; integers as
    integers, "—" for none (`table.style.format(plots.readable)`)."""
    if pd.isna(value):
        return "—"
    size = abs(value)
    if value == int(value) and size < 1e15:
        return f"{int(value):,}"
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:,.1f}"
    if size >= 0.01:
        return f"{value:.3f}"
    return f"{value:.3g}"  # 0.00169; an exponent only below 0.0001


def label(column: str) -> str:
    """A readable axis title for a sweep column."""
    if column in _COLUMN_LABELS:
        return _COLUMN_LABELS[column]
    for side in ("server", "client"):
        if column.startswith(side + "_"):
            event = column[len(side) + 1:]
            return f"{side} {_EVENT_LABELS.get(event, event)}"
    return column


def _experiment_of(df: pd.DataFrame):
    """The experiment `df`'s rows name, or None."""
    if "experiment" in df.columns and df["experiment"].notna().any():
        from labkit import experiments

        try:
            return experiments.get(str(df["experiment"].dropna().iloc[0]))
        except LabError:
            pass
    return None


def axes_of(df: pd.DataFrame) -> list[str]:
    """The grid axes of the experiment `df`'s rows name (model first), as results columns;
    ["model", "clients"] for rows that name none."""
    experiment = _experiment_of(df)
    return experiment.axis_columns if experiment else ["model", "clients"]


def _param_of(df: pd.DataFrame, column: str):
    """The parameter that fills `column` in the experiment the rows name, or None."""
    experiment = _experiment_of(df)
    for param in experiment.parameters if experiment else ():
        if param.column == column:
            return param
    return None


def axis_title(df: pd.DataFrame, column: str) -> str:
    """The title of the axis that shows `column`: its parameter's label in the experiment
    the rows name ("idle connections"), else label(column)."""
    param = _param_of(df, column)
    if param is not None:
        return param.title
    return "concurrent clients" if column == "clients" else label(column)


def _kind_of(df: pd.DataFrame, column: str):
    param = _param_of(df, column)
    return param.kind if param is not None else None


def value_text(df: pd.DataFrame, column: str, value) -> str:
    """One value of `column` as its parameter's kind writes it (10485760 -> '10MB'),
    else 1,000 with separators."""
    kind = _kind_of(df, column)
    if kind is not None:
        return kind.text(value)
    return f"{value:,}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def setting(df: pd.DataFrame, column: str, value) -> str:
    """A parameter and its value as every title, legend and caption writes it: its one label
    and its kind's text ("one-way delay (ms) 5", not "link_delay_ms 5" in one place and the
    label in another)."""
    return f"{axis_title(df, column)} {value_text(df, column, value)}"


def _series_of(df: pd.DataFrame, x: str, series) -> list[str]:
    """The grid axes besides model and x: each of their values gets a line of its own."""
    if series is None:
        series = [c for c in axes_of(df) if c not in ("model", x)]
    return [c for c in series if c in df.columns]


def summarize(df: pd.DataFrame, metric: str, x: str = "clients", series=()) -> pd.DataFrame:
    """Per (model, *series, x): median/min/max of `metric` over ok repeats, and the failures.

    Columns: model, *series, x, median, min, max, ok, measured, failed, saturated, errors.
    """
    keys = ["model", *series, x]
    _require(df, [*keys, "status"])
    if metric not in df.columns:
        raise LabError(f"the results have no column {metric!r}",
                       "pick one of: " + ", ".join(c for c in df.columns if _is_numeric(df[c])))
    rows = []
    for values, point in df.groupby(keys, sort=True):
        ok = point[point["status"] == "ok"]
        failed = point[point["status"] != "ok"]
        measured = pd.to_numeric(ok[metric], errors="coerce").dropna()
        saturated = bool(ok["client_saturated"].fillna(False).astype(bool).any()) \
            if "client_saturated" in ok else False
        errors = sorted({str(e) for e in failed.get("error", pd.Series(dtype=str)).fillna("no reason recorded")})
        rows.append(dict(zip(keys, values),
                         median=measured.median() if len(measured) else math.nan,
                         min=measured.min() if len(measured) else math.nan,
                         max=measured.max() if len(measured) else math.nan,
                         ok=len(ok), measured=len(measured), failed=len(failed),
                         saturated=saturated, errors="; ".join(errors)))
    return pd.DataFrame(rows, columns=[*keys, "median", "min", "max", "ok",
                                       "measured", "failed", "saturated", "errors"])


def _line_name(df: pd.DataFrame, model: str | None, series: list[str], values: tuple, varying: set[str]) -> str:
    """'epoll', or 'epoll, clients 100' when another axis than x varies; without the model
    (None: the legend's title names it and the axes), the values alone: 'other_host, 5'."""
    if model is None:
        return ", ".join(value_text(df, column, value) for column, value in zip(series, values)
                         if column in varying)
    shown = [setting(df, column, value) for column, value in zip(series, values)
             if column in varying]
    return ", ".join([model, *shown])


def why_missing(df: pd.DataFrame, metric: str) -> str:
    """Why `metric` has no values, in the words the sweep recorded."""
    notes = []
    if "counters_note" in df.columns:
        notes = [str(n) for n in df["counters_note"].dropna().unique() if str(n).strip()]
    if notes:
        return _escape("; ".join(notes))
    if "status" in df.columns and (df["status"] != "ok").all():
        return "every point failed (hover the crosses for the reasons)"
    return f"perf reported {metric.split('_', 1)[-1]} as <not supported>"


def _not_measurable(why: str, separator: str = " ") -> str:
    """'not measurable on this machine: <why>', without saying it twice when
    the recorded note already starts with it."""
    if why.startswith(NOT_MEASURABLE):
        return why
    return f"{NOT_MEASURABLE}:{separator}{why}"


def spans_decades(df: pd.DataFrame, metric: str, decades: float = 2.0) -> bool:
    """Whether the measured values of `metric` span `decades` or more (500 us to 1 s does):
    then a linear axis flattens all but the largest, and the figure takes a log axis."""
    if metric not in df.columns:
        return False
    rows = df[df["status"] == "ok"] if "status" in df.columns else df
    values = pd.to_numeric(rows[metric], errors="coerce")
    values = values[values > 0]
    return len(values) > 1 and values.max() / values.min() >= 10 ** decades


def metric_vs(df: pd.DataFrame, metric: str, x: str = "clients", series=None, title: str | None = None,
              log_x: bool = False, log_y: bool | None = None, x_title: str | None = None) -> go.Figure:
    """`metric` against column `x`, one line per model (and per value of every other axis
    of the grid, `series`): median of the repeats, min-max error bars, failed points
    as crosses with the reason in the hover.  log_y=None: a log axis where the values
    span two decades or more."""
    log_y = spans_decades(df, metric) if log_y is None else log_y
    series = _series_of(df, x, series)
    x_title = x_title or axis_title(df, x)
    summary = summarize(df, metric, x, series)
    varying = {c for c in series if summary[c].nunique() > 1}
    constant = [setting(df, c, summary[c].iloc[0])
                for c in series if c not in varying and not summary.empty]
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, xaxis_title=x_title, yaxis_title=label(metric))
    _title(fig, title or f"{label(metric)} vs {x_title}", [] if title else constant)
    ticks = sorted(summary[x].unique())
    fig.update_xaxes(type="log" if log_x else "linear", tickvals=ticks,
                     ticktext=[value_text(df, x, tick) for tick in ticks])
    if log_y:
        fig.update_yaxes(type="log")

    measured = summary.dropna(subset=["median"])
    combos = sorted({tuple(v) for v in measured[series].itertuples(index=False)}) if series else []
    models = list(dict.fromkeys(measured["model"]))
    by_series = len(models) == 1 and len(combos) > 1  # one model: its lines differ by colour
    if by_series:
        fig.update_layout(legend_title_text=f"{models[0]}: " + ", ".join(
            axis_title(df, c) for c in series if c in varying))
    for values, line in measured.groupby(["model", *series], sort=False):
        model = values[0]
        combo = combos.index(tuple(values[1:])) if series else 0
        dash = "solid" if by_series or not series else _DASHES[combo % len(_DASHES)]
        colour = _SERIES_COLORS[combo % len(_SERIES_COLORS)] if by_series else color(model)
        # a shape per line: lines that coincide (every model reads as often) stay told apart
        shape = SYMBOLS[(combo if by_series else models.index(model)) % len(SYMBOLS)]
        fig.add_trace(go.Scatter(
            x=line[x], y=line["median"], name=_line_name(df, None if by_series else model, series,
                                                         values[1:], varying),
            mode="lines+markers", legendgroup=None if by_series else model,
            line=dict(color=colour, width=2, dash=dash),
            # a point where the load generator was the limit is greyed out: it measured itself
            marker=dict(size=8, symbol=[f"{shape}-open" if s else shape for s in line["saturated"]],
                        color=[SATURATED_GREY if s else colour for s in line["saturated"]]),
            error_y=dict(type="data", symmetric=False, array=line["max"] - line["median"],
                         arrayminus=line["median"] - line["min"], thickness=1.2, width=5),
            customdata=line[["min", "max", "measured", "saturated"]].to_numpy(),
            hovertemplate=(f"<b>{model}</b><br>%{{x}} {x_title}<br>median %{{y:,.4g}}<br>"
                           "min-max %{customdata[0]:,.4g} - %{customdata[1]:,.4g}<br>"
                           "repeats %{customdata[2]}<br>client saturated: %{customdata[3]}"
                           "<extra></extra>"),
        ))
    _add_failures(fig, summary, x, x_noun=x_title)

    notes = []
    missing = summary[summary["median"].isna() & (summary["ok"] > 0)]
    if measured.empty:
        _annotate(fig, f"{label(metric)}: " + _not_measurable(why_missing(df, metric), "<br>"))
        fig.update_xaxes(showticklabels=False, showgrid=False)
        fig.update_yaxes(showticklabels=False, showgrid=False)
    elif not missing.empty:
        notes.append(f"not measurable for {', '.join(sorted(missing['model'].unique()))}: "
                     f"{why_missing(df, metric)}")
    if summary["saturated"].any():
        notes.append("grey ◇ = the load generator was the limit there (it measured itself, not the server)")
    if notes:  # under the shared settings, not instead of them
        shared = fig.layout.title.subtitle.text or ""
        subtitle = "<br>".join([*([shared] if shared else []), *(_wrap(note, 95) for note in notes)])
        fig.update_layout(title_subtitle_text=subtitle, margin_t=70 + 18 * subtitle.count("<br>") + 18)
    _finish(fig)
    return fig


def _finish(fig: go.Figure) -> None:
    """What a chart needs once its traces are in: a y title no taller than the plot (plotly
    neither wraps nor shrinks it: a long one ran over the x tick labels), and a legend of
    more than LEGEND_BESIDE_MOST entries under the plot, three to a row, the figure grown to
    hold it: every entry in view, none scrolled away."""
    for axis in (fig.layout.yaxis, *(getattr(fig.layout, f"yaxis{i}", None) for i in range(2, 5))):
        if axis is not None and axis.title.text and "<br>" not in axis.title.text:
            axis.title.text = _wrap(axis.title.text, Y_TITLE_MOST)
    entries = [t for t in fig.data if t.showlegend is not False and t.name]
    if len(entries) <= LEGEND_BESIDE_MOST:
        return
    rows = math.ceil(len(entries) / 3)
    legend_px = 28 + 24 * rows  # its title's line, then a line per row
    fig.update_layout(height=(fig.layout.height or 450) + legend_px,
                      margin_b=(fig.layout.margin.b or 60) + legend_px + 10,
                      legend=dict(orientation="h", yref="container", y=0.0, yanchor="bottom",
                                  x=0.0, xanchor="left", entrywidth=1 / 3, entrywidthmode="fraction",
                                  title_side="top left"))


def latency_vs(df: pd.DataFrame, x: str = "clients", percentiles=("p50", "p99"),
               x_title: str | None = None) -> go.Figure:
    """Latency percentiles against column `x`: one colour per model, one dash per percentile."""
    dashes = ["solid", "dash", "dot", "dashdot"]
    x_title = x_title or axis_title(df, x)
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title=f"request latency vs {x_title}",
                      xaxis_title=x_title, yaxis_title="latency (µs)")
    any_measured = False
    for dash, pct in zip(dashes, percentiles):
        column = f"lat_{pct}_us"
        summary = summarize(df, column, x).dropna(subset=["median"])
        any_measured |= not summary.empty
        for model, line in summary.groupby("model", sort=False):
            fig.add_trace(go.Scatter(
                x=line[x], y=line["median"], name=f"{model} {pct}", legendgroup=model,
                mode="lines+markers", line=dict(color=color(model), dash=dash, width=2),
                error_y=dict(type="data", symmetric=False, array=line["max"] - line["median"],
                             arrayminus=line["median"] - line["min"], thickness=1.2, width=5),
                hovertemplate=f"<b>{model}</b> {pct}<br>%{{x}} {x_title}<br>%{{y:,.0f}} µs<extra></extra>",
            ))
    _add_failures(fig, summarize(df, f"lat_{percentiles[0]}_us", x), x, x_noun=x_title)
    if not any_measured:
        _annotate(fig, "latency: nothing measured (every point failed)")
    fig.update_xaxes(tickvals=sorted(df[x].unique()))
    _finish(fig)
    return fig


def event_cost(bench: pd.DataFrame) -> go.Figure:
    """ev_bench (libevent's bench.c): microseconds per poll call against watched
    descriptors, one line per backend, log-log; a refused size (select past
    FD_SETSIZE) is named in the subtitle instead of being drawn as zero."""
    _require(bench, ["backend", "descriptors", "ns_per_poll"])
    active = int(bench["active"].iloc[0])
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, legend_title_text="backend",
                      title=f"time per poll call vs watched descriptors ({active} active)",
                      xaxis=dict(title="watched descriptors", type="log", dtick=1),
                      yaxis=dict(title="µs per poll call", type="log", dtick=1))
    refused = []
    for backend, rows in bench.groupby("backend", sort=False):
        measured = rows.dropna(subset=["ns_per_poll"]).sort_values("descriptors")
        refused += [f"{backend} at {int(n):,}" for n in rows.loc[rows["ns_per_poll"].isna(), "descriptors"]]
        fig.add_trace(go.Scatter(
            x=measured["descriptors"], y=measured["ns_per_poll"] / 1000.0, mode="lines+markers",
            name=backend, line=dict(color=color(backend)),
            hovertemplate=f"<b>{backend}</b><br>%{{x:,}} descriptors<br>%{{y:,.2f}} µs per poll<extra></extra>"))
    if refused:
        fig.update_layout(title_subtitle_text="refused (above FD_SETSIZE): " + ", ".join(refused))
    return fig


def _point_label(df: pd.DataFrame, axes: list[str], values) -> str:
    """A grid point as a tick shows it: each value as its parameter writes it ('many · 15 x 100 B')."""
    return " · ".join(value_text(df, axis, value) for axis, value in zip(axes, values))


def _point_axes(df: pd.DataFrame, axes) -> list[str]:
    """The grid axes besides model (a grid point is one value of each)."""
    axes = [c for c in axes_of(df) if c != "model"] if axes is None else list(axes)
    return [c for c in axes if c in df.columns] or ["clients"]


def _varying(df: pd.DataFrame, axes: list[str]) -> list[str]:
    """The axes with more than one value in `df` (one that has a single value names no
    point apart from another), or the first axis when none varies."""
    return [c for c in axes if df[c].nunique() > 1] or axes[:1]


def metric_by_point(df: pd.DataFrame, metric: str, axes=None, title: str | None = None,
                    include_failed: bool = False, log_y: bool | None = None) -> go.Figure:
    """One group of bars per grid point (a value of each of `axes`: clients x exchanges),
    one bar per model (its colour), the median of the repeats with min-max whiskers.
    A point with a failed repeat is marked with a red cross at its bar (or at 0), the
    reasons in the hover.  include_failed=True takes the values of failed repeats too
    (lost connections are measured *because* the point failed).  log_y=None: a log axis
    where the values span two decades or more."""
    log_y = spans_decades(df, metric) if log_y is None else log_y
    axes = _varying(df, _point_axes(df, axes))
    _require(df, ["model", *axes, "status"])
    if metric not in df.columns:
        raise LabError(f"the results have no column {metric!r}",
                       "pick one of: " + ", ".join(c for c in df.columns if _is_numeric(df[c])))
    fig = go.Figure()
    models = list(dict.fromkeys(df["model"]))
    whose = "per model" if len(models) > 1 else f"of {models[0]}" if models else ""
    fig.update_layout(template=TEMPLATE, barmode="group", title=title or f"{label(metric)} {whose}",
                      xaxis_title=" · ".join(axis_title(df, a) for a in axes), yaxis_title=label(metric))
    if log_y:
        fig.update_yaxes(type="log")
    constant = [setting(df, c, df[c].iloc[0]) for c in axes_of(df)
                if c != "model" and c not in axes and c in df.columns and df[c].nunique() == 1]
    _title(fig, title or f"{label(metric)} {whose}", [] if title else constant)

    rows, failures = [], []
    for values, point in df.groupby(["model", *axes], sort=True):
        model, where = values[0], _point_label(df, axes, values[1:])
        used = point if include_failed else point[point["status"] == "ok"]
        used = used[pd.to_numeric(used.get("requests_ok"), errors="coerce").fillna(0) > 0] \
            if include_failed and "requests_ok" in used else used
        measured = pd.to_numeric(used[metric], errors="coerce").dropna()
        failed = point[point["status"] != "ok"]
        median = measured.median() if len(measured) else math.nan
        rows.append(dict(model=model, point=where, median=median,
                         low=measured.min() if len(measured) else math.nan,
                         high=measured.max() if len(measured) else math.nan, n=len(measured)))
        if len(failed):
            reasons = "; ".join(sorted({_wrap(_escape(str(e)), 90) for e in failed["error"].fillna("")}))
            failures.append(dict(model=model, point=where, y=median,
                                 text=f"{len(failed)} of {len(point)} repeats failed<br>{reasons}"))
    summary = pd.DataFrame(rows)
    kinds = [_kind_of(df, axis) for axis in axes]
    # many grid points: slanted labels, with room made below them for the axis title
    # type category: labels like "500" and "2,000" would otherwise make plotly a numeric axis
    fig.update_xaxes(automargin=True, title_standoff=16, type="category")
    if df.groupby(axes).ngroups > 8:
        fig.update_xaxes(tickangle=-40)
    order = [_point_label(df, axes, values) for values in sorted(
        set(zip(*(df[a] for a in axes))),
        key=lambda values: tuple(kind.sort_key(v) if kind else v for kind, v in zip(kinds, values)))]
    for i, model in enumerate(models):
        bars = summary[summary["model"] == model].set_index("point").reindex(order)
        drawn = dict(
            x=order, y=bars["median"], name=model, offsetgroup=model,
            error_y=dict(type="data", symmetric=False, array=bars["high"] - bars["median"],
                         arrayminus=bars["median"] - bars["low"], thickness=1.2, width=4),
            customdata=bars[["n"]].to_numpy(),
            hovertemplate=f"<b>{model}</b><br>%{{x}}<br>median %{{y:,.4g}}<br>repeats %{{customdata[0]}}<extra></extra>",
        )
        if log_y:  # a bar's length means nothing on a log axis (where would it start?): a mark at the median
            fig.add_trace(go.Scatter(mode="markers", marker=dict(color=color(model), size=11,
                                                                 symbol=SYMBOLS[i % len(SYMBOLS)]), **drawn))
        else:
            fig.add_trace(go.Bar(marker_color=color(model), **drawn))
    if log_y:
        fig.update_layout(scattermode="group")
    if failures:
        failed = pd.DataFrame(failures)
        # a point with no value: at 0, or on a log axis (no 0) below the lowest bar
        lowest = summary["median"].min()
        failed["y"] = failed["y"].fillna(lowest / 1.6 if log_y and lowest > 0 else 0.0)
        for model, marks in failed.groupby("model", sort=False):
            fig.add_trace(go.Scatter(
                x=marks["point"], y=marks["y"], mode="markers", name="failed", legendgroup="failed",
                showlegend=model == failed["model"].iloc[0], offsetgroup=model,
                marker=dict(symbol="x", size=12, color=FAILED_COLOR, line=dict(width=1, color="white")),
                customdata=marks[["text"]].to_numpy(),
                hovertemplate=f"<b>FAILED</b>: {model} @ %{{x}}<br>%{{customdata[0]}}<extra></extra>",
            ))
        fig.update_layout(scattermode="group")
    if summary["median"].isna().all():
        _annotate(fig, f"{label(metric)}: nothing measured:<br>{why_missing(df, metric)}")
    _finish(fig)
    return fig


def latency_percentiles(df: pd.DataFrame, axes=None, **at) -> go.Figure:
    """Response-time percentiles (p50, p90, p99, p99.9, max) of every model at one grid
    point: `at` gives its axis values (clients=5000, exchanges=200); an axis not given
    takes its largest value.  Medians of the ok repeats."""
    axes = _point_axes(df, axes)
    _require(df, ["model", *axes, "status"])
    for axis in axes:
        value = at.get(axis, df[axis].max())
        df = df[df[axis] == value]
        at[axis] = value
    names = {"p50": "lat_p50_us", "p90": "lat_p90_us", "p99": "lat_p99_us", "p99.9": "lat_p999_us",
             "max": "lat_max_us"}
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, xaxis_title="percentile", yaxis_title="response time (µs)")
    failed = sorted(df.loc[df["status"] != "ok", "model"].unique())
    _title(fig, "response time percentiles", [setting(df, a, at[a]) for a in axes if a != "model"]
           + ([_escape(f"failed here (not drawn): {', '.join(failed)}")] if failed else []))
    fig.update_yaxes(type="log")
    for i, (model, point) in enumerate(df.groupby("model", sort=False)):
        ok = point[point["status"] == "ok"]
        medians = [pd.to_numeric(ok[column], errors="coerce").median() for column in names.values()]
        if ok.empty:
            continue
        fig.add_trace(go.Scatter(x=list(names), y=medians, name=model, mode="lines+markers",
                                 line=dict(color=color(model), width=2),
                                 marker=dict(symbol=SYMBOLS[i % len(SYMBOLS)], size=8),
                                 hovertemplate=f"<b>{model}</b> %{{x}}: %{{y:,.0f}} µs<extra></extra>"))
    return fig


def latency_histogram(df: pd.DataFrame, by=("strategy", "nodelay"), per_decade: int = 5,
                      title: str | None = None) -> go.Figure:
    """How the exchanges' latencies spread, one line per value of `by`: the load
    generator's fine histogram, summed over the successful repeats and regrouped into
    `per_decade` bins per power of ten.  A peak at 40 ms or more (Linux's minimum
    delayed-ACK timeout) is Nagle's algorithm waiting for a delayed ACK."""
    by = [c for c in by if c in df.columns]
    _require(df, ["status", "lat_histogram"])
    ok = df[df["status"] == "ok"]
    groups = list(ok.groupby(by, sort=True)) if by else [((), ok)]
    binned = []
    for values, rows in groups:
        values = values if isinstance(values, tuple) else (values,)
        counts: dict[int, int] = {}
        for histogram in rows["lat_histogram"]:
            for high_us, count in histogram or []:
                slot = math.ceil(math.log10(max(float(high_us), 1e-3)) * per_decade)
                counts[slot] = counts.get(slot, 0) + int(count)
        name = ", ".join(setting(df, column, value) for column, value in zip(by, values))
        binned.append((name or "all", counts))
    slots = [slot for _, counts in binned for slot in counts]
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title=title or "How long each exchange took",
                      xaxis_title="latency (µs)", yaxis_title="exchanges", legend_title_text="")
    fig.update_xaxes(type="log")
    if not slots:
        _annotate(fig, "no successful exchange to show")
        return fig
    every = range(min(slots) - 1, max(slots) + 2)  # zeros around, so a peak stands out
    for index, (name, counts) in enumerate(binned):
        fig.add_trace(go.Scatter(
            # a step from each bin's lower edge to the next: bin `slot` holds (10^((slot-1)/k), 10^(slot/k)]
            x=[10 ** ((slot - 1) / per_decade) for slot in every], y=[counts.get(slot, 0) for slot in every],
            name=name, mode="lines", line=dict(shape="hv", width=2, dash=_DASHES[index % len(_DASHES)]),
            hovertemplate="%{y} exchanges from %{x:,.0f} µs<extra>" + name + "</extra>"))
    return fig


def observations_table(df: pd.DataFrame, seed_table: pd.DataFrame) -> pd.DataFrame:
    """Seed 003's Observations table beside yours, only where both measured the same point
    (clients x exchanges): per point, the seed's response time per model (s, as printed),
    your median p50 response time (s) and your lost connections.  Written for reading:
    "failed" where every repeat of yours failed, "—" where a side has no number.  Where
    the grids do not meet (the quick profile's), both are listed apart and the table's
    attrs["note"] says so; the note also names the points only one side has."""
    seed = seed_table.pivot_table(index=["clients", "exchanges"], columns="model", values="value")
    exchanges = df["exchanges"] if "exchanges" in df.columns else df["requests"]  # rows older than the column
    measured = df.assign(exchanges=exchanges.astype(int), clients=df["clients"].astype(int))
    ok = measured[measured["status"] == "ok"]
    yours = ok.pivot_table(index=["clients", "exchanges"], columns="model", values="lat_p50_us",
                           aggfunc="median") / 1e6 if not ok.empty else pd.DataFrame()
    lost = measured.pivot_table(index=["clients", "exchanges"], columns="model", values="lost_connections",
                                aggfunc="median")
    ran = measured.groupby(["clients", "exchanges", "model"])["status"].agg(lambda s: (s == "ok").any())
    models = list(dict.fromkeys([*seed.columns, *sorted(measured["model"].unique())]))
    common = [key for key in seed.index if key in lost.index]
    yours_only = [key for key in lost.index if key not in seed.index]
    seed_only = [key for key in seed.index if key not in lost.index]

    def seconds(frame, key, model):
        """A time in s as printed (0.008002), "failed" where every repeat of yours failed, "—" if none."""
        value = frame.at[key, model] if key in frame.index and model in frame.columns else math.nan
        if frame is not seed and (key[0], key[1], model) in ran.index and not ran[(key[0], key[1], model)]:
            return "failed"
        return "—" if pd.isna(value) else f"{value:.6f}".rstrip("0").rstrip(".")

    def count(key, model):
        value = lost.at[key, model] if key in lost.index and model in lost.columns else math.nan
        return "—" if pd.isna(value) else f"{int(round(value)):,}"

    rows = []
    for key in (common or [*seed.index, *lost.index]):
        label = f"{key[0]:,} clients / {key[1]:,} exchanges"
        if key in seed.index:
            rows.append({"point": label, "": "seed 003: response time (s)",
                         **{m: seconds(seed, key, m) for m in models}})
        if key in lost.index:
            rows.append({"point": label, "": "yours: p50 response time (s)", **{m: seconds(yours, key, m) for m in models}})
            rows.append({"point": label, "": "yours: lost connections", **{m: count(key, m) for m in models}})
    table = pd.DataFrame(rows).set_index(["point", ""])
    notes = []
    if not common:
        notes.append("your grid and seed 003's share no point (seed 003: 5,000 and 10,000 clients x 200 and 300 "
                     "exchanges), so both are listed apart: run the full profile to compare point by point")
    else:
        if seed_only:
            notes.append("not measured by you: " + ", ".join(f"{c:,} x {e:,}" for c, e in seed_only))
        if yours_only:
            notes.append("not in seed 003: " + ", ".join(f"{c:,} x {e:,}" for c, e in yours_only))
    table.attrs["note"] = "; ".join(notes)
    return table


def topology(description: list[dict], shaping: str = "") -> go.Figure:
    """A link as boxes, server to client: each namespace (labkit.netlink.Link.describe())
    with its interfaces, addresses and qdiscs, joined by its veth pairs."""
    fig = go.Figure()
    width, gap = 2.6, 1.4
    for i, ns in enumerate(description):
        x0 = i * (width + gap)
        fig.add_shape(type="rect", x0=x0, x1=x0 + width, y0=0, y1=2, line=dict(color=color(ns["role"])),
                      fillcolor="rgba(0,0,0,0.03)")
        lines = [f"<b>{ns['role']}</b>", f"netns {ns['namespace']}"] + [
            f"{it['name']}: {it['address']}" + (f"<br>qdisc {it['qdisc']}" if it["qdisc"] else "")
            for it in ns["interfaces"]]
        fig.add_annotation(x=x0 + width / 2, y=1, text="<br>".join(lines), showarrow=False, font=dict(size=12))
        if i:
            fig.add_shape(type="line", x0=x0 - gap, x1=x0, y0=1, y1=1, line=dict(width=4, color="grey"))
            fig.add_annotation(x=x0 - gap / 2, y=1.15, text="veth", showarrow=False, font=dict(size=11))
    total = len(description) * (width + gap) - gap
    fig.update_xaxes(visible=False, range=[-0.2, total + 0.2])
    fig.update_yaxes(visible=False, range=[-0.2, 2.2])
    fig.update_layout(title=f"The link: {shaping}" if shaping else "The link", height=260, showlegend=False,
                      margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white")
    return fig


def seed_beside(df: pd.DataFrame, seed_table: pd.DataFrame, column: str, index=("clients",),
                columns: str = "model", metric: str | None = None, seed_where: dict | None = None,
                scale: float = 1.0, unit: str = "", your_columns: str | None = None) -> pd.DataFrame:
    """A seed's numbers beside your medians of `column`, both x `scale`: rows = the `index`
    axes (each value as its parameter writes it: 10MB, 15 x 100 B), columns = (seed |
    yours, one of `columns`; yours split by `your_columns` instead, if given: the seed's
    placement beside your links).  The seed's rows are those of `metric` (if given) matching
    `seed_where` ({"placement": "same_host"}); a point measured on one side only stays
    blank on the other, as does a number the report did not print ("<1 ms": NaN, never 0)."""
    index = list(index)
    seed_rows = seed_table
    if metric is not None:
        seed_rows = seed_rows[seed_rows["metric"] == metric]
    for key, value in (seed_where or {}).items():
        seed_rows = seed_rows[seed_rows[key] == value]
    seed_name = seed_table["seed"].iloc[0]
    seed = seed_rows.pivot_table(index=index, columns=columns, values="value", aggfunc="first", dropna=False) * scale
    seed.columns = pd.MultiIndex.from_product([[f"seed {seed_name}" + (f" ({unit})" if unit else "")], seed.columns])
    ok = df[df["status"] == "ok"]
    yours = ok.pivot_table(index=index, columns=your_columns or columns, values=column, aggfunc="median") * scale
    yours.columns = pd.MultiIndex.from_product([["yours" + (f" ({unit})" if unit else "")], yours.columns])
    table = pd.concat([seed, yours], axis=1).dropna(how="all")  # no number on either side: no row
    kinds = [_kind_of(df, name) for name in index]
    table = table.loc[sorted(table.index, key=lambda key: tuple(
        kind.sort_key(value) if kind else value for kind, value in zip(kinds, key if isinstance(key, tuple) else (key,))))]
    table.index = pd.MultiIndex.from_tuples(
        [tuple(value_text(df, name, value) for name, value in zip(index, key if isinstance(key, tuple) else (key,)))
         for key in table.index], names=index)
    table.attrs["caption"] = f"{label(column)}: seed {seed_name} beside your medians"
    return table


def seed_times_table(df: pd.DataFrame, seed_table: pd.DataFrame, column: str = "server_batch_s",
                     placement: str = "same_host") -> pd.DataFrame:
    """Seed 002's upload times (ms, the server's clock) beside your medians of `column`,
    rows = connections x size, for the seed's `placement` column."""
    return seed_beside(df, seed_table, column, index=("clients", "size"), seed_where={"placement": placement},
                       scale=1000.0, unit="ms")


def seed_placements_table(df: pd.DataFrame, seed_table: pd.DataFrame, model: str,
                          column: str = "server_batch_s") -> pd.DataFrame:
    """Seed 002's same-host and different-host upload times (ms) for `model` beside
    yours on each link you measured (loopback, tbf 1gbit, ...), rows = connections x size,
    only those you measured (the seed's other rows have nothing to be compared with)."""
    table = seed_beside(df[df["model"] == model], seed_table[seed_table["model"] == model], column,
                        index=("clients", "size"), columns="placement", your_columns="link", scale=1000.0, unit="ms")
    yours = [c for c in table.columns if c[0].startswith("yours")]
    return table.dropna(subset=yours, how="all")


def counters_table(df: pd.DataFrame, side: str = "server", axes=None) -> pd.DataFrame:
    """Median perf counters per grid point (model x the grid's axes), like the seed
    reports' tables.  An axis with one value in the whole sweep (placement same_host)
    names no row: it is said once, in the caption.

    NaN means not measurable on this machine; show it with style_counters(), which says so."""
    if side not in ("server", "client"):
        raise LabError(f"side must be 'server' or 'client', not {side!r}",
                       "counters_table(df, side='server') or side='client'")
    every = _point_axes(df, axes)
    _require(df, ["model", *every, "status"])
    axes = ["model", *_varying(df, every)]
    constant = [setting(df, axis, df[axis].iloc[0]) for axis in every if axis not in axes]
    ok = df[df["status"] == "ok"]
    columns = {}
    for event in COUNTER_EVENTS:
        column = f"{side}_{event}"
        series = pd.to_numeric(ok[column], errors="coerce") if column in ok else pd.Series(math.nan, index=ok.index)
        columns[_EVENT_LABELS[event]] = series
    wide = pd.DataFrame(columns)
    for axis in axes:
        wide[axis] = ok[axis]
    # median() skips NaN, so a group with no measured value stays NaN (never 0).
    table = wide.groupby(axes).median(numeric_only=True)
    table.attrs["caption"] = (f"{side} side: median of the repeats of each point"
                              + (f" ({', '.join(constant)})" if constant else ""))
    # the index keeps the values (table.loc[("select", 10485760)]); shown as written: 10MB
    table.attrs["index_text"] = {axis: {value: value_text(df, axis, value) for value in ok[axis].unique()}
                                 for axis in axes}
    # and each axis is headed by its parameter's one label ("one-way delay (ms)", not link_delay_ms)
    table.attrs["index_titles"] = {axis: axis_title(df, axis) for axis in axes}
    return table


def style_counters(table: pd.DataFrame):
    """counters_table() ready to display: thousands separators, NaN as "not measurable", and
    the counters this machine supports for no point folded into one line of the caption
    (a VM's five missing hardware counters would run the table off the page)."""
    unmeasured = [c for c in table.columns if table[c].isna().all()]
    table = table.drop(columns=unmeasured)
    caption = table.attrs.get("caption", "")
    if unmeasured:
        caption += f"; {NOT_MEASURABLE}: {', '.join(unmeasured)}"
    formats = {c: "{:,.0f}" for c in table.columns}
    formats.update({_EVENT_LABELS["task-clock"]: "{:,.2f}", _EVENT_LABELS["cpus-utilized"]: "{:.3f}",
                    _EVENT_LABELS["ipc"]: "{:.2f}"})
    formats = {c: f for c, f in formats.items() if c in table.columns}
    attrs, axes = dict(table.attrs), list(table.index.names)
    table = table.rename_axis([attrs.get("index_titles", {}).get(axis, axis) for axis in axes])
    styler = table.style
    for level, axis in enumerate(axes):
        shown = attrs.get("index_text", {}).get(axis)
        if shown:
            styler = styler.format_index(lambda value, shown=shown: shown.get(value, value), level=level)
    return (styler.format(formats, na_rep="not measurable")
            .map(lambda v: "color: #999; font-style: italic; white-space: nowrap" if pd.isna(v) else "")
            .set_caption(caption))


def seed_comparison(df: pd.DataFrame, seed_table: pd.DataFrame, metric: str) -> go.Figure:
    """Your machine (left) beside a seed report (right), same metric, same side, same units.

    `seed_table` is labkit.seeds.table(name); `metric` is a seed metric name
    ("task-clock", "context-switches", ..., or "elapsed_s")."""
    seed_rows = seed_table[seed_table["metric"] == metric]
    if seed_rows.empty:
        raise LabError(f"the seed table has no metric {metric!r}",
                       "use one of: " + ", ".join(sorted(seed_table["metric"].unique())))
    seed_name = seed_rows["seed"].iloc[0]
    side = seed_rows["side"].iloc[0]
    unit = seed_rows["unit"].iloc[0]
    column = "elapsed_s" if metric == "elapsed_s" else f"{side}_{metric}"
    ylabel = label(column) if unit in ("count", "CPUs", "ms", "s") else f"{label(column)} ({unit})"

    fig = make_subplots(rows=1, cols=2, shared_yaxes=False, horizontal_spacing=0.12,
                        subplot_titles=(f"your machine ({side} side)",
                                        f"seed {seed_name} ({side} side, their machine)"))
    fig.update_layout(template=TEMPLATE, title=f"{label(column)}: your machine vs seed {seed_name}")
    summary = summarize(df, column) if column in df.columns else pd.DataFrame(columns=["model", "clients", "median"])
    measured = summary.dropna(subset=["median"])
    for model, line in measured.groupby("model", sort=False):
        fig.add_trace(go.Scatter(
            x=line["clients"], y=line["median"], name=model, legendgroup=model,
            mode="lines+markers", line=dict(color=color(model), width=2),
            error_y=dict(type="data", symmetric=False, array=line["max"] - line["median"],
                         arrayminus=line["median"] - line["min"], thickness=1.2, width=5),
            hovertemplate=f"<b>{model}</b> (you)<br>%{{x}} clients<br>%{{y:,.4g}}<extra></extra>",
        ), row=1, col=1)
    for model, line in seed_rows.sort_values("clients").groupby("model", sort=False):
        fig.add_trace(go.Scatter(
            x=line["clients"], y=line["value"], name=model, legendgroup=model,
            showlegend=measured.empty or model not in set(measured["model"]),
            mode="lines+markers", line=dict(color=color(model), width=2, dash="dot"),
            marker=dict(symbol="square"), customdata=line[["seed_label", "printed"]].to_numpy(),
            hovertemplate=(f"<b>{model}</b> (seed {seed_name}: %{{customdata[0]}})<br>"
                           "%{x} clients<br>as printed: %{customdata[1]}<extra></extra>"),
        ), row=1, col=2)
    if column in df.columns and not summary.empty:
        _add_failures(fig, summary, "clients", row=1, col=1)
    if measured.empty:
        why = why_missing(df, column) if column in df.columns else f"the sweep recorded no {column}"
        fig.update_xaxes(showticklabels=False, showgrid=False, row=1, col=1)
        fig.update_yaxes(showticklabels=False, showgrid=False, row=1, col=1)
        # centred on the empty left panel, in paper coordinates from its own domain
        x_domain, y_domain = fig.layout.xaxis.domain, fig.layout.yaxis.domain
        fig.add_annotation(text=_wrap(_not_measurable(why), 28), xref="paper", yref="paper",
                           x=sum(x_domain) / 2, y=sum(y_domain) / 2, showarrow=False,
                           font=dict(size=12), bgcolor="#FFF4E5", bordercolor="#E69F00")
    fig.update_xaxes(title_text="concurrent clients")
    fig.update_xaxes(tickvals=sorted(summary["clients"].unique()) if not summary.empty else None,
                     row=1, col=1)
    fig.update_xaxes(tickvals=sorted(seed_rows["clients"].unique()), row=1, col=2)
    fig.update_yaxes(title_text=ylabel)  # both panels: the seed's has its own scale, and says of what
    return fig


def reference_line(fig: go.Figure, y: float, text: str) -> go.Figure:
    """A horizontal reference (iperf3's ceiling, say) across every subplot, labelled at its
    left end.  On a log axis plotly reads a shape's and an annotation's y as the exponent
    (fig.add_hline(y=12.6) drew iperf3's 12.6 Gbit/s at 10^12.6 and stretched the axis to
    1T), so there the line is placed at log10(y)."""
    for axis in fig.select_yaxes():
        log = axis.type == "log"
        if log and y <= 0:
            continue  # no place on a log axis
        at = math.log10(y) if log else y
        yref = axis.plotly_name.replace("axis", "")
        xref = f"{axis.anchor or 'x'} domain"
        fig.add_shape(type="line", xref=xref, x0=0, x1=1, yref=yref, y0=at, y1=at,
                      line=dict(dash="dash", color="#555", width=1.5))
        fig.add_annotation(xref=xref, x=0.01, xanchor="left", yref=yref, y=at, yanchor="bottom", text=text,
                           showarrow=False, font=dict(size=12, color="#333"))
    return fig


def _where(df: pd.DataFrame, row, axes: list[str]) -> str:
    """'select @ 10 clients', or 'poll @ idle 1,000, clients 100' for other axes (each value
    as its parameter writes it: 'size 10MB')."""
    if axes == ["clients"]:
        return f"{row['model']} @ {int(row['clients'])} clients"
    return f"{row['model']} @ " + ", ".join(setting(df, axis, row[axis]) for axis in axes)


def saturation_warning(df: pd.DataFrame, client_is_subject: bool = False) -> str | None:
    """A warning naming the points where the load generator saturated its CPU, else None.
    Where the sender's own calls are what the experiment measures (`client_is_subject`), a
    busy sender is the measurement, and the line says so instead of warning."""
    if "client_saturated" not in df.columns:
        return None
    saturated = df[df["client_saturated"].fillna(False).astype(bool)]
    if saturated.empty:
        return None
    axes = _point_axes(df, None)
    named = _varying(df, axes)  # an axis with one value in the whole sweep names no point
    points = list(dict.fromkeys(_where(df, row, named)
                                for _, row in saturated.sort_values(["model", *axes]).iterrows()))
    total = len(dict.fromkeys(_where(df, row, named) for _, row in df.iterrows()))
    marked = "" if client_is_subject else " (grey ◇ in the plots)"  # only a server's chart greys a point
    shown = "; ".join(points[:4]) + (f"; and {len(points) - 4} more{marked}" if len(points) > 4 else "")
    where = f"{len(points)} of {total} points: {shown}" if len(points) > 1 else shown
    if client_is_subject:
        return ("The sender kept its CPU busy at " + where + ": here the sender's own write calls "
                "are what is measured, so a busy sender is the measurement, not a flaw.")
    return ("WARNING: the client saturated its CPU at " + where + ". There it measured itself, "
            "not the server: give the client more CPUs (client_cpus), or fewer clients/requests.")


def counters_note(df: pd.DataFrame) -> Note:
    """The rows' counters notes as one line to read: each remark once, and the events that
    were not measurable gathered into one list (every row would repeat them)."""
    remarks, missing = [], []
    notes = df["counters_note"].dropna().astype(str) if "counters_note" in df.columns else []
    for note in notes:
        for remark in (part.strip() for part in note.split("; ")):
            if remark.startswith(NOT_MEASURABLE + ": "):
                missing += [event.strip() for event in remark.removeprefix(NOT_MEASURABLE + ": ").split(",")]
            elif remark and remark not in remarks:
                remarks.append(remark)
    if missing:
        remarks.append(NOT_MEASURABLE + ": " + ", ".join(dict.fromkeys(missing)))
    return Note("counters note: " + ("; ".join(remarks) if remarks else "every counter was measured"))


def failed_points(df: pd.DataFrame) -> pd.DataFrame:
    """The failed rows, with the reason: model, the grid's axes, repeat, error."""
    if "status" not in df.columns:
        return df.iloc[0:0]
    cols = [c for c in ("model", *_point_axes(df, None), "repeat", "error") if c in df.columns]
    return df.loc[df["status"] != "ok", cols].reset_index(drop=True)


def _add_failures(fig: go.Figure, summary: pd.DataFrame, x: str, row=None, col=None,
                  x_noun: str = "clients") -> None:
    """Draw every point with a failed repeat as a red cross: at its median when other
    repeats succeeded, else below every measured point, marked "failed" (at the lowest
    measured value it would sit on another model's point); the reasons are in the hover."""
    failed = summary[summary["failed"] > 0]
    if failed.empty:
        return
    measured = summary["median"].dropna()
    low, high = (float(measured.min()), float(measured.max())) if not measured.empty else (0.0, 1.0)
    log_axis = fig.layout.yaxis.type == "log"
    below = low / 1.6 if log_axis and low > 0 else low - 0.08 * ((high - low) or abs(low) or 1.0)
    y = failed["median"].fillna(below)
    fig.add_trace(go.Scatter(
        x=failed[x], y=y, mode="markers+text", name="failed",
        text=["failed" if pd.isna(m) else "" for m in failed["median"]], textposition="middle right",
        textfont=dict(color=FAILED_COLOR),
        marker=dict(symbol="x", size=13, color=FAILED_COLOR, line=dict(width=1, color="white")),
        customdata=failed.assign(total=failed["failed"] + failed["ok"])[
            ["model", "failed", "total", "errors"]].to_numpy(),
        hovertemplate=("<b>FAILED</b>: %{customdata[0]} @ %{x} " + x_noun + "<br>"
                       "%{customdata[1]} of %{customdata[2]} repeats failed<br>"
                       "%{customdata[3]}<extra></extra>"),
    ), row=row, col=col)


def _title(fig: go.Figure, main: str, settings: list[str]) -> None:
    """A figure's title, and under it, smaller, the settings every point shares (a title is
    not wrapped by plotly: with them on its line it ran off both sides of the figure)."""
    subtitle = _wrap(", ".join(settings), 95) if settings else ""
    fig.update_layout(title=dict(text=main, subtitle=dict(text=subtitle)))
    if subtitle:  # room for it above the plot: a line of 18 px each
        fig.update_layout(margin_t=70 + 18 * subtitle.count("<br>"))


def _wrap(text: str, width: int) -> str:
    """Plotly does not wrap annotation text: break it into <br>-separated lines."""
    return "<br>".join(line for part in text.split("<br>")
                       for line in textwrap.wrap(part, width, break_on_hyphens=False))


def _escape(text: str) -> str:
    """perf's "<not supported>" would be read as an HTML tag by plotly."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _annotate(fig: go.Figure, text: str, y: float = 0.5, size: int = 14) -> None:
    fig.add_annotation(text=_wrap(text, 70), xref="paper", yref="paper", x=0.5, y=y, showarrow=False,
                       font=dict(size=size), bgcolor="#FFF4E5", bordercolor="#E69F00", borderpad=6)


def _require(df: pd.DataFrame, columns: list[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise LabError(f"these results lack the columns {missing}",
                       "pass the DataFrame that labkit.sweep.run() or labkit.store.load() returned")


def _is_numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series)
