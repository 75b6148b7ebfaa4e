"""Results on disk: JSON Lines, one row per measured point, appended and fsync'd
as soon as the point is measured, so an interrupted run loses nothing.
NaN is written as JSON null and read back as NaN; a line cut short by a crash
is skipped (its point is simply measured again)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from . import paths
from .errors import LabError


def results_path(name: str) -> Path:
    """Where the results named `name` (an experiment, a bench) live by default."""
    return paths.RESULTS / f"{name}.jsonl"


def _nan_to_null(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _nan_to_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_null(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return _nan_to_null(value.item())
    return value


def append(path: Path, row: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(_nan_to_null(row), allow_nan=False, default=str)
    with open(path, "a", encoding="utf-8") as results:
        results.write(line + "\n")
        results.flush()
        os.fsync(results.fileno())


def read_rows(path: Path) -> list[dict]:
    """Every row of a results file; None (JSON null) at the top level becomes NaN."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as results:
        for line in results:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue  # cut short by a crash mid-write
            rows.append({key: math.nan if value is None else value for key, value in row.items()})
    return rows


def load(name_or_path) -> "pandas.DataFrame":  # noqa: F821
    """All rows of results (an experiment's name, or a path), oldest first."""
    import pandas as pd

    path = Path(name_or_path)
    if path.suffix != ".jsonl" and os.sep not in str(name_or_path):
        path = results_path(str(name_or_path))
    if not path.exists():
        raise LabError(f"no results at {path}", "run the sweep first (labkit sweep <experiment>)")
    rows = read_rows(path)
    check_schema(rows, path)
    return pd.DataFrame(rows)


def check_schema(rows: list[dict], path) -> None:
    """Refuse rows a newer labkit wrote (their columns may mean what this one cannot read);
    say which columns changed meaning for rows an older one wrote."""
    import warnings

    from .row import SCHEMA, SCHEMA_CHANGES

    versions = [row.get("schema", 1) for row in rows]
    versions = [v if isinstance(v, int) else 1 for v in versions]
    if versions and max(versions) > SCHEMA:
        raise LabError(f"{path} holds rows of schema {max(versions)}, written by a newer lab than this one "
                       f"(schema {SCHEMA})", "update the lab (git pull, make build), or give another results file")
    older = sorted({v for v in versions if v < SCHEMA})
    if older:
        changes = "; ".join(SCHEMA_CHANGES[v] for v in range(min(older) + 1, SCHEMA + 1) if v in SCHEMA_CHANGES)
        warnings.warn(f"{sum(v < SCHEMA for v in versions)} row(s) of {path} were written by an older lab "
                      f"(schema {', '.join(map(str, older))}): {changes}. Run those points again to replace "
                      "them (a sweep with resume off)", stacklevel=3)
