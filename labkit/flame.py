"""Where the time goes, drawn: a point's folded stacks (labkit.perf.stacks) as a flame
chart, several models side by side, and their system calls per request by name.

    flame.chart(row["server_stacks"], title="epoll")
    flame.side_by_side(df)                  # one chart per model, the median point's stacks
    flame.syscalls_table(df)                # models x system calls, per request

A flame chart is an icicle drawn upwards: the process at the bottom, each frame above the
one that called it, each as wide as the share of samples it was on the stack for.  A wide
box high up is a function that is itself expensive; a wide tower is a call path that is.
Kernel frames are orange, the program's and its libraries' blue.  A chart is titled by what
its stacks hold (perf.stacks.scope_for): "kernel and user stacks", or "user stacks only" and
why (perf_event_paranoid, kernel.kptr_restrict), so a chart without kernel frames never reads
as one whose server spent no time in the kernel.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.errors import LabError
from labkit.perf.stacks import FREQUENCY_HZ, KERNEL_AND_USER, USER_ONLY
from labkit.row import ok_rows

KERNEL, USER, ROOT = "#E76F34", "#4c78a8", "#919191"  # each 3:1 or more on white (WCAG 1.4.11)
MOST_FRAMES = 3000  # boxes drawn per chart: the narrowest beyond it are left out (too thin to see)


def _tree(stacks: dict[str, int]) -> pd.DataFrame:
    """Folded stacks -> one row per call path (id), its parent path, its frame and its samples."""
    samples: dict[str, int] = {}
    for stack, count in stacks.items():
        frames = stack.split(";")
        for depth in range(1, len(frames) + 1):
            path = ";".join(frames[:depth])
            samples[path] = samples.get(path, 0) + count
    nodes = pd.DataFrame({"id": list(samples), "samples": list(samples.values())})
    nodes["parent"] = nodes["id"].str.rpartition(";")[0]
    nodes["frame"] = nodes["id"].str.rpartition(";")[2]
    return nodes.nlargest(MOST_FRAMES, "samples") if len(nodes) > MOST_FRAMES else nodes


def _trace(stacks: dict[str, int], scope: str = "") -> go.Icicle:
    if not stacks:
        raise LabError("there are no stacks to draw", "measure with profile_stacks on (the panel's checkbox)")
    nodes = _tree(stacks)
    kept = set(nodes["id"])
    nodes = nodes[nodes["parent"].isin(kept) | (nodes["parent"] == "")]  # a box whose caller was left out goes too
    total = sum(stacks.values())
    colors = [ROOT if not parent else KERNEL if frame.endswith("_[k]") else USER
              for frame, parent in zip(nodes["frame"], nodes["parent"])]
    return go.Icicle(ids=nodes["id"], parents=nodes["parent"], values=nodes["samples"], branchvalues="total",
                     labels=nodes["frame"].str.removesuffix("_[k]"), marker=dict(colors=colors),
                     customdata=(nodes["samples"] / total * 100).round(1),
                     hovertemplate="%{label}<br>%{value} samples, %{customdata}% of the time<extra></extra>",
                     tiling=dict(orientation="v", flip="y"), textinfo="label", maxdepth=-1)


def chart(stacks: dict[str, int], title: str = "", scope: str = "") -> go.Figure:
    """One flame chart of folded `stacks`; `scope` (kernel and user, or user only) in the title."""
    fig = go.Figure(_trace(stacks, scope))
    samples = sum(stacks.values())
    fig.update_layout(title=dict(text=f"{title} ({samples:,} samples" + (f"; {scope}" if scope else "") + ")",
                                 font=dict(size=14)),
                      height=520, margin=dict(l=5, r=5, t=50, b=5))
    return fig


def _median_point(rows: pd.DataFrame) -> pd.Series:
    """The row of a model whose throughput is the median of its repeats (its stacks stand for it)."""
    ranked = rows.sort_values("throughput_rps")
    return ranked.iloc[len(ranked) // 2]


def side_by_side(df: pd.DataFrame, models=None, where: dict | None = None) -> go.Figure:
    """A flame chart per model (its median repeat at the point `where` picks, e.g. {"clients":
    1000}), side by side; models without stacks are named in the title with the reason."""
    chosen = ok_rows(df)
    for column, value in (where or {}).items():
        chosen = chosen[chosen[column] == value]
    with_stacks = chosen[chosen["server_stacks"].map(lambda s: isinstance(s, dict) and bool(s))] \
        if "server_stacks" in chosen else chosen.iloc[0:0]
    models = list(models or dict.fromkeys(chosen["model"]))
    drawn = [m for m in models if (with_stacks["model"] == m).any()]
    missing = [m for m in models if m not in drawn]
    if not drawn:
        notes = sorted({str(n) for n in chosen.get("stacks_note", pd.Series(dtype=str)) if n})
        raise LabError(f"no stacks were recorded for {', '.join(models) or 'any model'}"
                       + (f" ({'; '.join(notes)})" if notes else ""),
                       "run the sweep with profile_stacks on (the panel's checkbox), where perf may sample")
    fig = make_subplots(rows=1, cols=len(drawn), specs=[[{"type": "domain"}] * len(drawn)],
                        subplot_titles=[_subtitle(_median_point(with_stacks[with_stacks["model"] == m]))
                                        for m in drawn], horizontal_spacing=0.01)
    scopes = []
    for i, model in enumerate(drawn, start=1):
        row = _median_point(with_stacks[with_stacks["model"] == model])
        scopes.append(row.get("stacks_scope", ""))
        fig.add_trace(_trace(row["server_stacks"]), row=1, col=i)
    title, notes = title_for(scopes)
    if missing:
        notes.append(f"no stacks for {', '.join(missing)}")
    fig.update_layout(title=dict(text=title, subtitle=dict(text="<br>".join(notes))), height=600,
                      margin=dict(l=5, r=5, t=95 + 15 * len(notes), b=5))
    fig.update_annotations(yshift=8)  # the model names, above their charts
    return fig


def title_for(scopes) -> tuple[str, list[str]]:
    """The side-by-side chart's title and the lines under it, from its rows' stacks_scope
    (perf.stacks.scope_for: "what the stacks hold; the fix"): the title says what they hold,
    "kernel and user stacks" only where every chart holds them; the fix goes below."""
    scopes = list(dict.fromkeys(s for s in scopes if s))
    held = scopes[0].split("; ")[0] if len(scopes) == 1 else "stacks of different scopes" if scopes else ""
    user_only = bool(scopes) and all(s.startswith(USER_ONLY) for s in scopes)
    lines = [f"cpu-clock samples, about {FREQUENCY_HZ:,} per second of the server's CPU time; "
             + ("blue: the program (no kernel frames)" if user_only else "orange: kernel, blue: the program")]
    lines += [s.split("; ", 1)[1] for s in scopes if "; " in s] if len(scopes) == 1 else \
        [s for s in scopes if s != KERNEL_AND_USER]
    return "Where the server's time goes" + (f": {held}" if held else ""), lines


def _subtitle(row: pd.Series) -> str:
    requests = row.get("requests_ok") or 0
    per = f"<br><sup>{row['stacks_samples'] / requests * 1000:,.1f} samples per 1,000 requests</sup>" \
        if requests else ""
    return f"<b>{row['model']}</b>{per}"


def syscalls_table(df: pd.DataFrame, where: dict | None = None) -> pd.DataFrame:
    """System calls per request by name: one row per model (the median over its repeats),
    one column per call any model made; empty where perf could not count them (the
    reason is in the rows' syscalls_note)."""
    chosen = ok_rows(df)
    for column, value in (where or {}).items():
        chosen = chosen[chosen[column] == value]
    if "server_syscalls_per_request" not in chosen:
        return pd.DataFrame()
    counted = chosen[chosen["server_syscalls_per_request"].map(lambda s: isinstance(s, dict) and bool(s))]
    if counted.empty:
        return pd.DataFrame()
    wide = pd.DataFrame(list(counted["server_syscalls_per_request"]), index=counted["model"].to_numpy()).fillna(0.0)
    table = wide.groupby(level=0, sort=False).median()
    table = table[table.max().sort_values(ascending=False).index]  # the most frequent calls first
    table.index.name = "model"
    table.attrs["caption"] = "system calls per request (perf's syscall tracepoints on the server)"
    return table
