"""The lab held against a result known in advance: the spin service's points (experiment
service_time) each beside what queueing theory predicts for it (labkit.queue_theory).

    measure_floor(pinning)    SPIN 0 under a light Poisson load: the loop's own CPU time per
                              request and the response time outside the queue (a Floor)
    beside_theory(df, floor)  per point: utilisation, measured and predicted mean and p99
                              response, measured / predicted (shown(table): as a page shows it)
    interference(table)       a sentence where the means sit far above theory: the machine's
                              other work was measured, not the queue
    past_capacity(table)      a sentence where utilisation reaches 1: theory has no steady state
    figure(table)             measured (markers) and predicted (lines) against utilisation

The prediction uses only what was declared (rate, arrivals, service time and its
distribution) and the two quantities the floor measured; what is left between the two is
what the lab adds to a measurement on this machine, its measurement floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from labkit import queue_theory, uncertainty

FLOOR_RATE = 500  # requests/s of SPIN 0: utilisation near 0
SPIN_CLIENTS = 20  # connections of every spin load (spin_load)


@dataclass(frozen=True)
class Floor:
    """What the lab adds to each request of the spin service: `overhead_us`, the server
    loop's own CPU time per request (reading, parsing, replying), and `floor_us`, the mean
    response time spent outside the server's queue (loopback, the generator's loop and
    timer); NaN where not measured, `why` then says why."""

    overhead_us: float
    floor_us: float
    row: dict
    why: str = ""

    @property
    def measured(self) -> bool:
        return math.isfinite(self.overhead_us) and math.isfinite(self.floor_us)


def spin_load(rate: float, duration: float, arrivals: str = "poisson", dist: str = "fixed", spin_us: int = 0,
              seed: int = 1):
    """The load generator's open loop against the spin service, over SPIN_CLIENTS connections,
    its first quarter (at most 0.5 s) left out as warm-up."""
    from labkit.procs import LoadSpec

    options = {"rate": round(rate), "duration": duration, "warmup": f"{min(0.5, duration / 4):g}s",
               "arrivals": arrivals, "spin-dist": dist, "spin-us": spin_us, "seed": seed, "engine": "events"}
    return LoadSpec(SPIN_CLIENTS, 1, "spin", options, timeout=10)


def measure_floor(pinning, model: str = "epoll", duration: float = 3.0) -> Floor:
    """One point of SPIN 0 at FLOOR_RATE through measure.point (the sweeps' pipeline)."""
    from labkit import measure
    from labkit.errors import LabError
    from labkit.procs import ServerSpec

    try:
        row = measure.point(measure.Run(ServerSpec(model, "spin"), spin_load(FLOOR_RATE, duration), pinning))
    except LabError as failure:
        return Floor(math.nan, math.nan, {}, failure.what.splitlines()[0])
    overhead = float(row.get("server_cpu_us_per_request", math.nan))
    mean = float(row.get("lat_mean_us", math.nan))
    why = row.get("error") or ("" if math.isfinite(overhead) else "the server's CPU time was not counted "
                               "(neither perf nor /proc): the loop's own cost is not known")
    return Floor(overhead, mean - overhead, row, why)


COLUMNS = ["model", "arrivals", "spin_dist", "rate", "utilisation", "lat_mean_us", "mean_low_us", "mean_high_us",
           "mean_interval", "predicted_mean_us", "mean_ratio", "lat_p99_us", "p99_low_us", "p99_high_us",
           "p99_interval", "predicted_p99_us", "p99_ratio", "samples"]


def beside_theory(df: pd.DataFrame, floor: Floor) -> pd.DataFrame:
    """Each successful point of `df` (service_time rows), medians over its repeats, beside
    queue_theory.predict for the same rate, arrivals and service time."""
    from labkit.plots.grid import point_interval

    ok = df[df["status"] == "ok"] if "status" in df else df
    rows = []
    for (model, arrivals, dist, spin_us, rate), repeats in ok.groupby(
            ["model", "arrivals", "spin_dist", "spin_us", "rate"], sort=True):
        mean, p99 = repeats["lat_mean_us"].median(), repeats["lat_p99_us"].median()
        low, high, how = point_interval(repeats, "lat_p99_us", pd.to_numeric(repeats["lat_p99_us"]).dropna())
        mean_low, mean_high, mean_how = point_interval(repeats, "lat_mean_us",
                                                       pd.to_numeric(repeats["lat_mean_us"]).dropna())
        predicted = queue_theory.predict(arrivals, dist, rate, spin_us, floor.overhead_us, floor.floor_us)
        # past rho = 1 the queue has no steady state: theory is unbounded (shown as ∞), and a ratio to it
        # would read 0, so there is none
        steady = math.isfinite(predicted.mean_us)
        rows.append({"model": model, "arrivals": arrivals, "spin_dist": dist, "rate": rate,
                     "utilisation": predicted.rho, "lat_mean_us": mean, "mean_low_us": mean_low,
                     "mean_high_us": mean_high, "mean_interval": mean_how, "predicted_mean_us": predicted.mean_us,
                     "mean_ratio": mean / predicted.mean_us if steady else math.nan, "lat_p99_us": p99,
                     "p99_low_us": low, "p99_high_us": high, "p99_interval": how, "predicted_p99_us": predicted.p99_us,
                     "p99_ratio": p99 / predicted.p99_us if steady else math.nan,
                     "samples": repeats["requests_ok"].median()})
    return pd.DataFrame(rows, columns=COLUMNS)


# beside_theory's columns as a table shows them: short headers, so that it fits a laptop's page
SHOWN = {"arrivals": "arrivals", "spin_dist": "service", "utilisation": "ρ", "lat_mean_us": "mean (µs)",
         "predicted_mean_us": "theory", "mean_ratio": "mean ÷ theory", "lat_p99_us": "p99 (µs)",
         "predicted_p99_us": "p99 theory", "p99_ratio": "p99 ÷ theory"}


def shown(table: pd.DataFrame):
    """beside_theory's table as the notebook shows it: SHOWN's columns, numbers readable."""
    from labkit import plots

    part = table[list(SHOWN)].rename(columns=SHOWN)
    numbers = [SHOWN[c] for c in SHOWN if c not in ("arrivals", "spin_dist")]
    return part.style.hide(axis="index").format(plots.readable, subset=numbers)


def figure(table: pd.DataFrame, stat: str = "mean"):
    """Measured (markers) and predicted (a dashed line) `stat` ("mean" or "p99") response
    against utilisation, a colour and a marker shape per arrivals and service time; its
    text alternative in the layout's meta (describe)."""
    import plotly.graph_objects as go

    from labkit.plots.style import SERIES_COLORS, SYMBOLS, TEMPLATE

    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, ((arrivals, dist), part) in enumerate(table.groupby(["arrivals", "spin_dist"], sort=True)):
        part = part.sort_values("utilisation")
        colour, name = SERIES_COLORS[i % len(SERIES_COLORS)], f"{arrivals} arrivals, {dist} service"
        whiskers = dict(type="data", symmetric=False, array=part[f"{stat}_high_us"] - part[f"lat_{stat}_us"],
                        arrayminus=part[f"lat_{stat}_us"] - part[f"{stat}_low_us"], thickness=1.2, width=5)
        fig.add_scatter(x=part["utilisation"], y=part[f"lat_{stat}_us"], mode="markers", legendgroup=name,
                        marker=dict(color=colour, symbol=SYMBOLS[i % len(SYMBOLS)], size=11), error_y=whiskers,
                        name=f"{name}: measured", customdata=part[[f"{stat}_interval"]].to_numpy(),
                        hovertemplate="%{y:,.0f} µs measured<br>whiskers: %{customdata[0]}<extra></extra>")
        theory = part[f"predicted_{stat}_us"].where(part["utilisation"] < 1)  # past 1: no steady state, no line
        fig.add_scatter(x=part["utilisation"], y=theory, mode="lines", legendgroup=name,
                        line=dict(color=colour, dash="dash"), name=f"{name}: theory")
    fig.update_layout(title=dict(text=f"Spin service, {stat} response: measured (marks) and theory (dashed)",
                                 subtitle_text="whiskers: " + uncertainty.kinds_text(table[f"{stat}_interval"])),
                      xaxis_title="utilisation ρ (rate × mean service time)",
                      yaxis_title=f"{stat} response (µs)", legend_title_text="")
    fig.layout.meta = {"alt": describe(table, stat)}
    return fig


# A measured mean this many times theory's (the floor included) is not the queue: the machine
# interfered.  Quiet, on 2 cores: every mean within 11% (bench/README.md); with a nice-19
# spinner on every CPU, 5.1 to 5.3 times at 5,000/s (EEVDF let the spinner finish its slice).
INTERFERENCE_RATIO = 2.0


def interference(table: pd.DataFrame) -> str:
    """A sentence when beside_theory's measured means sit far above theory (INTERFERENCE_RATIO),
    else "": what was measured there is the machine's other work, not the queue."""
    worst = pd.to_numeric(table["mean_ratio"], errors="coerce").max() if len(table) else float("nan")
    if not worst >= INTERFERENCE_RATIO:
        return ""
    return (f"Your measured means sit up to {worst:.1f}× above theory, this machine's own floor included: "
            "something else ran on these CPUs while the sweep measured (another program, a busy neighbour on a "
            "shared host), and its delays, not the queue, are what you see. Close what else runs, or measure "
            "again on a quieter machine, before you compare even and Poisson arrivals.")


def past_capacity(table: pd.DataFrame) -> str:
    """A sentence when a point of beside_theory's table reaches utilisation 1, else "": theory
    has no mean there to hold the measurement against (it reads ∞, with no ratio)."""
    over = table[pd.to_numeric(table["utilisation"], errors="coerce") >= 1]
    if not len(over):
        return ""
    rates = " and ".join(f"{rate:,.0f}/s" for rate in sorted(set(over["rate"])))
    return (f"At {rates} the loop's measured cost and the declared service time add up to utilisation "
            f"{over['utilisation'].max():.2f}: at 1 or more a queue has no steady state, so theory reads ∞ there, "
            "with no ratio, and says nothing of even against Poisson arrivals. The loop's cost was measured above; "
            "measured again on a quiet machine it may come out lower (the same loop takes longer on a busy one), "
            "and the point back under 1.")


def describe(table: pd.DataFrame, stat: str = "mean") -> str:
    """The figure in words: each point's measured `stat` beside the predicted one."""
    def sure(r) -> str:  # the interval the figure draws, where it has one
        low, high, how = (getattr(r, f"{stat}_{part}") for part in ("low_us", "high_us", "interval"))
        return f" ({low:,.0f} to {high:,.0f}: {how})" if low < high else ""

    def predicted(r) -> str:
        value = getattr(r, f"predicted_{stat}_us")
        return f"{value:,.0f} µs predicted" if math.isfinite(value) else "no steady state predicted (utilisation ≥ 1)"

    parts = [f"{r.arrivals} arrivals, {r.spin_dist} service, utilisation {r.utilisation:.2f}: "
             f"{getattr(r, f'lat_{stat}_us'):,.0f} µs measured{sure(r)}, {predicted(r)}" for r in table.itertuples()]
    return f"{stat} response time against utilisation. " + "; ".join(parts) + "."
