"""Predict, then measure: a number the student writes down before the sweep that measures it.

In a notebook, before the sweep:

    predicted_iterative_ratio = 8       # ✏️ your number
    iterative_prediction = predictions.made("iterative_ratio", predicted_iterative_ratio, why_iterative_ratio)

and after it:

    iterative_outcome = predictions.versus(iterative_prediction, measured, df, unit="x")

made() returns plain data the grader can export: {"name", "value", "why", "sweeps_before"}, where
sweeps_before is how many sweep points this kernel had measured (or read back from its results
file) when the prediction was made (labkit.sweep.points_done()).  versus() shows the prediction
beside the measurement and returns plain data too, with `sweep_began_at`: the same count when
the sweep that measured it began (the DataFrame's attrs, from labkit.sweep.run).

A prediction is a number, or a list of names (which models will be stuck?): versus() then
says which names were right, which were missing and which were wrong, never a ratio of counts.

check() is what a notebook's check calls: the prediction is a finite number (or a list of
names), made before that sweep began.  Nothing here grades whether the prediction was right: the written question after
it asks what the difference teaches.
"""

from __future__ import annotations

import math
import numbers


def _plain(value):
    """A number as a plain int or float (numpy scalars too); anything else as it is."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()
    return value


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_names(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(name, str) for name in value)


def _is_prediction(value) -> bool:
    return _is_number(value) or _is_names(value)


def _names(value) -> str:
    return ", ".join(value) or "none"


def made(name: str, value, why: str = "") -> dict:
    """The prediction `value` for `name` (and the student's one line `why`), with how many sweep
    points this kernel had already measured when it was made."""
    from .. import sweep  # here, not above: the grader's checks import this module without a sweep

    value = sorted(set(value)) if _is_names(value) else _plain(value)
    return {"name": str(name), "value": value, "why": why if isinstance(why, str) else str(why),
            "sweeps_before": sweep.points_done()}


def say(prediction: dict) -> None:
    """Show a prediction as a sentence (it wraps in the page, where a printed dict ran off it)."""
    value, why = prediction.get("value"), prediction.get("why") or ""
    if not _is_prediction(value):
        _show(f"**your prediction**: none yet (it is {value!r}): write your prediction before you run the sweep")
        return
    seen = prediction.get("sweeps_before")
    when = "before this kernel measured any point" if seen == 0 else f"after {seen} point(s) of earlier sweeps"
    shown = _names(value) if _is_names(value) else _format(value, "")
    _show(f"**your prediction**: {shown}" + (f" — {why}" if why else "") + f" (recorded {when})")


def _format(value, unit: str) -> str:
    if not _is_number(value):
        return "—"
    text = f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def versus(prediction: dict, measured, frame=None, unit: str = "", what: str = "") -> dict:
    """Show the prediction beside the measurement (one line); return both as plain data.

    `frame` is the DataFrame of the sweep that measured it (its attrs say where the sweep began
    in this kernel's count of points); `what` names the quantity in the line shown."""
    prediction = prediction if isinstance(prediction, dict) else {}
    predicted, measured = _plain(prediction.get("value")), _plain(measured)
    attrs = getattr(frame, "attrs", None) or {}
    began = attrs.get("points_before")
    names = _is_names(measured)
    outcome = {"name": prediction.get("name", ""), "predicted": predicted,
               "measured": sorted(set(measured)) if names else float(measured) if _is_number(measured) else None,
               "sweeps_before": prediction.get("sweeps_before"),
               "sweep_began_at": int(began) if isinstance(began, numbers.Integral) else None}
    label = what or outcome["name"] or "the quantity"
    shown = _names(outcome["measured"]) if names else _format(measured, unit)
    if not _is_prediction(predicted):
        line = (f"**{label}**: you made no prediction (it is {predicted!r}): write it in the prediction cell "
                f"*before* the sweep next time; measured: **{shown}**")
    elif names:
        said, seen = set(predicted) if _is_names(predicted) else set(), set(outcome["measured"])
        line = (f"**{label}**: you predicted **{_names(sorted(said))}**, you measured **{shown}** "
                f"(right: {_names(sorted(said & seen))}; missed: {_names(sorted(seen - said))}; "
                f"wrong: {_names(sorted(said - seen))})")
    else:
        line = f"**{label}**: you predicted **{_format(predicted, unit)}**, you measured **{shown}**"
        if _is_number(measured) and _is_number(predicted) and predicted != 0:
            line += f" (measured / predicted = {measured / predicted:,.2f})"
    _show(line)
    return outcome


def _show(line: str) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(Markdown(line))
    else:
        print(line.replace("**", ""), flush=True)


def check(prediction, outcome=None, variable: str = "your prediction") -> None:
    """Assert that `prediction` (from made()) is a finite number, or a list of names, made before
    its sweep began.

    `outcome` (from versus(), optional) says where that sweep began; without it the prediction
    must come before any sweep of the kernel.  `variable` names the student's variable in the
    messages.  Raises AssertionError with what to do."""
    assert isinstance(prediction, dict) and "value" in prediction, (
        f"run the prediction cell: it records {variable} with predictions.made(...)")
    value = prediction.get("value")
    assert _is_prediction(value), (
        f"write your prediction in {variable} (it is {value!r}: a number, or a list of names where the cell "
        "asks for one) and run the prediction cell before the sweep: any honest guess passes, a right one "
        "earns nothing more")
    before = prediction.get("sweeps_before")
    assert isinstance(before, numbers.Integral) and not isinstance(before, bool) and before >= 0, \
        "the prediction's record is damaged: run the prediction cell again, as it is"
    began = (outcome or {}).get("sweep_began_at") if isinstance(outcome, dict) else None
    limit = began if isinstance(began, numbers.Integral) and not isinstance(began, bool) else 0
    assert before <= limit, (
        f"{variable} was made after the sweep had measured: this kernel had seen {before} sweep point(s) "
        f"then, the sweep began after {limit}. Predict first: restart the kernel and run the cells in order")
