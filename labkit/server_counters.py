"""The counters a server reports when it stops: one line per process that accepts
(each worker of a worker model), written with one write(2) so that workers' lines
never interleave:

    counters pid=4242 accepted=250 futile_accepts=37 listener_wakeups=287 shed_idle=0

accepted: connections this process accepted; futile_accepts: accept calls that found
nothing (EAGAIN: another worker took the connection it was woken for); listener_wakeups:
times it was told the listener was ready; shed_idle: connections it closed under
--idle-timeout.  fill(row, text) turns a server's stdout into the row's columns, NaN
where no process reported (a model that does not count, or one killed before it could).
"""

from __future__ import annotations

import re
from labkit.row import ok_rows

NAN = float("nan")
_LINE = re.compile(r"^counters pid=(\d+)((?: \w+=\d+)+)$", re.M)
FIELDS = ("accepted", "futile_accepts", "listener_wakeups", "shed_idle")


def parse(text: str) -> list[dict[str, int]]:
    """Each reporting process's counters, in the order they were printed."""
    reports = []
    for found in _LINE.finditer(text):
        report = {"pid": int(found.group(1))}
        report.update({name: int(value) for name, value in
                       (pair.split("=") for pair in found.group(2).split())})
        reports.append(report)
    return reports


def fill(row: dict, text: str) -> None:
    """The server_* counter columns of `row` from the server's stdout `text`."""
    reports = parse(text)
    if not reports:
        return
    for name in FIELDS:
        values = [report[name] for report in reports if name in report]
        row[f"server_{name}"] = float(sum(values)) if values else NAN
    accepted = sorted((report.get("accepted", 0) for report in reports), reverse=True)
    row["server_accepted_by_worker"] = accepted
    row["server_reporting_processes"] = len(reports)
    total = sum(accepted)
    if total:
        row["futile_accepts_per_connection"] = row["server_futile_accepts"] / total
        row["wakeups_per_connection"] = row["server_listener_wakeups"] / total
        row["busiest_worker_share"] = accepted[0] / total


def per_worker(df, by=("model", "workers")):
    """One row per point (`by`: its columns), from its first successful repeat: the connections
    each worker accepted, busiest first, beside the futile accepts, wake-ups and context
    switches per connection."""
    import pandas as pd

    by = [column for column in by if column in df.columns]
    rows = []
    ok = ok_rows(df)
    for values, point in ok.groupby(by, sort=True):
        first = point.iloc[0]
        accepted = list(first.get("server_accepted_by_worker") or [])
        rows.append({**dict(zip(by, values if isinstance(values, tuple) else (values,))),
                     "accepted by each worker (busiest first)": ", ".join(str(n) for n in accepted) or "not reported",
                     "busiest worker's share": first.get("busiest_worker_share"),
                     "context switches per connection": first.get("server_cs_per_request"),
                     "listener wake-ups per connection": first.get("wakeups_per_connection"),
                     "futile accepts per connection": first.get("futile_accepts_per_connection")})
    return pd.DataFrame(rows)
