"""The battery: what a server must survive before its numbers mean anything.

A case is a row of CASES (cases.py's, then resources.py's): its group, the service it
runs, what an independent client (plain Python sockets, never the lab's load generator)
does to a fresh server, and what to fix when it fails.  The lab's load sends one request
and waits for its reply, so none of this happens in a measurement; a server that
mishandles it is wrong in every measurement anyway.  Each case gets a server of its own, started from the binary
capstone.build_text() made of the text under test, and after the case that server must
still be alive: a crash fails the case whatever the client saw.

The files: cases.py (what a server answers: the cases, their groups and sizes),
resources.py (what it uses: CPU while idle, descriptors and memory as connections come
and go), refusals.py (what this host refuses a server: such a case is not measurable here),
client.py (plain sockets, every wait bounded), spin_probe.py (how much CPU a loop that only
spins gets here now: the yardstick of the spin verdict), and this one (a fresh server per case,
the report, the checks).  tests/exercises/test_capstone.py runs the battery on lab models whose
behaviour the rest of the suite asserts (threaded, epoll, pool and uring pass every case;
iterative fails only the clients behind a silent one), on the template's reference
solution, and on classic bugs.

Invariants: every wait is bounded (Size.timeout); no server outlives its case; a
failure names what the client saw and what to fix, never only "assert".
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..launcher import how_it_ended
from . import cases as _protocol_cases, client, refusals, resources
from .cases import FD_LIMIT, GROUPS, HIDDEN, SANITIZED_GROUPS, VISIBLE, Case, Size
from .client import CaseFailed, said_by

__all__ = ["CASES", "GROUPS", "HIDDEN", "VISIBLE", "Case", "CaseFailed", "Report", "Result", "Size", "cases",
           "check", "run", "run_binaries", "run_case"]

CASES = _protocol_cases.CASES + resources.CASES  # what it answers (cases.py), then what it uses (resources.py)
SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=66",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=67"}
SAN_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


@dataclass
class Result:
    case: Case
    passed: bool
    seconds: float | None        # None: never run (the message says why)
    message: str = ""
    sanitized: bool = False
    unmeasurable: bool = False  # the machine cannot run it (the message says why): no verdict
    waiting_for: str = ""       # ... because it runs this unsolved exercise's stub (labkit.stubs)
    earlier: bool = False       # passed on an earlier run of the same text, in this process (run())
    measured: str = ""          # what a passed case measured of the server (the resource cases say)

    @property
    def verdict(self) -> str:
        return "passed" if self.passed else \
            f"not measurable until exercise {self.waiting_for}" if self.waiting_for else \
            "not measurable here" if self.unmeasurable else "FAILED"

    @property
    def label(self) -> str:
        return f"{self.case.name} (ASan+UBSan)" if self.sanitized else self.case.name


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def failed(self) -> list[str]:
        return [r.label for r in self.results if not r.passed]

    @property
    def headline(self) -> str:
        """"9 of 19 cases passed", and how many wait for which exercise, apart."""
        waiting = [r for r in self.results if r.waiting_for]
        labels = " and ".join(sorted({r.waiting_for for r in waiting}))
        return (f"{sum(r.passed for r in self.results)} of {len(self.results)} cases passed"
                + (f"; {len(waiting)} not measurable until exercise {labels}" if waiting else ""))

    def group(self, name: str) -> list[Result]:
        return [r for r in self.results if (r.case.group if not r.sanitized else "sanitizers") == name]

    def reasons(self) -> list[str]:
        """Why cases were not run, each sentence once (every case that waits for exercise 1.1
        waits for the same reason; the report says it once, above its table)."""
        return list(dict.fromkeys(r.message for r in self.results if r.seconds is None))

    def _repr_html_(self) -> str:
        import html

        rows = []
        for r in self.results:
            group = "sanitizers" if r.sanitized else r.case.group
            colour = "#1a7f37" if r.passed else "#6e7781" if r.unmeasurable else "#cf222e"
            mark = f"<b style='color:{colour}'>{r.verdict}</b>"  # the words say it; the colour only repeats
            fix = "" if r.unmeasurable else \
                f"<p style='margin:.3em 0 0 0'><b>what to fix:</b> {html.escape(r.case.fix)}</p>"
            said = html.escape(r.measured) if r.passed else "see why above" if r.seconds is None else \
                f"<pre style='white-space:pre-wrap;word-break:normal;margin:0'>{html.escape(r.message)}</pre>{fix}"
            rows.append(f"<tr><td>{group}</td><td>{html.escape(r.label)}</td><td>{mark}</td>"
                        f"<td>{_seconds(r)}</td><td>{said}</td></tr>")
        why = "".join(f"<p><b>not run:</b> {html.escape(reason)}</p>" for reason in self.reasons())
        return (f"<p><b>{html.escape(self.headline)}</b></p>{why}<table><caption>the battery's cases, one a row"
                "</caption><tr><th>group</th><th>case</th><th>result</th><th>time</th><th>what happened</th></tr>"
                f"{''.join(rows)}</table>")

    def __str__(self) -> str:
        lines = [self.headline] + [f"not run: {reason}" for reason in self.reasons()]
        for r in self.results:
            mark = "ok  " if r.passed else "n/a " if r.unmeasurable else "FAIL"
            lines.append(f"  {mark} {r.label} ({_seconds(r)})" + (f": {r.measured}" if r.passed and r.measured else ""))
            if not r.passed and r.seconds is not None:
                lines += [f"       {line}" for line in r.message.splitlines()[:12]]
                lines += [] if r.unmeasurable else [f"       what to fix: {r.case.fix}"]
        return "\n".join(lines)

    __repr__ = __str__  # the text a notebook shows beside the table (text/plain): the same words


def _seconds(result: Result) -> str:
    return "not run" if result.seconds is None else \
        f"{result.seconds:.2f} s" + (", an earlier run of this text" if result.earlier else "")


# ---------------------------------------------------------------------------
# running cases


def _env(sanitize: bool) -> dict | None:
    return dict(os.environ, **SAN_ENV) if sanitize else None


def run_case(binary: Path, case: Case, size: Size = VISIBLE, sanitize: bool = False,
             workers: int | None = 2) -> Result:
    """`case` against a fresh server started from `binary`; the server must outlive the case
    (and, built with sanitizers, report nothing)."""
    from .. import stubs
    from ..scratch import ScratchServer
    from ..procs import takes_workers

    wait = stubs.blocking_service(case.service)
    if wait is not None:  # the lab's stub would answer, not the student's server: no verdict
        return Result(case, False, None, wait.sentence, sanitize, unmeasurable=True, waiting_for=wait.exercise.label)
    refused = refusals.io_uring_refused() if refusals.uses_io_uring(binary) else None
    if refused is not None:  # a correct io_uring server cannot start here: no verdict
        return Result(case, False, None, refused, sanitize, unmeasurable=True)
    started = time.monotonic()
    args = ["--workers", str(workers)] if workers and takes_workers(binary) else []
    prefix = ["prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", "--"] if case.server == "fd_limit" else []
    if sanitize:
        room = refusals.room_for_asan()
        if isinstance(room, str):
            return Result(case, False, None, room, sanitize, unmeasurable=True)
        prefix = room + prefix
    label = "mine (your mine.c, ASan+UBSan)" if sanitize else "mine (your mine.c)"
    try:
        server = ScratchServer(binary, label, case.service, ready_timeout=10.0 if sanitize else 5.0, args=args,
                               prefix=prefix, env=_env(sanitize))
    except AssertionError as failure:
        return Result(case, False, time.monotonic() - started, str(failure), sanitize)
    message = measured = ""
    try:
        if case.server == "sigterm":
            message = _sigterm(server, case, size)
        else:
            try:
                with client.watching(server.port, server.pid):
                    said = case.run(server.port, size, *([server] if case.server in ("fd_limit", "watched") else []))
                measured = said if isinstance(said, str) else ""
            except (AssertionError, OSError) as failure:
                message = said_by(failure)
                # a server that exits closes its sockets before it can be reaped, so its client may
                # see the reset first: a moment for its exit and last words to be the message
                server.server.exit_status(within=0.5)
            died = server.died()
            stderr = server.server.stderr_text() if died else ""
            if any(marker in stderr for marker in SAN_MARKERS):  # its report's head, not the shadow bytes' tail
                died = died.split(":\n", 1)[0] + ", the sanitizers reporting (the first lines):\n" + \
                    _first_report(stderr)
            if died:
                message = (message + "\n" if message else "") + f"the server is gone{died}"
    finally:
        if server.server.returncode is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                server.server.stop(timeout=1.0)
        if sanitize and not message:
            report = server.server.stderr_text()
            if any(marker in report for marker in SAN_MARKERS):
                message = "the sanitizers reported (the first lines):\n" + _first_report(report)
    return Result(case, not message, time.monotonic() - started, message, sanitize,
                  measured="" if message else measured)


def _sigterm(server, case: Case, size: Size) -> str:
    try:
        socks = case.run(server.port, size)
    except (AssertionError, OSError) as failure:
        return said_by(failure)
    try:
        os.kill(server.server.pid, signal.SIGTERM)
        signalled = time.monotonic()
        status = server.server.exit_status_unless_stuck(within=1.0)
        if status is None:  # a busy machine's delays not counted: see labkit.busy_machine
            return (f"the server was still running {time.monotonic() - signalled:.1f} s after SIGTERM, with 5 "
                    "clients connected")
        if status != 0:
            stderr = server.server.stderr_text().strip()
            return f"after SIGTERM the server {how_it_ended(status)}, not 0" + \
                (f":\n{stderr[-800:]}" if stderr else "")
        server.server.returncode = 0
        return ""
    finally:
        for sock in socks:
            sock.close()


def _first_report(stderr: str, lines: int = 12) -> str:
    kept = stderr.splitlines()
    start = next((i for i, line in enumerate(kept) if any(m in line for m in SAN_MARKERS)), 0)
    return "\n".join(kept[start:start + lines])


def cases(groups=None) -> list[tuple[Case, bool]]:
    """(case, sanitized) for `groups` (default: all), in GROUPS' order."""
    wanted = list(GROUPS) if groups is None else [groups] if isinstance(groups, str) else list(groups)
    unknown = [g for g in wanted if g not in GROUPS]
    if unknown:
        from ..errors import LabError

        raise LabError(f"no battery group {', '.join(map(repr, unknown))}", f"use one of {', '.join(GROUPS)}")
    chosen = []
    for group in GROUPS:
        if group not in wanted:
            continue
        if group == "sanitizers":
            chosen += [(case, True) for case in CASES
                       if case.group in SANITIZED_GROUPS or case.name in resources.SANITIZED]
        else:
            chosen += [(case, False) for case in CASES if case.group == group]
    return chosen


def sanitized_phrase() -> str:
    """What the ASan+UBSan build runs again, in the words of the capstone's contract
    (csrc/capstone/mine.c's header, held to it by a test): SANITIZED_GROUPS, then the
    come-and-go cases of resources.SANITIZED."""
    words = [{"resets": "reset"}.get(group, group) for group in SANITIZED_GROUPS]
    words += ["come-and-go"] if resources.SANITIZED else []
    return f"the {', '.join(words[:-1])} and {words[-1]} cases"


def run_binaries(plain: Path | None, sanitized: Path | None, groups=None, size: Size = VISIBLE,
                 workers: int | None = 2) -> Report:
    """The battery on built binaries (either may be None when no case of its kind is chosen)."""
    report = Report()
    for case, sanitize in cases(groups):
        report.results.append(run_case(sanitized if sanitize else plain, case, size, sanitize, workers))
    return report


# (the text's digest, case, sanitized, size) -> a passed result, in this process.  Notebook
# 07's checks follow its battery run on the same `my_server`: a case that passed on that
# text is not run again (an edited server is another text).  A failure is never kept: run
# again, the case gets a fresh try.
_PASSED: dict[tuple, Result] = {}


def run(source_text: str, groups=None, hidden: bool = False) -> Report:
    """Build `source_text` as the model `mine` (plain, and with ASan + UBSan when the
    sanitizers group is chosen) and run the battery's `groups` (default: all) on it; a
    case this process saw pass on the same text is reported as passed then (_PASSED)."""
    import dataclasses
    import hashlib

    from .. import capstone

    size = HIDDEN if hidden else VISIBLE
    digest = hashlib.sha256(source_text.encode()).hexdigest()
    chosen = [(case, sanitize, (digest, case.name, sanitize, size)) for case, sanitize in cases(groups)]
    todo = [sanitize for _, sanitize, key in chosen if key not in _PASSED]
    plain = capstone.build_text(source_text) if False in todo else None
    sanitized = capstone.build_text(source_text, sanitize=True) if True in todo else None
    report = Report()
    for case, sanitize, key in chosen:
        if key in _PASSED:
            report.results.append(dataclasses.replace(_PASSED[key], earlier=True))
            continue
        result = run_case(sanitized if sanitize else plain, case, size, sanitize)
        if result.passed:
            _PASSED[key] = result
        report.results.append(result)
    return report


def check(source_text: str, group: str, hidden: bool = False) -> str:
    """Assert that every case of `group` passes; the failure names each failed case, what
    its client saw and what to fix (for a notebook's check).  Returns the cases passed,
    for the check's message (the feedback page lists them)."""
    from ..errors import BuildError, LabError

    try:
        report = run(source_text, group, hidden)
    except BuildError as failed_build:  # the server's fault, not the check's: a failure, with gcc's words
        raise AssertionError(str(failed_build)[-4000:]) from None
    unmeasurable = [r for r in report.results if r.unmeasurable]
    failed = [r for r in report.results if not r.passed and not r.unmeasurable]
    if failed:  # the server's own failures: a failure, whatever else could not be measured
        passed = [r.label for r in report.results if r.passed]
        raise AssertionError("\n".join(f"{r.label}: {r.message}\n  what to fix: {r.case.fix}" for r in failed)
                             + (f"\npassed: {'; '.join(passed)}" if passed else "")
                             + "".join(f"\n{r.label}: {r.verdict}" for r in unmeasurable))
    if unmeasurable:  # the machine's limit or the lab's stub, not the student's server: an error, never a failure
        first = unmeasurable[0]
        raise LabError(f"{first.label}: {first.message}",
                       f"solve exercise {first.waiting_for} first, then run this check again" if first.waiting_for
                       else "run it on a host that allows what the message names")
    return f"{len(report.results)} case(s) passed: " + "; ".join(r.label for r in report.results)
