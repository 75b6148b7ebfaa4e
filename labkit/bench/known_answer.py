"""The lab against a result known in advance: `labkit bench queueing`.

The epoll server (one event loop: a single-server queue) runs the `spin` service, whose
cost per request is declared (labkit/experiments/service_time.py).  For even and Poisson
arrivals and fixed and exponential service times it offers the rates that make utilisation
0.3, 0.5 and 0.7 (spin plus the loop's own cost, as a first SPIN 0 run measured it), and
sets each measured mean and p99 response beside two predictions: the replay
(labkit.calibration: the textbook's queue fed that run's own arrivals and spin draws, its own
loop cost, the floor's distribution added request by request) and the closed form
(labkit.queue_theory.predict, the floor's mean added).  measured / replay is the lab's
calibration.

Invariants: every point is measured `replications` times, in rounds; each round first runs
SPIN 0 (that round's floor), then every point once, in a seeded shuffled order, so a drift
of the machine spreads over the points; every run has its own load-generator seed,
seed_of(point, round), stored in its row.  A point's ratio is the median over its
replications with the distribution-free interval of that median, at the level its count
reaches (labkit.calibration.ratio_interval).  A run's self-checks (row["verdicts"]) are shown
beside its point, never dropped.  Every run goes through measure.point (the sweeps' own
pipeline and rows), stored under data/results/bench/."""

from __future__ import annotations

import math
import random
import statistics

from labkit import calibration, ground_truth, queue_theory, store
from labkit.errors import LabError
from labkit.procs import Pinning, ServerSpec

from .common import environment_columns, environment_line, prose, results_file
from .echo import measured_point

UTILISATIONS = (0.3, 0.5, 0.7)
SPIN_US = 200          # the mean service time asked for: well above the loop's own cost
REPLICATIONS = 5       # the median of 5 has a 94% interval: [min, max]
DURATION = 2.0         # seconds a run, its first 0.5 s warm-up
POINTS = [(arrivals, dist, rho) for arrivals in queue_theory.ARRIVALS for dist in queue_theory.SERVICE_DISTS
          for rho in UTILISATIONS]


def seed_of(point: int, replication: int) -> int:
    """The load generator's seed for `point` (0 .. len(POINTS) - 1; len(POINTS): the round's
    SPIN 0 floor) in round `replication`: one of its own for every (point, round)."""
    return 1 + replication * (len(POINTS) + 1) + point


def calibrate(duration: float = DURATION, replications: int = REPLICATIONS, spin_us: int = SPIN_US,
              server_cpus=None, client_cpus=None, save: bool = True):
    """The calibration table (a DataFrame, a row per arrivals x service x utilisation: the
    medians over its replications, the ratios with their intervals, the verdicts); every run's
    own row in frame.attrs["runs"]."""
    if duration <= 0 or spin_us < 1 or replications < 1:
        raise LabError(f"duration {duration:g} s, spin {spin_us} us and {replications} replications: all must be "
                       "positive", "use e.g. --seconds 2 --replications 5")
    pinned = Pinning.resolve(server_cpus, client_cpus, allow_overlap=True)
    env = environment_columns()
    path = results_file("queueing", env)
    runs, floors, rates = [], [], []
    for replication in range(replications):
        floor = ground_truth.measure_floor(pinned, duration=duration, seed=seed_of(len(POINTS), replication))
        floors.append(floor)
        if save and floor.row:
            store.append(path, dict(floor.row, bench="queueing", part="floor", replication=replication,
                                    seed=seed_of(len(POINTS), replication), **env))
        if not rates:  # the first floor sets the rates: the same for every replication of a point
            if not floor.measured:
                raise LabError(f"the floor was not measured: {floor.why}", "run `labkit doctor`: the server's CPU "
                               "time needs perf or /proc")
            rates = [round(rho * 1e6 / (spin_us + floor.overhead_us)) for _, _, rho in POINTS]
        order = list(range(len(POINTS)))
        random.Random(replication).shuffle(order)
        for point in order:
            arrivals, dist, rho = POINTS[point]
            seed = seed_of(point, replication)
            row = measured_point(ServerSpec("epoll", "spin"),
                                 ground_truth.spin_load(rates[point], duration, arrivals, dist, spin_us, seed), pinned)
            row["seed"] = seed  # the one the generator was given, whatever its report says
            replayed = calibration.replay(row, floor, seed)
            row.update(bench="queueing", part="point", point=point, replication=replication, utilisation=rho,
                       floor_us=floor.floor_us, floor_overhead_us=floor.overhead_us,
                       overhead_us=replayed.overhead_us, replay_mean_us=replayed.mean_us,
                       replay_p99_us=replayed.p99_us, replay_requests=replayed.requests,
                       mean_ratio=row["lat_mean_us"] / replayed.mean_us, p99_ratio=row["lat_p99_us"] / replayed.p99_us,
                       **env)
            if save:
                store.append(path, row)
            runs.append(row)
    frame = summarise(runs, spin_us)
    frame.attrs.update(server_cpus=pinned.server_cpus, client_cpus=pinned.client_cpus, pinning_note=pinned.note,
                       spin_us=spin_us, duration=duration, replications=replications, runs=runs,
                       floor_us=[f.floor_us for f in floors], floor_overhead_us=[f.overhead_us for f in floors],
                       floor_rows=[f.row for f in floors],
                       floor_verdicts=calibration.verdict_counts([f.row for f in floors]))
    if save:
        frame.attrs["saved_to"] = str(path)
    return frame


def summarise(runs: list[dict], spin_us: float = SPIN_US):
    """A row per point of `runs` (calibrate's rows: point, arrivals, spin_dist ...): medians
    over its replications, each ratio's median with its interval, the closed form's prediction
    (from the medians of its runs' loop costs and floors) and the verdicts of its runs."""
    import pandas as pd

    table = []
    for point in sorted({run["point"] for run in runs}):
        mine = [run for run in runs if run["point"] == point]
        first = mine[0]
        overhead = _median(run["overhead_us"] for run in mine)
        floor = _median(run["floor_us"] for run in mine)
        theory = queue_theory.predict(first["arrivals"], first["spin-dist"], first["rate"], spin_us,
                                      max(overhead, 0.0) if overhead == overhead else math.nan, floor,
                                      seed=point + 1)
        line = {"arrivals": first["arrivals"], "spin_dist": first["spin-dist"], "utilisation": first["utilisation"],
                "rate": first["rate"], "rho": queue_theory.utilisation(first["rate"], spin_us, max(overhead, 0.0))
                if overhead == overhead else math.nan, "overhead_us": overhead,
                "replications": sum(run["mean_ratio"] == run["mean_ratio"] for run in mine),
                "verdicts": calibration.verdict_counts(mine),
                "theory_mean_how": theory.mean_how, "theory_p99_how": theory.p99_how}
        for figure in ("mean", "p99"):
            ratio, interval = calibration.ratio_interval(run[f"{figure}_ratio"] for run in mine)
            line.update({f"lat_{figure}_us": _median(run[f"lat_{figure}_us"] for run in mine),
                         f"replay_{figure}_us": _median(run[f"replay_{figure}_us"] for run in mine),
                         f"theory_{figure}_us": getattr(theory, f"{figure}_us"),
                         f"{figure}_ratio": ratio,
                         f"{figure}_ratio_low": interval.low if interval else math.nan,
                         f"{figure}_ratio_high": interval.high if interval else math.nan,
                         f"{figure}_ratio_level": interval.confidence if interval else math.nan})
        table.append(line)
    return pd.DataFrame(table)


def _median(values) -> float:
    values = [float(v) for v in values if v == v]
    return statistics.median(values) if values else math.nan


def format_calibration(frame) -> str:
    a = frame.attrs
    shown = frame[["arrivals", "spin_dist", "utilisation", "rate", "rho", "replications"]].copy()
    shown.columns = ["arrivals", "service", "asked", "rate", "rho", "n"]
    for figure in ("mean", "p99"):
        shown[f"{figure} us"] = frame[f"lat_{figure}_us"]
        shown[f"{figure} replay"] = frame[f"replay_{figure}_us"]
        shown[f"{figure} theory"] = frame[f"theory_{figure}_us"]
        shown[f"{figure} ratio"] = [_ratio_text(*values) for values in zip(
            frame[f"{figure}_ratio"], frame[f"{figure}_ratio_low"], frame[f"{figure}_ratio_high"])]
    shown["level"] = [f"{level:.0%}" if level == level else "none" for level in frame["p99_ratio_level"]]
    shown["verdicts"] = [text or "-" for text in frame["verdicts"]]
    table = shown.to_string(index=False, na_rep="not measured", float_format=lambda v: f"{v:,.2f}")
    floors = [f for f in a.get("floor_us", []) if f == f]
    floor_text = (f"{min(floors):.1f} to {max(floors):.1f} us" if floors else "not measured")
    hows = sorted({f"mean {m}; p99 {p}" for m, p in zip(frame["theory_mean_how"], frame["theory_p99_how"])})
    lines = [environment_line(a), "", prose(
        f"epoll server, spin service, {a['spin_us']} us per request on average, {ground_truth.SPIN_CLIENTS} "
        f"connections, {a['duration']:g} s a run (its first {min(0.5, a['duration'] / 4):g} s warm-up). "
        f"{a['replications']} rounds; each runs SPIN 0 at {ground_truth.FLOOR_RATE} requests/s (the floor: "
        f"{floor_text} of each response outside the queue, by round; its runs' verdicts: "
        f"{a.get('floor_verdicts') or 'none'}), then every point once in a shuffled order, "
        "each run with a load-generator seed of its own. asked: the utilisation the rate was set for (from the "
        "first round's loop cost); rho: rate x (spin + the loop's cost per request, the median over the point's "
        "runs of server CPU time per request less the mean spin). Figures are medians over the replications. "
        "replay: the first-come-first-served queue fed each run's own arrival times and spin draws (its seed's), "
        "its own loop cost, plus the time outside the queue drawn from its round's SPIN 0 histogram "
        "(labkit.calibration). theory: the closed form with the same medians, the floor's mean added "
        "(labkit.queue_theory). ratio = measured / replay, the median over the point's replications; in "
        "brackets the distribution-free interval of that median at the level shown (5 replications: 94%, "
        "6: 97%); each replication has its own floor run and its own loop cost, so the interval holds the "
        "prediction's uncertainty as well as the measurement's. verdicts: the self-checks that failed, "
        "with how many of the point's runs failed each:"), table, "theory by " + " | ".join(hows)]
    reasons = {}
    for run in [*a.get("runs", []), *a.get("floor_rows", [])]:
        for name, why in (run.get("verdicts") or {}).items():
            reasons.setdefault(name, why)
    for name, why in sorted(reasons.items()):
        lines.append(prose(f"{name}, e.g.: {why}"))
    if a.get("saved_to"):
        lines.append(f"rows saved to {a['saved_to']}")
    return "\n".join(lines)


def _ratio_text(ratio: float, low: float, high: float) -> str:
    """'1.07 (0.98-1.17)'; 'not measured' for NaN; no brackets where nothing bounds it."""
    if ratio != ratio:
        return "not measured"
    return f"{ratio:.2f}" + (f" ({low:.2f}-{high:.2f})" if low == low and high == high else "")
