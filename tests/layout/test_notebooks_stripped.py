"""Notebooks are committed clean: no outputs, no execution counts, no saved
widget state, and a `parameters` cell (for papermill) that sets `profile`."""

import ast

import nbformat
import pytest

from labkit import paths

NOTEBOOKS = sorted(paths.NOTEBOOKS.glob("*.ipynb"))


def leftovers(nb):
    """What a run left in the notebook (empty when it is stripped)."""
    found = [f"cell {i}: {what}" for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             for what, left in [("outputs", cell.get("outputs")),
                                ("execution_count", cell.get("execution_count"))] if left]
    if nb.metadata.get("widgets"):
        found.append("metadata.widgets (saved widget state)")
    return found


def defines_profile(nb):
    """True if a cell tagged `parameters` assigns `profile`."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            for node in ast.walk(ast.parse(cell.source)):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AnnAssign) else []
                if any(isinstance(t, ast.Name) and t.id == "profile" for t in targets):
                    return True
    return False


def test_the_lab_has_notebooks():
    assert NOTEBOOKS, f"no notebooks in {paths.NOTEBOOKS}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stripped(path):
    nb = nbformat.read(path, as_version=4)
    assert leftovers(nb) == [], f"{path.name}: clear all outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_a_parameters_cell_with_profile(path):
    assert defines_profile(nbformat.read(path, as_version=4)), \
        f'{path.name}: add a code cell tagged "parameters" with profile = "full"'


def test_the_checks_catch_a_run_notebook():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell('profile = "full"', metadata={"tags": ["parameters"]})
    nb.cells.append(cell)
    assert leftovers(nb) == [] and defines_profile(nb)

    cell.execution_count = 1
    cell.outputs = [nbformat.v4.new_output("stream", text="hi\n")]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    assert len(leftovers(nb)) == 3

    cell.metadata["tags"] = []
    assert not defines_profile(nb)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_cell_that_ends_with_a_written_answer_shows_it_once(path):
    """ex.answer() shows its RECORDED line and returns the result: a cell that ends with the
    call, without `;`, shows the line a second time as the cell's value."""
    nb = nbformat.read(path, as_version=4)
    twice = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "ex.answer(" not in cell.source:
            continue
        body = ast.parse(cell.source).body
        last = body[-1] if body else None
        if isinstance(last, ast.Expr) and "ex.answer(" in ast.unparse(last) \
                and not cell.source.rstrip().endswith(";"):
            twice.append(i)
    assert twice == [], f"{path.name}: cells {twice} end with ex.answer(...) and no ';'"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_test_tag_is_read_by_a_test(path):
    """A cell tagged test-... is one tests/notebooks/test_notebooks.py reads by that tag: a tag no test
    reads is left from a test that changed, and tells the next editor a wrong thing."""
    reading = (paths.ROOT / "tests" / "notebooks" / "test_notebooks.py").read_text()
    tags = [tag for cell in nbformat.read(path, as_version=4).cells
            for tag in cell.get("metadata", {}).get("tags", []) if tag.startswith("test-")]
    named = [tag for tag in tags if tag != "test-figure"]  # test-figure: every figure a test counts
    assert len(named) == len(set(named)), f"a tag twice: {named}"
    assert [tag for tag in tags if f'"{tag}"' not in reading] == []
