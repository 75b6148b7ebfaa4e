"""Experiments: each one is a declaration file in this folder plus its notebook.

An Experiment says everything the rest of labkit needs to know of it:
  * its parameters (labkit.params: a kind, a default, a help line, where the
    value goes), and profiles overriding the defaults: "full" is the
    experiment as the course runs it, "quick" is small enough that its
    notebook runs in about a minute on two cores (papermill tests, grading);
  * its grid: one point per combination of its list parameters (its axes), in
    the order they are declared;
  * how a grid point becomes a server spec, a load spec and a pinning;
  * its figures: the x axis (or bars per grid point) and the metrics offered.
The sweep, the CLI, the control panel and the plots read these and nothing
else, so a new experiment is one new file here (see docs/architecture.md,
"Adding an experiment").

The registry finds every module here that defines EXPERIMENT, and every
.py file in the folders named by LABKIT_EXPERIMENTS (colon-separated): an
instructor's own experiments, or a test's.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from labkit.errors import LabError
from labkit.friendly import Note
from labkit.params import BOTH, FROM_MACHINE, LOAD, NO_LINK, SERVER, SWEEP, Param

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
    # A grid point this experiment does not run: leave_out(point, params) says why, or "" to run it
    # (uploads: a point moving more bytes than the cap).  grid() drops them; left_out() lists them.
    leave_out: Callable[[dict, dict], str] | None = None
    # perf events counted beside the default ones, on both sides (syscall tracepoints:
    # labkit.perf.SYSCALL_EVENTS); NaN where this machine cannot count them
    events: tuple[str, ...] = ()
    # Whose work the figures measure.  False: the server's, and a load generator that kept
    # its CPUs busy measured itself there (its points are flagged, more client CPUs advised).
    # True: the sender's own calls are the lesson (write strategies, Nagle): one connection
    # sending as fast as it can keeps its one CPU busy by design, more CPUs would not help it.
    client_is_subject: bool = False

    def __post_init__(self):
        names = [p.name for p in self.parameters]
        problems = [f"no parameter {self.x!r} for the x axis"] if self.x not in names else []
        problems += [f"parameter {n!r} twice" for n in set(names) if names.count(n) > 1]
        problems += [f"no {required!r} parameter" for required in ("models", "clients", "repeats",
                                                                     "server_cpus", "client_cpus")
                     if required not in names]
        problems += [f"profile {p!r} names no parameter {k!r}" for p, given in self.profiles.items()
                     for k in given if k not in names]
        if self.chart not in ("lines", "bars"):
            problems.append(f"chart {self.chart!r} is neither 'lines' nor 'bars'")
        if problems:
            raise ValueError(f"experiment {self.name}: " + "; ".join(problems))

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

    # -- resolving and the grid -----------------------------------------------
    def resolve(self, profile: str = "full", **given) -> dict:
        """The parameters under `profile`, `given` values overriding (None = the default),
        each checked by its kind, the pinning resolved, the open files checked."""
        profiles = {"full": {}, **self.profiles}
        if profile not in profiles:
            raise LabError(f"unknown profile {profile!r} for {self.name}",
                           f"choose one of: {', '.join(profiles)}")
        names = [p.name for p in self.parameters]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise LabError(f"{self.name} has no parameter {', '.join(unknown)}",
                           f"its parameters are: {', '.join(names)}")
        raw = {**self.defaults, **profiles[profile],
               **{name: value for name, value in given.items() if value is not None}}
        params = {p.name: p.kind.check(p.name, raw[p.name]) for p in self.parameters}
        self._check_generator_limits(params)
        self._resolve_pinning(params)
        params["experiment"] = self.name
        params["profile"] = profile
        self._check_open_files(params)
        for point in self.grid(params):
            self.link(point)  # a link that cannot be (jitter above its delay, an MTU too large) is refused now
        if not self.grid(params):
            reasons = sorted({why for _, why in self.left_out(params)})
            raise LabError(f"{self.name}: every grid point is left out ({'; '.join(reasons)})",
                           "choose smaller values, or raise the limit that leaves them out")
        return params

    def _check_generator_limits(self, params: dict) -> None:
        """Every number that becomes a load generator flag, against the limit the generator
        declares for that flag (`loadgen --describe`): refused here, not at run time."""
        from labkit import build

        limits = build.loadgen_limits()["flags"]
        for param in self.parameters:
            bound = limits.get(param.flag_name) if param.to in (LOAD, BOTH) else None
            if bound is None:
                continue
            values = params[param.name] if param.kind.is_list else [params[param.name]]
            for value in values:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                low = value > bound["above"] if "above" in bound else value >= bound.get("min", value)
                if not low or value > bound["max"]:
                    least = f"more than {bound['above']:g}" if "above" in bound else f"from {bound['min']:g}"
                    raise LabError(f"{param.name} {param.kind.text(value)} is outside what the load generator "
                                   f"takes for --{param.flag_name}: {least} to {param.kind.text(bound['max'])}",
                                   f"give {param.name} {least} to {param.kind.text(bound['max'])}")

    def _resolve_pinning(self, params: dict) -> None:
        from labkit.procs import Pinning

        asked = {name: None if params[name] == FROM_MACHINE else params[name]
                 for name in ("server_cpus", "client_cpus")}
        pinning = Pinning.resolve(asked["server_cpus"], asked["client_cpus"])
        params.update(server_cpus=pinning.server_cpus, client_cpus=pinning.client_cpus,
                      pinning_note=pinning.note)

    def grid(self, params: dict) -> list[dict]:
        """One point per combination of the axes, in the order they are declared: each
        axis's column with one value, every other parameter (but repeats) as it is."""
        return [point for point in self._every_point(params)
                if not (self.leave_out and self.leave_out(point, params))]

    def describe(self, params: dict) -> Note:
        """The chosen values in a line to read before a sweep: "proc_top (profile quick):
        models iterative, select; clients 10, 50; ..."."""
        def shown(param):
            value = params[param.name]
            values = value if isinstance(value, (list, tuple)) else [value]
            return ", ".join(param.kind.text(v) for v in values) or "none"

        return Note(f"{self.name} (profile {params.get('profile', 'full')}): "
                    + "; ".join(f"{p.title} {shown(p)}" for p in self.fields))

    def left_out(self, params: dict) -> list[tuple[dict, str]]:
        """The grid points leave_out drops, each with the reason."""
        if self.leave_out is None:
            return []
        reasons = [(point, self.leave_out(point, params)) for point in self._every_point(params)]
        return [(point, why) for point, why in reasons if why]

    def _every_point(self, params: dict) -> list[dict]:
        fixed = {p.column: _copy(params[p.name]) for p in self.parameters
                 if not p.kind.is_list and p.to != SWEEP}
        points = [self._without_link({**dict(zip(self.axis_columns, values)), **fixed})
                  for values in itertools.product(*(params[p.name] for p in self.axes))]
        return [point for i, point in enumerate(points) if point not in points[:i]]

    def _without_link(self, point: dict) -> dict:
        """A same_host point has no link: its link parameters at their empty values (one
        loopback point, not one per link delay)."""
        if point.get("placement", "same_host") != "same_host":
            return point
        return {**point, **{name: value for name, value in NO_LINK.items() if name in point}}

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

    def pinning(self, point: dict, note: str = ""):
        from labkit.procs import Pinning

        return Pinning(point.get("server_cpus"), point.get("client_cpus"), note)

    def _check_open_files(self, params: dict) -> None:
        """Refuse up front a point the hard open-file limit cannot hold, saying what fits
        (the soft limit is raised before the run: procs.ensure_nofile)."""
        from labkit import system
        from labkit.procs import open_files_problem

        hard = system.nofile_limit()[1]
        for point in self.grid(params):
            load = self.load_spec(point)
            problem = open_files_problem(load.clients, load.idle, hard)
            if problem:
                raise problem

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
        (and per value of any other axis), or bars at each grid point."""
        from labkit import plots

        figure = self.figure_of(metric)
        options = {"log_y": figure.log_y, **options}
        others = [column for column in self.axis_columns if column not in ("model", self.x)]
        if self.chart == "bars":
            return plots.metric_by_point(df, metric, axes=[c for c in self.axis_columns if c != "model"],
                                         include_failed=figure.include_failed, **options)
        return plots.metric_vs(df, metric, x=self.param(self.x).column, series=others,
                               **{"log_x": self.log_x, **options})


def _copy(value):
    return list(value) if isinstance(value, list) else value


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


def resolve(name: str, profile: str = "full", **given) -> dict:
    """The parameters of experiment `name` under `profile`, `given` values overriding (None = default)."""
    return get(name).resolve(profile, **given)


def grid(params: dict) -> list[dict]:
    """The grid points of resolved `params` (they name their experiment)."""
    return get(params["experiment"]).grid(params)

