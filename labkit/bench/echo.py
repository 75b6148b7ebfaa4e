"""The lab's own echo, no anchor tool: `throughput` (every server model at 100 connections,
each point measured by measure.point, the sweeps' own pipeline and row schema, stored the
way sweeps store theirs) and `scaling` (a worker model at 1, 2, 4 ... workers, each on CPUs
of its own, against the load generator on all the others; target: W workers serve at least
SCALING_TARGET x W times one worker, the generator never the limit)."""

from __future__ import annotations

import os
import statistics

from labkit import build, measure, procs, row, store
from labkit.errors import LabError
from labkit.procs import LoadSpec, Pinning, ServerSpec

from .common import NAN, RTT_SIZE, echo_load, environment_columns, environment_line, results_file

SCALING_TARGET = 0.7  # the goal: W workers serve at least 0.7 x W times one worker


def throughput(models=None, clients: int = 100, requests: int = 200, server_cpus=None,
               client_cpus=None, save: bool = True):
    """Closed-loop echo throughput of each model: a DataFrame of measure.point rows,
    one per model (a model that fails has status "failed" and its error).

    The load generator's events engine runs `clients` x `requests` exchanges
    of 64 bytes; the first 10% are warm-up.  perf (or /proc) counts the server
    and every worker it has; server CPU time per request is task-clock / requests
    (NaN when not measurable)."""
    import pandas as pd

    models = list(models) if models else build.models()
    unknown = [m for m in models if m not in build.models()]
    if unknown:
        raise LabError(f"unknown model(s): {', '.join(unknown)}",
                       f"choose among: {', '.join(build.models())}")
    if clients < 1 or requests < 1:
        raise LabError(f"clients and requests must be at least 1 (got {clients}, {requests})",
                       "use e.g. --clients 100 --requests 200")
    procs.ensure_nofile(clients)
    pinned = Pinning.resolve(server_cpus, client_cpus, allow_overlap=True)
    load = echo_load(clients, requests, warmup=max(clients * requests // 10, 1))
    env = environment_columns()
    path = results_file("throughput", env)
    rows = []
    for model in models:
        measured = measured_point(ServerSpec(model, "echo"), load, pinned)
        measured.update(bench="throughput", pinning_note=pinned.note, **env)
        if save:
            store.append(path, measured)
        rows.append(measured)
    frame = pd.DataFrame(rows)
    frame.attrs.update(server_cpus=pinned.server_cpus, client_cpus=pinned.client_cpus, pinning_note=pinned.note)
    if save:
        frame.attrs["saved_to"] = str(path)
    return frame


def measured_point(server: ServerSpec, load: LoadSpec, pinned: Pinning) -> dict:
    """One point through the sweeps' own pipeline: measure.point's row, or a failed row that
    says why.  The one place the benches call measure.point."""
    try:
        return measure.point(measure.Run(server, load, pinned))
    except LabError as failure:
        return row.fail(row.new(server, load, []), failure.what.splitlines()[0])


def format_throughput(frame) -> str:
    shown = frame[["model", "throughput_rps", "lat_p50_us", "lat_p99_us", "server_cpu_us_per_request",
                   "counters_source", "error"]]
    table = shown.to_string(index=False, na_rep="not measurable", float_format=lambda v: f"{v:,.1f}")
    clients, requests = frame["clients"].iloc[0], frame["requests"].iloc[0]
    lines = [environment_line(frame.attrs), "",
             f"closed-loop echo, {clients} connections x {requests} exchanges of {RTT_SIZE} B "
             "(events engine, first 10% warm-up); server CPU per request: task-clock of the server "
             "and every worker process (perf, or /proc) over the requests served:",
             table]
    if frame["server_cpu_us_per_request"].isna().all():
        lines.append("server CPU per request: not measurable on this machine "
                     "(neither perf nor /proc counted task-clock)")
    if frame.attrs.get("saved_to"):
        lines.append(f"saved to {frame.attrs['saved_to']}")
    return "\n".join(lines)


def scaling_plan(workers, cpus: list[int]) -> list[tuple[int, list[int], list[int]]]:
    """(workers, server CPUs, generator CPUs) for each worker count this machine can hold:
    the server on the first W CPUs, the generator on all the others but never fewer than
    W of them (an echo exchange costs the client about what it costs the server)."""
    plan = []
    for count in workers:
        if count < 1:
            raise LabError(f"a worker count of {count} makes no server", "give worker counts of 1 or more")
        if 2 * count > len(cpus):
            continue  # past the machine's limit: the generator would have fewer CPUs than the server
        plan.append((count, cpus[:count], cpus[count:]))
    if not plan:
        raise LabError(f"this machine has {len(cpus)} CPU(s): not enough for a server and a generator with "
                       f"CPUs of their own at {min(workers)} worker(s)",
                       "run it on a machine with at least 2 CPUs per worker (1 worker: 2 CPUs)")
    return plan


def scaling(model: str = "epoll_workers", workers=(1, 2, 4, 8, 16, 32), clients: int = 400,
            requests: int = 2000, rounds: int = 3) -> dict:
    """Closed-loop 64-byte echo against `model` at each worker count, the server pinned to
    as many CPUs as workers and the load generator (events engine, one loop per CPU) to all
    the others; the median over `rounds` of req/s, the ratio to one worker, and whether
    every one of the generator's loops was busy (then it, not the server, was the limit)."""
    if model not in build.models() or not procs.has_workers(model):
        workers_models = [m for m in build.models() if procs.has_workers(m)] + ["threaded", "pool"]
        raise LabError(f"{model!r} is not a model with a worker count",
                       f"choose one of: {', '.join(sorted(set(workers_models) & set(build.models())))}")
    if clients < 1 or requests < 1 or rounds < 1:
        raise LabError(f"clients, requests and rounds must be at least 1 (got {clients}, {requests}, {rounds})",
                       "use e.g. --clients 400 --requests 2000 --rounds 3")
    cpus = sorted(os.sched_getaffinity(0))
    procs.ensure_nofile(clients)
    result = {"kind": "scaling", "model": model, "clients": clients, "requests": requests, "rounds": rounds,
              "cpus": len(cpus), "points": [], "target": SCALING_TARGET,
              "pinning": "the server on CPUs 0..W-1, the generator on the others (per row below)"}
    for count, server_cpus, client_cpus in scaling_plan(workers, cpus):
        rates, busiest, saturated = [], [], []
        for _ in range(rounds):
            with procs.start_server(ServerSpec(model, "echo", workers=count), cpus=server_cpus) as server:
                load = LoadSpec(clients, requests, "echo", {"engine": "events", "warmup": clients * requests // 10})
                run = procs.run_load(load, server.port, cpus=client_cpus)
            summary = run.summary
            if summary.get("requests_failed") or not summary.get("throughput_rps"):
                raise LabError(f"{model} with {count} worker(s) failed requests: {summary.get('errors')}",
                               "run the same point with labkit sweep to see why")
            busy = [part["busy"] for part in summary.get("per_thread") or [] if part.get("busy") is not None]
            waiting = [part.get("waiting") for part in summary.get("per_thread") or [] if part.get("busy") is not None]
            rates.append(summary["throughput_rps"])
            busiest.append(max(busy) if busy else NAN)
            saturated.append(bool(busy) and measure.client_saturated(busy, NAN, len(busy), waiting))
        result["points"].append({"workers": count, "server_cpus": server_cpus, "client_cpus": client_cpus,
                                 "generator_threads": summary.get("threads"),
                                 "throughput_rps": statistics.median(rates), "per_round": rates,
                                 "generator_busiest": statistics.median(busiest),
                                 "generator_saturated": any(saturated)})
    one = result["points"][0]["throughput_rps"] / result["points"][0]["workers"]
    for point in result["points"]:
        point["ratio"] = point["throughput_rps"] / one
        point["goal"] = SCALING_TARGET * point["workers"]
        point["verdict"] = "PASS" if point["ratio"] >= point["goal"] and not point["generator_saturated"] else (
            "generator-bound" if point["generator_saturated"] else "MISS")
    return result


def format_scaling(result: dict) -> str:
    lines = [environment_line(result), "",
             f"{result['model']}, closed-loop 64-byte echo, {result['clients']} connections x {result['requests']} "
             f"exchanges (first 10% warm-up), median of {result['rounds']} round(s), on a {result['cpus']}-CPU "
             "machine; the server on W CPUs, the load generator (one event loop per CPU) on the others:",
             f"  {'workers':>7} {'gen. CPUs':>9} {'req/s':>12} {'x 1 worker':>10} {'goal':>6} "
             f"{'busiest gen. loop':>17}  verdict"]
    for p in result["points"]:
        lines.append(f"  {p['workers']:>7} {len(p['client_cpus']):>9} {p['throughput_rps']:>12,.0f} "
                     f"{p['ratio']:>10.2f} {p['goal']:>6.1f} {p['generator_busiest']:>17.0%}  {p['verdict']}")
    lines.append(f"goal: W workers at least {result['target']} x W times one worker, the generator never "
                 "saturated (every loop busy)")
    return "\n".join(lines)
