"""The checks of the instructor's notebook, and where they stand in a student's.

check_catalog()  every check: name, points, hidden (the gradebook's rows);
check_groups()   the code that grades them: each check cell, and each
                 `ex.answer(...)` call, with the names it reads;
graded_copy()    the student's notebook as it runs at grading: cells tagged
                 hidden-check removed, the visible check cells restored to the
                 instructor's (found by the checks they declare, not by cell
                 id, so an edited, moved, re-identified or deleted check cell
                 comes back), after each check's place a cell that
                 exports the values it reads (labkit.instructor.basics.exports), and
                 first, the facts the student's own run recorded of their
                 machine (labkit.facts), where the saved notebook holds some.
The checks themselves run later in labkit.instructor.grading.judge, never in the
student's kernel; the hidden ones never appear in the student's notebook.
"""

from __future__ import annotations

import ast
import builtins
import copy
from dataclasses import dataclass, field

from ... import facts
from ..basics.tags import EXPORT_TAG, HIDDEN_TAG

PROVIDED = {"ex"}  # names the checker gives every check


@dataclass(frozen=True)
class CheckSpec:
    """One check as the instructor's notebook declares it."""

    name: str
    max_points: float
    hidden: bool
    by_hand: bool = False   # ex.answer(...): a written answer, its points given by a person


@dataclass
class CheckGroup:
    """Code that grades some checks: a whole check cell, or one `ex.answer(...)` statement."""

    checks: list[str]
    source: str
    needs: list[str]        # the names it reads from the notebook
    hidden: bool
    cell_id: str            # the instructor's cell it comes from
    anchor: str | None      # hidden: the instructor's cell it follows
    exercise: str           # metadata labkit.exercise, "" if none


@dataclass
class Prepared:
    """The notebook to run, and what was put right in it (for the feedback page)."""

    notebook: object
    notes: list[str] = field(default_factory=list)


def _literal(node, default):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return default


def _code_of(cell) -> str:
    # IPython magics and shell escapes are not Python: blank them for the parser.
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in cell.source.splitlines())


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _labkit(cell) -> dict:
    meta = cell.get("metadata", {}).get("labkit", {})
    return meta if isinstance(meta, dict) else {}


def _check_calls(tree) -> list[ast.Call]:
    """`x.check("name", ...)` and `x.answer("name", ...)` calls with a literal name, in order."""
    return sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)
                   and isinstance(node.func, ast.Attribute) and node.func.attr in ("check", "answer")
                   and node.args and isinstance(node.args[0], ast.Constant)
                   and isinstance(node.args[0].value, str)),
                  key=lambda node: (node.lineno, node.col_offset))


def _parse(cell):
    if cell.cell_type != "code":
        return None
    try:
        return ast.parse(_code_of(cell))
    except SyntaxError:
        return None  # a solution stub may not parse; the instructor's notebook does


def check_catalog(nb) -> list[CheckSpec]:
    """Every check in notebook `nb`, in order: `@ex.check("name", points=..., hidden=...)`
    and `ex.answer("name", text, points=...)` calls with a literal name."""
    specs: dict[str, CheckSpec] = {}
    for cell in nb.cells:
        tree = _parse(cell)
        for call in _check_calls(tree) if tree else []:
            keywords = {k.arg: k.value for k in call.keywords}
            # check(name, points=1, hidden=False); answer(name, text, points=1, ...)
            positional = call.args[1:] if call.func.attr == "check" else call.args[2:]
            points = _literal(keywords.get("points", positional[0] if positional else None), 1)
            hidden = bool(_literal(keywords.get("hidden", positional[1] if len(positional) > 1 else None), False))
            hidden = hidden or HIDDEN_TAG in _tags(cell)
            name = call.args[0].value
            specs.setdefault(name, CheckSpec(name, float(points), hidden, call.func.attr == "answer"))
    return list(specs.values())


def free_names(tree) -> list[str]:
    """The names `tree` reads that it does not define itself (nor are builtins)."""
    defined = set(PROVIDED) | set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            defined.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    loaded = [node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)]
    return sorted(set(loaded) - defined)


def _is_check_cell(cell, tree) -> bool:
    """A cell holding checks and no solution: the instructor's copy is authoritative."""
    return (tree is not None and any(call.func.attr == "check" for call in _check_calls(tree))
            and "BEGIN SOLUTION" not in cell.source)


def check_groups(nb) -> list[CheckGroup]:
    """The code that grades each check of the instructor's notebook `nb`, in order."""
    groups, previous_id = [], None
    for cell in nb.cells:
        tree = _parse(cell)
        hidden = HIDDEN_TAG in _tags(cell)
        if tree is not None and _is_check_cell(cell, tree):
            names = [call.args[0].value for call in _check_calls(tree) if call.func.attr == "check"]
            groups.append(CheckGroup(names, cell.source, free_names(tree), hidden, cell.get("id"),
                                     _labkit(cell).get("anchor", previous_id) if hidden else None,
                                     _labkit(cell).get("exercise", "")))
        elif tree is not None:
            for statement in tree.body:
                calls = [c for c in _check_calls(statement) if c.func.attr == "answer"]
                if calls:
                    source = ast.get_source_segment(_code_of(cell), statement)
                    groups.append(CheckGroup([c.args[0].value for c in calls], source, free_names(statement),
                                             hidden, cell.get("id"), None, _labkit(cell).get("exercise", "")))
        if not hidden:
            previous_id = cell.get("id")
    return groups


def _declared(cell) -> set[str]:
    tree = _parse(cell)
    return {call.args[0].value for call in _check_calls(tree)} if tree else set()


def _export_cell(group: CheckGroup):
    import nbformat

    source = ("from labkit.instructor.basics import exports as _labkit_exports\n"
              f"_labkit_exports.save({group.checks!r}, globals(), {group.needs!r})")
    return nbformat.v4.new_code_cell(source, metadata={"tags": [EXPORT_TAG]})


def _place_of(cells, group: CheckGroup) -> int | None:
    """Index of the student's cell after which `group`'s values are exported: the cell
    that declares its checks, else the exercise's last other cell, else its cell id."""
    wanted = set(group.checks)
    for index, cell in enumerate(cells):
        if wanted & _declared(cell):
            return index
    mine = [index for index, cell in enumerate(cells)
            if group.exercise and _labkit(cell).get("exercise") == group.exercise and not _declared(cell)]
    if mine:
        return mine[-1]
    ids = [cell.get("id") for cell in cells]
    return ids.index(group.cell_id) if group.cell_id in ids else None


def graded_copy(submitted, instructor) -> Prepared:
    """The student's notebook as it runs at grading (see the module's docstring)."""
    nb = copy.deepcopy(submitted)
    notes = []
    dropped = [cell for cell in nb.cells if HIDDEN_TAG in _tags(cell) or EXPORT_TAG in _tags(cell)]
    if dropped:
        notes.append(f"{len(dropped)} cell(s) of yours tagged as the grader's own were removed")
    nb.cells = [cell for cell in nb.cells if cell not in dropped]
    carried = facts.carried_cell_source(nb)  # what the student's own run saw of their machine
    if carried is not None:
        import nbformat

        nb.cells.insert(0, nbformat.v4.new_code_cell(carried, metadata={"tags": [EXPORT_TAG]}))

    groups = check_groups(instructor)
    for cell in instructor.cells:  # the visible check cells, restored by what they check
        tree = _parse(cell)
        if tree is None or not _is_check_cell(cell, tree) or HIDDEN_TAG in _tags(cell):
            continue
        names = _declared(cell)
        mine = [c for c in nb.cells if names & _declared(c)]
        if mine and all(c.source == cell.source for c in mine):
            continue
        for extra in mine[1:]:
            nb.cells.remove(extra)
        if mine:
            mine[0].source = cell.source
            notes.append(f"the check cell of {', '.join(sorted(names))} was changed: the instructor's was used")
        else:
            restored = copy.deepcopy(cell)
            restored.outputs, restored.execution_count = [], None
            place = _after_previous(nb.cells, instructor.cells, cell)
            nb.cells.insert(place, restored)
            notes.append(f"the check cell of {', '.join(sorted(names))} was missing: the instructor's was put back")

    for group in groups:
        anchor = group
        if group.hidden:  # after the visible check cell it follows, else where its own cell would be
            visible = next((g for g in groups if g.cell_id == group.anchor), None)
            anchor = visible or group
        place = _place_of(nb.cells, anchor)
        export = _export_cell(group)
        if place is None:
            nb.cells.append(export)
        else:
            while place + 1 < len(nb.cells) and EXPORT_TAG in _tags(nb.cells[place + 1]):
                place += 1  # several groups after one cell: in order
            nb.cells.insert(place + 1, export)
    return Prepared(nb, notes)


def _after_previous(cells, instructor_cells, cell) -> int:
    """Where a missing instructor cell goes: after the student's copy of the cell before it."""
    ids = [c.get("id") for c in cells]
    at = instructor_cells.index(cell)
    for previous in reversed(instructor_cells[:at]):
        if previous.get("id") in ids:
            return ids.index(previous.get("id")) + 1
    return len(cells)
