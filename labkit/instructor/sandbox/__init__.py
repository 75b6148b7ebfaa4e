"""One graded run, isolated.

  outside.py    from outside: a working directory and a uid of its own, limits, walls, a
                timeout, the clean-up (run_notebook, run_checks)
  lab_copy.py   the lab a graded run works in: the edition's C sources, the student's functions
                adopted, the programs built from them (no solution in any form)
  isolation.py  its walls: a cgroup, namespaces, a root of its own (root only)
  uids.py       the grading uids: leased to one grader at a time, emptied after each run
  watch.py      the run watched from outside: its time, disk, memory, a fork bomb
  inside.py     inside, under the run's uid: `python -m labkit.instructor.sandbox.inside`

Importing this package imports nothing: inside.py, in the run, imports nothing of labkit
before it lowers its limits.
"""
