"""How labkit is laid out, checked: no import cycle among its modules (an import inside
a function counts; one under `if TYPE_CHECKING:` does not, Python never runs it), and
no file longer than 500 lines but those listed here with the reason one job needs it.
And how its tests are: each file in the folder of a room docs/contributors/testing.md lists,
no two of one name, none importing another room's test file."""

import ast
import re
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


def test_import_reader_sees_lazy_imports():
    """The import reader sees lazy relative imports and not type checking ones."""
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
    ("import labkit.instructor.c_exercise_catalog as old", "old", "labkit.stubs.catalog", "C_EXERCISES"),
    ("from labkit.instructor.checks import Checker", "sys.modules[Checker.__module__]", "labkit.exercises.checks",
     "Checker"),
    # a graded notebook's records, and a cluster worker's `--preload labkit.instructor.gate`
    ("from labkit.instructor import exports", "exports", "labkit.instructor.basics.exports", "save"),
    ("import labkit.instructor.gate as old", "old", "labkit.instructor.cluster.gate", "dask_setup"),
    # renamed top-level modules and names a notebook calls
    ("from labkit import queueing", "queueing", "labkit.what_breaks", "knees"),
    ("from labkit import doctor", "doctor", "labkit.doctor", "checks"),
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
    """inside.py, inside a graded run, imports labkit.instructor and its sandbox room on its way before
    lowering its limits: nothing else of labkit comes with them."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import sys, labkit.instructor.sandbox.inside\n"
                           "print(sorted(m for m in sys.modules if m.startswith('labkit')))"],
                          capture_output=True, text=True, cwd=paths.ROOT)
    assert done.stdout.strip() == ("['labkit', 'labkit.instructor', 'labkit.instructor.sandbox', "
                                   "'labkit.instructor.sandbox.inside']"), done.stderr


# ------------------------------------------------------------------ rooms, names and the map

def room_of(name: str) -> str:
    """A module's room: its top-level package (labkit.plots), or the instructor's room it is in
    (labkit.instructor.grading); a top-level module is a room of its own."""
    parts = name.split(".")
    if parts[1:2] == ["instructor"] and len(parts) > 2 and f"labkit.instructor.{parts[2]}" in MODULES \
            and MODULES[f"labkit.instructor.{parts[2]}"].name == "__init__.py":
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def test_rooms_depend_one_way():
    """The graph of rooms (labkit's top-level packages and modules, the instructor's rooms) has no
    cycle: a room that two others need sits below both, so each can be read without the other."""
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        if name == "labkit":
            continue
        room = room_of(name)
        graph.setdefault(room, set()).update(room_of(other) for other in imports_of(name) if other != "labkit")
    for room in graph:
        graph[room].discard(room)
    for room in {r for rooms in graph.values() for r in rooms}:
        graph.setdefault(room, set())
    assert cycles(graph) == []


# Modules that only give another module under the name it had before it moved (a notebook or an
# edition handed out before imports them): they share a file name with it by design.
def _old_name(path: Path) -> bool:
    return (ast.get_docstring(ast.parse(path.read_text())) or "").startswith("The old name of ")


def test_no_two_modules_share_a_file_name():
    """One word per idea: a file name says which module, wherever it is imported from."""
    names: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        if path.name not in ("__init__.py", "__main__.py") and not _old_name(path):
            names.setdefault(path.name, []).append(name)
    assert {file: found for file, found in names.items() if len(found) > 1} == {}


def test_the_map_names_every_top_level_module_once_and_the_page_shows_it():
    """labkit/__init__.py's map lists each module and package of the top level once, and
    docs/architecture.md shows that very map (scripts/architecture_map.py --write makes it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("architecture_map", paths.ROOT / "scripts" / "architecture_map.py")
    made = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(made)
    listed = [name for _, name, _ in made.entries()]
    tree = sorted([path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"]
                  + [f"{path.parent.name}/" for path in PACKAGE.glob("*/__init__.py")])
    assert sorted(listed) == tree and len(listed) == len(set(listed)), \
        (sorted(set(tree) - set(listed)), sorted(set(listed) - set(tree)))
    assert made.written() == made.render(), \
        "docs/architecture.md's map is stale: python3 scripts/architecture_map.py --write"


# Words the glossary (docs/architecture.md) retired as module names: each named several ideas.
RETIRED = {"run", "runner", "checker", "grade", "run_lab", "notebook_run", "run_delay", "cpu_budget", "estimate",
           "figure_check"}


def test_no_module_is_named_by_a_word_the_glossary_retired():
    named = sorted(name for name, path in MODULES.items() if path.stem in RETIRED and not _old_name(path))
    assert named == []


# ---------------------------------------------------------------------------
# the tests themselves: a folder per room, as docs/contributors/testing.md lists them

TESTS = paths.ROOT / "tests"
TEST_FILES = sorted(TESTS.rglob("test_*.py"))


def documented_rooms() -> set[str]:
    """The rooms docs/contributors/testing.md's "Where a test goes" lists, each on a line of its
    own that begins "- `tests/<room>/`"."""
    text = (paths.ROOT / "docs" / "contributors" / "testing.md").read_text()
    return set(re.findall(r"^- `tests/([a-z_]+)/`", text, flags=re.MULTILINE))


def test_every_test_file_is_in_one_of_the_documented_rooms():
    """No test file directly under tests/ or deeper than a room; the folders that hold tests are
    the rooms the page lists, each of them; no __init__.py (pytest's prepend mode, which puts
    tests/ on sys.path for the shared helpers, needs none while names are unique)."""
    rooms = documented_rooms()
    assert len(rooms) >= 6, f"the page lists {sorted(rooms)}"
    assert [str(path.relative_to(TESTS)) for path in TEST_FILES if path.parent.parent != TESTS] == []
    assert {path.parent.name for path in TEST_FILES} == rooms
    assert sorted(str(p.relative_to(TESTS)) for room in rooms for p in (TESTS / room).glob("__init__.py")) == []


def test_no_two_test_files_share_a_name():
    """pytest imports a test file by its name alone (no packages here): two of one name would clash."""
    names: dict[str, list[str]] = {}
    for path in TEST_FILES:
        names.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert {name: found for name, found in names.items() if len(found) > 1} == {}


def test_a_test_file_imports_other_test_files_from_its_own_room_only():
    """pytest puts a test file's own folder on sys.path, not another room's: an import across
    rooms works in a whole run only because the other room's files were collected first."""
    room_of_file = {path.stem: path.parent.name for path in TEST_FILES}
    across = []
    for path in TEST_FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            across += [f"{path.relative_to(TESTS)} imports {name} ({room_of_file[name]}/)" for name in names
                       if room_of_file.get(name, path.parent.name) != path.parent.name]
    assert across == []
