"""What a graded notebook hands to the checks: the values they read, as plain data.

At grading, a cell after each check cell of the student's notebook calls
save(): the values the check reads (found by check_cells.check_groups from the
check's own source) are written as one JSON line to the file named by
LABKIT_EXPORTS.  The checks then run in another process, under another uid
(labkit.instructor.grading.judge), on these values alone: the student's kernel
decides nothing.  A value is data (numbers, text, lists, dicts with keys of any
plain kind, a pandas DataFrame or Series), the name of a module, or a function
the student wrote, as its source: decoded, it is a StudentFunction, which runs
each call in a process of its own (its arguments and result plain data), never
in the process that judges it.  Anything else is exported as "unexportable" and
the check that reads it fails, saying so.  Nothing here is pickled: decoding
never runs code.
"""

from __future__ import annotations

import json
import math
import os
import types

from labkit import cpu_limit

EXPORTS_ENV = "LABKIT_EXPORTS"
MAX_BYTES = 64 * 1024 * 1024  # the exports file of one run, at most


def encode(value):
    """`value` as a JSON-able tagged object."""
    import pandas as pd

    if value is None or isinstance(value, (bool, str)):
        return {"data": value}
    if isinstance(value, int):
        return {"data": value}
    if isinstance(value, float):
        return {"float": repr(value)} if not math.isfinite(value) else {"data": value}
    if isinstance(value, types.ModuleType):
        return {"module": value.__name__}
    if isinstance(value, pd.DataFrame):
        return {"frame": value.to_json(orient="table", default_handler=str)}
    if isinstance(value, pd.Series):
        return {"series": value.to_frame(name=value.name if value.name is not None else 0)
                .to_json(orient="table", default_handler=str)}
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "shape", None) == ():
        return encode(value.item())  # a numpy scalar
    if isinstance(value, (list, tuple, set, frozenset)):
        kind = {list: "list", tuple: "tuple"}.get(type(value), "set")
        return {kind: [encode(item) for item in (sorted(value, key=repr) if kind == "set" else value)]}
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {"dict": {key: encode(item) for key, item in value.items()}}
    if isinstance(value, dict):  # {delay in ms: ratio}: keys of other kinds, as pairs
        return {"pairs": [[encode(key), encode(item)] for key, item in value.items()]}
    if isinstance(value, types.FunctionType):
        return _function(value)
    return {"unexportable": type(value).__name__}


def _function(function) -> dict:
    """A function the student wrote, as its source (a lambda or a nested one cannot stand alone)."""
    import inspect
    import textwrap

    name = function.__name__
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return {"unexportable": f"function {name} (its source is not available)"}
    if name == "<lambda>" or function.__code__.co_freevars:
        return {"unexportable": f"function {name} (write it with def, at the top level of a cell)"}
    return {"function": {"name": name, "source": source}}


class StudentFunction:
    """A student's function, run alone: each call starts `python -I` with the function's
    source and the call's arguments (plain data, as JSON) and reads its result back.  A
    crash, an endless loop (`timeout` seconds of CPU time: labkit.cpu_limit) or an
    exception becomes an AssertionError that says so; nothing the function does reaches
    the caller's process."""

    RUNNER = ("import json, math, sys\n"
              "from labkit import cpu_limit\n"
              "call = json.load(sys.stdin)\n"
              "cpu_limit.limit(call['cpu_seconds'])\n"
              "space = {'__name__': '__student__', 'math': math}\n"
              "exec(compile(call['source'], '<your ' + call['name'] + '>', 'exec'), space)\n"
              "result = space[call['name']](*call['args'])\n"
              "try:\n"
              "    text = json.dumps({'result': result})\n"
              "except (TypeError, ValueError):\n"
              "    sys.exit(NOT_DATA)\n"
              "sys.stdout.write(text)\n").replace("NOT_DATA", "86")

    def __init__(self, name: str, source: str, timeout: float = 10.0):
        self.__name__, self.source, self.timeout = name, source, timeout

    def __call__(self, *args):
        import subprocess
        import sys

        try:
            done = subprocess.run([sys.executable, "-I", "-c", self.RUNNER],
                                  input=json.dumps({"name": self.__name__, "source": self.source,
                                                    "args": list(args), "cpu_seconds": self.timeout}),
                                  capture_output=True, text=True, timeout=cpu_limit.wall(self.timeout))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"your {self.__name__}{tuple(args)} did not return within "
                                 f"{cpu_limit.wall(self.timeout):g} s, using little CPU (is it waiting on "
                                 "something, a sleep or input?)") from None
        if cpu_limit.spent(done.returncode):
            raise AssertionError(f"your {self.__name__}{tuple(args)} did not return within "
                                 f"{self.timeout:g} s of CPU time (an endless loop?)")
        if done.returncode == 86:
            raise AssertionError(f"your {self.__name__} returned something that is not plain data "
                                 "(a number, text, a list or a dict)")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise AssertionError(f"your {self.__name__}{tuple(args)} failed: {last}")
        try:
            return json.loads(done.stdout)["result"]
        except (ValueError, KeyError):
            raise AssertionError(f"your {self.__name__} returned something that is not plain data "
                                 "(a number, text, a list or a dict)") from None

    def __repr__(self) -> str:
        return f"<your function {self.__name__}, run in a process of its own>"


class Unexportable:
    """Stands in for a value that could not be exported: any use of it says so."""

    def __init__(self, name: str, kind: str):
        self._what = f"{name} (a {kind}) could not be handed to the grader: use numbers, text, lists, " \
                     "dicts or a pandas DataFrame"

    def __getattr__(self, attribute):
        raise TypeError(self._what)

    def __repr__(self):
        return f"<{self._what}>"

    def __bool__(self):
        raise TypeError(self._what)


def decode(name: str, tagged):
    """The value `encode` tagged (pandas objects rebuilt; modules imported by name)."""
    import importlib
    import io

    import pandas as pd

    if not isinstance(tagged, dict) or len(tagged) != 1:
        return Unexportable(name, "malformed export")
    (kind, body), = tagged.items()
    if kind == "data":
        return body
    if kind == "float":
        return float(body)
    if kind == "module":
        # Only what cannot be the student's own code: the standard library, labkit, what is loaded.
        import sys

        trusted = isinstance(body, str) and (body in sys.modules or body.split(".")[0] in sys.stdlib_module_names
                                             or body.split(".")[0] == "labkit")
        if not trusted:
            return Unexportable(name, f"module {body!r} the grader does not load")
        return importlib.import_module(body)
    if kind == "frame":
        return pd.read_json(io.StringIO(body), orient="table")
    if kind == "series":
        frame = pd.read_json(io.StringIO(body), orient="table")
        return frame.iloc[:, 0]
    if kind in ("list", "tuple", "set"):
        items = [decode(name, item) for item in body]
        return {"list": list, "tuple": tuple, "set": set}[kind](items)
    if kind == "dict":
        return {key: decode(name, item) for key, item in body.items()}
    if kind == "pairs":
        pairs = [(decode(name, key), decode(name, item)) for key, item in body]
        if not all(isinstance(key, (str, int, float, bool, tuple, type(None))) for key, _ in pairs):
            return Unexportable(name, "dict with keys that are not plain data")
        return dict(pairs)
    if kind == "function":
        return StudentFunction(str(body["name"]), str(body["source"]))
    return Unexportable(name, str(body) if kind == "unexportable" else kind)


def save(checks: list[str], namespace: dict, names: list[str]) -> None:
    """Append {checks, values} for the names `checks` read (missing names are left out:
    the check then fails with a NameError, as it would in the notebook)."""
    target = os.environ.get(EXPORTS_ENV)
    if not target:
        return
    values = {}
    for name in names:
        if name in namespace:
            try:
                values[name] = encode(namespace[name])
            except Exception as problem:  # noqa: BLE001 -- a value that cannot be written
                values[name] = {"unexportable": f"{type(namespace[name]).__name__} ({type(problem).__name__})"}
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps({"checks": list(checks), "values": values}) + "\n")


def read(text: str) -> dict[str, dict]:
    """check name -> its values as exported last (a check cell run twice counts as its last run)."""
    found = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill mid-write
        if not isinstance(record, dict) or not isinstance(record.get("values"), dict):
            continue
        for check in record.get("checks") or []:
            if isinstance(check, str):
                found[check] = record["values"]
    return found
