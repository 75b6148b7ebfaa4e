"""The instructor's side of the lab.

  release      the students' copy: solutions -> stubs, hidden checks removed
  students_readme  the edition's README
  check_cells  the checks of a notebook, and the student's notebook as it runs at grading
  exports      the values a graded run hands to the checks, as plain data
  checker      the checks process: the instructor's checks on those values, under another uid
  sandbox      one isolated run from outside (work folders, limits, timeout, clean-up);
               isolation: its walls (cgroup, namespaces, root); uids: a uid per run, leased and emptied
  outcomes     how a graded run ended, in the words every file here uses (finished, timeout, ...)
  runner       inside the sandbox, under the student's uid: the notebook run through papermill
  run_lab      the lab a graded run works in: the instructor's, with the edition's C sources
  submissions  reading what students handed in without following links
  grader       one student's notebook graded: its two runs, its gradebook rows, its feedback page
  grade        a class graded into a gradebook, on this machine or on a Dask cluster (cluster)
  gate         least privilege on the grading cluster: what each certificate's role may do
  certs        the cluster's certificates (mutual TLS)
  hand         written answers marked by a person: answers.csv out and back
  watch        one graded run watched from outside: its time, disk, memory, a fork bomb
  lms          the LMS round trip: a class collected from its downloads, marks handed back
  figures      static images through one long-lived kaleido Chromium
  export       every figure and table of the notebooks into one folder

What a student's notebook imports to check itself is labkit.exercises.  The files
checks, predictions, c_exercises, c_exercise_catalog and c_exercise_shed here are its
modules' old names, kept for notebooks and editions handed out before: each gives the very
module it became.  Importing this package imports nothing (runner.py relies on it).
"""
