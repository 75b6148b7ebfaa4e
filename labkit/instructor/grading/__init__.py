"""One student's notebook graded: its two isolated runs, its checks, its written answers.

  grader.py       one student's notebook: the graded run inside the sandbox, then the judge;
                  its gradebook rows and its feedback page
  check_cells.py  the checks of the instructor's notebook, and the student's as it runs at grading
  judge.py        the judge: `python -m labkit.instructor.grading.judge`, under another uid, runs
                  the checks on what the graded run exported
  hand.py         written answers marked by a person: answers.csv out and back

A whole class (`labkit grade`) is labkit.instructor.course's; what every room shares
(submissions, outcomes, exports, tags) is labkit.instructor.basics'.

Importing this package imports nothing.
"""
