"""The lab held against a result known in advance: the spin service's points (experiment
service_time) each beside what queueing theory predicts for it (labkit.queue_theory).

    measure_floor(pinning)    SPIN 0 under a light Poisson load: the loop's own CPU time per
                              request and the response time outside the queue (a Floor)
    beside_theory(df, floor)  per point: utilisation, measured and predicted mean and p99
                              response, measured / predicted, the self-checks its runs failed,
                              the loop's cost there (shown(table): as a page shows it)
    departures(table)         the sentences below, those that apply:
    interference(table)       a sentence where the means sit far above theory: the machine's
                              other work was measured, not the queue
    below_theory(table)       a sentence where a mean sits well below theory: the prediction's
                              loop cost, measured at a light load, against the loop's cost there
    past_capacity(table)      a sentence where utilisation reaches 1: theory has no steady state
    figure(table)             measured (markers) and predicted (lines) against utilisation, each
                              mark hollow by the rule of every lab figure (plots.checked_marks)

The prediction uses only what was declared (rate, arrivals, service time and its
distribution) and the two quantities the floor measured; what is left between the two is
what the lab adds to a measurement on this machine, its measurement floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from labkit import queue_theory, uncertainty
from labkit.row import ok_rows

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

    def outside_us(self, n: int, seed: int = 1):
        """`n` draws (a numpy array, µs) of the time a response spends outside the queue:
        the SPIN 0 run's responses, drawn from its histogram (a bucket by its count, a value
        evenly within it), less the loop's own cost.  Their mean is floor_us (up to the
        draws' and the buckets' width); their spread is the floor's own, which a percentile
        of a response needs and its mean does not.  Empty when the floor has no histogram."""
        import numpy as np

        buckets = self.row.get("lat_histogram") or []
        counts = np.array([count for _, count in buckets], dtype=float)
        if not n or not counts.sum() or not self.measured:
            return np.zeros(0)
        upper = np.array([upper for upper, _ in buckets], dtype=float)
        rng = np.random.default_rng(seed)
        which = rng.choice(len(buckets), size=n, p=counts / counts.sum())
        lower = upper / (1 + uncertainty.BUCKET_WIDTH)
        return lower[which] + rng.random(n) * (upper[which] - lower[which]) - self.overhead_us


def spin_load(rate: float, duration: float, arrivals: str = "poisson", dist: str = "fixed", spin_us: int = 0,
              seed: int = 1):
    """The load generator's open loop against the spin service, over SPIN_CLIENTS connections,
    its first quarter (at most 0.5 s) left out as warm-up."""
    from labkit.procs import LoadSpec

    options = {"rate": round(rate), "duration": duration, "warmup": f"{min(0.5, duration / 4):g}s",
               "arrivals": arrivals, "spin-dist": dist, "spin-us": spin_us, "seed": seed, "engine": "events"}
    return LoadSpec(SPIN_CLIENTS, 1, "spin", options, timeout=10)


def measure_floor(pinning, model: str = "epoll", duration: float = 3.0, seed: int = 1) -> Floor:
    """One point of SPIN 0 at FLOOR_RATE through measure.point (the sweeps' pipeline), the
    load generator's schedule drawn from `seed`."""
    from labkit import measure
    from labkit.errors import LabError
    from labkit.procs import ServerSpec

    try:
        row = measure.point(measure.Run(ServerSpec(model, "spin"), spin_load(FLOOR_RATE, duration, seed=seed), pinning))
    except LabError as failure:
        return Floor(math.nan, math.nan, {}, failure.what.splitlines()[0])
    overhead = float(row.get("server_cpu_us_per_request", math.nan))
    mean = float(row.get("lat_mean_us", math.nan))
    why = row.get("error") or ("" if math.isfinite(overhead) else "the server's CPU time was not counted "
                               "(neither perf nor /proc): the loop's own cost is not known")
    return Floor(overhead, mean - overhead, row, why)


COLUMNS = ["model", "arrivals", "spin_dist", "rate", "utilisation", "lat_mean_us", "mean_low_us", "mean_high_us",
           "mean_interval", "predicted_mean_us", "mean_ratio", "lat_p99_us", "p99_low_us", "p99_high_us",
           "p99_interval", "predicted_p99_us", "p99_ratio", "samples", "mean_flags", "mean_checks", "p99_flags",
           "p99_checks", "saturated", "loop_us", "floor_loop_us"]


def beside_theory(df: pd.DataFrame, floor: Floor) -> pd.DataFrame:
    """Each successful point of `df` (service_time rows), medians over its repeats, beside
    queue_theory.predict for the same rate, arrivals and service time; with the self-checks its
    runs failed for the mean and for p99 (`*_flags`, their titles `*_checks`: plots.grid, as the
    panel's figure of the same points has them), whether the generator saturated, and the loop's
    own cost per request there (`loop_us`: the server's CPU time per request less the declared
    mean spin; NaN where not counted) beside the one the prediction took (`floor_loop_us`).
    attrs["shared"]: plots.grid.shared_cpus_note of the runs."""
    from labkit.plots.grid import point_interval, self_check_flags, self_check_titles, shared_cpus_note

    ok = ok_rows(df)
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
                     "samples": repeats["requests_ok"].median(),
                     "mean_flags": self_check_flags(repeats, "lat_mean_us"),
                     "mean_checks": ", ".join(self_check_titles(repeats, "lat_mean_us")),
                     "p99_flags": self_check_flags(repeats, "lat_p99_us"),
                     "p99_checks": ", ".join(self_check_titles(repeats, "lat_p99_us")),
                     "saturated": bool(repeats["client_saturated"].fillna(False).astype(bool).any())
                     if "client_saturated" in repeats else False,
                     "loop_us": _median(repeats, "server_cpu_us_per_request") - spin_us,
                     "floor_loop_us": floor.overhead_us})
    table = pd.DataFrame(rows, columns=COLUMNS)
    table.attrs["shared"] = shared_cpus_note(ok)
    return table


def _median(rows: pd.DataFrame, column: str) -> float:
    values = pd.to_numeric(rows[column], errors="coerce").dropna() if column in rows else pd.Series(dtype=float)
    return float(values.median()) if len(values) else math.nan


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


THEORY_DASHES = ("dash", "longdash", "dashdot", "longdashdot")  # every one a dashed line, each its own


def figure(table: pd.DataFrame, stat: str = "mean"):
    """Measured (markers) and predicted (a dashed line) `stat` ("mean" or "p99") response
    against utilisation, a colour, a marker shape and a dash pattern per arrivals and service
    time (two theories can coincide: a floor far above the queue's part hides their difference);
    its text alternative in the layout's meta (describe)."""
    import plotly.graph_objects as go

    from labkit.plots.figures import SATURATED_NOTE, _add_notes, whiskers_note
    from labkit.plots.marks import checked_marks
    from labkit.plots.style import SERIES_COLORS, SYMBOLS, TEMPLATE

    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, ((arrivals, dist), part) in enumerate(table.groupby(["arrivals", "spin_dist"], sort=True)):
        part = part.sort_values("utilisation")
        colour, name = SERIES_COLORS[i % len(SERIES_COLORS)], f"{arrivals} arrivals, {dist} service"
        whiskers = dict(type="data", symmetric=False, array=part[f"{stat}_high_us"] - part[f"lat_{stat}_us"],
                        arrayminus=part[f"lat_{stat}_us"] - part[f"{stat}_low_us"], thickness=1.2, width=5)
        marks = checked_marks(list(part["saturated"]), [bool(f) for f in part[f"{stat}_flags"]],
                              SYMBOLS[i % len(SYMBOLS)], colour, size=11)
        fig.add_scatter(x=part["utilisation"], y=part[f"lat_{stat}_us"], mode="markers", legendgroup=name,
                        marker=marks, error_y=whiskers, name=f"{name}: measured",
                        meta={"interval": list(part[f"{stat}_interval"]), "verdicts": list(part[f"{stat}_flags"])},
                        customdata=part[[f"{stat}_interval", f"{stat}_flags"]].to_numpy(),
                        hovertemplate="%{y:,.0f} µs measured<br>whiskers: %{customdata[0]}<br>%{customdata[1]}"
                                      "<extra></extra>")
        theory = part[f"predicted_{stat}_us"].where(part["utilisation"] < 1)  # past 1: no steady state, no line
        fig.add_scatter(x=part["utilisation"], y=theory, mode="lines", legendgroup=name,
                        line=dict(color=colour, dash=THEORY_DASHES[i % len(THEORY_DASHES)]), name=f"{name}: theory")
    fig.update_layout(title=dict(text=f"Spin service, {stat} response: measured (marks) and theory (dashed)"),
                      xaxis_title="utilisation ρ (rate × mean service time)",
                      yaxis_title=f"{stat} response (µs)", legend_title_text="")
    flagged = table[table[f"{stat}_flags"] != ""]
    checks = sorted({check for named in flagged[f"{stat}_checks"] for check in named.split(", ") if check})
    _add_notes(fig, [*([f"hollow = {', '.join(checks)} ({len(flagged)} point(s); each point's reasons in its hover "
                        "and in the figure's text version)"] if len(flagged) else []),
                     *([SATURATED_NOTE] if table["saturated"].any() else []),
                     whiskers_note(table.rename(columns={f"{stat}_interval": "interval"})),
                     *([table.attrs["shared"]] if table.attrs.get("shared") else [])])
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


# A measured mean this fraction of theory's or less is not noise: quiet, with Poisson arrivals, means sat at
# 0.97-1.09 of theory; the prediction's loop cost, measured at FLOOR_RATE, then overstated the loop's cost under load.
BELOW_RATIO = 0.8


def below_theory(table: pd.DataFrame) -> str:
    """A sentence when a measured mean of beside_theory's table sits well below theory
    (BELOW_RATIO), else "": theory's service time adds the loop's cost measured at a light load
    (FLOOR_RATE), and where the loop costs less per request under load the prediction's
    utilisation, and its wait, are too high; the sentence quotes both costs where measured."""
    ratios = pd.to_numeric(table["mean_ratio"], errors="coerce") if len(table) else pd.Series(dtype=float)
    if not (ratios <= BELOW_RATIO).any():
        return ""
    at = table.loc[ratios.idxmin()]
    said = (f"Your measured mean sits at {at['mean_ratio']:.2f} of theory at utilisation {at['utilisation']:.2f} "
            f"({at['rate']:,.0f}/s, {at['arrivals']} arrivals): below the dashed line, not above it. Theory's service "
            f"time is the declared spin plus the loop's own cost per request, measured with SPIN 0 at {FLOOR_RATE}/s")
    loop, floor_loop = float(at["loop_us"]), float(at["floor_loop_us"])
    if math.isfinite(loop) and math.isfinite(floor_loop):
        said += (f" ({floor_loop:.0f} µs); at this point the server spent {loop:.0f} µs of CPU per request beyond the "
                 "spin")
        if loop < floor_loop:
            said += (". The loop cost less per request under load than at the light load it was measured at, so "
                     "theory's utilisation is too high, and its queueing wait, which grows as 1 / (1 − ρ), most of all "
                     "where ρ is high")
    said += (". A prediction is only as good as the costs it is fed: the lab's cost per request measured at the load "
             "itself would bring the two closer.")
    return said


def departures(table: pd.DataFrame) -> list[str]:
    """Every sentence that explains how beside_theory's points depart from theory, in either
    direction, and where theory has none (interference, below_theory, past_capacity)."""
    return [said for said in (interference(table), below_theory(table), past_capacity(table)) if said]


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

    def checked(r) -> str:  # the self-checks its runs failed, as the hollow mark says
        flags = getattr(r, f"{stat}_flags", "")
        return f"; hollow: {_plain(flags)}" if flags else ""

    parts = [f"{r.arrivals} arrivals, {r.spin_dist} service, utilisation {r.utilisation:.2f}: "
             f"{getattr(r, f'lat_{stat}_us'):,.0f} µs measured{sure(r)}, {predicted(r)}{checked(r)}"
             for r in table.itertuples()]
    return f"{stat} response time against utilisation. " + "; ".join(parts) + "."


def _plain(text: str) -> str:
    """A hover's text as a sentence: its <br> as spaces, its entities decoded."""
    import html
    import re

    return " ".join(html.unescape(re.sub(r"<br\s*/?>", " ", text)).split())
