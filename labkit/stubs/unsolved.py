"""Which of the lab's programs wait for a C exercise the student has not solved yet.

In the students' edition four of the lab's own C functions ship as stubs
(labkit.stubs.catalog: C_EXERCISES, each with what `needs` it): the top
service runs procstat_parse (exercise 1.1), the poll model ev_poll (1.2), the load
generator's writev strategy fill_iovec (4.1), an event loop's --idle-timeout shed_idle
(6.2).  Until the student's visible check passes and puts their function into csrc/, what
runs a stub cannot be measured, and a sweep point, a battery case or a demonstration that
needs it must say so, before it runs, rather than fail and let the student blame their
server.  In the instructor's checkout nothing waits.

    wait = exercises.blocking(server=spec, load=load)   # None: nothing waits
    wait.exercise.label, wait.what                      # "1.1", "the top service"
    wait.sentence                                       # what a student reads instead of a failure
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .catalog import CExercise


@dataclass(frozen=True)
class Waiting:
    """`what` runs the function of `exercise`, which is still the stub."""

    exercise: CExercise
    what: str  # "the top service", "the poll server model", ...

    @property
    def sentence(self) -> str:
        """Why it cannot be measured yet, and what to do: said instead of a failure."""
        e = self.exercise
        return (f"not measurable until exercise {e.label}: {self.what} runs your {e.function}() "
                f"(csrc/{e.source}), which is still the stub. Solve exercise {e.label} in notebook {e.notebook} "
                "first: once its visible check passes, your function is put in place and this runs it.")


def waiting(root: Path | str | None = None) -> list[CExercise]:
    """The C exercises whose function in csrc/ is still the edition's stub (in the tree at
    `root`, default the csrc/ this user's programs are built from); [] in the instructor's
    checkout."""
    from .which_edition import still_stubbed

    return still_stubbed(root)


def blocking(server=None, load=None, root: Path | str | None = None) -> Waiting | None:
    """Whether the procs.ServerSpec `server` or the procs.LoadSpec `load` (either may be None)
    would run an unsolved exercise's stub: the first such, or None."""
    for exercise in waiting(root):
        needs = exercise.needs
        if server is not None and needs.server(server.model, server.service, server.flags):
            what = (f"the {server.model} server's --idle-timeout" if needs.server_flags else
                    f"the {server.model} server model" if needs.models else f"the {server.service} service")
            return Waiting(exercise, what)
        if load is not None and needs.load(load.options):
            return Waiting(exercise, f"the load generator's {load.options['strategy']} strategy")
    return None


def blocking_service(service: str, model: str = "mine", root: Path | str | None = None) -> Waiting | None:
    """Whether a server of `model` running `service` would run an unsolved exercise's stub."""
    exercise = next((e for e in waiting(root) if e.needs.server(model, service, {})), None)
    return Waiting(exercise, f"the {service} service") if exercise else None


def blocking_backend(backend: str, root: Path | str | None = None) -> Waiting | None:
    """Whether csrc/bench's ev_bench for the event backend `backend` would run an unsolved
    exercise's stub (labkit.bench.events)."""
    exercise = next((e for e in waiting(root) if backend in e.needs.backends), None)
    return Waiting(exercise, f"the event-loop benchmark's {backend} backend") if exercise else None


def require_measured(rows) -> None:
    """For a check: a LabError (the check's error, never its failure) with the sentence of
    the points among `rows` (a sweep's DataFrame) that wait for an unsolved exercise: the
    lab's stub kept them from being measured, not the student's code."""
    from ..errors import LabError
    from ..plots import waits_for_exercise

    waits = rows[waits_for_exercise(rows)]
    if len(waits):
        labels = " and ".join(sorted(set(waits["waiting_for_exercise"])))
        raise LabError(f"{len(waits)} of {len(rows)} points: {waits['error'].iloc[0]}",
                       f"solve exercise {labels} first, then run the sweep and this check again")
