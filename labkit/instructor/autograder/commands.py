"""`labkit autograder ...` on labkit's command line: the packages, and the run inside."""

from __future__ import annotations

import json
from pathlib import Path

EXIT_OK = 0


def _package(args) -> int:
    from . import package

    if args.platform == "gradescope":
        out = package.gradescope(args.out, args.notebooks, args.timeout, args.platform_timeout)
        print(f"Gradescope autograder: {out} (upload it as the assignment's autograder; docs/autograders.md)")
    else:
        out = package.prairielearn(args.out, args.notebooks, args.timeout, args.show_hidden)
        print(f"PrairieLearn grader: {out} (build its Dockerfile, put info-external-grading.json's options "
              "in each question's info.json, its serverFilesCourse/ in the course's; docs/autograders.md)")
        graded = json.loads((out / "lab" / package.CONFIG).read_text())["notebooks"]
        print(package.pids_note(graded) or "", end="\n" if package.pids_note(graded) else "")
    return EXIT_OK


def _run(args) -> int:
    from .platforms import PLATFORMS, not_gradable
    from .entry import run, write_results

    try:
        results = run(args.platform, args.root, args.lab, private=args.lab is not None)
    except Exception as problem:  # the platform gets results whatever failed: the grader's fault, said so
        why = f"the grader failed, not the submission ({type(problem).__name__}: {problem}); tell the instructor"
        write_results(PLATFORMS[args.platform], args.root, not_gradable(PLATFORMS[args.platform], why[:2000]))
        raise
    print(f"results: {results.get('score')} ({len(results.get('tests', []))} tests)")
    return EXIT_OK


def add(commands) -> None:
    auto = commands.add_parser("autograder", help="grade on Gradescope or PrairieLearn: package the lab's grader "
                                                  "for the platform, or (inside it) grade one submission")
    which = auto.add_subparsers(dest="autograder_command", required=True)
    for platform, default in (("gradescope", "autograder.zip"), ("prairielearn", "prairielearn-grader")):
        made = which.add_parser(platform, help=f"write the {platform} package")
        made.add_argument("--out", type=Path, default=Path(default), help=f"where (default {default})")
        made.add_argument("--notebooks", nargs="+", help="notebooks to grade (default: every one with checks)")
        made.add_argument("--timeout", type=float, default=300 if platform == "gradescope" else 600,
                          help="seconds a notebook may run before it is stopped (at most: half of what is left of "
                               "the platform's time bounds it too, docs/autograders.md)")
        if platform == "prairielearn":
            made.add_argument("--show-hidden", action="store_true",
                              help="show hidden checks' names and messages to students at once")
        else:
            made.add_argument("--platform-timeout", type=float, default=600,
                              help="the assignment's autograder timeout set on Gradescope, in seconds (default "
                                   "600, its default): grading ends before it, results written")
            made.set_defaults(show_hidden=False)
        made.set_defaults(run=_package, platform=platform)
    inside = which.add_parser("run", help="inside the platform's container: grade its submission, write results.json")
    inside.add_argument("platform", choices=["gradescope", "prairielearn"])
    inside.add_argument("--root", type=Path, default=Path("/"), help="the container's / (a folder, to try it)")
    inside.add_argument("--lab", type=Path, help="the package's lab, whose instructor-only files are made root's "
                                                 "alone first (default: this labkit's checkout, left as it is)")
    inside.set_defaults(run=_run)
