"""A figure as a student will see it, checked before anyone looks: what plotly draws
without complaint but a reader is misled by.

    problems(figure) -> ["bars on a log axis (yaxis): ...", ...]     (empty: fine)

Each check is one thing a chart of this lab once got wrong:
  - a bar on a log axis (a bar's length means nothing there);
  - a shape or annotation in data coordinates far outside the data (plotly reads an
    annotation's x or y on a log axis as the exponent, a shape's as the value itself:
    iperf3's label at 12.6 Gbit/s drawn at 10^12.6 stretched an axis to 1T, every line a
    flat band at its bottom);
  - an axis range set by hand that leaves the data out, or more than a decade beyond it;
  - a title or axis title too long for the figure's width (plotly does not wrap them:
    they are cut at both sides), or a y title taller than the plot (it runs over the x
    tick labels);
  - a legend too long to show beside the plot (over LEGEND_MOST entries: it scrolls, and
    a model just ticked in the panel is out of view);
  - traces that coincide and look alike (same colour-less style: one hides the other,
    and a measured model looks missing);
  - measured points drawn without their interval, where nothing the reader sees says why
    (a number without its uncertainty teaches a bad habit): a trace of marks or bars
    draws whiskers (error_y or error_x), or the title, the subtitle, a note, its name or
    its hover says "no interval" (a seed report's printed figure, a run's mean) or "exact"
    (counts), or its own name or hover says "failed" (a mark where nothing was measured).  A trace of lines alone is a
    theory's curve or a distribution, not points, and is not asked.
tests/notebooks/test_notebooks.py runs it on every figure every notebook makes in the quick profile.
"""

from __future__ import annotations

import math

LEGEND_MOST = 10
DEFAULT_WIDTH = 900       # JupyterLab's output area at a laptop's width, roughly (autosize)
DEFAULT_HEIGHT = 450      # plotly's
CHAR_WIDTH = 0.58         # an average character's width, in font sizes (DejaVu Sans)


def problems(figure) -> list[str]:
    """Everything wrong with `figure` (a plotly Figure or its dict), in words."""
    fig = figure.to_plotly_json() if hasattr(figure, "to_plotly_json") else figure
    layout, data = fig.get("layout", {}), fig.get("data", [])
    found = []
    axes = {name: layout.get(name) or {} for name in layout if name.startswith(("xaxis", "yaxis"))}
    axes.setdefault("xaxis", {})
    axes.setdefault("yaxis", {})
    values = _values_per_axis(data)
    for trace in data:
        yaxis = "yaxis" + (trace.get("yaxis", "y")[1:])
        if trace.get("type") == "bar" and (axes.get(yaxis) or {}).get("type") == "log":
            found.append(f"bars on a log axis ({yaxis}): {trace.get('name') or 'a trace'}; draw marks instead")
    for name, axis in axes.items():
        seen = values.get(name, [])
        if axis.get("range") and seen and axis.get("type") != "category":
            found += _range_problems(name, axis, seen)
    for kind in ("shapes", "annotations"):
        for item in layout.get(kind, []) or []:
            found += _placed_problems(kind[:-1], item, axes, values)
    found += _text_problems(layout)
    found += _legend_problems(data, layout)
    found += _coinciding(data)
    found += _uncertainty_problems(data, layout)
    return found


def _values_per_axis(data) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for trace in data:
        for letter in ("x", "y"):
            axis = f"{letter}axis" + (trace.get(f"{letter}axis", letter)[1:])
            numbers = [v for v in _numbers(trace.get(letter)) if math.isfinite(v)]
            values.setdefault(axis, []).extend(numbers)
    return values


def _numbers(sequence) -> list[float]:
    if sequence is None:
        return []
    if isinstance(sequence, dict):  # plotly's typed array, as a stored figure keeps numpy data
        if "bdata" not in sequence:
            return []
        import base64

        import numpy as np

        array = np.frombuffer(base64.b64decode(sequence["bdata"]), dtype=np.dtype(sequence["dtype"]))
        return [float(v) for v in array.ravel()]
    out = []
    for value in sequence:
        if isinstance(value, bool):
            continue
        try:
            out.append(float(value))
        except (TypeError, ValueError):
            return []  # a category axis
    return out


def _range_problems(name: str, axis: dict, seen: list[float]) -> list[str]:
    low, high = axis["range"]
    log = axis.get("type") == "log"
    lo, hi = (math.log10(min(v for v in seen if v > 0)), math.log10(max(seen))) if log and max(seen) > 0 \
        else (min(seen), max(seen))
    if lo < low - 1e-9 or hi > high + 1e-9:
        return [f"{name}'s range {axis['range']} leaves data out ({lo:g} to {hi:g})"]
    if log and (lo - low > 1.0 or high - hi > 1.0):
        return [f"{name}'s range {axis['range']} reaches more than a decade beyond the data ({lo:g} to {hi:g})"]
    return []


def _placed_problems(what: str, item: dict, axes: dict, values: dict) -> list[str]:
    """A shape or annotation placed in data coordinates must lie within a decade of the data.
    On a log axis plotly reads an annotation's position as the exponent (log units) and a
    shape's as the value (plotly.js#6194)."""
    found = []
    for letter, keys in (("y", ("y0", "y1", "y")), ("x", ("x0", "x1", "x"))):
        ref = item.get(f"{letter}ref") or letter
        if "domain" in ref or ref == "paper":
            continue
        axis_name = f"{letter}axis{ref[1:]}"
        axis, seen = axes.get(axis_name) or {}, [v for v in values.get(axis_name, []) if math.isfinite(v)]
        if not seen or axis.get("type") == "category":
            continue
        log = axis.get("type") == "log"
        for key in keys:
            at = item.get(key)
            if not isinstance(at, (int, float)) or isinstance(at, bool):
                continue
            exponent = log and what == "annotation"
            if exponent and at > 300:
                value = math.inf  # 10 ** at overflows: far beyond any data
            else:
                value = 10 ** at if exponent else at
            positive = [v for v in seen if v > 0]
            if log and positive:
                far = not (min(positive) / 10 <= value <= max(positive) * 10)
            else:
                span = (max(seen) - min(seen)) or abs(max(seen)) or 1.0
                far = not (min(seen) - 10 * span <= value <= max(seen) + 10 * span)
            if far:
                label = item.get("text") or item.get("type") or what
                log = f" (a log axis: 10^{at:g})" if exponent else ""
                found.append(f"{what} {label!r} at {letter}={at:g}{log}"
                             f" lies far outside the data ({min(seen):g} to {max(seen):g}) on {axis_name}")
    return found


def _text_of(title) -> str:
    if isinstance(title, dict):
        return str(title.get("text") or "")
    return str(title or "")


def _visible_length(text: str) -> int:
    """Characters a title shows: its longest line (<br> breaks it), tags left out."""
    import re

    lines = re.split(r"<br\s*/?>", text)
    return max((len(re.sub(r"<[^>]+>", "", line)) for line in lines), default=0)


def _text_problems(layout: dict) -> list[str]:
    width = layout.get("width") or DEFAULT_WIDTH
    margin = layout.get("margin") or {}
    plot_width = width - (margin.get("l") or 80) - (margin.get("r") or 80)
    found = []
    title = layout.get("title") or {}
    size = ((title.get("font") or {}).get("size") if isinstance(title, dict) else None) or 17
    text = _text_of(title)
    if text and _visible_length(text) * CHAR_WIDTH * size > width - 20:
        found.append(f"the title ({_visible_length(text)} characters) is wider than the figure ({width} px): "
                     f"{text[:60]!r}...; shorten it or break it with <br>")
    subtitle = _text_of(title.get("subtitle")) if isinstance(title, dict) else ""
    if subtitle and _visible_length(subtitle) * CHAR_WIDTH * 13 > width - 20:
        found.append(f"the subtitle's longest line ({_visible_length(subtitle)} characters) is wider than the figure "
                     f"({width} px): {subtitle[:60]!r}...; break it with <br>")
    height = layout.get("height") or DEFAULT_HEIGHT
    plot_height = height - (margin.get("t") or 100) - (margin.get("b") or 80)
    for name, axis in layout.items():
        if not name.startswith(("xaxis", "yaxis")) or not isinstance(axis, dict):
            continue
        axis_text = _text_of(axis.get("title"))
        room, across = (plot_width, "wider") if name.startswith("x") else (plot_height, "taller")
        if axis_text and _visible_length(axis_text) * CHAR_WIDTH * 14 > room:
            found.append(f"{name}'s title ({_visible_length(axis_text)} characters) is {across} than the plot "
                         f"({room} px): {axis_text[:60]!r}...; break it with <br>")
    return found


def _legend_problems(data, layout) -> list[str]:
    """A legend beside the plot holds LEGEND_MOST entries in a figure's height; more scroll,
    and an entry scrolled away (a model just ticked in the panel) looks like no data.  A
    legend under the plot in rows (orientation "h") grows the figure instead."""
    if layout.get("showlegend") is False:
        return []
    entries = [t.get("name") for t in data if t.get("showlegend", True) is not False and t.get("name")]
    legend = layout.get("legend") or {}
    if len(entries) > LEGEND_MOST and legend.get("orientation") != "h":
        return [f"the legend beside the plot has {len(entries)} entries (more than {LEGEND_MOST} scroll "
                "out of view): put it under the plot in rows, or split the figure"]
    return []


# What a reader may see instead of whiskers: why a figure's or a trace's points have none
NO_INTERVAL_SAYS = ("no interval", "exact")
NOT_MEASURED_SAYS = "failed"


def _uncertainty_problems(data, layout) -> list[str]:
    title = layout.get("title") or {}
    said = " ".join([_text_of(title), _text_of(title.get("subtitle")) if isinstance(title, dict) else ""]
                    + [str(note.get("text") or "") for note in layout.get("annotations", []) or []]).lower()
    if any(words in said for words in NO_INTERVAL_SAYS):
        return []
    found = []
    for trace in data:
        points = trace.get("type") == "bar" or (trace.get("type") in ("scatter", "scattergl")
                                                and "markers" in (trace.get("mode") or "markers"))
        shown = trace.get("visible", True) is True and any(map(math.isfinite, _numbers(trace.get("y"))))
        if not points or not shown:
            continue
        whiskers = any((trace.get(key) or {}).get("visible", True) is not False and
                       ((trace.get(key) or {}).get("array") is not None or (trace.get(key) or {}).get("value"))
                       for key in ("error_y", "error_x"))
        own = f"{trace.get('name') or ''} {trace.get('hovertemplate') or ''}".lower()
        if not whiskers and not any(words in own for words in (*NO_INTERVAL_SAYS, NOT_MEASURED_SAYS)):
            found.append(f"trace {trace.get('name')!r}: measured points without their interval, and nothing says why; "
                         "draw whiskers (error_y), or say 'no interval' (and why) in its hover or the subtitle")
    return found


def _style(trace: dict) -> tuple:
    marker, line = trace.get("marker") or {}, trace.get("line") or {}
    return (trace.get("type"), str(marker.get("color") or line.get("color")), str(marker.get("symbol")),
            str(line.get("dash")), trace.get("mode"))


def _coinciding(data) -> list[str]:
    found = []
    drawn = [t for t in data if t.get("type") in ("scatter", "scattergl") and t.get("visible", True) is True]
    for i, first in enumerate(drawn):
        for second in drawn[i + 1:]:
            x1, y1, x2, y2 = (_numbers(first.get("x")), _numbers(first.get("y")),
                              _numbers(second.get("x")), _numbers(second.get("y")))
            if not y1 or len(y1) != len(y2) or x1 != x2:
                continue
            both = [(a, b) for a, b in zip(y1, y2) if math.isfinite(a) and math.isfinite(b)]
            # two traces with no point drawn in common (all NaN: a theory line past utilisation 1) hide nothing
            if both and all(math.isclose(a, b, rel_tol=0.01) for a, b in both):
                s1, s2 = _style(first), _style(second)
                if s1[2:4] == s2[2:4]:  # same marker shape and dash: one hides the other
                    found.append(f"traces {first.get('name')!r} and {second.get('name')!r} coincide (within 1%) and "
                                 "are drawn alike: give them different marker shapes or dashes, or say so in a note")
    return found
