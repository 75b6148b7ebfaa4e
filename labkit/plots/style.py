"""How every lab figure looks: one colour per model, the template, readable numbers and
column titles, and the finishing touches that keep a chart legible (titles wrapped, long
legends under the plot).  Written once so that a model, a column or a note reads the same
in every figure and table."""

from __future__ import annotations

import math
import textwrap

import pandas as pd
import plotly.graph_objects as go

from labkit.perf.parse import NOT_MEASURABLE

# One colour per model, everywhere: Okabe-Ito's hues first (told apart by colour-blind
# readers), then Paul Tol's and matplotlib's; the light ones darkened until each mark stands at
# least 3:1 against the white plot (WCAG 2.1 1.4.11; Okabe-Ito's yellow was 1.3:1, its orange
# 2.3:1, its sky blue 2.3:1).  Darkened, the yellow (select_fork) went olive, like aio's
# tab10 olive, so aio took tab10's brown; pool is threadpool's other name.  A model is also
# told by its marker, dash or pattern; tests/notebooks/test_plots.py checks each ratio.
MODEL_COLORS = {
    "iterative": "#C28600",
    "threaded": "#0072B2",
    "select": "#009E73",
    "poll": "#CC79A7",
    "epoll": "#D55E00",
    "threadpool": "#1D99E0",
    "prefork": "#7F7F7F",
    "select_fork": "#9E940D",
    "epoll_et": "#882255",
    "epoll_workers": "#AA4499",
    "epoll_reuseport": "#117733",
    "pool": "#1D99E0",
    "fork": "#332288",
    "uring": "#40A191",
    "busypoll": "#000000",
    "aio": "#8C564B",
}
_SPARE_COLORS = ["#13A1AF", "#9467BD", "#7F7F00", "#5D4037"]
# A model's lines differ by dash when another axis (a size, say) varies.
DASHES = ["solid", "dot", "dash", "dashdot", "longdash", "longdashdot"]
# One model's lines, when only the other axes vary, take a colour each (the same hues, told
# apart by colour-blind readers too): six dashes of one colour were hard to tell apart.
SERIES_COLORS = ["#0072B2", "#C28600", "#009E73", "#CC79A7", "#1D99E0", "#D55E00", "#000000", "#9E940D"]
# Least contrast of a mark against the white plot: WCAG 2.1 1.4.11, non-text contrast.
MARK_CONTRAST = 3.0
# A legend of more entries than this goes under the plot, in columns: in its column at the
# right it scrolled, and a model just ticked in the panel was out of view.
LEGEND_BESIDE_MOST = 7
# A y title of more characters than this is broken into lines: at 13 px it is about as tall
# as a 450 px figure's plot area.
Y_TITLE_MOST = 30
FAILED_COLOR = "#C00000"
# Marks that tell traces apart where colour alone would not (coinciding lines, log-axis dots).
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "triangle-down", "star", "hexagon")
# ... and a bar's fill pattern per model, for the same reason (the legend shows it too)
PATTERNS = ("", "/", ".", "x", "\\", "+", "-", "|")
SATURATED_GREY = "#919191"  # 3.1:1 on white; a saturated point is drawn open as well (figures.checked_marks)
UNMEASURED_GREY = "#595959"  # 7:1 on white: a point never run (not measurable), its mark and its word

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
EVENT_LABELS = {
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
    "lat_mean_us": "latency mean (µs)",
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
    # what breaks first (experiment 6): labkit.row says how each is measured
    "served_fraction": "share of the planned requests answered",
    "completed_rps": "requests completed per second",
    "inflight_mean": "requests in flight, mean",
    "connect_p50_us": "connect time p50 (µs)",
    "connect_p99_us": "connect time p99 (µs)",
    "connects_over_1s": "connects that took over 1 s",
    "bad_closed_by_server": "misbehaving connections the server closed",
    "server_shed_idle": "connections the server shed as idle",
    "futile_accepts_per_connection": "futile accepts per connection",
    "wakeups_per_connection": "listener wake-ups per connection",
    "busiest_worker_share": "busiest worker's share of the connections",
    "tcp_listenoverflows": "accept queue overflows (TcpExtListenOverflows)",
    "accept_queue_max": "accept queue, most seen (connections)",
    "server_rss_kib_per_connection": "server memory per connection (KiB, RSS)",
    "kernel_kib_per_connection": "kernel memory per connection (KiB)",
    "kernel_slab_kib_per_connection": "kernel slab per connection (KiB)",
    "kernel_kernelstack_kib_per_connection": "kernel stacks per connection (KiB)",
    "kernel_pagetables_kib_per_connection": "page tables per connection (KiB)",
    "tcp_retrans_segs": "TCP segments retransmitted",
    "client_autocorked": "client writes held back by autocorking (TcpExtTCPAutoCorking)",
}


def color(model: str) -> str:
    """The colour `model` has in every figure."""
    if model in MODEL_COLORS:
        return MODEL_COLORS[model]
    return _SPARE_COLORS[sum(map(ord, model)) % len(_SPARE_COLORS)]


def readable(value: float) -> str:
    """A number as a person reads it: 20,160 and 0.0083, never 2.016e+04; integers as
    integers, "—" for none, ∞ for an unbounded one such as a queue's mean past ρ = 1
    (`table.style.format(plots.readable)`); words in a table ("not enough") as they are."""
    if isinstance(value, str):
        return value
    if pd.isna(value):
        return "—"
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
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
            return f"{side} {EVENT_LABELS.get(event, event)}"
    return column


EVERY_POINT_FAILED = "every point failed"  # grid.why_missing: the machine is not the reason ...
NO_VALUE = "no point that was measured has a value"  # ... nor here: it is no perf counter
WAITING = "not measurable until exercise"  # ... nor here: the lab's stub (labkit.exercises.Waiting)


def not_measurable(why: str, separator: str = " ") -> str:
    """'not measurable on this machine: <why>', without saying it twice when the recorded
    note already starts with it, nor at all when the points failed (their errors say why)."""
    if why.startswith((NOT_MEASURABLE, EVERY_POINT_FAILED, NO_VALUE, WAITING)):
        return why
    return f"{NOT_MEASURABLE}:{separator}{why}"


def finish(fig: go.Figure) -> None:
    """What a chart needs once its traces are in: a y title no taller than the plot (plotly
    neither wraps nor shrinks it: a long one ran over the x tick labels), and a legend of
    more than LEGEND_BESIDE_MOST entries under the plot, three to a row, the figure grown to
    hold it: every entry in view, none scrolled away."""
    for axis in (fig.layout.yaxis, *(getattr(fig.layout, f"yaxis{i}", None) for i in range(2, 5))):
        if axis is not None and axis.title.text and "<br>" not in axis.title.text:
            axis.title.text = wrap(axis.title.text, Y_TITLE_MOST)
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


def set_title(fig: go.Figure, main: str, settings: list[str]) -> None:
    """A figure's title, and under it, smaller, the settings every point shares (a title is
    not wrapped by plotly: with them on its line it ran off both sides of the figure)."""
    subtitle = wrap(", ".join(settings), 95) if settings else ""
    fig.update_layout(title=dict(text=main, subtitle=dict(text=subtitle)))
    if subtitle:  # room for it above the plot: a line of 18 px each
        room_above(fig, 70 + 18 * subtitle.count("<br>"))


def room_above(fig: go.Figure, margin_t: int) -> None:
    """Set the room above the plot (its title and subtitle) to `margin_t` px and grow or
    shrink the figure by as much: the plot keeps its height, however many lines of notes are
    over it (eight lines of them once squeezed 06's latency chart to a strip, and its legend
    of six entries scrolled)."""
    before = fig.layout.margin.t if fig.layout.margin.t is not None else 70
    fig.update_layout(margin_t=margin_t, height=(fig.layout.height or 450) + margin_t - before)


def wrap(text: str, width: int) -> str:
    """Plotly does not wrap annotation text: break it into <br>-separated lines."""
    return "<br>".join(line for part in text.split("<br>")
                       for line in textwrap.wrap(part, width, break_on_hyphens=False))


def escape(text: str) -> str:
    """perf's "<not supported>" would be read as an HTML tag by plotly."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def annotate(fig: go.Figure, text: str, y: float = 0.5, size: int = 14) -> None:
    """A note in a box across the figure, at height `y` of it (what is missing, and why)."""
    fig.add_annotation(text=wrap(text, 70), xref="paper", yref="paper", x=0.5, y=y, showarrow=False,
                       font=dict(size=size), bgcolor="#FFF4E5", bordercolor="#E69F00", borderpad=6)
