"""Experiments: each one is a declaration file in this folder plus its notebook.

An Experiment says everything the rest of labkit needs to know of it:
  * its parameters (labkit.params: a kind, a default, a help line, where the
    value goes), and profiles overriding the defaults: "full" is the
    experiment as the course runs it, "quick" is small enough that its
    notebook runs in about a minute on two cores (papermill tests, grading);
  * its grid: one point per combination of its list parameters (its axes), in
    the order they are declared;
  * how a grid point becomes a server spec, a load spec and a link;
  * its figures: the x axis (or bars per grid point) and the metrics offered.
resolve() turns an experiment and the values a notebook, the CLI or the panel
chose into a Plan (labkit.plan), the object handed on from then on: the sweep
measures its runs, the panel starts from it, the plots read the experiment a
sweep's frame keeps.  They read the declaration and nothing else, so a new
experiment is one new file here (see docs/architecture.md, "Adding an
experiment").

The experiments here, by notebook:
  proc_top          1: the top-CPU /proc service, iterative vs concurrent (seeds 000, 001)
  echo_scale        2: echo at scale, every readiness and worker model (seed 003)
  idle_conns        2: a fixed load on 100 active connections beside up to 10,000 silent ones
  uploads           3: uploads of 1 KB to 10 MB over 1 to 10,000 connections (seed 002)
  write_strategies  4: the same bytes as many write() calls, one writev() or one copy (seed 004)
  nagle             4: Nagle's algorithm meets delayed ACK
  bdp               5: uploads across a shaped link, against its delay
  offered_load      6: latency against offered load
  accept_queue      6: the accept queue overflowing
  conn_memory       6: memory per connection
  herd              6: the thundering herd
  slow_clients      6: slow and silent clients beside well-behaved ones
  service_time      6: the ground truth, a known cost per request held against queueing theory

The registry finds every module here that defines EXPERIMENT, and every
.py file in the folders named by LABKIT_EXPERIMENTS (colon-separated): an
instructor's own experiments, or a test's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from labkit import plan
from labkit.errors import LabError
from labkit.params import BOTH, LOAD, SERVER, Param
from labkit.plan import Plan

EXTRA_DIRS_ENV = "LABKIT_EXPERIMENTS"


@dataclass(frozen=True)
class Figure:
    """A metric the experiment plots (a results column), as the panel offers it."""

    metric: str
    log_y: bool | None = None  # None: a log axis where the measured values span two decades or more
    include_failed: bool = False  # take failed repeats' values too (lost connections: measured *because* it failed)


# What every experiment can plot, unless it says otherwise.
COMMON_FIGURES = (
    Figure("elapsed_s"), Figure("throughput_rps"), Figure("lat_p50_us"), Figure("lat_p99_us"),
    Figure("server_task-clock"), Figure("server_context-switches"), Figure("client_task-clock"),
    Figure("server_cpu_us_per_request"), Figure("server_cs_per_request"), Figure("server_cycles"),
    Figure("lost_connections", include_failed=True),
)


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    parameters: tuple[Param, ...]
    x: str  # the parameter on the x axis ("clients"); with chart="bars", bars stand at each grid point instead
    chart: str = "lines"  # "lines": metric vs x, a line per model; "bars": a bar per model at each grid point
    log_x: bool = False  # lines: x spans decades (1 to 10,000 connections)
    profiles: dict = field(default_factory=dict)  # profile -> {parameter: value}; "full" is the defaults
    figures: tuple[Figure, ...] = COMMON_FIGURES
    timeout: float = 60.0  # seconds the load generator waits for one exchange
    # A grid point this experiment does not run: leave_out(point, plan) says why, or "" to run it
    # (uploads: a point moving more bytes than the plan's cap).  Plan.grid() drops them; Plan.left_out()
    # lists them.
    leave_out: Callable[[dict, Plan], str] | None = None
    # perf events counted beside the default ones, on both sides (syscall tracepoints:
    # labkit.perf.SYSCALL_EVENTS); NaN where this machine cannot count them
    events: tuple[str, ...] = ()
    # Whose work the figures measure.  False: the server's, and a load generator that kept
    # its CPUs busy measured itself there (its points are flagged, more client CPUs advised).
    # True: the sender's own calls are the lesson (write strategies, Nagle): one connection
    # sending as fast as it can keeps its one CPU busy by design, more CPUs would not help it.
    client_is_subject: bool = False
    # What the kernel is sampled for while each point's load runs (labkit.kernel_view): "memory"
    # (the server's RSS, the kernel's slab, stacks and page tables), "accept_queue" (the listener's)
    watch: tuple[str, ...] = ()

    def __post_init__(self):
        names = [p.name for p in self.parameters]
        problems = [f"no parameter {self.x!r} for the x axis"] if self.x not in names else []
        problems += [f"parameter {n!r} twice" for n in set(names) if names.count(n) > 1]
        problems += [f"no {required!r} parameter" for required in ("models", "clients", "repeats",
                                                                     "server_cpus", "client_cpus")
                     if required not in names]
        problems += [f"profile {p!r} names no parameter {k!r}" for p, given in self.profiles.items()
                     for k in given if k not in names]
        problems += [f"watch {w!r} is neither 'memory' nor 'accept_queue'" for w in self.watch
                     if w not in ("memory", "accept_queue")]
        if self.chart not in ("lines", "bars"):
            problems.append(f"chart {self.chart!r} is neither 'lines' nor 'bars'")
        if problems:
            raise ValueError(f"experiment {self.name}: " + "; ".join(problems))

    def __deepcopy__(self, memo) -> "Experiment":
        """Itself: a declaration never changes.  (pandas deep-copies a frame's attrs into the
        frames made from it, and a sweep's frame keeps its experiment there.)"""
        return self

    # -- what it is made of ----------------------------------------------------
    def param(self, name: str) -> Param:
        for param in self.parameters:
            if param.name == name:
                return param
        raise LabError(f"{self.name} has no parameter {name}",
                       f"its parameters are: {', '.join(p.name for p in self.parameters)}")

    @property
    def axes(self) -> list[Param]:
        """The parameters that span the grid (its list parameters), in declared order."""
        return [p for p in self.parameters if p.kind.is_list]

    @property
    def axis_columns(self) -> list[str]:
        """The results columns that tell one grid point from another: model first."""
        return [p.column for p in self.axes]

    @property
    def summary_columns(self) -> list[str]:
        """What `labkit sweep` summarises per point: the experiment's own figures (the first
        six), and how much of its CPUs the load generator used."""
        metrics = list(dict.fromkeys(figure.metric for figure in self.figures))[:6]
        return [*metrics, "client_cpu_util"]

    @property
    def fields(self) -> list[Param]:
        """The parameters a student chooses (the panel's fields): all but the fixed ones."""
        return [p for p in self.parameters if not p.fixed]

    @property
    def defaults(self) -> dict:
        return {p.name: p.default for p in self.parameters}

    # -- resolving ---------------------------------------------------------------
    def resolve(self, profile: str = "full", **given) -> Plan:
        """A Plan: the parameters under `profile`, `given` values overriding (None = the
        default), each checked by its kind, the pinning resolved, the open files checked."""
        return plan.make(self, profile, given)

    # -- what a point runs ------------------------------------------------------
    def _flags(self, point: dict, side: str) -> dict:
        flags = {p.flag_name: point[p.column] for p in self.parameters
                 if p.to in (side, BOTH) and p.column != "model"}
        if side == SERVER:
            flags.update({p.server_flag: point[p.column] for p in self.parameters if p.server_flag})
        return flags

    def server_spec(self, point: dict, sanitize: bool = False):
        from labkit.procs import ServerSpec

        flags = self._flags(point, SERVER)
        return ServerSpec(point["model"], service=flags.pop("service", "top"), workers=flags.pop("workers", None),
                          flags=flags, sanitize=sanitize)

    def load_spec(self, point: dict, sanitize: bool = False):
        from labkit.procs import LoadSpec

        options = self._flags(point, LOAD)
        return LoadSpec(clients=options.pop("clients"), requests=options.pop("requests", 1),
                        service=options.pop("service", "top"), options=options, timeout=self.timeout,
                        sanitize=sanitize)

    def link(self, point: dict):
        """The link this point runs across (a labkit.netlink.Link, not made yet), or None
        for the same host."""
        if point.get("placement", "same_host") == "same_host":
            return None
        from labkit.netlink import Link

        return Link(rate=point.get("link_rate"), delay_ms=point.get("link_delay_ms", 0),
                    loss_percent=point.get("link_loss_percent", 0.0), jitter_ms=point.get("link_jitter_ms", 0),
                    mtu=point.get("link_mtu", 1500), autocorking=point.get("link_autocorking", "on") == "on")

    # -- its figures ----------------------------------------------------------
    def saturation_warning(self, df) -> str | None:
        """What a student should know of the points where the load generator kept its CPUs
        busy: a warning where the server is the subject, a note where the sender is."""
        from labkit import plots

        return plots.saturation_warning(df, client_is_subject=self.client_is_subject)

    def figure_of(self, metric: str) -> Figure:
        for figure in self.figures:
            if figure.metric == metric:
                return figure
        return Figure(metric)

    def plot(self, df, metric: str, **options):
        """The experiment's figure of `metric`: against its x axis, a line per model
        (and per value of any other axis), or bars at each grid point (the experiment's
        chart, or where `df` has one value of x)."""
        from labkit import plots

        figure = self.figure_of(metric)
        options = {"log_y": figure.log_y, **options}
        others = [column for column in self.axis_columns if column not in ("model", self.x)]
        x = self.param(self.x).column
        # one value of x (a quick profile's single worker count): lines would be points stacked
        # on one another, so bars stand side by side at it instead
        if self.chart == "bars" or (x in df and df[x].nunique() == 1 and df["model"].nunique() > 1):
            return plots.metric_by_point(df, metric, axes=[c for c in self.axis_columns if c != "model"],
                                         include_failed=figure.include_failed, **options)
        return plots.metric_vs(df, metric, x=x, series=others, **{"log_x": self.log_x, **options})


# ---------------------------------------------------------------------------
# the registry


def _extra_files() -> list[Path]:
    files = []
    for folder in filter(None, os.environ.get(EXTRA_DIRS_ENV, "").split(":")):
        files += sorted(Path(folder).glob("*.py"))
    return files


def _load_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"labkit_experiment_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as problem:
        raise LabError(f"the experiment file {path} does not load: {type(problem).__name__}: {problem}",
                       "fix the declaration (python3 it alone shows the traceback)") from problem
    return module


def catalogue() -> dict[str, Experiment]:
    """Every experiment, by name: this package's files, then LABKIT_EXPERIMENTS's."""
    modules = [importlib.import_module(f"{__name__}.{info.name}")
               for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")]
    modules += [_load_file(path) for path in _extra_files()]
    found = {}
    for module in modules:
        experiment = getattr(module, "EXPERIMENT", None)
        if isinstance(experiment, Experiment):
            found[experiment.name] = experiment
    return found


def get(name: str) -> Experiment:
    known = catalogue()
    try:
        return known[name]
    except KeyError:
        raise LabError(f"unknown experiment {name!r}", f"choose one of: {', '.join(sorted(known))}") from None


def resolve(experiment: Experiment | str, profile: str = "full", **given) -> Plan:
    """The Plan of `experiment` (an Experiment, or its name) under `profile`, `given` values
    overriding (None = the default)."""
    if isinstance(experiment, str):
        experiment = get(experiment)
    return experiment.resolve(profile, **given)
