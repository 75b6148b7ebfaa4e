"""Plotly figures and counter tables for sweep results.

Every function takes the DataFrame that labkit.sweep returns (one row per
measured point and repeat) and shows medians over repeats with their min-max
spread.  Two rules run through all of it:
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
}
_SPARE_COLORS = ["#000000", "#8C564B", "#17BECF", "#BCBD22", "#9467BD"]
FAILED_COLOR = "#C00000"

TEMPLATE = go.layout.Template(layout=go.Layout(
    font=dict(family="DejaVu Sans, Arial, sans-serif", size=13),
    plot_bgcolor="white",
    xaxis=dict(showgrid=True, gridcolor="#E5E5E5", zeroline=False, linecolor="#444", ticks="outside"),
    yaxis=dict(showgrid=True, gridcolor="#E5E5E5", zeroline=False, linecolor="#444", ticks="outside"),
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
}

# counters_table's columns, in the order of the seed reports' tables.
COUNTER_EVENTS = ["task-clock", "cpus-utilized", "context-switches", "cpu-migrations",
                  "page-faults", "cycles", "instructions", "ipc", "branches",
                  "branch-misses", "cache-misses"]


def color(model: str) -> str:
    """The colour `model` has in every figure."""
    if model in MODEL_COLORS:
        return MODEL_COLORS[model]
    return _SPARE_COLORS[sum(map(ord, model)) % len(_SPARE_COLORS)]


def label(column: str) -> str:
    """A readable axis title for a sweep column."""
    if column in _COLUMN_LABELS:
        return _COLUMN_LABELS[column]
    for side in ("server", "client"):
        if column.startswith(side + "_"):
            event = column[len(side) + 1:]
            return f"{side} {_EVENT_LABELS.get(event, event)}"
    return column


def summarize(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (model, clients): median/min/max of `metric` over ok repeats, and the failures.

    Columns: model, clients, median, min, max, ok, failed, saturated, errors.
    """
    _require(df, ["model", "clients", "status"])
    if metric not in df.columns:
        raise LabError(f"the results have no column {metric!r}",
                       "pick one of: " + ", ".join(c for c in df.columns if _is_numeric(df[c])))
    rows = []
    for (model, clients), point in df.groupby(["model", "clients"], sort=True):
        ok = point[point["status"] == "ok"]
        failed = point[point["status"] != "ok"]
        values = pd.to_numeric(ok[metric], errors="coerce").dropna()
        saturated = bool(ok["client_saturated"].fillna(False).astype(bool).any()) \
            if "client_saturated" in ok else False
        errors = sorted({str(e) for e in failed.get("error", pd.Series(dtype=str)).fillna("no reason recorded")})
        rows.append(dict(model=model, clients=int(clients),
                         median=values.median() if len(values) else math.nan,
                         min=values.min() if len(values) else math.nan,
                         max=values.max() if len(values) else math.nan,
                         ok=len(ok), measured=len(values), failed=len(failed),
                         saturated=saturated, errors="; ".join(errors)))
    return pd.DataFrame(rows, columns=["model", "clients", "median", "min", "max", "ok",
                                       "measured", "failed", "saturated", "errors"])


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
    if why.startswith("not measurable"):
        return why.replace("not measurable here", "not measurable on this machine", 1)
    return f"not measurable on this machine:{separator}{why}"


def metric_vs_clients(df: pd.DataFrame, metric: str, title: str | None = None,
                      log_x: bool = False, log_y: bool = False, x_noun: str = "clients",
                      x_title: str = "concurrent clients") -> go.Figure:
    """`metric` against concurrent clients, one line per model: median of the repeats,
    min-max error bars, failed points as crosses with the reason in the hover.
    (metric_vs_idle draws the same against idle connections: x_noun, x_title.)"""
    summary = summarize(df, metric)
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title=title or f"{label(metric)} vs {x_title}",
                      xaxis_title=x_title, yaxis_title=label(metric))
    fig.update_xaxes(type="log" if log_x else "linear",
                     tickvals=sorted(summary["clients"].unique()))
    if log_y:
        fig.update_yaxes(type="log")

    measured = summary.dropna(subset=["median"])
    for model, line in measured.groupby("model", sort=False):
        fig.add_trace(go.Scatter(
            x=line["clients"], y=line["median"], name=model, mode="lines+markers",
            legendgroup=model,
            line=dict(color=color(model), width=2),
            marker=dict(size=8, symbol=["diamond-open" if s else "circle" for s in line["saturated"]]),
            error_y=dict(type="data", symmetric=False, array=line["max"] - line["median"],
                         arrayminus=line["median"] - line["min"], thickness=1.2, width=5),
            customdata=line[["min", "max", "measured", "saturated"]].to_numpy(),
            hovertemplate=(f"<b>{model}</b><br>%{{x}} {x_noun}<br>median %{{y:,.4g}}<br>"
                           "min-max %{customdata[0]:,.4g} - %{customdata[1]:,.4g}<br>"
                           "repeats %{customdata[2]}<br>client saturated: %{customdata[3]}"
                           "<extra></extra>"),
        ))
    _add_failures(fig, summary, x_noun=x_noun)

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
        notes.append("◇ = the client saturated its CPU there (it measured itself, not the server)")
    if notes:
        fig.update_layout(title_subtitle_text="<br>".join(notes), margin_t=90)
    return fig


def latency_vs_clients(df: pd.DataFrame, percentiles=("p50", "p99")) -> go.Figure:
    """Latency percentiles against clients: one colour per model, one dash per percentile."""
    dashes = ["solid", "dash", "dot", "dashdot"]
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title="request latency vs concurrent clients",
                      xaxis_title="concurrent clients", yaxis_title="latency (µs)")
    any_measured = False
    for dash, pct in zip(dashes, percentiles):
        column = f"lat_{pct}_us"
        summary = summarize(df, column).dropna(subset=["median"])
        any_measured |= not summary.empty
        for model, line in summary.groupby("model", sort=False):
            fig.add_trace(go.Scatter(
                x=line["clients"], y=line["median"], name=f"{model} {pct}", legendgroup=model,
                mode="lines+markers", line=dict(color=color(model), dash=dash, width=2),
                error_y=dict(type="data", symmetric=False, array=line["max"] - line["median"],
                             arrayminus=line["median"] - line["min"], thickness=1.2, width=5),
                hovertemplate=f"<b>{model}</b> {pct}<br>%{{x}} clients<br>%{{y:,.0f}} µs<extra></extra>",
            ))
    _add_failures(fig, summarize(df, f"lat_{percentiles[0]}_us"))
    if not any_measured:
        _annotate(fig, "latency: nothing measured (every point failed)")
    fig.update_xaxes(tickvals=sorted(df["clients"].unique()))
    return fig


def metric_vs_idle(df: pd.DataFrame, metric: str, title: str | None = None, log_y: bool = False) -> go.Figure:
    """idle_conns: `metric` against idle connections, one line per model (median, min-max),
    a refused point (select past FD_SETSIZE) as a red cross with the server's words."""
    _require(df, ["idle"])
    active = sorted(int(c) for c in df["clients"].unique())
    fig = metric_vs_clients(df.assign(clients=df["idle"].astype(int)), metric, log_y=log_y,
                            x_noun="idle connections", x_title="idle connections",
                            title=title or f"{label(metric)} vs idle connections "
                                           f"({', '.join(map(str, active))} active)")
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


def _point_label(clients, requests) -> str:
    return f"{int(clients):,} x {int(requests)}"


def metric_by_model(df: pd.DataFrame, metric: str, title: str | None = None, include_failed: bool = False,
                    log_y: bool = False) -> go.Figure:
    """echo_scale: one group of bars per point (clients x exchanges), one bar per model
    (its colour), the median of the repeats with min-max whiskers.  A point with a
    failed repeat is marked with a red cross at its bar (or at 0), the reasons in the
    hover.  include_failed=True takes the values of failed repeats too (lost
    connections are measured *because* the point failed)."""
    _require(df, ["model", "clients", "requests", "status"])
    if metric not in df.columns:
        raise LabError(f"the results have no column {metric!r}",
                       "pick one of: " + ", ".join(c for c in df.columns if _is_numeric(df[c])))
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, barmode="group", title=title or f"{label(metric)} per model",
                      xaxis_title="clients x exchanges per connection", yaxis_title=label(metric))
    if log_y:
        fig.update_yaxes(type="log")
    rows, failures = [], []
    for (model, clients, requests), point in df.groupby(["model", "clients", "requests"], sort=True):
        used = point if include_failed else point[point["status"] == "ok"]
        used = used[pd.to_numeric(used.get("requests_ok"), errors="coerce").fillna(0) > 0] \
            if include_failed and "requests_ok" in used else used
        values = pd.to_numeric(used[metric], errors="coerce").dropna()
        failed = point[point["status"] != "ok"]
        median = values.median() if len(values) else math.nan
        rows.append(dict(model=model, point=_point_label(clients, requests), median=median,
                         low=values.min() if len(values) else math.nan,
                         high=values.max() if len(values) else math.nan, n=len(values)))
        if len(failed):
            reasons = "; ".join(sorted({_wrap(_escape(str(e)), 90) for e in failed["error"].fillna("")}))
            failures.append(dict(model=model, point=_point_label(clients, requests),
                                 y=0.0 if math.isnan(median) or log_y else median,
                                 text=f"{len(failed)} of {len(point)} repeats failed<br>{reasons}"))
    summary = pd.DataFrame(rows)
    order = [_point_label(c, r) for c, r in sorted(set(zip(df["clients"], df["requests"])))]
    for model in dict.fromkeys(df["model"]):
        bars = summary[summary["model"] == model].set_index("point").reindex(order)
        fig.add_trace(go.Bar(
            x=order, y=bars["median"], name=model, marker_color=color(model), offsetgroup=model,
            error_y=dict(type="data", symmetric=False, array=bars["high"] - bars["median"],
                         arrayminus=bars["median"] - bars["low"], thickness=1.2, width=4),
            customdata=bars[["n"]].to_numpy(),
            hovertemplate=f"<b>{model}</b><br>%{{x}}<br>median %{{y:,.4g}}<br>repeats %{{customdata[0]}}<extra></extra>",
        ))
    if failures:
        failed = pd.DataFrame(failures)
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
    return fig


def latency_percentiles(df: pd.DataFrame, clients: int | None = None, requests: int | None = None) -> go.Figure:
    """Response-time percentiles (p50, p90, p99, p99.9, max) of every model at one point
    (default: the largest clients x exchanges measured), medians of the ok repeats."""
    _require(df, ["model", "clients", "requests", "status"])
    clients = int(clients if clients is not None else df["clients"].max())
    at = df[df["clients"] == clients]
    requests = int(requests if requests is not None else at["requests"].max())
    at = at[at["requests"] == requests]
    names = {"p50": "lat_p50_us", "p90": "lat_p90_us", "p99": "lat_p99_us", "p99.9": "lat_p999_us",
             "max": "lat_max_us"}
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title=f"response time percentiles at {_point_label(clients, requests)}",
                      xaxis_title="percentile", yaxis_title="response time (µs)")
    fig.update_yaxes(type="log")
    for model, point in at.groupby("model", sort=False):
        ok = point[point["status"] == "ok"]
        medians = [pd.to_numeric(ok[column], errors="coerce").median() for column in names.values()]
        if ok.empty:
            continue
        fig.add_trace(go.Scatter(x=list(names), y=medians, name=model, mode="lines+markers",
                                 line=dict(color=color(model), width=2),
                                 hovertemplate=f"<b>{model}</b> %{{x}}: %{{y:,.0f}} µs<extra></extra>"))
    failed = sorted(at.loc[at["status"] != "ok", "model"].unique())
    if failed:
        fig.update_layout(title_subtitle_text=_escape(f"failed here (not drawn): {', '.join(failed)}"),
                          margin_t=90)
    return fig


def observations_table(df: pd.DataFrame, seed_table: pd.DataFrame) -> pd.DataFrame:
    """Seed 003's Observations table beside yours: rows = clients / exchanges; the
    seed's response time per model (s, as printed), then your median p50 response
    time (s) and your lost connections per model (blank where not measured)."""
    seed = seed_table.pivot_table(index=["clients", "exchanges"], columns="model", values="value")
    seed.columns = pd.MultiIndex.from_product([["seed 003: response time (s)"], seed.columns])
    measured = df.assign(exchanges=df["requests"].astype(int), clients=df["clients"].astype(int))
    ok = measured[measured["status"] == "ok"]
    yours = (ok.pivot_table(index=["clients", "exchanges"], columns="model", values="lat_p50_us",
                            aggfunc="median") / 1e6) if not ok.empty else pd.DataFrame()
    yours.columns = pd.MultiIndex.from_product([["yours: p50 response time (s)"], yours.columns])
    lost = measured.pivot_table(index=["clients", "exchanges"], columns="model", values="lost_connections",
                                aggfunc="median")
    lost.columns = pd.MultiIndex.from_product([["yours: lost connections"], lost.columns])
    table = pd.concat([seed, yours, lost], axis=1).sort_index()
    table.index.names = ["clients", "exchanges"]
    return table


def counters_table(df: pd.DataFrame, side: str = "server") -> pd.DataFrame:
    """Median perf counters per model x clients, like the seed reports' tables.

    NaN means not measurable here; show it with style_counters(), which says so."""
    if side not in ("server", "client"):
        raise LabError(f"side must be 'server' or 'client', not {side!r}",
                       "counters_table(df, side='server') or side='client'")
    _require(df, ["model", "clients", "status"])
    ok = df[df["status"] == "ok"]
    columns = {}
    for event in COUNTER_EVENTS:
        column = f"{side}_{event}"
        series = pd.to_numeric(ok[column], errors="coerce") if column in ok else pd.Series(math.nan, index=ok.index)
        columns[_EVENT_LABELS[event]] = series
    wide = pd.DataFrame(columns)
    wide["model"], wide["clients"] = ok["model"], ok["clients"].astype(int)
    # median() skips NaN, so a group with no measured value stays NaN (never 0).
    table = wide.groupby(["model", "clients"]).median(numeric_only=True)
    table.attrs["caption"] = f"{side} side: median of the repeats of each point"
    return table


def style_counters(table: pd.DataFrame):
    """counters_table() ready to display: thousands separators, NaN as "not supported"."""
    formats = {c: "{:,.0f}" for c in table.columns}
    formats.update({_EVENT_LABELS["task-clock"]: "{:,.2f}", _EVENT_LABELS["cpus-utilized"]: "{:.3f}",
                    _EVENT_LABELS["ipc"]: "{:.2f}"})
    formats = {c: f for c, f in formats.items() if c in table.columns}
    return (table.style.format(formats, na_rep="not supported")
            .map(lambda v: "color: #999; font-style: italic; white-space: nowrap" if pd.isna(v) else "")
            .set_caption(table.attrs.get("caption", "")))


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
    summary = summarize(df, column) if column in df.columns else pd.DataFrame(columns=["model", "median"])
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
        _add_failures(fig, summary, row=1, col=1)
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
    fig.update_yaxes(title_text=ylabel, row=1, col=1)
    return fig


def saturation_warning(df: pd.DataFrame) -> str | None:
    """A warning naming the points where the load generator saturated its CPU, else None."""
    if "client_saturated" not in df.columns:
        return None
    saturated = df[df["client_saturated"].fillna(False).astype(bool)]
    if saturated.empty:
        return None
    points = ", ".join(f"{m} @ {c} clients" for m, c in
                       sorted(set(zip(saturated["model"], saturated["clients"].astype(int)))))
    return ("WARNING: the client saturated its CPU at " + points + ". There it measured itself, "
            "not the server: give the client more CPUs (client_cpus), or fewer clients/requests.")


def failed_points(df: pd.DataFrame) -> pd.DataFrame:
    """The failed rows, with the reason: model, clients, repeat, error."""
    if "status" not in df.columns:
        return df.iloc[0:0]
    cols = [c for c in ("model", "clients", "repeat", "error") if c in df.columns]
    return df.loc[df["status"] != "ok", cols].reset_index(drop=True)


def _add_failures(fig: go.Figure, summary: pd.DataFrame, row=None, col=None, x_noun: str = "clients") -> None:
    """Draw every point with a failed repeat as a red cross: at its median when other
    repeats succeeded, else at the bottom of the plot; the reasons are in the hover."""
    failed = summary[summary["failed"] > 0]
    if failed.empty:
        return
    measured = summary["median"].dropna()
    floor = float(measured.min()) if not measured.empty else 0.0
    y = failed["median"].fillna(floor)
    fig.add_trace(go.Scatter(
        x=failed["clients"], y=y, mode="markers", name="failed",
        marker=dict(symbol="x", size=13, color=FAILED_COLOR, line=dict(width=1, color="white")),
        customdata=failed.assign(total=failed["failed"] + failed["ok"])[
            ["model", "failed", "total", "errors"]].to_numpy(),
        hovertemplate=("<b>FAILED</b>: %{customdata[0]} @ %{x} " + x_noun + "<br>"
                       "%{customdata[1]} of %{customdata[2]} repeats failed<br>"
                       "%{customdata[3]}<extra></extra>"),
    ), row=row, col=col)


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
                       "pass the DataFrame that labkit.sweep.run() or sweep.load() returned")


def _is_numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series)
