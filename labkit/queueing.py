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

import pandas as pd

KNEE_SHORTFALL = 0.05  # completions more than 5% short of the offer: the server no longer keeps up
BINS_PER_DECADE = 10   # connect times are drawn in bins a tenth of a decade wide (1.00 to 1.26 s, ...)


def _medians(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    ok = df[df["status"] == "ok"] if "status" in df else df
    keys = ["model", "rate"]
    return ok.groupby(keys, sort=True)[columns].median().reset_index()


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

    fig = plots.latency_vs(df, x="rate", percentiles=percentiles, x_title="offered rate (requests/s)")
    found = knees(df).dropna(subset=["knee_rps"])
    for rate, same in found.groupby("knee_rps", sort=True):  # models with the same knee share one label
        models = list(same["model"])
        _mark_on_log_x(fig, rate, f"knee: {', '.join(models)}", plots.color(models[0]) if len(models) == 1 else "#555")
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_layout(title="request latency vs offered rate (dotted: each model's knee)")
    return fig


def syn_retry_times(linear_timeouts: float | None, retries: int = 4) -> list[float]:
    """When a client whose SYN is dropped each time sends it again, in seconds after its
    connect() (the first `retries` times): the initial retransmission timeout is 1 s
    (TCP_TIMEOUT_INIT, RFC 6298).  Kernels with net.ipv4.tcp_syn_linear_timeouts = n keep
    the first n + 1 timeouts at 1 s before doubling them; elsewhere (NaN or None: no such
    file) each timeout doubles the last: 1, 3, 7, 15 s."""
    linear = 0 if linear_timeouts is None or linear_timeouts != linear_timeouts else int(linear_timeouts) + 1
    times, at, rto = [], 0.0, 1.0
    for number in range(retries):
        at += rto
        times.append(at)
        if number + 1 >= linear:
            rto *= 2
    return times


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
                      title_subtitle_text=f"dotted: when this kernel sends a dropped SYN again ({schedule})")
    if not fig.data:
        plots.style.annotate(fig, "connect times: nothing measured (every point failed)")
    return fig


def _mark_on_log_x(fig, x: float, text: str, color: str) -> None:
    """A dotted vertical line at x on a log x axis, labelled at its top.  plotly places the
    line (a shape) in data units and its label (an annotation) in log units on a log axis
    (plotly.js#6194), so add_vline's own label would sit at 10^x."""
    fig.add_shape(type="line", x0=x, x1=x, yref="paper", y0=0, y1=1, line=dict(color=color, dash="dot", width=1.5))
    fig.add_annotation(x=math.log10(x), yref="paper", y=1, yanchor="bottom", xanchor="left", text=text,
                       showarrow=False, font=dict(size=11, color=color))
