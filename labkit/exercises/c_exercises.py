"""The C exercises' checks under the one name every notebook calls them by,
c_exercises.check_*, released editions included: a student's function, written in a
notebook cell, compiled in place of the lab's own (the instructor's csrc/ is never
edited) and checked against the real thing.  One file per exercise holds its check:

  procstat_parse   1.1  the /proc/PID/stat parser, in a process of its own, against psutil
  ev_poll          1.2  poll's dispatch, in a scratch poll server, against the echo protocol
  lingering_close  3.1  a lingering close, in a scratch threaded server sent more than it announced
  fill_iovec       4.1  the writev array, in a scratch load generator, against a sink checking every byte
  shed_idle        6.2  the idle timeout, in a scratch epoll server (called as c_exercise_shed.check_shed_idle)

A compile error raises BuildError with gcc's own message, naming the student's cell.  In
a students' edition a passing visible check puts the function into csrc/ (which_edition.adopt), and
adopt_earlier() does it again, at grading, for the functions of a student's earlier notebooks.
"""

from __future__ import annotations

import importlib

from ..scratch import ScratchServer, build_with, scratch_build
from ..stubs.catalog import C_EXERCISES
from ..stubs.which_edition import adopt, edition
from .ev_poll import POLL_BACKEND, POLL_MODEL, build_poll_server, check_poll_server
from .fill_iovec import IOVEC_SOURCE, build_iovec_loadgen, check_fill_iovec
from .lingering_close import LINGER_MODEL, LINGER_SOURCE, build_lingering_server, check_lingering_close
from .procstat_parse import (PROCSTAT_CASES, PROCSTAT_LINES, PROCSTAT_NAME_MAX, check_procstat_live,
                             check_procstat_parse, parse_lines, procstat_parse_module, stat_entry, stat_line)

__all__ = ["IOVEC_SOURCE", "LINGER_MODEL", "LINGER_SOURCE", "POLL_BACKEND", "POLL_MODEL", "PROCSTAT_CASES",
           "PROCSTAT_LINES", "PROCSTAT_NAME_MAX", "ScratchServer", "adopt", "adopt_earlier", "build_iovec_loadgen",
           "build_lingering_server", "build_poll_server", "build_with", "check_fill_iovec", "check_lingering_close",
           "check_poll_server", "check_procstat_live", "check_procstat_parse", "parse_lines",
           "procstat_parse_module", "scratch_build", "stat_entry", "stat_line"]


def adopt_earlier(functions: dict[str, str]) -> list[str]:
    """In an edition: each C exercise's function of `functions` (by function name: the
    student's code from an earlier notebook) run through that exercise's visible check, which
    adopt()s it when it passes, as it did on the student's own machine; a line per function
    saying what became of it.  A function still the stub, or whose check fails, stays out."""
    if edition() is None:
        return []
    said = []
    for exercise in C_EXERCISES:
        code = functions.get(exercise.function)
        if code is None or not exercise.check:
            continue
        module, name = exercise.check.split(":")
        check = getattr(importlib.import_module(f"{__package__}.{module}"), name)  # labkit.exercises.<module>
        try:
            check(code)
        except Exception as failed:  # noqa: BLE001 -- the student's code: any failure keeps the stub
            said.append(f"exercise {exercise.label} ({exercise.function}) from {exercise.notebook}: its visible "
                        f"check did not pass here, so the lab keeps the stub ({type(failed).__name__})")
        else:
            said.append(f"exercise {exercise.label} ({exercise.function}) from {exercise.notebook}: adopted")
    return said
