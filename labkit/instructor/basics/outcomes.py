"""How a graded run ended: the words the sandbox, the grader, the feedback page and the tests
share, said once here.

A process run behind the walls (sandbox.run_isolated, watched by watch.watch) ends
  FINISHED    by itself (its own report, if any, says more);
  TIMEOUT     stopped at its time limit;
  DISK_FULL   stopped for writing past its disk limit;
  FORK_BOMB   stopped for keeping more processes than its limit;
  MEMORY      stopped at its memory limit (or the kernel's OOM killer ended it).
A student's notebook run (sandbox.RunResult.outcome) ends as one of those but FINISHED, which
becomes the runner's own report (inside.py): COMPLETED (papermill ran it to its end, cell
errors and all), KERNEL_DIED, or FAILED (papermill could not run it, or the runner said
nothing).  Nothing here is a check's status (passed, failed, error: labkit.exercises.checks).
"""

FINISHED, TIMEOUT, DISK_FULL, FORK_BOMB, MEMORY = "finished", "timeout", "disk_full", "fork_bomb", "memory"
COMPLETED, KERNEL_DIED, FAILED = "completed", "kernel_died", "failed"
