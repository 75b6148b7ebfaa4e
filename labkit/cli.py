"""`labkit doctor | build | experiments | sweep | bench | export | grade | release | cluster init | scheduler |
worker`: the lab from a terminal.

Exit status: 0 done, 1 the work ran but something failed (a failed build
output, failed points), 2 a LabError (message and fix on stderr, no traceback).
Heavy modules (pandas, psutil) are imported only by the commands that need
them, so `python3 -m labkit build` works with the system python3.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .errors import BuildError, LabError

EXIT_OK, EXIT_FAILED, EXIT_USER = 0, 1, 2


def _doctor(args) -> int:
    from . import doctor, orphans

    if args.clean:
        cleaned = orphans.clean()
        if cleaned:
            print("\n".join(cleaned))
        else:
            print("nothing to clean: no process or pid file left behind by labkit")
        return EXIT_OK
    checks = doctor.findings(args.certs)
    print(doctor.report(checks))
    # A "fail" means the lab cannot build or measure here; warnings still let it run.
    return EXIT_FAILED if any(check.status == doctor.FAIL for check in checks) else EXIT_OK


def _build(args) -> int:
    from . import build

    bin_dir = build.build(sanitize=args.sanitize)
    programs = sorted(path.name for path in bin_dir.iterdir() if path.is_file()) if bin_dir.is_dir() else []
    print(f"built in {bin_dir}: {', '.join(programs) or 'nothing yet (no sources)'}")
    return EXIT_OK


def _notebooks(args) -> int:
    """Copy the lab's notebooks into a folder of the user's (a shared install's are
    read-only); a notebook already there is the user's work and is left as it is."""
    import shutil

    from . import paths

    dest = (args.dest or paths.HOME / "notebooks").expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    copied, kept = [], []
    for notebook in sorted(paths.NOTEBOOKS.glob("*.ipynb")):
        target = dest / notebook.name
        if target.exists():
            kept.append(notebook.name)
        else:
            shutil.copyfile(notebook, target)
            copied.append(notebook.name)
    print(f"in {dest}: copied {', '.join(copied) or 'nothing'}"
          + (f"; kept your own {', '.join(kept)}" if kept else ""))
    return EXIT_OK


def _experiments(args) -> int:
    """Every experiment in a line each; with a name, that one's parameters (defaults as each
    parameter's kind writes them: 16GB, on/off, not 17179869184 or False)."""
    from . import experiments

    if args.name is None:
        catalogue = experiments.catalogue()
        width = max(map(len, catalogue))
        for experiment in catalogue.values():
            print(f"{experiment.name:<{width}}  {experiment.title}")
        print("\nOne experiment's parameters: labkit experiments NAME")
        return EXIT_OK
    experiment = experiments.get(args.name)
    profiles = ", ".join(["full", *(p for p in experiment.profiles if p != "full")])
    print(f"{experiment.name}: {experiment.title}")
    print(f"  profiles: {profiles}; grid: {' x '.join(p.name for p in experiment.axes)}; "
          f"x axis: {experiment.x if experiment.chart == 'lines' else 'bars per grid point'}; "
          f"figures: {', '.join(figure.metric for figure in experiment.figures)}")
    for param in experiment.parameters:
        quick = experiment.profiles.get("quick", {}).get(param.name)
        default = _text(param, param.default) + (f" (quick: {_text(param, quick)})" if quick is not None else "")
        fixed = ", fixed by the experiment" if param.fixed else ""
        print(f"  --set {param.name}=...  {param.help}{fixed}")
        print(f"        {param.kind.describe()}; default {default}")
    return EXIT_OK


def _text(param, value) -> str:
    """A value as labkit sweep --set takes it back: lists comma-separated, each item as its kind writes it."""
    if isinstance(value, (list, tuple)):
        return ",".join(param.kind.typed(v) for v in value) or "empty"
    return "empty" if value is None else param.kind.typed(value)


def _given(args) -> dict:
    """`--set key=value` (and the shortcuts --models, --clients, ...) as parameter values."""
    from . import experiments

    experiment = experiments.get(args.experiment)
    given = {"models": args.models, "clients": args.clients, "repeats": args.repeats,
             "server_cpus": args.server_cpus, "client_cpus": args.client_cpus}
    given = {name: value for name, value in given.items() if value is not None}
    names = [p.name for p in experiment.parameters]
    for setting in args.set or []:
        name, equals, value = setting.partition("=")
        name = name.strip()
        if not equals or not name:
            raise LabError(f"--set {setting!r} is not key=value",
                           f"write e.g. --set clients=10,50; the keys of {experiment.name}: {', '.join(names)}")
        if name not in names:
            raise LabError(f"{experiment.name} has no parameter {name}",
                           f"its parameters are: {', '.join(names)} (labkit experiments lists them)")
        given[name] = value.strip()
    return given


def _until(args, experiment):
    """--until METRIC:PERCENT (and --most N) as a repeat_until.Target, or None."""
    from . import repeat_until

    if not args.until:
        return None
    metric, colon, percent = args.until.rpartition(":")
    try:
        relative = float(percent) / 100
    except ValueError:
        relative = None
    if not colon or not metric or relative is None:
        raise LabError(f"--until {args.until!r} is not METRIC:PERCENT",
                       "write e.g. --until lat_p99_us:10 (the median of p99 known to ±10% at 95%)")
    figures = [figure.metric for figure in experiment.figures]
    if metric not in figures and metric not in experiment.summary_columns:
        raise LabError(f"{experiment.name} does not draw {metric}",
                       f"choose one of: {', '.join(dict.fromkeys([*figures, *experiment.summary_columns]))}")
    return repeat_until.Target(metric, relative, args.most)


def _sweep(args) -> int:
    from . import experiments, plots, store, sweep
    from .row import succeeded

    experiment = experiments.get(args.experiment)
    plan = experiment.resolve(args.profile, **_given(args))
    if plan.pinning_note:
        print(f"note: {plan.pinning_note}", file=sys.stderr)
    results = args.results or os.environ.get("LABKIT_RESULTS") or None  # the notebooks' rule too
    frame = sweep.run(plan, results=results, resume=not args.resume_off, until=_until(args, experiment),
                      budget_s=args.budget * 60 if args.budget else None)
    if frame.attrs.get("reused"):
        print(f"note: {frame.attrs['reused']} of {frame.attrs['planned']} point(s) were already measured in "
              f"{frame.attrs['results']} and were reused, not measured again (--no-resume measures them again)",
              file=sys.stderr)
    table = sweep.median_table(frame, experiment.axis_columns, columns=experiment.summary_columns)
    if not succeeded(frame).any():
        print("no point was measured successfully")
    print("median of the repeats that succeeded (n of them; failed: how many did not), per point:\n"
          + table.to_string(float_format=plots.readable, na_rep="—", sparsify=False))
    failed = frame[~succeeded(frame)] if not frame.empty else frame
    for _, row in failed.iterrows():
        where = " ".join(f"{axis}={row[axis]}" for axis in experiment.axis_columns)
        print(f"FAILED {where} repeat {row['repeat']}: {row['error']}", file=sys.stderr)
    where = results or store.results_path(experiment.name)
    print(f"{len(frame)} rows in {where}")
    return EXIT_FAILED if len(failed) else EXIT_OK


def _bench(args) -> int:
    from . import bench

    print(bench.run_command(args))
    return EXIT_OK


def _export(args) -> int:
    from .publish import export

    out_dir = args.out or export.DEFAULT_OUT
    if args.execute or not args.notebooks:
        sources = args.notebooks or export.lab_notebooks()
        print(f"executing {len(sources)} notebook(s) with papermill, profile {args.profile} ...", file=sys.stderr)
        notebooks = export.execute(sources, out_dir / "notebooks", profile=args.profile)
    else:
        notebooks = args.notebooks
    report = export.export(notebooks, out_dir, embed_in_place=args.embed)
    print(report.summary())
    return EXIT_OK


def _grade(args) -> int:
    from .instructor.course import class_grades

    _, summary = class_grades.grade(args.submissions, args.out, jobs=args.jobs, profile=args.profile,
                             timeout_s=args.timeout, notebooks=args.notebooks, scheduler=args.scheduler,
                             certs=args.certs, manual=args.manual)
    print(summary)
    print(f"gradebook: {args.out / 'gradebook.csv'}; feedback: {args.out / 'feedback'}/<student>.html")
    return EXIT_OK


def _worker(args) -> int:
    """Check this machine can grade, then become a Dask worker with one grading slot."""
    from .instructor.cluster import tasks as cluster

    command = cluster.worker_command(args.address, args.name, certs=args.certs, host=args.host)
    problems = cluster.check_worker_machine()
    if problems:
        raise LabError("this machine cannot be a grading worker: " + "; ".join(problems),
                       "fix the above, then run labkit worker ADDRESS again")
    print(f"labkit {cluster.lab_identity()}: {' '.join(command.argv)}", file=sys.stderr, flush=True)
    command.exec()


def _scheduler(args) -> int:
    from .instructor.cluster import tasks as cluster

    command = cluster.scheduler_command(args.host, args.port, dashboard=args.dashboard, certs=args.certs,
                                        scheduler_file=args.scheduler_file)
    where = f"tls://{args.host}:{args.port}"
    print(f"labkit scheduler at {where} (mutual TLS, the gate preloaded); dashboard: "
          + (f"http://127.0.0.1:{args.dashboard}/status (on this host only: ssh -L {args.dashboard}:127.0.0.1:"
             f"{args.dashboard} you@this-host)" if args.dashboard else "none (--dashboard PORT for one on 127.0.0.1)"),
          file=sys.stderr, flush=True)
    command.exec()


def _cluster(args) -> int:
    from .instructor.cluster import certs

    folder = certs.init(args.folder, course=args.course, days=args.days, force=args.force)
    print(certs.where_to_copy(folder.resolve()))
    return EXIT_OK


def _release(args) -> int:
    from .stubs import which_edition as editions
    from .instructor.release import edition as release

    written = release.release(args.out)
    out = args.out or release.DEFAULT_OUT
    info = editions.edition(out)
    notebooks = sorted(p.name for p in written if p.suffix == ".ipynb")
    print(f"students' copy in {out}: {len(written)} files, release {info['release']} of the lab's commit "
          f"{info['lab_commit'][:12]}{' (with uncommitted changes)' if info['lab_tree_dirty'] else ''}, "
          f"a git repository (branch main) to push or serve with nbgitpuller; notebooks: {', '.join(notebooks)}")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    from . import repeat_until

    top = argparse.ArgumentParser(prog="labkit", description="The concurrent-servers lab from a terminal.")
    commands = top.add_subparsers(dest="command", required=True)

    doctor = commands.add_parser("doctor", help="what this machine can measure, and how to fix what it cannot")
    doctor.add_argument("--clean", action="store_true", help="stop processes and remove pid files left by a crash")
    doctor.add_argument("--certs", type=Path, help="also check a grading cluster's certificates in this folder "
                                                   "(default: LABKIT_CLUSTER_CERTS or /etc/labkit/cluster, if any)")
    doctor.set_defaults(run=_doctor)

    build = commands.add_parser("build", help="compile the servers and the load generator (make)")
    build.add_argument("--sanitize", action="store_true", help="build with AddressSanitizer + UBSan into build/san/bin")
    build.set_defaults(run=_build)

    notebooks = commands.add_parser("notebooks", help="copy the lab's notebooks into a folder of yours (the ones "
                                                      "already there are kept)")
    notebooks.add_argument("dest", nargs="?", type=Path, help="default: LABKIT_HOME/notebooks")
    notebooks.set_defaults(run=_notebooks)

    listing = commands.add_parser("experiments", help="every experiment in a line; with a name, its parameters "
                                                      "and profiles")
    listing.add_argument("name", nargs="?", help="an experiment, e.g. write_strategies: its parameters")
    listing.set_defaults(run=_experiments)

    sweep = commands.add_parser("sweep", help="measure an experiment's grid and append rows to data/results/")
    sweep.add_argument("experiment", help="experiment name, e.g. proc_top (labkit experiments lists them)")
    sweep.add_argument("--profile", default="full", help="quick or full (default full)")
    sweep.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="any parameter of the experiment, lists comma-separated: "
                            "--set clients=10,50 --set models=epoll,poll (repeat --set for more)")
    sweep.add_argument("--models", nargs="+", help="server models, e.g. iterative threaded select")
    sweep.add_argument("--clients", nargs="+", type=int, help="client counts, e.g. 10 50 100")
    sweep.add_argument("--repeats", type=int, help="measurements per point")
    sweep.add_argument("--server-cpus", nargs="+", type=int, help="CPUs for the server, e.g. 0")
    sweep.add_argument("--client-cpus", nargs="+", type=int, help="CPUs for the load generator, e.g. 1")
    sweep.add_argument("--results", help="JSON Lines file to append to (default data/results/<experiment>.jsonl)")
    sweep.add_argument("--no-resume", dest="resume_off", action="store_true",
                       help="measure every point again, even those already in the results file")
    sweep.add_argument("--until", metavar="METRIC:PERCENT",
                       help="repeat each point past --repeats until the median of METRIC is known to within PERCENT "
                            "at 95%%, e.g. lat_p99_us:10 (6 repeats at the least; netperf's -I)")
    sweep.add_argument("--most", type=int, default=repeat_until.Target.most,
                       help=f"--until: repeats per point at the most (default {repeat_until.Target.most})")
    sweep.add_argument("--budget", type=float, metavar="MINUTES",
                       help="start no point once this many minutes have passed; a next run measures the rest")
    sweep.set_defaults(run=_sweep)

    bench = commands.add_parser("bench", help="the lab against its anchors: rtt (vs sockperf), throughput, events, "
                                                   "upload (vs iperf3), scaling, queueing (vs theory), "
                                                   "replications (a run's interval vs 30 runs)")
    bench.add_argument("bench", choices=("rtt", "throughput", "events", "upload", "scaling", "queueing",
                                         "replications"),
                       help="rtt: round trip vs sockperf; throughput: every model at 100 connections; "
                            "events: select/poll/epoll cost vs watched descriptors; "
                            "upload: one connection's 10 MB uploads to each model vs iperf3; "
                            "scaling: a worker model at 1, 2, 4 ... workers, the generator on the other CPUs; "
                            "queueing: a known service time under even and Poisson arrivals vs queueing theory; "
                            "replications: one spin point 30 times, how often a run's own interval holds the median")
    bench.add_argument("--server-cpus", nargs="+", type=int, help="CPUs for the server (default: the first)")
    bench.add_argument("--client-cpus", nargs="+", type=int, help="CPUs for the client (default: the second)")
    bench.add_argument("--rounds", type=int, default=3, help="rtt, upload: interleaved rounds of each tool (default 3)")
    bench.add_argument("--seconds", type=int, help="rtt: seconds per sockperf round; upload: per iperf3 round "
                                                   "(default 2); queueing: per run (default 2); replications: per "
                                                   "run (default 4)")
    bench.add_argument("--replications", type=int,
                       help="queueing: runs of each point, each with its own seed, interleaved (default 5); "
                            "replications: runs of the one point (default 30)")
    bench.add_argument("--exchanges", type=int, default=20000, help="rtt: ping-pongs per lab round (default 20000)")
    bench.add_argument("--engine", choices=("events", "threads"), default="events", help="rtt: loadgen engine")
    bench.add_argument("--models", nargs="+", help="throughput: server models (default: all)")
    bench.add_argument("--model", default="epoll_workers", help="scaling: the worker model (default epoll_workers)")
    bench.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32],
                       help="scaling: worker counts, as many as the machine holds (default 1 2 4 ... 32)")
    bench.add_argument("--clients", type=int, help="throughput, scaling: connections (default 100; scaling 400)")
    bench.add_argument("--requests", type=int,
                       help="throughput, scaling: exchanges per connection (default 200; scaling 2000)")
    bench.add_argument("--descriptors", nargs="+", type=int, default=[100, 1000, 10000],
                       help="events: watched descriptor counts (default 100 1000 10000)")
    bench.add_argument("--active", type=int, default=1, help="events: active descriptors (default 1)")
    bench.add_argument("--writes", type=int, default=1000, help="events: chained events per run (default 1000)")
    bench.add_argument("--runs", type=int, default=5, help="events: timed runs, median reported (default 5)")
    bench.set_defaults(run=_bench)

    export = commands.add_parser("export", help="every figure (PNG, SVG, PDF, HTML) and table (CSV, Markdown, "
                                                "LaTeX) of the lab's notebooks into one folder, with an index")
    export.add_argument("--notebooks", nargs="+", type=Path,
                        help="executed notebooks to export (with --execute: notebooks to run first); "
                             "default: run the lab's notebooks")
    export.add_argument("--execute", action="store_true",
                        help="run the notebooks with papermill before exporting (the default without --notebooks)")
    export.add_argument("--profile", default="quick", help="profile for --execute: quick or full (default quick)")
    export.add_argument("--out", type=Path, help="folder to write (default build/export)")
    export.add_argument("--embed", action="store_true",
                        help="also write a PNG of each plot into the given notebooks themselves, "
                             "so nbconvert shows their plots (the copies in OUT/notebooks always have them)")
    export.set_defaults(run=_export)

    grade = commands.add_parser("grade", help="run every student's notebooks in sandboxes with the hidden checks; "
                                              "write a gradebook CSV and a feedback page per student")
    grade.add_argument("submissions", type=Path, help="folder with one folder per student: <student>/<notebook>.ipynb")
    grade.add_argument("--out", type=Path, required=True, help="folder for gradebook.csv, feedback/, executed/, logs/")
    grade.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    grade.add_argument("--profile", default="quick", help="the notebooks' profile parameter (default quick)")
    grade.add_argument("--timeout", type=float, default=300, help="seconds per notebook before it is stopped "
                                                                  "(default 300)")
    grade.add_argument("--notebooks", nargs="+", help="notebook names to grade, e.g. 01_proc_service "
                                                      "(default: every notebook with checks)")
    grade.add_argument("--scheduler", help="a grading scheduler's address (tls://host:8786, see labkit scheduler): "
                                           "each notebook runs as a task on its grading workers (default: "
                                           "LABKIT_DASK_SCHEDULER, else this machine)")
    grade.add_argument("--certs", type=Path, help="with --scheduler: the folder with the grader's certificate "
                                                  "(default LABKIT_CLUSTER_CERTS, else /etc/labkit/cluster)")
    grade.add_argument("--manual", type=Path, help="answers.csv with the written answers' points filled in: "
                                                   "they go into the gradebook and the feedback pages")
    grade.set_defaults(run=_grade)

    worker = commands.add_parser("worker", help="make this machine a grading worker of a course's scheduler (as root, "
                                                "the lab built, the worker's certificate): one grading slot")
    worker.add_argument("address", help="the scheduler's address, e.g. tls://10.0.0.1:8786 (tcp:// is refused)")
    worker.add_argument("--name", help="the worker's name in the scheduler's logs (default: Dask's)")
    worker.add_argument("--certs", type=Path, help="the folder with the worker's certificate "
                                                   "(default LABKIT_CLUSTER_CERTS, else /etc/labkit/cluster)")
    worker.add_argument("--host", help="the address the worker listens on (default: Dask's choice, the "
                                       "interface that reaches the scheduler)")
    worker.set_defaults(run=_worker)

    scheduler = commands.add_parser("scheduler", help="start a course's grading scheduler: mutual TLS, only the "
                                                      "lab's grading tasks, no dashboard unless asked")
    scheduler.add_argument("--host", default="0.0.0.0", help="the address to listen on (default 0.0.0.0; "
                                                             "127.0.0.1 for one machine)")
    scheduler.add_argument("--port", type=int, default=8786, help="the port (default 8786; 0: any free one)")
    scheduler.add_argument("--dashboard", type=int, metavar="PORT",
                           help="also serve Dask's dashboard, on 127.0.0.1:PORT only (it names every task: "
                                "students and notebooks)")
    scheduler.add_argument("--certs", type=Path, help="the folder with the scheduler's certificate "
                                                      "(default LABKIT_CLUSTER_CERTS, else /etc/labkit/cluster)")
    scheduler.add_argument("--scheduler-file", help="write the scheduler's address to this JSON file")
    scheduler.set_defaults(run=_scheduler)

    cluster = commands.add_parser("cluster", help="the grading cluster's certificates")
    cluster_commands = cluster.add_subparsers(dest="cluster_command", required=True)
    init = cluster_commands.add_parser("init", help="make a CA per role and the scheduler's, workers' and grader's "
                                                    "certificates in FOLDER (only their owner can read them), "
                                                    "and say what to copy where")
    init.add_argument("folder", type=Path, help="where to write them, e.g. ~/course/cluster")
    init.add_argument("--course", default="course", help="the course's name, written into every certificate")
    init.add_argument("--days", type=int, default=180, help="how long they are valid (default 180: a term)")
    init.add_argument("--force", action="store_true", help="replace the certificates already in FOLDER")
    init.set_defaults(run=_cluster)

    release = commands.add_parser("release", help="the students' edition: every file of the lab, solutions (in "
                                                  "notebooks and C) replaced by stubs, hidden checks and the "
                                                  "instructor's tests removed, RELEASE.json, a git repository")
    release.add_argument("--out", type=Path, help="folder to write (default build/release; an earlier release "
                                                  "there is replaced; any other non-empty folder is refused)")
    release.set_defaults(run=_release)

    from .instructor.course import lms_commands

    lms_commands.add(commands)
    from .instructor.autograder import commands as autograder_commands

    autograder_commands.add(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except BuildError as error:
        print(error.output.rstrip(), file=sys.stderr)
        print(f"error: {error.what}", file=sys.stderr)
        if error.fix:
            print(f"  -> {error.fix}", file=sys.stderr)
        return EXIT_USER
    except LabError as error:
        print(f"error: {error.what}", file=sys.stderr)
        if error.fix:
            print(f"  -> {error.fix}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        from . import launcher

        launcher.stop_all()
        print("interrupted: every process labkit started was stopped; measured rows were kept",
              file=sys.stderr)
        return 130
