"""`labkit grade`: grade a whole class's notebooks into one gradebook.

    SUBMISSIONS_DIR/<student>/<notebook>.ipynb        what each student handed in
    SUBMISSIONS_DIR/<student>/csrc/exercises/...      optional: their C exercise files

One task per student and graded notebook (find_tasks), each graded in two
isolated runs by grader.Grader (labkit.instructor.grading.grader says how), either
`--jobs` at a time on this machine or each as a task on a Dask cluster's
grading workers (labkit.instructor.cluster.tasks); the rows come back here as tasks
finish, into the ledger and the gradebook.  Anything that goes wrong with one
student's notebook becomes that student's error rows; the batch always finishes.

OUT_DIR/gradebook.csv        student, notebook, check, points, max_points, status, hidden, message
                             (rewritten as each notebook is graded)
OUT_DIR/graded.jsonl         the ledger: each graded notebook's rows with the digest of what was
                             graded (the submission and the instructor's notebook); grading again
                             grades only what has no row for the same content (an interrupted batch
                             resumes)
OUT_DIR/answers.csv          every written answer, to mark by hand: student, notebook, question,
                             answer, look_for, max_points, points (empty until marked), comment;
                             filled in, it comes back with --manual (labkit.instructor.grading.hand)
OUT_DIR/feedback/<s>.html    each check with its message, totals per notebook
OUT_DIR/executed/<s>/        the executed notebooks (partial when a run was stopped; long outputs cut)
OUT_DIR/logs/<s>/            papermill's and the checks' output for each run
(<s> is the student's folder name, made safe for a file name: submissions.safe_name.)
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import time
from pathlib import Path

from ... import paths, spreadsheet
from ...errors import LabError
from ..basics.submissions import is_folder, safe_name
from ..grading import hand
from ..grading.grader import Grader, Outcome, Recorded, Task, digest, rows_for, write_feedback
from ..release import edition as release
from ..sandbox import outside as sandbox

COLUMNS = ["student", "notebook", "check", "points", "max_points", "status", "hidden", "message"]


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

    def recorded(self, task: Task) -> Outcome | None:
        """The outcome the ledger holds for `task`, whatever it graded."""
        entry = self.done.get((task.student, task.notebook))
        if entry is None:
            return None
        return Outcome(task, entry["rows"], Recorded(entry.get("cell_errors", [])), entry.get("note", ""))

    def outcome(self, task: Task, digest: str) -> Outcome | None:
        """The recorded outcome of `task` if what it grades has not changed since."""
        entry = self.done.get((task.student, task.notebook))
        if entry is None or entry.get("digest") != digest:
            return None
        kept = self.recorded(task)
        kept.note += " (graded in an earlier run; the submission has not changed)"
        return kept

    def add(self, outcome: Outcome, digest: str) -> None:
        import json

        entry = {"student": outcome.task.student, "notebook": outcome.task.notebook, "digest": digest,
                 "rows": outcome.rows, "note": outcome.note,
                 "cell_errors": list(getattr(outcome.run, "cell_errors", []) or [])}
        with open(self.path, "a") as ledger:
            ledger.write(json.dumps(entry) + "\n")
        self.done[(outcome.task.student, outcome.task.notebook)] = entry


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
    cluster's grading workers (labkit.instructor.cluster.tasks), as the grader whose certificate
    is in `certs` (certs.folder_for).  Either way only what has no row in the ledger for
    the same content is graded.

    Written answers are marked by hand: OUT_DIR/answers.csv lists them with an empty points
    column; `manual` is that file filled in, whose marks go into the gradebook and the
    feedback pages (kept in OUT_DIR/answers.csv for every later run; labkit.instructor.grading.hand)."""
    from ..cluster import certs as certificates, tasks as cluster

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
                              certs)
        elif todo:
            _grade_here(todo, grader, jobs, finished, progress)
    finally:
        grader.close()
    frame, answers = _finish(out_dir, tasks, outcomes, marks)
    _write_submitted(out_dir, submissions, tasks)
    text = summary(frame, time.monotonic() - started, jobs, scheduler) + "\n" + answers
    (out_dir / "summary.txt").write_text(text + "\n")
    return frame, text


def _finish(out_dir: Path, tasks: list[Task], outcomes: list[Outcome], marks) -> tuple:
    """The marks into the rows; gradebook.csv, answers.csv and a feedback page per student."""
    answers = hand.settle(out_dir, [row for o in outcomes for row in o.rows], marks)
    frame = _write_gradebook(out_dir, tasks, outcomes)
    order = {(t.student, t.notebook): i for i, t in enumerate(tasks)}
    outcomes.sort(key=lambda o: order[(o.task.student, o.task.notebook)])
    for student in dict.fromkeys(o.task.student for o in outcomes):
        write_feedback(out_dir, student, [o for o in outcomes if o.task.student == student])
    return frame, answers


def read_gradebook(out_dir: Path | str):
    """OUT_DIR/gradebook.csv as `labkit grade` wrote it."""
    import pandas as pd

    path = Path(out_dir) / "gradebook.csv"
    if not path.is_file():
        raise LabError(f"{path} is not there", "grade the class first: labkit grade SUBMISSIONS --out "
                                               f"{Path(out_dir)}")
    frame = spreadsheet.frame_from_csv(pd.read_csv(path, keep_default_na=False))
    if list(frame.columns) != COLUMNS or frame.empty:
        raise LabError(f"{path} is not a gradebook labkit grade wrote (columns {', '.join(frame.columns)})",
                       "give the --out folder of labkit grade")
    return frame


def remark(out_dir: Path | str, manual: Path | str):
    """The marks of a filled-in answers.csv into OUT_DIR's gradebook, answers.csv and feedback
    pages, from the ledger: nothing is run again, and no submissions folder is needed."""
    out_dir = Path(out_dir)
    book = read_gradebook(out_dir)
    marks = {**hand.kept(out_dir), **hand.read(manual)}
    ledger = Ledger(out_dir)
    tasks, outcomes = [], []
    for student, notebook in dict.fromkeys(zip(book["student"], book["notebook"])):
        task = Task(student, notebook, None)
        outcome = ledger.recorded(task)
        if outcome is None:
            raise LabError(f"{out_dir / 'graded.jsonl'} has no {student}/{notebook}, which gradebook.csv has",
                           "grade again: labkit grade SUBMISSIONS --out OUT --manual ANSWERS")
        tasks.append(task)
        outcomes.append(outcome)
    frame, answers = _finish(out_dir, tasks, outcomes, marks)
    print(answers, file=sys.stderr)
    return frame


def _write_submitted(out_dir: Path, submissions: Path, tasks: list[Task]) -> None:
    """OUT_DIR/submitted.csv: when each graded notebook was handed in, from what labkit collect
    recorded in the student's folder (labkit.instructor.lms.collect), for late penalties."""
    from ..lms import books, collect

    rows = []
    for student in dict.fromkeys(t.student for t in tasks):
        folder = submissions / student
        if not is_folder(folder):
            continue
        record = collect.read_record(folder)
        times = collect.submission_times(folder)
        for task in (t for t in tasks if t.student == student and t.submitted is not None):
            kept = record.get(f"{task.notebook}.ipynb", {})
            when = times.get(task.notebook)
            rows.append({"student": student, "notebook": task.notebook,
                         "submitted_at": when.isoformat() if when else "", "lms": kept.get("lms", ""),
                         "handed_in_as": kept.get("handed_in_as", ""), "late_by_lms": kept.get("late_by_lms", "")})
    spreadsheet.write_dicts(out_dir / books.SUBMITTED, books.SUBMITTED_COLUMNS, rows)  # handed_in_as: a student's


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
                      certs) -> None:
    """Each task on a Dask worker (cluster.run); the results written here as they come."""
    from ..cluster import tasks as cluster

    identity = cluster.lab_identity()
    payloads = [cluster.payload_for(task, instructor_bytes, profile, grader.limits, identity) for task in tasks]
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
    spreadsheet.write_frame(frame, out_dir / "gradebook.csv")  # a message may quote a student's text
    return frame
