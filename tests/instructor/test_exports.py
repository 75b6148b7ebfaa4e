"""What a graded notebook hands to the checks (labkit.instructor.basics.exports): every kind of
value the notebooks' checks read comes back as it was, through JSON, and a student's
function comes back as its source and runs in a process of its own."""

import json
import math
import textwrap
import time

import pytest

from labkit.instructor.basics import exports


def round_trip(value):
    return exports.decode("x", json.loads(json.dumps(exports.encode(value))))


@pytest.mark.parametrize("value", [
    {20: 1.07, 0: 1.02},                  # 05's measured_over_predicted: {delay in ms: ratio}
    {(1, "a"): [1, 2], None: "none"},
    {"text keys": {"nested": [1.5, None]}},
    [1, (2, 3), "x"],
])
def test_plain_data_comes_back_as_it_was(value):
    assert round_trip(value) == value


def _namespace_with(source: str) -> dict:
    """Define a function the way a notebook cell does (its source findable by inspect)."""
    import linecache

    filename = f"<cell {abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    space = {}
    exec(compile(source, filename, "exec"), space)  # noqa: S102
    return space


# not an exercise's function: this file ships in the students' edition
HYPOTENUSE = textwrap.dedent("""
    def hypotenuse(a, b):
        return math.sqrt(a * a + b * b)
""")


def test_a_students_function_comes_back_as_its_source_and_runs_alone():
    function = round_trip(_namespace_with(HYPOTENUSE)["hypotenuse"])
    assert isinstance(function, exports.StudentFunction)
    assert math.isclose(function(3, 4), 5.0)


@pytest.mark.parametrize("body, says", [
    ("    while True:\n        pass\n", r"did not return within 1 s of CPU time \(an endless loop\?\)"),
    ("    return 1 / 0\n", "ZeroDivisionError"),
    ("    return object()\n", "not plain data"),
    ("    import os\n    os._exit(3)\n", "failed"),
])
def test_bad_function_fails_its_check(body, says):
    """A function that hangs crashes or returns no data fails its check saying why."""
    source = "def f(x):\n" + body
    function = round_trip(_namespace_with(source)["f"])
    function.timeout = 1.0
    with pytest.raises(AssertionError, match=says):
        function(1)


def test_waiting_function_hits_wall_backstop(monkeypatch):
    """A function that waits for ever is stopped by the wall clock backstop."""
    from labkit import cpu_limit

    monkeypatch.setattr(cpu_limit, "WALL_FACTOR", 3)  # 1 CPU-s of budget waits 3 s, not 12
    function = round_trip(_namespace_with("def f(x):\n    import time\n    time.sleep(60)\n")["f"])
    function.timeout = 1.0
    with pytest.raises(AssertionError, match=r"did not return within 3 s, using little CPU \(is it waiting"):
        function(1)


def test_a_function_that_waits_longer_than_its_cpu_budget_still_returns():
    # A busy machine makes a call wait for its CPU as a sleep does: neither spends CPU time, the
    # budget an endless loop is judged by (labkit.cpu_limit).
    function = round_trip(_namespace_with("def f(x):\n    import time\n    time.sleep(2)\n    return x + 1\n")["f"])
    function.timeout = 1.0
    started = time.monotonic()
    assert function(1) == 2 and time.monotonic() - started >= 2


def test_a_lambda_or_a_closure_is_unexportable_and_says_how_to_write_it():
    closure = _namespace_with("def outer():\n    y = 2\n    def inner(x):\n        return x + y\n    return inner\n")
    for value in (lambda x: x, closure["outer"]()):
        encoded = exports.encode(value)
        assert "unexportable" in encoded and "def, at the top level of a cell" in encoded["unexportable"]
