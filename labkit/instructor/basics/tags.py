"""The tags that mark a notebook's cells for the instructor's rooms (JupyterLab's property
inspector shows and edits them): the release removes a hidden check's cell and keeps an
export's, the grader runs both, the judge reads what the export cells handed over."""

HIDDEN_TAG = "hidden-check"     # a check that runs only when graded: not in the students' edition
EXPORT_TAG = "labkit-export"    # a cell whose values the graded run hands to the judge
