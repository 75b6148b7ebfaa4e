"""What a notebook imports to check itself, and what waits for an exercise not yet solved.

  checks           the Checker: visible and hidden checks, written answers, PASS/FAIL
  predictions      a number written down before the sweep that measures it
  catalog          the C exercises whose answers are the lab's own functions, and what runs each
  c_exercises      the C exercises' checks, under the name the notebooks call them by
  procstat_parse   exercise 1.1: the /proc/PID/stat parser
  ev_poll          exercise 1.2: poll's dispatch
  lingering_close  exercise 3.1: a lingering close
  fill_iovec       exercise 4.1: the writev array
  shed_idle        exercise 6.2: the event loop's idle timeout
  edition          which edition a tree is; a student's C function put into its csrc/
  unsolved         which of the lab's programs wait for an unsolved C exercise (below)

The scratch builds these checks run are labkit.scratch's, shared with the battery and
the capstone.  Notebooks and editions handed out before this package existed import
these modules as labkit.instructor.<old name>: labkit.instructor keeps those names.

In the students' edition four of the lab's own C functions ship as stubs, and what runs
one cannot be measured until the student's function replaces it:

    wait = exercises.blocking(server=spec, load=load)   # None: nothing waits
    wait.exercise.label, wait.what                      # "1.1", "the top service"
    wait.sentence                                       # what a student reads instead of a failure
"""

from __future__ import annotations

from .unsolved import Waiting, blocking, blocking_backend, blocking_service, require_measured, waiting

__all__ = ["Waiting", "blocking", "blocking_backend", "blocking_service", "require_measured", "waiting"]
