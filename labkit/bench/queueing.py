"""The lab against a result known in advance: `labkit bench queueing`.

The epoll server (one event loop: a single-server queue) runs the `spin` service, whose
cost per request is declared (labkit/experiments/service_time.py).  First the lab measures
itself with SPIN 0 under a light Poisson load: the loop's own CPU time per request (the
overhead every request adds to its spin) and the mean response outside the queue (the
floor: loopback, the generator's loop and timer).  Then, for even and Poisson arrivals and
fixed and exponential service times, it offers the rates that make utilisation 0.3, 0.5
and 0.7 (spin plus overhead) and sets each measured mean and p99 response beside what
labkit.queue_theory predicts from the same declared quantities and the two measured ones:
the ratio measured / predicted is the lab's calibration, one run, one machine.  Every
point goes through measure.point (the sweeps' own pipeline and rows), stored under
data/results/bench/."""

from __future__ import annotations

from labkit import ground_truth, queue_theory, store
from labkit.errors import LabError
from labkit.procs import Pinning, ServerSpec

from .common import environment_columns, environment_line, results_file
from .echo import measured_point

UTILISATIONS = (0.3, 0.5, 0.7)
SPIN_US = 200          # the mean service time asked for: well above the loop's own cost


def calibrate(duration: float = 4.0, spin_us: int = SPIN_US, server_cpus=None, client_cpus=None,
              save: bool = True):
    """The calibration table (a DataFrame, a row per arrivals x service x utilisation): the
    offered and completed rate, the measured mean and p99 response, the predicted ones and
    how they were found, and measured / predicted."""
    import pandas as pd

    if duration <= 0 or spin_us < 1:
        raise LabError(f"duration {duration:g} s and spin {spin_us} us: both must be positive",
                       "use e.g. --duration 4 --spin-us 200")
    pinned = Pinning.resolve(server_cpus, client_cpus, allow_overlap=True)
    env = environment_columns()
    path = results_file("queueing", env)
    base = ground_truth.measure_floor(pinned)
    overhead, floor_us = base.overhead_us, base.floor_us
    if not base.measured:
        raise LabError(f"the floor was not measured: {base.why}", "run `labkit doctor`: the server's CPU time "
                       "needs perf or /proc")
    rows = []
    for arrivals in queue_theory.ARRIVALS:
        for dist in queue_theory.SERVICE_DISTS:
            for seed, rho in enumerate(UTILISATIONS, start=1):
                rate = rho * 1e6 / (spin_us + overhead)
                measured = measured_point(ServerSpec("epoll", "spin"),
                                          ground_truth.spin_load(rate, duration, arrivals, dist, spin_us, seed),
                                          pinned)
                predicted = queue_theory.predict(arrivals, dist, round(rate), spin_us, overhead, floor_us, seed=seed)
                measured.update(bench="queueing", arrivals=arrivals, spin_dist=dist, rate=round(rate),
                                utilisation=rho, overhead_us=overhead, floor_us=floor_us,
                                predicted_mean_us=predicted.mean_us, predicted_p99_us=predicted.p99_us,
                                mean_how=predicted.mean_how, p99_how=predicted.p99_how, **env)
                if save:
                    store.append(path, measured)
                rows.append(measured)
    frame = pd.DataFrame(rows)
    with_ratios(frame)
    frame.attrs.update(server_cpus=pinned.server_cpus, client_cpus=pinned.client_cpus, pinning_note=pinned.note,
                       overhead_us=overhead, floor_us=floor_us, spin_us=spin_us, duration=duration)
    if save:
        frame.attrs["saved_to"] = str(path)
    return frame


def with_ratios(frame) -> None:
    """Add measured / predicted to `frame`, for the mean and the p99, and the same ratio at
    each end of the measured figure's 95% interval (mean_ratio_low ... p99_ratio_high)."""
    for figure in ("mean", "p99"):
        for end in ("", "_low", "_high"):
            frame[f"{figure}_ratio{end}"] = frame[f"lat_{figure}{end}_us"] / frame[f"predicted_{figure}_us"]


def format_calibration(frame) -> str:
    shown = frame[["arrivals", "spin_dist", "utilisation", "rate", "completed_rps", "lat_mean_us",
                   "predicted_mean_us", "lat_p99_us", "predicted_p99_us"]].copy()
    for figure in ("mean", "p99"):
        shown[f"{figure}_ratio (95%)"] = [_ratio_text(*values) for values in zip(
            frame[f"{figure}_ratio"], frame[f"{figure}_ratio_low"], frame[f"{figure}_ratio_high"])]
    table = shown.to_string(index=False, na_rep="not measured", float_format=lambda v: f"{v:,.2f}")
    a = frame.attrs
    hows = sorted({f"mean: {m}; p99: {p}" for m, p in zip(frame["mean_how"], frame["p99_how"])})
    lines = [environment_line(a), "",
             f"epoll server, spin service, {a['spin_us']} us per request on average, "
             f"{ground_truth.SPIN_CLIENTS} connections, "
             f"{a['duration']:g} s a point; measured here first, with SPIN 0 at {ground_truth.FLOOR_RATE} requests/s: "
             f"the loop's own cost {a['overhead_us']:.1f} us per request (server CPU time), and "
             f"{a['floor_us']:.1f} us of each response outside the queue (loopback, the generator).",
             "utilisation = rate x (spin + the loop's cost); response from each request's due time; "
             "ratio = measured / predicted, in brackets its 95% interval from the run's own samples "
             "(labkit.uncertainty: independent samples assumed, which a queue's are not, so it is too narrow):",
             table, "predicted by " + " | ".join(hows)]
    if a.get("saved_to"):
        lines.append(f"rows saved to {a['saved_to']}")
    return "\n".join(lines)


def _ratio_text(ratio: float, low: float, high: float) -> str:
    """'1.07 (0.98-1.17)'; 'not measured' for NaN; no brackets where the run bounds nothing."""
    if ratio != ratio:
        return "not measured"
    return f"{ratio:.2f}" + (f" ({low:.2f}-{high:.2f})" if low == low and high == high else "")
