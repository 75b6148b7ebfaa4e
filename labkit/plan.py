"""A plan: one experiment with its values chosen and checked, ready to sweep.

experiments.resolve() makes one, and the plan is what travels from then on: a
notebook shows it (describe) and reads its values (plan["clients"]), the control
panel starts its fields from it, the sweep measures its points() and stores the
rows under its experiment's name.  Nothing downstream looks the experiment up
by name again.  A plan that resolve made has its values checked by their kinds,
against the load generator's limits and the open-file limit, links that can be
made, and its pinning resolved (procs.Pinning, with the note to show beside it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from labkit.errors import LabError
from labkit.friendly import Note
from labkit.params import BOTH, FROM_MACHINE, LOAD, NO_LINK, SWEEP, cpu_text

if TYPE_CHECKING:
    from labkit.experiments import Experiment
    from labkit.measure import Run
    from labkit.procs import Pinning


def point_key(experiment: str, point: dict, repeat: int, version: str | None = None) -> str:
    """A run's key in the results file, stable across runs and machines: the same point and
    repeat of the same experiment give the same key (so an interrupted sweep resumes).  A
    server whose source is the student's own has its `version` (capstone.version()) in the
    key: an edited server is measured again, never resumed from an older one's rows."""
    identity = {"experiment": experiment, "point": point, "repeat": repeat}
    if version is not None:
        identity["version"] = version
    identity = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


# The largest seed repeat_seed gives: the load generator takes --seed 0 to LONG_MAX
# (csrc/loadgen/options.c, the --seed row), and 2**31 - 1 is within it on every platform.
SEED_MAX = 2 ** 31 - 1


def repeat_seed(key: str) -> int:
    """The load generator's --seed for the run keyed `key` (point_key), 1 to SEED_MAX: each
    repeat of a point draws its own Poisson schedule, service times and body sizes (an
    independent replication), and a resumed sweep gives a repeat the seed it would have had.
    A load that draws nothing (evenly spaced arrivals, fixed sizes and service) runs the same
    whatever the seed."""
    return int(key, 16) % SEED_MAX + 1


def _seeded(load, key: str):
    """`load` (a procs.LoadSpec) with the seed of the run keyed `key`, unless the experiment
    gives one of its own (a parameter: uploads' `seed`, the same sizes on purpose)."""
    if load.options.get("seed") is not None:
        return load
    return dataclasses.replace(load, options={**load.options, "seed": repeat_seed(key)})


@dataclass(frozen=True)
class Plan:
    """`experiment` under `profile` with its checked `values` (a parameter's name -> its value;
    the CPU sets as `pinning` resolved them).  plan["clients"] reads one value."""

    experiment: Experiment
    values: dict
    profile: str
    pinning: Pinning

    def __getitem__(self, name: str):
        return self.values[name]

    @property
    def pinning_note(self) -> str:
        """What to say about the CPUs (shared, or taken from a small machine), or ""."""
        return self.pinning.note

    def with_values(self, **given) -> Plan:
        """The same experiment and profile, `given` values changed (None: back to the
        default) and the others kept, checked again.  CPUs the machine chose stay the
        machine's choice while they are left as they are (a sweep leases them)."""
        values = {**self.values, **given}
        if self.pinning.from_machine:
            for name in ("server_cpus", "client_cpus"):
                # as a list or as the panel's text ("0", "0, 1"): the same CPUs either way
                if cpu_text(values[name]).replace(" ", "") == cpu_text(self.values[name]).replace(" ", ""):
                    values[name] = FROM_MACHINE
        return self.experiment.resolve(self.profile, **values)

    def describe(self) -> Note:
        """The chosen values in a line to read before a sweep: "proc_top (profile quick):
        models iterative, select; clients 10, 50; ..."."""
        def shown(param):
            value = self.values[param.name]
            values = value if isinstance(value, (list, tuple)) else [value]
            return ", ".join(param.kind.text(v) for v in values) or "none"

        return Note(f"{self.experiment.name} (profile {self.profile}): "
                    + "; ".join(f"{p.title} {shown(p)}" for p in self.experiment.fields))

    # -- the grid ---------------------------------------------------------------
    def grid(self) -> list[dict]:
        """One point per combination of the axes, in the order they are declared: each
        axis's column with one value, every other parameter (but repeats) as it is; the
        points the experiment leaves out are dropped (left_out lists them)."""
        leave_out = self.experiment.leave_out
        return [point for point in self._every_point() if not (leave_out and leave_out(point, self))]

    def left_out(self) -> list[tuple[dict, str]]:
        """The grid points the experiment's leave_out drops, each with the reason."""
        leave_out = self.experiment.leave_out
        if leave_out is None:
            return []
        reasons = [(point, leave_out(point, self)) for point in self._every_point()]
        return [(point, why) for point, why in reasons if why]

    def _every_point(self) -> list[dict]:
        experiment = self.experiment
        fixed = {p.column: _copy(self.values[p.name]) for p in experiment.parameters
                 if not p.kind.is_list and p.to != SWEEP}
        points = [_without_link({**dict(zip(experiment.axis_columns, values)), **fixed})
                  for values in itertools.product(*(self.values[p.name] for p in experiment.axes))]
        return [point for i, point in enumerate(points) if point not in points[:i]]

    def points(self) -> list[Run]:
        """What the sweep measures: each grid point's repeats (point by point, each point's
        in order), as measure.Runs, each with its own seed (repeat_seed)."""
        from labkit import capstone, perf
        from labkit.measure import Run

        experiment = self.experiment
        events = (*perf.DEFAULT_EVENTS, *experiment.events) if experiment.events else None
        stacks = bool(self.values.get("profile_stacks"))
        runs = []
        for point in self.grid():
            load = experiment.load_spec(point)
            for repeat in range(self.values["repeats"]):
                key = point_key(experiment.name, point, repeat, capstone.version(point.get("model")))
                runs.append(Run(experiment.server_spec(point), _seeded(load, key), self.pinning,
                                link=experiment.link(point), events=events, stacks=stacks, watch=experiment.watch,
                                point=point, repeat=repeat, key=key))
        return runs

    def another_repeat(self, run: Run, repeat: int) -> Run:
        """`run` again as repeat number `repeat` of its point, keyed and seeded as points()
        would (a repeat a target asks for past the planned ones: labkit.repeat_until)."""
        from labkit import capstone

        key = point_key(self.experiment.name, run.point, repeat, capstone.version(run.point.get("model")))
        load = dataclasses.replace(self.experiment.load_spec(run.point), sanitize=run.load.sanitize)
        return dataclasses.replace(run, repeat=repeat, key=key, load=_seeded(load, key))


def _copy(value):
    return list(value) if isinstance(value, list) else value


def _without_link(point: dict) -> dict:
    """A same_host point has no link: its link parameters at their empty values (one
    loopback point, not one per link delay)."""
    if point.get("placement", "same_host") != "same_host":
        return point
    return {**point, **{name: value for name, value in NO_LINK.items() if name in point}}


# ---------------------------------------------------------------------------
# making one: Experiment.resolve


def make(experiment: Experiment, profile: str, given: dict) -> Plan:
    """`experiment`'s values under `profile`, `given` ones overriding (None = the default),
    each checked by its kind, the pinning resolved; refused with a LabError where a point
    could not run (the load generator's limits, the open files, a link, an empty grid)."""
    from labkit.procs import Pinning

    profiles = {"full": {}, **experiment.profiles}
    if profile not in profiles:
        raise LabError(f"unknown profile {profile!r} for {experiment.name}",
                       f"choose one of: {', '.join(profiles)}")
    names = [p.name for p in experiment.parameters]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise LabError(f"{experiment.name} has no parameter {', '.join(unknown)}",
                       f"its parameters are: {', '.join(names)}")
    raw = {**experiment.defaults, **profiles[profile],
           **{name: value for name, value in given.items() if value is not None}}
    values = {p.name: p.kind.check(p.name, raw[p.name]) for p in experiment.parameters}
    _check_generator_limits(experiment, values)
    asked = {name: None if values[name] == FROM_MACHINE else values[name] for name in ("server_cpus", "client_cpus")}
    pinning = Pinning.resolve(asked["server_cpus"], asked["client_cpus"])
    values.update(server_cpus=pinning.server_cpus, client_cpus=pinning.client_cpus)
    plan = Plan(experiment, values, profile, pinning)
    grid = plan.grid()
    _check_open_files(experiment, grid)
    for point in grid:
        experiment.link(point)  # a link that cannot be (jitter above its delay, an MTU too large) is refused now
    if not grid:
        reasons = sorted({why for _, why in plan.left_out()})
        raise LabError(f"{experiment.name}: every grid point is left out ({'; '.join(reasons)})",
                       "choose smaller values, or raise the limit that leaves them out")
    return plan


def _check_generator_limits(experiment: Experiment, values: dict) -> None:
    """Every number that becomes a load generator flag, against the limit the generator
    declares for that flag (`loadgen --describe`): refused here, not at run time."""
    from labkit import build

    limits = build.loadgen_limits()["flags"]
    for param in experiment.parameters:
        bound = limits.get(param.flag_name) if param.to in (LOAD, BOTH) else None
        if bound is None:
            continue
        for value in values[param.name] if param.kind.is_list else [values[param.name]]:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            low = value > bound["above"] if "above" in bound else value >= bound.get("min", value)
            if not low or value > bound["max"]:
                least = f"more than {bound['above']:g}" if "above" in bound else f"from {bound['min']:g}"
                raise LabError(f"{param.name} {param.kind.text(value)} is outside what the load generator "
                               f"takes for --{param.flag_name}: {least} to {param.kind.text(bound['max'])}",
                               f"give {param.name} {least} to {param.kind.text(bound['max'])}")


def _check_open_files(experiment: Experiment, grid: list[dict]) -> None:
    """Refuse up front a point the hard open-file limit cannot hold, saying what fits
    (the soft limit is raised before the run: procs.ensure_nofile)."""
    from labkit import system
    from labkit.procs import open_files_problem

    hard = system.nofile_limit()[1]
    for point in grid:
        load = experiment.load_spec(point)
        problem = open_files_problem(load.clients, load.idle, hard)
        if problem:
            raise problem
