"""A sweep: a plan's points (its grid x repeats), each measured and stored at once.

sweep.run(plan) takes a labkit.plan.Plan (experiments.resolve makes one) and
measures each of its measure.Runs.  Rows go to a JSON Lines file (labkit.store;
default data/results/<experiment>.jsonl) as soon as each point is measured, so
an interrupted sweep loses nothing and resumes where it stopped: a run whose key
is already in the file with status "ok" is not measured again.  The frame it
returns keeps the plan's experiment in frame.attrs["experiment"], for the plots
to read its axes.

Repeats are independent replications, measured in rounds: each run has its own seed
(labkit.plan.repeat_seed, stored in its row as `seed`), and the sweep measures repeat 0 of
every point, then repeat 1 of every point, ..., so that a drift of the machine spreads over
the points.  The repeats a target adds (labkit.repeat_until) come in further rounds over the
points that still need one.

Before it measures, a sweep says how long it will take on this machine (labkit.sweep_time,
from the wall time each earlier row kept: point_wall_s, the repeats a target may add as a
range); given a time budget, it starts no point once the budget is spent, and says how many
are left for the next run to measure.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from . import confinement, cpu_leases, sweep_time, launcher, repeat_until, store
from .friendly import say
from . import measure as measure_module
from .row import OK, SCHEMA, point_medians, succeeded

# Sweep points this process has measured or read back from a results file, all sweeps
# together: labkit.exercises.predictions notes it when a prediction is made.
_points_done = 0


def points_done() -> int:
    """How many sweep points this process (a notebook's kernel) has measured or reused so far."""
    return _points_done


def _environment() -> dict:
    from . import system

    return {f"env_{key}": value for key, value in system.environment().items()}


def _progress_reporter(progress, total, axes: list[str]):
    """(advance(row), close()) for a tqdm bar, a callable, or nothing; total() is the
    points planned so far."""
    if callable(progress):
        done = 0

        def advance(row):
            nonlocal done
            done += 1
            progress(done, total(), row)

        return advance, lambda: None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total(), unit="point")

        def advance(row):
            bar.total = total()
            where = " ".join(f"{row.get(axis)}" for axis in axes)
            bar.set_postfix_str(f"{where} {row.get('status')}", refresh=False)
            bar.update(1)

        return advance, bar.close
    return (lambda row: None), (lambda: None)


def run(plan, results=None, measure=measure_module.point, progress=True, resume: bool = True,
        on_point=None, budget_s: float | None = None, until=None, clock=time.monotonic):
    """Measure every point of `plan` (a labkit.plan.Plan) and return their rows.

    `measure(run)` measures one measure.Run (measure.point); `on_point(row)` sees each
    row as it is stored.  `budget_s`: no point starts once this many seconds (by `clock`)
    have passed; the frame holds the points measured, attrs["unmeasured"] how many were
    left for a next run.  The planned repeats run in rounds (_in_rounds).  `until` (a
    repeat_until.Target): each point is repeated past its planned repeats, in further rounds,
    as its first repeats say it needs; attrs["reached"] says, per point, what was."""
    sweep = Sweep(plan, _results_path(plan, results), measure, resume, on_point, budget_s, until, clock)
    sweep.say_what_it_will_take()
    sweep.lease_cpus()
    sweep.measure_all(progress)
    sweep.say_what_is_left()
    return sweep.frame()


class Sweep:
    """One run of a plan over its results file: the steps run() takes, in order.

    Invariants: a point whose key has an ok row of this SCHEMA in the file is reused, never
    measured again (unless resume is off); each row is stored the moment it is measured; once
    the budget is spent no point starts; whatever the sweep started stops if it is
    interrupted, and the rows stored stay."""

    def __init__(self, plan, path: Path, measure, resume: bool, on_point, budget_s, until, clock):
        self.plan, self.path, self.measure, self.on_point = plan, path, measure, on_point
        self.budget_s, self.until, self.clock = budget_s, until, clock
        self.earlier = store.read_rows(path)
        store.check_schema(self.earlier, path)  # a newer lab's rows are refused before anything is measured
        self.measured_ok = _measured_ok(self.earlier) if resume else set()
        self.latest = {row.get("point_key"): row for row in self.earlier} if resume else {}  # each key's newest
        self.runs = plan.points()
        self.pending = [planned for planned in self.runs if planned.key not in self.measured_ok]
        self.extras: list = []  # the repeats a target adds, as it adds them: the progress's total grows
        self.reached: list = []
        self.reused = self.unmeasured = 0
        self.points_before = _points_done
        self.already_running = set(launcher.live_children())
        self.lease, self.pinning = None, plan.pinning
        quota = confinement.cpu_quota()
        self.stamp = {  # what every row of this sweep records of where and how it ran
            "run_id": uuid.uuid4().hex[:12], "profile": plan.profile,
            "cpu_quota": quota.cpus if quota and quota.cpus is not None else None,  # CPUs' worth; None: none
            **_environment()}

    def say_what_it_will_take(self) -> None:
        """The exercises some points wait for, and how long the points to measure take here."""
        _say_what_waits(self.pending)
        if self.pending:
            took = _estimate(self.plan, self.runs, self.pending, self.earlier, self.path, self.until)
            say(took.sentence() + (f"; time budget {sweep_time.duration_text(self.budget_s)}" if self.budget_s else ""))

    def lease_cpus(self) -> None:
        """CPUs the machine chose are leased for the sweep, so that two lab users' sweeps on one
        machine do not measure each other (or share them, and say so); the point keys stay.
        None where every point is already measured: nothing will run."""
        if not (self.plan.pinning.from_machine and self.pending):
            return
        self.lease = cpu_leases.CpuLease.take()
        self.pinning = self.lease.pinning
        self.runs = [dataclasses.replace(planned, pinning=self.pinning) for planned in self.runs]
        if self.lease.shared:
            say(f"note: {self.pinning.note}")  # a sentence: wraps between words in a notebook

    def measure_all(self, progress) -> None:
        """The planned repeats in rounds, then the rounds a target adds; the lease given back."""
        advance, close = _progress_reporter(progress, lambda: len(self.runs) + len(self.extras),
                                            self.plan.experiment.axis_columns)
        self.started = self.clock()
        with launcher.InterruptsNoted() as interrupts:
            try:
                for planned in _in_rounds(self.runs):
                    interrupts.check()
                    self._take(planned, advance)
                if self.until is not None:
                    for more in _target_rounds(self.plan, self.runs, self.until, self._values):
                        if self._spent():
                            break
                        interrupts.check()
                        self.extras.append(more)
                        self._take(more, advance)
                    self.reached = [(repeats[0].point, self.until.judge(self._values([r.key for r in repeats])))
                                    for repeats in _by_point([*self.runs, *self.extras])]
            except BaseException:
                # KeyboardInterrupt included: whatever this sweep started stops, the rows
                # written so far stay, and the interrupt goes on to the caller.
                launcher.stop_all(keep=self.already_running)
                raise
            finally:
                close()
                if self.lease:
                    self.lease.close()

    def say_what_is_left(self) -> None:
        if self.unmeasured:
            say(f"time budget of {sweep_time.duration_text(self.budget_s)} spent: {self.unmeasured} of "
                f"{len(self.pending)} point(s) not measured; run the sweep again to measure them (the points "
                "measured are kept and not run again)")
        if self.until is not None:
            say(repeat_until.summary(self.until, self.reached, self.plan.experiment.axis_columns))

    def frame(self):
        """The rows of this sweep's points, each point's newest; attrs: reused (points already in
        the results file, not measured again), points_before (points this process had measured or
        reused before this sweep), experiment (the declaration the plots read the axes from)."""
        import pandas as pd

        wanted = {planned.key for planned in (*self.runs, *self.extras)}
        frame = pd.DataFrame([row for row in store.read_rows(self.path) if row.get("point_key") in wanted])
        if not frame.empty:
            frame = frame.drop_duplicates("point_key", keep="last").reset_index(drop=True)
        frame.attrs.update(reused=self.reused, planned=len(self.runs), results=str(self.path),
                           points_before=self.points_before, experiment=self.plan.experiment,
                           unmeasured=self.unmeasured, reached=self.reached)
        return frame

    def _spent(self) -> bool:
        return self.budget_s is not None and self.clock() - self.started >= self.budget_s

    def _values(self, keys) -> list:
        return _values(self.latest, keys, self.until.metric)

    def _take(self, planned, advance) -> None:
        """Measure `planned` and store its row, or reuse its row, or leave it to the budget."""
        global _points_done
        if planned.key in self.measured_ok:
            self.reused += 1
            _points_done += 1
            advance({**planned.point, "repeat": planned.repeat, "status": "skipped (already measured)"})
            return
        if self._spent():
            self.unmeasured += 1
            return
        began = self.clock()
        row = {**planned.point, **self.measure(planned)}  # what was measured wins (server_cpus: the CPUs it had)
        row.update({
            "point_wall_s": self.clock() - began,  # start to stop of the point, its server's start-up included
            "experiment": self.plan.experiment.name,
            "repeat": planned.repeat,
            "point_key": planned.key,
            "seed": planned.load.options.get("seed"),  # the generator's: plan.repeat_seed, or the experiment's own
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "pinning_note": self.pinning.note,
            "cpus_shared": self.lease.shared if self.lease else [],  # with another lab run's lease
            **self.stamp,
        })
        store.append(self.path, row)
        self.latest[planned.key] = row
        _points_done += 1
        advance(row)
        if self.on_point is not None:
            self.on_point(row)


def _in_rounds(runs: list) -> list:
    """`runs` (plan.points(): each point's repeats together) in rounds: repeat 0 of every
    point, then repeat 1 of every point, ...; a drift of the machine over the sweep spreads
    over the points instead of landing on the last ones.  (sorted is stable: within a round
    the points keep the grid's order.)"""
    return sorted(runs, key=lambda planned: planned.repeat)


def _by_point(runs: list) -> list[list]:
    """`runs` grouped by their grid point, in the order each point first appears, each
    point's in the order given."""
    points: dict[str, list] = {}
    for planned in runs:
        points.setdefault(json.dumps(planned.point, sort_keys=True, default=str), []).append(planned)
    return list(points.values())


def _target_rounds(plan, runs: list, until, values):
    """The repeats `until` (a repeat_until.Target) adds past the planned `runs`, in further
    rounds over the points that still need one: each point's need is judged (values(keys):
    its ok values) just before its turn, so every repeat yielded was measured (or given up)
    before the next is asked for."""
    points = _by_point(runs)
    while True:
        added = False
        for repeats in points:
            if until.more(values([r.key for r in repeats]), len(repeats)):
                more = plan.another_repeat(repeats[-1], repeats[-1].repeat + 1)
                repeats.append(more)
                added = True
                yield more
        if not added:
            return


def _values(latest: dict, keys: list[str], metric: str) -> list:
    """`metric` of each of `keys`' rows that is ok."""
    return [latest[key].get(metric) for key in keys if key in latest and latest[key].get("status") == OK]


def how_long(plan, results=None, resume: bool = True, until=None) -> sweep_time.Estimate:
    """How long run(plan, results, until=until) would take on this machine, before anything runs."""
    path = _results_path(plan, results)
    earlier = store.read_rows(path)
    measured_ok = _measured_ok(earlier) if resume else set()
    runs = plan.points()
    return _estimate(plan, runs, [planned for planned in runs if planned.key not in measured_ok], earlier, path, until)


def _results_path(plan, results) -> Path:
    return Path(results) if results is not None else store.results_path(plan.experiment.name)


def _measured_ok(earlier: list[dict]) -> set:
    """The keys of the points measured: a row that is ok and means what this lab's columns mean."""
    return {row.get("point_key") for row in earlier if row.get("status") == OK and row.get("schema", 1) == SCHEMA}


def _estimate(plan, runs, pending, earlier: list[dict], path: Path, until=None) -> sweep_time.Estimate:
    """How long measuring `pending` (of the plan's `runs`) takes here, with the repeats
    `until` may add to each point: from the fewest it runs (repeat_until.FIRST) to its most.
    Before any row of the experiment has its wall time, the other results files beside
    `path` lend their rows to the cost model."""
    from . import system

    mine = [row for row in earlier if row.get("experiment") == plan.experiment.name]
    added = [] if until is None else [(repeats[0], max(0, repeat_until.FIRST - len(repeats)),
                                       max(0, until.most - len(repeats))) for repeats in _by_point(runs)]
    others = []
    if not any(row.get("point_wall_s") for row in mine):
        others = [row for other in sorted(path.parent.glob("*.jsonl")) if other != path
                  for row in store.read_rows(other)]
    return sweep_time.estimate(pending, mine, system.environment().get("hostname"), added=added, others=others)


def _say_what_waits(runs) -> None:
    """Before anything runs: each unsolved exercise some of `runs` (measure.Runs) would run
    the stub of, once, with how many points wait for it (measure.point records them so)."""
    from . import stubs

    waits = [stubs.blocking(server=planned.server, load=planned.load) for planned in runs]
    for sentence in dict.fromkeys(wait.sentence for wait in waits if wait):
        count = sum(1 for wait in waits if wait and wait.sentence == sentence)
        say(f"{count} of {len(runs)} point(s) {sentence}")


def run_each(plans, results=None, **options):
    """run() each of `plans` in turn (e.g. two parts of one experiment's grid that are
    not one product), and their rows in one frame that still declares the experiment.
    pd.concat keeps a frame's attrs only when every frame's are equal, and the counts
    differ: the experiment is kept when the plans share it, the counts are summed."""
    import pandas as pd

    frames = [run(plan, results=results, **options) for plan in plans]
    frame = pd.concat(frames, ignore_index=True)
    experiments = {id(f.attrs.get("experiment")): f.attrs.get("experiment") for f in frames}
    frame.attrs.update(reused=sum(f.attrs["reused"] for f in frames),
                       planned=sum(f.attrs["planned"] for f in frames),
                       unmeasured=sum(f.attrs.get("unmeasured", 0) for f in frames),
                       points_before=frames[0].attrs["points_before"])
    if len(experiments) == 1:
        frame.attrs["experiment"] = next(iter(experiments.values()))
    if len({f.attrs["results"] for f in frames}) == 1:
        frame.attrs["results"] = frames[0].attrs["results"]
    return frame


def median_table(frame, axes: list[str], columns=("elapsed_s", "throughput_rps", "lat_p50_us", "lat_p99_us",
                                                   "server_task-clock", "server_context-switches",
                                                   "client_cpu_util")):
    """One row per grid point (grouped by every axis): how many repeats succeeded (n)
    and failed, and the median of the successful ones (NaN where none did)."""
    import pandas as pd

    if frame.empty:
        return pd.DataFrame()
    shown = [c for c in columns if c in frame.columns]
    ok = succeeded(frame)
    table = point_medians(frame, axes, shown)
    counts = pd.DataFrame({"n": ok.groupby([frame[a] for a in axes]).sum(),
                           "failed": (~ok).groupby([frame[a] for a in axes]).sum()})
    return counts.join(table).astype({"n": int, "failed": int})
