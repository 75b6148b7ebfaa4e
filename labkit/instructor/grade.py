"""`labkit grade`: grade a whole class's notebooks, each run isolated (sandbox.py).

    SUBMISSIONS_DIR/<student>/<notebook>.ipynb        what each student handed in
    SUBMISSIONS_DIR/<student>/csrc/exercises/...      optional: their C exercise files

For every student and graded notebook, in two isolated runs under two uids:
  1. the student's notebook runs through papermill (sandbox.run_notebook),
     with its visible check cells restored to the instructor's (instant
     feedback; they decide nothing) and, after each check's place, a cell that
     exports the values the check reads (check_cells.graded_copy);
  2. every check, visible and hidden, runs on those values in a fresh process
     under another uid (sandbox.run_checks -> labkit.instructor.checker): only
     it writes results, and the hidden checks never reach the student's run.
Every check of the instructor's notebook gets one row in the gradebook -- also
those that never ran, with the reason -- so every student's points are out of
the same total.  Anything that goes wrong with one student's notebook becomes
that student's error rows; the batch always finishes.

OUT_DIR/gradebook.csv        student, notebook, check, points, max_points, status, hidden, message
                             (rewritten as each notebook is graded)
OUT_DIR/graded.jsonl         the ledger: each graded notebook's rows with the digest of what was
                             graded (the submission and the instructor's notebook); grading again
                             grades only what has no row for the same content (an interrupted batch
                             resumes)
OUT_DIR/answers.csv          every written answer, to mark by hand: student, notebook, question,
                             answer, look_for, max_points, points (empty until marked), comment;
                             filled in, it comes back with --manual (labkit.instructor.hand)
OUT_DIR/feedback/<s>.html    each check with its message, totals per notebook
OUT_DIR/executed/<s>/        the executed notebooks (partial when a run was stopped; long outputs cut)
OUT_DIR/logs/<s>/            papermill's and the checks' output for each run
(<s> is the student's folder name, made safe for a file name: submissions.safe_name.)
"""

from __future__ import annotations

import concurrent.futures
import html
import os
import queue
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from . import checks, hand, release, sandbox
from .check_cells import CheckSpec, check_catalog, check_groups, graded_copy
from .submissions import Refused, is_folder, read_notebook, read_regular, safe_name
from ..errors import LabError

PASSED, FAILED, ERROR, TIMEOUT = "passed", "failed", "error", "timeout"
BY_HAND = hand.BY_HAND   # a written answer waiting for the instructor's mark (answers.csv)
COLUMNS = ["student", "notebook", "check", "points", "max_points", "status", "hidden", "message"]
EXERCISES_C = Path("csrc") / "exercises"
MAX_OUTPUT_CHARS = 20_000       # one output of a kept executed notebook
MAX_KEPT_NOTEBOOK = 5 * 1024 * 1024


# ---------------------------------------------------------------------------
# one student's notebook


@dataclass
class Task:
    student: str
    notebook: str            # the notebook's name, e.g. 01_proc_service
    submitted: Path | None   # None: not handed in


@dataclass
class Outcome:
    task: Task
    rows: list[dict]
    run: "sandbox.RunResult | Recorded | None"
    note: str                # how the run ended, for the feedback page


@dataclass
class Recorded:
    """What the feedback page needs of a run that happened elsewhere (a Dask worker) or earlier
    (the ledger)."""

    cell_errors: list[str]


class Ledger:
    """OUT_DIR/graded.jsonl: one line per graded notebook, appended as it is graded."""

    def __init__(self, out_dir: Path):
        self.path = out_dir / "graded.jsonl"
        self.done: dict[tuple[str, str], dict] = {}
        if self.path.is_file():
            import json

            for line in self.path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    self.done[(entry["student"], entry["notebook"])] = entry
                except (ValueError, KeyError):
                    continue  # a line cut by a kill: that notebook is graded again

    def outcome(self, task: Task, digest: str) -> Outcome | None:
        """The recorded outcome of `task` if what it grades has not changed since."""
        entry = self.done.get((task.student, task.notebook))
        if entry is None or entry.get("digest") != digest:
            return None
        return Outcome(task, entry["rows"], Recorded(entry.get("cell_errors", [])),
                       entry.get("note", "") + " (graded in an earlier run; the submission has not changed)")

    def add(self, outcome: Outcome, digest: str) -> None:
        import json

        entry = {"student": outcome.task.student, "notebook": outcome.task.notebook, "digest": digest,
                 "rows": outcome.rows, "note": outcome.note,
                 "cell_errors": list(getattr(outcome.run, "cell_errors", []) or [])}
        with open(self.path, "a") as ledger:
            ledger.write(json.dumps(entry) + "\n")
        self.done[(outcome.task.student, outcome.task.notebook)] = entry


def digest(task: Task, instructor_bytes: bytes) -> str:
    """What a grade depends on: the submitted notebook, the student's C exercise files, and
    the instructor's notebook (its checks)."""
    import hashlib

    hashed = hashlib.sha256(instructor_bytes)
    if task.submitted is None:
        hashed.update(b"not submitted")
        return hashed.hexdigest()
    for path in [task.submitted, *sorted((task.submitted.parent / EXERCISES_C).rglob("*"))]:
        try:
            data = read_regular(path, limit=MAX_KEPT_NOTEBOOK * 4, what=path.name) \
                if not os.path.isdir(path) else b""
        except Refused as refused:
            data = f"refused: {refused}".encode()
        hashed.update(str(path.relative_to(task.submitted.parent)).encode() + b"\0" + data + b"\0")
    return hashed.hexdigest()


def _never_ran(run: sandbox.RunResult | None, reason: str | None) -> tuple[str, str]:
    if reason:
        return ERROR, reason
    if run.outcome == "timeout":
        return TIMEOUT, f"did not run: {run.message}"
    if run.outcome == "completed":
        return ERROR, "did not run although the notebook ran to its end: is its cell missing or changed?"
    return ERROR, f"did not run: {run.message}"


def rows_for(task: Task, catalog: list[CheckSpec], run: sandbox.RunResult | None,
             records: dict[str, dict] | None = None, reason: str | None = None) -> list[dict]:
    """One gradebook row per check of the catalog: from the checks process's `records`,
    else why it has none.  Points come from the catalog, never from a record."""
    rows = []
    for spec in catalog:
        record = (records or {}).get(spec.name)
        answer = None
        if record is not None and record.get("status") in (PASSED, FAILED, ERROR, checks.RECORDED):
            status, message = record["status"], str(record.get("message") or "")
            if spec.by_hand:  # the catalog, not the record, says an answer is marked by a person
                answer = str(record.get("answer") or "")
                status = BY_HAND if status in (PASSED, checks.RECORDED) else status
                message = (message + "\n" if message else "") + f"answer: {answer}"
        else:
            status, message = _never_ran(run, reason)
        row = {"student": task.student, "notebook": task.notebook, "check": spec.name,
               "points": spec.max_points if status == PASSED else 0.0,
               "max_points": spec.max_points, "status": status, "hidden": spec.hidden,
               "message": message}
        if answer is not None:  # for answers.csv; not a gradebook column
            row.update(answer=answer, look_for=list((record or {}).get("look_for") or []))
        rows.append(row)
    return rows


def _student_overlay(student_dir: Path) -> dict[str, bytes]:
    """The C exercise files a run compiles: the released stubs, replaced by the student's
    own (regular files only: a link is not followed)."""
    overlay = {}
    instructor_dir = paths.ROOT / EXERCISES_C
    if instructor_dir.is_dir():
        for path in sorted(p for p in instructor_dir.rglob("*") if p.is_file()):
            relative = path.relative_to(paths.ROOT)
            stubbed, _ = release.strip_solutions(path.read_text(), str(relative))
            overlay[str(relative)] = stubbed.encode()
            try:
                overlay[str(relative)] = read_regular(student_dir / relative, limit=1 << 20, what=str(relative))
            except Refused:
                pass  # not handed in (or not a plain file): the stub stays
    return overlay


def _cut_outputs(data: bytes) -> bytes:
    """An executed notebook to keep: every output cut to MAX_OUTPUT_CHARS, the whole to MAX_KEPT_NOTEBOOK."""
    import nbformat

    try:
        nb = nbformat.reads(data.decode("utf-8", "replace"), as_version=4)
    except Exception:  # noqa: BLE001 -- a notebook cut by a kill: keep nothing of it
        return b""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for key in ("text", "evalue"):
                if isinstance(output.get(key), str) and len(output[key]) > MAX_OUTPUT_CHARS:
                    output[key] = output[key][:MAX_OUTPUT_CHARS] + "\n[... cut by the grader]"
            for mime, value in list(output.get("data", {}).items()):
                if isinstance(value, str) and len(value) > MAX_OUTPUT_CHARS:
                    output["data"][mime] = "[output cut by the grader: too long]" if mime != "text/plain" \
                        else value[:MAX_OUTPUT_CHARS] + "\n[... cut by the grader]"
    kept = nbformat.writes(nb).encode()
    return kept if len(kept) <= MAX_KEPT_NOTEBOOK else b""


class Grader:
    """Grades tasks `jobs` at a time; each run gets a slot, and as root the slot's two
    uids: one for the student's notebook, one for the checks."""

    def __init__(self, instructor_dir: Path, out_dir: Path, jobs: int, profile: str | None,
                 limits: sandbox.Limits):
        import nbformat

        from .. import build

        # Every run gets a copy of build/ that its uid cannot write into: what the checks load
        # (the programs, the cffi module for these compiler flags) must be built before.
        build.build()
        build.procstat()

        self.instructor = {path.stem: nbformat.read(path, as_version=4)
                           for path in sorted(Path(instructor_dir).glob("*.ipynb"))}
        self.catalogs = {name: check_catalog(nb) for name, nb in self.instructor.items()}
        self.groups = {name: [{"checks": g.checks, "source": g.source} for g in check_groups(nb)]
                       for name, nb in self.instructor.items()}
        self.out_dir = out_dir
        self.jobs = jobs
        self.profile = profile
        self.limits = limits
        # A slot per job: as root each slot has two uids leased for this grader alone.
        self.lease = sandbox.UidLease(2 * jobs) if sandbox.running_as_root() else None
        self.slots: queue.Queue[tuple[int, int | None, int | None]] = queue.Queue()
        for slot in range(jobs):
            uids = (self.lease.uids[2 * slot], self.lease.uids[2 * slot + 1]) if self.lease else (None, None)
            self.slots.put((slot, *uids))
        self.base = sandbox.make_base()
        self.counter = 0
        self.counter_lock = threading.Lock()

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
        if self.lease:
            self.lease.close()

    def grade(self, task: Task) -> Outcome:
        """Grade one task; whatever goes wrong becomes the task's error rows."""
        try:
            return self._grade(task)
        except Exception as problem:  # noqa: BLE001 -- one student must never stop the class
            reason = f"the grader could not grade this notebook ({type(problem).__name__}: {problem})"
            return Outcome(task, rows_for(task, self.catalogs[task.notebook], None, reason=reason), None, reason)

    def _grade(self, task: Task) -> Outcome:
        catalog = self.catalogs[task.notebook]
        if task.submitted is None:
            return Outcome(task, rows_for(task, catalog, None, reason="notebook not submitted"), None,
                           "notebook not submitted")
        try:
            submitted = read_notebook(task.submitted)
        except Refused as refused:
            reason = f"not graded: {refused}"
            return Outcome(task, rows_for(task, catalog, None, reason=reason), None, reason)
        prepared = graded_copy(submitted, self.instructor[task.notebook])
        overlay = _student_overlay(task.submitted.parent)
        slot, uid, checker_uid = self.slots.get()
        with self.counter_lock:
            self.counter += 1
            index = self.counter
        try:
            return self._run(task, catalog, prepared, overlay, index, uid, checker_uid)
        finally:
            self.slots.put((slot, uid, checker_uid))

    def _run(self, task, catalog, prepared, overlay, index, uid, checker_uid) -> Outcome:
        workdir = self.base / f"run-{index}"
        checkdir = self.base / f"check-{index}"
        private = sandbox.private_folder(self.base, str(index))
        try:
            notebook = sandbox.prepare_workdir(workdir, prepared.notebook, task.notebook, overlay, uid)
            run = sandbox.run_notebook(notebook, workdir, private, profile=self.profile, limits=self.limits,
                                       uid=uid)
            shutil.rmtree(workdir, ignore_errors=True)
            sandbox.prepare_checkdir(checkdir, checker_uid)
            checked = sandbox.run_checks(task.notebook, self.groups[task.notebook], run.exports, checkdir,
                                         private, limits=self.limits, uid=checker_uid)
            rows = rows_for(task, catalog, run, checked.records)
            if checked.ended.outcome != "finished" or checked.ended.returncode:
                for row in rows:
                    if row["status"] != PASSED and row["check"] not in checked.records:
                        row["message"] += f" (the checks process: {checked.ended.message or 'ended early'})"
            self._keep(task, run, checked)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            shutil.rmtree(checkdir, ignore_errors=True)
            shutil.rmtree(private, ignore_errors=True)
        notes = [run.message] + prepared.notes
        if run.killed:
            notes.append(f"{run.killed} process(es) left running were killed")
        return Outcome(task, rows, run, "; ".join(notes))

    def _keep(self, task: Task, run: sandbox.RunResult, checked: sandbox.CheckRun) -> None:
        student = safe_name(task.student)
        executed = self.out_dir / "executed" / student
        logs = self.out_dir / "logs" / student
        executed.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        if run.executed:
            kept = _cut_outputs(run.executed.read_bytes())
            if kept:
                (executed / f"{task.notebook}.ipynb").write_bytes(kept)
        parts = [(run.log, "notebook"), (checked.log, "checks")]
        with open(logs / f"{task.notebook}.log", "wb") as log:
            for path, what in parts:
                if path.is_file():
                    log.write(f"==== {what}\n".encode())
                    log.write(path.read_bytes()[-MAX_KEPT_NOTEBOOK:])


# ---------------------------------------------------------------------------
# the class


def find_tasks(submissions: Path, notebooks: list[str]) -> list[Task]:
    """A task per student folder and notebook.  A student "folder" that is a link is
    graded as a link (refused, with error rows), never followed."""
    students = sorted(p for p in submissions.iterdir()
                      if not p.name.startswith(".") and (is_folder(p) or p.is_symlink()))
    if not students:
        raise LabError(f"no student folders in {submissions}",
                       "put each student's notebooks in SUBMISSIONS_DIR/<student>/<notebook>.ipynb")
    tasks = []
    for student in students:
        for name in notebooks:
            if not is_folder(student):
                tasks.append(Task(student.name, name, student))  # read_notebook refuses the link
                continue
            path = student / f"{name}.ipynb"
            handed_in = os.path.lexists(path)  # a link or a folder is read and refused, not skipped
            tasks.append(Task(student.name, name, path if handed_in else None))
    return tasks


def write_feedback(out_dir: Path, student: str, outcomes: list[Outcome]) -> Path:
    colours = {PASSED: "#1a7f37", FAILED: "#b35900", ERROR: "#cf222e", TIMEOUT: "#8250df",
               BY_HAND: "#0969da", hand.MARKED: "#1a7f37"}
    parts = [f"<!doctype html><meta charset='utf-8'><title>Feedback: {html.escape(student)}</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             "table{border-collapse:collapse;width:100%}td,th{border:1px solid #ccc;padding:.3em .5em;"
             "vertical-align:top;text-align:left}pre{margin:0;white-space:pre-wrap}</style>",
             f"<h1>Feedback for {html.escape(student)}</h1>"]
    grand, grand_max = 0.0, 0.0
    for outcome in outcomes:
        got = sum(r["points"] for r in outcome.rows)
        most = sum(r["max_points"] for r in outcome.rows)
        grand, grand_max = grand + got, grand_max + most
        parts.append(f"<h2>{html.escape(outcome.task.notebook)}: {got:g} / {most:g} points</h2>"
                     f"<p>{html.escape(outcome.note)}</p>")
        if outcome.run and outcome.run.cell_errors:
            parts.append("<p>Cells that raised an error:</p><ul>" + "".join(
                f"<li><code>{html.escape(e)}</code></li>" for e in outcome.run.cell_errors) + "</ul>")
        parts.append("<table><tr><th>check</th><th>status</th><th>points</th><th>message</th></tr>")
        for row in outcome.rows:
            colour = colours.get(row["status"], "#000")
            kind = " (hidden)" if row["hidden"] else ""
            parts.append(f"<tr><td><code>{html.escape(row['check'])}</code>{kind}</td>"
                         f"<td style='color:{colour}'><b>{row['status']}</b></td>"
                         f"<td>{row['points']:g} / {row['max_points']:g}</td>"
                         f"<td><pre>{html.escape(row['message'])}</pre></td></tr>")
        parts.append("</table>")
    parts.append(f"<h2>Total: {grand:g} / {grand_max:g} points</h2>")
    target = out_dir / "feedback" / f"{safe_name(student)}.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts), encoding="utf-8")
    return target


def summary(frame, wall_s: float, jobs: int, scheduler: str | None = None) -> str:
    import pandas as pd

    totals = frame.groupby("student")[["points", "max_points"]].sum()
    statuses = frame.pivot_table(index="student", columns="status", values="check", aggfunc="count",
                                 fill_value=0)
    table = pd.concat([totals, statuses], axis=1)
    counts = frame["status"].value_counts()
    return "\n".join([
        "per student:", table.to_string(float_format=lambda v: f"{v:g}"),
        "statuses: " + ", ".join(f"{status} {count}" for status, count in counts.items()),
        f"graded {frame['student'].nunique()} student(s) x {frame['notebook'].nunique()} notebook(s) "
        f"in {wall_s:.1f} s " + (f"on the Dask cluster at {scheduler}" if scheduler else f"with {jobs} job(s)"),
        f"isolation: {sandbox.isolation_note()}",
    ])


def grade(submissions: Path | str, out_dir: Path | str, *, jobs: int = 1, profile: str | None = "quick",
          timeout_s: float = 300.0, notebooks: list[str] | None = None,
          instructor_dir: Path | str | None = None, limits: sandbox.Limits | None = None,
          progress: bool = True, scheduler: str | None = None, certs: Path | str | None = None,
          manual: Path | str | None = None):
    """Grade every student's notebooks; write the gradebook, feedback and executed
    notebooks under `out_dir`; return (gradebook DataFrame, summary text).

    On this machine with `jobs` notebooks at a time, or with `scheduler` (a Dask
    scheduler's address; LABKIT_DASK_SCHEDULER too) each notebook as a task on a
    cluster's grading workers (labkit.instructor.cluster), as the grader whose certificate
    is in `certs` (certs.folder_for).  Either way only what has no row in the ledger for
    the same content is graded.

    Written answers are marked by hand: OUT_DIR/answers.csv lists them with an empty points
    column; `manual` is that file filled in, whose marks go into the gradebook and the
    feedback pages (kept in OUT_DIR/answers.csv for every later run; labkit.instructor.hand)."""
    from . import certs as certificates, cluster

    submissions, out_dir = Path(submissions), Path(out_dir)
    scheduler = scheduler or os.environ.get(cluster.SCHEDULER_ENV) or None
    if not submissions.is_dir():
        raise LabError(f"{submissions} is not a folder", "give the folder holding one folder per student")
    if scheduler:  # refused before anything is read or built: a plaintext address, no certificate
        certificates.require_tls(scheduler, "labkit grade --scheduler")
        certificates.load("grader", certs)
    if jobs < 1:
        raise LabError(f"--jobs {jobs}: at least one notebook must run at a time", "use --jobs 1 or more")
    # the marks given so far, and those of a filled-in file: a bad file is refused before anything runs
    marks = {**hand.kept(out_dir), **(hand.read(manual) if manual else {})}
    limits = limits or sandbox.Limits()
    limits.timeout_s = timeout_s
    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir.chmod(0o700)  # other students' notebooks and grades: never readable by a grading uid
    instructor_dir = Path(instructor_dir or paths.NOTEBOOKS)
    instructor_bytes = {path.stem: path.read_bytes() for path in sorted(instructor_dir.glob("*.ipynb"))}
    grader = Grader(instructor_dir, out_dir, jobs, profile, limits)
    ledger = Ledger(out_dir)
    outcomes: list[Outcome] = []
    try:
        graded = [n for n, catalog in grader.catalogs.items() if catalog]
        notebooks = notebooks or graded
        unknown = [n for n in notebooks if n not in graded]
        if unknown:
            raise LabError(f"no checks to grade in {', '.join(unknown)}",
                           f"grade notebooks with checks: {', '.join(graded) or '(none found)'}")
        tasks = find_tasks(submissions, notebooks)
        release.warn_other_releases(tasks, instructor_bytes)  # graded all the same: only says so
        digests = {(t.student, t.notebook): digest(t, instructor_bytes[t.notebook]) for t in tasks}
        todo = []
        for task in tasks:
            earlier = ledger.outcome(task, digests[(task.student, task.notebook)])
            outcomes.append(earlier) if earlier else todo.append(task)
        if len(todo) < len(tasks):
            print(f"{len(tasks) - len(todo)} notebook(s) graded in an earlier run and unchanged: kept",
                  file=sys.stderr)

        def finished(outcome: Outcome) -> None:
            ledger.add(outcome, digests[(outcome.task.student, outcome.task.notebook)])
            outcomes.append(outcome)
            _write_gradebook(out_dir, tasks, outcomes)

        if scheduler and todo:
            _grade_on_cluster(todo, grader, instructor_bytes, scheduler, out_dir, finished, progress, profile,
                              timeout_s, certs)
        elif todo:
            _grade_here(todo, grader, jobs, finished, progress)
    finally:
        grader.close()
    answers = hand.settle(out_dir, [row for o in outcomes for row in o.rows], marks)
    frame = _write_gradebook(out_dir, tasks, outcomes)
    order = {(t.student, t.notebook): i for i, t in enumerate(tasks)}
    outcomes.sort(key=lambda o: order[(o.task.student, o.task.notebook)])
    for student in dict.fromkeys(o.task.student for o in outcomes):
        write_feedback(out_dir, student, [o for o in outcomes if o.task.student == student])
    text = summary(frame, time.monotonic() - started, jobs, scheduler) + "\n" + answers
    (out_dir / "summary.txt").write_text(text + "\n")
    return frame, text


def _grade_here(tasks: list[Task], grader: Grader, jobs: int, finished, progress: bool) -> None:
    from tqdm.auto import tqdm

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(grader.grade, task) for task in tasks]
        bar = tqdm(concurrent.futures.as_completed(futures), total=len(futures), unit="notebook",
                   desc="grading", disable=not progress, file=sys.stderr)
        for future in bar:
            outcome = future.result()
            finished(outcome)
            bar.write(f"{outcome.task.student}/{outcome.task.notebook}: {outcome.note}", file=sys.stderr)


def _grade_on_cluster(tasks, grader, instructor_bytes, scheduler, out_dir, finished, progress, profile,
                      timeout_s, certs) -> None:
    """Each task on a Dask worker (cluster.run); the results written here as they come."""
    from . import cluster
    from .submissions import safe_name

    identity = cluster.lab_identity()
    payloads = [cluster.payload_for(task, instructor_bytes, profile, timeout_s, identity) for task in tasks]
    kept: dict[tuple[str, str], Outcome] = {}

    def on_result(task: Task, result) -> None:
        if isinstance(result, cluster.Result):
            student = safe_name(task.student)
            for folder, data, suffix in (("executed", result.executed, "ipynb"), ("logs", result.log, "log")):
                if data:
                    (out_dir / folder / student).mkdir(parents=True, exist_ok=True)
                    (out_dir / folder / student / f"{task.notebook}.{suffix}").write_bytes(data)
            outcome = Outcome(task, result.rows, Recorded(result.cell_errors), f"{result.note} (on {result.worker})")
        else:
            reason = (f"the grading task failed twice on the cluster ({type(result).__name__}: {result})"
                      if not isinstance(result, cluster.WrongLab) else f"not graded: {result}")
            outcome = Outcome(task, rows_for(task, grader.catalogs[task.notebook], None, reason=reason), None,
                              reason)
        kept[(task.student, task.notebook)] = outcome

    restarted = cluster.run(tasks, payloads, scheduler, on_result, progress, certs)
    for key, outcome in kept.items():
        if key in restarted:
            outcome.note = f"{outcome.note}; {restarted[key]}"
        finished(outcome)


def _write_gradebook(out_dir: Path, tasks: list[Task], outcomes: list[Outcome]):
    """gradebook.csv from the outcomes so far, in the tasks' order, written whole then renamed
    (a reader never sees half a file)."""
    import pandas as pd

    order = {(t.student, t.notebook): i for i, t in enumerate(tasks)}
    ordered = sorted(outcomes, key=lambda o: order[(o.task.student, o.task.notebook)])
    frame = pd.DataFrame([row for o in ordered for row in o.rows], columns=COLUMNS)
    partial = out_dir / "gradebook.csv.part"
    frame.to_csv(partial, index=False)
    partial.replace(out_dir / "gradebook.csv")
    return frame
