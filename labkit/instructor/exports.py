"""What a graded notebook hands to the checks: the values they read, as plain data.

At grading, a cell after each check cell of the student's notebook calls
save(): the values the check reads (found by grade.check_groups from the
check's own source) are written as one JSON line to the file named by
LABKIT_EXPORTS.  The checks then run in another process, under another uid
(labkit.instructor.checker), on these values alone: the student's kernel
decides nothing.  A value is data (numbers, text, lists, dicts, a pandas
DataFrame or Series) or the name of a module; anything else is exported as
"unexportable" and the check that reads it fails, saying so.  Nothing here is
pickled: decoding never runs code.
"""

from __future__ import annotations

import json
import math
import os
import types

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
    return {"unexportable": type(value).__name__}


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
