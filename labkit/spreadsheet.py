"""A CSV cell a spreadsheet reads as data, never as a formula; and back.

The lab's CSV files go to people who open them in a spreadsheet, and many of their cells
hold text the lab did not write: a student's written answer, the file name a student handed
in, a check's message quoting a student's output, a name from an LMS roster.  A spreadsheet
runs a cell that begins with `=`, `+`, `-` or `@` as a formula (`=HYPERLINK(...)` sends the
row's neighbours to another site when clicked; `=cmd|...` is a DDE payload in older Excel),
and a cell that begins with a tab or a carriage return (OWASP's "CSV Injection") or a NUL
(OWASP ASVS 1.2.10) is treated the same.  OWASP's rule, followed here: put a single quote
before such a cell, which the spreadsheet then shows as text.  To be safe the lab quotes the
first four after leading whitespace too, and in their full-width forms (U+FF1D and its
neighbours): a quote before a cell no spreadsheet would run costs nothing but the quote.

Invariants:
  * `neutral` changes a cell only if a spreadsheet would run it, or if `plain` would otherwise
    misread it (a cell that already begins with a quote before such text gets one more), so
    `plain(neutral(text)) == text` for every text, and marks compared on the answer as the
    student wrote it still match;
  * numbers stay numbers: a cell that reads as a number (`-3`, `+1.5e3`) is a number to a
    spreadsheet, not a formula, and is left as it is;
  * every CSV writer of the lab calls `neutral` on every cell (`write`, `write_frame`), and
    every reader of a CSV the lab wrote calls `plain` (`Reader`, `frame_from_csv`).
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import Iterable

# What a spreadsheet runs: these first (after any whitespace), or a tab or CR first of all.
FORMULA_STARTS = "=+-@\uff1d\uff0b\uff0d\uff20"
CONTROL_STARTS = "\t\r\0"  # OWASP ASVS 1.2.10 names tab and NUL, its CSV Injection page CR
QUOTE = "'"
_NUMBER = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*")


def runs_as_formula(cell: str) -> bool:
    """Whether a spreadsheet would take `cell` for a formula (or a control character's start)."""
    if not cell:
        return False
    if cell[0] in CONTROL_STARTS:
        return True
    stripped = cell.lstrip()
    return bool(stripped) and stripped[0] in FORMULA_STARTS and not _NUMBER.fullmatch(cell)


def _needs_quote(cell: str) -> bool:
    return runs_as_formula(cell) or (cell.startswith(QUOTE) and _needs_quote(cell[1:]))


def neutral(cell):
    """`cell` as a CSV cell no spreadsheet runs; anything not a string is returned as it is."""
    return QUOTE + cell if isinstance(cell, str) and _needs_quote(cell) else cell


def plain(cell):
    """The text `neutral` was given: its quote taken off where `neutral` put one."""
    return cell[1:] if isinstance(cell, str) and cell.startswith(QUOTE) and _needs_quote(cell[1:]) else cell


def write(path: Path | str, header: list[str], rows: Iterable[Iterable]) -> None:
    """A CSV file of `rows` (lists) under `header`, every cell neutral; written whole, then
    renamed (a reader never sees half a file)."""
    path = Path(path)
    partial = path.with_name(path.name + ".part")
    with open(partial, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow([neutral(name) for name in header])
        writer.writerows([neutral(cell) for cell in row] for row in rows)
    os.replace(partial, path)


def write_dicts(path: Path | str, columns: list[str], rows: Iterable[dict]) -> None:
    """`write` for rows as dicts (a missing key is an empty cell)."""
    write(path, columns, ([row.get(column, "") for column in columns] for row in rows))


class Reader(csv.DictReader):
    """csv.DictReader (over a file opened with newline=""), each cell `plain`."""

    def __next__(self) -> dict:
        return {key: plain(value) for key, value in super().__next__().items()}


def write_frame(frame, path: Path | str) -> None:
    """The pandas DataFrame `frame` as a CSV file, its text cells neutral (numbers untouched),
    written whole then renamed.  Lines end in CRLF, as RFC 4180 and csv.writer have it: pandas'
    default "\n" leaves a cell holding a lone carriage return unquoted, and a spreadsheet (or
    Python's csv reader) starts a new row there, whose first cell, after the quote, ran."""
    path = Path(path)
    out = frame.copy()
    for column in _text_columns(out):
        out[column] = out[column].map(neutral)
    partial = path.with_name(path.name + ".part")
    out.to_csv(partial, index=False, lineterminator="\r\n")
    os.replace(partial, path)


def frame_from_csv(frame):
    """`frame` (read by pandas from a CSV the lab wrote) with its text cells `plain` again."""
    for column in _text_columns(frame):
        frame[column] = frame[column].map(plain)
    return frame


def _text_columns(frame) -> list:
    """The columns that may hold text (pandas 3 gives text its own dtype; before, object)."""
    from pandas.api import types

    return [c for c in frame.columns if types.is_object_dtype(frame[c]) or types.is_string_dtype(frame[c])]
