"""Latency against offered load (experiment 6): where each model's knee is, and
Little's law checked on the student's own rows.

    knees(df)            one row per model: its knee (the first offered rate whose
                         completions fell more than KNEE_SHORTFALL short of the offer),
                         the last rate it kept up with, its best completed rate
    littles_law(df)      per point: requests in flight as the load generator sampled
                         them every 10 ms, against completed rate x mean latency
    latency_vs_offered(df)  p50, p99 and p99.9 against the offered rate, a line per
                         model, its knee marked

Little's law (L = lambda W): the mean number of requests in a system equals the rate
they pass through times the mean time each spends there.  It holds in a steady state,
whatever is inside the system, and also over any stretch of time that starts and ends
with the system empty.  The load generator measures both sides separately: L by sampling
its own count of requests due and not yet answered, W from each request's due time to
its reply.  Past the knee there is no steady state, but each run drains before it ends
(and what the warm-up left queued is small), so the two still agree closely; what
changes is that both grow with how long the offer lasts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from labkit.row import point_medians

KNEE_SHORTFALL = 0.05  # completions more than 5% short of the offer: the server no longer keeps up
BINS_PER_DECADE = 10   # connect times are drawn in bins a tenth of a decade wide (1.00 to 1.26 s, ...)


def _medians(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    return point_medians(df, ["model", "rate"], columns).reset_index()


def knees(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: `knee_rps`, the first offered rate it fell behind (NaN: it kept up with every
    rate offered), `kept_up_rps`, the highest rate below that, and `best_completed_rps`."""
    table = _medians(df, ["completed_rps"])
    rows = []
    for model, line in table.groupby("model", sort=False):
        behind = line[line["completed_rps"] < (1 - KNEE_SHORTFALL) * line["rate"]]
        knee = float(behind["rate"].min()) if len(behind) else math.nan
        kept = line[line["rate"] < knee] if not math.isnan(knee) else line
        rows.append({"model": model, "knee_rps": knee,
                     "kept_up_rps": float(kept["rate"].max()) if len(kept) else math.nan,
                     "best_completed_rps": float(line["completed_rps"].max())})
    return pd.DataFrame(rows, columns=["model", "knee_rps", "kept_up_rps", "best_completed_rps"])


def littles_law(df: pd.DataFrame) -> pd.DataFrame:
    """Per model and offered rate: `inflight_sampled` (the load generator's samples) beside
    `rate_x_latency` (completed rate x mean latency), their ratio, and whether the point
    was past the model's knee."""
    table = _medians(df, ["completed_rps", "lat_mean_us", "inflight_mean"])
    table["rate_x_latency"] = table["completed_rps"] * table["lat_mean_us"] / 1e6
    table = table.rename(columns={"inflight_mean": "inflight_sampled"})
    table["ratio"] = table["inflight_sampled"] / table["rate_x_latency"]
    knee = knees(df).set_index("model")["knee_rps"]
    table["past_knee"] = [rate >= knee.get(model, math.inf) for model, rate in zip(table["model"], table["rate"])]
    return table[["model", "rate", "completed_rps", "lat_mean_us", "inflight_sampled", "rate_x_latency", "ratio",
                  "past_knee"]]


def latency_vs_offered(df: pd.DataFrame, percentiles=("p50", "p99", "p999")):
    """Latency percentiles against the offered rate, a colour per model, a dash per
    percentile, and a dotted vertical line at each model's knee."""
    from . import plots

    fig = plots.latency_vs(df, x="rate", percentiles=percentiles, x_title="offered rate (requests/s)", log_y=True)
    found = knees(df).dropna(subset=["knee_rps"])
    for rate, same in found.groupby("knee_rps", sort=True):  # models with the same knee share one label
        models = list(same["model"])
        _mark_on_log_x(fig, rate, f"knee: {', '.join(models)}", plots.color(models[0]) if len(models) == 1 else "#555")
    fig.update_xaxes(type="log")
    fig.update_layout(title_text="request latency vs offered rate (dotted: each model's knee)")
    return fig


TCP_TIMEOUT_INIT_S = 1.0  # include/net/tcp.h: a SYN's first retransmission timeout (RFC 6298)
TCP_RTO_MAX_S = 120.0     # include/net/tcp.h: no retransmission timeout grows past it
TCP_SYN_RETRIES = 6       # include/net/tcp.h: net.ipv4.tcp_syn_retries by default


@dataclass(frozen=True)
class SynSchedule:
    """When a client whose SYN is never answered sends it again, and when it gives up."""

    linear_timeouts: int | None  # net.ipv4.tcp_syn_linear_timeouts; None: no such setting (before Linux 6.5)
    syn_retries: int             # net.ipv4.tcp_syn_retries
    retransmits: tuple[float, ...]  # seconds after connect() at which the SYN is sent again
    give_up_s: float             # seconds after connect() at which connect() fails with ETIMEDOUT

    def describe(self) -> str:
        """The schedule in words, for a reader: the first resends, how many, and the end."""
        shown = ", ".join(f"{t:g}" for t in self.retransmits[:7]) + (" ..." if len(self.retransmits) > 7 else "")
        if self.linear_timeouts is None:
            setting = ("this kernel has no net.ipv4.tcp_syn_linear_timeouts (Linux 6.5 added it), "
                       "so every timeout doubles")
        else:
            setting = f"net.ipv4.tcp_syn_linear_timeouts = {self.linear_timeouts}, a Linux 6.5 setting"
        return (f"the SYN is sent again at {shown} s after connect(), {len(self.retransmits)} times in all, "
                f"and connect() fails with ETIMEDOUT after about {self.give_up_s:g} s "
                f"(net.ipv4.tcp_syn_retries = {self.syn_retries}; {setting})")


def syn_schedule(linear_timeouts: float | None, syn_retries: float | None = None) -> SynSchedule:
    """The one place labkit computes how Linux retransmits an unanswered SYN (notebook 03's
    "connection timed out" and notebook 06's accept queue both use it), as
    net/ipv4/tcp_timer.c does it:

    * the first timeout is TCP_TIMEOUT_INIT, 1 s; tcp_retransmit_timer() doubles it after
      each retransmission (up to TCP_RTO_MAX, 120 s), except that since Linux 6.5 (commit
      ccce324dabfe) a socket in SYN_SENT keeps it at 1 s while it has retransmitted at most
      net.ipv4.tcp_syn_linear_timeouts = n times (default 4): the first n + 1 timeouts are 1 s;
    * tcp_write_timeout(), run each time the timer fires, gives up once the SYN was
      retransmitted tcp_syn_retries times (since 6.5: tcp_syn_retries + n times), or once
      the time since the first SYN reaches the time tcp_syn_retries doubling timeouts would
      take (retransmits_timed_out(), tcp_model_timeout()), whichever comes first.

    Defaults 6 and 4: resends at 1, 2, 3, 4, 5, 7, 11, 19, 35, 67 s and ETIMEDOUT at 131 s;
    without the setting (None or NaN), 1, 3, 7, 15, 31, 63 s and ETIMEDOUT at 127 s (the
    figures of Documentation/networking/ip-sysctl.rst).  A socket's TCP_SYNCNT or
    TCP_USER_TIMEOUT changes them; the lab sets neither."""
    linear = None if linear_timeouts is None or linear_timeouts != linear_timeouts else int(linear_timeouts)
    retries = TCP_SYN_RETRIES if syn_retries is None or syn_retries != syn_retries else int(syn_retries)
    most = retries + (linear or 0)  # tcp_write_timeout(): max_retransmits in SYN_SENT
    # tcp_model_timeout(retries, rto_base = 1 s): doubling timeouts up to TCP_RTO_MAX, then TCP_RTO_MAX each
    doubling = int(math.log2(TCP_RTO_MAX_S / TCP_TIMEOUT_INIT_S))
    steps = min(retries, doubling)
    model = ((2 << steps) - 1) * TCP_TIMEOUT_INIT_S + (retries - steps) * TCP_RTO_MAX_S
    times: list[float] = []
    at, rto = 0.0, TCP_TIMEOUT_INIT_S
    while True:
        at += rto  # the retransmission timer fires
        if len(times) >= most or (times and at >= model):
            return SynSchedule(linear, retries, tuple(times), at)
        times.append(at)
        if linear is None or len(times) > linear:  # tcp_retransmit_timer(): back off, or stay linear
            rto = min(2 * rto, TCP_RTO_MAX_S)


def syn_retry_times(linear_timeouts: float | None, retries: int = 4) -> list[float]:
    """The first `retries` times (seconds after connect()) at which a client whose SYN is
    dropped each time sends it again: syn_schedule()'s, with this kernel's
    net.ipv4.tcp_syn_linear_timeouts (NaN or None: no such setting, before Linux 6.5).
    With n = 4: 1, 2, 3, 4, 5, 7, 11 s; without: 1, 3, 7, 15 s."""
    return list(syn_schedule(linear_timeouts).retransmits[:retries])


def connect_times(df: pd.DataFrame, by=("model", "backlog")):
    """How long the connects took (the load generator's connect_histogram, summed over a
    point's repeats), a line per `by` value, with the times at which this kernel sends a
    dropped SYN again (syn_retry_times) marked."""
    import plotly.graph_objects as go

    from . import plots

    by = [column for column in by if column in df.columns]
    fig = go.Figure()
    for values, point in df.groupby(by, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        counts: dict[int, int] = {}  # connects per bin of 1/BINS_PER_DECADE decade, by the bin's number
        for buckets in point["connect_histogram"]:
            for lower, upper, count in buckets or []:
                at = math.floor(math.log10((lower * upper) ** 0.5 / 1e6) * BINS_PER_DECADE)
                counts[at] = counts.get(at, 0) + count
        if not counts:
            continue
        bins = range(min(counts), max(counts) + 1)  # empty bins too: a gap reads as none, not as a slope
        model = values[by.index("model")] if "model" in by else None
        name = ", ".join(f"{column} {value}" if column != "model" else str(value) for column, value in zip(by, values))
        fig.add_trace(go.Scatter(
            x=[10 ** ((b + 0.5) / BINS_PER_DECADE) for b in bins], y=[counts.get(b, 0) for b in bins],
            mode="lines+markers", name=name, line=dict(color=plots.color(model) if model else None,
                                                        dash="solid" if len(fig.data) % 2 == 0 else "dash"),
            hovertemplate=f"<b>{name}</b><br>%{{y}} connects took about %{{x:.3g}} s<extra></extra>"))
    linear = df["syn_linear_timeouts"].dropna() if "syn_linear_timeouts" in df else pd.Series(dtype=float)
    retries = syn_retry_times(linear.iloc[0] if len(linear) else None)
    for seconds in retries:
        fig.add_shape(type="line", x0=seconds, x1=seconds, yref="paper", y0=0, y1=1,
                      line=dict(color="#888", dash="dot", width=1.5))
    fig.update_xaxes(type="log", title="connect time (s), from connect() to established")
    fig.update_yaxes(title="connections")
    schedule = ", ".join(f"{t:g} s" for t in retries)
    fig.update_layout(template=plots.TEMPLATE, title="how long each connect took",
                      title_subtitle_text=f"exact counts: every connect of the points' runs<br>"
                                          f"dotted: when this kernel sends a dropped SYN again ({schedule})")
    if not fig.data:
        plots.style.annotate(fig, plots.style.wrap(plots.grid.nothing_measured(df, "connect times"), 95))
    return fig


def _mark_on_log_x(fig, x: float, text: str, color: str) -> None:
    """A dotted vertical line at x on a log x axis, labelled inside the plot at its top, left
    of the line (above the plot it ran into the notes under the title).  plotly places the
    line (a shape) in data units and its label (an annotation) in log units on a log axis
    (plotly.js#6194), so add_vline's own label would sit at 10^x."""
    fig.add_shape(type="line", x0=x, x1=x, yref="paper", y0=0, y1=1, line=dict(color=color, dash="dot", width=1.5))
    fig.add_annotation(x=math.log10(x), yref="paper", y=1, yanchor="top", xanchor="right", text=text,
                       showarrow=False, font=dict(size=11, color=color), bgcolor="rgba(255,255,255,0.85)")
