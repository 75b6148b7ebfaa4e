"""Your results beside a seed report's: the seed's numbers and your medians in one table
(beside, times_table, placements_table, observations_table) or one figure of two panels
(comparison), each number the seed did not print left blank, never 0.  Each takes your
sweep's DataFrame and the seed's table (labkit.seeds.table(name))."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit import uncertainty
from labkit.errors import LabError
from labkit.plots.figures import add_failures
from labkit.plots.grid import kind_of, summarize, value_text, why_missing
from labkit.plots.style import SYMBOLS, TEMPLATE, color, label, not_measurable, wrap
from labkit.plots.tables import with_intervals
from labkit.row import OK, ok_rows


def beside(df: pd.DataFrame, seed_table: pd.DataFrame, column: str, index=("clients",),
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
    ok = ok_rows(df)
    yours, your_low, your_high, kinds = _medians(ok, index, your_columns or columns, column)
    for frame in (yours, your_low, your_high):
        frame.columns = pd.MultiIndex.from_product([["yours" + (f" ({unit})" if unit else "")], frame.columns])
    yours, your_low, your_high = yours * scale, your_low * scale, your_high * scale
    table = pd.concat([seed, yours], axis=1).dropna(how="all")  # no number on either side: no row
    # each of your medians' interval over its repeats (the seed printed one number: none)
    low, high = (pd.concat([seed * math.nan, yours_end], axis=1).reindex(index=table.index, columns=table.columns)
                 for yours_end in (your_low, your_high))
    axis_kinds = [kind_of(df, name) for name in index]
    order = sorted(table.index, key=lambda key: tuple(
        kind.sort_key(value) if kind else value
        for kind, value in zip(axis_kinds, key if isinstance(key, tuple) else (key,))))
    shown_index = pd.MultiIndex.from_tuples(
        [tuple(value_text(df, name, value) for name, value in zip(index, key if isinstance(key, tuple) else (key,)))
         for key in order], names=index)
    table, low, high = (frame.loc[order].set_axis(shown_index, axis=0) for frame in (table, low, high))
    table.attrs.update(low=low, high=high, intervals=sorted(kinds),
                       caption=f"{_named(column, unit)}: seed {seed_name} beside your medians")
    return table


def _medians(ok: pd.DataFrame, index, columns, column: str):
    """Your medians of `column` per point (rows `index`, columns `columns`), each one's interval
    over its repeats (uncertainty.point_interval: low, high) and the kinds of interval found
    (none where a point had one run)."""
    kinds = set()

    def end(which: int):
        def of(values):
            lo, hi, kind = uncertainty.point_interval(list(values))
            if hi > lo:
                kinds.add(kind)
            return (lo, hi)[which]
        return of

    median, low, high = (ok.pivot_table(index=index, columns=columns, values=column, aggfunc=aggfunc)
                         for aggfunc in ("median", end(0), end(1)))
    return median, low, high, kinds


def _seconds(value: float) -> str:
    """A time in s as seed 003 printed its own: 0.008002, 0.0022."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _named(column: str, unit: str) -> str:
    """The column's label, in `unit` where the table scaled it ("server's time for the batch (ms)")."""
    name = label(column)
    if not unit or f"({unit})" in name or name.startswith(f"{unit} "):  # "Gbit/s while sending": said
        return name
    if name.endswith(")") and " (" in name:  # the label's own unit goes
        name = name[:name.rindex(" (")]
    return f"{name} ({unit})"


def styled(table: pd.DataFrame, form="{:,.1f}"):
    """A beside() table as a student reads it: each number in `form` (a format string or a
    function such as plots.readable), "—" where a side has none, and under each of your
    medians, smaller, its interval over your repeats; the caption says which interval, or that
    one run per point has none.  The seed printed one number per point: it has no interval."""
    kinds = table.attrs.get("intervals") or []
    caption = table.attrs.get("caption", "") + (
        "; under each of yours, in brackets: " + uncertainty.kinds_text(kinds) if kinds
        else "; one run per point of yours, so no interval: repeat the sweep to see how sure each is")
    shown = with_intervals(table, table.attrs.get("low"), table.attrs.get("high"), form)
    return shown.style.format(na_rep="—").set_caption(caption)


def times_table(df: pd.DataFrame, seed_table: pd.DataFrame, column: str = "server_batch_s",
                placement: str = "same_host") -> pd.DataFrame:
    """Seed 002's upload times (ms, the server's clock) beside your medians of `column`,
    rows = connections x size, for the seed's `placement` column."""
    return beside(df, seed_table, column, index=("clients", "size"), seed_where={"placement": placement},
                  scale=1000.0, unit="ms")


def placements_table(df: pd.DataFrame, seed_table: pd.DataFrame, model: str,
                     column: str = "server_batch_s") -> pd.DataFrame:
    """Seed 002's same-host and different-host upload times (ms) for `model` beside
    yours on each link you measured (loopback, tbf 1gbit, ...), rows = connections x size,
    only those you measured (the seed's other rows have nothing to be compared with)."""
    table = beside(df[df["model"] == model], seed_table[seed_table["model"] == model], column,
                   index=("clients", "size"), columns="placement", your_columns="link", scale=1000.0, unit="ms")
    yours = [c for c in table.columns if c[0].startswith("yours")]
    kept = table.dropna(subset=yours, how="all")
    kept.attrs.update(low=table.attrs["low"].loc[kept.index], high=table.attrs["high"].loc[kept.index])
    return kept


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
    ok = ok_rows(measured)
    yours = low = high = pd.DataFrame()
    kinds = set()
    if not ok.empty:
        yours, low, high, kinds = _medians(ok, ["clients", "exchanges"], "model", "lat_p50_us")
        yours, low, high = yours / 1e6, low / 1e6, high / 1e6
    lost = measured.pivot_table(index=["clients", "exchanges"], columns="model", values="lost_connections",
                                aggfunc="median")
    ran = measured.groupby(["clients", "exchanges", "model"])["status"].agg(lambda s: (s == OK).any())
    models = list(dict.fromkeys([*seed.columns, *sorted(measured["model"].unique())]))
    common = [key for key in seed.index if key in lost.index]
    yours_only = [key for key in lost.index if key not in seed.index]
    seed_only = [key for key in seed.index if key not in lost.index]

    def seconds(frame, key, model):
        """A time in s as printed (0.008002), "failed" where every repeat of yours failed, "—" if none."""
        value = frame.at[key, model] if key in frame.index and model in frame.columns else math.nan
        if frame is not seed and (key[0], key[1], model) in ran.index and not ran[(key[0], key[1], model)]:
            return "failed"
        return "—" if pd.isna(value) else _seconds(value)

    def within(key, model):
        """ (low - high): the median's interval over your repeats, where it has one."""
        if key not in low.index or model not in low.columns or not high.at[key, model] > low.at[key, model]:
            return ""
        return f" ({_seconds(low.at[key, model])} - {_seconds(high.at[key, model])})"

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
            rows.append({"point": label, "": "yours: p50 response time (s)",
                         **{m: seconds(yours, key, m) + within(key, m) for m in models}})
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
    if kinds:
        notes.append("in brackets after each of your response times: " + uncertainty.kinds_text(kinds))
    table.attrs["note"] = "; ".join(notes)
    return table


def comparison(df: pd.DataFrame, seed_table: pd.DataFrame, metric: str) -> go.Figure:
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
    # a shape per model: your lines may coincide (client-side work is alike for every model)
    for number, (model, line) in enumerate(measured.groupby("model", sort=False)):
        fig.add_trace(go.Scatter(
            x=line["clients"], y=line["median"], name=model, legendgroup=model,
            mode="lines+markers", line=dict(color=color(model), width=2),
            marker=dict(symbol=SYMBOLS[number % len(SYMBOLS)]),
            # the interval every figure draws around a point (grid.point_interval: the median's over
            # the repeats, or one run's own), said in the hover: the seed printed none to set beside it
            error_y=dict(type="data", symmetric=False, array=line["high"] - line["median"],
                         arrayminus=line["median"] - line["low"], thickness=1.2, width=5),
            customdata=line[["interval", "low", "high"]].to_numpy(),
            hovertemplate=(f"<b>{model}</b> (you)<br>%{{x}} clients<br>median %{{y:,.4g}}<br>"
                           "%{customdata[0]}: %{customdata[1]:,.4g} - %{customdata[2]:,.4g}<extra></extra>"),
        ), row=1, col=1)
    for model, line in seed_rows.sort_values("clients").groupby("model", sort=False):
        fig.add_trace(go.Scatter(
            x=line["clients"], y=line["value"], name=model, legendgroup=model,
            showlegend=measured.empty or model not in set(measured["model"]),
            mode="lines+markers", line=dict(color=color(model), width=2, dash="dot"),
            marker=dict(symbol="square"), customdata=line[["seed_label", "printed"]].to_numpy(),
            hovertemplate=(f"<b>{model}</b> (seed {seed_name}: %{{customdata[0]}})<br>"
                           "%{x} clients<br>as printed: %{customdata[1]} (no interval: the report gives none)"
                           "<extra></extra>"),
        ), row=1, col=2)
    if column in df.columns and not summary.empty:
        add_failures(fig, summary, "clients", row=1, col=1)
    if measured.empty:
        why = why_missing(df, column) if column in df.columns else f"the sweep recorded no {column}"
        fig.update_xaxes(showticklabels=False, showgrid=False, row=1, col=1)
        fig.update_yaxes(showticklabels=False, showgrid=False, row=1, col=1)
        # centred on the empty left panel, in paper coordinates from its own domain
        x_domain, y_domain = fig.layout.xaxis.domain, fig.layout.yaxis.domain
        fig.add_annotation(text=wrap(not_measurable(why), 28), xref="paper", yref="paper",
                           x=sum(x_domain) / 2, y=sum(y_domain) / 2, showarrow=False,
                           font=dict(size=12), bgcolor="#FFF4E5", bordercolor="#E69F00")
    fig.update_xaxes(title_text="concurrent clients")
    fig.update_xaxes(tickvals=sorted(summary["clients"].unique()) if not summary.empty else None,
                     row=1, col=1)
    fig.update_xaxes(tickvals=sorted(seed_rows["clients"].unique()), row=1, col=2)
    fig.update_yaxes(title_text=ylabel)  # both panels: the seed's has its own scale, and says of what
    return fig
