"""One measured point: a pinned server under perf, the pinned client under perf -> one row.

A point that goes wrong on the machine's side (the server crashes, dies
mid-run, the client fails) becomes a row with status "failed" and the reason,
so a sweep keeps its other points.  A user error that would fail every point
(an unknown model, a CPU that does not exist, too many clients for the
open-file limit) is raised as LabError instead.
"""

from __future__ import annotations

import contextlib
import math
import os

from . import procs
from .errors import LabError, ServerFailed

NAN = float("nan")
# The load generator "measured itself" when it kept its CPUs this busy.
SATURATION = 0.90
_STDERR_TAIL = 800


def _latency(summary: dict, key: str) -> float:
    latency = summary.get("latency_us") or {}
    value = latency.get(key)
    return NAN if value is None else float(value)


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


def _empty_row(model, service, clients, requests, k, events, load) -> dict:
    row = {
        "model": model, "service": service, "clients": clients, "requests": requests, "k": k,
        **load,
        "status": "ok", "error": "", "elapsed_s": NAN,
        "requests_ok": 0, "requests_failed": 0, "connections_failed": 0, "connections_lost": 0,
        "idle_failed": 0, "lost_connections": 0, "errors": {}, "server_said": "",
        "lat_p50_us": NAN, "lat_p90_us": NAN, "lat_p99_us": NAN, "lat_p999_us": NAN, "lat_max_us": NAN,
        "lat_uncorrected_p99_us": NAN,
        "throughput_rps": NAN,
        "server_cpu_us_per_request": NAN, "server_cs_per_request": NAN,
        "counters_source": "", "counters_note": "",
        "server_cpus": [], "client_cpus": [],
        "client_cpu_util": NAN, "client_saturated": False,
    }
    for side in ("server", "client"):
        row.update({f"{side}_{name}": NAN for name in [*events, "ipc", "branch-miss-rate", "cpus-utilized"]})
    return row


def _fail(row: dict, reason: str) -> dict:
    row["status"] = "failed"
    row["error"] = reason if not row["error"] else f"{row['error']}; {reason}"
    return row


def point(model: str, clients: int, requests: int = 1, service: str = "top", k: int = 2,
          server_cpus=None, client_cpus=None, events=None, sanitize: bool = False,
          timeout: float = 60.0, workers: int | None = None, engine: str | None = None,
          size: int | None = None, rate: float | None = None, idle: int = 0,
          warmup: str | None = None, duration: float | None = None) -> dict:
    """Measure `clients` x `requests` against one freshly started `model`.

    `workers` goes to the server (--workers, for the models that have them);
    `engine`, `size`, `rate`, `duration`, `warmup` and `idle` go to the load
    generator (None: its defaults).  `timeout` bounds each exchange; the whole
    run is bounded by an estimate from the load (see _wall_limit)."""
    from . import perf

    events = list(events or perf.DEFAULT_EVENTS)
    load = {"workers": workers, "engine": engine, "size": size, "rate": rate, "idle": idle,
            "warmup": warmup, "duration": duration}
    row = _empty_row(model, service, clients, requests, k, events, load)
    procs.ensure_nofile(clients, idle)
    if workers is not None and not procs.has_workers(model, sanitize):
        workers = None  # a model without workers refuses --workers; the row keeps what was asked  # the server inherits the raised limit too

    try:
        server = procs.start_server(model, service=service, cpus=server_cpus, workers=workers,
                                    sanitize=sanitize)
    except ServerFailed as failure:
        return _fail(row, f"the server did not start: {failure.what}")
    row["server_cpus"] = _affinity(server.pid, server.cpus)
    if procs.has_workers(model, sanitize):
        # They take --workers and default to one per CPU the server may use.
        _wait_for_workers(server.pid, workers or len(row["server_cpus"]) or 1)

    client, attached, server_died = None, None, False
    try:
        with _attach_tree(server.pid, events) as attached:
            client = _run_client(row, server, clients, requests, service, k, client_cpus,
                                 timeout, events, sanitize, load)
            server_died = not server.alive()
    except LabError:
        if server.alive():
            raise
        server_died = True  # perf could not attach: the server was already gone
    finally:
        said = _tail(server.stderr_text())  # before stop: what it reported during the run
        exit_code = server.stop()

    if server_died:
        _fail(row, f"the server died during the run (exit status {_status(exit_code)}); "
                   f"its stderr: {_tail(server.stderr_text()) or '(empty)'}")
    elif exit_code != 0:
        _fail(row, f"the server exited with status {_status(exit_code)} when stopped; "
                   f"its stderr: {_tail(server.stderr_text()) or '(empty)'}")
    elif said:
        # A server warns only when something went wrong for a client: a refused
        # descriptor (select past FD_SETSIZE), a shed connection, a dead worker.
        row["server_said"] = said
        _fail(row, f"the server reported: {_distinct_lines(said)}")

    elapsed = _fill_client(row, client) if client is not None else NAN
    notes = [server.note]
    if attached is not None and attached.counters:
        row.update(_prefixed("server", perf.derive(dict(attached.counters), elapsed), events))
        notes.append(attached.note)
    if client is not None:
        row.update(_prefixed("client", perf.derive(dict(client.counters), elapsed), events))
        notes.append(client.note)
    _per_request(row)
    row["counters_source"] = _source(attached.source if attached else "", client.counters_source if client else "")
    row["counters_note"] = "; ".join(note for note in notes if note)
    return row


class _TreeCounters:
    """perf attached to a server and to every process it has already forked (the
    worker models' workers), counted as one: perf -p follows a process's new
    threads and children, not the processes that existed before it attached."""

    def __init__(self, pid: int, events: list[str]):
        self.pid, self.events = pid, events
        self.counters: dict = {}
        self.note = ""
        self.source = ""
        self._stack = contextlib.ExitStack()
        self._parts = []

    def __enter__(self) -> "_TreeCounters":
        from . import perf

        import psutil

        try:
            forked = [child.pid for child in psutil.Process(self.pid).children(recursive=True)]
        except psutil.Error:
            forked = []
        with self._stack:
            for pid in [self.pid, *forked]:
                try:
                    self._parts.append(self._stack.enter_context(perf.attach(pid, self.events)))
                except LabError:
                    if pid == self.pid:
                        raise  # the server itself is gone
                    # a worker that ended before perf attached is simply not counted
            self._stack = self._stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()
        parts = [part for part in self._parts if part.counters]
        if not parts:
            return
        self.counters = {event: sum(float(part.counters.get(event, NAN)) if part.counters.get(event) is not None
                                    else NAN for part in parts) for event in parts[0].counters}
        notes = [part.note for part in parts if part.note]
        if len(parts) > 1:
            # The supervisor only waits for its workers: that it "did not run" is expected.
            notes = [note for part, note in zip(parts, [p.note for p in parts])
                     if note and not (part.pid == self.pid and "did not run" in note)]
        self.note = "; ".join(dict.fromkeys(notes))
        if len(parts) > 1:
            self.note = (f"server counters summed over {len(parts)} processes (the server and its workers)"
                         + (f"; {self.note}" if self.note else ""))
        sources = {part.source for part in parts}
        self.source = sources.pop() if len(sources) == 1 else "+".join(sorted(sources))


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


def _attach_tree(pid: int, events: list[str]) -> _TreeCounters:
    return _TreeCounters(pid, events)


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


def _wall_limit(clients: int, requests: int, timeout: float, load: dict) -> float:
    """How long the whole client run may take: the open loop's duration, or for a closed
    loop the exchanges at a pessimistic 1,000 per second, plus connecting and `timeout`."""
    connecting = (clients + (load.get("idle") or 0)) / 1000.0
    if load.get("duration"):
        return float(load["duration"]) + connecting + timeout
    return clients * requests / 1000.0 + connecting + timeout


def _run_client(row, server, clients, requests, service, k, client_cpus, timeout, events, sanitize, load):
    """The client's run, or None with the row marked failed when the run broke down."""
    try:
        return procs.run_client(server.port, clients, requests, service=service, k=k, size=load["size"],
                                cpus=client_cpus, timeout=timeout, events=events, sanitize=sanitize,
                                engine=load["engine"], rate=load["rate"], duration=load["duration"],
                                warmup=load["warmup"], idle=load["idle"],
                                wall_timeout=_wall_limit(clients, requests, timeout, load))
    except LabError as failure:
        if not (_machine_side(failure) or not server.alive()):
            raise  # the user's parameters: every point would fail the same way
        _fail(row, f"the client failed: {failure.what}")
        return None


def _machine_side(failure: LabError) -> bool:
    """A client failure that belongs to this point, not to the user's parameters."""
    what = failure.what
    return ("ran longer than" in what) or ("without its JSON summary" in what)


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


def _fill_client(row: dict, client: procs.ClientRun) -> float:
    summary = client.summary
    elapsed = float(summary.get("elapsed_s") or NAN)
    row.update({
        "elapsed_s": elapsed,
        "requests_ok": int(summary.get("requests_ok", 0)),
        "requests_failed": int(summary.get("requests_failed", 0)),
        "connections_failed": int(summary.get("connections_failed", 0)),
        "connections_lost": int(summary.get("connections_lost", 0)),
        "idle_failed": int(summary.get("idle_connections_failed", 0)),
        "errors": dict(summary.get("errors") or {}),
        "throughput_rps": float(summary.get("throughput_rps") or NAN),
        "client_cpus": list(client.cpus) if client.cpus else sorted(os.sched_getaffinity(0)),
    })
    row["lost_connections"] = row["connections_failed"] + row["connections_lost"] + row["idle_failed"]
    for percentile in ("p50", "p90", "p99", "p999", "max"):
        row[f"lat_{percentile}_us"] = _latency(summary, percentile)
    uncorrected = (summary.get("latency_uncorrected_us") or {}).get("p99")
    row["lat_uncorrected_p99_us"] = NAN if uncorrected is None else float(uncorrected)

    rusage = summary.get("rusage") or {}
    busy = float(rusage.get("user_s", NAN)) + float(rusage.get("sys_s", NAN))
    row["client_cpu_util"] = busy / elapsed if elapsed and not math.isnan(elapsed) and elapsed > 0 else NAN
    cpus = len(row["client_cpus"]) or 1
    row["client_saturated"] = bool(row["client_cpu_util"] >= SATURATION * cpus)

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
        _fail(row, f"the load generator reported failures (exit {client.returncode}): "
                   + ("; ".join(failures) or _tail(client.stderr)))
    return elapsed


def _source(server_source: str, client_source: str) -> str:
    """'perf' when perf counted both sides; otherwise which fallback each side used."""
    if server_source == "perf" and client_source in ("perf", ""):
        return "perf"
    return f"server:{server_source or 'none'} client:{client_source or 'none'}"
