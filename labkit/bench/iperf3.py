"""upload: one connection uploading 10 MB bodies to each server model (the sink service),
beside iperf3's single TCP stream: same pinning, interleaved rounds.  Target: the best
model's goodput at UPLOAD_TARGET x iperf3's or better.  iperf3_ceiling is the same anchor
alone, on loopback or across a labkit.netlink.Link: the ceiling line of an upload figure."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess

from labkit import build, launcher, procs
from labkit.errors import LabError
from labkit.procs import LoadSpec

from .common import environment_line, free_port, pinning, run_loadgen, run_tool, wait_listening

UPLOAD_TARGET = 0.9  # the issue's target: best model's upload goodput / iperf3's single stream
UPLOAD_MODELS = ("threaded", "busypoll", "aio", "select", "epoll", "uring")
IPERF3_INSTALL = "sudo apt-get install iperf3  (Debian/Ubuntu)"


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
    done = run_tool(argv, cpus, seconds + 20, prefix=link.client_prefix if link else ())
    try:
        return json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9
    except (ValueError, KeyError, TypeError):
        raise LabError(f"iperf3 exited with status {done.returncode} without its rate:\n"
                       f"{(done.stdout + done.stderr).strip()[-1500:]}",
                       "run `iperf3 -s` and `iperf3 -c 127.0.0.1` by hand to see what went wrong") from None


class Iperf3Server:
    """`iperf3 -s --one-off` pinned to `cpus`, started afresh for each client round; with a
    `link` (labkit.netlink.Link, made), in its server namespace, the clients in the other.

    One server per round, because iperf3's server closes its listening socket after every
    test and opens a new one (cleanup_server in iperf_server_api.c): a client that connects
    in between is reset ("control message: Connection reset by peer").  For the same reason
    the server is known to listen when `ss` lists it, never by connecting to it, which iperf3
    would count as a test."""

    def __init__(self, cpus, link=None):
        self.cpus, self.link = cpus, link
        self.port = free_port() if link is None else 5201  # the namespace is the link's own
        self.child = None

    def rate(self, cpus, seconds: int = 1) -> float:
        """One client round of `seconds` against a server started for it: Gbit/s."""
        link = self.link
        bind = ["-B", link.server_address] if link else []
        self.child = launcher.spawn([iperf3_path(), "-s", "--one-off", *bind, "-p", str(self.port)], "server",
                                    self.cpus, prefix=link.server_prefix if link else (),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_listening(self.port, self.child, tool="iperf3 -s", prefix=link.server_prefix if link else (),
                           probe=False)
            return _iperf3_round(iperf3_path(), self.port, cpus, seconds, link=link)
        finally:
            self._stop()

    def _stop(self):
        if self.child is not None:
            launcher.stop_child(self.child, timeout=1.0)
            self.child = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stop()


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
    run = run_loadgen(load, port, cpus)
    if run.returncode != 0 or run.summary.get("goodput_gbit_s") is None:
        raise LabError(f"the upload failed: {run.stderr.strip()[-500:]}", "check that the server serves sink")
    return float(run.summary["goodput_gbit_s"])


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
    from labkit.params import size_text

    lines = [environment_line(result), "",
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
