"""rtt: the lab's load generator against the epoll echo server, one connection, ping-pong,
beside sockperf against sockperf's own server: same pinning, same run, interleaved rounds
(A B A B ...) so that drift on the machine hits both.  Target: the lab's median and p99
round trips within RTT_TARGET x sockperf's."""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess

from labkit import launcher, procs
from labkit.errors import LabError

from .common import (NAN, RTT_SIZE, echo_load, environment_line, free_port, pinning, run_loadgen, run_tool,
                     wait_listening)

RTT_TARGET = 1.15  # the target: lab round trip / sockperf round trip
SOCKPERF_INSTALL = "sudo apt-get install sockperf  (Debian/Ubuntu; or build it from github.com/Mellanox/sockperf)"


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


def _lab_round(port: int, cpus: list[int], exchanges: int, engine: str) -> dict:
    """One connection's `exchanges` ping-pongs with the lab's load generator, the first 10%
    left out as warm-up, without perf (sockperf runs without it too): its round trips."""
    load = echo_load(1, exchanges, warmup=max(exchanges // 10, 1), engine=engine)
    run = run_loadgen(load, port, cpus)
    if run.returncode != 0:
        raise LabError(f"the load generator reported failures: {run.stderr.strip()[-500:]}",
                       "check that the server is up and serving echo")
    latency = run.summary["latency_us"]
    return {"p50_us": latency["p50"], "p99_us": latency["p99"], "avg_us": latency["mean"],
            "observations": latency["samples"]}


def _sockperf_round(sockperf: str, port: int, cpus: list[int], seconds: int) -> dict:
    argv = [sockperf, "ping-pong", "--tcp", "--full-rtt", "-m", str(RTT_SIZE),
            "-i", "127.0.0.1", "-p", str(port), "-t", str(int(seconds))]
    done = run_tool(argv, cpus, seconds + 20)
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
            port = free_port()
            anchor = launcher.spawn([sockperf, "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)],
                                    "server", server_cpus, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_listening(port, anchor)
        for _ in range(rounds):
            result["lab"].append(_lab_round(lab_server.port, client_cpus, exchanges, engine))
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
    lines = [environment_line(result), "",
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
