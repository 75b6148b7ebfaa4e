"""The grading checks, run apart from the student: `python -m labkit.instructor.grading.judge`.

The grader starts this process after the student's notebook has run and every
process of the student's uid is gone, under another uid, behind the same walls
(labkit.instructor.sandbox.isolation).  It reads from stdin the instructor's check
code (visible and hidden: it is never on disk where a grading uid could read
it) and the values the student's run exported (labkit.instructor.basics.exports);
it runs each check on those values and writes one JSON line per check to the
file descriptor the grader opened for it.  Nothing of the student's runs in
this process: a C exercise's code runs in processes of its own
(c_exercises), this one is not dumpable (no ptrace, no /proc/PID/fd or mem
for its own uid) and its results descriptor is closed on exec.  Its lab is a graded
run's (sandbox.prepare_checkdir: the edition's C with the functions the run adopted):
the student's C it builds can read that lab, and a check's message quotes what it printed,
so no solution is in it in any form.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

from ...exercises import checks
from ..basics import exports
from ...exercises.checks import ERROR

PR_SET_DUMPABLE = 4


class RecordingChecker(checks.Checker):
    """A Checker whose results go to the grader's descriptor, and only for `allowed` checks."""

    def __init__(self, notebook: str, out, allowed: set[str]):
        super().__init__(notebook)
        self.out = out
        self.allowed = allowed
        self.sent: set[str] = set()

    def publish(self, result: checks.CheckResult) -> None:
        if result.check in self.allowed and result.check not in self.sent:
            self.out.write(json.dumps(result.record()) + "\n")
            self.out.flush()
            self.sent.add(result.check)


def _values(exported: dict | None) -> dict:
    return {name: exports.decode(name, tagged) for name, tagged in (exported or {}).items()}


def run_group(group: dict, exported: dict | None, notebook: str, out) -> None:
    """Run one instructor check cell (or answer call) on the values exported for it."""
    names = set(group["checks"])
    ex = RecordingChecker(notebook, out, names)
    namespace = {"__name__": "__labkit_check__", **_values(exported), "ex": ex}
    try:
        exec(compile(group["source"], f"<check {', '.join(group['checks'])}>", "exec"), namespace)  # noqa: S102
    except Exception as problem:  # noqa: BLE001 -- e.g. a name the notebook never defined
        for name in group["checks"]:
            if name not in ex.sent:
                ex.publish(checks.CheckResult(notebook, name, 0, 0, ERROR,
                                              f"{type(problem).__name__}: {problem}", False))


def begin():
    """An isolated process's first steps (sandbox.run_isolated's: the checks, the
    leaderboard): no ptrace nor core of it, nothing imported from its working directory, its
    limits lowered; its payload (stdin) and the results file root opened for it alone."""
    from ..sandbox.inside import first_to_go, lower_limits

    first_to_go()  # while its /proc files are still its own (lower_limits reads it back)
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != os.getcwd()]
    spec = json.loads(sys.stdin.read())
    lower_limits(spec)
    results_fd = spec["results_fd"]
    os.set_inheritable(results_fd, False)
    return spec, os.fdopen(results_fd, "w", encoding="utf-8")


def main() -> int:
    spec, out = begin()
    by_check = exports.read(spec["exports"])
    for group in spec["groups"]:
        exported = next((by_check[name] for name in group["checks"] if name in by_check), None)
        if exported is None:
            continue  # the notebook never reached this check: the grader says why
        run_group(group, exported, spec["notebook"], out)
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
