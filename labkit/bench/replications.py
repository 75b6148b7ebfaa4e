"""How often one run's own interval holds what replications say: `labkit bench replications`.

One point, measured REPLICATIONS times, each run with a load-generator seed of its own (its
own arrival schedule and service draws): the epoll server's spin service, exponential
service times of SPIN_US, Poisson arrivals at utilisation UTILISATION (the rate set by the
loop's own cost per request, measured first at SPIN 0).  For each figure (the mean, p50,
p99) the median of all the runs stands for the point's true value; each run's own 95%
interval (labkit.batches, from its batches) should hold it in about 95% of the runs that
give one.  The table says how many runs gave an interval (the others had too few effective
samples, and said so), how many of those held the median of all, and the runs' spread.

The median of the replications is itself uncertain (its interval is in the table, from
labkit.uncertainty.median_interval); a run's interval that misses it by less than that is
not proof of a wrong interval.  The runs also carry their self-checks: a run whose server's
CPU was shared measured the machine's other work, and the table counts those."""

from __future__ import annotations

import math
import statistics

from labkit import ground_truth, store, uncertainty
from labkit.errors import LabError
from labkit.procs import Pinning, ServerSpec

from .common import environment_columns, environment_line, results_file
from .echo import measured_point
from labkit.row import OK

REPLICATIONS = 30
SPIN_US = 200
UTILISATION = 0.5
DURATION = 4.0
FIGURES = ("lat_mean_us", "lat_p50_us", "lat_p99_us")


def replicate(replications: int = REPLICATIONS, duration: float = DURATION, spin_us: int = SPIN_US,
              utilisation: float = UTILISATION, server_cpus=None, client_cpus=None, save: bool = True) -> dict:
    """Measure the point `replications` times; {"runs": rows, "rate": offered, "figures": per
    figure: runs with an interval, of them holding the median of all, the median and its
    interval, the runs' range}."""
    if replications < 2 or duration <= 0 or not 0 < utilisation < 1:
        raise LabError(f"{replications} replications of {duration:g} s at utilisation {utilisation:g}",
                       "use 2 replications or more, a positive duration and a utilisation between 0 and 1")
    pinned = Pinning.resolve(server_cpus, client_cpus, allow_overlap=True)
    floor = ground_truth.measure_floor(pinned, duration=min(duration, 3.0), seed=replications + 1)
    if not floor.measured:
        raise LabError(f"the floor was not measured: {floor.why}",
                       "run `labkit doctor`: the server's CPU time needs perf or /proc")
    rate = round(utilisation * 1e6 / (spin_us + floor.overhead_us))
    env = environment_columns()
    path = results_file("replications", env)
    runs = []
    for replication in range(replications):
        seed = replication + 1
        row = measured_point(ServerSpec("epoll", "spin"),
                             ground_truth.spin_load(rate, duration, "poisson", "exp", spin_us, seed), pinned)
        row.update(seed=seed, replication=replication, bench="replications", rate=rate, **env)
        if save:
            store.append(path, row)
        runs.append(row)
    result = {"runs": runs, "rate": rate, "overhead_us": floor.overhead_us, "pinning": pinned.note,
              "server_cpus": pinned.server_cpus, "duration": duration, "spin_us": spin_us,
              "utilisation": utilisation, "figures": {name: coverage(runs, name) for name in FIGURES}}
    if save:
        result["saved_to"] = str(path)
    return result


def coverage(runs: list[dict], figure: str) -> dict:
    """For `figure` over the ok runs: how many gave their own interval, how many of those
    held the median of all the runs, and that median with its interval over the runs."""
    ok = [row for row in runs if row.get("status") == OK and _number(row.get(figure)) == _number(row.get(figure))]
    values = [float(row[figure]) for row in ok]
    low_column, high_column, level = uncertainty.interval_columns(figure)
    given = [row for row in ok if _number(row.get(level)) == _number(row.get(level))]
    median = statistics.median(values) if values else math.nan
    held = sum(1 for row in given if row[low_column] <= median <= row[high_column])
    interval = uncertainty.median_interval(values) if len(values) >= 2 else None
    return {"runs": len(ok), "given": len(given), "held": held, "median": median,
            "median_low": interval.low if interval else math.nan,
            "median_high": interval.high if interval else math.nan,
            "median_confidence": interval.confidence if interval else math.nan,
            "least": min(values) if values else math.nan, "most": max(values) if values else math.nan,
            "shared": sum(1 for row in ok if "cpu_shared" in (row.get("verdicts") or {}))}


def format_replications(result: dict) -> str:
    lines = [environment_line({"pinning": result["pinning"], "server_cpus": result["server_cpus"]}),
             f"epoll, spin {result['spin_us']} us exponential, Poisson {result['rate']:,}/s (utilisation "
             f"{result['utilisation']:g} with the loop's {result['overhead_us']:.1f} us a request), "
             f"{len(result['runs'])} replications of {result['duration']:g} s, each its own seed",
             "",
             f"{'figure':<12} {'runs':>4} {'own interval':>12} {'held the median':>16} "
             f"{'median of all (interval)':>34} {'runs from-to':>22} {'cpu shared':>10}"]
    for name, found in result["figures"].items():
        held = f"{found['held']} ({found['held'] / found['given']:.0%})" if found["given"] else "-"
        median = (f"{found['median']:,.0f} ({found['median_low']:,.0f}-{found['median_high']:,.0f}, "
                  f"{found['median_confidence']:.0%})")
        lines.append(f"{name:<12} {found['runs']:>4} {found['given']:>12} {held:>16} {median:>34} "
                     f"{found['least']:>10,.0f}-{found['most']:<,.0f} {found['shared']:>10}")
    lines += ["", "own interval: runs whose batches gave a 95% interval (the rest: too few effective samples, "
              "said in their verdicts);", "held the median: of those, the ones whose interval holds the median of "
              "all the runs (about 95% expected)"]
    if result.get("saved_to"):
        lines.append(f"rows: {result['saved_to']}")
    return "\n".join(lines)


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
