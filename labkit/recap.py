"""The closing table of an experiment notebook, "What you measured": each learning goal
beside the student's own number from this run, and the seed report's figure where the
notebook has one.

A number that is missing (its point failed, the machine cannot count it, the run left it
out) is said to be missing, with the reason: `not measured (why)`. It is never printed as
0 and never as NaN.  A number the lab measured where the student's own exercise is still
unanswered (answered()) is shown as measured, and says the exercise is unanswered.  A number
measured while another lab run shared its CPUs (the rows' `cpus_shared`) is marked †, and the
table says so under it, as the figures do.

    rows = [recap.Row("1. ...", "iterative's elapsed at 50 clients over select's",
                      recap.ratio(recap.median(df, "elapsed_s", model="iterative", clients=50),
                                  recap.median(df, "elapsed_s", model="select", clients=50)), "x"),
            ...]
    recap.show(rows, seed_label="seed 000")
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Number

import pandas as pd

from labkit.plots import readable
from labkit.row import ok_rows

NO_SEED = "—"


@dataclass(frozen=True)
class Missing:
    """A number this run does not have, and why (shown as `not measured (why)`)."""

    why: str

    def __str__(self) -> str:
        return f"not measured ({self.why})"


class Measured(float):
    """A median the run measured, with its interval (labkit.uncertainty, through
    plots.grid.point_interval: the median's own of several repeats, a run's own for one
    repeat's percentile) and what that interval is, in words; arithmetic on it is a plain
    float's (a ratio of two has no interval of its own here)."""

    low: float
    high: float
    interval: str
    shared: str  # plots.grid.shared_cpus_note of its rows: "" where no other lab run shared its CPUs
    note: str    # words said after it ("measured by the lab; exercise 6.1 unanswered"), or ""

    def __new__(cls, value: float, low: float = math.nan, high: float = math.nan, interval: str = "",
                shared: str = "", note: str = ""):
        made = super().__new__(cls, value)
        made.low, made.high, made.interval, made.shared, made.note = low, high, interval, shared, note
        return made

    @property
    def has_interval(self) -> bool:
        return self.low == self.low and self.high == self.high and self.low < self.high


@dataclass(frozen=True)
class Row:
    """One line of the table: a learning goal, what the number is, the student's number
    (a number, a short text, or missing), its unit, and the seed's figure (None: the
    seed has none).  `why` says why the number is missing when `yours` does not."""

    goal: str
    measure: str
    yours: object
    unit: str = ""
    seed: object = None
    why: str | None = None


def is_missing(value) -> bool:
    """None, NaN, pandas' NA or a Missing: not a number this run has."""
    if value is None or isinstance(value, Missing):
        return True
    if isinstance(value, str):
        return False
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _number(value) -> float | None:
    """value as a float, or None when it is not a finite number."""
    if is_missing(value) or isinstance(value, (str, bool)) or not isinstance(value, Number):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _matching(df, where: dict):
    """df's rows where each column of `where` has its value (or one of its values)."""
    rows = df
    for key, wanted in where.items():
        several = isinstance(wanted, (list, tuple, set))
        rows = rows[rows[key].isin(list(wanted))] if several else rows[rows[key] == wanted]
    return rows


def median(df, column: str, include_failed: bool = False, **where):
    """The median of `column` over df's successful rows (status == "ok"; every row with
    `include_failed`, for what a failure counts, such as lost connections) that match
    `where` (column=value, or column=[values]); a Missing saying why when there is none."""
    if df is None or len(df) == 0:
        return Missing("the sweep measured nothing")
    if column not in df.columns:
        return Missing(f"this run has no {column}")
    absent = [key for key in where if key not in df.columns]
    if absent:
        return Missing(f"this run has no {absent[0]}")
    rows = _matching(df, where)
    if len(rows) == 0:
        return Missing(f"{_point(where)} is not in this run's grid")
    ok = rows if include_failed else ok_rows(rows)
    if len(ok) == 0:
        errors = rows["error"].dropna().astype(str) if "error" in rows.columns else []
        said = next((e.strip() for e in errors if e.strip()), "")
        return Missing(f"{_point(where)} failed" + (f": {_shorter(said)}" if said else ""))
    values = pd.to_numeric(ok[column], errors="coerce").dropna()
    if len(values) == 0:
        return Missing(f"{column} is not measurable on this machine")
    from labkit.plots.grid import point_interval, shared_cpus_note

    low, high, interval = point_interval(ok, column, values)
    return Measured(float(values.median()), low, high, interval, shared=shared_cpus_note(ok))


def answered(yours, measured, exercise: str):
    """The student's answer to `exercise` where it is a number; else, where the lab measured
    the same quantity itself (`measured`), that number, saying it is the lab's and that the
    exercise is unanswered (not "not measured": it was); a Missing only where neither is."""
    if _number(yours) is not None:
        return yours
    if _number(measured) is None:
        return measured if isinstance(measured, Missing) else Missing(f"exercise {exercise} is unanswered")
    value = _number(measured)
    kept = measured if isinstance(measured, Measured) else Measured(value)
    return Measured(value, kept.low, kept.high, kept.interval, kept.shared,
                    note=f"measured by the lab; your exercise {exercise} is unanswered")


def _shared(*values) -> str:
    """The shared-CPUs note of the first of `values` that carries one."""
    return next((value.shared for value in values if isinstance(value, Measured) and value.shared), "")


def _keep_shared(result: float, *values):
    """`result`, a Measured that keeps the shared-CPUs note where one of `values` had one."""
    shared = _shared(*values)
    return Measured(result, shared=shared) if shared else result


def spread(df, column: str, **where):
    """The spread of `column` over the repeats at one point, (max - min) / median in
    percent; a Missing when fewer than two repeats succeeded there."""
    one = median(df, column, **where)
    if isinstance(one, Missing):
        return one
    rows = _matching(df, where)
    rows = ok_rows(rows)
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    if len(values) < 2:
        return Missing(f"{len(values)} repeat here; a spread needs 2 or more: raise repeats")
    if one == 0:
        return Missing("its median is 0")
    return float((values.max() - values.min()) / abs(one) * 100)


def point(df, axes=(), **given) -> dict:
    """The point a recap quotes: `given`, and for each of `axes` that this run varied
    (more than one value), its largest value; an axis with one value needs no choosing."""
    chosen = dict(given)
    for axis in axes:
        if df is not None and axis in df.columns and axis not in chosen and df[axis].nunique() > 1:
            chosen[axis] = sorted(df[axis].dropna().unique())[-1]
    return chosen


def _shorter(text: str, most: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most - 1].rstrip() + "…"


def _point(where: dict) -> str:
    return "the point " + ", ".join(f"{k} = {v}" for k, v in where.items()) if where else "every point"


def _first_missing(*values):
    for value in values:
        if is_missing(value):
            return value if isinstance(value, Missing) else Missing("no value")
        if _number(value) is None:
            return Missing(f"{value!r} is not a number")
    return None


def ratio(a, b):
    """a / b, or a Missing (the first missing one's reason, or a zero divisor)."""
    missing = _first_missing(a, b)
    if missing:
        return missing
    if _number(b) == 0:
        return Missing("its divisor is 0")
    return _keep_shared(_number(a) / _number(b), a, b)


def difference(a, b):
    """a - b, or the first Missing."""
    missing = _first_missing(a, b)
    return missing if missing else _keep_shared(_number(a) - _number(b), a, b)


def scaled(a, factor: float):
    """a x factor (a unit change), or a's Missing."""
    missing = _first_missing(a)
    return missing if missing else _keep_shared(_number(a) * factor, a)


def seed_value(table, metric: str, **where):
    """The seed table's one value of `metric` at `where`; None where the seed has none."""
    if table is None or len(table) == 0:
        return None
    rows = table[table["metric"] == metric]
    for key, wanted in where.items():
        rows = rows[rows[key] == wanted]
    values = pd.to_numeric(rows["value"], errors="coerce").dropna()
    return float(values.iloc[0]) if len(values) == 1 else None


def points(checker, *names: str):
    """"p/q points" of the named checks, from a labkit Checker; Missing if none has run."""
    results = [checker.results[name] for name in names if name in getattr(checker, "results", {})]
    if not results:
        return Missing("its check has not run yet: run the exercise's cells")
    got = sum(r.points for r in results)
    most = sum(r.max_points for r in results)
    return f"{got:g}/{most:g} points"


def shown(value, unit: str = "", why: str | None = None) -> str:
    """One cell of the table: the number with its unit, a text as it is, or
    `not measured (why)`; never 0 or NaN for a missing value."""
    if is_missing(value):
        reason = why or (value.why if isinstance(value, Missing) else "no value in this run")
        return f"not measured ({reason})"
    if isinstance(value, str):
        return value
    number = _number(value)
    if number is None:
        return f"not measured ({why or 'not a finite number'})"
    cell = f"{readable(number)} {unit}".strip()
    if isinstance(value, Measured) and value.has_interval:  # how sure: its interval, and what it is
        cell += f" ({readable(value.low)} to {readable(value.high)}: {value.interval})"
    if isinstance(value, Measured) and value.note:
        cell += f" ({value.note})"
    if isinstance(value, Measured) and value.shared:
        cell += f" {SHARED_MARK}"
    return cell


SHARED_MARK = "†"  # a number measured while another lab run shared its CPUs (the line under the table says so)


def shared_notes(rows) -> list[str]:
    """Each distinct shared-CPUs note of the rows' numbers (Measured.shared), once."""
    rows = [row if isinstance(row, Row) else Row(*row) for row in rows]
    return list(dict.fromkeys(row.yours.shared for row in rows if isinstance(row.yours, Measured) and row.yours.shared))


def _seed_cell(value, unit: str) -> str:
    if value is None or (not isinstance(value, str) and is_missing(value)):
        return NO_SEED
    if isinstance(value, str):
        return value
    number = _number(value)
    return NO_SEED if number is None else f"{readable(number)} {unit}".strip()


def _escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _cells(rows, seed_label: str | None) -> tuple[list[str], list[list[str]]]:
    """The table's head and its rows of text cells."""
    rows = [row if isinstance(row, Row) else Row(*row) for row in rows]
    with_seed = seed_label is not None or any(row.seed is not None for row in rows)
    head = ["Learning goal", "Your number: what it is", "Yours (this run)"]
    if with_seed:
        head.append(f"{seed_label or 'seed'} (their machine)")
    body = []
    for row in rows:
        cells = [str(row.goal), str(row.measure), shown(row.yours, row.unit, row.why)]
        if with_seed:
            cells.append(_seed_cell(row.seed, row.unit))
        body.append(cells)
    return head, body


def markdown(rows, seed_label: str | None = None) -> str:
    """The table as Markdown: goal, what the number is, yours, and the seed's figure
    (a column shown only when `seed_label` is given or a row has a seed figure)."""
    head, body = _cells(rows, seed_label)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_escape(cell) for cell in cells) + " |" for cells in body]
    notes = shared_notes(rows)
    if notes:
        lines += ["", f"{SHARED_MARK} measured while another lab run shared the CPUs: " + "; ".join(notes) + "."]
    return "\n".join(lines)


def frame(rows, seed_label: str | None = None) -> pd.DataFrame:
    """The same table as a DataFrame of text (for export beside the notebook)."""
    head, body = _cells(rows, seed_label)
    return pd.DataFrame(body, columns=head)


def show(rows, seed_label: str | None = None):
    """The table, for a notebook cell to display (IPython's Markdown)."""
    from IPython.display import Markdown

    return Markdown(markdown(rows, seed_label))
