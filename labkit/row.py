"""The results row: one per measured point, every column defined here once.

COLUMNS is the one table of the measured columns: each one's not-measured value
and, for what the load generator reports, its key in the generator's JSON
summary.  new() starts a row from it (MEASURED), from_summary() reads the
generator's part; measure.point fills the rest, the sweep adds the grid point's own
parameters and where and when it ran; bench throughput stores the same rows.
A number that was not measured is NaN (JSON null on disk), never 0.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

from labkit import uncertainty

NAN = float("nan")

# A row's status: it measured its point, or it failed and its `error` says why.
OK, FAILED = "ok", "failed"

# The version of these columns' meaning, written in every row ("schema"); a row without one
# is version 1.  What each version changed, for a reader of older rows:
SCHEMA = 4
SCHEMA_CHANGES = {
    2: "client_cpu_util is the generator's CPU over its run's window, connects to closes "
       "(version 1 divided its whole-process CPU, start-up and perf's included, by the exchanges' time)",
    3: "lat_mean_low_us and lat_mean_high_us come from the means of 20 consecutive batches of the run "
       "(version 2 took its samples as independent, which a queue's are not: too narrow an interval)",
    4: "every latency interval comes from the run's batches (labkit.batches: lat_batch_below, "
       "lat_effective_samples), NaN where the run is worth too few independent samples; each repeat has a "
       "seed of its own (version 3: the percentiles' intervals took a queue's samples as independent, and "
       "every repeat replayed seed 1)",
}


def _or_nan(value) -> float:
    """A time or a rate where 0 means none was measured (no request completed): NaN."""
    return float(value) if value else NAN


def _buckets(histogram) -> list:
    return [list(bucket) for bucket in histogram]


def _halves(halves) -> list:
    return [_buckets(half) for half in halves]


@dataclass(frozen=True)
class Column:
    """One measured column: its value before (or without) a measurement, and where the load
    generator's JSON summary reports it ("latency_us.p50": a key inside a key) and how it is
    read; a column with no summary key is filled by measure.point or derived."""

    name: str
    default: object
    summary: str = ""
    read: Callable = float


# Every measured column, in the row's order.  Columns read from the summary are
# from_summary's; the others measure.point fills (the server's side, perf, the link).
COLUMNS = tuple(Column(*spec) for spec in (
    # column                     default   summary key                      read
    ("schema",                   SCHEMA),
    ("status",                   OK),
    ("error",                    ""),
    # in a students' edition: the exercise whose stub the point would have run ("1.1"), so it
    # was not measured (labkit.exercises); error says what to do
    ("waiting_for_exercise",     ""),
    # the load generator's --seed as the load gave it (new(); a sweep's: labkit.plan.repeat_seed,
    # each repeat its own); NaN: none given (the generator's default, 1)
    ("seed",                     NAN),
    ("elapsed_s",                NAN,      "elapsed_s",                     _or_nan),
    ("requests_ok",              0,        "requests_ok",                   int),
    ("requests_failed",          0,        "requests_failed",               int),
    ("connections_failed",       0,        "connections_failed",            int),
    ("connections_lost",         0,        "connections_lost",              int),
    ("idle_failed",              0,        "idle_connections_failed",       int),
    ("lost_connections",         0),       # the three failure counts above, summed
    ("errors",                   {},       "errors",                        dict),
    ("server_said",              ""),
    ("lat_p50_us",               NAN,      "latency_us.p50"),
    ("lat_p90_us",               NAN,      "latency_us.p90"),
    ("lat_p99_us",               NAN,      "latency_us.p99"),
    ("lat_p999_us",              NAN,      "latency_us.p999"),
    ("lat_max_us",               NAN,      "latency_us.max"),
    ("lat_uncorrected_p99_us",   NAN,      "latency_uncorrected_us.p99"),
    ("lat_mean_us",              NAN,      "latency_us.mean"),
    ("throughput_rps",           NAN,      "throughput_rps",                _or_nan),
    # what breaks first (experiment 6): exchanges completed per second after the warm-up, and
    # how many were in flight, sampled every 10 ms (Little's law: in flight = rate x latency)
    ("requests_planned",         0,        "requests_planned",              int),
    ("served_fraction",          NAN),     # requests_ok / requests_planned
    ("completed_rps",            NAN,      "completed_rps",                 _or_nan),
    ("requests_not_sent",        NAN,      "requests_not_sent"),  # open loop: due, never sent before the run's end
    # ... open loop: the schedule's exchanges due in the measured window, sent or not (a server
    # that keeps up completes that many), and how late the generator itself started an
    # exchange whose connection was free at its due time (not the server's back-pressure)
    ("requests_due_in_window",   NAN,      "requests_due_in_window",        int),
    ("requests_measured",        NAN,      "requests_measured",             int),  # completed, the warm-up left out
    ("send_lateness_p50_us",     NAN,      "send_lateness_us.p50"),
    ("send_lateness_p99_us",     NAN,      "send_lateness_us.p99"),
    ("send_lateness_max_us",     NAN,      "send_lateness_us.max"),
    ("inflight_mean",            NAN,      "inflight.mean"),
    ("inflight_max",             NAN,      "inflight.max"),
    # ... how long each connect took (SYN to established; 1 s and 3 s: SYNs retransmitted)
    ("connect_p50_us",           NAN,      "connect_us.p50"),
    ("connect_p99_us",           NAN,      "connect_us.p99"),
    ("connect_max_us",           NAN,      "connect_us.max"),
    ("connects_over_1s",         NAN,      "connects_over_1s"),
    ("connects_over_3s",         NAN,      "connects_over_3s"),
    ("connect_histogram",        [],       "connect_histogram",             _buckets),
    ("connections_opened",       NAN,      "connections_opened"),  # --reconnect: one per exchange
    ("syn_linear_timeouts",      NAN,      "syn_linear_timeouts"),  # net.ipv4's: SYN retries 1 s apart first
    # ... misbehaving clients beside the measured ones (silent, slow or dripping), and their fate
    ("bad_connections",          0,        "bad.connections",               int),
    ("bad_open_at_end",          NAN,      "bad.open_at_end"),
    ("bad_closed_by_server",     NAN,      "bad.closed_by_server"),
    ("bad_bytes_received",       NAN,      "bad.bytes_received"),
    # ... what the server counted itself and printed as it stopped (labkit.server_counters)
    ("server_accepted",          NAN),
    ("server_futile_accepts",    NAN),
    ("server_listener_wakeups",  NAN),
    ("server_shed_idle",         NAN),
    ("server_accepted_by_worker", []),
    ("server_reporting_processes", NAN),
    ("futile_accepts_per_connection", NAN),
    ("wakeups_per_connection",   NAN),
    ("busiest_worker_share",     NAN),
    # ... and what the kernel showed (labkit.kernel_view): overflowing accept queues, memory held
    ("tcp_listenoverflows",      NAN),
    ("tcp_listendrops",          NAN),
    ("accept_queue_max",         NAN),
    ("somaxconn",                NAN),
    ("server_rss_kib_per_connection", NAN),
    ("kernel_slab_kib_per_connection", NAN),
    ("kernel_kernelstack_kib_per_connection", NAN),
    ("kernel_pagetables_kib_per_connection", NAN),
    ("kernel_kib_per_connection", NAN),
    # ... and whether the server's CPUs were its own while the client ran (labkit.cpu_sharing): what
    # other tasks ran there, the run-queue wait of the server's threads, steal, over the window
    ("server_cpu_others_ms",     NAN),
    ("server_run_delay_ms",      NAN),
    ("server_cpu_steal_ms",      NAN),
    ("server_cpu_window_s",      NAN),
    # uploads (echo/sink bodies): the bytes delivered, first request byte to last reply, the
    # server's reads per body (from its OK replies), and its own --expect report, if asked
    ("body_bytes_ok",            0,        "body_bytes_ok",                 int),
    ("transfer_s",               NAN,      "transfer_s"),
    ("goodput_gbit_s",           NAN,      "goodput_gbit_s"),
    ("server_reads_per_request", NAN,      "sink_server_reads_mean"),
    ("server_batch_s",           NAN),
    # write strategies (seed 004): per repetition of nbufs buffers, the client's write-family
    # calls (its own count, and perf's syscall tracepoints where permitted), the TCP segments
    # the kernel sent (TCP_INFO), the server's reads (its OK replies, and perf's count)
    ("send_s",                   NAN,      "send_s"),
    ("send_gbit_s",              NAN,      "send_gbit_s"),
    ("write_calls_per_repetition", NAN,    "write_calls_per_repetition"),
    ("data_segments_per_repetition", NAN,  "data_segments_per_repetition"),
    ("server_reads_per_repetition", NAN,   "server_reads_per_repetition"),
    ("client_write_syscalls_per_repetition", NAN),
    ("server_read_syscalls_per_repetition", NAN),
    ("lat_histogram",            [],       "histogram",                     _buckets),
    # the same latencies of the first and of the second half of the run's plan (the warm-up
    # left out), for a reader to set side by side (the steadiness check reads lat_batch_below)
    ("lat_histogram_halves",     [],       "histogram_halves",              _halves),
    # how sure each latency percentile is: its 95% interval from the run's batches
    # (labkit.batches.run_columns), NaN where the run is worth too few independent samples
    *((column, NAN) for p in uncertainty.PERCENTILES for column in uncertainty.interval_columns(f"lat_{p}_us")),
    # ... and of the mean, from the mean latency of each of 20 consecutive batches of the
    # plan, [samples, mean µs] (labkit.batches.mean_interval)
    ("lat_batches",              [],       "latency_batches",               _buckets),
    # ... and each of the 20 batches' samples at or below the run's own p50, p90, p99 and p999,
    # {"p99": [count, ...], ...}: the percentiles' intervals and the run's effective samples
    # (labkit.batches: how much the batches' shares vary is how far a percentile may be off)
    ("lat_batch_below",          {},       "latency_batch_below",           dict),
    ("lat_batch_under",          {},       "latency_batch_under",           dict),  # ... strictly below its bucket
    ("lat_effective_samples",    NAN),     # the run's samples as independent ones (labkit.batches)
    *((column, NAN) for column in uncertainty.interval_columns(f"lat_{uncertainty.MEAN}_us")),
    ("lat_samples",              0,        "latency_us.samples",            int),
    # the self-checks the point failed, each with its reason (labkit.verdicts; empty: all held)
    ("verdicts",                 {}),
    ("server_cpu_us_per_request", NAN),
    ("server_cs_per_request",    NAN),
    ("server_cpu_ms_per_mb",     NAN),
    ("counters_source",          ""),
    ("counters_note",            ""),
    ("link",                     "loopback"),  # what joined server and client: loopback, or the namespaces' link
    # across a link (its namespaces are the run's own, so their counters are the run's): TCP segments
    # both sides retransmitted, frames the delay line lost on purpose, and how late it let one leave
    ("tcp_retrans_segs",         NAN),
    ("client_autocorked",        NAN),  # the client's small writes autocorking held back (TcpExt)
    ("link_lost_frames",         NAN),
    ("link_max_late_us",         NAN),
    ("server_cpus",              []),
    ("client_cpus",              []),
    # the load generator's headroom: CPUs it used (client_cpu_util) against the CPUs its threads
    # could use; the busiest event loop's CPU time, and the longest a loop waited, runnable, for
    # a CPU, each over the run; saturated: it, not the server, was the limit (every event loop
    # running or waiting for its CPU all along)
    ("client_cpu_util",          NAN),
    ("client_threads",           1,        "threads",                       int),
    ("client_cpus_usable",       NAN),
    ("client_busiest_thread",    NAN),
    ("client_cpu_wait",          NAN),
    ("client_saturated",         False),
    # where the time goes (a point measured with stacks): the server's folded stacks
    # {"epoll;main;...;tcp_sendmsg_[k]": samples}, what they could see, and its system
    # calls per request by name; empty, with the reason in the notes, where not measurable
    ("server_stacks",            {}),
    ("stacks_samples",           0),
    ("stacks_scope",             ""),
    ("stacks_note",              ""),
    ("server_syscalls_per_request", {}),
    ("syscalls_note",            ""),
))
# What a row holds before anything is measured.
MEASURED = {column.name: column.default for column in COLUMNS}

# Each side's counters: "server_<event>" and "client_<event>" for the events
# asked for, and these ratios derived from them (labkit.perf.derive).
DERIVED = ("ipc", "branch-miss-rate", "cpus-utilized")
SIDES = ("server", "client")


def new(server, load, events: list[str]) -> dict:
    """An empty row for `server` (a procs.ServerSpec) under `load` (a procs.LoadSpec):
    what was asked, then every measured column at its not-measured value."""
    row = {"model": server.model, "service": server.service, "workers": server.workers,
           **{f"server_{flag}": value for flag, value in server.flags.items()},
           "clients": load.clients, "requests": load.requests, **load.options}
    row.update(copy.deepcopy(MEASURED))  # its own errors dict and CPU lists
    if load.options.get("seed") is not None:
        row["seed"] = load.options["seed"]  # asked: the generator reports it for echo and sink only
    for side in SIDES:
        row.update({f"{side}_{name}": NAN for name in [*events, *DERIVED]})
    return row


def from_summary(summary: dict) -> dict:
    """The columns the load generator's JSON summary reports, read as COLUMNS says; a key it
    left out (or reported as null) is the column's not-measured value."""
    values = {}
    for column in COLUMNS:
        if not column.summary:
            continue
        value = summary
        for key in column.summary.split("."):
            value = (value or {}).get(key)
        values[column.name] = copy.deepcopy(column.default) if value is None else column.read(value)
    return values


def fail(row: dict, reason: str) -> dict:
    """Mark `row` failed, keeping any earlier reason."""
    row["status"] = FAILED
    row["error"] = reason if not row["error"] else f"{row['error']}; {reason}"
    return row


def succeeded(frame):
    """Which of a frame's rows measured their point (status OK): a boolean Series; every row
    where the frame has no status column (a table made by hand)."""
    if "status" not in frame.columns:
        import pandas as pd

        return pd.Series(True, index=frame.index, dtype=bool)
    return frame["status"] == OK


def ok_rows(frame):
    """The rows of `frame` that measured their point."""
    return frame[succeeded(frame)]


def point_medians(frame, keys, columns):
    """The median of each of `columns` over each point's successful rows, the points grouped
    by `keys` (in order), as a frame indexed by them: the one way the lab sums up a point's
    repeats (a point with no successful row is absent)."""
    return ok_rows(frame).groupby(list(keys), sort=True)[list(columns)].median(numeric_only=True)
