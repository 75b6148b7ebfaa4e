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
    return pd.DataFrame(read_rows(path))
