"""The round trip's three commands on labkit's command line: collect, gradebook, feedback."""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0


def _collect(args) -> int:
    from ..lms.collect import collect

    report = collect(args.lms, args.download, args.roster, args.out)
    print(report.text())
    print(f"next: labkit grade {args.out} --out GRADES")
    return EXIT_OK


def _gradebook(args) -> int:
    from ..lms import books, roster
    from . import class_grades

    students = roster.read(args.roster)      # a bad roster is refused before marks are merged
    frame = class_grades.remark(args.out_dir, args.manual) if args.manual else class_grades.read_gradebook(args.out_dir)
    _, summary = books.export(frame, args.out_dir, args.format, students, due=args.due,
                              penalty=args.late_penalty, target=args.output)
    print(summary)
    return EXIT_OK


def _feedback(args) -> int:
    from ..lms import returns
    from ...errors import LabError

    if not args.zip:
        raise LabError("labkit feedback packs the feedback pages: say --zip",
                       f"labkit feedback {args.out_dir} --zip [--lms canvas|moodle]")
    _, summary = returns.pack(args.out_dir, args.lms)
    print(summary)
    return EXIT_OK


def add(commands) -> None:
    from ..lms.books import FORMATS
    from ..lms.returns import LMS_ZIPS
    from ..lms.sources import SOURCES

    collect = commands.add_parser("collect", help="an LMS's download of submissions into one folder per student, "
                                                  "for labkit grade (the latest submission of each file wins)")
    collect.add_argument("--from", dest="lms", required=True, choices=list(SOURCES),
                         help="what made the download: canvas, moodle or gradescope (their zip), folder "
                              "(<student_id>/<files>)")
    collect.add_argument("download", type=Path, help="the LMS's zip (or, --from folder, the folder)")
    collect.add_argument("--roster", type=Path, required=True,
                         help="CSV with a student_id column, and the LMS's ids (canvas_user_id; first_name, "
                              "last_name; email; ...): labkit.instructor.lms.roster")
    collect.add_argument("--out", type=Path, required=True, help="the submissions folder (files collected "
                                                                 "before are kept unless a later one replaces them)")
    collect.set_defaults(run=_collect)

    book = commands.add_parser("gradebook", help="the graded class as an LMS imports grades: a row per student, "
                                                 "a column per notebook, late penalties, marks by hand")
    book.add_argument("out_dir", type=Path, help="the --out folder of labkit grade")
    book.add_argument("--format", required=True, choices=FORMATS, help="canvas, moodle (their gradebook imports), "
                                                                       "nbgrader (its export's columns), wide")
    book.add_argument("--roster", type=Path, required=True, help="the class list (as for labkit collect)")
    book.add_argument("--due", action="append", metavar="[NOTEBOOK=]DATE",
                      help="when notebooks were due, e.g. 2026-12-01T23:59 (this machine's zone unless one is "
                           "given) or 01_proc_service=2026-11-01T23:59; repeat it")
    book.add_argument("--late-penalty", default="none", metavar="RULE",
                      help="none (default), zero, or per started day/hour: N%%/day, N%%/hour, N/day, N/hour")
    book.add_argument("--manual", type=Path, help="answers.csv with marks filled in: merged first (the "
                                                  "gradebook, answers.csv and feedback pages in OUT_DIR too)")
    book.add_argument("-o", "--output", type=Path, help="file to write (default OUT_DIR/gradebook_<format>.csv)")
    book.set_defaults(run=_gradebook)

    feedback = commands.add_parser("feedback", help="each student's feedback page and executed notebooks, "
                                                    "zipped to hand back")
    feedback.add_argument("out_dir", type=Path, help="the --out folder of labkit grade")
    feedback.add_argument("--zip", action="store_true", help="write OUT_DIR/upload/<student>.zip")
    feedback.add_argument("--lms", choices=LMS_ZIPS, help="also one zip named for that LMS's feedback upload")
    feedback.set_defaults(run=_feedback)
