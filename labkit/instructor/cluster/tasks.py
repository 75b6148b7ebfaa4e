"""`labkit grade --scheduler tls://ADDRESS`: every student x notebook as one task on a Dask
cluster of grading machines, instead of `--jobs` threads on this one.

    grader (the instructor's machine)              workers (`labkit worker tls://ADDRESS`, as root)
    reads the instructor's notebooks and  --task-->  checks it runs the grader's lab (version and
    each submission's bytes, sends them             commit), grades the one notebook with the same
    as one task needing one "grading"               grader.Grader as local grading (its sandbox,
    slot; writes rows as tasks finish    <--result-- its two uids) and sends back the rows, the
                                                    note, the executed notebook and the log

A worker has one grading slot (`--resources grading=1`), so two runs never measure on
one machine at once.  What a task needs travels with it, the grader's limits too; the
instructor's notebooks are written on the worker into a folder only root can read, never
one a grading uid can.
A worker that dies mid-task: Dask runs the task again on another worker, and the
feedback says so (each start is logged as a Dask event); a task that fails twice (an
exception, or its workers dying) becomes that student's error rows.  The batch always
finishes, and the grader's ledger (grade.Ledger) makes a second run grade only what
has no row yet for the same submission content.

Only the course's certificates reach it: every process speaks mutual TLS with its role's
certificate (certs.py: one CA per role, so the handshake keeps roles apart), and the
scheduler and workers preload gate.py, which lets each role ask only for its part of
grading.  A plaintext address is refused here, before anything is sent.  `labkit
scheduler` and two `labkit worker` on one machine are enough to try it, as the tests do.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...errors import LabError

SCHEDULER_ENV = "LABKIT_DASK_SCHEDULER"
RESOURCE = "grading"
STARTED = "labkit-grading-started"  # the Dask event topic: one event per task start
DASK_INSTALL = ("install the grading cluster's packages, labkit's grading extra: pip install '.[grading]' "
                "in the lab's checkout (make setup does)")


def _dask():
    try:
        import distributed
    except ImportError:
        raise LabError("Dask's distributed package is not installed", DASK_INSTALL) from None
    return distributed


# ---------------------------------------------------------------------------
# what a task carries, and what it brings back


def lab_identity() -> dict:
    """The lab a grader or a worker runs: its version and its git commit ("+dirty" when the
    checkout was changed).  LABKIT_COMMIT stands for the commit in a checkout without git."""
    from ... import __version__, system

    return {"version": __version__, "commit": os.environ.get("LABKIT_COMMIT") or system.git_commit() or "unknown"}


@dataclass
class Payload:
    student: str
    notebook: str
    files: dict[str, bytes]          # the submission: "<notebook>.ipynb", csrc/exercises/... (and the
                                     # capstone's csrc/servers/mine.c), or {} if none
    handed_in: bool
    instructor: dict[str, bytes]     # every instructor notebook, by name: the checks and the hidden ones
    profile: str | None
    limits: dict                     # the grader's sandbox.Limits, as fields: the same run on any worker
    identity: dict                   # the grader's lab


@dataclass
class Result:
    rows: list[dict]
    note: str
    cell_errors: list[str] = field(default_factory=list)
    executed: bytes = b""
    log: bytes = b""
    worker: str = ""


class WrongLab(Exception):
    """A worker whose lab is not the grader's: it refuses the task, saying both."""


def grade_remote(payload: Payload) -> Result:
    """Run on a worker: grade one student's notebook with grader.Grader, as local grading does."""
    from ... import paths
    from ..sandbox import outside as sandbox
    from ..grading.grader import Grader, Task
    from ..basics.submissions import safe_name

    mine = lab_identity()
    worker = _worker_address()
    if mine != payload.identity:
        raise WrongLab(f"worker {worker} runs labkit {mine['version']} at commit {mine['commit']}, the grader "
                       f"{payload.identity['version']} at {payload.identity['commit']}: update the worker "
                       "(git pull && make setup build) or the grader, then grade again")
    _log_start(payload, worker)
    work = paths.owned_folder("labkit-task", Path(tempfile.gettempdir()))  # 0700: no grading uid reads it
    try:
        instructor_dir = work / "instructor"
        instructor_dir.mkdir()
        for name, data in payload.instructor.items():
            (instructor_dir / f"{name}.ipynb").write_bytes(data)
        student_dir = work / "submission" / "student"
        for relative, data in payload.files.items():
            target = student_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        submitted = student_dir / f"{payload.notebook}.ipynb" if payload.handed_in else None
        out = work / "out"
        limits = sandbox.Limits(**payload.limits)
        grader = Grader(instructor_dir, out, 1, payload.profile, limits)
        try:
            outcome = grader.grade(Task(payload.student, payload.notebook, submitted))
        finally:
            grader.close()
        kept = out / "executed" / safe_name(payload.student) / f"{payload.notebook}.ipynb"
        log = out / "logs" / safe_name(payload.student) / f"{payload.notebook}.log"
        return Result(rows=outcome.rows, note=outcome.note, worker=worker,
                      cell_errors=list(outcome.run.cell_errors) if outcome.run else [],
                      executed=kept.read_bytes() if kept.is_file() else b"",
                      log=log.read_bytes() if log.is_file() else b"")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _worker_address() -> str:
    try:
        return _dask().get_worker().address
    except ValueError:  # not inside a worker (called directly, as the unit tests do)
        return "this process"


def _log_start(payload: Payload, worker: str) -> None:
    try:
        _dask().get_worker().log_event(STARTED, {"student": payload.student, "notebook": payload.notebook,
                                                 "worker": worker})
    except ValueError:
        pass


# ---------------------------------------------------------------------------
# the grader's side


def payload_for(task, instructor: dict[str, bytes], profile, limits, identity: dict) -> Payload:
    """What task (a grader.Task) sends: the submitted notebook and the student's C exercise files,
    read as local grading reads them (no link followed, sizes bounded), and the grader's limits
    (a sandbox.Limits), which the worker's run keeps as a local run would."""
    from ..basics.submissions import handed_in

    files: dict[str, bytes] = {}
    if task.submitted is not None:
        # a file refused is not sent: the worker's grading refuses it the way local grading does
        files = {name: data for name, data in handed_in(task.submitted, task.notebook).items()
                 if isinstance(data, bytes)}
    return Payload(task.student, task.notebook, files, task.submitted is not None, instructor, profile,
                   asdict(limits), identity)


def connect(address: str, certs=None):
    """A Dask client of the TLS scheduler at `address`, as the grader (certs.load("grader")),
    or a LabError saying what to check."""
    from . import certs as certificates

    distributed = _dask()
    certificates.require_tls(address, "labkit grade --scheduler")
    security = certificates.load("grader", certs).security()
    try:
        return distributed.Client(address, security=security, timeout="15s")
    except (OSError, TimeoutError) as problem:
        raise LabError(f"no grading scheduler answered at {address} ({problem})",
                       "start one (labkit scheduler) and workers (labkit worker tls://HOST:PORT) with the "
                       "course's certificates, or grade on this machine without --scheduler") from None


def run(tasks, payloads, scheduler: str, on_result, progress: bool = True, certs=None) -> dict[tuple[str, str], str]:
    """Send each task as one Dask task needing one grading slot; call on_result(task, result or
    exception) as each finishes.  Returns, per (student, notebook) graded more than once because
    a worker stopped mid-run, a sentence for its feedback."""
    distributed = _dask()
    from tqdm.auto import tqdm

    client = connect(scheduler, certs)
    try:
        services = client.scheduler_info().get("services", {})
        dashboard = client.dashboard_link if "dashboard" in services else "none (the scheduler runs without one)"
        print(f"grading on the Dask cluster at {scheduler}; its dashboard: {dashboard}", file=sys.stderr)
        if not any(RESOURCE in (info.get("resources") or {})
                   for info in client.scheduler_info().get("workers", {}).values()):
            print(f"note: no worker has a '{RESOURCE}' slot yet; the tasks wait for one "
                  f"(start workers with: sudo labkit worker {scheduler})", file=sys.stderr)
        futures = {client.submit(grade_remote, payload, resources={RESOURCE: 1}, retries=1, pure=False,
                                 key=f"grade-{task.student}-{task.notebook}-{os.urandom(4).hex()}"): task
                   for task, payload in zip(tasks, payloads)}
        bar = tqdm(distributed.as_completed(futures), total=len(futures), unit="notebook", desc="grading",
                   disable=not progress, file=sys.stderr)
        for future in bar:
            task = futures[future]
            try:
                on_result(task, future.result())
            except Exception as problem:  # noqa: BLE001 -- a failed task is that student's error rows
                on_result(task, problem)
        return _restarted(client.get_events(STARTED))
    finally:
        client.close()


def _restarted(events) -> dict[tuple[str, str], str]:
    """(student, notebook) -> "graded on W2 after W1 stopped mid-run", for tasks started more than once."""
    starts: dict[tuple[str, str], list[str]] = {}
    for _, event in events:
        starts.setdefault((event["student"], event["notebook"]), []).append(event["worker"])
    return {key: f"graded on {workers[-1]} after {', '.join(workers[:-1])} stopped mid-run (Dask ran it again)"
            for key, workers in starts.items() if len(workers) > 1}


# ---------------------------------------------------------------------------
# `labkit scheduler` and `labkit worker tls://...`

# Dask's settings for both: encryption required, at most one retry of a task whose worker died
# (so a notebook that kills workers cannot take the cluster down), and the HTTP server (the
# dashboard, and JSON routes that name every task: students and notebooks) off unless asked.
GATE = "labkit.instructor.cluster.gate"
DASK_SETTINGS = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
                 "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1",
                 "DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES": "[]",
                 "DASK_DISTRIBUTED__WORKER__HTTP__ROUTES": "[]"}


def _dask_cli() -> str:
    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or shutil.which("dask")
    if dask is None:
        raise LabError("the `dask` command is missing", DASK_INSTALL)
    return dask


@dataclass
class Command:
    """A dask process to exec: its argv and the environment it needs."""
    argv: list[str]
    env: dict[str, str]

    def exec(self):
        os.execve(self.argv[0], self.argv, {**os.environ, **self.env})


def scheduler_command(host: str = "0.0.0.0", port: int = 8786, *, dashboard: str | None = None, certs=None,
                      scheduler_file: str | None = None) -> Command:
    """`dask scheduler` speaking mutual TLS with the scheduler's certificate, the gate preloaded,
    and no HTTP server but on 127.0.0.1: the dashboard there only when asked (`dashboard` is its
    port, reached with ssh -L)."""
    from . import certs as certificates

    role = certificates.load("scheduler", certs)
    argv = [_dask_cli(), "scheduler", "--protocol", "tls", "--host", host, "--port", str(port),
            "--preload", GATE, *role.dask_flags()]
    env = dict(DASK_SETTINGS)
    if dashboard is None:
        argv += ["--no-dashboard", "--dashboard-address", "127.0.0.1:0"]
    else:
        try:
            import bokeh  # noqa: F401 -- Dask's dashboard is drawn with it
        except ImportError:
            raise LabError("the dashboard needs bokeh, which is not installed",
                           ".venv/bin/pip install 'bokeh>=3.1', or start the scheduler without --dashboard") from None
        argv += ["--dashboard", "--dashboard-address", f"127.0.0.1:{dashboard}"]
        env.pop("DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES")
    if scheduler_file:
        argv += ["--scheduler-file", scheduler_file]
    return Command(argv, env)


def worker_command(address: str, name: str | None = None, *, certs=None, host: str | None = None) -> Command:
    """`dask worker` with the worker's certificate, one thread, one grading slot, no nanny (one
    listener fewer), the gate preloaded, its HTTP server on 127.0.0.1 with no routes."""
    from . import certs as certificates

    certificates.require_tls(address, "labkit worker")
    role = certificates.load("worker", certs)
    argv = [_dask_cli(), "worker", address, "--nthreads", "1", "--no-nanny", "--resources", f"{RESOURCE}=1",
            "--no-dashboard", "--dashboard-address", "127.0.0.1:0", "--preload", GATE, *role.dask_flags()]
    if host:
        argv += ["--host", host]
    return Command(argv + (["--name", name] if name else []), dict(DASK_SETTINGS))


def check_worker_machine() -> list[str]:
    """What this machine lacks to grade (empty: ready): root for the sandbox's uids, the built lab."""
    from ... import build, paths

    problems = []
    if os.geteuid() != 0:
        problems.append("a grading worker runs as root: each run gets uids of its own (sudo labkit worker ...)")
    if not (paths.BIN / build.LOADGEN).exists():
        problems.append("the lab is not built here: run `make setup build` in this checkout")
    try:
        _dask()
    except LabError as missing:
        problems.append(f"{missing.what}: {missing.fix}")
    return problems
