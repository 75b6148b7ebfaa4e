"""The seed reports' tables (data/seeds/*.csv), for "your machine vs theirs".

Each table is tidy: one row per number, with the side perf measured, the model,
the client count, the metric (named like the sweep's columns), its value and
unit, the number as the report printed it, and where it was copied from.
data/seeds/README.md says what each seed measured and how far it compares.

This module reads the tables; seeds/compare.py sets your results beside them
(beside, times_table, placements_table, observations_table, comparison, and styled, which
writes a table with the interval of each of your medians: all re-exported here, so a notebook
writes seeds.comparison(df, seeds.table("001"), "cycles")).
"""

from __future__ import annotations

import pandas as pd

from labkit import paths
from labkit.errors import LabError

from .compare import beside, comparison, observations_table, placements_table, styled, times_table

__all__ = ["TABLES", "beside", "comparison", "describe", "observations_table", "placements_table", "side", "table",
           "styled", "tables", "times_table", "wide"]

# name -> (file, what it is); the file names are the README's headings.
TABLES = {
    "000": ("000_client_perf.csv",
            "seed 000: perf stat of the CLIENT process, iterative / threaded / select "
            "servers, 10, 50 and 100 connections, one run each, user-space events"),
    "001": ("001_server_perf.csv",
            "seed 001: perf stat of the SERVER process, threaded and select servers, "
            "3, 6 and 10 clients: cycles, instructions, context switches"),
    "002": ("002_uploads.csv",
            "seed 002: time for the SERVER to receive every upload (its own clock), threads / "
            "busy polling / POSIX AIO / select, 1 to 10k connections x 1 KB to 10 MB, same host and "
            "different hosts"),
    "004": ("004_write_strategies.csv",
            "seed 004: one CLIENT connection writing 20,000 repetitions of 1,500 bytes as many writes, "
            "one writev or one copied write, 15x100 to 100x15 buffers: send time, round trip, Gbit/s, "
            "the server's reads"),
    "003": ("003_echo_response.csv",
            "seed 003: echo response time seen by the CLIENT, threaded / select / epoll "
            "servers, 5000 and 10000 clients x 200 and 300 exchanges (its Observations table)"),
}
# Tables with columns more than the common ones (002 sweeps sizes and placements, 003 exchanges,
# 004 write strategies and buffer shapes).
_EXTRA_COLUMNS = {"002": ["size", "placement"], "003": ["exchanges"], "004": ["strategy", "shape"]}

_COLUMNS = ["seed", "side", "model", "seed_label", "clients", "metric", "value",
            "unit", "printed", "source"]


def describe(name: str) -> str:
    """One sentence: what seed `name` measured."""
    return TABLES[_check(name)][1]


def table(name: str) -> pd.DataFrame:
    """Seed `name`'s numbers in long format (see the module docstring)."""
    name = _check(name)
    file_name = TABLES[name][0]
    path = paths.SEEDS / file_name
    if not path.exists():
        raise LabError(f"the seed table {path} is missing",
                       "restore it from git: git checkout -- data/seeds/")
    # Read everything as text first so "000" stays "000" and "printed" keeps its commas.
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    expected = _COLUMNS[:5] + _EXTRA_COLUMNS.get(name, []) + _COLUMNS[5:]
    if list(df.columns) != expected:
        raise LabError(f"{path} has columns {list(df.columns)}, expected {expected}",
                       "restore it from git: git checkout -- data/seeds/")
    df["clients"] = df["clients"].astype(int)
    for column in ("exchanges", "size"):
        if column in df:
            df[column] = df[column].astype(int)
    # empty where the report printed no number ("<1 ms"): NaN, never 0
    df["value"] = pd.to_numeric(df["value"].replace("", None), errors="coerce")
    return df


def tables() -> dict[str, pd.DataFrame]:
    """Every seed table, by name."""
    return {name: table(name) for name in TABLES}


def wide(name: str, metric: str) -> pd.DataFrame:
    """One metric as the report laid it out: rows = clients (and exchanges, for 003),
    columns = models."""
    df = table(name)
    rows = df[df["metric"] == metric]
    if rows.empty:
        known = sorted(df["metric"].unique())
        raise LabError(f"seed {name} has no metric {metric!r}",
                       f"use one of: {', '.join(known)}")
    index = ["clients", "exchanges"] if "exchanges" in rows else "clients"
    return rows.pivot(index=index, columns="model", values="value")


def side(name: str) -> str:
    """Which process the seed measured: 'client' or 'server'."""
    return table(name)["side"].iloc[0]


def _check(name: str) -> str:
    name = str(name).zfill(3)
    if name not in TABLES:
        raise LabError(f"there is no seed table {name!r}",
                       f"use one of: {', '.join(TABLES)}")
    return name
