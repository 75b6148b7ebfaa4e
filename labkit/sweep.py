"""A sweep: the experiment's grid x repeats, each point measured and saved at once.

Results are JSON Lines (data/results/<experiment>.jsonl), one row per
measured point, appended and fsync'd as soon as the point is measured, so an
interrupted sweep loses nothing and resumes where it stopped: a point whose
key is already in the file with status "ok" is not measured again.
NaN is written as JSON null and read back as NaN.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

from . import measure as measure_module
from . import paths
from .errors import LabError


def results_path(experiment: str) -> Path:
    return paths.RESULTS / f"{experiment}.jsonl"


def point_key(experiment: str, point: dict, repeat: int) -> str:
    """Stable across runs and machines: the same point and repeat give the same key."""
    identity = json.dumps({"experiment": experiment, "point": point, "repeat": repeat},
                          sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


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


def _append(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(_nan_to_null(row), allow_nan=False, default=str)
    with open(path, "a", encoding="utf-8") as results:
        results.write(line + "\n")
        results.flush()
        os.fsync(results.fileno())


def _read_rows(path: Path) -> list[dict]:
    """Every row of a results file; None (JSON null) at the top level becomes NaN."""
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
                # A line cut short by a crash mid-write: the point is simply measured again.
                continue
            rows.append({key: math.nan if value is None else value for key, value in row.items()})
    return rows


def load(experiment_or_path) -> "pandas.DataFrame":  # noqa: F821
    """All rows of an experiment's results (by name or path), oldest first."""
    import pandas as pd

    path = Path(experiment_or_path)
    if path.suffix != ".jsonl" and os.sep not in str(experiment_or_path):
        path = results_path(str(experiment_or_path))
    if not path.exists():
        raise LabError(f"no results at {path}", "run the sweep first (labkit sweep <experiment>)")
    return pd.DataFrame(_read_rows(path))


def _environment() -> dict:
    from . import system

    return {f"env_{key}": value for key, value in system.environment().items()}


def _progress_reporter(progress, total: int):
    """(advance(row), close()) for a tqdm bar, a callable, or nothing."""
    if callable(progress):
        done = 0

        def advance(row):
            nonlocal done
            done += 1
            progress(done, total, row)

        return advance, lambda: None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="point")

        def advance(row):
            bar.set_postfix_str(f"{row.get('model')} x{row.get('clients')} {row.get('status')}", refresh=False)
            bar.update(1)

        return advance, bar.close
    return (lambda row: None), (lambda: None)


def run(experiment: str, params: dict, results=None, measure=measure_module.point, progress=True,
        resume: bool = True, on_point=None):
    """Measure every point of `params` (from experiments.resolve) and return their rows."""
    import pandas as pd

    from . import experiments

    path = Path(results) if results is not None else results_path(experiment)
    points = [(kwargs, repeat) for kwargs in experiments.grid(params) for repeat in range(params["repeats"])]
    keys = [point_key(experiment, kwargs, repeat) for kwargs, repeat in points]
    measured_ok = {row.get("point_key") for row in _read_rows(path) if row.get("status") == "ok"} if resume else set()

    from . import procs

    already_running = set(procs.live_children())
    run_id = uuid.uuid4().hex[:12]
    environment = _environment()
    advance, close = _progress_reporter(progress, len(points))
    try:
        for (kwargs, repeat), key in zip(points, keys):
            if key in measured_ok:
                advance({**kwargs, "repeat": repeat, "status": "skipped (already measured)"})
                continue
            row = dict(measure(**kwargs))
            row.update({
                "experiment": experiment,
                "repeat": repeat,
                "point_key": key,
                "run_id": run_id,
                "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "profile": params.get("profile", ""),
                "pinning_note": params.get("pinning_note", ""),
                **environment,
            })
            _append(path, row)
            advance(row)
            if on_point is not None:
                on_point(row)
    except BaseException:
        # KeyboardInterrupt included: whatever this sweep started stops, the rows
        # written so far stay, and the interrupt goes on to the caller.
        procs.stop_all(keep=already_running)
        raise
    finally:
        close()

    wanted = set(keys)
    rows = [row for row in _read_rows(path) if row.get("point_key") in wanted]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame.drop_duplicates("point_key", keep="last").reset_index(drop=True)
