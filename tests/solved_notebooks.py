"""A notebook as a student who solved every exercise hands it in: the students' edition of the
instructor's notebook with each solution written back into its cell (the tests that grade it)."""

import copy

import nbformat

from labkit import paths
from labkit.instructor.release import edition as release


def solved(name: str):
    """(the instructor's notebook, the students' edition's with every solution written in)."""
    teacher = nbformat.read(paths.NOTEBOOKS / f"{name}.ipynb", as_version=4)
    student, _ = release.release_notebook(copy.deepcopy(teacher), name)
    solutions = {cell.id: cell.source for cell in teacher.cells if "BEGIN SOLUTION" in cell.source}
    for cell in student.cells:
        cell.source = solutions.get(cell.id, cell.source)
    return teacher, student
