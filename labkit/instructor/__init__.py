"""The instructor's side of the lab, a room per job.

  basics/    what every room below shares: submissions (what students handed in, read
             without following links), outcomes (how a graded run ended, in one vocabulary),
             exports (the values a graded run hands to the checks), tags (the cells' tags)
  release/   `labkit release`: the students' edition
             edition: solutions -> stubs, hidden checks removed; readme: the edition's README
  sandbox/   one graded run, isolated: outside (work folders, limits, timeout, clean-up),
             lab_copy (the lab it works in), isolation (its walls), uids (a uid per run, leased
             and emptied), watch (its time, disk, memory, a fork bomb), inside (the student's uid)
  grading/   one student's notebook graded: grader (its two runs, its rows and feedback page),
             check_cells (the checks of a notebook), judge (the checks, under another uid),
             hand (written answers marked by a person)
  cluster/   grading on Dask: tasks (every student x notebook as one task); gate (what each
             certificate's role may do); certs (the cluster's certificates, mutual TLS)
  lms/       the LMS's formats: a class collected from its downloads, marks handed back
  course/    a course's grading: class_grades (`labkit grade`: a class into a gradebook, here or
             on the cluster), lms_commands (collect, gradebook, feedback)
  autograder/ grading on Gradescope or PrairieLearn: platforms (each as a declaration, its
             results.json from the gradebook's rows); package (the zip, the image's folder);
             entry (inside the platform's container: one submission graded); commands

Each room imports only the rooms listed above it (tests/layout/test_layout.py).

Figures and tables for slides are labkit.publish; what a student's notebook imports to
check itself is labkit.exercises.  The files checks, predictions, c_exercises,
c_exercise_catalog and c_exercise_shed here are the exercises' old names, kept for notebooks
and editions handed out before, and exports and gate the old names of basics.exports (a
graded notebook's records) and cluster.gate (a worker's `--preload`): each gives the very
module it became.  Importing this package, or any of its rooms, imports nothing
(sandbox/inside.py relies on it).
"""
