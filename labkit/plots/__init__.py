"""Plotly figures and counter tables for sweep results: what the notebooks and the control
panel draw.

Every function takes the DataFrame that labkit.sweep returns (one row per measured point
and repeat) and shows medians over repeats with their intervals (labkit.uncertainty), grouped by model and
by the grid's axes (the experiment the frame declares in df.attrs["experiment"] says which;
any column can be the x axis).  Two rules run through all of it:
  * a failed point is drawn (a cross, the reason in its hover), never dropped;
  * a counter that could not be measured is NaN and is said to be missing,
    never drawn or printed as 0.
Each model keeps one colour in every figure (MODEL_COLORS).

  style.py    colours, the template, readable numbers and column titles, wrapping, titles
  grid.py     what a frame says about its grid: axes, their titles and values, medians per point
  figures.py  the charts: metric_vs, metric_by_point, latency_vs, latency_percentiles,
              latency_histogram, reference_line
  marks.py    how a point is marked in every figure of it: checked_marks (hollow: a self-check
              failed; grey too: the generator saturated), a point never run "not measurable"
  tables.py   counters_table, style_counters, failed_points, unmeasured_points, counters_note,
              saturation_warning
  alt_text.py every figure also as text and a table (describe_figures: for a screen reader)

Your numbers beside the seed reports' are labkit.seeds's; a link's namespaces drawn,
labkit.netlink.topology; ev_bench's cost per poll call, labkit.bench.event_cost.
"""

from .alt_text import describe_figures
from .figures import (latency_histogram, latency_percentiles, latency_vs, metric_by_point, metric_vs, reference_line,
                      spans_decades)
from .grid import (axes_of, axis_title, setting, shared_cpus_note, summarize, value_text, waits_for_exercise,
                   why_missing)
from .marks import checked_marks
from .style import (FAILED_COLOR, LEGEND_BESIDE_MOST, MODEL_COLORS, SATURATED_GREY, SYMBOLS, TEMPLATE,
                    Y_TITLE_MOST, color, label, readable)
from .tables import (COUNTER_EVENTS, counters_note, counters_table, failed_points, saturation_warning,
                     style_counters, unmeasured_points)

__all__ = [
    "COUNTER_EVENTS", "FAILED_COLOR", "LEGEND_BESIDE_MOST", "MODEL_COLORS", "SATURATED_GREY", "SYMBOLS",
    "TEMPLATE", "Y_TITLE_MOST", "axes_of", "axis_title", "checked_marks", "color", "counters_note", "counters_table",
    "describe_figures",
    "failed_points", "label", "latency_histogram", "latency_percentiles", "latency_vs", "metric_by_point",
    "metric_vs", "readable", "reference_line", "saturation_warning", "setting", "spans_decades",
    "shared_cpus_note", "style_counters", "summarize", "unmeasured_points", "value_text", "waits_for_exercise",
    "why_missing",
]
