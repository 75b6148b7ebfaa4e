"""What every bench shares: the pinning, running an anchor tool or the lab's load generator
to the end through the launcher, waiting for an anchor's server to listen, and the report's
first line (the machine, the kernel, the pinning).  Saved rows go through labkit.store, as
JSON Lines under data/results/bench/, each carrying the environment it was measured in."""

from __future__ import annotations

import socket
import subprocess
import textwrap
import time
from pathlib import Path

from labkit import launcher, paths, procs, system
from labkit.errors import LabError
from labkit.procs import LoadSpec, Pinning

RESULTS_DIR = paths.RESULTS / "bench"
RTT_SIZE = 64  # bytes per echo message, for every tool
NAN = float("nan")


def pinning(server_cpus=None, client_cpus=None) -> tuple[list[int], list[int], str]:
    """Disjoint server and client CPUs (system.default_pinning) unless given; overlap is noted."""
    chosen = Pinning.resolve(server_cpus, client_cpus, allow_overlap=True)
    return chosen.server_cpus, chosen.client_cpus, chosen.note


def run_tool(argv: list[str], cpus: list[int], wall_timeout: float, prefix=()) -> subprocess.CompletedProcess:
    """Run an anchor tool (sockperf, iperf3, ev_bench) to its end, started by the launcher like
    every child (pinned to `cpus`, own process group, death signal, pid file), behind `prefix`
    (a namespace); killed past `wall_timeout` seconds."""
    child = launcher.spawn(argv, "bench", cpus, prefix=prefix, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = launcher.run_to_end(child, wall_timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"{Path(argv[0]).name} ran longer than {wall_timeout:g} s and was killed",
                       "use a smaller configuration (fewer exchanges, descriptors or seconds)") from None
    return subprocess.CompletedProcess(argv, child.popen.returncode,
                                       stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))


def run_loadgen(load: LoadSpec, port: int, cpus: list[int]) -> procs.ClientRun:
    """The lab's load generator against `port`, through procs.run_load, without perf: it counts
    no events here (events=()), so nothing wraps it; tool against tool, as the anchors run."""
    return procs.run_load(load, port, cpus=cpus, events=())


def echo_load(clients: int, requests: int, warmup: int, engine: str = "events", timeout: float = 10.0) -> LoadSpec:
    """Closed-loop echo of RTT_SIZE bytes; only the events engine leaves a warm-up out."""
    options = {"size": RTT_SIZE, "engine": engine, "warmup": warmup if warmup and engine == "events" else None}
    return LoadSpec(clients, requests, "echo", options, timeout=timeout)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for an anchor tool's server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, child, timeout: float = 5.0, tool: str = "sockperf server --tcp -i 127.0.0.1",
                   prefix=(), probe: bool = True) -> None:
    """Wait until an anchor tool's server listens on `port`: until a connection to it is
    accepted, or, behind a namespace's `prefix` or with probe=False, until `ss` lists its
    socket as listening (iperf3 counts a probe connection as a test, and resets whoever
    connects while it closes and reopens its listener after one: see Iperf3Server)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.popen.poll() is not None:
            raise LabError(f"`{tool}` exited with status {child.popen.returncode} before listening",
                           f"run `{tool} -p {port}` by hand to see why")
        if prefix or not probe:
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


def environment_columns() -> dict:
    """The machine, kernel, lab version and time, as every saved row carries them (env_kernel, ...)."""
    return {f"env_{key}": value for key, value in system.environment().items()}


def results_file(name: str, environment: dict) -> Path:
    """Where a bench run's rows go: data/results/bench/<name>-<time>.jsonl, read back by labkit.store.load."""
    return RESULTS_DIR / f"{name}-{environment['env_timestamp'].replace(':', '')}.jsonl"


def environment_line(attrs: dict) -> str:
    """A report's first line: the machine, the kernel, the pinning and the lab's version."""
    env = system.environment()
    pinned = attrs.get("pinning") or f"server CPUs {attrs.get('server_cpus')}"
    if attrs.get("client_cpus") is not None:
        pinned += f", client CPUs {attrs.get('client_cpus')}"
    line = (f"machine: {env['cpu_model']}, {env['cores']} cores, kernel {env['kernel']}; pinning: {pinned}; "
            f"labkit {env['labkit_version']} ({env['labkit_commit'] or 'no git'})")
    if attrs.get("pinning_note"):
        line += f"\nnote: {attrs['pinning_note']}"
    return line


def prose(text: str, width: int = 100) -> str:
    """A report's sentence folded between words (a notebook would break it mid-word)."""
    return "\n".join(textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False) for line in text.splitlines())
