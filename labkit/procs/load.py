"""The load generator, run: its spec (loadgen's flags) turned into an argv in one place, run
pinned under `perf stat` (getrusage's counts where perf cannot), bounded in wall time, and
its one JSON summary read back."""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from .. import build, launcher
from ..errors import ClientFailed, LabError
from .argv import exact, flag_words
from .limits import ensure_nofile
from .pinning import check_cpus

# How long past its own --timeout the client may run before it is killed.
CLIENT_WALL_MARGIN_S = 10.0
# Bodies move at least this fast, even through a busy-polling server on one shared CPU.
PESSIMISTIC_BYTES_PER_S = 50e6


@dataclass(frozen=True)
class LoadSpec:
    """What the load generator does: `loadgen --clients N --service S --timeout T
    [--requests R] [--<option> <value> ...]`, and how to read what it prints."""

    clients: int
    requests: int = 1  # per connection; an open loop (a `duration` option) runs for its duration instead
    service: str = "top"
    options: dict = field(default_factory=dict)  # loadgen's other flags: k, size, engine, rate, duration, warmup, idle
    timeout: float = 60.0  # bounds each exchange inside loadgen
    sanitize: bool = False

    @property
    def idle(self) -> int:
        return int(self.options.get("idle") or 0)

    def check(self) -> None:
        if self.clients < 1 or self.requests < 1:
            raise LabError(f"clients and requests must be at least 1 (got {self.clients}, {self.requests})",
                           "use 1 or more clients, each sending 1 or more requests")

    def argv(self, port: int, host: str = "127.0.0.1") -> list[str]:
        argv = [str(build.binary(build.LOADGEN, sanitize=self.sanitize)), "--port", str(port),
                "--host", host, "--clients", str(self.clients), "--service", self.service,
                "--timeout", exact(self.timeout)]
        if self.options.get("duration") is None:
            argv += ["--requests", str(self.requests)]
        for flag, value in self.options.items():
            argv += flag_words(flag, value)
        return argv

    def wall_limit(self) -> float:
        """How long the whole run may take: the open loop's duration, or for a closed
        loop the exchanges at a pessimistic 1,000 per second and their bodies at
        50 MB/s, plus connecting and one exchange timeout."""
        connecting = (self.clients + self.idle) / 1000.0
        duration = self.options.get("duration")
        if duration:
            return float(duration) + connecting + self.timeout
        exchanges = self.clients * self.requests
        body_bytes = exchanges * int(self.options.get("size") or 0) if self.service != "top" else 0
        return exchanges / 1000.0 + body_bytes / PESSIMISTIC_BYTES_PER_S + connecting + self.timeout

    @staticmethod
    def summary(stdout: bytes, stderr: str, returncode: int) -> dict:
        """loadgen's one JSON object; a LabError when it refused its arguments (every point
        would), ClientFailed when it ended without one (this run broke down)."""
        if returncode == 2:
            raise LabError(f"the load generator refused its arguments: {stderr.strip()}",
                           "check the client parameters (clients, requests, service, k, size)")
        try:
            summary = json.loads(stdout)
            if not isinstance(summary, dict):
                raise ValueError("not a JSON object")
            return summary
        except ValueError:
            raise ClientFailed(
                f"the load generator exited with status {returncode} without its JSON summary\n"
                f"--- its stderr ---\n{stderr.strip()[-2000:] or '(empty)'}",
                "read the message above; a crash here is a bug in csrc/loadgen",
            ) from None


@dataclass
class ClientRun:
    """One run of the load generator."""

    summary: dict
    counters: dict
    counters_source: str  # "perf", or "rusage" when perf could not count
    cpus: list[int] | None
    returncode: int
    stderr: str
    wall_s: float
    note: str = field(default="")


def run_load(load: LoadSpec, port: int, cpus=None, events=None, host: str = "127.0.0.1",
             prefix: list[str] = ()) -> ClientRun:
    """Run the load generator pinned to `cpus` under `perf stat` (its counters, or
    getrusage's without perf) against `host:port`.

    Past load.wall_limit() + CLIENT_WALL_MARGIN_S the client's process group is
    killed and ClientFailed raised (as it is when the generator ends without its
    summary); arguments it refuses are a plain LabError."""
    from .. import perf

    load.check()
    cpus = check_cpus(cpus)
    ensure_nofile(load.clients, load.idle)
    # Under perf, loadgen is perf's child, not ours: it gets its own death signal.
    command = launcher.death_signal_prefix() + load.argv(port, host)
    wall_limit = load.wall_limit() + CLIENT_WALL_MARGIN_S
    # perf's counts go to an unlinked file: nothing is left on disk even if we are killed.
    with tempfile.TemporaryFile(prefix="labkit-client-perf-") as perf_output:
        wrapped = perf.wrap_command(command, perf_output, events)
        under_perf = wrapped != command
        started = time.monotonic()
        child = launcher.spawn(wrapped, "client", cpus, prefix=prefix, pass_fds=(perf_output.fileno(),),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            used_cpus = sorted(os.sched_getaffinity(child.pid))  # read back: what it really got
        except OSError:  # already finished
            used_cpus = cpus
        try:
            stdout, stderr = launcher.run_to_end(child, wall_limit)
        except subprocess.TimeoutExpired:
            raise ClientFailed(
                f"the load generator ran longer than {wall_limit:g} s and was killed",
                "give it a larger timeout, or fewer clients or requests",
            ) from None
        wall_s = time.monotonic() - started
        stderr_text = stderr.decode("utf-8", "replace")
        summary = LoadSpec.summary(stdout, stderr_text, child.popen.returncode)
        note = ""
        if under_perf:
            counted = perf.read_output(perf_output, events)
            # Where perf could not count (context switches at paranoid 2), getrusage can.
            counters = perf.fill_missing(counted, perf.rusage_counters(summary["rusage"]))
            source = "perf"
            filled = [e for e in counters if not math.isnan(counters[e]) and math.isnan(counted[e])]
            if filled:
                note = f"client {', '.join(filled)} from the load generator's getrusage (perf could not count them)"
        else:
            counters = perf.rusage_counters(summary["rusage"])
            source = "rusage"
            note = "perf could not count the client; its counters come from the load generator's getrusage"
    return ClientRun(summary, counters, source, used_cpus, child.popen.returncode, stderr_text, wall_s, note)
