"""`labkit grade`: a class's notebooks into one gradebook.

  grade.py        a class: find the tasks, the ledger, the gradebook (here, or on a cluster)
  grader.py       one student's notebook: its two isolated runs, its rows, its feedback page
  check_cells.py  the checks of the instructor's notebook, and the student's as it runs at grading
  exports.py      what a graded notebook hands to the checks, as plain data
  checker.py      the checks process: `python -m labkit.instructor.grading.checker`, another uid
  hand.py         written answers marked by a person: answers.csv out and back
  submissions.py  what students handed in, read as root without following links
  outcomes.py     how a graded run ended, the words every file here uses
  run_lab.py      the lab a graded run works in: the edition's C sources and programs built from them

Importing this package imports nothing.
"""
