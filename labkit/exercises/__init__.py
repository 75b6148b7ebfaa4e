"""What a notebook imports to check itself: the checks, the predictions, each exercise's check.

  checks           the Checker: visible and hidden checks, written answers, PASS/FAIL
  predictions      a number written down before the sweep that measures it
  c_exercises      the C exercises' checks, under the name the notebooks call them by
  procstat_parse   exercise 1.1: the /proc/PID/stat parser
  ev_poll          exercise 1.2: poll's dispatch
  lingering_close  exercise 3.1: a lingering close
  fill_iovec       exercise 4.1: the writev array
  shed_idle        exercise 6.2: the event loop's idle timeout

The scratch builds these checks run are labkit.scratch's, shared with the battery and
the capstone.  Notebooks and editions handed out before this package existed import
these modules as labkit.instructor.<old name>: labkit.instructor keeps those names.

The C exercises themselves (which functions, which edition this tree is, what waits for an
unsolved one) are labkit.stubs', below the measurement; their names are here too, for the
notebooks (exercises.require_measured).
"""

from __future__ import annotations

from ..stubs.unsolved import Waiting, blocking, blocking_backend, blocking_service, require_measured, waiting

__all__ = ["Waiting", "blocking", "blocking_backend", "blocking_service", "require_measured", "waiting"]
