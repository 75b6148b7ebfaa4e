"""Late work: due dates, a penalty rule, and what each late notebook loses.

    --due 2026-12-01T23:59                      every notebook due then
    --due 01_proc_service=2026-11-01T23:59      one notebook's date (repeat for others; a plain date
                                                above is the rest's)
    --late-penalty none | zero | N%/day | N%/hour | N/day | N/hour

A date without a zone (+01:00, Z) is in this machine's time zone, and the gradebook's
summary says which.  Lateness is the time handed in minus the due date; each started day
or hour late costs N points, or N% of the notebook's points, never more than the points the
notebook earned (`zero`: all of them): nbgrader's score = max(0, raw - penalty), with its
`none` and `zero`.  The rates are the lab's (nbgrader's documentation shows one point per
hour as a plug-in example, rounding the hours where this counts started ones).

Where the download gave no time (Canvas and Moodle put the time the zip was made in it,
not the time of the work) a notebook is late only by the LMS's own verdict (Canvas's LATE
in the file name): `zero` applies to it, a rate cannot, and the summary names such rows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from ...errors import LabError

UNITS = {"day": 86400.0, "hour": 3600.0}


@dataclass(frozen=True)
class Rule:
    text: str
    kind: str                 # none, zero, rate
    amount: float = 0.0
    percent: bool = False
    unit_s: float = 86400.0

    def penalty(self, score: float, max_points: float, late_s: float | None, late_by_lms: bool) -> float | None:
        """Points lost; None when the rule cannot say (a rate with no time)."""
        if self.kind == "none":
            return 0.0
        late = late_s > 0 if late_s is not None else late_by_lms
        if not late:
            return 0.0
        if self.kind == "zero":
            return score
        if late_s is None:
            return None
        units = math.ceil(late_s / self.unit_s)
        lost = units * self.amount * (max_points / 100.0 if self.percent else 1.0)
        return min(score, lost)


def rule(text: str | None) -> Rule:
    text = (text or "none").strip()
    if text in ("none", "zero"):
        return Rule(text, text)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(%?)/(day|hour)", text.replace(" ", ""))
    if not match:
        raise LabError(f"--late-penalty {text!r} is not a rule the lab knows",
                       "use none, zero, N%/day, N%/hour, N/day or N/hour (e.g. 10%/day: a tenth of the "
                       "notebook's points per started day late)")
    return Rule(text, "rate", float(match[1]), bool(match[2]), UNITS[match[3]])


def parse_date(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise LabError(f"--due {text!r} is not a date", "write it as 2026-12-01T23:59 (this machine's time "
                                                         "zone) or 2026-12-01T23:59+01:00") from None
    return when if when.tzinfo else when.astimezone()   # a naive time: this machine's zone


def due_dates(values: list[str] | None, notebooks: list[str]) -> dict[str, datetime]:
    """--due values, by notebook: `DATE` for all, `NOTEBOOK=DATE` for one."""
    dates, every = {}, None
    for value in values or []:
        name, equals, date = value.partition("=")
        if not equals:
            every = parse_date(value)
            continue
        name = name.strip().removesuffix(".ipynb")
        if name not in notebooks:
            raise LabError(f"--due {value}: {name} is not a graded notebook",
                           f"name one of {', '.join(notebooks)}")
        dates[name] = parse_date(date)
    if every is not None:
        for name in notebooks:
            dates.setdefault(name, every)
    return dates
