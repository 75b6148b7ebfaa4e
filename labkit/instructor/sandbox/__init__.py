"""One graded run, isolated.

  run.py        from outside: a working directory and a uid of its own, limits, walls, a
                timeout, the clean-up (run_notebook, run_checks)
  isolation.py  its walls: a cgroup, namespaces, a root of its own (root only)
  uids.py       the grading uids: leased to one grader at a time, emptied after each run
  watch.py      the run watched from outside: its time, disk, memory, a fork bomb
  runner.py     inside, under the run's uid: `python -m labkit.instructor.sandbox.runner`

Importing this package imports nothing: runner.py, inside the run, imports nothing of labkit
before it lowers its limits.
"""
