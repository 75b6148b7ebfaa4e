"""The tables and lines of text beside the figures: perf's counters per grid point (as the
seed reports lay them out), the failed points with their reasons, the counters' notes
gathered into one line, the points never run (not measurable until an exercise is solved,
never counted as failed), and a warning where the load generator saturated its CPU (there it
measured itself, not the server).  A counter that could not be measured is NaN, shown as
"not measurable", never 0."""

from __future__ import annotations

import math

import pandas as pd

from labkit import uncertainty
from labkit.errors import LabError
from labkit.friendly import Note
from labkit.perf.parse import NOT_MEASURABLE

from .grid import axis_title, point_axes, require, setting, value_text, varying_axes, waits_for_exercise
from .style import EVENT_LABELS
from labkit.row import ok_rows, succeeded

# counters_table's columns, in the order of the seed reports' tables.
COUNTER_EVENTS = ["task-clock", "cpus-utilized", "context-switches", "cpu-migrations",
                  "page-faults", "cycles", "instructions", "ipc", "branches",
                  "branch-misses", "cache-misses"]

# "not measurable" is written in this grey: 4.6:1 on white, where text needs 4.5 (WCAG 2.1 1.4.3)
NOT_MEASURABLE_GREY = "#757575"


def counters_table(df: pd.DataFrame, side: str = "server", axes=None) -> pd.DataFrame:
    """Median perf counters per grid point (model x the grid's axes), like the seed
    reports' tables.  An axis with one value in the whole sweep (placement same_host)
    names no row: it is said once, in the caption.  Each median's interval over the
    repeats (uncertainty.point_interval: 3 repeats give [min, max], a 75% interval) is kept
    beside the table, in attrs["low"] and attrs["high"], what it is in attrs["intervals"].

    NaN means not measurable on this machine; show it with style_counters(), which says so
    and writes each median with its interval."""
    if side not in ("server", "client"):
        raise LabError(f"side must be 'server' or 'client', not {side!r}",
                       "counters_table(df, side='server') or side='client'")
    every = point_axes(df, axes)
    require(df, ["model", *every, "status"])
    axes = ["model", *varying_axes(df, every)]
    constant = [setting(df, axis, df[axis].iloc[0]) for axis in every if axis not in axes]
    ok = ok_rows(df)
    columns = {}
    for event in COUNTER_EVENTS:
        column = f"{side}_{event}"
        series = pd.to_numeric(ok[column], errors="coerce") if column in ok else pd.Series(math.nan, index=ok.index)
        columns[EVENT_LABELS[event]] = series
    wide = pd.DataFrame(columns)
    for axis in axes:
        wide[axis] = ok[axis]
    # median() skips NaN, so a group with no measured value stays NaN (never 0).
    groups = wide.groupby(axes)
    table = groups.median(numeric_only=True)
    low, high, kinds = table.copy(), table.copy(), set()
    for key, group in groups:
        for column in table.columns:
            lo, hi, kind = uncertainty.point_interval(list(pd.to_numeric(group[column], errors="coerce")))
            low.loc[key, column], high.loc[key, column] = lo, hi
            kinds |= {kind} if hi > lo else set()
    table.attrs.update(low=low, high=high, intervals=sorted(kinds),
                       repeats=int(groups.size().max()) if len(table) else 0)
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
    formats.update({EVENT_LABELS["task-clock"]: "{:,.2f}", EVENT_LABELS["cpus-utilized"]: "{:.3f}",
                    EVENT_LABELS["ipc"]: "{:.2f}"})
    formats = {c: f for c, f in formats.items() if c in table.columns}
    attrs, axes = dict(table.attrs), list(table.index.names)
    if attrs.get("intervals"):
        caption += f"; under each median, in brackets: {uncertainty.kinds_text(attrs['intervals'])}"
    elif attrs.get("repeats") == 1:
        caption += "; one run per point, so no interval"
    numbers = table
    table = with_intervals(table, attrs.get("low"), attrs.get("high"), formats)
    table = table.rename_axis([attrs.get("index_titles", {}).get(axis, axis) for axis in axes])
    styler = table.style
    for level, axis in enumerate(axes):
        shown = attrs.get("index_text", {}).get(axis)
        if shown:
            styler = styler.format_index(lambda value, shown=shown: shown.get(value, value), level=level)
    grey = f"color: {NOT_MEASURABLE_GREY}; font-style: italic; white-space: nowrap"
    return (styler.format(na_rep="not measurable")
            .apply(lambda _: numbers.isna().replace({True: grey, False: "white-space: nowrap"}).set_axis(
                table.index, axis=0), axis=None)
            .set_caption(caption))


def with_intervals(table: pd.DataFrame, low, high, formats) -> pd.DataFrame:
    """Each median written as its column's format says (`formats`: a format string or a
    function for every column, or a dict of them by column, "{:,.0f}" where one is missing),
    and under it, smaller, "(low - high)" where it has an interval (on a line of its own: the
    table keeps its width on a laptop's page); NaN stays NaN (the Styler's na_rep writes it)."""
    shown = table.astype(object)
    for column in table.columns:
        form = formats.get(column, "{:,.0f}") if isinstance(formats, dict) else formats
        write = form if callable(form) else form.format
        for key in table.index:
            value = table.at[key, column]
            if pd.isna(value):
                continue
            lo, hi = (low.at[key, column], high.at[key, column]) if low is not None else (value, value)
            shown.at[key, column] = write(value) + (
                f"<br><small>({write(lo)} - {write(hi)})</small>" if hi > lo else "")
    return shown


def failed_points(df: pd.DataFrame) -> pd.DataFrame:
    """The failed rows, with the reason: model, the grid's axes, repeat, error.  A row never
    run, because it waits for an unsolved exercise, did not fail: it is not measurable
    (unmeasured_points), and is not here."""
    if "status" not in df.columns:
        return df.iloc[0:0]
    cols = [c for c in ("model", *point_axes(df, None), "repeat", "error") if c in df.columns]
    return df.loc[~succeeded(df) & ~waits_for_exercise(df), cols].reset_index(drop=True)


def unmeasured_points(df: pd.DataFrame) -> pd.DataFrame:
    """The rows never run because they wait for an unsolved exercise: model, the grid's axes,
    repeat, and the exercise's sentence (error)."""
    if "status" not in df.columns:
        return df.iloc[0:0]
    cols = [c for c in ("model", *point_axes(df, None), "repeat", "error") if c in df.columns]
    return df.loc[~succeeded(df) & waits_for_exercise(df), cols].reset_index(drop=True)


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


def saturation_warning(df: pd.DataFrame, client_is_subject: bool = False) -> str | None:
    """A warning naming the points where the load generator saturated its CPU, else None.
    Where the sender's own calls are what the experiment measures (`client_is_subject`), a
    busy sender is the measurement, and the line says so instead of warning."""
    if "client_saturated" not in df.columns:
        return None
    # a failed point's reason is its error (a server that refused every connection leaves the
    # client busy reconnecting): the warning names only points that measured something
    measured = succeeded(df)
    saturated = df[df["client_saturated"].fillna(False).astype(bool) & measured]
    if saturated.empty:
        return None
    axes = point_axes(df, None)
    named = varying_axes(df, axes)  # an axis with one value in the whole sweep names no point
    points = list(dict.fromkeys(_where(df, row, named)
                                for _, row in saturated.sort_values(["model", *axes]).iterrows()))
    total = len(dict.fromkeys(_where(df, row, named) for _, row in df.iterrows()))
    marked = "" if client_is_subject else " (hollow grey marks in the plots)"  # only a server's chart greys a point
    shown = "; ".join(points[:4]) + (f"; and {len(points) - 4} more{marked}" if len(points) > 4 else "")
    where = f"{len(points)} of {total} points: {shown}" if len(points) > 1 else shown
    if client_is_subject:
        return ("The sender kept its CPU busy at " + where + ": here the sender's own write calls "
                "are what is measured, so a busy sender is the measurement, not a flaw.")
    return ("WARNING: the client saturated its CPU at " + where + " (running, or waiting for the CPU "
            "while something else ran on it, all along). There it measured itself, not the server: give "
            "the client more CPUs (client_cpus) and keep other work off them, or fewer clients/requests.")


def _where(df: pd.DataFrame, row, axes: list[str]) -> str:
    """'select @ 10 clients', or 'poll @ idle 1,000, clients 100' for other axes (each value
    as its parameter writes it: 'size 10MB')."""
    if axes == ["clients"]:
        return f"{row['model']} @ {int(row['clients'])} clients"
    return f"{row['model']} @ " + ", ".join(setting(df, axis, row[axis]) for axis in axes)
