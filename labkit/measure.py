"""One measured point: a pinned server under perf, the pinned client under perf -> one row.

    row = measure.point(Run(ServerSpec("epoll", "echo"), LoadSpec(300, 20, "echo"), Pinning([0], [1])))

A Run says everything about one measurement (an experiment's plan makes one per
grid point and repeat; a benchmark or a test builds one by hand).  The row's
columns are labkit.row's.  A point that goes wrong on the machine's side (the
server crashes, dies mid-run, the client breaks down: errors.ClientFailed)
becomes a row with status "failed" and the reason, so a sweep keeps its other
points.  A user error that would fail every point (an unknown model, a CPU that
does not exist, too many clients for the open-file limit) is raised as LabError
instead.
"""

from __future__ import annotations

import contextlib

import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from . import batches, procs, row as rows, uncertainty, verdicts
from .errors import ClientFailed, LabError, ServerFailed
from .procs import ClientRun, LoadSpec, Pinning, ServerSpec

if TYPE_CHECKING:
    from .netlink import Link

NAN = float("nan")
# The load generator "measured itself" when it kept its CPUs this busy.
SATURATION = 0.90
_STDERR_TAIL = 800


def _prefixed(prefix: str, counters: dict, events: list[str]) -> dict:
    row = {f"{prefix}_{event}": NAN for event in events}
    for name, value in counters.items():
        row[f"{prefix}_{name}"] = NAN if value is None else float(value)
    return row


def _affinity(pid: int, fallback) -> list[int]:
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:  # already gone: what we asked for is what it had
        return list(fallback or [])


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _STDERR_TAIL else "..." + text[-_STDERR_TAIL:]


@dataclass(frozen=True)
class Run:
    """One measurement: `load` against a fresh `server`, each pinned as `pinning` says.

    `link` (a labkit.netlink.Link, not made yet): each side in its own network namespace
    across it, made for this run and removed after it; None: the same host.  `events`:
    the perf events to count (None: perf.DEFAULT_EVENTS).  `stacks`: also where the
    server's time goes (its sampled stacks, its system calls by name).  `watch`: what
    the kernel is sampled for while the load runs ("memory", "accept_queue":
    labkit.kernel_view).  A sweep's run also names its grid `point`, its `repeat` and
    its `key` in the results file."""

    server: ServerSpec
    load: LoadSpec
    pinning: Pinning = Pinning()
    link: Link | None = None
    events: tuple[str, ...] | None = None
    stacks: bool = False
    watch: tuple[str, ...] = ()
    point: dict = field(default_factory=dict)
    repeat: int = 0
    key: str = ""


def point(run: Run) -> dict:
    """Measure one `run`: its row (labkit.row's columns, status "ok" or "failed").  A point
    that would run an unsolved exercise's stub (labkit.stubs) is not run: its row says
    which exercise it waits for."""
    from . import perf, stubs

    wait = stubs.blocking(server=run.server, load=run.load)
    if wait is not None:
        row = rows.fail(rows.new(run.server, run.load, list(run.events or perf.DEFAULT_EVENTS)), wait.sentence)
        row["waiting_for_exercise"] = wait.exercise.label
        return row
    link = run.link
    if link is None:
        return _point(run.server, run.load, run.pinning, run.events, None, run.stacks, run.watch)
    with link:
        row = _point(replace(run.server, flags={**run.server.flags, "host": link.server_address}), run.load,
                     run.pinning, run.events, link, run.stacks, run.watch)
    row["link"] = link.shaping
    row.update(link.row_counters())
    return row


def _point(server: ServerSpec, load: LoadSpec, pinning: Pinning, events, link, stacks: bool = False,
           watch: tuple[str, ...] = ()) -> dict:
    from . import cpu_sharing, kernel_view, perf, server_counters

    events = list(events or perf.DEFAULT_EVENTS)
    row = rows.new(server, load, events)
    procs.ensure_nofile(load.clients, load.idle)  # the server inherits the raised limit too

    try:
        running = procs.start_server(server, cpus=pinning.server_cpus, prefix=link.server_prefix if link else ())
    except ServerFailed as failure:
        return rows.fail(row, f"the server did not start: {failure.what}")
    row["server_cpus"] = _affinity(running.pid, running.cpus)
    if procs.has_workers(server.model, server.sanitize):
        # They take --workers and default to one per CPU the server may use.
        _wait_for_workers(running.pid, server.workers or len(row["server_cpus"]) or 1)

    client, attached, server_died, where = None, None, False, None
    kernel = kernel_view.Watch(running.pid, running.port, memory="memory" in watch,
                               accept_queue="accept_queue" in watch)
    sharing = cpu_sharing.Watch(running.pid, row["server_cpus"], pinning.client_cpus)
    try:
        with perf.attach_tree(running.pid, events) as attached, _where_the_time_goes(running.pid, stacks) as where, \
                kernel, sharing:
            client = _run_client(row, running, load, pinning, events, link)
            server_died = not running.alive()
    except LabError:
        if running.alive():
            raise
        server_died = True  # perf could not attach: the server was already gone
    finally:
        if "expect" in server.flags:
            row["server_batch_s"] = _batch_seconds(running)
        said = _tail(running.stderr_text())  # before stop: what it reported during the run
        exit_code = running.stop()
        server_counters.fill(row, running.stdout_after_stop())

    if server_died:
        rows.fail(row, f"the server died during the run (exit status {_status(exit_code)}); "
                       f"its stderr: {_tail(running.stderr_text()) or '(empty)'}")
    elif exit_code != 0:
        rows.fail(row, f"the server exited with status {_status(exit_code)} when stopped; "
                       f"its stderr: {_tail(running.stderr_text()) or '(empty)'}")
    elif said:
        # A server warns only when something went wrong for a client: a refused
        # descriptor (select past FD_SETSIZE), a shed connection, a dead worker.
        row["server_said"] = said
        rows.fail(row, f"the server reported: {_distinct_lines(said)}")

    elapsed = _fill_client(row, client) if client is not None else NAN
    notes = [running.note]
    if attached is not None and attached.counters:
        # perf's own "CPUs utilized": task-clock over the time it counted, which is longer
        # than the client's run (a busy-polling server spins through all of it)
        window = attached.seconds if attached.seconds == attached.seconds else elapsed
        row.update(_prefixed("server", perf.derive(dict(attached.counters), window), events))
        notes.append(attached.note)
    if client is not None:
        row.update(_prefixed("client", perf.derive(dict(client.counters), elapsed), events))
        notes.append(client.note)
    _per_request(row)
    _syscalls_per_repetition(row, load)
    kernel.fill(row, connections=load.clients + int(load.options.get("idle") or 0)
                + int(load.options.get("bad") or 0))
    sharing.fill(row)
    if where is not None:
        where.fill(row)
    row["counters_source"] = _source(attached.source if attached else "", client.counters_source if client else "")
    row["verdicts"] = verdicts.judge(row)
    row["counters_note"] = "; ".join(note for note in notes if note)
    return row


class _WhereTheTimeGoes:
    """The server's sampled stacks (perf record) and its system calls counted by name (perf's
    tracepoints), over the same run as its counters; fill(row) writes them, or says why not."""

    def __init__(self, pid: int):
        import psutil

        from . import perf

        try:
            self.pids = [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
        except psutil.Error:
            self.pids = [pid]
        self.syscall_events, self.syscalls_note = perf.syscall_tracepoints(perf.SERVER_SYSCALLS)
        self._stack = contextlib.ExitStack()
        self.sampling = self.counting = None

    def __enter__(self):
        from . import perf

        with self._stack:
            self.sampling = self._stack.enter_context(perf.sample_stacks(self.pids))
            if self.syscall_events:
                self.counting = self._stack.enter_context(perf.attach_tree(self.pids[0], self.syscall_events))
            self._stack = self._stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        # Both perfs stop together: each takes up to a second to close its events.
        for perf_run in (self.sampling, self.counting):
            if perf_run is not None:
                perf_run.interrupt()
        self._stack.__exit__(*exc)

    def fill(self, row: dict) -> None:
        profile = self.sampling.profile
        row.update(server_stacks=profile.stacks, stacks_samples=profile.samples, stacks_scope=profile.scope,
                   stacks_note=profile.note)
        requests = row.get("requests_ok") or 0
        if self.counting is not None and self.counting.counters and requests:
            counts = {event.split("sys_enter_", 1)[1]: value for event, value in self.counting.counters.items()}
            row["server_syscalls_per_request"] = {name: value / requests for name, value in counts.items()
                                                  if value == value and value > 0}  # NaN != NaN: not counted
        else:
            row["syscalls_note"] = self.syscalls_note or ("no request completed" if not requests else
                                                          "perf could not attach to count them")


@contextlib.contextmanager
def _where_the_time_goes(pid: int, wanted: bool):
    if not wanted:
        yield None
        return
    with _WhereTheTimeGoes(pid) as where:
        yield where


def _wait_for_workers(pid: int, expected: int, within: float = 2.0) -> None:
    """Let a worker model fork its workers (after `listening`) so perf attaches to all.
    Thread-pool models have no child processes: the wait ends when time is up."""
    import time

    import psutil

    deadline = time.monotonic() + within
    try:
        server = psutil.Process(pid)
        while time.monotonic() < deadline:
            if len(server.children()) >= expected or len(server.threads()) > expected:
                return
            time.sleep(0.01)
    except psutil.Error:
        return  # the server is gone: the point reports that


# The server's --expect report: "expect: batch 1: 100 of 100 connections done, <bytes> bytes in <ms> ms".
_BATCH_DONE = re.compile(r"^expect: batch \d+: (\d+) of \d+ connections done, \d+ bytes in ([0-9.]+) ms$", re.M)


def _batch_seconds(server: procs.Server, within: float = 2.0) -> float:
    """The server's own time for its first batch (first connect to last close, as seed
    002's servers timed it), waiting briefly for the last close; NaN if none came."""
    import time

    deadline = time.monotonic() + within
    while True:
        found = _BATCH_DONE.search(server.stdout_text())
        if found:
            return float(found.group(2)) / 1000.0
        if time.monotonic() > deadline or not server.alive():
            return NAN
        time.sleep(0.01)


def _distinct_lines(text: str) -> str:
    """A server's warnings, each distinct line once (a refusal repeated 85 times is one line)."""
    seen = dict.fromkeys(line.strip() for line in text.splitlines() if line.strip())
    return " | ".join(seen)


def _per_request(row: dict) -> None:
    """Server CPU time and context switches per completed request (NaN when not measured)."""
    done = row["requests_ok"]
    if not done:
        return
    task_clock_ms = row.get("server_task-clock", NAN)
    switches = row.get("server_context-switches", NAN)
    row["server_cpu_us_per_request"] = task_clock_ms * 1000.0 / done
    row["server_cs_per_request"] = switches / done
    if row["body_bytes_ok"]:
        row["server_cpu_ms_per_mb"] = task_clock_ms / (row["body_bytes_ok"] / 1e6)


def _run_client(row: dict, server: procs.Server, load: LoadSpec, pinning: Pinning, events,
                link=None) -> ClientRun | None:
    """The client's run, or None with the row marked failed when the run broke down."""
    try:
        if link is not None:
            return procs.run_load(load, server.port, cpus=pinning.client_cpus, events=events,
                                  host=link.server_address, prefix=link.client_prefix)
        return procs.run_load(load, server.port, cpus=pinning.client_cpus, events=events)
    except ClientFailed as failure:  # this run broke down
        rows.fail(row, f"the client failed: {failure.what}")
    except LabError as failure:
        if server.alive():
            raise  # the user's parameters: every point would fail the same way
        rows.fail(row, f"the client failed: {failure.what}")  # the server's death took the client down
    return None


def _syscalls_per_repetition(row: dict, load: LoadSpec) -> None:
    """perf's count of the client's write-family and the server's read-family system
    calls per repetition (write strategies), where perf counted them (NaN elsewhere)."""
    from . import perf

    repetitions = row["requests_ok"] * int(load.options.get("repetitions") or 1)
    if not repetitions or "strategy" not in load.options:
        return
    for column, side, calls in (("client_write_syscalls_per_repetition", "client", perf.WRITE_SYSCALLS),
                                ("server_read_syscalls_per_repetition", "server", perf.READ_SYSCALLS)):
        counts = [row.get(f"{side}_{call}", NAN) for call in calls]
        row[column] = sum(counts) / repetitions if not any(math.isnan(c) for c in counts) else NAN


def _status(code: int | None) -> str:
    if code is None:
        return "unknown"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return str(code)


def client_saturated(threads_busy: list, cpu_util: float, cpus_usable: int, threads_waiting: list = ()) -> bool:
    """Whether the load generator measured itself rather than the server.  The events engine
    reports each loop's CPU time over its wall time, and the time it waited, runnable, for a
    CPU (the kernel's run_delay; None where it does not say): saturated when every loop wanted
    its CPU all along, running or waiting for it (one idle loop had time to spare; a loop that
    shares its CPU with another task is the limit though its CPU time is half the run).  The
    threads engine reports no loops: saturated when its CPU use filled the CPUs it could use.
    NaN (not measured) is never saturated."""
    if threads_busy and None not in threads_busy:
        waiting = threads_waiting if len(threads_waiting) == len(threads_busy) else [None] * len(threads_busy)
        wanted = [busy + (wait or 0.0) for busy, wait in zip(threads_busy, waiting)]
        return bool(min(wanted) >= SATURATION)
    return bool(cpu_util >= SATURATION * cpus_usable)


def _fill_client(row: dict, client: ClientRun) -> float:
    """The load generator's part of `row` (what its summary reports, as labkit.row's table
    says, and what follows from it); its elapsed time."""
    summary = client.summary
    row.update(rows.from_summary(summary))
    reported = {p: row[f"lat_{p}_us"] for p in uncertainty.PERCENTILES}
    row.update(batches.run_columns(row["lat_histogram"], row.get("lat_batches"), row.get("lat_batch_below"),
                                   row.get("lat_mean_us"), reported, row.get("lat_batch_under")))
    row["client_cpus"] = list(client.cpus) if client.cpus else sorted(os.sched_getaffinity(0))
    row["lost_connections"] = row["connections_failed"] + row["connections_lost"] + row["idle_failed"]
    if row["requests_planned"]:  # a stuck server's failed point says how much it still served
        row["served_fraction"] = row["requests_ok"] / row["requests_planned"]

    # The CPUs the generator used: its CPU time over the wall time of the same window (the
    # whole run, connects to closes; not its start-up, nor perf's).  Process CPU over the
    # measured exchanges alone read 7.2 CPUs for one 100 KB upload on one pinned CPU.
    window = summary.get("window") or {}
    wall, busy = float(window.get("wall_s") or NAN), float(window.get("cpu_s", NAN))
    row["client_cpu_util"] = busy / wall if wall > 0 else NAN
    # The CPUs the generator could use: its threads, at most one CPU each.
    row["client_cpus_usable"] = min(row["client_threads"], len(row["client_cpus"]) or 1)
    threads_busy = [part.get("busy") for part in summary.get("per_thread") or []]
    threads_waiting = [part.get("waiting") for part in summary.get("per_thread") or []]
    if threads_busy and None not in threads_busy:
        row["client_busiest_thread"] = max(threads_busy)
    if threads_waiting and None not in threads_waiting:
        row["client_cpu_wait"] = max(threads_waiting)
    row["client_saturated"] = client_saturated(threads_busy, row["client_cpu_util"], row["client_cpus_usable"],
                                               threads_waiting)

    failures = []
    if row["connections_failed"]:
        failures.append(f"{row['connections_failed']} connections failed")
    if row["connections_lost"]:
        failures.append(f"{row['connections_lost']} connections lost mid-run")
    if row["idle_failed"]:
        failures.append(f"{row['idle_failed']} idle connections failed")
    if row["requests_failed"]:
        failures.append(f"{row['requests_failed']} requests failed")
    if row["errors"]:
        failures.append("errors: " + ", ".join(f"{name} x{count}" for name, count in row["errors"].items()))
    if client.returncode != 0 or failures:
        rows.fail(row, f"the load generator reported failures (exit {client.returncode}): "
                   + ("; ".join(failures) or _tail(client.stderr)))
    return row["elapsed_s"]


def _source(server_source: str, client_source: str) -> str:
    """'perf' when perf counted both sides; otherwise which fallback each side used."""
    if server_source == "perf" and client_source in ("perf", ""):
        return "perf"
    return f"server:{server_source or 'none'} client:{client_source or 'none'}"
