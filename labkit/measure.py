"""One measured point: a pinned server under perf, the pinned client under perf -> one row.

A point that goes wrong on the machine's side (the server crashes, dies
mid-run, the client fails) becomes a row with status "failed" and the reason,
so a sweep keeps its other points.  A user error that would fail every point
(an unknown model, a CPU that does not exist, too many clients for the
open-file limit) is raised as LabError instead.
"""

from __future__ import annotations

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


def _empty_row(model, service, clients, requests, k, events) -> dict:
    row = {
        "model": model, "service": service, "clients": clients, "requests": requests, "k": k,
        "status": "ok", "error": "", "elapsed_s": NAN,
        "requests_ok": 0, "requests_failed": 0, "connections_failed": 0, "errors": {},
        "lat_p50_us": NAN, "lat_p90_us": NAN, "lat_p99_us": NAN, "lat_p999_us": NAN, "lat_max_us": NAN,
        "throughput_rps": NAN,
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
          timeout: float = 60.0) -> dict:
    """Measure `clients` x `requests` against one freshly started `model`."""
    from . import perf

    events = list(events or perf.DEFAULT_EVENTS)
    row = _empty_row(model, service, clients, requests, k, events)
    procs.ensure_nofile(clients)  # the server inherits the raised limit too

    try:
        server = procs.start_server(model, service=service, cpus=server_cpus, sanitize=sanitize)
    except ServerFailed as failure:
        return _fail(row, f"the server did not start: {failure.what}")
    row["server_cpus"] = _affinity(server.pid, server.cpus)

    client, attached, server_died = None, None, False
    try:
        with perf.attach(server.pid, events) as attached:
            client = _run_client(row, server, clients, requests, service, k, client_cpus,
                                 timeout, events, sanitize)
            server_died = not server.alive()
    except LabError:
        if server.alive():
            raise
        server_died = True  # perf could not attach: the server was already gone
    finally:
        exit_code = server.stop()

    if server_died:
        _fail(row, f"the server died during the run (exit status {_status(exit_code)}); "
                   f"its stderr: {_tail(server.stderr_text()) or '(empty)'}")
    elif exit_code != 0:
        _fail(row, f"the server exited with status {_status(exit_code)} when stopped; "
                   f"its stderr: {_tail(server.stderr_text()) or '(empty)'}")

    elapsed = _fill_client(row, client) if client is not None else NAN
    notes = [server.note]
    if attached is not None and attached.counters:
        row.update(_prefixed("server", perf.derive(dict(attached.counters), elapsed), events))
        notes.append(attached.note)
    if client is not None:
        row.update(_prefixed("client", perf.derive(dict(client.counters), elapsed), events))
        notes.append(client.note)
    row["counters_source"] = _source(attached.source if attached else "", client.counters_source if client else "")
    row["counters_note"] = "; ".join(note for note in notes if note)
    return row


def _run_client(row, server, clients, requests, service, k, client_cpus, timeout, events, sanitize):
    """The client's run, or None with the row marked failed when the run broke down."""
    try:
        return procs.run_client(server.port, clients, requests, service=service, k=k, cpus=client_cpus,
                                timeout=timeout, events=events, sanitize=sanitize)
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
        "errors": dict(summary.get("errors") or {}),
        "throughput_rps": float(summary.get("throughput_rps") or NAN),
        "client_cpus": list(client.cpus) if client.cpus else sorted(os.sched_getaffinity(0)),
    })
    for percentile in ("p50", "p90", "p99", "p999", "max"):
        row[f"lat_{percentile}_us"] = _latency(summary, percentile)

    rusage = summary.get("rusage") or {}
    busy = float(rusage.get("user_s", NAN)) + float(rusage.get("sys_s", NAN))
    row["client_cpu_util"] = busy / elapsed if elapsed and not math.isnan(elapsed) and elapsed > 0 else NAN
    cpus = len(row["client_cpus"]) or 1
    row["client_saturated"] = bool(row["client_cpu_util"] >= SATURATION * cpus)

    failures = []
    if row["connections_failed"]:
        failures.append(f"{row['connections_failed']} connections failed")
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
