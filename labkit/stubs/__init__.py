"""The C exercises as a tree holds them: in the students' edition four of the lab's own C
functions ship as stubs, and what runs one cannot be measured until the student's function
replaces it.

  catalog          each C exercise: its function, the file that holds it, what runs it
  which_edition    which edition a tree is; a student's C function put into its csrc/
  unsolved         which of the lab's programs wait for an unsolved C exercise (below)

The measurement (labkit.measure, labkit.sweep, the benches, the battery) asks here before it
runs anything; the checks a notebook runs on the exercises are labkit.exercises', above it:

    wait = stubs.blocking(server=spec, load=load)       # None: nothing waits
    wait.exercise.label, wait.what                      # "1.1", "the top service"
    wait.sentence                                       # what a student reads instead of a failure
"""

from __future__ import annotations

from .unsolved import Waiting, blocking, blocking_backend, blocking_service, require_measured, waiting

__all__ = ["Waiting", "blocking", "blocking_backend", "blocking_service", "require_measured", "waiting"]
