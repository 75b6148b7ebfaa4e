"""Inside the sandbox: `python -m labkit.instructor.sandbox.inside` runs the student's notebook,
under the run's uid, behind the walls (sandbox.run_notebook starts it).

Everything here runs as the student's code does, so it imports as little as it
can: the standard library only, until it has lowered its own resource limits
(papermill and nbformat come after that); `labkit` and `labkit.instructor`,
imported on the way here, import nothing.  It reads its spec from stdin
(nothing the run's uid could replace lies on disk), lowers its limits, so
everything it starts inherits them, runs the notebook through papermill and
reports how papermill ended on its last stdout line (INSIDE_MARK), which
goes to the log root opened for it.  Its verdict gives no points: it only
says why a check has no result.

The judge (judge.py) lowers its limits with the same lower_limits().
"""

from __future__ import annotations

import json
import resource
import signal
import sys
from pathlib import Path

INSIDE_MARK = "labkit-sandbox-result:"  # the inside process's last stdout line starts with this


def first_to_go() -> bool:
    """Make this process, and all it starts, the kernel's first choice when memory runs out
    around it (oom_score_adj 1000: the run before the grader), and say whether it is.  A
    process may lower it again, but not below the 0 it started with (the kernel refuses
    less than oom_score_adj_min without CAP_SYS_RESOURCE), so a run can at most make itself
    the grader's equal, its processes then chosen by their size.  Read back, since a
    process that made itself not dumpable (the judge) can no longer write it: its /proc
    files are root's from then on, so it calls this first."""
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
    except OSError:
        pass
    try:
        with open("/proc/self/oom_score_adj") as adj:
            return adj.read().strip() == "1000"
    except OSError:
        return False


def lower_limits(spec: dict) -> None:
    """In an isolated process: the limits its spec names, for it and all it starts.

    The address space is the one exception, where a cgroup bounds the run's memory: the
    run's own (its memory.max bounds what the whole run uses), or, for a run under a grading
    uid that can have none, the container's the grader is in (the platforms' memory limit),
    where the kernel's OOM killer takes the run's processes first (their oom_score_adj of
    1000: first_to_go).
    There only the soft limit is set and a process may raise it for a large reservation it
    does not use (an ASan build reserves terabytes of shadow memory at start; the capstone's
    battery builds one).  Without such a cgroup the hard limit is the soft one, and such a
    build cannot start (labkit.battery says so)."""
    limits = spec["limits"]
    wanted = {
        resource.RLIMIT_CPU: spec["cpu_s"],
        resource.RLIMIT_AS: limits["memory_bytes"],
        resource.RLIMIT_NPROC: limits["processes"] + spec["extra_processes"],
        resource.RLIMIT_NOFILE: limits["open_files"],
        resource.RLIMIT_FSIZE: limits["file_bytes"],
        resource.RLIMIT_CORE: 0,
    }
    first = first_to_go()
    for which, value in wanted.items():
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        keep_hard = which == resource.RLIMIT_AS and spec.get("cgroup_holds_memory") and first \
            and hard == resource.RLIM_INFINITY
        resource.setrlimit(which, (value, hard if keep_hard else value))


def _report(outcome: str, message: str, cell_errors: list[str] | None = None) -> None:
    print(INSIDE_MARK + json.dumps({"outcome": outcome, "message": message,
                                    "cell_errors": cell_errors or []}), flush=True)


def _cell_errors(executed: Path) -> list[str]:
    import nbformat

    if not executed.is_file():
        return []
    errors = []
    for index, cell in enumerate(nbformat.read(executed, as_version=4).cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors.append(f"cell {index}: {output.get('ename')}: {output.get('evalue')}"[:300])
    return errors


def _main() -> int:
    spec = json.loads(sys.stdin.read())
    lower_limits(spec)
    import papermill
    from nbclient.exceptions import DeadKernelError

    from labkit import execute  # papermill, its kernel on Unix sockets (it says why)
    from ..basics.outcomes import COMPLETED, FAILED, KERNEL_DIED

    output = Path(spec["output"])
    if spec.get("adopt_earlier"):  # the student's earlier C exercises, as their own machine had them
        from labkit.exercises.c_exercises import adopt_earlier

        for line in adopt_earlier(spec["adopt_earlier"]):
            print(line, flush=True)
    try:
        # allow_errors: a student's broken cell must not hide the later exercises' checks.
        execute.execute(spec["input"], str(output), parameters=spec["parameters"],
                                   kernel_name=spec["kernel"], cwd=spec["cwd"], progress_bar=False,
                                   log_output=False, allow_errors=True, start_timeout=120)
    except DeadKernelError as error:
        _report(KERNEL_DIED, f"the kernel died ({error}) -- os._exit, a crash in C code, or a limit")
        return 0
    except papermill.PapermillExecutionError:
        pass  # cell errors: recorded below, the notebook ran to its end
    except Exception as error:  # noqa: BLE001  papermill's own failures: bad notebook JSON, no kernel
        if "Kernel died" in str(error) or "kernel died" in str(error):
            _report(KERNEL_DIED, f"the kernel died ({type(error).__name__}: {error})")
        else:
            _report(FAILED, f"papermill could not run the notebook: {type(error).__name__}: {error}")
        return 0
    _report(COMPLETED, "the notebook ran to its end", _cell_errors(output))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(_main())
