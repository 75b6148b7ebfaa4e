"""A course's grading, above every other instructor's room.

  class_grades.py  `labkit grade`: a class's notebooks into one gradebook, on this machine's
                   threads or on the cluster, with a ledger so a second run grades only what changed
  lms_commands.py  the LMS round trip's commands: collect, gradebook, feedback

Importing this package imports nothing.
"""
