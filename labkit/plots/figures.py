"""The lab's charts of sweep results: a metric against any column (a line per model and
per value of the grid's other axes), bars per grid point, latency percentiles and
histograms, and a reference line (iperf3's ceiling).  Medians of the repeats with their
interval as whiskers (labkit.uncertainty: the median's own of several repeats, a run's own
for one repeat's percentile), said in the hover and under the chart; a failed point is
drawn as a red cross with its reason, never dropped; a point never run (it waits for an
unsolved exercise) as a grey hourglass, "not measurable", never as failed; a metric that
could not be measured says why instead of being drawn as 0.  One rule makes a mark hollow, in
every figure of a point (checked_marks): its generator saturated (grey too), or it failed a
self-check that bears on the figure's metric; each trace keeps its points' intervals and
verdicts in its meta, for the figure's text version (alt_text)."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from labkit import uncertainty
from labkit.errors import LabError

from .grid import (axes_of, axis_title, is_numeric, kind_of, nothing_measured, point_axes, point_interval,
                   point_label, require, self_check_flags, self_check_titles, series_of, setting, shared_cpus_note,
                   summarize, value_text, varying_axes, waits_for_exercise, why_missing)
from .marks import add_unmeasurable, add_unmeasurable_bars, below_the_data, checked_marks
from .style import (DASHES, FAILED_COLOR, PATTERNS, SERIES_COLORS, SYMBOLS, TEMPLATE, annotate, color,
                    escape, finish, label, not_measurable, room_above, set_title, wrap)
from labkit.row import ok_rows, succeeded


def spans_decades(df: pd.DataFrame, metric: str, decades: float = 2.0) -> bool:
    """Whether the measured values of `metric` span `decades` or more (500 us to 1 s does):
    then a linear axis flattens all but the largest, and the figure takes a log axis."""
    if metric not in df.columns:
        return False
    rows = ok_rows(df)
    values = pd.to_numeric(rows[metric], errors="coerce")
    values = values[values > 0]
    return len(values) > 1 and values.max() / values.min() >= 10 ** decades


def metric_vs(df: pd.DataFrame, metric: str, x: str = "clients", series=None, title: str | None = None,
              log_x: bool = False, log_y: bool | None = None, x_title: str | None = None) -> go.Figure:
    """`metric` against column `x`, one line per model (and per value of every other axis
    of the grid, `series`): median of the repeats with its interval as error bars, failed points
    as crosses with the reason in the hover.  log_y=None: a log axis where the values
    span two decades or more."""
    log_y = spans_decades(df, metric) if log_y is None else log_y
    series = series_of(df, x, series)
    x_title = x_title or axis_title(df, x)
    summary = summarize(df, metric, x, series)
    varying = {c for c in series if summary[c].nunique() > 1}
    constant = [setting(df, c, summary[c].iloc[0])
                for c in series if c not in varying and not summary.empty]
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, xaxis_title=x_title, yaxis_title=label(metric))
    set_title(fig, title or f"{label(metric)} vs {x_title}", [] if title else constant)
    ticks = sorted(summary[x].unique())
    fig.update_xaxes(type="log" if log_x else "linear", tickvals=ticks,
                     ticktext=[value_text(df, x, tick) for tick in ticks])
    if log_y:
        fig.update_yaxes(type="log")

    measured = summary.dropna(subset=["median"])
    combos = sorted({tuple(v) for v in measured[series].itertuples(index=False)}) if series else []
    models = list(dict.fromkeys(measured["model"]))
    by_series = len(models) == 1 and len(combos) > 1  # one model: its lines differ by colour
    if len(models) == 1 and not by_series and not title:  # no legend for one line: the title names it
        fig.update_layout(title_text=f"{fig.layout.title.text} of {models[0]}")
    if by_series:
        fig.update_layout(legend_title_text=f"{models[0]}: " + ", ".join(
            axis_title(df, c) for c in series if c in varying))
    for values, line in measured.groupby(["model", *series], sort=False):
        model = values[0]
        combo = combos.index(tuple(values[1:])) if series else 0
        dash = "solid" if by_series or not series else DASHES[combo % len(DASHES)]
        colour = SERIES_COLORS[combo % len(SERIES_COLORS)] if by_series else color(model)
        # a shape per line: lines that coincide (every model reads as often) stay told apart
        shape = SYMBOLS[(combo if by_series else models.index(model)) % len(SYMBOLS)]
        fig.add_trace(go.Scatter(
            x=line[x], y=line["median"], name=_line_name(df, None if by_series else model, series,
                                                         values[1:], varying),
            mode="lines+markers", legendgroup=None if by_series else model,
            line=dict(color=colour, width=2, dash=dash),
            marker=_checked_marks(line, shape, colour), meta=point_meta(line),
            error_y=dict(type="data", symmetric=False, array=line["high"] - line["median"],
                         arrayminus=line["median"] - line["low"], thickness=1.2, width=5),
            customdata=line[["low", "high", "interval", "min", "max", "measured", "saturated", "flags"]].to_numpy(),
            hovertemplate=(f"<b>{model}</b><br>%{{x}} {x_title}<br>median %{{y:,.4g}}<br>"
                           "%{customdata[2]}: %{customdata[0]:,.4g} - %{customdata[1]:,.4g}<br>"
                           "min-max %{customdata[3]:,.4g} - %{customdata[4]:,.4g}<br>"
                           "repeats %{customdata[5]}<br>client saturated: %{customdata[6]}"
                           "<br>%{customdata[7]}<extra></extra>"),
        ))
    add_failures(fig, summary, x, x_noun=x_title)
    add_unmeasurable(fig, summary, x, x_noun=x_title)

    notes = []
    missing = summary[summary["median"].isna() & (summary["ok"] > 0)]
    if measured.empty:
        annotate(fig, f"{label(metric)}: " + not_measurable(why_missing(df, metric), "<br>"))
        fig.update_xaxes(showticklabels=False, showgrid=False)
        fig.update_yaxes(showticklabels=False, showgrid=False)
    elif not missing.empty:
        notes.append(f"not measurable for {', '.join(sorted(missing['model'].unique()))}: "
                     f"{why_missing(df, metric)}")
    if summary["saturated"].any():
        notes.append(SATURATED_NOTE)
    notes += _self_check_notes(measured)
    notes.append(whiskers_note(measured))
    notes += [shared_cpus_note(df)] if shared_cpus_note(df) else []
    _add_notes(fig, notes)
    finish(fig)
    return fig


def whiskers_note(summary: pd.DataFrame) -> str:
    """What the whiskers of a chart are, in words (each point's interval, labkit.uncertainty):
    one kind said once; kinds at several levels each with its own level and how many points
    have it, and why levels differ (a level is what a point's runs or samples reach)."""
    kinds = [str(kind) for kind in summary.get("interval", pd.Series(dtype=str)).dropna() if kind]
    if len(set(kinds)) <= 1:
        return "whiskers: " + (uncertainty.kinds_text(kinds) if kinds else "none")
    counts = pd.Series(kinds).value_counts(sort=False)
    parts = [f"{uncertainty.kinds_text([kind])} at {n} point{'s' if n > 1 else ''}"
             for kind, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    return ("whiskers: " + "; ".join(parts) + " (a level is what that point's runs or samples reach; "
            "the hover says each point's)")


# What a greyed-out, hollow mark means, under a chart that has one (tables.saturation_warning points here)
SATURATED_NOTE = "hollow grey = the load generator was the limit there (it measured itself, not the server)"


def _checked_marks(line: pd.DataFrame, shape: str, colour: str) -> dict:
    """checked_marks for a line of summarize()'s points."""
    return checked_marks(list(line["saturated"]), [bool(f) for f in line["flags"]], shape, colour)


def point_meta(points: pd.DataFrame) -> dict:
    """What a trace keeps for its figure's text version (alt_text), a list per point: what its
    interval is ("interval") and the self-checks it failed, with their reasons ("verdicts")."""
    return {"interval": [str(kind) for kind in points["interval"].fillna("")],
            "verdicts": [str(flags) for flags in points["flags"].fillna("")]}


def _self_check_notes(measured: pd.DataFrame) -> list[str]:
    """The note under a chart whose points failed a self-check: which checks, how many points.
    One line: a long reason under the chart squeezed the plot (the hover and the figure's text
    version say each point's)."""
    flagged = measured[measured["flags"] != ""]
    if not len(flagged):
        return []
    checks = sorted({check for named in flagged["checks"] for check in named.split(", ") if check})
    return [f"hollow = {', '.join(checks)} ({len(flagged)} point(s); each point's reasons in its hover and in the "
            "figure's text version)"]


def _add_notes(fig: go.Figure, notes: list[str]) -> None:
    if notes:  # under the shared settings, not instead of them
        shared = fig.layout.title.subtitle.text or ""
        subtitle = "<br>".join([*([shared] if shared else []), *(wrap(note, 95) for note in notes)])
        fig.update_layout(title_subtitle_text=subtitle)
        room_above(fig, 70 + 18 * subtitle.count("<br>") + 18)


def _line_name(df: pd.DataFrame, model: str | None, series: list[str], values: tuple, varying: set[str]) -> str:
    """'epoll', or 'epoll, clients 100' when another axis than x varies; without the model
    (None: the legend's title names it and the axes), the values alone: 'other_host, 5'."""
    if model is None:
        return ", ".join(value_text(df, column, value) for column, value in zip(series, values)
                         if column in varying)
    shown = [setting(df, column, value) for column, value in zip(series, values)
             if column in varying]
    return ", ".join([model, *shown])


def latency_vs(df: pd.DataFrame, x: str = "clients", percentiles=("p50", "p99"),
               x_title: str | None = None, log_y: bool = False) -> go.Figure:
    """Latency percentiles against column `x`: one colour per model, one dash per percentile.
    log_y: a log latency axis, set before the failed points are placed below the rest."""
    dashes = ["solid", "dash", "dot", "dashdot"]
    x_title = x_title or axis_title(df, x)
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, title=f"request latency vs {x_title}",
                      xaxis_title=x_title, yaxis_title="latency (µs)")
    if log_y:
        fig.update_yaxes(type="log")
    drawn = []
    for dash, pct in zip(dashes, percentiles):
        column = f"lat_{pct}_us"
        summary = summarize(df, column, x).dropna(subset=["median"])
        drawn.append(summary)
        for model, line in summary.groupby("model", sort=False):
            fig.add_trace(go.Scatter(
                x=line[x], y=line["median"], name=f"{model} {pct}", legendgroup=model,
                mode="lines+markers", line=dict(color=color(model), dash=dash, width=2),
                marker=_checked_marks(line, "circle", color(model)), meta=point_meta(line),
                error_y=dict(type="data", symmetric=False, array=line["high"] - line["median"],
                             arrayminus=line["median"] - line["low"], thickness=1.2, width=5),
                customdata=line[["low", "high", "interval", "flags"]].to_numpy(),
                hovertemplate=(f"<b>{model}</b> {pct}<br>%{{x}} {x_title}<br>%{{y:,.0f}} µs<br>"
                               "%{customdata[2]}: %{customdata[0]:,.0f} - %{customdata[1]:,.0f} µs<br>"
                               "%{customdata[3]}<extra></extra>"),
            ))
    add_failures(fig, summarize(df, f"lat_{percentiles[0]}_us", x), x, x_noun=x_title)
    add_unmeasurable(fig, summarize(df, f"lat_{percentiles[0]}_us", x), x, x_noun=x_title)
    measured = pd.concat(drawn) if drawn else pd.DataFrame()
    if measured.empty:
        annotate(fig, wrap(nothing_measured(df, "latency"), 95))
    else:
        _add_notes(fig, [*([SATURATED_NOTE] if measured["saturated"].any() else []), *_self_check_notes(measured),
                         whiskers_note(measured), *([shared_cpus_note(df)] if shared_cpus_note(df) else [])])
    fig.update_xaxes(tickvals=sorted(df[x].unique()))
    finish(fig)
    return fig


def metric_by_point(df: pd.DataFrame, metric: str, axes=None, title: str | None = None,
                    include_failed: bool = False, log_y: bool | None = None) -> go.Figure:
    """One group of bars per grid point (a value of each of `axes`: clients x exchanges),
    one bar per model (its colour), the median of the repeats with its interval as whiskers.
    A point with a failed repeat is marked with a red cross at its bar (or at 0), the
    reasons in the hover.  include_failed=True takes the values of failed repeats too
    (lost connections are measured *because* the point failed).  log_y=None: a log axis
    where the values span two decades or more."""
    log_y = spans_decades(df, metric) if log_y is None else log_y
    axes = varying_axes(df, point_axes(df, axes))
    require(df, ["model", *axes, "status"])
    if metric not in df.columns:
        raise LabError(f"the results have no column {metric!r}",
                       "pick one of: " + ", ".join(c for c in df.columns if is_numeric(df[c])))
    fig = go.Figure()
    models = list(dict.fromkeys(df["model"]))
    whose = "per model" if len(models) > 1 else f"of {models[0]}" if models else ""
    fig.update_layout(template=TEMPLATE, barmode="group", title=title or f"{label(metric)} {whose}",
                      xaxis_title=" · ".join(axis_title(df, a) for a in axes), yaxis_title=label(metric))
    if log_y:
        fig.update_yaxes(type="log")
    constant = [setting(df, c, df[c].iloc[0]) for c in axes_of(df)
                if c != "model" and c not in axes and c in df.columns and df[c].nunique() == 1]
    set_title(fig, title or f"{label(metric)} {whose}", [] if title else constant)

    rows, failures, unmeasured = [], [], []
    never_run = waits_for_exercise(df) & ~succeeded(df)
    for values, point in df.groupby(["model", *axes], sort=True):
        model, where = values[0], point_label(df, axes, values[1:])
        used = point if include_failed else ok_rows(point)
        used = used[pd.to_numeric(used.get("requests_ok"), errors="coerce").fillna(0) > 0] \
            if include_failed and "requests_ok" in used else used
        measured = pd.to_numeric(used[metric], errors="coerce").dropna()
        failed = point[~succeeded(point) & ~never_run.loc[point.index]]
        waiting = point[never_run.loc[point.index]]
        median = measured.median() if len(measured) else math.nan
        saturated = bool(used["client_saturated"].fillna(False).astype(bool).any()) \
            if "client_saturated" in used else False
        low, high, interval = point_interval(used, metric, measured)
        checked = ok_rows(used)
        rows.append(dict(model=model, point=where, median=median, low=low, high=high, interval=interval,
                         n=len(measured), saturated=saturated, flags=self_check_flags(checked, metric),
                         checks=", ".join(self_check_titles(checked, metric))))
        if len(waiting):
            unmeasured.append(dict(model=model, point=where, text="<br>".join(
                wrap(escape(str(e)), 90) for e in dict.fromkeys(waiting["error"].fillna("")) if str(e).strip())))
        if len(failed):
            reasons = "; ".join(sorted({wrap(escape(str(e)), 90) for e in failed["error"].fillna("")}))
            failures.append(dict(model=model, point=where, y=median,
                                 text=f"{len(failed)} of {len(point)} repeats failed<br>{reasons}"))
    summary = pd.DataFrame(rows, columns=["model", "point", "median", "low", "high", "interval", "n", "saturated",
                                          "flags", "checks"])
    kinds = [kind_of(df, axis) for axis in axes]
    # many grid points: slanted labels, with room made below them for the axis title
    # type category: labels like "500" and "2,000" would otherwise make plotly a numeric axis
    fig.update_xaxes(automargin=True, title_standoff=16, type="category")
    if df.groupby(axes).ngroups > 8:
        fig.update_xaxes(tickangle=-40)
    order = [point_label(df, axes, values) for values in sorted(
        set(zip(*(df[a] for a in axes))),
        key=lambda values: tuple(kind.sort_key(v) if kind else v for kind, v in zip(kinds, values)))]
    for i, model in enumerate(models):
        bars = summary[summary["model"] == model].set_index("point").reindex(order)
        bars["flags"], bars["interval"] = bars["flags"].fillna(""), bars["interval"].fillna("")
        greyed = bars["saturated"].fillna(False).astype(bool).tolist()
        flagged = [bool(f) for f in bars["flags"]]
        drawn = dict(
            x=order, y=bars["median"], name=model, offsetgroup=model, meta=point_meta(bars),
            error_y=dict(type="data", symmetric=False, array=bars["high"] - bars["median"],
                         arrayminus=bars["median"] - bars["low"], thickness=1.2, width=4),
            customdata=bars[["n", "saturated", "interval", "low", "high", "flags"]].to_numpy(),
            hovertemplate=(f"<b>{model}</b><br>%{{x}}<br>median %{{y:,.4g}}<br>"
                           "%{customdata[2]}: %{customdata[3]:,.4g} - %{customdata[4]:,.4g}<br>"
                           "repeats %{customdata[0]}<br>client saturated: %{customdata[1]}"
                           "<br>%{customdata[5]}<extra></extra>"),
        )
        # the marks' one rule (checked_marks): greyed and hollow where the load generator was the limit,
        # hollow where a self-check failed; a bar is hollow when only its outline is drawn
        marks = checked_marks(greyed, flagged, SYMBOLS[i % len(SYMBOLS)], color(model), size=11)
        colours = marks["color"]
        if log_y:  # a bar's length means nothing on a log axis (where would it start?): a mark at the median
            fig.add_trace(go.Scatter(mode="markers", marker=marks, **drawn))
        else:
            hollow = [symbol.endswith("-open") for symbol in marks["symbol"]]
            fills = ["rgba(0,0,0,0)" if open_ else c for open_, c in zip(hollow, colours)]
            fig.add_trace(go.Bar(marker=dict(color=fills,
                                             line=dict(color=colours, width=2),
                                             pattern=dict(shape=PATTERNS[i % len(PATTERNS)], fillmode="overlay",
                                                          fgcolor="white", fgopacity=0.7, solidity=0.2)), **drawn))
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
    if unmeasured:
        add_unmeasurable_bars(fig, pd.DataFrame(unmeasured), summary, log_y)
    if summary["median"].isna().all():
        annotate(fig, f"{label(metric)}: nothing measured:<br>{why_missing(df, metric)}")
    _add_notes(fig, [*([SATURATED_NOTE] if summary["saturated"].any() else []), *_self_check_notes(summary),
                     whiskers_note(summary), *([shared_cpus_note(df)] if shared_cpus_note(df) else [])])
    finish(fig)
    return fig


def latency_percentiles(df: pd.DataFrame, axes=None, **at) -> go.Figure:
    """Response-time percentiles (p50, p90, p99, p99.9, max) of every model at one grid
    point: `at` gives its axis values (clients=5000, exchanges=200); an axis not given
    takes its largest value.  Medians of the ok repeats, each percentile's whiskers its
    interval (point_interval: the median's over the repeats, or one run's own); p90 and the
    maximum have none, and their hover says so."""
    axes = point_axes(df, axes)
    require(df, ["model", *axes, "status"])
    for axis in axes:
        value = at.get(axis, df[axis].max())
        df = df[df[axis] == value]
        at[axis] = value
    names = {"p50": "lat_p50_us", "p90": "lat_p90_us", "p99": "lat_p99_us", "p99.9": "lat_p999_us",
             "max": "lat_max_us"}
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, xaxis_title="percentile", yaxis_title="response time (µs)")
    never_run = waits_for_exercise(df) & ~succeeded(df)
    failed = sorted(df.loc[~succeeded(df) & ~never_run, "model"].unique())
    waiting = sorted(df.loc[never_run, "model"].unique())
    fig.update_yaxes(type="log")
    kinds, checks, flagged = [], set(), 0
    for i, (model, point) in enumerate(df.groupby("model", sort=False)):
        ok = ok_rows(point)
        if ok.empty:
            continue
        measured = [pd.to_numeric(ok[column], errors="coerce") for column in names.values()]
        medians = [values.median() for values in measured]
        intervals = [point_interval(ok, column, values.dropna()) for column, values in zip(names.values(), measured)]
        said = [f"{kind}: {low:,.0f} - {high:,.0f} µs" if high > low else "no interval"
                for low, high, kind in intervals]
        kinds += [kind for low, high, kind in intervals if high > low]
        flags = [self_check_flags(ok, column) for column in names.values()]
        checks |= {check for column in names.values() for check in self_check_titles(ok, column)}
        flagged += sum(bool(f) for f in flags)
        saturated = bool(ok["client_saturated"].fillna(False).astype(bool).any()) if "client_saturated" in ok else False
        fig.add_trace(go.Scatter(
            x=list(names), y=medians, name=model, mode="lines+markers", line=dict(color=color(model), width=2),
            marker=checked_marks([saturated] * len(names), flags, SYMBOLS[i % len(SYMBOLS)], color(model)),
            meta={"interval": [kind if high > low else "" for low, high, kind in intervals], "verdicts": flags},
            error_y=dict(type="data", symmetric=False, thickness=1.2, width=5,
                         array=[high - median for median, (_, high, _) in zip(medians, intervals)],
                         arrayminus=[median - low for median, (low, _, _) in zip(medians, intervals)]),
            customdata=[[text, flag] for text, flag in zip(said, flags)],
            hovertemplate=f"<b>{model}</b> %{{x}}: %{{y:,.0f}} µs<br>%{{customdata[0]}}<br>%{{customdata[1]}}"
                          "<extra></extra>"))
    whiskers = whiskers_note(pd.DataFrame({"interval": kinds})) + " (p90 and the maximum have none)" if kinds else \
        "no interval: one run's p90 and maximum have none"
    hollow = [f"hollow = {', '.join(sorted(checks))} ({flagged} point(s); each point's reasons in its hover and "
              "in the figure's text version)"] if flagged else []
    shared = [shared_cpus_note(df)] if shared_cpus_note(df) else []
    set_title(fig, "response time percentiles", [setting(df, a, at[a]) for a in axes if a != "model"])
    _add_notes(fig, [*([escape(f"failed here (not drawn): {', '.join(failed)}")] if failed else []),
                     *([escape(f"not measurable here until an exercise is solved (not drawn): {', '.join(waiting)}")]
                       if waiting else []), *hollow, whiskers, *shared])
    return fig


def latency_histogram(df: pd.DataFrame, by=("strategy", "nodelay"), per_decade: int = 5,
                      title: str | None = None) -> go.Figure:
    """How the exchanges' latencies spread, one line per value of `by`: the load
    generator's fine histogram, summed over the successful repeats and regrouped into
    `per_decade` bins per power of ten.  A peak near 40 ms (Linux's delayed-ACK timeout by
    default when the round trip is short) is Nagle's algorithm waiting for a delayed ACK."""
    by = [c for c in by if c in df.columns]
    require(df, ["status", "lat_histogram"])
    ok = ok_rows(df)
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
        annotate(fig, "no successful exchange to show")
        return fig
    every = range(min(slots) - 1, max(slots) + 2)  # zeros around, so a peak stands out
    for index, (name, counts) in enumerate(binned):
        fig.add_trace(go.Scatter(
            # a step from each bin's lower edge to the next: bin `slot` holds (10^((slot-1)/k), 10^(slot/k)]
            x=[10 ** ((slot - 1) / per_decade) for slot in every], y=[counts.get(slot, 0) for slot in every],
            name=name, mode="lines", line=dict(shape="hv", width=2, dash=DASHES[index % len(DASHES)]),
            hovertemplate="%{y} exchanges from %{x:,.0f} µs<extra>" + name + "</extra>"))
    return fig


def reference_line(fig: go.Figure, y: float, text: str, at: str = "left", dash: str = "dash") -> go.Figure:
    """A horizontal reference (iperf3's ceiling, say) across every subplot, labelled at its
    left end.  plotly places a shape in data units on every axis, but an annotation on a
    log axis in log units (plotly.js#6194, plotly.py#3493): fig.add_hline(y=12.6,
    annotation_text=...) put the label at 10^12.6 and stretched the axis to 1T.  So the
    label alone is placed at log10(y) there.  `at`: the end the label sits at, above the
    line at the left, under it at the right (two references close together stay apart)."""
    for axis in fig.select_yaxes():
        log = axis.type == "log"
        if log and y <= 0:
            continue  # no place on a log axis
        yref = axis.plotly_name.replace("axis", "")
        xref = f"{axis.anchor or 'x'} domain"
        fig.add_shape(type="line", xref=xref, x0=0, x1=1, yref=yref, y0=y, y1=y,
                      line=dict(dash=dash, color="#555", width=1.5))
        left = at == "left"
        fig.add_annotation(xref=xref, x=0.01 if left else 0.99, xanchor=at, yref=yref,
                           y=math.log10(y) if log else y, yanchor="bottom" if left else "top", text=text,
                           showarrow=False, font=dict(size=12, color="#333"))
    return fig


def add_failures(fig: go.Figure, summary: pd.DataFrame, x: str, row=None, col=None,
                 x_noun: str = "clients") -> None:
    """Draw every point with a failed repeat as a red cross: at its median when other
    repeats succeeded, else below every measured point, marked "failed" (at the lowest
    measured value it would sit on another model's point); the reasons are in the hover."""
    failed = summary[summary["failed"] > 0]
    if failed.empty:
        return
    y = failed["median"].fillna(below_the_data(fig, summary))
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
