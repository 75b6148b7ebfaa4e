"""What a results frame says about the grid it was measured on: its axes, each axis's title
and how its values are written, and the medians of the repeats at each point.

The frame declares its experiment in df.attrs["experiment"] (labkit.sweep sets it; pandas
carries it through filtering, copying and sorting).  Only what an experiment offers is read,
its `axis_columns` and its `parameters` (each with a `column`, a `title` and a `kind` that
writes a value as text and says where it sorts), so this package never imports
labkit.experiments: the experiments draw their figures with it.  A frame without one
(rows read back from a file) is grouped by model and clients, its columns titled by
labkit.plots.style.label."""

from __future__ import annotations

import math

import pandas as pd

from labkit.errors import LabError

from .style import EVERY_POINT_FAILED, NO_VALUE, escape, label, wrap
from labkit.row import ok_rows, succeeded


def experiment_of(df: pd.DataFrame):
    """The experiment `df` declares in df.attrs["experiment"], or None (then the generic axes)."""
    experiment = df.attrs.get("experiment")
    if hasattr(experiment, "axis_columns") and hasattr(experiment, "parameters"):
        return experiment
    return None


def axes_of(df: pd.DataFrame) -> list[str]:
    """The grid axes of the experiment `df` declares (model first), as results columns;
    ["model", "clients"] for a frame that declares none."""
    experiment = experiment_of(df)
    return experiment.axis_columns if experiment else ["model", "clients"]


def _param_of(df: pd.DataFrame, column: str):
    """The parameter that fills `column` in the experiment `df` declares, or None."""
    experiment = experiment_of(df)
    for param in experiment.parameters if experiment else ():
        if param.column == column:
            return param
    return None


def axis_title(df: pd.DataFrame, column: str) -> str:
    """The title of the axis that shows `column`: its parameter's label in the experiment
    `df` declares ("idle connections"), else label(column)."""
    param = _param_of(df, column)
    if param is not None:
        return param.title
    return "concurrent clients" if column == "clients" else label(column)


def kind_of(df: pd.DataFrame, column: str):
    """The kind of the parameter that fills `column` (how its values are written and sorted), or None."""
    param = _param_of(df, column)
    return param.kind if param is not None else None


def value_text(df: pd.DataFrame, column: str, value) -> str:
    """One value of `column` as its parameter's kind writes it (10485760 -> '10MB'),
    else 1,000 with separators."""
    kind = kind_of(df, column)
    if kind is not None:
        return kind.text(value)
    return f"{value:,}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def setting(df: pd.DataFrame, column: str, value) -> str:
    """A parameter and its value as every title, legend and caption writes it: its one label
    and its kind's text ("one-way delay (ms) 5", not "link_delay_ms 5" in one place and the
    label in another)."""
    return f"{axis_title(df, column)} {value_text(df, column, value)}"


def series_of(df: pd.DataFrame, x: str, series) -> list[str]:
    """The grid axes besides model and x: each of their values gets a line of its own."""
    if series is None:
        series = [c for c in axes_of(df) if c not in ("model", x)]
    return [c for c in series if c in df.columns]


def point_axes(df: pd.DataFrame, axes) -> list[str]:
    """The grid axes besides model (a grid point is one value of each)."""
    axes = [c for c in axes_of(df) if c != "model"] if axes is None else list(axes)
    return [c for c in axes if c in df.columns] or ["clients"]


def varying_axes(df: pd.DataFrame, axes: list[str]) -> list[str]:
    """The axes with more than one value in `df` (one that has a single value names no
    point apart from another), or the first axis when none varies."""
    return [c for c in axes if df[c].nunique() > 1] or axes[:1]


def point_label(df: pd.DataFrame, axes: list[str], values) -> str:
    """A grid point as a tick shows it: each value as its parameter writes it ('many · 15 x 100 B')."""
    return " · ".join(value_text(df, axis, value) for axis, value in zip(axes, values))


def point_interval(ok: pd.DataFrame, metric: str, measured: pd.Series) -> tuple[float, float, str]:
    """labkit.uncertainty.point_interval for one point: its ok repeats' values, and with one
    repeat the run's own interval where the row has one."""
    from labkit import uncertainty

    own = uncertainty.interval_columns(metric)
    run = [math.nan] * 3
    if own and len(measured) == 1 and all(c in ok.columns for c in own):
        first = ok.loc[measured.index[0]]
        run = [float(pd.to_numeric(first[c], errors="coerce")) for c in own]
    return uncertainty.point_interval(list(measured), *run)


def summarize(df: pd.DataFrame, metric: str, x: str = "clients", series=()) -> pd.DataFrame:
    """Per (model, *series, x): median/min/max of `metric` over ok repeats, the interval a
    figure draws around the median (low, high, and what it is: point_interval), and the
    failures.

    Columns: model, *series, x, median, min, max, low, high, interval, flags (the self-checks
    it failed, each once with its reasons, wrapped for a hover: self_check_flags), checks (their
    titles), ok, measured, failed (repeats that ran and failed), waiting (repeats never run: they
    wait for an unsolved exercise), saturated, errors (the failed repeats' reasons), waits (the
    exercise's sentence).
    """
    keys = ["model", *series, x]
    require(df, [*keys, "status"])
    if metric not in df.columns:
        raise LabError(f"the results have no column {metric!r}",
                       "pick one of: " + ", ".join(c for c in df.columns if is_numeric(df[c])))
    never_run = waits_for_exercise(df) & ~succeeded(df)
    rows = []
    for values, point in df.groupby(keys, sort=True):
        ok = ok_rows(point)
        waiting = point[never_run.loc[point.index]]
        failed = point[~succeeded(point) & ~never_run.loc[point.index]]
        measured = pd.to_numeric(ok[metric], errors="coerce").dropna()
        saturated = bool(ok["client_saturated"].fillna(False).astype(bool).any()) \
            if "client_saturated" in ok else False
        errors = sorted({str(e) for e in failed.get("error", pd.Series(dtype=str)).fillna("no reason recorded")})
        waits = dict.fromkeys(str(e) for e in waiting.get("error", pd.Series(dtype=str)).fillna("") if str(e).strip())
        low, high, interval = point_interval(ok, metric, measured)
        rows.append(dict(zip(keys, values), flags=self_check_flags(ok, metric),
                         checks=", ".join(self_check_titles(ok, metric)),
                         median=measured.median() if len(measured) else math.nan,
                         min=measured.min() if len(measured) else math.nan,
                         max=measured.max() if len(measured) else math.nan,
                         low=low, high=high, interval=interval,
                         ok=len(ok), measured=len(measured), failed=len(failed), waiting=len(waiting),
                         saturated=saturated, errors="; ".join(errors), waits="; ".join(waits)))
    return pd.DataFrame(rows, columns=[*keys, "median", "min", "max", "low", "high", "interval", "flags", "checks",
                                       "ok", "measured", "failed", "waiting", "saturated", "errors", "waits"])


def _reasons(ok: pd.DataFrame, metric: str) -> dict[str, list[str]]:
    """Each self-check (labkit.verdicts) the point's ok repeats failed that bears on `metric`,
    by its title, with the reason each repeat that failed it gave; a saturated generator is
    left to its own mark (hollow grey)."""
    from labkit import verdicts

    if "verdicts" not in ok.columns:
        return {}
    found: dict[str, list[str]] = {}
    for judged in ok["verdicts"]:
        if isinstance(judged, dict):
            for name, why in verdicts.relevant(judged, metric).items():
                if name != "generator_saturated":
                    found.setdefault(verdicts.title(why), []).append(why)
    return dict(sorted(found.items()))


def self_check_titles(ok: pd.DataFrame, metric: str) -> list[str]:
    """The titles of the self-checks the point's ok repeats failed that bear on `metric`."""
    return list(_reasons(ok, metric))


REASONS_SHOWN = 2  # a check's distinct reasons a hover says; the rest are counted


def self_check_flags(ok: pd.DataFrame, metric: str, width: int = 80) -> str:
    """The self-checks (labkit.verdicts) the point's ok repeats failed that bear on `metric`:
    each check once, with how many of the repeats failed it, then each distinct reason once
    (the first REASONS_SHOWN, the rest counted), wrapped to `width` for a hover (<br> between
    lines); "" where all held or the rows have none."""
    said = []
    for check, reasons in _reasons(ok, metric).items():
        distinct = list(dict.fromkeys(why.split(":", 1)[1].strip() if ":" in why else why for why in reasons))
        runs = f"{len(reasons)} of {len(ok)} runs" if len(ok) > 1 else "this run"
        lines = [f"{escape(check)} ({runs}):", *(wrap(escape(why), width) for why in distinct[:REASONS_SHOWN])]
        if len(distinct) > REASONS_SHOWN:
            lines.append(f"and {len(distinct) - REASONS_SHOWN} more of the same kind")
        said.append("<br>".join(lines))
    return ";<br>".join(said)  # a check's block ends with ";" where another follows (read as one line: alt_text)


def shared_cpus_note(df: pd.DataFrame) -> str:
    """A sentence when some of `df`'s runs had CPUs another lab run held too (the rows'
    `cpus_shared`, labkit.cpu_leases), else "": their times include that run's work."""
    if "cpus_shared" not in df.columns or df.empty:
        return ""
    shared = df["cpus_shared"].map(lambda cpus: list(cpus) if isinstance(cpus, (list, tuple)) else [])
    hit = shared.map(bool)
    if not hit.any():
        return ""
    cpus = sorted({cpu for cpus in shared for cpu in cpus})
    which = f"CPU{'s' if len(cpus) > 1 else ''} {', '.join(map(str, cpus))}"
    return (f"{int(hit.sum())} of {len(df)} runs shared {which} with another lab run on this machine: "
            "their times include that run's work")


def waits_for_exercise(df: pd.DataFrame) -> pd.Series:
    """Whether each row's point waits for an unsolved exercise (labkit.exercises), and so was
    never run; False for every row of results saved before there was such a column."""
    if "waiting_for_exercise" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["waiting_for_exercise"].fillna("").astype(str) != ""


def waiting_reason(df: pd.DataFrame) -> str | None:
    """The sentence(s) of the points that wait for an unsolved exercise (labkit.exercises),
    when every point of `df` waits: then none failed, and that is why nothing is drawn."""
    if df.empty or not waits_for_exercise(df).all():
        return None
    return "; ".join(dict.fromkeys(str(e) for e in df["error"].fillna("") if str(e).strip())) or None


def nothing_measured(df: pd.DataFrame, what: str) -> str:
    """What a figure of `what` says when no point was measured: the exercise the points wait
    for, or that every point failed (their reasons are in the crosses and under the panel)."""
    waiting = waiting_reason(df)
    return f"{what}: {escape(waiting)}" if waiting else f"{what}: nothing measured ({EVERY_POINT_FAILED})"


def why_missing(df: pd.DataFrame, metric: str) -> str:
    """Why `metric` has no values, in the words the sweep recorded: the exercise every point
    waits for; the points' own errors when every point failed (a failed point measured
    nothing, whatever perf could count); else, for a perf counter's column (server_...,
    client_...), perf's note."""
    waiting = waiting_reason(df)
    if waiting:
        return escape(waiting if len(waiting) <= 320 else waiting[:317] + "...")
    if "status" in df.columns and ~succeeded(df).all():
        errors = [str(e) for e in df["error"].dropna().unique() if str(e).strip()] if "error" in df.columns else []
        shown = "; ".join(e if len(e) <= 160 else e[:157] + "..." for e in errors[:2])
        more = f"; and {len(errors) - 2} other reasons (hover the crosses)" if len(errors) > 2 else ""
        return escape(f"{EVERY_POINT_FAILED}: {shown}{more}" if shown else f"{EVERY_POINT_FAILED} (hover the crosses)")
    if not metric.startswith(("server_", "client_")):
        return f"{NO_VALUE} for {metric}"
    notes = []
    if "counters_note" in df.columns:
        notes = [str(n) for n in df["counters_note"].dropna().unique() if str(n).strip()]
    if notes:
        return escape("; ".join(notes))
    return f"perf reported {metric.split('_', 1)[-1]} as <not supported>"


def require(df: pd.DataFrame, columns: list[str]) -> None:
    """A LabError naming the `columns` that `df` lacks, if any."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise LabError(f"these results lack the columns {missing}",
                       "pass the DataFrame that labkit.sweep.run() or labkit.store.load() returned")


def is_numeric(series: pd.Series) -> bool:
    """Whether `series` holds numbers (a column a figure can draw)."""
    return pd.api.types.is_numeric_dtype(series)
