"""The lab measured against its anchors: `labkit bench rtt | throughput | events | upload | scaling`.

  rtt         the lab's load generator against the epoll echo server, one
              connection, ping-pong, beside sockperf against sockperf's own
              server: same pinning, same run, interleaved rounds (A B A B ...)
              so that drift on the machine hits both.  Target: the lab's
              median round trip within RTT_TARGET x sockperf's.
  throughput  closed-loop echo throughput of every server model at 100
              connections, each measured by measure.point (the sweeps' own
              pipeline and row schema: the server's CPU time per request when
              perf or /proc counts it), stored as JSON Lines under
              data/results/bench/.
  events      csrc/bench/ev_bench.c (libevent's test/bench.c idea) for the
              select, poll and epoll backends as the watched descriptors grow.
  upload      one connection uploading 10 MB bodies to each server model
              (sink), beside iperf3's single TCP stream: same pinning,
              interleaved rounds.  Target: the best model's goodput at
              UPLOAD_TARGET x iperf3's or better.
  scaling     a worker model (epoll_workers) at 1, 2, 4 ... workers, each on
              CPUs of its own, against the load generator on all the other
              CPUs (one event loop each).  Target: W workers serve at least
              SCALING_TARGET x W times one worker, the generator never the limit.

Each function returns its figures (a dict or a pandas DataFrame) and the
format_* functions turn them into the text the CLI prints, environment
first.  No figure is asserted anywhere: the tests check that each bench runs
and prints well-formed figures, not how fast this machine is.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import statistics
import subprocess
import textwrap
import time
from pathlib import Path

from . import build, launcher, measure, paths, procs, row, store, system
from .errors import LabError
from .procs import LoadSpec, Pinning, ServerSpec

RTT_TARGET = 1.15  # the target: lab round trip / sockperf round trip
UPLOAD_TARGET = 0.9  # the issue's target: best model's upload goodput / iperf3's single stream
UPLOAD_MODELS = ("threaded", "busypoll", "aio", "select", "epoll", "uring")
RTT_SIZE = 64      # bytes per message, both tools
BACKENDS = ("select", "poll", "epoll")
RESULTS_DIR = paths.ROOT / "data" / "results" / "bench"
SOCKPERF_INSTALL = "sudo apt-get install sockperf  (Debian/Ubuntu; or build it from github.com/Mellanox/sockperf)"
IPERF3_INSTALL = "sudo apt-get install iperf3  (Debian/Ubuntu)"
NAN = float("nan")


# ---------------------------------------------------------------------------
# pinning, and running a pinned program to completion


def pinning(server_cpus=None, client_cpus=None) -> tuple[list[int], list[int], str]:
    """Disjoint server and client CPUs (system.default_pinning) unless given; overlap is noted."""
    chosen = Pinning.resolve(server_cpus, client_cpus, allow_overlap=True)
    return chosen.server_cpus, chosen.client_cpus, chosen.note


def _run_pinned(argv: list[str], cpus: list[int], wall_timeout: float, prefix=()) -> subprocess.CompletedProcess:
    """Run argv pinned to `cpus` through the launcher (own process group, death
    signal, pid file), behind `prefix` (a namespace); kill it past `wall_timeout` seconds."""
    child = launcher.spawn(argv, "bench", cpus, prefix=prefix, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = launcher.run_to_end(child, wall_timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"{Path(argv[0]).name} ran longer than {wall_timeout:g} s and was killed",
                       "use a smaller configuration (fewer exchanges, descriptors or seconds)") from None
    return subprocess.CompletedProcess(argv, child.popen.returncode,
                                       stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))


def _echo_load(clients: int, requests: int, warmup: int, engine: str = "events", timeout: float = 10.0) -> LoadSpec:
    """Closed-loop echo of RTT_SIZE bytes; only the events engine leaves a warm-up out."""
    options = {"size": RTT_SIZE, "engine": engine, "warmup": warmup if warmup and engine == "events" else None}
    return LoadSpec(clients, requests, "echo", options, timeout=timeout)


def _loadgen(port: int, cpus: list[int], clients: int, requests: int, warmup: int,
             engine: str = "events", timeout: float = 10.0) -> dict:
    """One closed-loop echo run of the lab's load generator, without perf (the round
    trip is compared with sockperf's, which runs without it too); its JSON summary."""
    load = _echo_load(clients, requests, warmup, engine, timeout)
    done = _run_pinned(load.argv(port), cpus, load.wall_limit() + timeout)
    summary = LoadSpec.summary(done.stdout.encode(), done.stderr, done.returncode)
    if done.returncode != 0:
        raise LabError(f"the load generator reported failures: {done.stderr.strip()[-500:]}",
                       "check that the server is up and serving echo")
    return summary


# ---------------------------------------------------------------------------
# rtt: the lab against sockperf


def find_sockperf() -> str | None:
    """sockperf's path, or None when it is not installed."""
    return shutil.which("sockperf")


def sockperf_path() -> str:
    """sockperf's path, or a LabError saying how to install it."""
    found = find_sockperf()
    if found is None:
        raise LabError("sockperf is not installed, so the lab's round trip has no anchor to compare with",
                       f"install it: {SOCKPERF_INSTALL}")
    return found


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PERCENTILE = re.compile(r"percentile\s+(\d+(?:\.\d+)?)\s*=\s*([\d.]+)")
_AVERAGE = re.compile(r"avg-(rtt|latency)\s*=\s*([\d.]+)")


def parse_sockperf(text: str) -> dict:
    """sockperf ping-pong's summary as {"p50_us", "p99_us", "avg_us", "observations"}.

    With --full-rtt sockperf prints "avg-rtt" and its percentiles are whole
    round trips in usec; without it, "avg-latency" and every figure is half a
    round trip.  Only full round trips are accepted here, so nothing is
    silently halved or doubled."""
    text = _ANSI.sub("", text)
    average = _AVERAGE.search(text)
    percentiles = {float(p): float(v) for p, v in _PERCENTILE.findall(text)}
    if average is None or 50.0 not in percentiles or 99.0 not in percentiles:
        raise LabError(f"sockperf's output has no round-trip summary:\n{text.strip()[-1500:]}",
                       "run the same sockperf command by hand to see what went wrong")
    if average.group(1) != "rtt":
        raise LabError("sockperf reported one-way latency (avg-latency), not round trips",
                       "run sockperf ping-pong with --full-rtt")
    observations = re.search(r"Total (\d+) observations", text)
    return {"p50_us": percentiles[50.0], "p99_us": percentiles[99.0], "avg_us": float(average.group(2)),
            "observations": int(observations.group(1)) if observations else None}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_listening(port: int, child, timeout: float = 5.0, tool: str = "sockperf server --tcp -i 127.0.0.1",
                    prefix=()) -> None:
    """Wait until an anchor tool's server accepts a connection (iperf3's counts it as a test
    that never began, and goes on listening); behind a namespace's `prefix`, until `ss`
    there lists its socket as listening."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.popen.poll() is not None:
            raise LabError(f"`{tool}` exited with status {child.popen.returncode} before listening",
                           f"run `{tool} -p {port}` by hand to see why")
        if prefix:
            listed = subprocess.run([*prefix, "ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True)
            if listed.stdout.strip():
                return
            time.sleep(0.02)
            continue
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise LabError(f"`{tool}` did not listen on port {port} within {timeout:g} s",
                   f"run `{tool} -p {port}` by hand to see why")


def _sockperf_round(sockperf: str, port: int, cpus: list[int], seconds: int) -> dict:
    argv = [sockperf, "ping-pong", "--tcp", "--full-rtt", "-m", str(RTT_SIZE),
            "-i", "127.0.0.1", "-p", str(port), "-t", str(int(seconds))]
    done = _run_pinned(argv, cpus, seconds + 20)
    if done.returncode != 0:
        raise LabError(f"sockperf ping-pong exited with status {done.returncode}:\n{done.stderr.strip()[-1500:]}",
                       "run the same sockperf command by hand to see what went wrong")
    return parse_sockperf(done.stdout + done.stderr)


def rtt(rounds: int = 3, seconds: int = 2, exchanges: int = 20000, engine: str = "events",
        server_cpus=None, client_cpus=None, use_sockperf: bool = True) -> dict:
    """Median and p99 round trips, lab vs sockperf, interleaved over `rounds`.

    Each lab round is `exchanges` ping-pongs (the first 10% left out as
    warm-up); each sockperf round runs `seconds` (sockperf leaves out its own
    warm-up).  The figures are the median over rounds of each round's median
    and p99.  With use_sockperf and no sockperf installed: LabError with the
    install command; use_sockperf=False measures the lab alone."""
    if rounds < 1 or exchanges < 10 or seconds < 1 or seconds != int(seconds):
        raise LabError(f"rounds, exchanges and seconds must be at least 1, 10 and 1, seconds whole "
                       "(sockperf's -t takes whole seconds) "
                       f"(got {rounds}, {exchanges}, {seconds})", "use e.g. rounds=3 exchanges=20000 seconds=2")
    sockperf = sockperf_path() if use_sockperf else None
    server_cpus, client_cpus, note = pinning(server_cpus, client_cpus)
    result = {"kind": "rtt", "size_bytes": RTT_SIZE, "rounds": rounds, "engine": engine,
              "exchanges": exchanges, "sockperf_seconds": seconds if sockperf else None,
              "server_cpus": server_cpus, "client_cpus": client_cpus, "pinning_note": note,
              "lab": [], "sockperf": [], "target": RTT_TARGET}
    lab_server = procs.start_server("epoll", "echo", cpus=server_cpus)
    anchor = None
    try:
        if sockperf:
            port = _free_port()
            anchor = launcher.spawn([sockperf, "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)],
                                    "server", server_cpus, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _wait_listening(port, anchor)
        for _ in range(rounds):
            summary = _loadgen(lab_server.port, client_cpus, 1, exchanges, warmup=max(exchanges // 10, 1),
                               engine=engine)
            result["lab"].append({"p50_us": summary["latency_us"]["p50"], "p99_us": summary["latency_us"]["p99"],
                                  "avg_us": summary["latency_us"]["mean"],
                                  "observations": summary["latency_us"]["samples"]})
            if sockperf:
                result["sockperf"].append(_sockperf_round(sockperf, port, client_cpus, seconds))
    finally:
        lab_server.stop()
        if anchor is not None:
            launcher.stop_child(anchor, timeout=1.0)
    for tool in ("lab", "sockperf"):
        for figure in ("p50_us", "p99_us"):
            values = [r[figure] for r in result[tool]]
            result[f"{tool}_{figure}"] = statistics.median(values) if values else NAN
    result["ratio"] = result["lab_p50_us"] / result["sockperf_p50_us"] if sockperf else NAN
    result["p99_ratio"] = result["lab_p99_us"] / result["sockperf_p99_us"] if sockperf else NAN
    result["verdict"] = ("PASS" if max(result["ratio"], result["p99_ratio"]) <= RTT_TARGET else "MISS") \
        if sockperf else "no anchor"
    return result


def format_rtt(result: dict) -> str:
    lines = [_environment_line(result), "",
             f"round trip, {result['size_bytes']}-byte ping-pong over TCP on 127.0.0.1, one connection, "
             f"{result['rounds']} interleaved round(s):"]
    lines.append(f"  {'':10} {'median us':>10} {'p99 us':>10}   per round (median)")
    for tool, label in (("lab", "lab"), ("sockperf", "sockperf")):
        if result[tool]:
            rounds = ", ".join(f"{r['p50_us']:.1f}" for r in result[tool])
            lines.append(f"  {label:10} {result[f'{tool}_p50_us']:10.1f} {result[f'{tool}_p99_us']:10.1f}   {rounds}")
    lines.append(f"  lab = build/bin/loadgen --engine {result['engine']} -> build/bin/epoll --service echo")
    if result["sockperf"]:
        lines.append("  sockperf = sockperf ping-pong --tcp --full-rtt -m 64 -> sockperf server --tcp")
        lines.append(f"ratio lab/sockperf: p50 {result['ratio']:.3f}, p99 {result['p99_ratio']:.3f}  "
                     f"target both <= {result['target']:.2f}: {result['verdict']}")
    else:
        lines.append(f"sockperf is not installed: no ratio. Install it with: {SOCKPERF_INSTALL}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# throughput: every model at 100 connections


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
    load = _echo_load(clients, requests, warmup=max(clients * requests // 10, 1))
    env = {f"env_{key}": value for key, value in system.environment().items()}
    path = RESULTS_DIR / f"throughput-{env['env_timestamp'].replace(':', '')}.jsonl"
    rows = []
    for model in models:
        server = ServerSpec(model, "echo")
        try:
            measured = measure.point(server, load, pinned)
        except LabError as failure:
            measured = row.fail(row.new(server, load, []), failure.what.splitlines()[0])
        measured.update(bench="throughput", pinning_note=pinned.note, **env)
        if save:
            store.append(path, measured)
        rows.append(measured)
    frame = pd.DataFrame(rows)
    frame.attrs.update(server_cpus=pinned.server_cpus, client_cpus=pinned.client_cpus, pinning_note=pinned.note)
    if save:
        frame.attrs["saved_to"] = str(path)
    return frame


def format_throughput(frame) -> str:
    shown = frame[["model", "throughput_rps", "lat_p50_us", "lat_p99_us", "server_cpu_us_per_request",
                   "counters_source", "error"]]
    table = shown.to_string(index=False, na_rep="not measurable", float_format=lambda v: f"{v:,.1f}")
    clients, requests = frame["clients"].iloc[0], frame["requests"].iloc[0]
    lines = [_environment_line(frame.attrs), "",
             f"closed-loop echo, {clients} connections x {requests} exchanges of {RTT_SIZE} B "
             "(events engine, first 10% warm-up); server CPU per request: task-clock of the server "
             "and every worker process (perf, or /proc) over the requests served:",
             table]
    if frame["server_cpu_us_per_request"].isna().all():
        lines.append("server CPU per request: not measurable on this machine (neither perf nor /proc counted task-clock)")
    if frame.attrs.get("saved_to"):
        lines.append(f"saved to {frame.attrs['saved_to']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# scaling: a worker model at 1, 2, 4 ... workers, the generator never the limit

SCALING_TARGET = 0.7  # the goal: W workers serve at least 0.7 x W times one worker


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
    import os

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
            rates.append(summary["throughput_rps"])
            busiest.append(max(busy) if busy else NAN)
            saturated.append(bool(busy) and min(busy) >= measure.SATURATION)
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
    lines = [_environment_line(result), "",
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


# ---------------------------------------------------------------------------
# upload: one connection's upload goodput against iperf3's single stream


def iperf3_path() -> str:
    """iperf3's path, or a LabError saying how to install it."""
    found = shutil.which("iperf3")
    if not found:
        raise LabError("iperf3 is not installed, so uploads have no ceiling to compare with",
                       f"install it: {IPERF3_INSTALL}")
    return found


def _iperf3_round(iperf3: str, port: int, cpus: list[int], seconds: int, link=None) -> float:
    """One iperf3 client run, one stream, `seconds` whole seconds (iperf3 reads -t 0.5 as 0,
    which means for ever), on loopback or across `link`: the receiver's rate in Gbit/s."""
    if seconds != int(seconds) or seconds < 1:
        raise LabError(f"iperf3 runs whole seconds, at least 1 (got {seconds})", "use seconds=1 or more")
    host = link.server_address if link else "127.0.0.1"
    argv = [iperf3, "-c", host, "-p", str(port), "-t", str(int(seconds)), "-J"]
    done = _run_pinned(argv, cpus, seconds + 20, prefix=link.client_prefix if link else ())
    try:
        return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9
    except (ValueError, KeyError, TypeError):
        raise LabError(f"iperf3 exited with status {done.returncode} without its rate:\n"
                       f"{(done.stdout + done.stderr).strip()[-1500:]}",
                       "run `iperf3 -s` and `iperf3 -c 127.0.0.1` by hand to see what went wrong") from None


class Iperf3Server:
    """`iperf3 -s` pinned to `cpus` on a free port, for as many client rounds as wanted; with
    a `link` (labkit.netlink.Link, made), in its server namespace, the clients in the other."""

    def __init__(self, cpus, link=None):
        self.link = link
        self.port = _free_port() if link is None else 5201  # the namespace is the link's own
        bind = ["-B", link.server_address] if link else []
        self.child = launcher.spawn([iperf3_path(), "-s", *bind, "-p", str(self.port)], "server", cpus,
                                    prefix=link.server_prefix if link else (),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_listening(self.port, self.child, tool="iperf3 -s", prefix=link.server_prefix if link else ())

    def rate(self, cpus, seconds: int = 1) -> float:
        return _iperf3_round(iperf3_path(), self.port, cpus, seconds, link=self.link)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        launcher.stop_child(self.child, timeout=1.0)


def iperf3_ceiling(seconds: int = 1, server_cpus=None, client_cpus=None, link=None) -> float:
    """iperf3's single-stream rate (Gbit/s) on loopback, or across `link` (a labkit.netlink.Link,
    made here for the run if it is not yet): the ceiling one TCP connection reaches on this
    machine with this pinning, for an upload plot's ceiling line."""
    server_cpus, client_cpus, _ = pinning(server_cpus, client_cpus)
    if link is not None and not link.made:
        with link:
            return iperf3_ceiling(seconds, server_cpus, client_cpus, link)
    with Iperf3Server(server_cpus, link) as anchor:
        return anchor.rate(client_cpus, seconds)


def _upload_goodput(port: int, cpus: list[int], size: int, uploads: int) -> float:
    """`uploads` bodies of `size` bytes, back to back on one connection: Gbit/s."""
    load = LoadSpec(1, uploads, "sink", {"size": size, "engine": "events"}, timeout=30)
    done = _run_pinned(load.argv(port), cpus, load.wall_limit() + 10)
    summary = LoadSpec.summary(done.stdout.encode(), done.stderr, done.returncode)
    if done.returncode != 0 or summary.get("goodput_gbit_s") is None:
        raise LabError(f"the upload failed: {done.stderr.strip()[-500:]}", "check that the server serves sink")
    return float(summary["goodput_gbit_s"])


def upload(models=UPLOAD_MODELS, size: int = 10 * 1024 ** 2, uploads: int = 20, rounds: int = 3,
           seconds: int = 1, server_cpus=None, client_cpus=None) -> dict:
    """One connection's upload goodput (Gbit/s) to each model beside iperf3's single stream.

    Each round runs iperf3 for `seconds`, then `uploads` bodies of `size` bytes on one
    connection to each model (started once, pinned like iperf3's server); the figures
    are the medians over rounds.  No perf: tool against tool, as in rtt."""
    if rounds < 1 or uploads < 1 or size < 1 or seconds < 1 or seconds != int(seconds):
        raise LabError(f"rounds, uploads, size and seconds must be positive, seconds whole (iperf3's -t) "
                       f"(got {rounds}, {uploads}, {size}, {seconds})",
                       "use e.g. rounds=3 uploads=20 size=10485760 seconds=1")
    unknown = [m for m in models if m not in build.models()]
    if unknown:
        raise LabError(f"unknown model(s): {', '.join(unknown)}", f"choose among: {', '.join(build.models())}")
    server_cpus, client_cpus, note = pinning(server_cpus, client_cpus)
    result = {"kind": "upload", "size_bytes": size, "uploads": uploads, "rounds": rounds, "seconds": seconds,
              "server_cpus": server_cpus, "client_cpus": client_cpus, "pinning_note": note,
              "iperf3": [], "models": {m: [] for m in models}, "target": UPLOAD_TARGET}
    servers = {}
    try:
        for model in models:
            servers[model] = procs.start_server(model, "sink", cpus=server_cpus)
        with Iperf3Server(server_cpus) as anchor:
            for _ in range(rounds):
                result["iperf3"].append(anchor.rate(client_cpus, seconds))
                for model, server in servers.items():
                    result["models"][model].append(_upload_goodput(server.port, client_cpus, size, uploads))
    finally:
        for server in servers.values():
            server.stop()
    result["iperf3_gbit_s"] = statistics.median(result["iperf3"])
    result["gbit_s"] = {m: statistics.median(rates) for m, rates in result["models"].items()}
    best = max(result["gbit_s"], key=result["gbit_s"].get)
    result["best"] = best
    result["ratio"] = result["gbit_s"][best] / result["iperf3_gbit_s"]
    result["verdict"] = "PASS" if result["ratio"] >= UPLOAD_TARGET else "MISS"
    return result


def format_upload(result: dict) -> str:
    from .params import size_text

    lines = [_environment_line(result), "",
             f"one connection, {result['uploads']} uploads of {size_text(result['size_bytes'])} back to back "
             f"(sink service), beside iperf3's single stream ({result['seconds']:g} s), "
             f"{result['rounds']} interleaved round(s); Gbit/s, median (per round):"]
    lines.append(f"  {'iperf3':10} {result['iperf3_gbit_s']:7.2f}   "
                 + ", ".join(f"{r:.2f}" for r in result["iperf3"]))
    for model, rate in result["gbit_s"].items():
        lines.append(f"  {model:10} {rate:7.2f}   " + ", ".join(f"{r:.2f}" for r in result["models"][model])
                     + f"   {rate / result['iperf3_gbit_s']:.2f}x iperf3")
    lines.append(f"best: {result['best']} at {result['ratio']:.2f}x iperf3; target >= {result['target']:.2f}x: "
                 f"{result['verdict']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# events: ev_bench per backend


def events(descriptors=(100, 1000, 10000), active: int = 1, writes: int = 1000, runs: int = 5,
           backends=BACKENDS, save: bool = True):
    """Time per poll call and per event for each backend and descriptor count: a DataFrame.

    A backend that cannot watch that many descriptors (select beyond
    FD_SETSIZE) gets a row with NaN figures and its refusal in `note`."""
    import pandas as pd

    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise LabError(f"unknown backend(s): {', '.join(unknown)}", f"choose among: {', '.join(BACKENDS)}")
    bad = [n for n in descriptors if n < active]
    if bad or active < 1:
        raise LabError(f"descriptor counts {bad} are below --active {active}",
                       "give descriptor counts at least as large as the active ones")
    system.raise_nofile(max(descriptors) + 64)  # ev_bench raises it too, up to the hard limit
    bin_dir = build.build()
    server_cpus, _, note = pinning()
    rows = []
    for backend in backends:
        program = bin_dir / f"ev_bench_{backend}"
        for count in descriptors:
            argv = [str(program), "--descriptors", str(count), "--active", str(active),
                    "--writes", str(writes), "--runs", str(runs)]
            done = _run_pinned(argv, server_cpus, wall_timeout=120)
            row = {"backend": backend, "descriptors": count, "active": active, "writes": writes,
                   "ns_per_poll": NAN, "ns_per_event": NAN, "note": ""}
            if done.returncode == 0:
                figures = json.loads(done.stdout)
                row.update(ns_per_poll=figures["ns_per_poll"], ns_per_event=figures["ns_per_event"])
            elif done.returncode == 3:  # the backend's own refusal (select past FD_SETSIZE)
                row["note"] = done.stderr.strip().splitlines()[-1]
            else:
                raise LabError(f"{program.name} --descriptors {count} failed (status {done.returncode}):\n"
                               f"{done.stderr.strip()[-1500:]}", "read the message above")
            rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs.update(server_cpus=server_cpus, client_cpus=None, pinning_note=note)
    if save:
        frame.attrs["saved_to"] = str(_save(frame, "events"))
    return frame


def format_events(frame) -> str:
    per_poll = frame.pivot(index="descriptors", columns="backend", values="ns_per_poll")
    per_poll = per_poll[[b for b in BACKENDS if b in per_poll.columns]] / 1000.0
    active, writes = frame["active"].iloc[0], frame["writes"].iloc[0]
    lines = [_prose(_environment_line(frame.attrs)), "",
             _prose(f"ev_bench (libevent's bench.c): {active} active of N watched eventfds, a chain of {writes} "
                    "events per run; microseconds per poll call (median of runs):"),
             per_poll.to_string(na_rep="refused", float_format=lambda v: f"{v:,.2f}"),
             _prose("select and poll pass every watched descriptor to the kernel on each call, so their cost "
                    "grows with N; epoll's follows the active ones.")]
    lines += [_prose(f"note: {n}") for n in frame["note"] if n]
    if frame.attrs.get("saved_to"):
        lines.append(f"saved to {frame.attrs['saved_to']}")
    return "\n".join(lines)


def _prose(text: str, width: int = 100) -> str:
    """A report's sentence folded between words (a notebook would break it mid-word)."""
    return "\n".join(textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False,
                                    break_on_hyphens=False) for line in text.splitlines())


# ---------------------------------------------------------------------------
# environment and saving


def _environment_line(attrs: dict) -> str:
    env = system.environment()
    pinned = attrs.get("pinning") or f"server CPUs {attrs.get('server_cpus')}"
    if attrs.get("client_cpus") is not None:
        pinned += f", client CPUs {attrs.get('client_cpus')}"
    line = (f"machine: {env['cpu_model']}, {env['cores']} cores, kernel {env['kernel']}; pinning: {pinned}; "
            f"labkit {env['labkit_version']} ({env['labkit_commit'] or 'no git'})")
    if attrs.get("pinning_note"):
        line += f"\nnote: {attrs['pinning_note']}"
    return line


def _save(frame, name: str) -> Path:
    """CSV with the environment and pinning in every row, under data/results/bench/."""
    env = system.environment()
    stamped = frame.copy()
    for key in ("kernel", "cpu_model", "cores", "labkit_commit", "timestamp"):
        stamped[key] = env[key]
    for key in ("server_cpus", "client_cpus"):
        stamped[key] = str(frame.attrs.get(key))
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}-{env['timestamp'].replace(':', '')}.csv"
    stamped.to_csv(path, index=False)
    return path



# ---------------------------------------------------------------------------
# `labkit bench rtt | throughput | events` (the parser lives in cli.py)


def run_command(args) -> str:
    """Run the bench `args.bench` names; return the text to print."""
    import sys

    server_cpus, client_cpus = args.server_cpus, args.client_cpus
    if args.bench == "rtt":
        use_sockperf = find_sockperf() is not None
        if not use_sockperf:
            print(f"note: sockperf is not installed, so only the lab's round trip is measured; "
                  f"install it: {SOCKPERF_INSTALL}", file=sys.stderr)
        return format_rtt(rtt(rounds=args.rounds, seconds=args.seconds, exchanges=args.exchanges,
                              engine=args.engine, server_cpus=server_cpus, client_cpus=client_cpus,
                              use_sockperf=use_sockperf))
    if args.bench == "scaling":
        return format_scaling(scaling(model=args.model, workers=args.workers, clients=args.clients or 400,
                                      requests=args.requests or 2000, rounds=args.rounds))
    if args.bench == "upload":
        return format_upload(upload(rounds=args.rounds, seconds=args.seconds, server_cpus=server_cpus,
                                    client_cpus=client_cpus))
    if args.bench == "throughput":
        return format_throughput(throughput(models=args.models, clients=args.clients or 100,
                                            requests=args.requests or 200,
                                            server_cpus=server_cpus, client_cpus=client_cpus))
    return format_events(events(descriptors=args.descriptors, active=args.active, writes=args.writes,
                                runs=args.runs))
