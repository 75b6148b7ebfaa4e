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
LONGER_BECAUSE = {
    "labkit/instructor/c_exercises.py": "the checks of the four C exercises, one section each, sharing the "
                                        "scratch builds, the adoption into an edition and the processes the "
                                        "student's code runs in; every notebook calls them as c_exercises.check_*",
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


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_file_longer_than_its_job_needs(path):
    lines = len(path.read_text().splitlines())
    relative = str(path.relative_to(paths.ROOT))
    if relative in LONGER_BECAUSE:
        assert lines > MOST_LINES, f"{relative} is {lines} lines now: take it off LONGER_BECAUSE"
    else:
        assert lines <= MOST_LINES, (f"{relative} is {lines} lines: split it by job, or say in LONGER_BECAUSE "
                                     "why its one job needs them")
