"""`labkit release`: the students' edition of the instructor's lab.

  edition.py   solutions -> stubs, hidden checks removed, the C exercises' files, RELEASE.json
  readme.py    the edition's README.md, with the table of the C exercises

Importing this package imports nothing.
"""
