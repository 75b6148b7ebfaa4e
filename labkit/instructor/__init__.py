"""The instructor's side of the lab.

  checks       the Checker a notebook's exercises use (visible and hidden checks)
  c_exercises  C exercises: a student's function compiled in place of the lab's, run in its own process
  release      the students' copy: solutions -> stubs, hidden checks removed
  check_cells  the checks of a notebook, and the student's notebook as it runs at grading
  exports      the values a graded run hands to the checks, as plain data
  checker      the checks process: the instructor's checks on those values, under another uid
  sandbox      one isolated run from outside (work folders, limits, timeout, clean-up);
               isolation: its walls (cgroup, namespaces, root); uids: a uid per run, leased and emptied
  runner       inside the sandbox, under the student's uid: the notebook run through papermill
  submissions  reading what students handed in without following links
  grader       one student's notebook graded: its two runs, its gradebook rows, its feedback page
  grade        a class graded into a gradebook, on this machine or on a Dask cluster (cluster)
  figures      static images through one long-lived kaleido Chromium
  export       every figure and table of the notebooks into one folder
"""
