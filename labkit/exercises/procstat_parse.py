"""Exercise 1.1 (notebook 01): procstat_parse, the /proc/PID/stat parser of the top
service (csrc/services/procstat.c), compiled with cffi beside the lab's procstat.c, loaded
in a process of its own (a crash or an endless loop in it is the check's failure, and
cannot reach the process that judges it), and checked on lines whose names break a
split on spaces, then on a live process against psutil.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .. import cpu_limit, launcher, procstat
from ..csource import replace_function
from ..errors import BuildError
from ..scratch import SCRATCH, digest, locked
from ..stubs.which_edition import adopt


def procstat_parse_module(code: str) -> tuple[str, Path]:
    """(module name, path) of the cffi module of the lab's procstat.c with the student's
    procstat_parse, compiled the way procstat.module() compiles the real one (same
    flags, same cdef); a compile error raises BuildError with gcc's own message."""
    import importlib.machinery

    real_source = procstat.procstat_source()
    flags = procstat.procstat_flags()
    name = f"_procstat_ex_{digest(code, real_source.read_text(), ' '.join(flags))}"
    scratch = SCRATCH / "procstat_parse"
    target = scratch / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    with locked(scratch):
        if not target.is_file():
            source = scratch / f"{name}.c"
            source.write_text(replace_function(real_source.read_text(), "procstat_parse", code,
                                               "your procstat_parse cell", real_source))
            try:
                procstat.compile_procstat(name, source, real_source.with_suffix(".h"), flags, target)
            except BuildError as failed:
                raise BuildError("your procstat_parse() does not compile (gcc's message below)", failed.output,
                                 "read the first error (your procstat_parse cell:LINE: error: ...), fix that "
                                 "line in the cell, and run the cell and its checks again") from None
    return name, target


def parse_lines(code: str, lines: list[str], cpu_seconds: float = 10.0) -> list[dict | None]:
    """The student's procstat_parse on each line, run in a process of its own: a crash
    or an endless loop in it is the check's failure, and nothing it does can reach
    the process that judges it.  An endless loop is told by the CPU time it used
    (labkit.cpu_limit), so a busy machine cannot fail a correct parser."""
    name, target = procstat_parse_module(code)
    child = launcher.spawn([sys.executable, "-c", "from labkit.exercises.procstat_parse import _parse_main; "
                            "_parse_main()", name, str(target), f"{cpu_seconds:g}"], "exercise", None,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = launcher.run_to_end(child, cpu_limit.wall(cpu_seconds), input=json.dumps(lines).encode())
    except subprocess.TimeoutExpired:
        raise AssertionError(f"your procstat_parse did not return within {cpu_limit.wall(cpu_seconds):g} s, "
                             "using little CPU (is it waiting on something, a sleep or a read?)") from None
    status = child.popen.returncode
    if cpu_limit.spent(status):
        raise AssertionError(f"your procstat_parse did not return within {cpu_seconds:g} s of CPU time "
                             "(an endless loop? check how it walks the line)")
    if status != 0:
        raise AssertionError(f"your procstat_parse crashed: the process running it {launcher.how_it_ended(status)} "
                             "(reading past the end of the line? a NULL pointer?)\n"
                             + err.decode(errors="replace")[-800:])
    return json.loads(out)


def _parse_main() -> None:
    """In the parsing process: load the module, parse the JSON list of lines on stdin."""
    import importlib.machinery
    import importlib.util

    name, target = sys.argv[1], sys.argv[2]
    cpu_limit.limit(float(sys.argv[3]))  # before the student's code is loaded
    loader = importlib.machinery.ExtensionFileLoader(name, target)
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, target, loader=loader))
    loader.exec_module(module)
    results = []
    for line in json.loads(sys.stdin.read()):
        raw = line.encode("utf-8", "surrogateescape")
        entry = module.ffi.new("struct proc_cpu *")
        ok = module.lib.procstat_parse(raw, len(raw), entry) == 0
        results.append(procstat.proc_cpu_dict(module.ffi, entry[0]) if ok else None)
    print(json.dumps(results))


def stat_line(pid: int, name: str, utime: int, stime: int, state: str = "S") -> str:
    """A /proc/PID/stat line as the kernel writes it (52 fields), for tests and checks."""
    middle = [state, "1", str(pid), str(pid), "0", "-1", "4194560", "120", "0", "3", "0"]
    tail = ["0", "0", "20", "0", "1", "0", "4242", "10000000", "200"] + ["0"] * 33
    return f"{pid} ({name}) {' '.join(middle)} {utime} {stime} {' '.join(tail)}\n"


PROCSTAT_NAME_MAX = 64  # csrc/services/procstat.h


def stat_entry(pid: int, name: str, utime: int, stime: int, state: str = "S") -> dict:
    """What a correct parser gives for stat_line(pid, name, utime, stime): the name's
    non-printable bytes as '?', cut to PROCSTAT_NAME_MAX - 1 bytes."""
    shown = "".join(chr(b) if 0x20 <= b < 0x7f else "?" for b in name.encode())[:PROCSTAT_NAME_MAX - 1]
    return {"pid": pid, "utime": utime, "stime": stime, "name": shown}


# Visible: names that break a split on spaces or a stop at the first ')'.
PROCSTAT_CASES = [(1, "systemd", 300, 200), (4321, "tmux: server", 1234, 56),
                  (1234, "evil) (name x", 17, 4, "R"), (77, ") (", 5, 6)]
PROCSTAT_LINES = [stat_line(*case) for case in PROCSTAT_CASES]


def check_procstat_parse(code: str, cases=None) -> None:
    """Assert that the student's procstat_parse gives what a correct parser gives: on the
    visible PROCSTAT_LINES, the values they were made from; on other `cases` (the hidden
    checks: (line, what a correct parser gives: a stat_entry, or None for a malformed line)),
    the values given.  Known without any parser: in an edition, and in a grader's checks,
    the lab's own procstat_parse is this exercise's stub.  In an edition, a passing check on
    the visible lines adopt()s the student's function."""
    visible = cases is None
    if visible:
        lines, expected = PROCSTAT_LINES, [stat_entry(*case) for case in PROCSTAT_CASES]
    else:
        lines, expected = [line for line, _ in cases], [entry for _, entry in cases]
    for line, yours, lab in zip(lines, parse_lines(code, lines), expected):
        if yours == lab:
            continue
        shown = line if len(line) < 90 else line[:87] + "..."
        hint = ("a valid line must give 0 and fill *out" if yours is None else
                "a malformed line must return -1" if lab is None else
                "the name is everything between the FIRST '(' and the LAST ')'; utime and stime are "
                "the 12th and 13th fields after that ')'" if yours["name"] != lab["name"] else
                "count the fields after the LAST ')': state is the 1st, utime the 12th, stime the 13th")
        raise AssertionError(f"for the line {shown!r}\n  yours gives {yours}\n  a correct parser gives {lab}\n"
                             f"hint: {hint}")
    if visible:
        adopt(Path("services") / "procstat.c", "procstat_parse", code)


def check_procstat_live(code: str, name: str = "evil) (name x") -> None:
    """Parse the stat line of a live process named `name` and compare with psutil."""
    import psutil

    procstat_parse_module(code)  # a compile error first, before a process is started
    child = launcher.spawn([sys.executable, "-c",
                            f"open('/proc/self/comm', 'w').write({name!r})\n"
                            "import sys, time; print('named', flush=True); time.sleep(60)"],
                           "exercise", None, stdout=subprocess.PIPE, text=True)
    try:
        child.popen.stdout.readline()  # renamed: /proc now shows the new name
        proc, ticks = psutil.Process(child.pid), os.sysconf("SC_CLK_TCK")
        for _ in range(3):  # the child may still be on its way into read(): read until it holds still
            line = Path(f"/proc/{child.pid}/stat").read_text()
            expected = {"pid": child.pid, "name": proc.name()}
            times = proc.cpu_times()
            if Path(f"/proc/{child.pid}/stat").read_text() == line:
                break
            time.sleep(0.1)
    finally:
        launcher.stop_child(child, timeout=0.2, signum=signal.SIGKILL)
    yours = parse_lines(code, [line])[0]
    assert yours is not None, f"your procstat_parse rejected a real line (it returned -1): {line[:80]!r}"
    got = {"pid": yours["pid"], "name": yours["name"]}
    assert got == expected, f"for a live process psutil says {expected}, yours says {got}"
    # psutil divides the same tick counts by the clock rate: compare in ticks.
    assert (yours["utime"], yours["stime"]) == (round(times.user * ticks), round(times.system * ticks)), \
        f"utime/stime: yours {yours['utime']}/{yours['stime']} ticks, psutil " \
        f"{round(times.user * ticks)}/{round(times.system * ticks)}"
