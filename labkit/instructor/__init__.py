"""The instructor's side of the lab.

  checks       the Checker a notebook's exercises use (visible and hidden checks)
  c_exercises  C exercises: a student's function compiled in place of the lab's
  release      the students' copy: solutions -> stubs, hidden checks removed
  sandbox      one notebook run isolated (own uid, limits, timeout)
  grade        a class graded into a gradebook and feedback pages
  figures      static images through one long-lived kaleido Chromium
  export       every figure and table of the notebooks into one folder
"""
