"""How labkit is laid out, checked: no import cycle among its modules (an import inside
a function counts; one under `if TYPE_CHECKING:` does not, Python never runs it), and
no file longer than 500 lines but those listed here with the reason one job needs it."""

import ast
from pathlib import Path

import pytest

from labkit import paths

PACKAGE = paths.ROOT / "labkit"
MOST_LINES = 500
# file -> why its one job needs more than MOST_LINES lines (a file that grows past the limit is
# split by job, or earns its line here; its docstring says the same)
LONGER_BECAUSE: dict[str, str] = {}
# The instructor's room (labkit.instructor) is used by the commands that run its jobs, never by
# the core a notebook runs on: module -> why it may import it anyway.
MAY_IMPORT_THE_INSTRUCTORS_ROOM = {
    "labkit.cli": "`labkit grade`, `release`, `export`, `cluster`, `lms`: the commands of the instructor's jobs",
    "labkit.doctor": "checks a grading machine's certificates (instructor.cluster.certs), only when it has some",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(paths.ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _runtime_nodes(tree: ast.AST):
    """Every node but those under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def imports_of(name: str) -> set[str]:
    """The labkit modules `name` imports (a package's __init__ counts as the package)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.update(c for c in [module, *(f"{module}.{alias.name}" for alias in node.names)] if c in MODULES)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
    return found - {name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [["a", "b", "c"]]),
])
def test_the_cycle_finder_finds_cycles(graph, expected):
    assert cycles(graph) == expected


def test_the_import_reader_sees_lazy_relative_imports_and_not_type_checking_ones():
    assert "labkit.experiments" not in imports_of("labkit.plan")  # only under TYPE_CHECKING
    assert "labkit.plots" in imports_of("labkit.experiments")  # inside a function
    assert "labkit.procs" in imports_of("labkit.measure")  # from . import procs


def test_no_import_cycle_in_labkit():
    graph = {name: imports_of(name) for name in MODULES}
    assert cycles(graph) == []



def test_the_core_never_imports_the_instructors_room():
    """What a notebook runs on (the servers' drivers, measurement, plots, the exercises'
    checks) works in a students' edition without the grader: only the commands reach in."""
    room = {name for name in MODULES if name == "labkit.instructor" or name.startswith("labkit.instructor.")}
    reaching = {name: sorted(imports_of(name) & room) for name in MODULES
                if name not in room and name not in MAY_IMPORT_THE_INSTRUCTORS_ROOM}
    assert {name: found for name, found in reaching.items() if found} == {}
    for name in MAY_IMPORT_THE_INSTRUCTORS_ROOM:
        assert imports_of(name) & room, f"{name} no longer imports the instructor's room: take it off the list"


PACKAGES = sorted(path.parent for path in PACKAGE.rglob("__init__.py") if path.parent != PACKAGE)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_package_map_names_all_its_modules(package):
    """A package's docstring is its table of contents: each module in it is named there."""
    text = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    words = set(text.replace("/", " ").replace(".py", " ").replace(",", " ").replace(":", " ").split())
    inside = sorted(path.stem for path in package.iterdir()
                    if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file())
    assert [name for name in inside if name not in words and f"{name}." not in text] == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_file_longer_than_its_job_needs(path):
    lines = len(path.read_text().splitlines())
    relative = str(path.relative_to(paths.ROOT))
    if relative in LONGER_BECAUSE:
        assert lines > MOST_LINES, f"{relative} is {lines} lines now: take it off LONGER_BECAUSE"
    else:
        assert lines <= MOST_LINES, (f"{relative} is {lines} lines: split it by job, or say in LONGER_BECAUSE "
                                     "why its one job needs them")


# Notebooks and editions handed out before labkit.exercises existed import its modules by these
# names, in every form Python allows: each must give the very module (patches and state shared).
# statement, what it binds, the module that must be, a name the notebooks call on it
OLD_NAMES = [
    ("from labkit.instructor import checks", "checks", "labkit.exercises.checks", "Checker"),
    ("from labkit.instructor import c_exercises, checks, predictions", "c_exercises", "labkit.exercises.c_exercises",
     "check_poll_server"),
    ("from labkit.instructor import c_exercise_shed", "c_exercise_shed", "labkit.exercises.shed_idle",
     "check_shed_idle"),
    ("import labkit.instructor.predictions as old", "old", "labkit.exercises.predictions", "versus"),
    ("import labkit.instructor.c_exercise_catalog as old", "old", "labkit.exercises.catalog", "C_EXERCISES"),
    ("from labkit.instructor.checks import Checker", "sys.modules[Checker.__module__]", "labkit.exercises.checks",
     "Checker"),
    # a graded notebook's records, and a cluster worker's `--preload labkit.instructor.gate`
    ("from labkit.instructor import exports", "exports", "labkit.instructor.grading.exports", "save"),
    ("import labkit.instructor.gate as old", "old", "labkit.instructor.cluster.gate", "dask_setup"),
]


def test_the_old_names_of_the_exercises_modules_still_import():
    """In a fresh interpreter, as a notebook of last term's edition starts."""
    import subprocess
    import sys

    lines = ["import importlib, sys"]
    for statement, bound, new, called in OLD_NAMES:
        lines += [statement, f"assert {bound} is importlib.import_module({new!r}), {statement!r}",
                  f"assert hasattr({bound}, {called!r}), {statement!r}"]
    done = subprocess.run([sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True, cwd=paths.ROOT)
    assert done.returncode == 0, done.stderr


def test_importing_the_instructors_package_imports_nothing_else():
    """runner.py, inside a graded run, imports labkit.instructor and its sandbox room on its way before
    lowering its limits: nothing else of labkit comes with them."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import sys, labkit.instructor.sandbox.runner\n"
                           "print(sorted(m for m in sys.modules if m.startswith('labkit')))"],
                          capture_output=True, text=True, cwd=paths.ROOT)
    assert done.stdout.strip() == ("['labkit', 'labkit.instructor', 'labkit.instructor.sandbox', "
                                   "'labkit.instructor.sandbox.runner']"), done.stderr
