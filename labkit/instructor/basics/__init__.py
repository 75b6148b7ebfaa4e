"""What every instructor's room shares, below them all.

  submissions.py  what students handed in, read as root without following links
  outcomes.py     how a graded run ended, the words every room uses
  exports.py      what a graded notebook hands to the checks, as plain data
  tags.py         the cell tags that mark a notebook's checks and exports

Importing this package imports nothing.
"""
