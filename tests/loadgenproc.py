"""Run the lab's load generator (csrc/loadgen) for a test: the suite's one way to run it.

    code, report, stderr = loadgenproc.run(Loadgen(binary(), "events"), "--port", port, ...)
    report = loadgenproc.ok(binary(), "--port", port, "--service", "sink")  # exit 0: its JSON

A run's stdout holds exactly one JSON line or nothing (report None), and a sanitizer's
report on stderr fails the test.  binary() is build/bin/loadgen made from the current
source (serverproc's one build per test run), build/san/bin/loadgen with LOADGEN_SAN=1 or
san=True, or $LOADGEN (a build of your own, to try a change) when san is not given.
"""

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import serverproc

ENGINES = ["threads", "events"]
RUN_TIMEOUT = 60  # seconds; no test's run comes near it
SAN_MARKERS = (*serverproc.SAN_MARKERS, "WARNING: ThreadSanitizer")


def binary(san: bool | None = None) -> Path:
    """The load generator to test: $LOADGEN, else the (sanitizer) build of the current source."""
    if san is None:
        if os.environ.get("LOADGEN"):
            return Path(os.environ["LOADGEN"])
        san = os.environ.get("LOADGEN_SAN") == "1"
    return serverproc.bin_dir(san, "loadgen") / "loadgen"


@dataclass(frozen=True)
class Loadgen:
    """The binary and the engine a test runs it with (None: the binary's default)."""
    path: Path
    engine: str | None = None

    def argv(self) -> list[str]:
        return [str(self.path)] + (["--engine", self.engine] if self.engine else [])


def run(loadgen, *args, preexec_fn=None, timeout=RUN_TIMEOUT):
    """Run `loadgen` (a Loadgen or a path) with `args`; (exit code, parsed JSON or None, stderr)."""
    command = loadgen.argv() if isinstance(loadgen, Loadgen) else [str(loadgen)]
    proc = subprocess.run([*command, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec_fn)
    if any(mark in proc.stderr for mark in SAN_MARKERS):
        pytest.fail(f"sanitizer report:\n{proc.stderr}", pytrace=False)
    report = json.loads(proc.stdout) if proc.stdout.strip() else None
    if report is not None:
        assert proc.stdout.count("\n") == 1, "stdout must hold exactly one JSON line"
    return proc.returncode, report, proc.stderr


def ok(loadgen, *args, timeout=RUN_TIMEOUT) -> dict:
    """The JSON report of a run that must exit 0 (its stderr in the failure if not)."""
    code, report, stderr = run(loadgen, *args, timeout=timeout)
    assert code == 0 and report is not None, stderr
    return report
