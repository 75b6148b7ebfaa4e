"""events: csrc/bench/ev_bench.c (libevent's test/bench.c idea) for the select, poll and
epoll backends as the watched descriptors grow: time per poll call and per event, and the
figure of it (event_cost).  A backend that cannot watch that many descriptors (select past
FD_SETSIZE) gets a row with NaN figures and its refusal, never a 0; one that fails gets NaN
figures and its message, and the other backends are measured all the same.  In a students'
edition whose poll backend is still exercise 1.2's stub, poll is not run: its rows say why
(labkit.stubs), and so does a line printed before anything runs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from labkit import build, store, stubs, system, uncertainty
from labkit.errors import LabError

from .common import NAN, environment_columns, environment_line, pinning, prose, results_file, run_tool

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

BACKENDS = ("select", "poll", "epoll")


def events(descriptors=(100, 1000, 10000), active: int = 1, writes: int = 1000, runs: int = 5,
           backends=BACKENDS, save: bool = True):
    """Time per poll call and per event for each backend and descriptor count: a DataFrame.

    `status` says how each row ended: "ok"; "refused" (select beyond FD_SETSIZE: NaN
    figures, its refusal in `note`); or "failed" (NaN figures, ev_bench's message in
    `note`; the backend's other sizes are not tried)."""
    import pandas as pd

    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise LabError(f"unknown backend(s): {', '.join(unknown)}", f"choose among: {', '.join(BACKENDS)}")
    bad = [n for n in descriptors if n < active]
    if bad or active < 1:
        raise LabError(f"descriptor counts {bad} are below --active {active}",
                       "give descriptor counts at least as large as the active ones")
    system.raise_nofile(max(descriptors) + 64)  # ev_bench raises it too, up to the hard limit
    bin_dir = build.build()
    server_cpus, _, note = pinning()
    rows = []
    for backend in backends:
        program = bin_dir / f"ev_bench_{backend}"
        waits = stubs.blocking_backend(backend)
        failed = waits.sentence if waits else None  # said before anything runs; its rows carry it
        if waits:
            print(waits.sentence)
        for count in descriptors:
            row = {"backend": backend, "descriptors": count, "active": active, "writes": writes,
                   "ns_per_poll": NAN, "ns_per_poll_low": NAN, "ns_per_poll_high": NAN, "ns_per_poll_interval": "",
                   "ns_per_event": NAN, "status": "failed", "note": failed,
                   "waiting_for_exercise": waits.exercise.label if waits else ""}
            if failed is None:
                argv = [str(program), "--descriptors", str(count), "--active", str(active),
                        "--writes", str(writes), "--runs", str(runs)]
                done = run_tool(argv, server_cpus, wall_timeout=120)
                if done.returncode == 0:
                    figures = json.loads(done.stdout)
                    row.update(ns_per_poll=figures["ns_per_poll"], ns_per_event=figures["ns_per_event"],
                               status="ok", note="", **median_interval_columns(figures["ns_per_poll_runs"]))
                elif done.returncode == 3:  # the backend's own refusal (select past FD_SETSIZE)
                    row.update(status="refused", note=done.stderr.strip().splitlines()[-1])
                else:
                    failed = (f"{program.name} --descriptors {count} failed (status {done.returncode}): "
                              + " ".join(done.stderr.split())[-600:])
                    row["note"] = failed
            rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs.update(server_cpus=server_cpus, client_cpus=None, pinning_note=note)
    if save:
        env = environment_columns()
        path = results_file("events", env)
        for row in rows:
            store.append(path, {**row, "bench": "events", "server_cpus": server_cpus, "pinning_note": note, **env})
        frame.attrs["saved_to"] = str(path)
    return frame


def median_interval_columns(runs: list[float]) -> dict:
    """How sure the median time per poll call is: the interval every figure draws around a
    median of repeats (uncertainty.point_interval: 5 runs give [min, max], a 94% interval;
    one run has none), and what it is in words."""
    low, high, kind = uncertainty.point_interval(runs)
    return {"ns_per_poll_low": low, "ns_per_poll_high": high, "ns_per_poll_interval": kind}


def _status(frame) -> "pd.Series":
    """Each row's status; rows saved before there was one were measured or refused."""
    if "status" in frame:
        return frame["status"]
    return frame["ns_per_poll"].isna().map({True: "refused", False: "ok"})


def format_events(frame) -> str:
    shown = [f"{ns / 1000.0:,.2f}" if status == "ok" else status
             for ns, status in zip(frame["ns_per_poll"], _status(frame))]
    per_poll = frame.assign(shown=shown).pivot(index="descriptors", columns="backend", values="shown")
    per_poll = per_poll[[b for b in BACKENDS if b in per_poll.columns]]
    active, writes = frame["active"].iloc[0], frame["writes"].iloc[0]
    lines = [prose(environment_line(frame.attrs)), "",
             prose(f"ev_bench (libevent's bench.c): {active} active of N watched eventfds, a chain of {writes} "
                   "events per run; microseconds per poll call (median of runs):"),
             per_poll.to_string(),
             prose("select and poll pass every watched descriptor to the kernel on each call, so their cost "
                   "grows with N; epoll's follows the active ones.")]
    lines += [prose(f"note: {n}") for n in dict.fromkeys(frame["note"]) if n]
    if frame.attrs.get("saved_to"):
        lines.append(f"saved to {frame.attrs['saved_to']}")
    return "\n".join(lines)


def event_cost(bench: "pd.DataFrame") -> "go.Figure":
    """ev_bench (libevent's bench.c): microseconds per poll call against watched
    descriptors, one line per backend, log-log, each point the median of its runs with
    that median's interval as whiskers (a row saved before its runs were kept has none,
    and its hover says so); a refused size (select past FD_SETSIZE) is named in the
    subtitle instead of being drawn as zero."""
    import plotly.graph_objects as go

    from labkit.plots.grid import require
    from labkit.plots.style import TEMPLATE, color, set_title

    require(bench, ["backend", "descriptors", "ns_per_poll"])
    active = int(bench["active"].iloc[0])
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, legend_title_text="backend",
                      xaxis=dict(title="watched descriptors", type="log", dtick=1),
                      yaxis=dict(title="µs per poll call", type="log", dtick=1))
    refused, failed, waiting, kinds = [], [], {}, set()
    status = _status(bench)
    for column in ("ns_per_poll_low", "ns_per_poll_high"):
        bench = bench.assign(**{column: bench[column] if column in bench else NAN})
    interval = bench["ns_per_poll_interval"].fillna("") if "ns_per_poll_interval" in bench else ""
    bench = bench.assign(ns_per_poll_interval=interval)
    waits = bench["waiting_for_exercise"].fillna("") if "waiting_for_exercise" in bench else None
    for backend, rows in bench.groupby("backend", sort=False):
        measured = rows.dropna(subset=["ns_per_poll"]).sort_values("descriptors")
        refused += [f"{backend} at {int(n):,}" for n in rows.loc[status[rows.index] == "refused", "descriptors"]]
        exercise = waits[rows.index].iloc[0] if waits is not None else ""
        if exercise:
            waiting.setdefault(exercise, []).append(backend)
        elif (status[rows.index] == "failed").any():
            failed.append(backend)
        us, low, high = (measured[c] / 1000.0 for c in ("ns_per_poll", "ns_per_poll_low", "ns_per_poll_high"))
        said_of = [kind if hi == lo else f"{kind}: {lo:,.2f} - {hi:,.2f} µs" if kind else
                   "no interval (saved before its runs were kept)"
                   for kind, lo, hi in zip(measured["ns_per_poll_interval"], low, high)]
        kinds |= {kind for kind, lo, hi in zip(measured["ns_per_poll_interval"], low, high) if kind and hi > lo}
        fig.add_trace(go.Scatter(
            x=measured["descriptors"], y=us, mode="lines+markers", name=backend, line=dict(color=color(backend)),
            error_y=dict(type="data", symmetric=False, array=high - us, arrayminus=us - low, thickness=1.2, width=5),
            customdata=[[text] for text in said_of],
            hovertemplate=f"<b>{backend}</b><br>%{{x:,}} descriptors<br>%{{y:,.2f}} µs per poll (median)<br>"
                          "%{customdata[0]}<extra></extra>"))
    said = [f"whiskers: {'; '.join(sorted(kinds))}"] if kinds else []
    if refused:
        said.append("refused (above FD_SETSIZE): " + ", ".join(refused))
    if failed:
        said.append("failed, not drawn (see its note): " + ", ".join(failed))
    said += [f"not measurable until exercise {label}: {', '.join(names)}" for label, names in waiting.items()]
    set_title(fig, f"time per poll call vs watched descriptors ({active} active)", ["; ".join(said)] if said else [])
    return fig
