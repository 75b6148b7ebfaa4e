"""The parallel phase's groups (tests/conftest.py's group_of): a file's tests go to one
worker together, but for BY_NOTEBOOK's files, whose tests go in bundles of notebooks; a
notebook in no bundle is a group of its own, so a new notebook's tests still run."""

import pytest

from conftest import BY_NOTEBOOK, group_of
from labkit import paths

BROWSER = "tests/notebooks/test_browser.py::test_a_student_runs_the_notebook_in_a_browser"
GRADE, RELEASE = "tests/instructor/test_grade.py", "tests/instructor/test_release.py"


@pytest.mark.parametrize("nodeid, group", [
    (f"{GRADE}::test_the_class_gets_the_expected_statuses_and_points", GRADE),
    (f"{RELEASE}::test_instructor_passes_every_check_and_student_fails_exactly_the_exercises"
     "[07_your_server.ipynb]", f"{RELEASE}::07"),
    (f"{RELEASE}::test_the_edition_builds_from_its_own_folder", f"{RELEASE}::00 04 05 06 *"),
    (f"{BROWSER}[04_write_strategies]", "tests/notebooks/test_browser.py::03 04"),
    (f"{BROWSER}[08_a_new_one]", "tests/notebooks/test_browser.py::08"),
])
def test_a_tests_group(nodeid, group):
    assert group_of(nodeid) == group


@pytest.mark.parametrize("file", sorted(BY_NOTEBOOK))
def test_each_notebook_is_in_one_bundle(file):
    numbers = [path.name[:2] for path in paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")]
    bundled = [number for bundle in BY_NOTEBOOK[file] for number in bundle.split()]
    assert sorted(bundled) == sorted([*numbers, "*"])
